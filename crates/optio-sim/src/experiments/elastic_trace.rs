//! `elastic-trace`: machine-hours relative to ideal of resizing a cluster along a load trace,
//! for "Original CH", "Primary+full" and "Primary+selective" (the elastic-CH paper's Table II).
//!
//! The paper's Cloudera traces are not public; this experiment runs documented synthetic
//! traces (fixed seeds) or a user's CSV (`time,load`).
//!
//! **Model.** Time advances in steps (one trace row each). Data volumes are in *server-steps*
//! (the IO one server does in one step). The cluster has `n` servers and stores `V = n · D`
//! server-steps of data copies (`D`: what one server stores at uniform layout). The load of a
//! step needs `d = ⌈n · load / peak load⌉` servers (at least 1): that is the *ideal*.
//!
//! * **Original CH** (consistent hashing, uniform layout, `ring` engine): shrinks one server at a
//!   time, and only after re-replicating the leaving server's data (`V / k`) with the spare IO
//!   of the active servers (`k − d` per step) — the clean-up the paper's Figure 2 shows; never
//!   below r servers. Growing from k to k′ migrates the data the new servers take, `f · V`.
//! * **Primary+full** (`elastic` engine): shrinks at once, down to p; growing migrates all data
//!   the re-activated servers hold in the layout, `f · V` (full re-integration).
//! * **Primary+selective**: the same, but growing migrates only the data written while the
//!   cluster was below full power (`f · dirty`; writes are `--write-fraction` of the load; the
//!   dirty table empties once the cluster is at full power with nothing left to migrate).
//!
//! `f` — the share of copies that change servers between two sizes — comes from the engines:
//! `ring` maps with the first k and k′ servers, and `elastic` placements as of membership
//! versions of k and k′ active servers, over `--sample` objects. Migration proceeds at most at
//! `--migration-rate` of the cluster's IO per step; the IO it uses beyond the spare servers'
//! needs servers of its own (the paper: "it requires powering on more servers to make up the IO
//! bandwidth consumed by data re-integration"). Machine-hours: Σ servers on × step length.

use std::collections::HashMap;

use optio_placement::engine::elastic::default_primaries;
use optio_placement::engine::ring::Ring;
use optio_placement::map::RingParams;
use optio_placement::{
    ActiveSpec, ClusterMap, ClusterMapBuilder, DeviceSpec, ElasticSpec, EngineRef, MembershipSpec,
    Placement, PoolId, PoolSpec, ReplicaSet, VersionSpec,
};
use serde_json::json;

use crate::report::{Plot, PlotKind, Report, Series, Table};
use crate::rng::Rng;
use crate::{Progress, SimError};

/// The paper's Table II: trace, Original CH, Primary+full, Primary+selective.
pub const PAPER_TABLE_II: [(&str, f64, f64, f64); 2] =
    [("CC-a", 1.32, 1.24, 1.21), ("CC-b", 1.51, 1.37, 1.33)];

/// Parameters of `optio sim elastic-trace`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Synthetic traces to run: diurnal, bursty (ignored with --trace).
    #[arg(long, value_delimiter = ',', default_value = "diurnal,bursty")]
    pub traces: Vec<String>,
    /// A CSV trace of `time,load` rows (a header line is allowed); time increasing.
    #[arg(long, value_name = "FILE.csv")]
    pub trace: Option<std::path::PathBuf>,
    /// Servers n.
    #[arg(long, default_value_t = 100)]
    pub servers: u32,
    /// Replicas r.
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Days of synthetic trace.
    #[arg(long, default_value_t = 7)]
    pub days: u32,
    /// Minutes per synthetic step.
    #[arg(long, default_value_t = 10)]
    pub step_minutes: u32,
    /// Seed of the synthetic traces (diurnal uses it, bursty uses it + 1).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// D: steps one server needs to read or write what it stores at uniform layout.
    #[arg(long, default_value_t = 12.0)]
    pub data_per_server_steps: f64,
    /// Share of the load that is writes.
    #[arg(long, default_value_t = 0.3)]
    pub write_fraction: f64,
    /// Most IO per step re-integration may use, as a share of the cluster's.
    #[arg(long, default_value_t = 0.1)]
    pub migration_rate: f64,
    /// Objects sampled to measure how much data a resize moves.
    #[arg(long, default_value_t = 4000)]
    pub sample: u32,
}

