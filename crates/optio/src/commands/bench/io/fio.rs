//! fio jobs against `optio nbd` (its `nbd` engine, over the server's Unix socket), and what
//! fio reports, from its JSON output.

use std::fmt::Write as _;

use anyhow::{Context, Result, bail};
use serde::Serialize;

/// One fio job section: `numjobs` threads on one volume.
#[derive(Clone, Debug, Default)]
pub struct Job {
    /// The section's name.
    pub name: String,
    /// The volume (the NBD export).
    pub volume: String,
    /// `read`, `write`, `randread`, `randwrite`, or fio's `write:HOLE` (a hole after each I/O).
    pub rw: String,
    /// Bytes per I/O.
    pub block_bytes: u64,
    /// Bytes each thread covers.
    pub size_bytes: u64,
    /// Where the first thread starts.
    pub offset_bytes: u64,
    /// Threads.
    pub numjobs: u32,
    /// I/Os in flight per thread.
    pub iodepth: u32,
    /// Run this long (random jobs), seconds; `None`: until `size_bytes` is done.
    pub runtime_seconds: Option<u64>,
    /// Each thread's rate limit, bytes per second (fio's `rate`).
    pub rate_bytes_per_sec: Option<u64>,
    /// Reads' share of a mixed job (`rw`/`randrw`), percent (fio's `rwmixread`).
    pub rwmix_read_percent: Option<u32>,
    /// Go over `size_bytes` this many times (fio's `loops`).
    pub loops: Option<u32>,
    /// Stop after this many bytes (fio's `io_size`; a random job's amount, apart from its
    /// region `size_bytes`).
    pub io_limit_bytes: Option<u64>,
    /// Log the bandwidth every [`BANDWIDTH_LOG_MS`] to files named after this path (fio's
    /// `write_bw_log`; read them with [`bandwidth_log`]).
    pub bandwidth_log: Option<std::path::PathBuf>,
}

/// The bandwidth log's averaging window, ms.
pub const BANDWIDTH_LOG_MS: u64 = 250;

/// A job file for `jobs` through the NBD server at `socket`, one group (fio sums the jobs'
/// bandwidth and merges their latency distributions).
pub fn job_file(jobs: &[Job], socket: &std::path::Path) -> String {
    let mut out = String::from("[global]\nioengine=nbd\ngroup_reporting=1\nthread=1\n");
    // Incompressible, and never all zeros (a volume skips writing zeros).
    out.push_str("refill_buffers=1\nrandrepeat=0\nnorandommap=1\n");
    for job in jobs {
        let _ = writeln!(out, "\n[{}]", job.name);
        let _ = writeln!(out, "uri=nbd+unix:///{}?socket={}", job.volume, socket.display());
        let _ = writeln!(out, "rw={}\nbs={}", job.rw, job.block_bytes);
        let _ = writeln!(out, "size={}\noffset={}", job.size_bytes, job.offset_bytes);
        let _ = writeln!(out, "numjobs={}\niodepth={}", job.numjobs, job.iodepth);
        if job.numjobs > 1 {
            let _ = writeln!(out, "offset_increment={}", job.size_bytes);
        }
        if let Some(seconds) = job.runtime_seconds {
            let _ = writeln!(out, "time_based=1\nruntime={seconds}");
        }
        if let Some(rate) = job.rate_bytes_per_sec {
            let _ = writeln!(out, "rate={rate}");
        }
        if let Some(percent) = job.rwmix_read_percent {
            let _ = writeln!(out, "rwmixread={percent}");
        }
        if let Some(loops) = job.loops {
            let _ = writeln!(out, "loops={loops}");
        }
        if let Some(bytes) = job.io_limit_bytes {
            let _ = writeln!(out, "io_size={bytes}");
        }
        if let Some(path) = &job.bandwidth_log {
            let _ =
                writeln!(out, "write_bw_log={}\nlog_avg_msec={BANDWIDTH_LOG_MS}", path.display());
        }
    }
    out
}

/// The bandwidth over time that jobs logged to files named after `path` (fio appends
/// `_bw.N.log` for each thread N): (seconds since fio started, MB/s summed over the threads
/// and directions), one point per [`BANDWIDTH_LOG_MS`].
pub fn bandwidth_log(path: &std::path::Path) -> Result<Vec<(f64, f64)>> {
    let dir = path.parent().context("a bandwidth log's path names a directory")?;
    let stem = path
        .file_name()
        .and_then(|n| n.to_str())
        .context("a bandwidth log's path ends in a file name")?;
    let prefix = format!("{stem}_bw.");
    // Window → bytes per second, summed over the files and directions.
    let mut windows: std::collections::BTreeMap<u64, f64> = Default::default();
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&prefix) || !name.ends_with(".log") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path())
            .with_context(|| format!("cannot read fio's log {name}"))?;
        for (number, line) in text.lines().enumerate() {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let parsed = match fields.as_slice() {
                [time, value, ..] => time.parse::<u64>().ok().zip(value.parse::<f64>().ok()),
                _ => None,
            };
            let (time_ms, kib_per_s) = parsed.with_context(|| {
                format!("fio's log {name}:{}: not `time, bandwidth, …`: {line}", number + 1)
            })?;
            // An entry averages the window that ends at its time.
            let window = time_ms.saturating_sub(1) / BANDWIDTH_LOG_MS;
            *windows.entry(window).or_default() += kib_per_s * 1024.0;
        }
    }
    Ok(windows
        .into_iter()
        .map(|(window, bytes_per_s)| {
            (((window + 1) * BANDWIDTH_LOG_MS) as f64 / 1000.0, bytes_per_s / 1e6)
        })
        .collect())
}

