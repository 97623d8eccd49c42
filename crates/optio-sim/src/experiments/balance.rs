//! Balance and movement of four ways to place a crush pool's PGs: stock CRUSH, seed 002's
//! optimised CRUSH (congruential pps, `linear` hosts, searched balance parameter), Optio's
//! history-free balanced placement (`balanced = true`) and Optio's incremental balanced
//! placement (`balanced = "incremental"`, per-device state in the map) — on 40 OSDs in 4 hosts
//! and on 1,000 OSDs in 10 racks × 10 hosts × 10, with 2,048 and 32,768 PGs and 2 and 3
//! replicas.
//!
//! Balance: PGs per OSD (stdev, max/mean) over the OSDs that can hold the pool. Movement: PG
//! copies that change OSD when one OSD is added to a host, removed from the map, or reweighted
//! to 0.5, against the least any placement must move for that change
//! (`analysis::movement`); each change is tried on `--trials` different OSDs and averaged.
//! Seed 002's balance parameter is searched once on the base map and kept, as the seed
//! stores it with the pool; the incremental method's changed map carries the base map's
//! balance state, and the map builder rebalances from it (the path every map edit takes).

use std::time::Instant;

use optio_placement::analysis::movement;
use optio_placement::engine::balanced::incremental::BalanceState;
use optio_placement::stats::Summary;
use optio_placement::{
    BalanceMethod, BucketAlg, ClusterMap, ClusterMapBuilder, DeviceSpec, LinearParamSpec,
    Placement, PoolId, PoolSpec, PpsGenerator, Weight,
};
use serde_json::{Value, json};

use crate::report::{Plot, PlotKind, Report, Series, Table};
use crate::{Progress, SimError};

/// Parameters of `optio sim balance`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Maps: `40` (4 hosts × 10 OSDs) and/or `1000` (10 racks × 10 hosts × 10 OSDs).
    #[arg(long, value_delimiter = ',', default_value = "40,1000")]
    pub maps: Vec<u32>,
    /// PGs of the pool.
    #[arg(long = "pg-nums", value_delimiter = ',', default_value = "2048,32768")]
    pub pg_nums: Vec<u32>,
    /// Replicas.
    #[arg(long, value_delimiter = ',', default_value = "2,3")]
    pub sizes: Vec<u32>,
    /// Methods: `crush`, `seed002`, `optio` (history-free balanced), `incremental`.
    #[arg(long, value_delimiter = ',', default_value = "crush,seed002,optio,incremental")]
    pub methods: Vec<String>,
    /// OSDs each change (add, remove, reweight) is tried on; movement is averaged.
    #[arg(long, default_value_t = 3)]
    pub trials: u32,
    /// Pool id (hashed into CRUSH's inputs).
    #[arg(long, default_value_t = 1)]
    pub pool_id: u32,
}

/// Most trials per change.
pub const TRIALS_MAX: u32 = 64;

/// A cluster shape: racks (0: hosts directly under the root) × hosts × OSDs.
#[derive(Clone, Copy, Debug)]
struct Shape {
    racks: u32,
    hosts: u32,
    osds: u32,
}

impl Shape {
    fn of(map: u32) -> Result<Shape, SimError> {
        match map {
            40 => Ok(Shape { racks: 0, hosts: 4, osds: 10 }),
            1000 => Ok(Shape { racks: 10, hosts: 10, osds: 10 }),
            other => Err(SimError::Parameter {
                parameter: "--maps",
                reason: format!("unknown map '{other}'; use 40 and/or 1000"),
            }),
        }
    }

    fn devices(&self) -> u32 {
        self.racks.max(1) * self.hosts * self.osds
    }

    fn name(&self) -> String {
        if self.racks == 0 {
            format!("{} OSDs ({} hosts × {})", self.devices(), self.hosts, self.osds)
        } else {
            format!(
                "{} OSDs ({} racks × {} hosts × {})",
                self.devices(),
                self.racks,
                self.hosts,
                self.osds
            )
        }
    }

    fn location(&self, host: u32) -> Vec<(String, String)> {
        let mut location = vec![("host".to_string(), format!("host{host}"))];
        if self.racks > 0 {
            location.push(("rack".to_string(), format!("rack{}", host / self.hosts)));
        }
        location
    }
}

/// The way PGs are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Crush,
    Seed002,
    Optio,
    Incremental,
}

