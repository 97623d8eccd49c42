//! `optio bench io EXPERIMENT`: the seed papers' I/O experiments, scaled down, on an emulated
//! multi-rack cluster ([`optio_local::emulate`]): volumes served by `optio nbd` in client
//! hosts' namespaces, fio beside them, every byte between hosts over rate-limited links, and
//! the machine's CPU utilisation measured beside every result (docs/reproduction.md).

pub mod attributed;
pub mod choice;
mod context;
pub mod cpu;
pub mod crush;
pub mod elastic;
pub mod fio;
pub mod rig;
pub mod stats;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use optio_sim::Report;

pub use context::{Experiment, IoContext};

/// Where the servers' data goes by default: memory, or a disk for an experiment that
/// throttles one.
const MEMORY_TEMP: &str = "/dev/shm";
const DISK_TEMP: &str = "/var/tmp";

/// The smallest `--scale` (tests run at it).
pub const SCALE_MIN: f64 = 0.05;
/// The largest `--scale`.
pub const SCALE_MAX: f64 = 64.0;
/// Arguments of `optio bench io`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Needs root (network namespaces, tc, cgroup v1), fio and iproute2. Examples:
  optio bench io local --plot local.svg
  optio bench io memory --json
  optio bench io probe --runs 7
  optio bench io local --rack-link 50mbit     # sensitivity to the oversubscription
  optio bench io elastic --json --plot docs/io/elastic.svg
  optio bench io elastic --modes none,full,selective --runs 3

