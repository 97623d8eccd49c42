//! Prometheus exposition for Optio's processes (servers, the S3 gateway): a registry of one
//! process's — or one in-process server's — counters, gauges and latency histograms, kept by
//! `metrics-exporter-prometheus` (a recorder of its own, not the process-wide one, so two
//! servers in one test process keep their counts apart) and rendered in Prometheus' text
//! format, which `promtool check metrics` accepts.
//!
//! Names carry their unit (`_seconds`, `_bytes`, `_total` for counters, `_ratio` for 0–1
//! gauges), as Prometheus' conventions ask.

use std::sync::{Arc, Weak};
use std::time::Duration;

use metrics::{Key, KeyName, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

pub use metrics::{Counter, Gauge, Histogram};

/// The content type of [`Registry::render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Histogram buckets for request latencies, in seconds: 50 µs to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// How often recorded histogram samples are folded into their buckets when nobody scrapes
/// (they are kept until then: without this, an unscraped busy server would grow).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// One process's (or in-process server's) metrics.
pub struct Registry {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Registry")
    }
}

impl Registry {
    /// An empty registry whose histograms use [`LATENCY_BUCKETS`]; a background thread folds
    /// histogram samples while it lives.
    pub fn new() -> Arc<Registry> {
        let recorder = PrometheusBuilder::new()
            .set_buckets(LATENCY_BUCKETS)
            .expect("the latency buckets are not empty")
            .build_recorder();
        let handle = recorder.handle();
        let registry = Arc::new(Registry { recorder, handle });
        let weak: Weak<Registry> = Arc::downgrade(&registry);
        // (If the thread cannot start, histograms are folded at each scrape only.)
        let _ = std::thread::Builder::new().name("optio-metrics".into()).spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                match weak.upgrade() {
                    Some(registry) => registry.handle.run_upkeep(),
                    None => return,
                }
            }
        });
        registry
    }

    /// Gives a counter its help text.
    pub fn describe_counter(&self, name: &'static str, help: &'static str) {
        self.recorder.describe_counter(KeyName::from_const_str(name), None, help.into());
    }

    /// Gives a gauge its help text.
    pub fn describe_gauge(&self, name: &'static str, help: &'static str) {
        self.recorder.describe_gauge(KeyName::from_const_str(name), None, help.into());
    }

    /// Gives a histogram its help text.
    pub fn describe_histogram(&self, name: &'static str, help: &'static str) {
        self.recorder.describe_histogram(KeyName::from_const_str(name), None, help.into());
    }

    /// The counter `name` with these labels (the same one on every call).
    pub fn counter(&self, name: &'static str, labels: &[(&'static str, &str)]) -> Counter {
        self.recorder.register_counter(&key(name, labels), &METADATA)
    }

    /// The gauge `name` with these labels.
    pub fn gauge(&self, name: &'static str, labels: &[(&'static str, &str)]) -> Gauge {
        self.recorder.register_gauge(&key(name, labels), &METADATA)
    }

    /// The histogram `name` with these labels.
    pub fn histogram(&self, name: &'static str, labels: &[(&'static str, &str)]) -> Histogram {
        self.recorder.register_histogram(&key(name, labels), &METADATA)
    }

    /// Everything, in Prometheus' text format ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        self.handle.render()
    }
}

fn key(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
    let labels: Vec<Label> =
        labels.iter().map(|(name, value)| Label::new(*name, value.to_string())).collect();
    Key::from_parts(name, labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_histograms_apart_per_registry() {
        let a = Registry::new();
        let b = Registry::new();
        a.describe_counter("optio_test_requests_total", "Requests.");
        a.counter("optio_test_requests_total", &[("op", "get")]).increment(3);
        a.gauge("optio_test_used_bytes", &[("device", "1")]).set(42.0);
        a.histogram("optio_test_request_duration_seconds", &[("op", "get")]).record(0.002);
        b.counter("optio_test_requests_total", &[("op", "get")]).increment(1);
        let text = a.render();
        assert!(text.contains("# HELP optio_test_requests_total Requests."), "{text}");
        assert!(text.contains("# TYPE optio_test_requests_total counter"), "{text}");
        assert!(text.contains("optio_test_requests_total{op=\"get\"} 3"), "{text}");
        assert!(text.contains("optio_test_used_bytes{device=\"1\"} 42"), "{text}");
        assert!(
            text.contains("optio_test_request_duration_seconds_bucket{op=\"get\",le=\"0.0025\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("optio_test_request_duration_seconds_bucket{op=\"get\",le=\"0.001\"} 0"),
            "{text}"
        );
        assert!(b.render().contains("optio_test_requests_total{op=\"get\"} 1"));
    }
}