impl Method {
    fn parse(name: &str) -> Result<Method, SimError> {
        match name {
            "crush" => Ok(Method::Crush),
            "seed002" => Ok(Method::Seed002),
            "optio" => Ok(Method::Optio),
            "incremental" => Ok(Method::Incremental),
            other => Err(SimError::Parameter {
                parameter: "--methods",
                reason: format!(
                    "unknown method '{other}'; use crush, seed002, optio and/or incremental"
                ),
            }),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Method::Crush => "crush",
            Method::Seed002 => "seed002",
            Method::Optio => "optio",
            Method::Incremental => "incremental",
        }
    }
}

/// A change of one OSD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// A new OSD in host `n`.
    Add(u32),
    /// OSD `n` leaves the map.
    Remove(u32),
    /// OSD `n` gets reweight 0.5.
    Reweight(u32),
}

impl Change {
    fn kind(self) -> &'static str {
        match self {
            Change::Add(_) => "add",
            Change::Remove(_) => "remove",
            Change::Reweight(_) => "reweight",
        }
    }
}

/// The changes of trial `trial`: spread over hosts and OSDs by fixed strides.
fn changes(shape: &Shape, trial: u32) -> [Change; 3] {
    let hosts = shape.racks.max(1) * shape.hosts;
    let n = shape.devices();
    [
        Change::Add(trial.wrapping_mul(7) % hosts),
        Change::Remove((trial.wrapping_mul(37) + 3) % n),
        Change::Reweight((trial.wrapping_mul(53) + 11) % n),
    ]
}

/// The devices of `shape` after `change`.
fn devices(shape: &Shape, change: Option<Change>) -> Vec<DeviceSpec> {
    let hosts = shape.racks.max(1) * shape.hosts;
    let mut devices = Vec::new();
    for id in 0..shape.devices() {
        if change == Some(Change::Remove(id)) {
            continue;
        }
        let mut device = DeviceSpec::new(id);
        let location = shape.location(id / shape.osds);
        device.location = location;
        if change == Some(Change::Reweight(id)) {
            device.reweight = Weight(0x8000);
        }
        devices.push(device);
    }
    if let Some(Change::Add(host)) = change {
        let mut device = DeviceSpec::new(shape.devices());
        device.location = shape.location(host % hosts);
        devices.push(device);
    }
    devices
}

/// The map of `method` for `shape` after `change`; seed 002 uses `param` (or searches), the
/// incremental method rebalances from `state` (from scratch without one).
fn cluster(
    shape: &Shape,
    method: Method,
    change: Option<Change>,
    pool: &PoolSpec,
    param: Option<u32>,
    state: Option<&BalanceState>,
) -> Result<ClusterMap, SimError> {
    let mut builder = ClusterMapBuilder::new();
    builder.devices = devices(shape, change);
    let mut pool = pool.clone();
    if method == Method::Optio {
        pool.balance.balanced = BalanceMethod::HistoryFree;
    }
    if method == Method::Incremental {
        pool.balance.balanced = BalanceMethod::Incremental;
        pool.balance.state = state.cloned();
    }
    let builder = builder.replicated_rule(0, "replicated_rule", "default", "host");
    if method != Method::Seed002 {
        return Ok(builder.pool(pool).build()?);
    }
    // Seed 002: the same hierarchy with linear hosts, the congruential generator and the
    // searched (or kept) balance parameter.
    let mut linear = builder.build()?.to_builder();
    for bucket in &mut linear.buckets {
        if bucket.type_name == "host" {
            bucket.alg = BucketAlg::Linear;
        }
    }
    pool.balance.pps = PpsGenerator::Congruential;
    pool.balance.linear_param = match param {
        Some(param) => LinearParamSpec::Fixed(param),
        None => LinearParamSpec::Auto,
    };
    Ok(linear.pool(pool).build()?)
}

/// PG copies per usable OSD of the pool.
fn pg_counts(map: &ClusterMap, placement: &Placement, pool: PoolId) -> Vec<f64> {
    let pool = placement.pool(pool).expect("the experiment's maps have the pool");
    let mut counts = vec![0u64; map.max_devices() as usize];
    let mut scratch = placement.scratch();
    let mut set = optio_placement::ReplicaSet::new();
    for seed in 0..pool.pool().pg_num {
        pool.place(pool.pg_key(seed), &mut scratch, &mut set);
        for device in set.devices() {
            counts[device.0 as usize] += 1;
        }
    }
    map.devices().iter().filter(|d| d.is_usable()).map(|d| counts[d.id.0 as usize] as f64).collect()
}

