//! `optio manager`: the monitor of a cluster whose servers were started one by one (`optio
//! server` on several hosts): marks a server's devices down in the map when it has not
//! answered for the down grace, out after the out grace, up and in when it answers again.
//! One acts per cluster (a lock next to a map file, a lease on a key in etcd); others stand by
//! and take over when it stops. `optio up` plays this part for its own cluster.

use std::time::Duration;

use anyhow::Result;
use optio_cluster::monitor::{self, Graces, Monitor};

use super::live::LiveMap;

/// How often the monitor checks the servers.
const ROUND_INTERVAL: Duration = Duration::from_millis(250);
/// How often a monitor standing by tries to take over.
const CAMPAIGN_INTERVAL: Duration = Duration::from_secs(1);

/// Arguments of `optio manager`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  optio manager --map etcd://10.0.0.1:2379/optio
  optio manager --cluster /srv/optio --down-grace 30s --out-grace 15m

A server answers when GET /health on its address in the map answers within 1 s. Only devices
this monitor marked out are marked in again; a device an operator set out stays out. With the
map in etcd, the acting monitor holds the key PREFIX/manager with a lease of half the down
grace (2 to 10 s); a second `optio manager` stands by and takes over within that time when the
first one stops.")]
pub struct Args {
    #[command(flatten)]
    pub live: LiveMap,
    /// Mark a server's devices down once it has not answered for this long.
    #[arg(long, default_value = "20s", value_parser = crate::output::parse_duration)]
    pub down_grace: Duration,
    /// Mark them out (their data is re-replicated elsewhere) after this long.
    #[arg(long, default_value = "10m", value_parser = crate::output::parse_duration)]
    pub out_grace: Duration,
    #[command(flatten)]
    pub trim: super::trim_worker::TrimRate,
}

pub fn run(args: Args) -> Result<()> {
    crate::commands::init_logging("warn");
    if args.out_grace < args.down_grace {
        anyhow::bail!(
            "--out-grace ({:?}) is shorter than --down-grace ({:?}): a device is marked down before it is marked out",
            args.out_grace,
            args.down_grace
        );
    }
    let source = args.live.source()?;
    let graces = Graces { down: args.down_grace, out: args.out_grace };
    let holder = format!(
        "optio manager (pid {}, host {})",
        std::process::id(),
        std::fs::read_to_string("/etc/hostname").unwrap_or_default().trim()
    );
    let ttl = optio_local::cluster::lease_ttl(args.down_grace);
    let runtime = crate::commands::runtime()?;
    runtime.block_on(async move {
        source.load().await?;
        let mut standing_by: Option<monitor::ActingMonitor> = None;
        loop {
            let leadership = match monitor::lead(&source, &holder, ttl).await {
                Ok(Ok(leadership)) => leadership,
                Ok(Err(who)) => {
                    if standing_by.as_ref() != Some(&who) {
                        eprintln!(
                            "optio manager: standing by: {who} acts for {}",
                            source.describe()
                        );
                        standing_by = Some(who);
                    }
                    tokio::time::sleep(CAMPAIGN_INTERVAL).await;
                    continue;
                }
                Err(error) => {
                    eprintln!("optio manager: cannot campaign: {}", error.report());
                    tokio::time::sleep(CAMPAIGN_INTERVAL).await;
                    continue;
                }
            };
            standing_by = None;
            eprintln!(
                "optio manager: acting for {} (down after {:?}, out after {:?})",
                source.describe(),
                graces.down,
                graces.out
            );
            let mut monitor = Monitor::new(source.clone(), graces);
            let trimmer = tokio::spawn(super::trim_worker::run(
                source.clone(),
                args.live.transport()?,
                args.trim.trim_rate,
                "optio manager",
            ));
            loop {
                match leadership.renew().await {
                    Ok(true) => {}
                    Ok(false) => {
                        eprintln!("optio manager: lost the lease; campaigning again");
                        break;
                    }
                    Err(error) => {
                        eprintln!("optio manager: cannot renew the lease: {}", error.report());
                        break;
                    }
                }
                match monitor.round().await {
                    Ok(marked) => {
                        for change in marked {
                            eprintln!("optio manager: {change}");
                        }
                    }
                    Err(error) => eprintln!("optio manager: {}", error.report()),
                }
                tokio::time::sleep(ROUND_INTERVAL).await;
            }
            trimmer.abort();
        }
    })
}
