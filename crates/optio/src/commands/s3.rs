//! `optio s3`: the S3 gateway (`optio-s3`), and its users and buckets.

use std::sync::Arc;

use anyhow::{Context, Result};
use optio_s3::{Gateway, ServeConfig};

use crate::commands::client::ClusterConn;
use crate::output::Table;

/// `optio s3`: serve, or manage users and buckets.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// What `optio s3` does besides serving.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Users and their access keys.
    #[command(subcommand)]
    User(UserCommand),
    /// Buckets (clients make them too, with CreateBucket).
    #[command(subcommand)]
    Bucket(BucketCommand),
}

/// `optio s3 user`.
#[derive(clap::Subcommand, Debug)]
pub enum UserCommand {
    /// Make a user; prints its access key and secret (shown this once).
    Create(UserArgs),
    /// List users and their access keys.
    Ls(ListArgs),
    /// Remove a user (its key stops working).
    Rm(UserArgs),
    /// Give a user a new key pair (the old one stops working); prints it once.
    Rotate(UserArgs),
}

/// `optio s3 bucket`.
#[derive(clap::Subcommand, Debug)]
pub enum BucketCommand {
    /// Make a bucket, in a pool of your choice.
    Create(BucketArgs),
    /// List buckets.
    Ls(ListArgs),
    /// Remove an empty bucket.
    Rm(BucketArgs),
    /// Delete the data no object or upload names (left by a gateway that died mid-write).
    Sweep(SweepArgs),
}