/// One method on one configuration.
struct Outcome {
    method: Method,
    summary: Summary,
    /// Milliseconds to compute the base placement (Placement::new; for seed 002 the map build,
    /// which runs the search).
    compute_ms: f64,
    /// For the incremental method: milliseconds to build the base map (the state from
    /// scratch) and, averaged over the changes, to build a changed map (the rebalance from the
    /// base map's state).
    state_ms: Option<(f64, f64)>,
    linear_param: Option<f64>,
    /// Per change kind: (moved, minimum), averaged over trials.
    movement: [(f64, f64); 3],
}

fn run_method(
    shape: &Shape,
    method: Method,
    pool: &PoolSpec,
    trials: u32,
    progress: &mut dyn Progress,
) -> Result<Outcome, SimError> {
    let started = Instant::now();
    let base = cluster(shape, method, None, pool, None, None)?;
    let built_ms = started.elapsed().as_secs_f64() * 1000.0;
    let placed = Instant::now();
    let placement = Placement::new(&base)?;
    let compute_ms = if method == Method::Incremental {
        placed.elapsed().as_secs_f64() * 1000.0
    } else {
        started.elapsed().as_secs_f64() * 1000.0
    };
    let param = base.pool(pool.id).map(|p| p.balance().linear_param);
    let state = base.pool(pool.id).and_then(|p| p.balance_state().cloned());
    let mut rebalance_ms = 0.0;
    let summary = Summary::of(&pg_counts(&base, &placement, pool.id));
    progress.advance(1);
    let mut movement_sum = [(0.0, 0.0); 3];
    for trial in 0..trials {
        for (slot, change) in changes(shape, trial).into_iter().enumerate() {
            let rebalanced = Instant::now();
            let changed = cluster(shape, method, Some(change), pool, param, state.as_ref())?;
            rebalance_ms += rebalanced.elapsed().as_secs_f64() * 1000.0;
            let changed_placement = Placement::new(&changed)?;
            let m = movement(
                &base,
                &placement,
                &changed,
                &changed_placement,
                placement.pool(pool.id).expect("pool"),
                changed_placement.pool(pool.id).expect("pool"),
                0,
                1,
                &mut |_| {},
            );
            movement_sum[slot].0 += m.moved as f64;
            movement_sum[slot].1 += m.minimum_copies();
            debug_assert_eq!(change.kind(), ["add", "remove", "reweight"][slot]);
            progress.advance(1);
        }
    }
    let trials = f64::from(trials.max(1));
    Ok(Outcome {
        method,
        summary,
        compute_ms,
        state_ms: (method == Method::Incremental)
            .then(|| (built_ms, rebalance_ms / (3.0 * trials))),
        linear_param: (method == Method::Seed002)
            .then(|| param.map(|p| f64::from(p) / 65536.0))
            .flatten(),
        movement: movement_sum.map(|(moved, minimum)| (moved / trials, minimum / trials)),
    })
}

fn ratio(moved: f64, minimum: f64) -> f64 {
    if minimum > 0.0 {
        moved / minimum
    } else if moved == 0.0 {
        1.0
    } else {
        f64::INFINITY
    }
}

