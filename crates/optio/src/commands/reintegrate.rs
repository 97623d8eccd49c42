//! `optio reintegrate`: the re-integration daemon of elastic pools (seed 004, Algorithm 2):
//! follows the map and the dirty table, and brings the replicas offloaded while servers were
//! inactive to where the current membership version places them. `optio up` runs one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use optio_client::{ReintegrationConfig, ReintegrationMode, ReintegrationStatus};

use super::client::ClusterArgs;
use crate::output::parse_size;

/// The member name re-integration reports its progress under (`optio status` shows it).
pub const STATUS_MEMBER: &str = "reintegrator";

/// Arguments of `optio reintegrate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Selective (only what the dirty table names) or full (everything the returning servers
    /// should hold: the baseline).
    #[arg(long, value_enum, default_value = "selective")]
    pub mode: Mode,
    /// Most bytes per second copied (0: no limit).
    #[arg(long, default_value = "0")]
    pub rate: String,
    /// Exit when standard input closes (how `optio up` keeps no process behind).
    #[arg(long)]
    pub exit_with_stdin: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Re-integration modes.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Mode {
    /// Only the objects in the dirty table (Algorithm 2).
    Selective,
    /// Everything the current version places on servers that came back.
    Full,
}

pub fn run(args: Args) -> Result<()> {
    crate::commands::init_logging("warn");
    let rate = parse_size(&args.rate).map_err(anyhow::Error::msg)?;
    let config = ReintegrationConfig {
        mode: match args.mode {
            Mode::Selective => ReintegrationMode::Selective,
            Mode::Full => ReintegrationMode::Full,
        },
        rate_bytes_per_sec: (rate > 0).then_some(rate),
    };
    let runtime = crate::commands::runtime()?;
    runtime
        .block_on(async move {
            let table = args.cluster.conn.dirty_table().await?;
            // No intent log: re-integration writes no object through the client's write path,
            // and must not take over (recover) the logs of crashed clients.
            let client_config =
                optio_client::ClientConfig { intent_dir: None, ..args.cluster.config()? };
            let client = args.cluster.connect_with(client_config).await?;
            let status = Arc::new(Mutex::new(ReintegrationStatus::default()));
            let reporter = {
                let (client, status) = (client.clone(), status.clone());
                async move {
                    loop {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        let report = status.lock().expect("status lock").clone();
                        if let Err(error) = client.source().put_status(STATUS_MEMBER, &report).await
                        {
                            tracing::warn!(%error, "cannot publish the re-integration status");
                        }
                    }
                }
            };
            eprintln!(
                "re-integration ({:?}) of {} following {}",
                config.mode,
                table.describe(),
                client.source().describe()
            );
            let stop = crate::commands::server::shutdown_signal(args.exit_with_stdin);
            tokio::select! {
                _ = client.reintegrate(&table, &config, &status, stop) => {}
                _ = reporter => {}
            }
            let report = status.lock().expect("status lock").clone();
            let _ = client.source().put_status(STATUS_MEMBER, &report).await;
            Ok::<(), anyhow::Error>(())
        })
        .context("re-integration failed")
}
