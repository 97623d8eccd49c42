//! The server's Prometheus metrics (`/metrics`): requests and their latencies per operation,
//! counted as they are served, and the devices, rebalancing, catching up, scrubbing, fencing
//! and authentication read from their owners at each scrape. Names follow Prometheus'
//! conventions: a unit suffix (`_bytes`, `_seconds`, `_ratio` for 0–1), `_total` for counters.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use optio_net::exposition::{Counter, Histogram, Registry};
use optio_proto::request::OpKind;
use optio_proto::{DeviceStatus, ErrorKind, MigrationPhase, ServerStatus};

/// What a request to a device was, for the metrics: `None` for no such route, or a method
/// the route does not take (`op="invalid"`).
pub(crate) type Operation = Option<OpKind>;

/// Every operation's index in the handles' order: the kinds, then `invalid`.
fn index(op: Operation) -> usize {
    op.map_or(OpKind::ALL.len(), |kind| kind as usize)
}

/// Its name in metrics.
fn name(op: Operation) -> &'static str {
    op.map_or("invalid", OpKind::name)
}

/// Every operation, in [`index`]'s order.
fn every_operation() -> impl Iterator<Item = Operation> {
    OpKind::ALL.into_iter().map(Some).chain([None])
}

const REQUESTS: &str = "optio_requests_total";
const DURATION: &str = "optio_request_duration_seconds";
const RECEIVED: &str = "optio_request_body_bytes_total";
const SENT: &str = "optio_answer_body_bytes_total";

/// The `device` label of a request whose path names no device this server serves (a
/// misdirected request, or one whose path names no device at all): every other value is the
/// id of one of this server's devices, so the label takes at most one value more than the
/// server has devices.
pub(crate) const NO_DEVICE: &str = "none";

/// One device's handles (or [`NO_DEVICE`]'s), per operation in [`index`]'s order: answered
/// without error, latency, request body bytes received, answer body bytes sent.
struct Handles {
    /// The `device` label's value.
    device: String,
    ok: Vec<Counter>,
    durations: Vec<Histogram>,
    received: Vec<Counter>,
    sent: Vec<Counter>,
}

impl Handles {
    /// The handles of `device`'s series, registered now (every operation's shows from the
    /// first scrape, at 0).
    fn new(registry: &Registry, device: String) -> Handles {
        let d = device.as_str();
        let ok = every_operation()
            .map(|op| {
                registry.counter(REQUESTS, &[("device", d), ("op", name(op)), ("result", "ok")])
            })
            .collect();
        let durations = every_operation()
            .map(|op| registry.histogram(DURATION, &[("device", d), ("op", name(op))]))
            .collect();
        let counters = |metric: &'static str| -> Vec<Counter> {
            every_operation()
                .map(|op| registry.counter(metric, &[("device", d), ("op", name(op))]))
                .collect()
        };
        let (received, sent) = (counters(RECEIVED), counters(SENT));
        Handles { device, ok, durations, received, sent }
    }
}

/// The server's registry and the handles its hot path uses.
pub(crate) struct ServerMetrics {
    registry: Arc<Registry>,
    /// Per device served here.
    devices: HashMap<u32, Handles>,
    /// Requests to no device served here, registered at the first (most servers see none).
    none: OnceLock<Handles>,
}

impl std::fmt::Debug for ServerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerMetrics")
    }
}

impl ServerMetrics {
    /// The metrics of a server serving `devices`.
    pub(crate) fn new(devices: impl IntoIterator<Item = u32>) -> ServerMetrics {
        let registry = Registry::new();
        describe(&registry);
        let devices =
            devices.into_iter().map(|id| (id, Handles::new(&registry, id.to_string()))).collect();
        ServerMetrics { registry, devices, none: OnceLock::new() }
    }