/// Runs the experiment.
pub fn run(args: &Args, progress: &mut dyn Progress) -> Result<Report, SimError> {
    let shapes: Vec<(u32, Shape)> =
        args.maps.iter().map(|&m| Shape::of(m).map(|s| (m, s))).collect::<Result<_, _>>()?;
    let methods: Vec<Method> =
        args.methods.iter().map(|m| Method::parse(m)).collect::<Result<_, _>>()?;
    if args.trials == 0 || args.trials > TRIALS_MAX {
        return Err(SimError::Parameter {
            parameter: "--trials",
            reason: format!("between 1 and {TRIALS_MAX}"),
        });
    }
    for &size in &args.sizes {
        if !(1..=4).contains(&size) {
            return Err(SimError::Parameter {
                parameter: "--sizes",
                reason: format!("{size}: the maps have 4 or more hosts; use 1 to 4 replicas"),
            });
        }
    }
    for &pg_num in &args.pg_nums {
        if pg_num == 0 || pg_num > 1 << 20 {
            return Err(SimError::Parameter {
                parameter: "--pg-nums",
                reason: format!("{pg_num}: between 1 and 1048576"),
            });
        }
    }
    let configs = shapes.len() * args.pg_nums.len() * args.sizes.len();
    progress.start("placing", (configs * methods.len()) as u64 * (1 + 3 * u64::from(args.trials)));
    let mut tables = Vec::new();
    let mut results = Vec::new();
    let mut stdev_series: Vec<Series> =
        methods.iter().map(|m| Series { name: m.name().into(), points: Vec::new() }).collect();
    let mut ratio_series: Vec<Series> =
        methods.iter().map(|m| Series { name: m.name().into(), points: Vec::new() }).collect();
    let mut config_index = 0usize;
    let mut labels = Vec::new();
    for (map_name, shape) in &shapes {
        for &pg_num in &args.pg_nums {
            for &size in &args.sizes {
                let pool = PoolSpec::crush(args.pool_id, "pool", pg_num, size);
                let mut table = Table::new(
                    &format!(
                        "[{config_index}] {}, {pg_num} PGs, {size} replicas: PGs per OSD and PG copies moved (mean of {} trials; moved/minimum)",
                        shape.name(),
                        args.trials
                    ),
                    &[
                        "method",
                        "mean",
                        "stdev",
                        "max/mean",
                        "add",
                        "remove",
                        "reweight",
                        "compute ms",
                        "state ms",
                    ],
                );
                let mut rows = Vec::new();
                for (m, &method) in methods.iter().enumerate() {
                    let outcome = run_method(shape, method, &pool, args.trials, progress)?;
                    let cell = |(moved, minimum): (f64, f64)| {
                        format!("{moved:.0}/{minimum:.0}={:.2}", ratio(moved, minimum))
                    };
                    let name = match outcome.linear_param {
                        Some(p) => format!("{} (p={p:.4})", method.name()),
                        None => method.name().to_string(),
                    };
                    table.row(vec![
                        name,
                        format!("{:.1}", outcome.summary.mean),
                        format!("{:.2}", outcome.summary.stdev),
                        format!("{:.3}", outcome.summary.max_over_mean),
                        cell(outcome.movement[0]),
                        cell(outcome.movement[1]),
                        cell(outcome.movement[2]),
                        format!("{:.0}", outcome.compute_ms),
                        match outcome.state_ms {
                            Some((scratch, change)) => format!("{scratch:.0} / {change:.0}"),
                            None => "-".into(),
                        },
                    ]);
                    stdev_series[m].points.push((config_index as f64, outcome.summary.stdev));
                    let worst = outcome
                        .movement
                        .iter()
                        .map(|&(moved, minimum)| ratio(moved, minimum))
                        .fold(0.0f64, f64::max);
                    ratio_series[m].points.push((config_index as f64, worst.min(20.0)));
                    rows.push(outcome_json(&outcome));
                }
                tables.push(table);
                results.push(json!({
                    "map": map_name,
                    "osds": shape.devices(),
                    "pg_num": pg_num,
                    "size": size,
                    "methods": rows,
                }));
                labels.push(format!("[{config_index}] {map_name} OSDs/{pg_num}/{size}"));
                config_index += 1;
            }
        }
    }
    Ok(Report {
        title: "balance: stock CRUSH, seed 002's optimised CRUSH and Optio's balanced placements (history-free and incremental)"
            .into(),
        tables,
        notes: vec![
            "add: a new OSD in one host; remove: one OSD leaves the map; reweight: one OSD's reweight becomes 0.5.".into(),
            "moved/minimum: copies that change OSD over the least any placement must move (1.00 is optimal; below 1 when a device may end anywhere in its band).".into(),
            "compute ms: the base placement (Placement::new; seed 002 includes its search). state ms (incremental): the state from scratch / a rebalance after a change (mean).".into(),
            "seed 002's paper (40 OSDs, 2048 PGs): CRUSH 10.09 → 6.50 with 2 replicas, 12.13 → 5.17 with 3.".into(),
            "Optio's targets: stdev ≤ 1.0, moved/minimum ≤ 1.5, computed in under a second (1,000 OSDs, 32,768 PGs).".into(),
            format!("configurations: {}", labels.join("; ")),
        ],
        json: json!({ "experiment": "balance", "trials": args.trials, "pool_id": args.pool_id, "results": results }),
        plots: vec![
            Plot {
                title: "PGs per OSD: stdev, by configuration".into(),
                kind: PlotKind::Bars,
                x_label: "configuration (see the notes)".into(),
                y_label: "stdev of PGs per OSD".into(),
                series: stdev_series,
                log_x: false,
            },
            Plot {
                title: "movement: worst of add/remove/reweight, moved/minimum (capped at 20)".into(),
                kind: PlotKind::Bars,
                x_label: "configuration (see the notes)".into(),
                y_label: "moved / minimum".into(),
                series: ratio_series,
                log_x: false,
            },
        ],
    })
}

