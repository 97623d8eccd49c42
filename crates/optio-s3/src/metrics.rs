//! The gateway's Prometheus metrics, in a registry of its own ([`optio_net::exposition`]).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use optio_net::exposition::Registry;

/// The path the gateway answers Prometheus on (no bucket name starts with `_`).
pub const METRICS_PATH: &str = "/_optio/metrics";

/// The gateway's Prometheus metrics: requests per S3 operation and HTTP status, and their
/// latencies per operation (to the response's head; a body streamed after it excluded).
#[derive(Debug)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub(crate) next_id: AtomicU64,
}

const REQUESTS: &str = "optio_s3_requests_total";
const DURATION: &str = "optio_s3_request_duration_seconds";
const BUFFERED: &str = "optio_s3_buffered_body_bytes";

impl Default for Metrics {
    fn default() -> Metrics {
        let registry = Registry::new();
        registry.describe_counter(REQUESTS, "S3 requests answered, by operation and HTTP status.");
        registry.describe_histogram(
            DURATION,
            "Time to answer an S3 request (to the response's head), by operation.",
        );
        registry.describe_gauge(
            BUFFERED,
            "Bytes of request bodies held in memory before their signature could be checked \
             (chunked uploads without a length, browser forms), against a budget of 256 MiB.",
        );
        registry.describe_gauge(
            "optio_s3_build_info",
            "The gateway's version (the value is always 1).",
        );
        registry.gauge("optio_s3_build_info", &[("version", env!("CARGO_PKG_VERSION"))]).set(1.0);
        Metrics { registry, next_id: AtomicU64::new(0) }
    }
}

impl Metrics {
    pub(crate) fn count(&self, operation: &str, status: u16, elapsed: std::time::Duration) {
        let status = status.to_string();
        self.registry
            .counter(REQUESTS, &[("operation", operation), ("status", &status)])
            .increment(1);
        self.registry
            .histogram(DURATION, &[("operation", operation)])
            .record(elapsed.as_secs_f64());
    }

    /// The metrics in Prometheus' text format, with `buffered` bytes of bodies held now.
    pub(crate) fn render(&self, buffered: usize) -> String {
        self.registry.gauge(BUFFERED, &[]).set(buffered as f64);
        self.registry.render()
    }
}