/// One direction of a fio group's results.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Side {
    /// Bytes moved.
    pub io_bytes: u64,
    /// I/Os.
    pub ios: u64,
    /// Bandwidth, MB/s (10^6 bytes).
    pub mb_per_s: f64,
    /// Mean latency of an I/O, ms (submission to completion).
    pub latency_ms_mean: f64,
    /// Median completion latency, ms.
    pub latency_ms_p50: f64,
    /// 99th percentile completion latency, ms.
    pub latency_ms_p99: f64,
}

/// fio's results for a group.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Outcome {
    /// Reads.
    pub read: Side,
    /// Writes.
    pub write: Side,
    /// fio's run time, seconds.
    pub seconds: f64,
}

fn side(value: &serde_json::Value) -> Side {
    let number = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let percentile = |p: &str| number(&value["clat_ns"]["percentile"][p]) / 1e6;
    Side {
        io_bytes: value["io_bytes"].as_u64().unwrap_or(0),
        ios: value["total_ios"].as_u64().unwrap_or(0),
        mb_per_s: number(&value["bw_bytes"]) / 1e6,
        latency_ms_mean: number(&value["lat_ns"]["mean"]) / 1e6,
        latency_ms_p50: percentile("50.000000"),
        latency_ms_p99: percentile("99.000000"),
    }
}

/// Reads fio's `--output-format=json` (its first group).
pub fn parse(text: &str) -> Result<Outcome> {
    // fio may print warnings before the JSON.
    let start = text.find('{').context("fio printed no JSON")?;
    let value: serde_json::Value =
        serde_json::from_str(&text[start..]).context("fio's JSON output does not parse")?;
    let Some(group) = value["jobs"].as_array().and_then(|jobs| jobs.first()) else {
        bail!("fio's output has no jobs");
    };
    if group["error"].as_i64().unwrap_or(0) != 0 {
        bail!("fio's job failed with error {}", group["error"]);
    }
    Ok(Outcome {
        read: side(&group["read"]),
        write: side(&group["write"]),
        seconds: group["job_runtime"].as_f64().unwrap_or(0.0) / 1e3,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_file_names_the_socket_and_splits_threads() {
        let job = Job {
            name: "v1".into(),
            volume: "vol1".into(),
            rw: "read".into(),
            block_bytes: 4 << 20,
            size_bytes: 8 << 20,
            offset_bytes: 0,
            numjobs: 2,
            iodepth: 1,
            runtime_seconds: None,
            rate_bytes_per_sec: Some(1 << 20),
            ..Job::default()
        };
        let text = job_file(&[job], std::path::Path::new("/tmp/x.sock"));
        assert!(text.contains("rate=1048576\n"));
        assert!(!text.contains("loops="));
        assert!(text.contains("uri=nbd+unix:///vol1?socket=/tmp/x.sock"));
        assert!(text.contains("offset_increment=8388608"));
        assert!(text.contains("group_reporting=1"));
    }

    #[test]
    fn results_parse_from_fio_json() {
        let text = r#"note: a warning
{"jobs":[{"error":0,"job_runtime":2000,
 "read":{"io_bytes":8388608,"total_ios":2,"bw_bytes":4194304,
   "lat_ns":{"mean":5.0e8},"clat_ns":{"percentile":{"50.000000":4.0e8,"99.000000":6.0e8}}},
 "write":{"io_bytes":0,"total_ios":0,"bw_bytes":0,"lat_ns":{"mean":0}}}]}"#;
        let outcome = parse(text).expect("parses");
        assert_eq!(outcome.read.io_bytes, 8 << 20);
        assert!((outcome.read.mb_per_s - 4.194304).abs() < 1e-9);
        assert!((outcome.read.latency_ms_mean - 500.0).abs() < 1e-9);
        assert!((outcome.read.latency_ms_p50 - 400.0).abs() < 1e-9);
        assert!((outcome.seconds - 2.0).abs() < 1e-9);
        assert!(parse("no json").is_err());
        assert!(parse(r#"{"jobs":[{"error":5}]}"#).is_err());
    }

    #[test]
    fn bandwidth_logs_sum_over_threads_and_directions_per_window() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = |n: u32, text: &str| {
            std::fs::write(dir.path().join(format!("p3_bw.{n}.log")), text).expect("writes")
        };
        log(1, "250, 1000, 0, 4194304, 0\n250, 500, 1, 4194304, 0\n501, 1000, 0, 4194304, 0\n");
        log(2, "250, 2000, 0, 4194304, 0\n");
        std::fs::write(dir.path().join("other_bw.1.log"), "250, 9999, 0, 0, 0\n").expect("writes");
        let points = bandwidth_log(&dir.path().join("p3")).expect("parses");
        assert_eq!(points.len(), 2, "{points:?}");
        assert!((points[0].0 - 0.25).abs() < 1e-9 && (points[1].0 - 0.75).abs() < 1e-9);
        assert!((points[0].1 - 3500.0 * 1024.0 / 1e6).abs() < 1e-9, "{points:?}");
        log(3, "garbage\n");
        let error = bandwidth_log(&dir.path().join("p3")).expect_err("a bad line");
        assert!(error.to_string().contains("p3_bw.3.log:1"), "{error}");
    }
}