/// A load trace: (duration of the step in hours, load ≥ 0) per step.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Name for the report.
    pub name: String,
    /// Hours each step lasts.
    pub hours: Vec<f64>,
    /// Load of each step (any unit; the peak needs every server).
    pub load: Vec<f64>,
}

/// A diurnal trace: a daily cycle (trough around 03:00, peak around 15:00) from 10% to 100%
/// of the peak, shaped by a power of a cosine, weekdays 20% busier than weekends, with
/// Gaussian noise (σ 4% of the peak); seeded.
pub fn diurnal(days: u32, step_minutes: u32, seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let steps = (days * 24 * 60 / step_minutes.max(1)) as usize;
    let hours = f64::from(step_minutes) / 60.0;
    let load = (0..steps)
        .map(|i| {
            let t = i as f64 * hours;
            let day = (t / 24.0) as u32 % 7;
            let phase = (std::f64::consts::TAU * (t - 3.0) / 24.0).cos();
            let cycle = ((1.0 - phase) / 2.0).powf(1.5);
            let week = if day >= 5 { 0.8 } else { 1.0 };
            (0.1 + 0.9 * cycle * week + rng.normal(0.0, 0.04)).clamp(0.02, 1.0)
        })
        .collect();
    Trace { name: "diurnal".into(), hours: vec![hours; steps], load }
}

/// A bursty trace: a low base (10% of the peak, noise σ 2%) with bursts arriving at random
/// (exponential gaps, mean 4 hours), each lasting an exponential time (mean 40 minutes) at a
/// height uniform in 30%–90%; overlapping bursts add up, capped at the peak; seeded. It
/// resizes far more often than the diurnal trace, like the paper's CC-a.
pub fn bursty(days: u32, step_minutes: u32, seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let steps = (days * 24 * 60 / step_minutes.max(1)) as usize;
    let hours = f64::from(step_minutes) / 60.0;
    let mut load: Vec<f64> = (0..steps).map(|_| 0.1 + rng.normal(0.0, 0.02)).collect();
    let mut t = rng.exponential(4.0);
    let end = steps as f64 * hours;
    while t < end {
        let duration = rng.exponential(40.0 / 60.0).max(hours);
        let height = 0.3 + 0.6 * rng.next_f64();
        let (first, last) = ((t / hours) as usize, (((t + duration) / hours) as usize).min(steps));
        for value in &mut load[first.min(steps)..last] {
            *value += height;
        }
        t += rng.exponential(4.0);
    }
    for value in &mut load {
        *value = value.clamp(0.02, 1.0);
    }
    Trace { name: "bursty".into(), hours: vec![hours; steps], load }
}

/// Reads a `time,load` CSV: a header is allowed, blank lines and `#` comments are skipped;
/// times increase (any unit, read as hours for machine-hours); loads are finite and ≥ 0.
pub fn read_csv(name: &str, text: &str) -> Result<Trace, SimError> {
    let mut rows: Vec<(f64, f64)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| {
            SimError::Input(format!(
                "{name}: line {}: {what}; expected `time,load`, e.g. `0,0.35`",
                n + 1
            ))
        };
        let mut fields = line.split(',').map(str::trim);
        let (Some(time), Some(load), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(bad("not two comma-separated fields"));
        };
        let (Ok(time), Ok(load)) = (time.parse::<f64>(), load.parse::<f64>()) else {
            if rows.is_empty() {
                continue; // a header
            }
            return Err(bad("not two numbers"));
        };
        if !time.is_finite() || !load.is_finite() || load < 0.0 {
            return Err(bad("times must be finite and loads finite and at least 0"));
        }
        if rows.last().is_some_and(|(t, _)| time <= *t) {
            return Err(bad("times must increase"));
        }
        rows.push((time, load));
    }
    if rows.len() < 2 || rows.iter().all(|(_, l)| *l == 0.0) {
        return Err(SimError::Input(format!(
            "{name}: a trace needs at least two rows and some load"
        )));
    }
    let mut hours: Vec<f64> = rows.windows(2).map(|w| w[1].0 - w[0].0).collect();
    hours.push(*hours.last().expect("two rows at least"));
    Ok(Trace { name: name.to_string(), hours, load: rows.into_iter().map(|(_, l)| l).collect() })
}

