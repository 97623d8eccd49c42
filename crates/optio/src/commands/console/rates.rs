//! Request rates and latencies from the servers' Prometheus `/metrics`: the counters of one
//! scrape (`optio_requests_total{device,op,result}`, `optio_request_duration_seconds`'s
//! `_sum` and `_count` per `device` and `op`, and the body bytes per `device` and `op`), and
//! the rates between two scrapes of a server from the counters' differences — the server's
//! totals (the overview) and each of its devices' own (the devices table).
//!
//! A server from before the `device` label counts per server only: its devices are given the
//! server's totals, marked `"scope": "server"`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use serde_json::{Value, json};

/// What one scrape counted of a device's requests (or of all of a server's) since the
/// server started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
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

/// What one scrape of a server's `/metrics` counted since the server started.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scrape {
    /// The server's totals: every device's, and the requests to no device it serves
    /// (`device="none"`).
    pub total: Counts,
    /// Each device's, by id (the `device` label).
    pub devices: BTreeMap<u32, Counts>,
    /// Whether the request series carry a `device` label (servers before it do not).
    pub per_device: bool,
}

/// The value of label `name` in a sample's `{…}` labels (`a="x",b="y"`).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let needle = format!("{name}=\"");
    let mut from = 0;
    while let Some(found) = labels[from..].find(&needle) {
        let at = from + found;
        // A label's name starts the labels or follows a comma: not the tail of another name.
        if at == 0 || labels[..at].ends_with(',') {
            let rest = &labels[at + needle.len()..];
            return Some(&rest[..rest.find('"')?]);
        }
        from = at + needle.len();
    }
    None
}

impl Counts {
    /// Adds sample `value` of series `name` with operation `op`; `false`: not a request
    /// series.
    fn add(&mut self, name: &str, op: &str, result: Option<&str>, value: f64) -> bool {
        match name {
            "optio_requests_total" => {
                *self.requests.entry(op.to_string()).or_default() += value as u64;
                if result.is_some_and(|r| r != "ok") {
                    self.errors += value as u64;
                }
            }
            "optio_request_duration_seconds_sum" => {
                self.seconds.entry(op.to_string()).or_default().0 += value
            }
            "optio_request_duration_seconds_count" => {
                self.seconds.entry(op.to_string()).or_default().1 += value as u64
            }
            "optio_request_body_bytes_total" => self.received_bytes += value as u64,
            "optio_answer_body_bytes_total" => self.sent_bytes += value as u64,
            _ => return false,
        }
        true
    }
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
        let op = label(labels, "op").unwrap_or("");
        let result = label(labels, "result");
        if !scrape.total.add(name, op, result, value) {
            continue;
        }
        let Some(device) = label(labels, "device") else { continue };
        scrape.per_device = true;
        // (`none`: requests to no device the server serves, in its totals only.)
        if let Ok(id) = device.parse::<u32>() {
            scrape.devices.entry(id).or_default().add(name, op, result, value);
        }
    }
    scrape
}

/// A server's rates between two of its scrapes: its totals and each of its devices' own.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerRates {
    /// The server's totals (`"scope": "server"`).
    pub server: Value,
    /// Each device's own (`"scope": "device"`), by id; empty from a server whose series
    /// carry no `device` label.
    pub devices: BTreeMap<u32, Value>,
    /// Whether the server counts per device.
    pub per_device: bool,
    /// A device of the server with no series of its own: nothing counted.
    idle: Value,
}

impl ServerRates {
    /// Device `id`'s rates: its own, or (from a server without the `device` label) the
    /// server's totals, marked `"scope": "server"`.
    pub fn device(&self, id: u32) -> Value {
        match (self.per_device, self.devices.get(&id)) {
            (true, Some(rates)) => rates.clone(),
            (true, None) => self.idle.clone(),
            (false, _) => self.server.clone(),
        }
    }
}

/// The rates from scrape `before` (at `then`) to `after` (at `now`): the server's and each
/// device's. `None` when a counter went back (the server restarted in between) or the server
/// started or stopped labelling devices (an upgrade in between).
pub fn between(
    before: &Scrape,
    then: Instant,
    after: &Scrape,
    now: Instant,
) -> Option<ServerRates> {
    let seconds = now.duration_since(then).as_secs_f64();
    if seconds <= 0.0 || before.per_device != after.per_device {
        return None;
    }
    let none = Counts::default();
    let server = rates(&before.total, &after.total, seconds, "server")?;
    let ids: BTreeSet<u32> = before.devices.keys().chain(after.devices.keys()).copied().collect();
    let mut devices = BTreeMap::new();
    for id in ids {
        let was = before.devices.get(&id).unwrap_or(&none);
        let is = after.devices.get(&id).unwrap_or(&none);
        devices.insert(id, rates(was, is, seconds, "device")?);
    }
    let idle = rates(&none, &none, seconds, "device")?;
    Some(ServerRates { server, devices, per_device: after.per_device, idle })
}

