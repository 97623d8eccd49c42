//! Request rates and latencies from the servers' Prometheus `/metrics`: the counters of one
//! scrape (`optio_requests_total{op,result}` and `optio_request_duration_seconds`'s `_sum`
//! and `_count` per `op`), and the rates between two scrapes of a server from the counters'
//! differences.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};

/// What one scrape of a server's `/metrics` counted since the server started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scrape {
    /// Requests answered, by operation (every result).
    pub requests: BTreeMap<String, u64>,
    /// Requests answered with an error (any result but `ok`).
    pub errors: u64,
    /// Seconds spent answering, and requests timed, by operation.
    pub seconds: BTreeMap<String, (f64, u64)>,
    /// Bytes of request bodies received, and of answer bodies sent (every operation).
    pub received_bytes: u64,
    pub sent_bytes: u64,
}

/// The value of label `name` in a sample's `{…}` labels.
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &labels[start..];
    Some(&rest[..rest.find('"')?])
}

/// The counters of a `/metrics` text.
pub fn parse(text: &str) -> Scrape {
    let mut scrape = Scrape::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (series, ""),
        };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let op = label(labels, "op").unwrap_or("").to_string();
        match name {
            "optio_requests_total" => {
                *scrape.requests.entry(op).or_default() += value as u64;
                if label(labels, "result").is_some_and(|r| r != "ok") {
                    scrape.errors += value as u64;
                }
            }
            "optio_request_duration_seconds_sum" => {
                scrape.seconds.entry(op).or_default().0 += value
            }
            "optio_request_duration_seconds_count" => {
                scrape.seconds.entry(op).or_default().1 += value as u64
            }
            "optio_request_body_bytes_total" => scrape.received_bytes += value as u64,
            "optio_answer_body_bytes_total" => scrape.sent_bytes += value as u64,
            _ => {}
        }
    }
    scrape
}

/// The rates from scrape `before` (at `then`) to `after` (at `now`): requests per second by
/// operation, errors per second, and the mean latency of the requests answered in between
/// (`null` with none). `None` when a counter went back (the server restarted in between).
pub fn rates(before: &Scrape, then: Instant, after: &Scrape, now: Instant) -> Option<Value> {
    let seconds = now.duration_since(then).as_secs_f64();
    if seconds <= 0.0 || after.errors < before.errors {
        return None;
    }
    let mut by_op = serde_json::Map::new();
    let mut total = 0u64;
    for (op, count) in &after.requests {
        let was = before.requests.get(op).copied().unwrap_or(0);
        let delta = count.checked_sub(was)?;
        total += delta;
        by_op.insert(op.clone(), json!(round(delta as f64 / seconds)));
    }
    let (mut spent, mut timed) = (0.0, 0u64);
    let mut latency_by_op = serde_json::Map::new();
    for (op, (sum, count)) in &after.seconds {
        let (was_sum, was_count) = before.seconds.get(op).copied().unwrap_or((0.0, 0));
        let delta = count.checked_sub(was_count)?;
        let delta_sum = (sum - was_sum).max(0.0);
        spent += delta_sum;
        timed += delta;
        if delta > 0 {
            latency_by_op.insert(op.clone(), json!(round(delta_sum / delta as f64 * 1e3)));
        }
    }
    let received = after.received_bytes.checked_sub(before.received_bytes)?;
    let sent = after.sent_bytes.checked_sub(before.sent_bytes)?;
    Some(json!({
        "interval_s": round(seconds),
        "received_bytes_per_s": round(received as f64 / seconds),
        "sent_bytes_per_s": round(sent as f64 / seconds),
        "requests_per_s": by_op,
        "total_per_s": round(total as f64 / seconds),
        "errors_per_s": round((after.errors - before.errors) as f64 / seconds),
        "mean_latency_ms": (timed > 0).then(|| round(spent / timed as f64 * 1e3)),
        "mean_latency_ms_by_op": latency_by_op,
    }))
}

/// Three decimals are enough for a page and keep the JSON short.
fn round(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const BEFORE: &str = r#"# HELP optio_requests_total Requests.
# TYPE optio_requests_total counter
optio_requests_total{op="get",result="ok"} 10
optio_requests_total{op="put",result="ok"} 4
optio_requests_total{op="put",result="not_found"} 1
optio_request_duration_seconds_bucket{op="get",le="0.001"} 3
optio_request_duration_seconds_sum{op="get"} 0.02
optio_request_duration_seconds_count{op="get"} 10
optio_request_duration_seconds_sum{op="put"} 0.05
optio_request_duration_seconds_count{op="put"} 5
optio_request_body_bytes_total{op="put"} 4096
optio_answer_body_bytes_total{op="get"} 1000
"#;

    #[test]
    fn rates_come_from_the_counters_differences() {
        let before = parse(BEFORE);
        assert_eq!(before.requests["put"], 5);
        assert_eq!(before.errors, 1);
        let after = parse(
            &BEFORE
                .replace("\"ok\"} 10", "\"ok\"} 30")
                .replace("sum{op=\"get\"} 0.02", "sum{op=\"get\"} 0.06")
                .replace("count{op=\"get\"} 10", "count{op=\"get\"} 30")
                .replace("{op=\"get\"} 1000", "{op=\"get\"} 21000"),
        );
        let then = Instant::now();
        let rates = rates(&before, then, &after, then + Duration::from_secs(2)).expect("rates");
        assert_eq!(rates["requests_per_s"]["get"], json!(10.0));
        assert_eq!(rates["requests_per_s"]["put"], json!(0.0));
        assert_eq!(rates["total_per_s"], json!(10.0));
        assert_eq!(rates["mean_latency_ms"], json!(2.0));
        assert_eq!(rates["errors_per_s"], json!(0.0));
        assert_eq!(rates["sent_bytes_per_s"], json!(10000.0));
        assert_eq!(rates["received_bytes_per_s"], json!(0.0));
        // A server restarted in between: its counters went back; no rates.
        assert_eq!(super::rates(&after, then, &before, then + Duration::from_secs(1)), None);
    }
}