elastic (seed 004's 3-phase test, Fig. 7 and Table II) also needs redis-server: the elastic
pool's dirty table is a Redis the rig starts in the router's namespace. Its modes (--modes):
none (no resizing), original (consistent hashing: mark 4 servers out and wait for the
clean-up), full and selective (elastic CH, re-integrating everything or only the dirty
table's objects), all migrating under one rate limit; by default all four. --hot-fraction
sets the share of each volume phase 2 writes over and over (0.1; the selective
re-integration's advantage depends on it), --migration-rate the one budget every mode
migrates under (8MB/s; the paper's original CH migrated unthrottled):
  optio bench io elastic --hot-fraction 0.3 --modes full,selective
  optio bench io elastic --migration-rate 80MB/s --modes original,selective"
)]
pub struct Args {
    /// The experiment.
    #[arg(value_enum)]
    pub experiment: Experiment,
    /// Multiplies the data (volume sizes, objects, clients where the experiment has a range):
    /// 1 finishes in at most 10 minutes on a 2-core machine.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Repetitions of each measured run (the median is reported; default per experiment).
    #[arg(long)]
    pub runs: Option<u32>,
    /// Every host link's rate (e.g. 200mbit, 25MB/s), instead of the experiment's.
    #[arg(long, value_name = "RATE")]
    pub host_link: Option<String>,
    /// Every rack link's rate, instead of the experiment's.
    #[arg(long, value_name = "RATE")]
    pub rack_link: Option<String>,
    /// Keep the cluster directory here (default: a temporary directory under /dev/shm — under
    /// /var/tmp for `memory`, whose slow device is a throttled disk — removed at the end).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Draw the experiment's plots to FILE (.svg or .png; further plots to FILE-2, …).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// `elastic` only: the ways of resizing to run (comma-separated from none, original,
    /// full, selective; default: all four).
    #[arg(long, value_delimiter = ',', value_name = "MODES")]
    pub modes: Option<Vec<String>>,
    /// `elastic` only: the share of each volume phase 2 writes (its hot set), from 0.02 to
    /// 0.5 [default: 0.1].
    #[arg(long, value_name = "FRACTION")]
    pub hot_fraction: Option<f64>,
    /// `elastic` only: the migration budget of every mode (e.g. 8MB/s, 200mbit): the
    /// re-integration process's rate, a tenth of it per server for original consistent
    /// hashing's rebalancing [default: 8MB/s].
    #[arg(long, value_name = "RATE")]
    pub migration_rate: Option<String>,
}

/// The ways of resizing `--modes` names (all by default), each once, in its order.
fn elastic_modes(args: &Args) -> Result<Vec<super::resizing::Mode>> {
    use super::resizing::Mode;
    let Some(names) = &args.modes else {
        return Ok(Mode::ALL.to_vec());
    };
    if args.experiment != Experiment::Elastic {
        bail!("--modes is for `optio bench io elastic` only");
    }
    let mut modes = Vec::new();
    for name in names {
        let mode = Mode::parse(name, &Mode::ALL).context("--modes")?;
        if !modes.contains(&mode) {
            modes.push(mode);
        }
    }
    Ok(modes)
}

/// `--hot-fraction` and `--migration-rate`, checked (elastic only).
fn elastic_options(args: &Args) -> Result<elastic::Options> {
    let mut options = elastic::Options::default();
    if args.experiment != Experiment::Elastic {
        for (given, flag) in [
            (args.hot_fraction.is_some(), "--hot-fraction"),
            (args.migration_rate.is_some(), "--migration-rate"),
        ] {
            if given {
                bail!("{flag} is for `optio bench io elastic` only");
            }
        }
        return Ok(options);
    }
    if let Some(fraction) = args.hot_fraction {
        let range = elastic::HOT_FRACTION_RANGE;
        if !range.contains(&fraction) {
            bail!(
                "--hot-fraction {fraction} is out of range: from {} to {} (the share of each volume phase 2 writes)",
                range.start(),
                range.end()
            );
        }
        options.hot_fraction = fraction;
    }
    if let Some(bits) = rate(&args.migration_rate, "--migration-rate")? {
        let bytes = bits / 8;
        if bytes < MIGRATION_RATE_MIN {
            bail!(
                "--migration-rate {} is below the least, {} bytes/s (every server gets a tenth of it)",
                args.migration_rate.as_deref().unwrap_or_default(),
                MIGRATION_RATE_MIN
            );
        }
        options.migration_bytes_per_sec = bytes;
    }
    Ok(options)
}

/// The least `--migration-rate`, bytes per second.
const MIGRATION_RATE_MIN: u64 = 100_000;

fn rate(text: &Option<String>, flag: &str) -> Result<Option<u64>> {
    text.as_deref()
        .map(|t| {
            optio_local::emulate::spec::parse_rate_bits(t)
                .map_err(|e| anyhow::anyhow!("{flag}: {e}"))
        })
        .transpose()
}

pub fn run(args: Args) -> Result<()> {
    crate::commands::init_logging("error");
    if !(SCALE_MIN..=SCALE_MAX).contains(&args.scale) {
        bail!("--scale {} is out of range: from {SCALE_MIN} to {SCALE_MAX}", args.scale);
    }
    let modes = elastic_modes(&args)?;
    let elastic_options = elastic_options(&args)?;
    if args.experiment == Experiment::Elastic && !optio_local::redis::redis_installed() {
        bail!(
            "optio bench io elastic keeps the dirty table in Redis: install Debian's redis-server (apt-get install -y redis-server)"
        );
    }
    optio_local::emulate::available().context("optio bench io runs on an emulated cluster")?;
    // The servers' data: in memory (/dev/shm) unless the experiment throttles a disk (blkio
    // needs a block device): the runs write gigabytes, and the machine's disk is shared.
    let base = if args.experiment == Experiment::Memory { DISK_TEMP } else { MEMORY_TEMP };
    let temp = tempfile::Builder::new()
        .prefix("optio-io-")
        .tempdir_in(base)
        .or_else(|_| tempfile::tempdir())?;
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().join("cluster"));
    let context = IoContext {
        scale: args.scale,
        runs: args.runs,
        host_bits: rate(&args.host_link, "--host-link")?,
        rack_bits: rate(&args.rack_link, "--rack-link")?,
        dir,
        verbose: true,
    };
    let report: Report = match args.experiment {
        Experiment::Local
        | Experiment::Memory
        | Experiment::Cpu
        | Experiment::Latency
        | Experiment::Journal => choice::run(args.experiment, &context)?,
        Experiment::Probe => choice::probe(&context)?,
        Experiment::Attributed => attributed::run(&context)?,
        Experiment::Crush => crush::run(&context)?,
        Experiment::Elastic => elastic::run(&context, &modes, elastic_options)?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json)?);
    } else {
        print!("{}", report.render_text());
    }
    if let Some(path) = &args.plot {
        for file in report.draw(path).context("cannot draw the plots")? {
            eprintln!("wrote {}", file.display());
        }
    }
    Ok(())
}