/// The rates from counts `before` to `after`, `seconds` apart: requests per second by
/// operation, errors per second, bytes per second received and sent, and the mean latency of
/// the requests answered in between (`null` with none). `None` when a counter went back.
fn rates(before: &Counts, after: &Counts, seconds: f64, scope: &str) -> Option<Value> {
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
    let errors = after.errors.checked_sub(before.errors)?;
    let received = after.received_bytes.checked_sub(before.received_bytes)?;
    let sent = after.sent_bytes.checked_sub(before.sent_bytes)?;
    Some(json!({
        "scope": scope,
        "interval_s": round(seconds),
        "received_bytes_per_s": round(received as f64 / seconds),
        "sent_bytes_per_s": round(sent as f64 / seconds),
        "requests_per_s": by_op,
        "total_per_s": round(total as f64 / seconds),
        "errors_per_s": round(errors as f64 / seconds),
        "mean_latency_ms": (timed > 0).then(|| round(spent / timed as f64 * 1e3)),
        "mean_latency_ms_by_op": latency_by_op,
    }))
}

/// Three decimals are enough for a page and keep the JSON short.
fn round(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// The servers' rates by address (absent: no earlier scrape to compare with, or the server
/// did not answer).
pub type Rates = HashMap<String, ServerRates>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A server before the `device` label.
    const UNLABELLED: &str = r#"# HELP optio_requests_total Requests.
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

    /// A server of devices 0 and 3, with a misdirected request (`none`).
    const LABELLED: &str = r#"# TYPE optio_requests_total counter
optio_requests_total{device="0",op="get",result="ok"} 10
optio_requests_total{device="0",op="put",result="ok"} 4
optio_requests_total{device="3",op="put",result="ok"} 0
optio_requests_total{device="3",op="put",result="version-conflict"} 2
optio_requests_total{device="none",op="put",result="misdirected"} 1
optio_request_duration_seconds_bucket{device="0",op="get",le="0.001"} 3
optio_request_duration_seconds_sum{device="0",op="get"} 0.02
optio_request_duration_seconds_count{device="0",op="get"} 10
optio_request_duration_seconds_sum{device="3",op="put"} 0.01
optio_request_duration_seconds_count{device="3",op="put"} 2
optio_request_duration_seconds_sum{device="none",op="put"} 0.001
optio_request_duration_seconds_count{device="none",op="put"} 1
optio_request_body_bytes_total{device="0",op="put"} 4096
optio_request_body_bytes_total{device="3",op="put"} 0
optio_answer_body_bytes_total{device="0",op="get"} 1000
optio_device_used_bytes{device="0"} 123
"#;

    fn after(text: &str, changes: &[(&str, &str)]) -> Scrape {
        let mut text = text.to_string();
        for (from, to) in changes {
            assert!(text.contains(from), "{from}");
            text = text.replace(from, to);
        }
        parse(&text)
    }

    #[test]
    fn without_the_device_label_every_device_has_the_servers_totals() {
        let before = parse(UNLABELLED);
        assert_eq!(before.total.requests["put"], 5);
        assert_eq!(before.total.errors, 1);
        assert!(!before.per_device && before.devices.is_empty());
        let after = after(
            UNLABELLED,
            &[
                ("\"ok\"} 10", "\"ok\"} 30"),
                ("sum{op=\"get\"} 0.02", "sum{op=\"get\"} 0.06"),
                ("count{op=\"get\"} 10", "count{op=\"get\"} 30"),
                ("{op=\"get\"} 1000", "{op=\"get\"} 21000"),
            ],
        );
        let then = Instant::now();
        let two = then + Duration::from_secs(2);
        let found = between(&before, then, &after, two).expect("rates");
        let rates = &found.server;
        assert_eq!(rates["scope"], json!("server"));
        assert_eq!(rates["requests_per_s"]["get"], json!(10.0));
        assert_eq!(rates["requests_per_s"]["put"], json!(0.0));
        assert_eq!(rates["total_per_s"], json!(10.0));
        assert_eq!(rates["mean_latency_ms"], json!(2.0));
        assert_eq!(rates["errors_per_s"], json!(0.0));
        assert_eq!(rates["sent_bytes_per_s"], json!(10000.0));
        assert_eq!(rates["received_bytes_per_s"], json!(0.0));
        // Any device of the server is given its totals, marked as such.
        assert_eq!(found.device(7), found.server);
        // A server restarted in between: its counters went back; no rates.
        assert_eq!(between(&after, then, &before, then + Duration::from_secs(1)), None);
    }

    #[test]
    fn the_device_label_is_parsed_per_device_and_none_counts_in_the_totals_only() {
        let scrape = parse(LABELLED);
        assert!(scrape.per_device);
        assert_eq!(scrape.devices.keys().copied().collect::<Vec<_>>(), [0, 3]);
        let zero = &scrape.devices[&0];
        assert_eq!((zero.requests["get"], zero.requests["put"], zero.errors), (10, 4, 0));
        assert_eq!(zero.seconds["get"], (0.02, 10));
        assert_eq!((zero.received_bytes, zero.sent_bytes), (4096, 1000));
        let three = &scrape.devices[&3];
        assert_eq!((three.requests["put"], three.errors, three.received_bytes), (2, 2, 0));
        // The totals: both devices and the misdirected request.
        assert_eq!(scrape.total.requests["put"], 7);
        assert_eq!(scrape.total.errors, 3);
        assert_eq!(scrape.total.seconds["put"], (0.011, 3));
        // A label whose name ends another's is not taken for it.
        assert_eq!(label(r#"xop="a",op="b""#, "op"), Some("b"));
        assert_eq!(label(r#"xop="a""#, "op"), None);
    }

    #[test]
    fn each_device_has_its_own_rates() {
        let before = parse(LABELLED);
        // Device 0 answers 20 gets (4 ms each) and 2 puts of 1 KiB; device 3 nothing; one
        // more misdirected request.
        let after = after(
            LABELLED,
            &[
                ("\"get\",result=\"ok\"} 10", "\"get\",result=\"ok\"} 30"),
                ("\"0\",op=\"put\",result=\"ok\"} 4", "\"0\",op=\"put\",result=\"ok\"} 6"),
                ("\"misdirected\"} 1", "\"misdirected\"} 2"),
                ("sum{device=\"0\",op=\"get\"} 0.02", "sum{device=\"0\",op=\"get\"} 0.1"),
                ("count{device=\"0\",op=\"get\"} 10", "count{device=\"0\",op=\"get\"} 30"),
                ("{device=\"0\",op=\"put\"} 4096", "{device=\"0\",op=\"put\"} 6144"),
                ("{device=\"0\",op=\"get\"} 1000", "{device=\"0\",op=\"get\"} 41000"),
            ],
        );
        let then = Instant::now();
        let found = between(&before, then, &after, then + Duration::from_secs(2)).expect("rates");
        assert!(found.per_device);
        let busy = found.device(0);
        assert_eq!(busy["scope"], json!("device"));
        assert_eq!(busy["requests_per_s"]["get"], json!(10.0));
        assert_eq!(busy["requests_per_s"]["put"], json!(1.0));
        assert_eq!(busy["total_per_s"], json!(11.0));
        assert_eq!(busy["errors_per_s"], json!(0.0));
        assert_eq!(busy["mean_latency_ms"], json!(4.0));
        assert_eq!(busy["mean_latency_ms_by_op"]["get"], json!(4.0));
        assert_eq!(busy["received_bytes_per_s"], json!(1024.0));
        assert_eq!(busy["sent_bytes_per_s"], json!(20000.0));
        let idle = found.device(3);
        assert_eq!(idle["scope"], json!("device"));
        assert_eq!(idle["total_per_s"], json!(0.0));
        assert_eq!(idle["mean_latency_ms"], Value::Null);
        assert_eq!(idle["received_bytes_per_s"], json!(0.0));
        // A device with no series at all: nothing counted either.
        assert_eq!(found.device(5)["total_per_s"], json!(0.0));
        assert_eq!(found.device(5)["scope"], json!("device"));
        // The server's totals add the misdirected request (its errors too).
        assert_eq!(found.server["scope"], json!("server"));
        assert_eq!(found.server["total_per_s"], json!(11.5));
        assert_eq!(found.server["errors_per_s"], json!(0.5));
        // A server that started labelling its devices in between (upgraded): no rates.
        let old = parse(UNLABELLED);
        assert_eq!(between(&old, then, &after, then + Duration::from_secs(1)), None);
    }
}
