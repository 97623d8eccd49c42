//! What every bench shares: keys written or read by concurrent workers, and each phase's
//! throughput, latencies and the client's probes and cache hits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use optio_client::Client;
use serde::Serialize;

/// Timings of one phase.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Phase {
    /// Operations.
    pub operations: usize,
    /// Bytes moved.
    pub bytes: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Throughput, MB/s (10^6 bytes).
    pub mb_per_s: f64,
    /// Median latency, µs.
    pub latency_us_p50: u64,
    /// 99th percentile latency, µs.
    pub latency_us_p99: u64,
    /// Mean latency, µs.
    pub latency_us_mean: u64,
    /// Probes sent per operation.
    pub probes_per_op: f64,
    /// Share of choice lookups the cache answered.
    pub cache_hit_rate: f64,
}

pub(crate) fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub(super) fn phase(
    latencies: &mut [u64],
    bytes: u64,
    seconds: f64,
    before: optio_client::ClientStats,
    after: optio_client::ClientStats,
) -> Phase {
    latencies.sort_unstable();
    let n = latencies.len().max(1);
    let lookups =
        (after.cache_hits - before.cache_hits) + (after.cache_misses - before.cache_misses);
    Phase {
        operations: latencies.len(),
        bytes,
        seconds,
        mb_per_s: bytes as f64 / seconds.max(1e-9) / 1e6,
        latency_us_p50: percentile(latencies, 50.0),
        latency_us_p99: percentile(latencies, 99.0),
        latency_us_mean: latencies.iter().sum::<u64>() / n as u64,
        probes_per_op: (after.probes - before.probes) as f64 / n as f64,
        cache_hit_rate: if lookups == 0 {
            0.0
        } else {
            (after.cache_hits - before.cache_hits) as f64 / lookups as f64
        },
    }
}

/// Runs `op` on every index below `count` with `concurrency` workers, ticking `bar`; returns,
/// per index done, the index, the microseconds `op` took and what it returned.
pub(super) async fn for_each_key<T, F, Fut>(
    count: usize,
    concurrency: usize,
    bar: &indicatif::ProgressBar,
    op: F,
) -> Result<Vec<(usize, u64, T)>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<T>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (next, bar, op) = (next.clone(), bar.clone(), op.clone());
        workers.spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, anyhow::Error>(out);
                }
                let t = Instant::now();
                let value = op(i).await?;
                out.push((i, t.elapsed().as_micros() as u64, value));
                bar.inc(1);
            }
        });
    }
    let mut done = Vec::new();
    while let Some(result) = workers.join_next().await {
        done.extend(result.context("a bench worker failed")??);
    }
    Ok(done)
}

/// Writes `keys` concurrently; returns the phase and the candidate each went to.
pub async fn write_all(
    client: &Client,
    pool: &str,
    keys: &[String],
    data: Bytes,
    concurrency: usize,
    bar: &indicatif::ProgressBar,
) -> Result<(Phase, Vec<u8>)> {
    let before = client.stats();
    let started = Instant::now();
    let (client_, keys_, data_, pool_) =
        (client.clone(), Arc::new(keys.to_vec()), data.clone(), Arc::<str>::from(pool));
    let done = for_each_key(keys.len(), concurrency, bar, move |i| {
        let (client, keys, data, pool) =
            (client_.clone(), keys_.clone(), data_.clone(), pool_.clone());
        async move {
            let report = client
                .put(&pool, &keys[i], data)
                .await
                .with_context(|| format!("writing {}", keys[i]))?;
            Ok(report.candidate)
        }
    })
    .await?;
    let mut latencies = Vec::with_capacity(done.len());
    let mut candidates = vec![0u8; keys.len()];
    for (i, micros, candidate) in done {
        latencies.push(micros);
        candidates[i] = candidate;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok((
        phase(
            &mut latencies,
            data.len() as u64 * keys.len() as u64,
            seconds,
            before,
            client.stats(),
        ),
        candidates,
    ))
}

/// Reads `keys` concurrently, checking each is `expected_len` bytes: in the pieces each
/// arrives in, checksum verified ([`Client::get_chunks`], what `optio get` and the S3
/// gateway read with), not gathered into one buffer.
pub async fn read_all(
    client: &Client,
    pool: &str,
    keys: &[String],
    expected_len: usize,
    concurrency: usize,
    bar: &indicatif::ProgressBar,
) -> Result<Phase> {
    each_key(client, pool, keys, KeyOp::Read { expected_len }, concurrency, bar).await
}

/// What a phase does to every key ([`each_key`]).
#[derive(Clone, Copy, Debug)]
pub enum KeyOp {
    /// Reads the object, which must be `expected_len` bytes ([`read_all`]).
    Read { expected_len: usize },
    /// Where the object lives and what is stored (a HEAD of one replica; `optio stat`).
    Stat,
    /// Removes the object (tombstones on every replica; `optio rm`).
    Delete,
}

/// Runs `op` on every one of `keys` concurrently.
pub async fn each_key(
    client: &Client,
    pool: &str,
    keys: &[String],
    op: KeyOp,
    concurrency: usize,
    bar: &indicatif::ProgressBar,
) -> Result<Phase> {
    let before = client.stats();
    let started = Instant::now();
    let (client_, keys_, pool_) = (client.clone(), Arc::new(keys.to_vec()), Arc::<str>::from(pool));
    let done = for_each_key(keys.len(), concurrency, bar, move |i| {
        let (client, keys, pool) = (client_.clone(), keys_.clone(), pool_.clone());
        async move {
            let key = &keys[i];
            match op {
                KeyOp::Read { expected_len } => {
                    let (_, data) = client
                        .get_chunks(&pool, key, None)
                        .await
                        .with_context(|| format!("reading {key}"))?;
                    if data.len() != expected_len {
                        bail!("{key} read back {} bytes, {expected_len} written", data.len());
                    }
                    Ok(())
                }
                KeyOp::Stat => client
                    .stat(&pool, key)
                    .await
                    .map(drop)
                    .with_context(|| format!("stat of {key}")),
                KeyOp::Delete => {
                    client.delete(&pool, key).await.with_context(|| format!("removing {key}"))
                }
            }
        }
    })
    .await?;
    let mut latencies: Vec<u64> = done.into_iter().map(|(_, micros, ())| micros).collect();
    let seconds = started.elapsed().as_secs_f64();
    let bytes = match op {
        KeyOp::Read { expected_len } => expected_len as u64 * keys.len() as u64,
        KeyOp::Stat | KeyOp::Delete => 0,
    };
    Ok(phase(&mut latencies, bytes, seconds, before, client.stats()))
}

/// A short id for one run of a bench (its keys' prefix).
pub(super) fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}", (nanos as u64) ^ u64::from(std::process::id()))
}
