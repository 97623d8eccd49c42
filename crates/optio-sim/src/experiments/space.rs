//! CHOICE's space-policy simulation (Li & Xu, §5.1 "Load balance"): 100 disks of 1 M blocks,
//! written until the first disk is full. The paper: 73 % average utilisation for plain hashing,
//! 96 % with the `space` policy and 2 choices.
//!
//! Here every block is an object of `size` replicas, written through Optio's placement: at PG
//! granularity a `crush` pool (replicas on distinct hosts), at object granularity an
//! object-level `ring` pool. With k = 1 the object goes where it hashes (the baseline); with
//! k ≥ 2 the `space` policy writes it to the candidate whose fullest device is the least full.
//! Devices are full at 100 % (`full_ratio = 1.0`).
//!
//! The baseline's 73 % is a property of the PG granularity — how unevenly PGs fall on disks —
//! so the experiment first sweeps `pg_num` and takes the one whose baseline comes closest to
//! 73 %; the k = 1..4 rows at PG granularity use it. Two fills are reported per run: at the
//! moment the first disk is full (the paper's measure), and at the first object that finds no
//! candidate with room (what a cluster that steers around full disks actually holds).

use std::fmt::Write as _;

use optio_placement::choice::{Candidates, ChoiceRequest, DeviceMetrics, MetricsTable, PPM};
use optio_placement::stats::Summary;
use optio_placement::{
    ChoiceSettings, ClusterMap, ClusterMapBuilder, DeviceId, DeviceSpec, EngineRef, Placement,
    PolicySpec, PoolSpec, ReplicaSet, RingSpec,
};
use serde_json::json;

use crate::report::{Plot, PlotKind, Report, Series, Table};
use crate::{Progress, SimError};

/// The paper's baseline average utilisation when the first disk fills.
pub const PAPER_BASELINE: f64 = 0.73;
/// The paper's result with the space policy and 2 choices.
pub const PAPER_SPACE_K2: f64 = 0.96;
/// Bytes per block (4 MiB, Ceph's default object size); only sizes the ring's virtual nodes.
const BLOCK_BYTES: u64 = 4 << 20;
/// Most blocks per disk (bounds the run time: each run writes up to disks × this / size).
const BLOCKS_PER_DISK_MAX: u64 = 100_000_000;

/// Parameters of `optio sim space`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Disks.
    #[arg(long, default_value_t = 100)]
    pub disks: u32,
    /// Capacity of each disk, in blocks.
    #[arg(long, default_value_t = 1_000_000)]
    pub blocks_per_disk: u64,
    /// Disks per host (replicas go to distinct hosts).
    #[arg(long, default_value_t = 4)]
    pub disks_per_host: u32,
    /// Replicas per object (each takes one block on its disk).
    #[arg(long, default_value_t = 3)]
    pub size: u32,
    /// PG counts swept to find the granularity that gives the paper's 73 % baseline.
    #[arg(long, value_delimiter = ',', default_value = "128,256,512,1024,2048,4096,8192")]
    pub pg_nums: Vec<u32>,
    /// PG count of the PG-granularity rows (default: the sweep's closest to 73 %).
    #[arg(long)]
    pub pg_num: Option<u32>,
    /// Largest k.
    #[arg(long, default_value_t = 4)]
    pub max_choices: u32,
    /// Virtual nodes per disk of the object-granularity ring.
    #[arg(long, default_value_t = 128)]
    pub vnodes_per_disk: u64,
}

/// One run's outcome.
#[derive(Clone, Copy, Debug, Default)]
struct Fill {
    /// Average utilisation when the first disk became full.
    at_first_full: f64,
    /// Average utilisation when an object first found no candidate with room.
    at_refusal: f64,
    /// Objects written until the refusal.
    objects: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Granularity {
    Object,
    Pg(u32),
}

impl Granularity {
    fn name(self) -> &'static str {
        match self {
            Granularity::Object => "object",
            Granularity::Pg(_) => "pg",
        }
    }
}

