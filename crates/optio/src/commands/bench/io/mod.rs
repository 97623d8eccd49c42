//! `optio bench io EXPERIMENT`: the seed papers' I/O experiments, scaled down, on an emulated
//! multi-rack cluster ([`optio_local::emulate`]): volumes served by `optio nbd` in client
//! hosts' namespaces, fio beside them, every byte between hosts over rate-limited links, and
//! the machine's CPU utilisation measured beside every result (docs/reproduction.md).

pub mod attributed;
pub mod choice;
pub mod cpu;
pub mod crush;
pub mod fio;
pub mod rig;
pub mod stats;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use optio_sim::Report;

/// The experiments.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Experiment {
    /// CHOICE's local policy (seed 000 Fig. 2a, Table 2): sequential 4 MiB reads by clients in
    /// every rack, `first` vs `local`; also co-located clients with local reads.
    Local,
    /// CHOICE's memory policy (Fig. 2b, Table 3): memory pressure on two hosts.
    Memory,
    /// CHOICE's cpu policy (Fig. 2c): a CPU hog on two hosts.
    Cpu,
    /// CHOICE's latency policy (Fig. 2d, Table 4): writes with 10 jobs per volume.
    Latency,
    /// CHOICE's journal policy (Fig. 2d, Table 4): writes with 10 jobs per volume.
    Journal,
    /// CHOICE's probing overhead (§5.2, Fig. 3): first 4 KiB writes into never-written 4 MiB
    /// objects and 4 MiB sequential writes, k = 2 against k = 1.
    Probe,
    /// Attributed consistent hashing (seed 003 Fig. 6a): random 256 KiB reads by 1, 2, 4…
    /// clients × 16 jobs on slow and fast devices: ring, crush, attributed.
    Attributed,
    /// Optimised CRUSH's I/O effect (seed 002): random reads on slow devices; the busiest
    /// device's share of the bytes served, crush vs seed 002's vs incremental.
    Crush,
}

impl Experiment {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Local => "local",
            Experiment::Memory => "memory",
            Experiment::Cpu => "cpu",
            Experiment::Latency => "latency",
            Experiment::Journal => "journal",
            Experiment::Probe => "probe",
            Experiment::Attributed => "attributed",
            Experiment::Crush => "crush",
        }
    }
}

/// Where the servers' data goes by default: memory, or a disk for an experiment that
/// throttles one.
const MEMORY_TEMP: &str = "/dev/shm";
const DISK_TEMP: &str = "/var/tmp";

/// The smallest `--scale` (tests run at it).
pub const SCALE_MIN: f64 = 0.05;
/// The largest `--scale`.
pub const SCALE_MAX: f64 = 64.0;
/// Most repetitions.
pub const RUNS_MAX: u32 = 50;

/// Arguments of `optio bench io`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Needs root (network namespaces, tc, cgroup v1), fio and iproute2. Examples:
  optio bench io local --plot local.svg
  optio bench io memory --json
  optio bench io probe --runs 7
  optio bench io local --rack-link 50mbit     # sensitivity to the oversubscription"
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
}

/// What every experiment gets.
pub struct IoContext {
    /// The scale.
    pub scale: f64,
    /// Repetitions (`None`: the experiment's default).
    pub runs: Option<u32>,
    /// Link overrides, bits per second.
    pub host_bits: Option<u64>,
    /// Rack link override, bits per second.
    pub rack_bits: Option<u64>,
    /// The cluster directory.
    pub dir: PathBuf,
    /// Progress to standard error.
    pub verbose: bool,
}

impl IoContext {
    /// The repetitions, `default` unless given.
    pub fn runs(&self, default: u32) -> u32 {
        self.runs.unwrap_or(default).clamp(1, RUNS_MAX)
    }

    /// `base` scaled, at least `min`.
    pub fn scaled(&self, base: u64, min: u64) -> u64 {
        ((base as f64 * self.scale) as u64).max(min)
    }

    /// Progress.
    pub fn say(&self, text: impl AsRef<str>) {
        if self.verbose {
            eprintln!("bench io: {}", text.as_ref());
        }
    }
}

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