/// Shares of copies that change servers between two cluster sizes, measured on the engines.
struct Movement {
    n: u32,
    replicas: u32,
    sample: u32,
    /// `elastic` with a version per active count p..=n.
    elastic: (ClusterMap, Placement),
    /// Ring placements with the first k servers, by k.
    rings: HashMap<u32, Vec<ReplicaSet>>,
    elastic_cache: HashMap<(u32, u32), f64>,
    ring_cache: HashMap<(u32, u32), f64>,
    p: u32,
}

impl Movement {
    fn new(args: &Args) -> Result<Movement, SimError> {
        let p = default_primaries(args.servers);
        let mut builder = ClusterMapBuilder::new();
        for id in 0..args.servers {
            builder = builder.device(DeviceSpec::new(id).capacity(1 << 40));
        }
        builder.membership = Some(MembershipSpec {
            order: Vec::new(),
            versions: (p..=args.servers)
                .map(|k| VersionSpec {
                    version: Some(u64::from(k)),
                    active: ActiveSpec::FirstRanks(k),
                })
                .collect(),
        });
        let map = builder
            .pool(PoolSpec {
                engine: EngineRef::Elastic(ElasticSpec {
                    primaries: Some(p),
                    scale: Some(1 << 16),
                }),
                ..PoolSpec::crush(1, "elastic", 0, args.replicas)
            })
            .build()?;
        let placement = Placement::new(&map)?;
        Ok(Movement {
            n: args.servers,
            replicas: args.replicas,
            sample: args.sample,
            elastic: (map, placement),
            rings: HashMap::new(),
            elastic_cache: HashMap::new(),
            ring_cache: HashMap::new(),
            p,
        })
    }

    fn key(i: u32) -> u32 {
        optio_placement::crush::hash::hash32_2(i, 0x7ace)
    }

    /// Share of copies that move between `k` and `k2` active servers of the elastic layout.
    fn elastic(&mut self, k: u32, k2: u32) -> f64 {
        let (k, k2) = (k.clamp(self.p, self.n), k2.clamp(self.p, self.n));
        if k == k2 {
            return 0.0;
        }
        if let Some(f) = self.elastic_cache.get(&(k, k2)) {
            return *f;
        }
        let pool = self.elastic.1.pool(PoolId(1)).expect("pool 1");
        let (mut a, mut b) = (ReplicaSet::new(), ReplicaSet::new());
        let (mut moved, mut copies) = (0u64, 0u64);
        for i in 0..self.sample {
            pool.place_as_of(u64::from(k), Movement::key(i), &mut a);
            pool.place_as_of(u64::from(k2), Movement::key(i), &mut b);
            moved += b.devices().filter(|d| !a.contains(*d)).count() as u64;
            copies += b.len() as u64;
        }
        let f = moved as f64 / copies.max(1) as f64;
        self.elastic_cache.insert((k, k2), f);
        f
    }

    fn ring_sets(&mut self, k: u32) -> &Vec<ReplicaSet> {
        let (n, replicas, sample) = (self.n, self.replicas, self.sample);
        self.rings.entry(k).or_insert_with(|| {
            let mut builder = ClusterMapBuilder::new();
            for id in 0..n {
                let mut device = DeviceSpec::new(id).capacity(1 << 40);
                device.is_in = id < k;
                builder = builder.device(device);
            }
            let map = builder.build().expect("a devices-only map is valid");
            let ring = Ring::new(&map, &RingParams { vnode_bytes: 8 << 30, failure_domain: None });
            (0..sample)
                .map(|i| {
                    let mut set = ReplicaSet::new();
                    ring.place(Movement::key(i), replicas as usize, &mut set);
                    set
                })
                .collect()
        })
    }

