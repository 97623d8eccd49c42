//! `optio bench s3`: the S3 gateway against Optio's own client on the same cluster, in one
//! run — PUT and GET throughput with several requests in flight, alternating rounds, best of
//! each — and, with `--list-keys N`, how fast a bucket of N keys is listed.
//!
//! S3 requests are signed (SigV4, presigned URLs from `rusty-s3`) and sent with `reqwest`, one
//! connection pool shared by the workers, as a typical S3 client does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use serde::Serialize;

use super::payload;
use super::workload::{Phase, for_each_key, phase, read_all, run_id, write_all};
use crate::commands::client::ClusterArgs;
use crate::output::{self, parse_size};

/// `optio bench s3`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The gateway (`optio s3 --listen`).
    #[arg(long, default_value = "http://127.0.0.1:9000")]
    pub endpoint: String,
    /// An access key (`optio s3 user create`).
    #[arg(long, env = "OPTIO_S3_ACCESS_KEY")]
    pub access_key: String,
    /// Its secret.
    #[arg(long, env = "OPTIO_S3_SECRET_KEY", hide_env_values = true)]
    pub secret_key: String,
    /// The bucket to use (made if missing).
    #[arg(long, default_value = "bench")]
    pub bucket: String,
    /// Objects per round.
    #[arg(long, default_value_t = 64)]
    pub objects: usize,
    /// Object size.
    #[arg(long, default_value = "4MiB")]
    pub size: String,
    /// Requests in flight, for both.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Rounds (native and S3 alternate; the best of each is kept).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Instead: fill the bucket with this many empty objects (if it holds fewer) and time a
    /// full ListObjectsV2 of it, 1,000 keys per page.
    #[arg(long, value_name = "N")]
    pub list_keys: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// The comparison.
#[derive(Debug, Serialize)]
struct Report {
    objects: usize,
    size_bytes: usize,
    concurrency: usize,
    rounds: usize,
    native_write: Throughput,
    native_read: Throughput,
    s3_put: Throughput,
    s3_get: Throughput,
    put_ratio: f64,
    get_ratio: f64,
}

/// What a phase measured that both sides have (the gateway's probes and cache are its own,
/// out of this benchmark's sight).
#[derive(Debug, Serialize)]
struct Throughput {
    operations: usize,
    seconds: f64,
    mb_per_s: f64,
    ops_per_s: f64,
    latency_us_p50: u64,
    latency_us_p99: u64,
}

impl From<Phase> for Throughput {
    fn from(p: Phase) -> Throughput {
        Throughput {
            operations: p.operations,
            seconds: p.seconds,
            mb_per_s: p.mb_per_s,
            ops_per_s: p.operations as f64 / p.seconds.max(1e-9),
            latency_us_p50: p.latency_us_p50,
            latency_us_p99: p.latency_us_p99,
        }
    }
}

struct S3 {
    http: reqwest::Client,
    bucket: Bucket,
    credentials: Credentials,
}

const SIGNED_FOR: Duration = Duration::from_secs(3600);

impl S3 {
    fn new(args: &Args) -> Result<S3> {
        let endpoint = args.endpoint.parse().context("--endpoint is not a URL")?;
        let bucket = Bucket::new(endpoint, UrlStyle::Path, args.bucket.clone(), "us-east-1")
            .context("bad --endpoint or --bucket")?;
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(args.concurrency.max(1) * 2)
            .build()
            .context("cannot make an HTTP client")?;
        let credentials = Credentials::new(args.access_key.clone(), args.secret_key.clone());
        Ok(S3 { http, bucket, credentials })
    }

