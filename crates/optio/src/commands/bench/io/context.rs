//! What every experiment of `optio bench io` is given: which one it is, its scale and
//! repetitions, link overrides and its directory.

use std::path::PathBuf;

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
    /// Elastic consistent hashing's 3-phase test (seed 004 Fig. 7, Table II) on volumes with
    /// the dirty table in Redis: no resizing, original CH, primary+full, primary+selective.
    Elastic,
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
            Experiment::Elastic => "elastic",
        }
    }
}

/// Most repetitions.
pub const RUNS_MAX: u32 = 50;

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