    /// Share of copies that move between rings of the first `k` and `k2` servers.
    fn ring(&mut self, k: u32, k2: u32) -> f64 {
        let (k, k2) = (k.clamp(1, self.n), k2.clamp(1, self.n));
        if k == k2 {
            return 0.0;
        }
        if let Some(f) = self.ring_cache.get(&(k, k2)) {
            return *f;
        }
        let before = self.ring_sets(k).clone();
        let after = self.ring_sets(k2);
        let (mut moved, mut copies) = (0u64, 0u64);
        for (a, b) in before.iter().zip(after) {
            moved += b.devices().filter(|d| !a.contains(*d)).count() as u64;
            copies += b.len() as u64;
        }
        let f = moved as f64 / copies.max(1) as f64;
        self.ring_cache.insert((k, k2), f);
        f
    }
}

/// The policies compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    OriginalCh,
    PrimaryFull,
    PrimarySelective,
}

impl Policy {
    fn name(self) -> &'static str {
        match self {
            Policy::OriginalCh => "Original CH",
            Policy::PrimaryFull => "Primary+full",
            Policy::PrimarySelective => "Primary+selective",
        }
    }
}

/// The outcome of one policy on one trace.
struct Run {
    machine_hours: f64,
    servers: Vec<f64>,
    migrated: f64,
    cleanup: f64,
}

/// Simulates `policy` along `trace`, whose steps need `demand` servers and whose loads are
/// `shares` of the peak.
fn simulate(
    policy: Policy,
    trace: &Trace,
    (demand, shares): (&[u32], &[f64]),
    args: &Args,
    movement: &mut Movement,
) -> Run {
    let n = args.servers;
    let volume = f64::from(n) * args.data_per_server_steps;
    let minimum = match policy {
        Policy::OriginalCh => args.replicas.min(n),
        _ => movement.p,
    };
    let rate_cap = args.migration_rate * f64::from(n);
    let (mut k, mut pending, mut dirty, mut cleanup_done) = (n, 0.0f64, 0.0f64, 0.0f64);
    let (mut machine_hours, mut migrated, mut cleanup) = (0.0, 0.0, 0.0);
    let mut servers = Vec::with_capacity(demand.len());
    for (step, &d) in demand.iter().enumerate() {
        let target = d.max(minimum).min(n);
        if target > k {
            let f = match policy {
                Policy::OriginalCh => movement.ring(k, target),
                _ => movement.elastic(k, target),
            };
            pending += f * match policy {
                Policy::PrimarySelective => dirty,
                _ => volume,
            };
            k = target;
            cleanup_done = 0.0;
        } else if target < k {
            match policy {
                Policy::OriginalCh => {
                    // Re-replicate a leaving server's copies with the spare IO, one at a time.
                    cleanup_done += f64::from(k - d.min(k));
                    cleanup += f64::from(k - d.min(k));
                    while k > target && cleanup_done >= volume / f64::from(k) {
                        cleanup_done -= volume / f64::from(k);
                        k -= 1;
                    }
                }
                _ => k = target,
            }
        }
        // Re-integration: rate-limited; beyond the spare servers it needs servers of its own.
        let work = pending.min(rate_cap);
        pending -= work;
        migrated += work;
        let spare = f64::from(k - d.min(k));
        let extra = (work - spare).max(0.0).ceil();
        let on = f64::from(k) + extra;
        servers.push(on);
        machine_hours += on * trace.hours[step];
        // Writes below full power are dirty until re-integrated at full power.
        if k < n {
            dirty = (dirty + args.write_fraction * shares[step] * f64::from(n)).min(volume);
        } else if pending <= 0.0 {
            dirty = 0.0;
        }
    }
    Run { machine_hours, servers, migrated, cleanup }
}

