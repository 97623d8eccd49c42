//! What `optio sim policies` takes.

/// Parameters of `optio sim policies`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Racks.
    #[arg(long, default_value_t = 4)]
    pub racks: u32,
    /// Hosts per rack.
    #[arg(long, default_value_t = 5)]
    pub hosts_per_rack: u32,
    /// Disks per host.
    #[arg(long, default_value_t = 4)]
    pub disks_per_host: u32,
    /// PGs of the pool.
    #[arg(long, default_value_t = 2048)]
    pub pg_num: u32,
    /// Replicas.
    #[arg(long, default_value_t = 3)]
    pub size: u32,
    /// Candidates per object.
    #[arg(long, default_value_t = 2)]
    pub choices: u32,
    /// Objects written per policy.
    #[arg(long, default_value_t = 200_000)]
    pub objects: u64,
    /// Bytes per object.
    #[arg(long, default_value_t = 4 << 20)]
    pub object_bytes: u64,
    /// Capacity of each disk.
    #[arg(long, default_value_t = 1 << 40)]
    pub disk_bytes: u64,
    /// Seed of the metric draws.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Which metrics: `static` (drawn once: the most favourable case for every policy),
    /// `changing` (moving between a decision and its effect, as in a real cluster), or both.
    #[arg(long, value_enum, default_value = "both")]
    pub metrics: MetricsMode,
    /// Changing metrics: objects written per policy.
    #[arg(long, default_value_t = 50_000)]
    pub changing_objects: u64,
    /// Changing metrics: one object is written every this many milliseconds.
    #[arg(long, default_value_t = 2.0)]
    pub interval_ms: f64,
    /// Changing metrics: how old the metrics a decision sees are (the probe), ms.
    #[arg(long, default_value_t = 1.0)]
    pub staleness_ms: f64,
    /// Changing metrics: the time from a decision to its block landing on the replicas (a
    /// 4 MiB block on 10 GbE: 3.4 ms).
    #[arg(long, default_value_t = 3.4)]
    pub effect_delay_ms: f64,
    /// Changing metrics: when an object is read after it is written, ms.
    #[arg(long, default_value_t = 10_000.0)]
    pub read_after_ms: f64,
    /// Changing metrics: the correlation time of a disk's transient load (latency, journal),
    /// ms.
    #[arg(long, default_value_t = 5.0)]
    pub transient_ms: f64,
    /// Changing metrics: the correlation time of a host's CPU utilisation, ms.
    #[arg(long, default_value_t = 1_000.0)]
    pub cpu_ms: f64,
    /// Changing metrics: the correlation time of a host's memory utilisation, ms.
    #[arg(long, default_value_t = 600_000.0)]
    pub memory_ms: f64,
    /// Changing metrics: how much a host's CPU utilisation slows a read (0.02: 2 % at 100 %).
    #[arg(long, default_value_t = 0.02)]
    pub cpu_sensitivity: f64,
}

/// Static metrics, changing ones, or both.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsMode {
    /// Drawn once.
    Static,
    /// Moving between a decision and its effect.
    Changing,
    /// Both tables.
    Both,
}