/// `optio s3 bucket sweep`.
#[derive(clap::Args, Debug)]
pub struct SweepArgs {
    /// Bucket name.
    pub name: String,
    /// Keep data written more recently than this (it may belong to an upload in flight).
    #[arg(long, default_value = "1h", value_parser = crate::output::parse_duration)]
    pub older_than: std::time::Duration,
    /// Count only; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

/// A user's name.
#[derive(clap::Args, Debug)]
pub struct UserArgs {
    /// User name (letters, digits, `_.@-`).
    pub name: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

/// A bucket.
#[derive(clap::Args, Debug)]
pub struct BucketArgs {
    /// Bucket name.
    pub name: String,
    /// The pool its objects live in (default: --meta-pool).
    #[arg(long)]
    pub pool: Option<String>,
    /// The user who owns it, alone allowed to use it (default: every user may).
    #[arg(long, value_name = "USER")]
    pub owner: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

/// A listing.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

/// Where the gateway keeps its users and buckets.
#[derive(clap::Args, Debug, Clone)]
pub struct GatewayArgs {
    /// The pool holding users and bucket records, and new buckets' objects by default.
    #[arg(long, default_value = "data", value_name = "POOL")]
    pub meta_pool: String,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// Serving.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to serve S3 on.
    #[arg(long, default_value = "127.0.0.1:9000", value_name = "ADDR")]
    pub listen: String,
    #[command(flatten)]
    pub scheduling: crate::commands::SchedulingArgs,
    /// The region the buckets are in (GetBucketLocation, HeadBucket's x-amz-bucket-region).
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// A domain for virtual-hosted–style requests (`BUCKET.DOMAIN`); path style always works.
    #[arg(long = "domain", value_name = "DOMAIN")]
    pub domains: Vec<String>,
    /// Serve HTTPS with this certificate chain (PEM; with --https-key). S3 clients then use
    /// https:// (and --ca-bundle or their system's trust for a private CA).
    #[arg(long, value_name = "FILE", requires = "https_key")]
    pub https_cert: Option<std::path::PathBuf>,
    /// The HTTPS certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "https_cert")]
    pub https_key: Option<std::path::PathBuf>,
    /// Longest time a client may take to send a request's headers, counted from the
    /// connection's opening (its TLS handshake included) or from the first byte of the request
    /// (e.g. 10s, 500ms); the connection is closed after it.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_timeout)]
    pub header_timeout: std::time::Duration,
    /// Longest time a request's body may send nothing, or a client read nothing of an answer
    /// (e.g. 30s); the request fails and the connection is closed.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_timeout)]
    pub body_timeout: std::time::Duration,
    /// Longest time a connection may stay open with no request in flight (e.g. 60s).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_timeout)]
    pub idle_timeout: std::time::Duration,
    /// Most client connections open at once (default: half the soft limit on open files,
    /// `ulimit -n`, from 64 to 4096). At the limit, a new connection makes the gateway close
    /// the connection idle the longest; if every connection has a request in flight, the new
    /// one is closed at once.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Longest time a body read before its signature can be checked may take to arrive whole
    /// (a body sent chunked with no length, `curl -T -`, or a browser form's fields); it gets
    /// 400 RequestTimeout after it, and its memory goes back to the gateway's budget.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_timeout)]
    pub buffered_body_timeout: std::time::Duration,
    /// Take requests signed with AWS Signature Version 2, for old clients: dated within 15
    /// minutes of the gateway's clock, presigned URLs valid at most 7 days ahead, signatures
    /// compared in constant time. Without it they get 403 AccessDenied.
    #[arg(long)]
    pub allow_sigv2: bool,
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

/// A positive duration.
fn parse_timeout(text: &str) -> Result<std::time::Duration, String> {
    let duration = crate::output::parse_duration(text)?;
    if duration.is_zero() {
        return Err("zero; give a positive duration (e.g. 10s)".into());
    }
    Ok(duration)
}

/// The most verbose level s3s may log at, whatever `OPTIO_LOG` says: its debug lines carry
/// signatures — the one it computed from the secret on a mismatch, which a reader of the log
/// could replay, and the request with its `Authorization` header or presigned URL.
const S3S_LOG_CAP: &[(&str, tracing::Level)] = &[("s3s", tracing::Level::INFO)];
/// s3s logs two lines at ERROR for every request it refuses (a bad signature, an invalid
/// bucket name): at most this many of its events a second reach the log, so that refused
/// requests cannot fill the disk (issue 36, item 10); the gateway's metrics count every
/// refusal.
const S3S_LOG_RATE: &[(&str, u32)] = &[("s3s", 20)];

async fn gateway(args: &GatewayArgs) -> Result<Arc<Gateway>> {
    let client = args.cluster.connect().await?;
    Ok(Arc::new(Gateway::new(client, &args.meta_pool)?))
}

/// Runs `optio s3`.
pub fn run(args: Args) -> Result<()> {
    if args.command.is_none() {
        // Before any thread starts: they inherit it.
        crate::commands::schedule_daemon(args.serve.scheduling);
    }
    crate::commands::runtime()?.block_on(async move {
        match args.command {
            None => serve(args.serve).await,
            Some(Command::User(command)) => user(command).await,
            Some(Command::Bucket(command)) => bucket(command).await,
        }
    })
}

async fn serve(args: ServeArgs) -> Result<()> {
    // Requests that fail for want of the cluster (answered 503 or 500) are logged at warn.
    crate::commands::init_logging_capped("warn", S3S_LOG_CAP, S3S_LOG_RATE);
    let max_connections =
        args.max_connections.unwrap_or_else(optio_s3::conn::default_max_connections);
    if !(1..=optio_s3::conn::CONNECTIONS_MAX).contains(&max_connections) {
        anyhow::bail!(
            "--max-connections {max_connections} is out of range (1 to {})",
            optio_s3::conn::CONNECTIONS_MAX
        );
    }
    let limits = optio_s3::conn::Limits {
        header_timeout: args.header_timeout,
        body_timeout: args.body_timeout,
        idle_timeout: args.idle_timeout,
        max_connections,
    };
    let tls = match (&args.https_cert, &args.https_key) {
        (Some(cert), Some(key)) => {
            optio_tls::install_crypto_provider();
            let config = optio_tls::server_config(cert, key, None)
                .map_err(|e| anyhow::anyhow!("--https-cert/--https-key: {e}"))?;
            Some(Arc::new(config))
        }
        _ => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let gateway = gateway(&args.gateway).await?;
    let listener = tokio::net::TcpListener::bind(&args.listen).await.with_context(|| {
        format!(
            "cannot listen on {} (another server there? pick another with --listen)",
            args.listen
        )
    })?;
    let local = listener.local_addr()?;
    println!(
        "serving S3 on {scheme}://{local} (region {}); metrics at {scheme}://{local}{}",
        args.region,
        optio_s3::METRICS_PATH
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let config = ServeConfig {
        region: args.region,
        domains: args.domains,
        tls,
        limits,
        buffered_body_timeout: args.buffered_body_timeout,
        allow_sigv2: args.allow_sigv2,
    };
    let metrics = Arc::new(optio_s3::Metrics::default());
    let stop = async {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("a SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
    };
    optio_s3::serve(gateway, listener, config, metrics, stop).await?;
    Ok(())
}

/// A new key pair as `optio s3 user create|rotate --json` and the console answer it (the
/// secret shown this once).
pub(crate) fn pair_json(pair: &optio_s3::store::KeyPair) -> serde_json::Value {
    serde_json::to_value(pair).expect("a key pair serialises")
}

/// A bucket as `optio s3 bucket ls|create --json` and the console show it.
pub(crate) fn bucket_json(bucket: &optio_s3::store::Bucket) -> serde_json::Value {
    serde_json::json!({ "bucket": bucket.name, "pool": bucket.pool, "owner": bucket.owner })
}

/// A user or bucket removed, as `optio s3 user|bucket rm --json` and the console answer it.
pub(crate) fn removed_json(name: &str) -> serde_json::Value {
    serde_json::json!({ "removed": name })
}

/// Every bucket's record, in name order (`optio s3 bucket ls` and the console).
pub(crate) async fn bucket_records(gateway: &Gateway) -> Result<Vec<optio_s3::store::Bucket>> {
    let mut rows = Vec::new();
    for (name, _) in gateway.buckets().await? {
        rows.push(gateway.bucket(&name).await?);
    }
    Ok(rows)
}

fn print_pair(name: &str, pair: &optio_s3::store::KeyPair, json: bool) {
    if json {
        println!("{}", pair_json(pair));
    } else {
        println!("user:       {name}");
        println!("access key: {}", pair.access_key);
        println!("secret key: {}", pair.secret_key);
        println!("(the secret is shown this once; `optio s3 user rotate {name}` makes a new pair)");
    }
}

async fn user(command: UserCommand) -> Result<()> {
    match command {
        UserCommand::Create(args) => {
            let pair = gateway(&args.gateway).await?.create_user(&args.name).await?;
            print_pair(&args.name, &pair, args.json);
        }
        UserCommand::Rotate(args) => {
            let pair = gateway(&args.gateway).await?.rotate_user(&args.name).await?;
            print_pair(&args.name, &pair, args.json);
        }
        UserCommand::Rm(args) => {
            gateway(&args.gateway).await?.remove_user(&args.name).await?;
            if args.json {
                println!("{}", removed_json(&args.name));
            } else {
                println!("removed user {}", args.name);
            }
        }
        UserCommand::Ls(args) => {
            let users = gateway(&args.gateway).await?.users().await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&users)?);
            } else {
                let mut table = Table::new(&["user", "access key"]).left(&[0, 1]);
                for user in users {
                    table.row(vec![user.name, user.access_key]);
                }
                print!("{}", table.render());
            }
        }
    }
    Ok(())
}

async fn bucket(command: BucketCommand) -> Result<()> {
    match command {
        BucketCommand::Create(args) => {
            let bucket = gateway(&args.gateway)
                .await?
                .create_bucket(&args.name, args.pool.as_deref(), args.owner.as_deref())
                .await?;
            if args.json {
                println!("{}", bucket_json(&bucket));
            } else {
                println!("created bucket {} in pool {}", bucket.name, bucket.pool);
            }
        }
        BucketCommand::Rm(args) => {
            gateway(&args.gateway).await?.delete_bucket(&args.name).await?;
            if args.json {
                println!("{}", removed_json(&args.name));
            } else {
                println!("removed bucket {}", args.name);
            }
        }
        BucketCommand::Sweep(args) => {
            let gateway = gateway(&args.gateway).await?;
            let bucket = gateway.bucket(&args.name).await?;
            let report = gateway.sweep(&bucket, args.older_than, args.dry_run).await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                let verb = if args.dry_run { "would delete" } else { "deleted" };
                println!(
                    "{verb} {} unnamed stripes ({} data objects, {}); kept {} recent data objects; {} data objects in all",
                    report.stripes_deleted,
                    report.objects_deleted,
                    crate::output::bytes(report.bytes_freed as f64),
                    report.young_kept,
                    report.data_objects
                );
            }
        }
        BucketCommand::Ls(args) => {
            let rows = bucket_records(&*gateway(&args.gateway).await?).await?;
            if args.json {
                let rows: Vec<_> = rows.iter().map(bucket_json).collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                let mut table = Table::new(&["bucket", "pool", "owner"]).left(&[0, 1, 2]);
                for bucket in rows {
                    let owner = bucket.owner.unwrap_or_else(|| "(every user)".into());
                    table.row(vec![bucket.name, bucket.pool, owner]);
                }
                print!("{}", table.render());
            }
        }
    }
    Ok(())
}