/// Runs the experiment.
pub fn run(args: &Args, progress: &mut dyn Progress) -> Result<Report, SimError> {
    if args.servers < 2
        || args.servers > 10_000
        || args.replicas == 0
        || args.replicas > args.servers.min(32)
    {
        return Err(SimError::Parameter {
            parameter: "--servers/--replicas",
            reason: "2 to 10000 servers and 1 to min(servers, 32) replicas".into(),
        });
    }
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(args.data_per_server_steps)
        || !positive(args.migration_rate)
        || !(0.0..=1.0).contains(&args.write_fraction)
        || args.sample == 0
        || args.days == 0
        || args.step_minutes == 0
    {
        return Err(SimError::Parameter {
            parameter: "--data-per-server-steps/--migration-rate/--write-fraction/--sample/--days/--step-minutes",
            reason: "positive numbers (the write fraction from 0 to 1)".into(),
        });
    }
    let traces: Vec<Trace> = match &args.trace {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| SimError::Input(format!("{}: {e}", path.display())))?;
            vec![read_csv(&path.display().to_string(), &text)?]
        }
        None => args
            .traces
            .iter()
            .map(|name| match name.as_str() {
                "diurnal" => Ok(diurnal(args.days, args.step_minutes, args.seed)),
                "bursty" => Ok(bursty(args.days, args.step_minutes, args.seed + 1)),
                other => Err(SimError::Parameter {
                    parameter: "--traces",
                    reason: format!("'{other}': use diurnal, bursty, or --trace FILE.csv"),
                }),
            })
            .collect::<Result<_, _>>()?,
    };
    let mut movement = Movement::new(args)?;
    let policies = [Policy::OriginalCh, Policy::PrimaryFull, Policy::PrimarySelective];
    progress.start("simulating", (traces.len() * policies.len()) as u64);
    let mut table = Table::new(
        &format!(
            "machine-hours relative to ideal: n = {}, p = {}, r = {}, D = {} steps, writes {:.0}%, re-integration at most {:.0}% of the IO",
            args.servers,
            movement.p,
            args.replicas,
            args.data_per_server_steps,
            100.0 * args.write_fraction,
            100.0 * args.migration_rate
        ),
        &[
            "trace",
            "steps",
            "resizes",
            "ideal",
            "Original CH",
            "Primary+full",
            "Primary+selective",
            "full saves",
            "selective saves",
        ],
    );
    let mut json_traces = Vec::new();
    let mut plots = Vec::new();
    for trace in &traces {
        let peak = trace.load.iter().copied().fold(0.0f64, f64::max);
        let demand: Vec<u32> = trace
            .load
            .iter()
            .map(|l| ((f64::from(args.servers) * l / peak).ceil() as u32).clamp(1, args.servers))
            .collect();
        let ideal: f64 = demand.iter().zip(&trace.hours).map(|(d, h)| f64::from(*d) * h).sum();
        let resizes = demand.windows(2).filter(|w| w[0] != w[1]).count();
        let shares: Vec<f64> = trace.load.iter().map(|l| l / peak).collect();
        let mut results = Vec::new();
        for policy in policies {
            results
                .push((policy, simulate(policy, trace, (&demand, &shares), args, &mut movement)));
            progress.advance(1);
        }
        let relative: Vec<f64> = results.iter().map(|(_, r)| r.machine_hours / ideal).collect();
        table.row(vec![
            trace.name.clone(),
            demand.len().to_string(),
            resizes.to_string(),
            format!("{ideal:.0} h"),
            format!("{:.2}", relative[0]),
            format!("{:.2}", relative[1]),
            format!("{:.2}", relative[2]),
            format!("{:.1}%", 100.0 * (1.0 - relative[1] / relative[0])),
            format!("{:.1}%", 100.0 * (1.0 - relative[2] / relative[0])),
        ]);
        // The first two days of servers on, per policy.
        let mut hours_so_far = 0.0;
        let times: Vec<f64> = trace
            .hours
            .iter()
            .map(|h| {
                let t = hours_so_far;
                hours_so_far += h;
                t
            })
            .collect();
        let window = times.iter().take_while(|t| **t < 48.0).count().max(2);
        let mut series = vec![Series {
            name: "ideal".into(),
            points: times
                .iter()
                .zip(&demand)
                .take(window)
                .map(|(t, d)| (*t, f64::from(*d)))
                .collect(),
        }];
        for (policy, run) in &results {
            series.push(Series {
                name: policy.name().into(),
                points: times
                    .iter()
                    .zip(&run.servers)
                    .take(window)
                    .map(|(t, s)| (*t, *s))
                    .collect(),
            });
        }
        plots.push(Plot {
            title: format!("{}: servers on, first 48 hours", trace.name),
            kind: PlotKind::Line,
            x_label: "hours".into(),
            y_label: "servers".into(),
            series,
            log_x: false,
        });
        json_traces.push(json!({
            "trace": trace.name,
            "steps": demand.len(),
            "resizes": resizes,
            "ideal_machine_hours": ideal,
            "policies": results.iter().zip(&relative).map(|((policy, run), rel)| json!({
                "policy": policy.name(),
                "machine_hours": run.machine_hours,
                "relative_to_ideal": rel,
                "migrated_server_steps": run.migrated,
                "cleanup_server_steps": run.cleanup,
            })).collect::<Vec<_>>(),
        }));
    }
    let mut paper = Table::new(
        "the paper's Table II (Cloudera traces, not public), for comparison",
        &[
            "trace",
            "Original CH",
            "Primary+full",
            "Primary+selective",
            "full saves",
            "selective saves",
        ],
    );
    for (name, original, full, selective) in PAPER_TABLE_II {
        paper.row(vec![
            name.to_string(),
            format!("{original:.2}"),
            format!("{full:.2}"),
            format!("{selective:.2}"),
            format!("{:.1}%", 100.0 * (1.0 - full / original)),
            format!("{:.1}%", 100.0 * (1.0 - selective / original)),
        ]);
    }
    Ok(Report {
        title: "elastic-trace: resizing along a load trace (the elastic-CH paper's Table II)".into(),
        tables: vec![table, paper],
        notes: vec![
            "Synthetic traces (not the paper's): diurnal = daily cycle 10-100% with quieter weekends and noise; bursty = 10% base with random bursts every ~4 h lasting ~40 min (frequent resizing, like CC-a). Both seeded (--seed); --trace FILE.csv brings your own.".into(),
            "The ordering Original CH > Primary+full > Primary+selective > 1 is the comparable result; absolute ratios depend on the trace and on D, the write share and the re-integration rate (see the module documentation of elastic_trace for the model).".into(),
            format!(
                "Primary policies cannot go below p = {} servers (the equal-work layout's minimum), which bounds how close to ideal they get on traces with long idle periods; Original CH shrinks one server at a time after re-replicating its data.",
                movement.p
            ),
        ],
        json: json!({ "experiment": "elastic-trace", "servers": args.servers, "primaries": movement.p, "replicas": args.replicas, "traces": json_traces, "paper_table_ii": PAPER_TABLE_II.iter().map(|(t, a, b, c)| json!({"trace": t, "original_ch": a, "primary_full": b, "primary_selective": c})).collect::<Vec<_>>() }),
        plots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    fn args() -> Args {
        Args {
            traces: vec!["diurnal".into(), "bursty".into()],
            trace: None,
            servers: 40,
            replicas: 3,
            days: 2,
            step_minutes: 15,
            seed: 1,
            data_per_server_steps: 12.0,
            write_fraction: 0.3,
            migration_rate: 0.1,
            sample: 1000,
        }
    }

    #[test]
    fn selective_beats_full_beats_original() {
        let report = run(&args(), &mut NoProgress).expect("runs");
        for trace in report.json["traces"].as_array().expect("traces") {
            let rel: Vec<f64> = trace["policies"]
                .as_array()
                .expect("policies")
                .iter()
                .map(|p| p["relative_to_ideal"].as_f64().expect("number"))
                .collect();
            assert!(
                rel[0] > rel[1] && rel[1] > rel[2] && rel[2] >= 1.0,
                "{}: {rel:?}",
                trace["trace"]
            );
        }
    }

    #[test]
    fn traces_are_seeded_and_csv_is_checked() {
        assert_eq!(diurnal(1, 10, 3).load, diurnal(1, 10, 3).load);
        assert_ne!(bursty(1, 10, 3).load, bursty(1, 10, 4).load);
        let trace = read_csv("t", "time,load\n0,0.5\n1,1.0\n# done\n3,0.25\n").expect("valid");
        assert_eq!(trace.load, vec![0.5, 1.0, 0.25]);
        assert_eq!(trace.hours, vec![1.0, 2.0, 2.0]);
        for bad in ["0,1\n", "0,1\n0,2\n", "0,1\n1,-2\n", "0,1\n1,x\n", "0,1,2\n1,1\n"] {
            let error = read_csv("t", bad).expect_err(bad).to_string();
            assert!(error.contains("t"), "{error}");
        }
        let error = read_csv("t", "0,1\n1,x\n").expect_err("bad").to_string();
        assert!(error.contains("line 2") && error.contains("time,load"), "{error}");
    }
}