fn outcome_json(outcome: &Outcome) -> Value {
    let [(add, min_add), (remove, min_remove), (reweight, min_reweight)] = outcome.movement;
    json!({
        "method": outcome.method.name(),
        "mean": outcome.summary.mean,
        "stdev": outcome.summary.stdev,
        "max_over_mean": outcome.summary.max_over_mean,
        "min": outcome.summary.min,
        "max": outcome.summary.max,
        "moved_on_add": add,
        "min_moved_on_add": min_add,
        "moved_on_add_over_min": ratio(add, min_add),
        "moved_on_remove": remove,
        "min_moved_on_remove": min_remove,
        "moved_on_remove_over_min": ratio(remove, min_remove),
        "moved_on_reweight": reweight,
        "min_moved_on_reweight": min_reweight,
        "moved_on_reweight_over_min": ratio(reweight, min_reweight),
        "compute_ms": outcome.compute_ms,
        "state_from_scratch_ms": outcome.state_ms.map(|(scratch, _)| scratch),
        "rebalance_ms": outcome.state_ms.map(|(_, change)| change),
        "linear_param": outcome.linear_param,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    #[test]
    fn the_small_map_runs_and_each_method_does_what_it_claims() {
        let args = Args {
            maps: vec![40],
            pg_nums: vec![2048],
            sizes: vec![3],
            methods: vec!["crush".into(), "seed002".into(), "optio".into(), "incremental".into()],
            trials: 1,
            pool_id: 1,
        };
        let report = run(&args, &mut NoProgress).expect("runs");
        let methods = report.json["results"][0]["methods"].as_array().expect("array").clone();
        assert_eq!(methods.len(), 4);
        let stdev = |i: usize| methods[i]["stdev"].as_f64().expect("number");
        // Stock CRUSH spreads like random placement; seed 002 does better; Optio is within
        // one PG of its targets.
        assert!(stdev(0) > 8.0, "crush {}", stdev(0));
        assert!(stdev(1) < 6.0, "seed 002 {}", stdev(1));
        assert!(stdev(2) <= 1.0, "optio {}", stdev(2));
        // The incremental method is balanced too, and moves at most 1.5 times the minimum.
        assert!(stdev(3) <= 1.0, "incremental {}", stdev(3));
        for change in ["add", "remove", "reweight"] {
            let ratio = methods[3][format!("moved_on_{change}_over_min")].as_f64().expect("ratio");
            assert!(ratio <= 1.5, "incremental {change}: {ratio}");
        }
        assert!(methods[3]["rebalance_ms"].as_f64().is_some());
        for method in &methods {
            for key in ["moved_on_add", "min_moved_on_add", "moved_on_remove", "moved_on_reweight"]
            {
                assert!(method[key].as_f64().expect(key) > 0.0, "{key}: {method}");
            }
        }
        let text = report.render_text();
        assert!(text.contains("seed002 (p="), "{text}");
    }

    #[test]
    fn bad_parameters_are_errors() {
        let args = Args {
            maps: vec![41],
            pg_nums: vec![64],
            sizes: vec![2],
            methods: vec!["crush".into()],
            trials: 1,
            pool_id: 1,
        };
        assert!(run(&args, &mut NoProgress).is_err());
        assert!(
            run(
                &Args { maps: vec![40], methods: vec!["x".into()], ..args.clone() },
                &mut NoProgress
            )
            .is_err()
        );
        assert!(run(&Args { maps: vec![40], trials: 0, ..args.clone() }, &mut NoProgress).is_err());
        assert!(run(&Args { maps: vec![40], sizes: vec![9], ..args }, &mut NoProgress).is_err());
    }
}