    async fn check(response: reqwest::Response, what: &str) -> Result<reqwest::Response> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        bail!("{what}: HTTP {status}: {body}")
    }

    async fn make_bucket(&self) -> Result<()> {
        let url = self.bucket.create_bucket(&self.credentials).sign(SIGNED_FOR);
        let response = self.http.put(url).send().await.context("CreateBucket")?;
        if response.status().is_success() || response.status() == reqwest::StatusCode::CONFLICT {
            return Ok(());
        }
        Self::check(response, "CreateBucket").await.map(|_| ())
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        let url = self.bucket.put_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        let response = self.http.put(url).body(data).send().await.context("PutObject")?;
        Self::check(response, "PutObject").await.map(|_| ())
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        let url = self.bucket.get_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        let response = self.http.get(url).send().await.context("GetObject")?;
        let response = Self::check(response, "GetObject").await?;
        response.bytes().await.context("GetObject body")
    }

    /// One page of a listing: keys and the next token.
    async fn list_page(&self, token: Option<&str>) -> Result<(usize, Option<String>)> {
        let mut action = self.bucket.list_objects_v2(Some(&self.credentials));
        action.with_max_keys(1000);
        if let Some(token) = token {
            action.with_continuation_token(token.to_string());
        }
        let url = action.sign(SIGNED_FOR);
        let response = self.http.get(url).send().await.context("ListObjectsV2")?;
        let text = Self::check(response, "ListObjectsV2").await?.text().await?;
        let parsed = rusty_s3::actions::ListObjectsV2::parse_response(&text)
            .map_err(|e| anyhow::anyhow!("a listing that does not parse: {e}"))?;
        Ok((parsed.contents.len(), parsed.next_continuation_token))
    }
}

async fn s3_phase(
    s3: &Arc<S3>,
    keys: &Arc<Vec<String>>,
    data: Option<Bytes>,
    size: usize,
    concurrency: usize,
    visible: bool,
) -> Result<Phase> {
    let bar = output::progress(
        keys.len() as u64,
        if data.is_some() { "S3 PUT" } else { "S3 GET" },
        visible,
    );
    let started = Instant::now();
    let (s3_, keys_) = (s3.clone(), keys.clone());
    let done = for_each_key(keys.len(), concurrency, &bar, move |i| {
        let (s3, keys, data) = (s3_.clone(), keys_.clone(), data.clone());
        async move {
            match data {
                Some(data) => s3.put(&keys[i], data).await,
                None => {
                    let got = s3.get(&keys[i]).await?;
                    if got.len() != size {
                        bail!("{} read back {} bytes, {size} written", keys[i], got.len());
                    }
                    Ok(())
                }
            }
        }
    })
    .await?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let mut latencies: Vec<u64> = done.into_iter().map(|(_, micros, ())| micros).collect();
    // (No client stats: the S3 side is measured from outside; Throughput drops those fields.)
    let stats = optio_client::ClientStats::default();
    Ok(phase(&mut latencies, (size * keys.len()) as u64, seconds, stats, stats))
}

fn best(a: Option<Phase>, b: Phase) -> Option<Phase> {
    match a {
        Some(a) if a.mb_per_s >= b.mb_per_s => Some(a),
        _ => Some(b),
    }
}

/// Runs `optio bench s3`.
pub fn run(args: Args) -> Result<()> {
    crate::commands::init_logging("warn");
    crate::commands::runtime()?.block_on(async {
        let s3 = Arc::new(S3::new(&args)?);
        s3.make_bucket().await?;
        match args.list_keys {
            Some(n) => list(&args, &s3, n).await,
            None => compare(&args, &s3).await,
        }
    })
}