fn check(args: &Args) -> Result<(), SimError> {
    let bad =
        |parameter: &'static str, reason: String| Err(SimError::Parameter { parameter, reason });
    if args.disks == 0 || args.disks_per_host == 0 {
        return bad("--disks/--disks-per-host", "must be positive".into());
    }
    let hosts = args.disks.div_ceil(args.disks_per_host);
    if args.size == 0 || args.size > hosts {
        return bad("--size", format!("between 1 and the number of hosts ({hosts})"));
    }
    if !(1..=BLOCKS_PER_DISK_MAX).contains(&args.blocks_per_disk) {
        return bad("--blocks-per-disk", format!("between 1 and {BLOCKS_PER_DISK_MAX}"));
    }
    if args.max_choices == 0 || args.max_choices > optio_placement::choice::CHOICES_MAX {
        return bad(
            "--max-choices",
            format!("between 1 and {}", optio_placement::choice::CHOICES_MAX),
        );
    }
    if args.pg_nums.is_empty() && args.pg_num.is_none() {
        return bad("--pg-nums", "give at least one PG count (or --pg-num)".into());
    }
    if args.vnodes_per_disk == 0 || args.vnodes_per_disk > 65_536 {
        return bad("--vnodes-per-disk", "between 1 and 65536".into());
    }
    Ok(())
}

/// The cluster with one pool of `granularity` offering `choices` candidates by space.
fn cluster(args: &Args, granularity: Granularity, choices: u32) -> Result<ClusterMap, SimError> {
    let capacity = args.blocks_per_disk * BLOCK_BYTES;
    let mut builder = ClusterMapBuilder::new();
    for id in 0..args.disks {
        let host = format!("host{}", id / args.disks_per_host);
        builder = builder.device(DeviceSpec::new(id).capacity(capacity).at(&[("host", &host)]));
    }
    let policy = if choices == 1 { PolicySpec::First } else { PolicySpec::Space };
    let choice = ChoiceSettings { choices, policy, full_ppm: PPM };
    let mut pool = match granularity {
        Granularity::Pg(pg_num) => PoolSpec::crush(1, "blocks", pg_num, args.size),
        Granularity::Object => PoolSpec {
            engine: EngineRef::Ring(RingSpec {
                vnode_bytes: Some(capacity.div_ceil(args.vnodes_per_disk)),
                failure_domain: Some("host".into()),
            }),
            ..PoolSpec::crush(1, "blocks", 0, args.size)
        },
    };
    pool.choice = choice;
    Ok(builder.replicated_rule(0, "replicated_rule", "default", "host").pool(pool).build()?)
}

/// Writes blocks until an object finds no candidate with room.
fn fill(
    args: &Args,
    granularity: Granularity,
    choices: u32,
    progress: &mut dyn Progress,
) -> Result<Fill, SimError> {
    let map = cluster(args, granularity, choices)?;
    let placement = Placement::new(&map)?;
    let pool = placement.pool_by_name("blocks").expect("built with this pool");
    let mut scratch = placement.scratch();
    // PG pools: each PG's devices once (what a client caches per epoch).
    let pg_devices: Vec<ReplicaSet> = (0..pool.pool().pg_num)
        .map(|seed| {
            let mut set = ReplicaSet::new();
            pool.place(pool.pg_key(seed), &mut scratch, &mut set);
            set
        })
        .collect();
    let disks = args.disks as usize;
    let mut metrics = MetricsTable::new(args.disks);
    for id in 0..args.disks {
        metrics.set(DeviceId(id), DeviceMetrics::default()).expect("within the table");
    }
    let capacity = args.blocks_per_disk;
    let total = capacity * disks as u64;
    let mut used = vec![0u64; disks];
    let mut stored = 0u64;
    let mut first_full: Option<f64> = None;
    let mut candidates = Candidates::new();
    let mut name = String::new();
    let request = ChoiceRequest::default();
    let step = (total / u64::from(args.size) / 100).max(1);
    progress.start(&format!("{} granularity, k = {choices}", granularity.name()), 100);
    let mut objects = 0u64;
    loop {
        name.clear();
        let _ = write!(name, "blk.{objects}");
        pool.candidates_with(&name, &mut candidates, |key, devices| match key.pg {
            Some(pg) => *devices = pg_devices[pg.seed as usize],
            None => pool.place(key.key, &mut scratch, devices),
        });
        let Ok(chosen) = pool.choose(&candidates, &metrics, &request) else { break };
        let (_, devices) =
            candidates.get(usize::from(chosen.key.index)).expect("chosen from the set");
        for device in devices.devices() {
            let slot = &mut used[device.0 as usize];
            *slot += 1;
            stored += 1;
            let m = metrics.get_mut(device).expect("every disk has metrics");
            m.space_ppm = optio_placement::choice::used_to_ppm(*slot, capacity);
            if *slot >= capacity && first_full.is_none() {
                first_full = Some(stored as f64 / total as f64);
            }
        }
        objects += 1;
        if objects.is_multiple_of(step) {
            progress.advance(1);
        }
    }
    let at_refusal = stored as f64 / total as f64;
    Ok(Fill { at_first_full: first_full.unwrap_or(at_refusal), at_refusal, objects })
}

