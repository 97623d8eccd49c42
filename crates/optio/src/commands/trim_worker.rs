//! The background trimmer that `optio up` and the acting `optio manager` run: volumes'
//! snapshot trims and removals recorded in their headers ([`optio_client::trim`]), carried
//! out at a rate limit.

use std::sync::Arc;
use std::time::Duration;

use optio_client::{Client, ClientConfig};
use optio_cluster::source::MapSource;

/// How often the trimmer looks for jobs.
const ROUND_INTERVAL: Duration = Duration::from_secs(2);

/// Copies removed per second by the background trimmer, as `--trim-rate` takes it.
#[derive(clap::Args, Debug, Clone)]
pub struct TrimRate {
    /// Snapshot copies the background trimmer removes per second at most (0: no limit;
    /// `optio volume snap rm` leaves them to it).
    #[arg(long, default_value_t = optio_client::trim::RATE_DEFAULT, value_name = "N")]
    pub trim_rate: u32,
}

/// Runs the trimmer for the cluster whose map is `source`, forever (abort the task to stop
/// it); `label` prefixes what it reports on standard error.
pub async fn run(
    source: MapSource,
    transport: optio_net::HttpTransport,
    rate: u32,
    label: &'static str,
) {
    let transport: Arc<dyn optio_net::Transport> = Arc::new(transport);
    let mut last_error = String::new();
    let mut report = |error: String| {
        if error != last_error {
            eprintln!("{label}: volume trims: {error}");
            last_error = error;
        }
    };
    let client = loop {
        match Client::connect_with_transport(
            source.clone(),
            ClientConfig::default(),
            transport.clone(),
        )
        .await
        {
            Ok(client) => break client,
            Err(error) => report(format!("cannot connect: {error}")),
        }
        tokio::time::sleep(ROUND_INTERVAL).await;
    };
    let mut worker = optio_client::trim::Worker::new(rate);
    loop {
        match worker.round(&client).await {
            Ok(events) => {
                for event in events {
                    eprintln!("{label}: {event}");
                }
            }
            Err(error) => report(error.to_string()),
        }
        tokio::time::sleep(ROUND_INTERVAL).await;
    }
}