async fn compare(args: &Args, s3: &Arc<S3>) -> Result<()> {
    let size = parse_size(&args.size).map_err(anyhow::Error::msg)? as usize;
    if args.objects == 0 || args.rounds == 0 {
        bail!("--objects and --rounds must be at least 1");
    }
    let client = args.cluster.connect().await?;
    let pool = &args.cluster.pool;
    let data = payload(size, 7);
    let visible = !args.json;
    let (mut nw, mut nr, mut sp, mut sg) = (None, None, None, None);
    for round in 0..args.rounds {
        let id = format!("{}-{round}", run_id());
        let native: Vec<String> = (0..args.objects).map(|i| format!("bench/{id}/{i}")).collect();
        let bar = output::progress(args.objects as u64, "native write", visible);
        let (write, _) =
            write_all(&client, pool, &native, data.clone(), args.concurrency, &bar).await?;
        bar.finish_and_clear();
        let keys: Arc<Vec<String>> =
            Arc::new((0..args.objects).map(|i| format!("s3bench/{id}/{i}")).collect());
        let put = s3_phase(s3, &keys, Some(data.clone()), size, args.concurrency, visible).await?;
        let bar = output::progress(args.objects as u64, "native read", visible);
        let read = read_all(&client, pool, &native, size, args.concurrency, &bar).await?;
        bar.finish_and_clear();
        let get = s3_phase(s3, &keys, None, size, args.concurrency, visible).await?;
        (nw, nr, sp, sg) = (best(nw, write), best(nr, read), best(sp, put), best(sg, get));
    }
    let (native_write, native_read, s3_put, s3_get) =
        (nw.expect("a round"), nr.expect("a round"), sp.expect("a round"), sg.expect("a round"));
    let report = Report {
        objects: args.objects,
        size_bytes: size,
        concurrency: args.concurrency,
        rounds: args.rounds,
        put_ratio: s3_put.mb_per_s / native_write.mb_per_s.max(1e-9),
        get_ratio: s3_get.mb_per_s / native_read.mb_per_s.max(1e-9),
        native_write: native_write.into(),
        native_read: native_read.into(),
        s3_put: s3_put.into(),
        s3_get: s3_get.into(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{} objects of {}, {} in flight, best of {} rounds\n",
        report.objects,
        output::bytes(size as f64),
        report.concurrency,
        report.rounds
    );
    let mut table =
        output::Table::new(&["", "MB/s", "ops/s", "p50 µs", "p99 µs", "S3 ÷ native"]).left(&[0]);
    for (name, p, ratio) in [
        ("optio put", &report.native_write, None),
        ("S3 PUT", &report.s3_put, Some(report.put_ratio)),
        ("optio get", &report.native_read, None),
        ("S3 GET", &report.s3_get, Some(report.get_ratio)),
    ] {
        table.row(vec![
            name.into(),
            format!("{:.1}", p.mb_per_s),
            format!("{:.0}", p.ops_per_s),
            p.latency_us_p50.to_string(),
            p.latency_us_p99.to_string(),
            ratio.map(|r| format!("{r:.2}")).unwrap_or_default(),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}

async fn list(args: &Args, s3: &Arc<S3>, n: usize) -> Result<()> {
    // Count what is there, then fill up to n.
    let mut have = 0usize;
    let mut token: Option<String> = None;
    loop {
        let (count, next) = s3.list_page(token.as_deref()).await?;
        have += count;
        match next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    if have < n {
        let keys: Arc<Vec<String>> =
            Arc::new((have..n).map(|i| format!("list/{:03}/{i:09}", i % 1000)).collect());
        let fill = s3_phase(s3, &keys, Some(Bytes::new()), 0, args.concurrency.max(16), !args.json)
            .await?;
        if !args.json {
            println!(
                "filled {} keys at {:.0} PUTs/s",
                keys.len(),
                fill.operations as f64 / fill.seconds.max(1e-9)
            );
        }
    }
    let started = Instant::now();
    let mut listed = 0usize;
    let mut pages = 0usize;
    let mut token: Option<String> = None;
    loop {
        let (count, next) = s3.list_page(token.as_deref()).await?;
        listed += count;
        pages += 1;
        match next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let rate = listed as f64 / seconds.max(1e-9);
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "keys": listed, "pages": pages, "seconds": seconds, "keys_per_second": rate })
        );
    } else {
        println!("listed {listed} keys in {pages} pages in {seconds:.2} s: {rate:.0} keys/s");
    }
    Ok(())
}
