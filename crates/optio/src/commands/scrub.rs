//! `optio scrub`: a scrub pass now on every server — versions compared across each object's
//! replicas (and, with --deep, every replica re-read and its checksums verified) — with what
//! it found and repaired.

use anyhow::{Result, bail};
use optio_proto::own::ScrubQuery;

use super::live::LiveMap;
use crate::output::{Table, bytes, parse_size};

/// Arguments of `optio scrub`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  optio scrub --cluster /tmp/optio
  optio scrub --deep --pool data --rate 64MiB

Light (default): each replica's version is compared with the other replicas of its set; a
replica that missed a write or a delete fetches the newest version. --deep also re-reads every
replica and verifies its checksums: a damaged one (bit flips, truncated, missing, another
key's file) is repaired from a replica holding its version or a newer one, or stays
quarantined (unrepairable) when none does. Servers also scrub in the background (optio server
--scrub-interval, --deep-scrub-interval, --scrub-rate).

Exit status: 0 when nothing is left damaged, 2 when some replica could not be repaired, 1 when
a server could not be asked.")]
pub struct Args {
    #[command(flatten)]
    pub live: LiveMap,
    /// Re-read every replica and verify its checksums too.
    #[arg(long)]
    pub deep: bool,
    /// Only this pool (name or id).
    #[arg(long)]
    pub pool: Option<String>,
    /// Bytes per second each server reads at most (default: no limit).
    #[arg(long)]
    pub rate: Option<String>,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// Runs `optio scrub`; returns the exit code.
pub fn run(args: Args) -> Result<u8> {
    crate::commands::init_logging("warn");
    let source = args.live.source()?;
    let runtime = crate::commands::runtime()?;
    runtime.block_on(async move {
        let map = source.load().await?;
        let mut query = ScrubQuery { deep: args.deep, ..ScrubQuery::default() };
        if let Some(pool) = &args.pool {
            let found = map
                .pool_by_name(pool)
                .or_else(|| pool.parse().ok().and_then(|id| map.pool(optio_placement::PoolId(id))));
            let Some(found) = found else {
                let names: Vec<&str> = map.pools().iter().map(|p| p.name.as_str()).collect();
                bail!("no pool '{pool}' in the map; its pools are {}", names.join(", "));
            };
            query.pool = Some(found.id.0);
        }
        if let Some(rate) = &args.rate {
            query.rate = Some(parse_size(rate).map_err(anyhow::Error::msg)?);
        }
        let mut addrs: Vec<String> =
            map.devices().iter().filter(|d| d.up).filter_map(|d| d.addr.clone()).collect();
        addrs.sort();
        addrs.dedup();
        let transport = args.live.transport()?;
        let answers =
            futures_util::future::join_all(addrs.iter().map(|a| transport.scrub(a, query))).await;
        let mut reports = Vec::new();
        let mut failed = Vec::new();
        for (addr, answer) in addrs.iter().zip(answers) {
            match answer {
                Ok(found) => reports.extend(found),
                Err(error) => failed.push(format!("{addr}: {error}")),
            }
        }
        reports.sort_by_key(|r| r.device);
        let unrepairable: u64 = reports.iter().map(|r| r.unrepairable).sum();
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "deep": args.deep, "devices": reports, "failed": failed,
                }))?
            );
        } else {
            let mut table = Table::new(&[
                "device",
                "objects",
                "read",
                "damaged",
                "stale",
                "repaired",
                "unrepairable",
                "unreachable",
                "seconds",
            ]);
            for r in &reports {
                table.row(vec![
                    format!("osd.{}", r.device),
                    r.objects.to_string(),
                    bytes(r.bytes_read as f64),
                    r.damaged.to_string(),
                    r.stale.to_string(),
                    r.repaired.to_string(),
                    r.unrepairable.to_string(),
                    r.unreachable.to_string(),
                    format!("{:.2}", r.seconds),
                ]);
            }
            println!(
                "{} scrub of {} device(s)",
                if args.deep { "deep" } else { "light" },
                reports.len()
            );
            print!("{}", table.render());
            for r in &reports {
                for problem in &r.problems {
                    println!("  osd.{}: {problem}", r.device);
                }
            }
            let sum = |f: fn(&optio_proto::ScrubReport) -> u64| reports.iter().map(f).sum::<u64>();
            println!(
                "{} damaged, {} stale, {} repaired, {unrepairable} unrepairable; {} tombstones collected",
                sum(|r| r.damaged),
                sum(|r| r.stale),
                sum(|r| r.repaired),
                sum(|r| r.tombstones_collected)
            );
        }
        if !failed.is_empty() {
            bail!("some servers could not scrub: {}", failed.join("; "));
        }
        Ok(if unrepairable > 0 { 2 } else { 0 })
    })
}