/// PG copies per disk: max / mean (the static imbalance the baseline inherits).
fn pg_imbalance(args: &Args, pg_num: u32) -> Result<f64, SimError> {
    let map = cluster(args, Granularity::Pg(pg_num), 1)?;
    let placement = Placement::new(&map)?;
    let pool = placement.pool_by_name("blocks").expect("built with this pool");
    let (mut scratch, mut set) = (placement.scratch(), ReplicaSet::new());
    let mut copies = vec![0f64; args.disks as usize];
    for seed in 0..pg_num {
        pool.place(pool.pg_key(seed), &mut scratch, &mut set);
        for device in set.devices() {
            copies[device.0 as usize] += 1.0;
        }
    }
    Ok(Summary::of(&copies).max_over_mean)
}

fn percent(value: f64) -> String {
    format!("{:.2}%", value * 100.0)
}

/// Runs the experiment.
pub fn run(args: &Args, progress: &mut dyn Progress) -> Result<Report, SimError> {
    check(args)?;
    let mut sweep = Table::new(
        "PG granularity sweep: baseline (k = 1) and space policy (k = 2), average utilisation when the first disk is full",
        &["pg_num", "PG copies max/mean", "k = 1", "k = 2"],
    );
    let mut sweep_json = Vec::new();
    let mut calibrated: Option<(u32, f64)> = None;
    for &pg_num in &args.pg_nums {
        if !(2..=optio_placement::map::PG_NUM_MAX).contains(&pg_num) {
            return Err(SimError::Parameter {
                parameter: "--pg-nums",
                reason: format!(
                    "{pg_num}: each PG count must be between 2 and {}",
                    optio_placement::map::PG_NUM_MAX
                ),
            });
        }
        let imbalance = pg_imbalance(args, pg_num)?;
        let base = fill(args, Granularity::Pg(pg_num), 1, progress)?;
        let space = fill(args, Granularity::Pg(pg_num), 2, progress)?;
        sweep.row(vec![
            pg_num.to_string(),
            format!("{imbalance:.3}"),
            percent(base.at_first_full),
            percent(space.at_first_full),
        ]);
        sweep_json.push(json!({
            "pg_num": pg_num, "pg_copies_max_over_mean": imbalance,
            "k1_fill_at_first_full": base.at_first_full, "k2_fill_at_first_full": space.at_first_full,
        }));
        let distance = (base.at_first_full - PAPER_BASELINE).abs();
        if calibrated.is_none_or(|(_, best)| distance < best) {
            calibrated = Some((pg_num, distance));
        }
    }
    let pg_num = args.pg_num.or(calibrated.map(|(pg_num, _)| pg_num)).ok_or_else(|| {
        SimError::Parameter {
            parameter: "--pg-nums",
            reason: "give at least one PG count (or --pg-num)".into(),
        }
    })?;
    let mut table = Table::new(
        &format!(
            "fill by k: baseline (k = 1) and the space policy (k ≥ 2); PG granularity at pg_num {pg_num}"
        ),
        &[
            "granularity",
            "k",
            "policy",
            "fill at first full disk",
            "fill at first refusal",
            "objects",
        ],
    );
    let mut rows = Vec::new();
    let mut series = Vec::new();
    for granularity in [Granularity::Object, Granularity::Pg(pg_num)] {
        let mut points = Vec::new();
        for k in 1..=args.max_choices {
            let result = fill(args, granularity, k, progress)?;
            let policy = if k == 1 { "first" } else { "space" };
            table.row(vec![
                granularity.name().into(),
                k.to_string(),
                policy.into(),
                percent(result.at_first_full),
                percent(result.at_refusal),
                result.objects.to_string(),
            ]);
            rows.push(json!({
                "granularity": granularity.name(),
                "pg_num": if let Granularity::Pg(n) = granularity { json!(n) } else { json!(null) },
                "k": k, "policy": policy,
                "fill_at_first_full": result.at_first_full,
                "fill_at_first_refusal": result.at_refusal,
                "objects": result.objects,
            }));
            points.push((f64::from(k), result.at_first_full * 100.0));
        }
        let label = match granularity {
            Granularity::Object => format!("object ({} vnodes/disk)", args.vnodes_per_disk),
            Granularity::Pg(n) => format!("PG ({n} PGs)"),
        };
        series.push(Series { name: label, points });
    }
    Ok(Report {
        title: format!(
            "space: {} disks of {} blocks, {} per host, {} replicas per object",
            args.disks, args.blocks_per_disk, args.disks_per_host, args.size
        ),
        tables: vec![sweep, table],
        notes: vec![
            format!(
                "Paper (Li & Xu, 100 disks of 1M blocks): {} baseline, {} with space and 2 choices.",
                percent(PAPER_BASELINE),
                percent(PAPER_SPACE_K2)
            ),
            format!("PG granularity closest to the paper's baseline: pg_num {pg_num} (used for the PG rows)."),
            "fill at first full disk: average utilisation when any disk reaches capacity (the paper's measure);".into(),
            "fill at first refusal: when an object first finds every candidate with a full disk.".into(),
        ],
        json: json!({
            "experiment": "space",
            "disks": args.disks, "blocks_per_disk": args.blocks_per_disk,
            "disks_per_host": args.disks_per_host, "size": args.size,
            "vnodes_per_disk": args.vnodes_per_disk,
            "paper": { "baseline": PAPER_BASELINE, "space_k2": PAPER_SPACE_K2 },
            "calibrated_pg_num": pg_num,
            "sweep": sweep_json,
            "results": rows,
        }),
        plots: vec![Plot {
            title: "average utilisation when the first disk is full".into(),
            kind: PlotKind::Line,
            x_label: "choices (k)".into(),
            y_label: "fill (%)".into(),
            series,
            log_x: false,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    fn small() -> Args {
        Args {
            disks: 20,
            blocks_per_disk: 3000,
            disks_per_host: 2,
            size: 2,
            pg_nums: vec![32, 128],
            pg_num: None,
            max_choices: 2,
            vnodes_per_disk: 32,
        }
    }

    #[test]
    fn choices_fill_the_disks_further_than_plain_hashing() {
        let report = run(&small(), &mut NoProgress).expect("runs");
        let results = report.json["results"].as_array().expect("rows");
        assert_eq!(results.len(), 4);
        let fill = |granularity: &str, k: u64| {
            results
                .iter()
                .find(|r| r["granularity"] == granularity && r["k"] == k)
                .and_then(|r| r["fill_at_first_full"].as_f64())
                .expect("row")
        };
        for granularity in ["object", "pg"] {
            let (base, space) = (fill(granularity, 1), fill(granularity, 2));
            assert!(base < 0.9, "{granularity} baseline {base}");
            assert!(space > base + 0.05, "{granularity}: k = 2 {space} vs k = 1 {base}");
            assert!(space <= 1.0);
        }
        assert!(fill("object", 2) > 0.97, "object-level choices balance almost perfectly");
        let first = results[0]["fill_at_first_refusal"].as_f64().expect("number");
        assert!(first >= results[0]["fill_at_first_full"].as_f64().expect("number"));
    }

    #[test]
    fn the_same_run_gives_the_same_numbers() {
        let args = Args { pg_nums: vec![64], max_choices: 1, ..small() };
        let a = run(&args, &mut NoProgress).expect("runs");
        let b = run(&args, &mut NoProgress).expect("runs");
        assert_eq!(a.json, b.json);
    }

    #[test]
    fn bad_parameters_are_refused() {
        for args in [
            Args { disks: 0, ..small() },
            Args { size: 11, ..small() },
            Args { max_choices: 9, ..small() },
            Args { pg_nums: vec![1], ..small() },
            Args { blocks_per_disk: 0, ..small() },
        ] {
            assert!(run(&args, &mut NoProgress).is_err(), "{args:?}");
        }
    }
}