    /// Counts a request to `device` (the device its path names, if it names one; one this
    /// server does not serve is counted as [`NO_DEVICE`]): its operation, its error kind if it
    /// failed, how long the server took to answer (its body streamed after that is not
    /// included), and the bytes of the request's body and of the answer's (the console's
    /// throughput).
    pub(crate) fn observe(
        &self,
        device: Option<u32>,
        op: Operation,
        error: Option<ErrorKind>,
        elapsed: Duration,
        received: u64,
        sent: u64,
    ) {
        let handles = match device.and_then(|id| self.devices.get(&id)) {
            Some(handles) => handles,
            None => self.none.get_or_init(|| Handles::new(&self.registry, NO_DEVICE.into())),
        };
        let index = index(op);
        if received > 0 {
            handles.received[index].increment(received);
        }
        if sent > 0 {
            handles.sent[index].increment(sent);
        }
        match error {
            None => handles.ok[index].increment(1),
            Some(kind) => self
                .registry
                .counter(
                    REQUESTS,
                    &[
                        ("device", handles.device.as_str()),
                        ("op", name(op)),
                        ("result", kind.name()),
                    ],
                )
                .increment(1),
        }
        handles.durations[index].record(elapsed.as_secs_f64());
    }

    /// Everything, read now, in Prometheus' text format: the server's `status` and `gauges`
    /// as read at the scrape.
    pub(crate) fn render(&self, status: &ServerStatus, gauges: &Gauges) -> String {
        let r = &self.registry;
        for device in &status.devices {
            let label = device.metrics.device.to_string();
            let labels = [("device", label.as_str())];
            let gauge = |name: &'static str, value: f64| r.gauge(name, &labels).set(value);
            let counter = |name: &'static str, value: u64| r.counter(name, &labels).absolute(value);
            let m = &device.metrics;
            gauge("optio_device_used_bytes", m.used_bytes as f64);
            gauge("optio_device_capacity_bytes", m.capacity_bytes as f64);
            gauge("optio_device_objects", device.objects as f64);
            gauge("optio_device_choice_records", device.records as f64);
            gauge("optio_device_service_time_seconds", m.latency_us as f64 / 1e6);
            gauge("optio_device_unflushed_bytes", m.unflushed_bytes as f64);
            gauge("optio_device_recovering", f64::from(u8::from(device.recovering)));
            counter("optio_device_corrupt_found_total", device.corrupt_found);
            counter("optio_device_caught_up_total", device.caught_up);
            counter("optio_device_scrub_repaired_total", device.scrub_repaired);
            counter("optio_device_scrub_unrepairable_total", device.scrub_unrepairable);
            scrub(r, &labels, device);
        }
        let m = &status.migration;
        r.gauge("optio_migration_epoch", &[]).set(m.epoch as f64);
        for phase in MigrationPhase::ALL {
            let now = f64::from(u8::from(m.phase == phase));
            r.gauge("optio_migration_phase", &[("phase", phase.name())]).set(now);
        }
        r.gauge("optio_migration_copies_planned", &[]).set(m.copies_planned as f64);
        r.gauge("optio_migration_copies_done", &[]).set(m.copies_done as f64);
        r.gauge("optio_migration_remaining_copies", &[]).set(m.remaining_copies as f64);
        r.gauge("optio_migration_remaining_bytes", &[]).set(m.remaining_bytes as f64);
        r.gauge("optio_migration_rate_bytes_per_second", &[]).set(m.rate_bytes_per_sec as f64);
        r.counter("optio_migration_moved_bytes_total", &[]).absolute(m.total_bytes_moved);
        r.counter("optio_migration_moved_copies_total", &[]).absolute(m.total_copies_moved);
        r.gauge("optio_migration_failures", &[]).set(m.failures as f64);
        r.gauge("optio_build_info", &[("version", env!("CARGO_PKG_VERSION"))]).set(1.0);
        r.gauge("optio_fenced", &[]).set(f64::from(u8::from(status.fenced)));
        r.counter("optio_fence_lapses_total", &[]).absolute(gauges.fence_lapses);
        for (reason, count) in &gauges.auth_refusals {
            r.counter("optio_auth_refused_total", &[("reason", reason)]).absolute(*count);
        }
        r.gauge("optio_map_epoch", &[]).set(status.epoch as f64);
        r.counter("optio_disk_syncs_total", &[]).absolute(status.syncs);
        r.gauge("optio_cpu_ratio", &[]).set(f64::from(gauges.cpu_permille) / 1000.0);
        r.gauge("optio_memory_ratio", &[]).set(f64::from(gauges.memory_permille) / 1000.0);
        r.render()
    }
}

/// What the metrics read at a scrape besides the server's status.
#[derive(Clone, Debug, Default)]
pub(crate) struct Gauges {
    /// Times the fencing lease lapsed.
    pub(crate) fence_lapses: u64,
    /// Requests refused by authentication, by reason.
    pub(crate) auth_refusals: Vec<(&'static str, u64)>,
    /// The server's CPU use, in thousandths.
    pub(crate) cpu_permille: u16,
    /// Its memory use, in thousandths.
    pub(crate) memory_permille: u16,
}

/// The device's last scrub pass, when one ran.
fn scrub(r: &Registry, labels: &[(&'static str, &str)], device: &DeviceStatus) {
    let Some(report) = &device.scrub else { return };
    let gauge = |name: &'static str, value: f64| r.gauge(name, labels).set(value);
    gauge("optio_scrub_last_deep", f64::from(u8::from(report.deep)));
    gauge("optio_scrub_last_objects", report.objects as f64);
    gauge("optio_scrub_last_damaged", report.damaged as f64);
    gauge("optio_scrub_last_stale", report.stale as f64);
    gauge("optio_scrub_last_unreachable", report.unreachable as f64);
    gauge("optio_scrub_last_duration_seconds", report.seconds);
}

fn describe(r: &Registry) {
    r.describe_counter(
        REQUESTS,
        "Requests to devices answered, by device (none: not served here), operation and result (ok, or the error kind).",
    );
    r.describe_counter(
        RECEIVED,
        "Bytes of request bodies received by devices, by device and operation.",
    );
    r.describe_counter(SENT, "Bytes of answer bodies sent by devices, by device and operation.");
    r.describe_histogram(
        DURATION,
        "Time to answer a request to a device (its body streamed after that excluded), by device and operation.",
    );
    for (name, help) in [
        ("optio_device_used_bytes", "Bytes stored on the device."),
        ("optio_device_capacity_bytes", "The device's configured capacity."),
        ("optio_device_objects", "Objects stored on the device."),
        ("optio_device_choice_records", "Choice records the device holds."),
        (
            "optio_device_service_time_seconds",
            "Moving average of the device's service time (what probes report).",
        ),
        ("optio_device_unflushed_bytes", "Bytes written to the device and not yet durable."),
        (
            "optio_device_recovering",
            "1 while the device catches up on writes it missed (it serves no reads).",
        ),
        ("optio_migration_epoch", "The map epoch rebalancing works towards (or finished)."),
        ("optio_migration_phase", "1 for the phase rebalancing is in."),
        ("optio_migration_copies_planned", "Copies this rebalancing round sends or checks."),
        ("optio_migration_copies_done", "Copies of this round handled."),
        ("optio_migration_remaining_copies", "Copies of this round still to handle."),
        ("optio_migration_remaining_bytes", "Bytes of this round still to send, at most."),
        ("optio_migration_rate_bytes_per_second", "Rebalancing's send rate over the last seconds."),
        ("optio_migration_failures", "Transfers of this round that failed (retried)."),
        ("optio_scrub_last_deep", "1 if the device's last scrub pass was deep."),
        ("optio_scrub_last_objects", "Objects and tombstones the last scrub pass looked at."),
        ("optio_scrub_last_damaged", "Damaged replicas the last scrub pass found."),
        ("optio_scrub_last_stale", "Stale replicas the last scrub pass found."),
        (
            "optio_scrub_last_unreachable",
            "Objects the last scrub pass could not compare with every replica.",
        ),
        ("optio_scrub_last_duration_seconds", "How long the last scrub pass took."),
        ("optio_build_info", "The server's version (the value is always 1)."),
        ("optio_fenced", "1 while the server holds no fencing lease and serves nothing."),
        ("optio_map_epoch", "The map epoch the server holds."),
        ("optio_cpu_ratio", "CPU utilisation, 0 to 1."),
        ("optio_memory_ratio", "Memory utilisation, 0 to 1."),
    ] {
        r.describe_gauge(name, help);
    }
    for (name, help) in [
        ("optio_device_corrupt_found_total", "Corrupt files found and quarantined on the device."),
        ("optio_disk_syncs_total", "Syncs (fsync, fdatasync, syncfs) the server made."),
        (
            "optio_device_caught_up_total",
            "Versions the device fetched from peers while catching up.",
        ),
        ("optio_device_scrub_repaired_total", "Replicas on the device scrubbing repaired."),
        (
            "optio_device_scrub_unrepairable_total",
            "Damaged replicas on the device scrubbing could not repair.",
        ),
        ("optio_migration_moved_bytes_total", "Bytes rebalancing sent since the server started."),
        ("optio_migration_moved_copies_total", "Copies rebalancing sent since the server started."),
        ("optio_fence_lapses_total", "Times the server stopped serving for want of a lease."),
        (
            "optio_auth_refused_total",
            "Requests refused by authentication or authorisation, by reason.",
        ),
    ] {
        r.describe_counter(name, help);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_is_at_its_index() {
        for (i, op) in every_operation().enumerate() {
            assert_eq!(index(op), i, "{op:?}");
        }
        assert_eq!(name(None), "invalid");
    }

    #[test]
    fn requests_are_counted_under_their_device_and_the_rest_under_none() {
        let metrics = ServerMetrics::new([0, 3]);
        let ms = Duration::from_millis(2);
        metrics.observe(Some(3), Some(OpKind::Put), None, ms, 100, 0);
        metrics.observe(Some(3), Some(OpKind::Get), Some(ErrorKind::NotFound), ms, 0, 0);
        metrics.observe(Some(9), Some(OpKind::Put), Some(ErrorKind::Misdirected), ms, 0, 0);
        metrics.observe(None, None, Some(ErrorKind::NotFound), ms, 0, 0);
        let text = metrics.registry.render();
        for (series, value) in [
            (r#"optio_requests_total{device="3",op="put",result="ok"}"#, 1),
            (r#"optio_requests_total{device="0",op="put",result="ok"}"#, 0),
            (r#"optio_requests_total{device="3",op="get",result="not-found"}"#, 1),
            (r#"optio_request_body_bytes_total{device="3",op="put"}"#, 100),
            (r#"optio_request_body_bytes_total{device="0",op="put"}"#, 0),
            (r#"optio_answer_body_bytes_total{device="3",op="get"}"#, 0),
            (r#"optio_request_duration_seconds_count{device="3",op="put"}"#, 1),
            (r#"optio_request_duration_seconds_count{device="0",op="put"}"#, 0),
            (r#"optio_requests_total{device="none",op="put",result="misdirected"}"#, 1),
            (r#"optio_requests_total{device="none",op="invalid",result="not-found"}"#, 1),
            (r#"optio_request_duration_seconds_count{device="none",op="invalid"}"#, 1),
        ] {
            assert!(text.contains(&format!("{series} {value}\n")), "{series} {value}:\n{text}");
        }
        assert!(!text.contains(r#"device="9""#), "{text}");
        assert!(!text.contains(r#"device="0",op="get",result="not-found""#), "{text}");
    }
}
