//! Every policy on one heterogeneous, loaded cluster: what each does to the metric it
//! optimises, and what it costs the others.
//!
//! The cluster: racks × hosts × disks, a `crush` pool with k candidates per object. Metrics
//! are drawn once, with a fixed seed, from these distributions (clamped to 0–100 %):
//!
//! * per host — cpu ~ Normal(45 %, 20 %), memory ~ Normal(55 %, 15 %); a tenth of the hosts
//!   (at least one) are *hot*, running co-located applications: cpu 95 %, memory 95 %;
//! * per disk — space ~ Normal(60 %, 10 %), and a fiftieth of the disks (at least one) at 97 %,
//!   above the 95 % full ratio; a quarter of the disks are *slow* (latency 4 ms +
//!   Exp(4 ms), journal Exp(256 MiB)), the others latency 1 ms + Exp(1 ms), journal
//!   Exp(64 MiB);
//! * locations from the map; one client per host, writing in turn.
//!
//! Space grows as objects land (each copy adds `object_bytes / capacity`); the other metrics
//! stay as drawn (the paper's point about transient metrics is that they move faster than
//! placement can follow — a static snapshot is the most favourable case for them). For each
//! policy the table gives the mean, over the objects written, of the chosen candidate's
//! aggregated metrics (as the policies see them), the share of objects whose primary is in
//! the writer's rack, and the spread of copies over disks.

mod args;
pub mod changing;

pub use args::{Args, MetricsMode};

use std::fmt::Write as _;

use optio_placement::choice::{
    CandidateMetrics, Candidates, ChoiceRequest, CompositeWeights, DeviceMetrics, Location,
    MetricsTable, fraction_to_ppm, used_to_ppm,
};
use optio_placement::stats::Summary;
use optio_placement::{
    ChoiceSettings, ClusterMap, ClusterMapBuilder, DeviceId, DeviceSpec, Placement, PolicySpec,
    PoolSpec, ReplicaSet,
};
use serde_json::json;

use crate::report::{Plot, PlotKind, Report, Series, Table};
use crate::rng::Rng;
use crate::{Progress, SimError};

/// Most objects per policy (bounds the run time).
const OBJECTS_MAX: u64 = 100_000_000;

fn check(args: &Args) -> Result<(), SimError> {
    let bad =
        |parameter: &'static str, reason: String| Err(SimError::Parameter { parameter, reason });
    if args.racks == 0 || args.hosts_per_rack == 0 || args.disks_per_host == 0 {
        return bad("--racks/--hosts-per-rack/--disks-per-host", "must be positive".into());
    }
    let hosts = args.racks * args.hosts_per_rack;
    if args.size == 0 || args.size > hosts {
        return bad("--size", format!("between 1 and the number of hosts ({hosts})"));
    }
    if !(1..=OBJECTS_MAX).contains(&args.objects) {
        return bad("--objects", format!("between 1 and {OBJECTS_MAX}"));
    }
    if args.disk_bytes == 0 {
        return bad("--disk-bytes", "must be positive".into());
    }
    if !(1..=OBJECTS_MAX).contains(&args.changing_objects) {
        return bad("--changing-objects", format!("between 1 and {OBJECTS_MAX}"));
    }
    for (parameter, value) in [
        ("--interval-ms", args.interval_ms),
        ("--effect-delay-ms", args.effect_delay_ms),
        ("--read-after-ms", args.read_after_ms),
        ("--transient-ms", args.transient_ms),
        ("--cpu-ms", args.cpu_ms),
        ("--memory-ms", args.memory_ms),
    ] {
        if !(value.is_finite() && value > 0.0) {
            return bad(parameter, "must be a positive number of milliseconds".into());
        }
    }
    if !(args.staleness_ms.is_finite() && args.staleness_ms >= 0.0) {
        return bad("--staleness-ms", "must be 0 or more".into());
    }
    if !(args.cpu_sensitivity.is_finite() && args.cpu_sensitivity >= 0.0) {
        return bad("--cpu-sensitivity", "must be 0 or more".into());
    }
    Ok(())
}

/// The policies compared, in table order.
pub(super) fn policies() -> Vec<PolicySpec> {
    vec![
        PolicySpec::First,
        PolicySpec::Random,
        PolicySpec::Local,
        PolicySpec::Memory,
        PolicySpec::Cpu,
        PolicySpec::Space,
        PolicySpec::Latency,
        PolicySpec::Journal,
        PolicySpec::Composite(CompositeWeights {
            space: 2,
            memory: 1,
            latency: 1,
            local: 1,
            ..CompositeWeights::default()
        }),
    ]
}

pub(super) fn cluster(args: &Args) -> Result<ClusterMap, SimError> {
    let mut builder = ClusterMapBuilder::new();
    let mut id = 0;
    for rack in 0..args.racks {
        for host in 0..args.hosts_per_rack {
            let (rack, host) = (format!("rack{rack}"), format!("rack{rack}-host{host}"));
            for _ in 0..args.disks_per_host {
                builder = builder.device(
                    DeviceSpec::new(id)
                        .capacity(args.disk_bytes)
                        .at(&[("rack", &rack), ("host", &host)]),
                );
                id += 1;
            }
        }
    }
    let mut pool = PoolSpec::crush(1, "mixed", args.pg_num, args.size);
    pool.choice = ChoiceSettings::new(args.choices, PolicySpec::First);
    Ok(builder.replicated_rule(0, "replicated_rule", "default", "host").pool(pool).build()?)
}

/// Metrics drawn as the module docs say.
pub(super) fn draw_metrics(args: &Args, map: &ClusterMap) -> MetricsTable {
    let mut rng = Rng::new(args.seed);
    let hosts = (args.racks * args.hosts_per_rack) as usize;
    let hot = (hosts / 10).max(1);
    let clamp = |value: f64| fraction_to_ppm(value.clamp(0.0, 1.0));
    let host_load: Vec<(u32, u32)> = (0..hosts)
        .map(|_| (clamp(rng.normal(0.45, 0.20)), clamp(rng.normal(0.55, 0.15))))
        .collect();
    // Hot hosts: spread over the racks, a fixed stride apart.
    let hot_hosts: Vec<usize> =
        (0..hot).map(|i| (i * hosts / hot + hosts / (2 * hot)) % hosts).collect();
    let disks = map.devices().len();
    let full = (disks / 50).max(1);
    let mut table = MetricsTable::new(map.max_devices());
    for (index, device) in map.devices().iter().enumerate() {
        let host = index / args.disks_per_host as usize;
        let (mut cpu_ppm, mut memory_ppm) = host_load[host];
        if hot_hosts.contains(&host) {
            (cpu_ppm, memory_ppm) = (950_000, 950_000);
        }
        let slow = rng.next_f64() < 0.25;
        let (latency_ms, journal_mib) = if slow {
            (4.0 + rng.exponential(4.0), rng.exponential(256.0))
        } else {
            (1.0 + rng.exponential(1.0), rng.exponential(64.0))
        };
        let mut space_ppm = clamp(rng.normal(0.60, 0.10)).min(940_000);
        if index % (disks / full) == disks / full / 2 {
            space_ppm = 970_000;
        }
        let metrics = DeviceMetrics {
            up: true,
            full: false,
            cpu_ppm,
            memory_ppm,
            space_ppm,
            latency_us: (latency_ms * 1000.0) as u32,
            journal_bytes: (journal_mib * f64::from(1u32 << 20)) as u64,
            location: Location::of_device(map, device.id),
        };
        table.set(device.id, metrics).expect("within the table");
    }
    table
}

/// Means over the objects of one policy's choices.
#[derive(Clone, Debug, Default)]
struct Outcome {
    cpu: f64,
    memory: f64,
    space: f64,
    latency_us: f64,
    journal_bytes: f64,
    in_rack: f64,
    copies_max_over_mean: f64,
    refused: u64,
    full_touched: u64,
}

fn simulate(args: &Args, map: &ClusterMap, policy: PolicySpec) -> Result<Outcome, SimError> {
    let placement = Placement::new(map)?;
    let pool = placement.pool_by_name("mixed").expect("built with this pool");
    let mut scratch = placement.scratch();
    let pg_devices: Vec<ReplicaSet> = (0..args.pg_num)
        .map(|seed| {
            let mut set = ReplicaSet::new();
            pool.place(pool.pg_key(seed), &mut scratch, &mut set);
            set
        })
        .collect();
    let mut metrics = draw_metrics(args, map);
    let initial_space: Vec<u32> =
        map.devices().iter().map(|d| metrics.get_mut(d.id).map_or(0, |m| m.space_ppm)).collect();
    let mut used_bytes = vec![0u64; map.devices().len()];
    let hosts = args.racks * args.hosts_per_rack;
    let clients: Vec<(u32, Location)> = (0..hosts)
        .map(|host| {
            let rack = host / args.hosts_per_rack;
            let name = format!("rack{rack}-host{}", host % args.hosts_per_rack);
            (
                rack,
                Location::from_levels([
                    ("rack", format!("rack{rack}").as_str()),
                    ("host", name.as_str()),
                ]),
            )
        })
        .collect();
    let per_rack = args.hosts_per_rack * args.disks_per_host;
    let mut sums = [0f64; 6];
    let mut outcome = Outcome::default();
    let mut copies = vec![0f64; map.devices().len()];
    let (mut candidates, mut name) = (Candidates::new(), String::new());
    for n in 0..args.objects {
        let (rack, location) = &clients[(n % u64::from(hosts)) as usize];
        name.clear();
        let _ = write!(name, "obj.{n:012x}");
        pool.candidates_with(&name, &mut candidates, |key, devices| {
            *devices = pg_devices[key.pg.map_or(0, |pg| pg.seed as usize)];
        });
        let request = ChoiceRequest { policy: Some(&policy), client: Some(location) };
        let Ok(chosen) = pool.choose(&candidates, &metrics, &request) else {
            outcome.refused += 1;
            continue;
        };
        let (_, devices) =
            candidates.get(usize::from(chosen.key.index)).expect("chosen from the set");
        let m: CandidateMetrics = chosen.metrics;
        sums[0] += f64::from(m.cpu_ppm);
        sums[1] += f64::from(m.memory_ppm);
        sums[2] += f64::from(m.space_ppm);
        sums[3] += f64::from(m.latency_us);
        sums[4] += m.journal_bytes as f64;
        let primary = devices.primary().expect("an eligible candidate has a primary");
        sums[5] += f64::from(u8::from(primary.0 / per_rack == *rack));
        for device in devices.devices() {
            let index = device.0 as usize;
            copies[index] += 1.0;
            if initial_space[index] >= 950_000 {
                outcome.full_touched += 1;
            }
            used_bytes[index] += args.object_bytes;
            if let Some(m) = metrics.get_mut(DeviceId(device.0)) {
                let grown = used_to_ppm(used_bytes[index], args.disk_bytes);
                m.space_ppm = initial_space[index].saturating_add(grown);
            }
        }
    }
    let written = (args.objects - outcome.refused).max(1) as f64;
    outcome.cpu = sums[0] / written / 1e4;
    outcome.memory = sums[1] / written / 1e4;
    outcome.space = sums[2] / written / 1e4;
    outcome.latency_us = sums[3] / written;
    outcome.journal_bytes = sums[4] / written;
    outcome.in_rack = sums[5] / written * 100.0;
    outcome.copies_max_over_mean = Summary::of(&copies).max_over_mean;
    Ok(outcome)
}

/// The metric a policy optimises (a column of the table), if one.
fn optimises(policy: &PolicySpec) -> Option<usize> {
    match policy {
        PolicySpec::Cpu => Some(0),
        PolicySpec::Memory => Some(1),
        PolicySpec::Space => Some(2),
        PolicySpec::Latency => Some(3),
        PolicySpec::Journal => Some(4),
        PolicySpec::Local => Some(5),
        _ => None,
    }
}

/// Runs the experiment.
pub fn run(args: &Args, progress: &mut dyn Progress) -> Result<Report, SimError> {
    check(args)?;
    let map = cluster(args)?;
    let names = ["cpu %", "memory %", "space %", "latency ms", "journal MiB", "in-rack %"];
    let mut table = Table::new(
        &format!(
            "mean metrics of the chosen candidates, k = {} (* = the metric the policy optimises)",
            args.choices
        ),
        &[
            "policy",
            names[0],
            names[1],
            names[2],
            names[3],
            names[4],
            names[5],
            "copies max/mean",
            "refused",
        ],
    );
    let mut relative = Table::new(
        "change against first (negative is lower; for in-rack, higher is better)",
        &["policy", names[0], names[1], names[2], names[3], names[4], names[5], "copies max/mean"],
    );
    let mut rows = Vec::new();
    let mut bars: Vec<Series> =
        names.iter().map(|n| Series { name: (*n).into(), points: Vec::new() }).collect();
    let list = policies();
    let static_list: &[PolicySpec] =
        if args.metrics == MetricsMode::Changing { &[] } else { &list };
    progress.start("policies", list.len() as u64);
    let mut baseline: Option<[f64; 7]> = None;
    for (index, policy) in static_list.iter().enumerate() {
        let outcome = simulate(args, &map, *policy)?;
        progress.advance(1);
        if outcome.full_touched > 0 {
            return Err(SimError::Input(format!(
                "policy {policy} wrote {} copies to a full disk; this is a bug in the choice layer",
                outcome.full_touched
            )));
        }
        let values = [
            outcome.cpu,
            outcome.memory,
            outcome.space,
            outcome.latency_us / 1000.0,
            outcome.journal_bytes / f64::from(1u32 << 20),
            outcome.in_rack,
            outcome.copies_max_over_mean,
        ];
        let base = *baseline.get_or_insert(values);
        let mark = |column: usize, text: String| {
            if optimises(policy) == Some(column) { format!("{text}*") } else { text }
        };
        let mut cells = vec![policy.to_string()];
        let mut changes = vec![policy.to_string()];
        for column in 0..7 {
            let text = if column == 6 {
                format!("{:.3}", values[column])
            } else {
                format!("{:.2}", values[column])
            };
            if column < 6 {
                cells.push(mark(column, text));
            } else {
                cells.push(text);
            }
            let change = if base[column] == 0.0 {
                0.0
            } else {
                (values[column] / base[column] - 1.0) * 100.0
            };
            changes.push(mark(column, format!("{change:+.1}%")));
            if column < 6 {
                bars[column]
                    .points
                    .push((index as f64, values[column] / base[column].max(f64::MIN_POSITIVE)));
            }
        }
        cells.push(outcome.refused.to_string());
        table.row(cells);
        relative.row(changes);
        rows.push(json!({
            "policy": policy.to_string(),
            "cpu_percent": outcome.cpu, "memory_percent": outcome.memory, "space_percent": outcome.space,
            "latency_us": outcome.latency_us, "journal_bytes": outcome.journal_bytes,
            "in_rack_percent": outcome.in_rack, "copies_max_over_mean": outcome.copies_max_over_mean,
            "refused": outcome.refused, "copies_on_full_disks": outcome.full_touched,
        }));
    }
    let changing = if args.metrics == MetricsMode::Static {
        None
    } else {
        Some(changing_tables(args, &map, &list, progress)?)
    };
    let mut tables = Vec::new();
    let mut plots = Vec::new();
    let mut notes = Vec::new();
    if args.metrics != MetricsMode::Changing {
        tables.extend([table, relative]);
        plots.push(Plot {
            title: "chosen metrics relative to first, policies 0-8 in table order (static metrics)"
                .into(),
            kind: PlotKind::Bars,
            x_label: "policy".into(),
            y_label: "relative to first".into(),
            series: bars,
            log_x: false,
        });
        notes.extend([
            "Static metrics, as each policy sees them: cpu, latency, journal averaged over the candidate's disks; memory and location the primary's; space the fullest disk's.".to_string(),
            "Distributions: host cpu N(45%,20%), memory N(55%,15%), a tenth of hosts hot at 95%/95%; disk space N(60%,10%), a fiftieth at 97% (full);".into(),
            "a quarter of disks slow (latency 4 ms + Exp(4 ms), journal Exp(256 MiB)), the rest 1 ms + Exp(1 ms), Exp(64 MiB). No copy ever went to a full disk.".into(),
        ]);
    }
    let mut changing_json = serde_json::Value::Null;
    if let Some((more_tables, plot, note, json)) = changing {
        tables.extend(more_tables);
        plots.push(plot);
        notes.push(note);
        changing_json = json;
    }
    Ok(Report {
        title: format!(
            "policies: {} racks x {} hosts x {} disks, {} objects of {} MiB, pool of {} PGs x {} replicas, k = {}, seed {}",
            args.racks,
            args.hosts_per_rack,
            args.disks_per_host,
            args.objects,
            args.object_bytes >> 20,
            args.pg_num,
            args.size,
            args.choices,
            args.seed
        ),
        tables,
        notes,
        json: json!({
            "experiment": "policies", "racks": args.racks, "hosts_per_rack": args.hosts_per_rack,
            "disks_per_host": args.disks_per_host, "pg_num": args.pg_num, "size": args.size,
            "choices": args.choices, "objects": args.objects, "seed": args.seed, "policies": rows,
            "changing": changing_json,
        }),
        plots,
    })
}

/// The changing-metrics tables, plot, note and JSON.
fn changing_tables(
    args: &Args,
    map: &ClusterMap,
    list: &[PolicySpec],
    progress: &mut dyn Progress,
) -> Result<(Vec<Table>, Plot, String, serde_json::Value), SimError> {
    use changing::{Dynamics, simulate};
    let dynamics = Dynamics::of(args);
    let initial = draw_metrics(args, map);
    progress.start("policies, changing metrics", list.len() as u64);
    let mut outcomes = Vec::new();
    for policy in list {
        outcomes.push((*policy, simulate(args, &dynamics, map, &initial, *policy)?));
        progress.advance(1);
    }
    let first = outcomes[0].1.clone();
    let change =
        |value: f64, base: f64| if base == 0.0 { 0.0 } else { (value / base - 1.0) * 100.0 };
    let own = |policy: &PolicySpec| match policy {
        PolicySpec::Cpu => Some((0, "cpu %")),
        PolicySpec::Memory => Some((1, "memory %")),
        PolicySpec::Latency => Some((2, "latency ms")),
        PolicySpec::Journal => Some((3, "journal MiB")),
        _ => None,
    };
    let mut table = Table::new(
        &format!(
            "changing metrics: each policy's metric when it decided and when its objects met it, and what its objects got (vs first; {} objects)",
            args.changing_objects
        ),
        &[
            "policy",
            "its metric",
            "at decision",
            "at effect",
            "write latency ms",
            "vs first",
            "read latency ms",
            "vs first",
            "copies max/mean",
        ],
    );
    let mut rows = Vec::new();
    let mut series = vec![
        Series { name: "its metric at decision, vs first".into(), points: Vec::new() },
        Series { name: "its metric at effect, vs first".into(), points: Vec::new() },
        Series { name: "write latency vs first".into(), points: Vec::new() },
        Series { name: "read latency vs first".into(), points: Vec::new() },
    ];
    for (index, (policy, outcome)) in outcomes.iter().enumerate() {
        let (decided, effect, metric) = match own(policy) {
            Some((i, name)) => (
                Some(change(outcome.decided[i], first.decided[i])),
                Some(change(outcome.effect[i], first.effect[i])),
                name,
            ),
            None => (None, None, "-"),
        };
        let percent = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:+.1}%"));
        let write = change(outcome.write_ms, first.write_ms);
        let read = change(outcome.read_ms, first.read_ms);
        table.row(vec![
            policy.to_string(),
            metric.into(),
            percent(decided),
            percent(effect),
            format!("{:.2}", outcome.write_ms),
            format!("{write:+.1}%"),
            format!("{:.2}", outcome.read_ms),
            format!("{read:+.1}%"),
            format!("{:.3}", outcome.copies_max_over_mean),
        ]);
        let x = index as f64;
        series[0].points.push((x, decided.unwrap_or(0.0)));
        series[1].points.push((x, effect.unwrap_or(0.0)));
        series[2].points.push((x, write));
        series[3].points.push((x, read));
        rows.push(json!({
            "policy": policy.to_string(),
            "decided": {"cpu_percent": outcome.decided[0], "memory_percent": outcome.decided[1], "latency_ms": outcome.decided[2], "journal_mib": outcome.decided[3]},
            "effect": {"cpu_percent": outcome.effect[0], "memory_percent": outcome.effect[1], "latency_ms": outcome.effect[2], "journal_mib": outcome.effect[3]},
            "own_metric_change_at_decision_percent": decided,
            "own_metric_change_at_effect_percent": effect,
            "write_latency_ms": outcome.write_ms,
            "read_latency_ms": outcome.read_ms,
            "write_latency_change_percent": write,
            "read_latency_change_percent": read,
            "copies_max_over_mean": outcome.copies_max_over_mean,
            "objects": outcome.objects,
        }));
    }
    let note = format!(
        "Changing metrics ({}). Compare `at decision` with `at effect`: what a policy saw when it chose against what its objects met when their blocks landed (memory: when they were read). A transient metric (latency, journal) keeps only the part of its gain that outlives the delay — plus the part its own queued writes make, which the metric shows; a slow one (memory) keeps it all; and a read that CPU barely slows gains nothing from the cpu policy while the data piles up on the hosts that look idle (copies max/mean). --transient-ms, --staleness-ms and --cpu-sensitivity move these.",
        dynamics.describe()
    );
    let plot = Plot {
        title: "changing metrics: each policy against first, policies 0-8 in table order".into(),
        kind: PlotKind::Bars,
        x_label: "policy".into(),
        y_label: "change against first, %".into(),
        series,
        log_x: false,
    };
    let json = json!({
        "interval_ms": args.interval_ms, "staleness_ms": args.staleness_ms,
        "effect_delay_ms": args.effect_delay_ms, "read_after_ms": args.read_after_ms,
        "transient_ms": args.transient_ms, "cpu_ms": args.cpu_ms, "memory_ms": args.memory_ms,
        "cpu_sensitivity": args.cpu_sensitivity, "objects": args.changing_objects,
        "policies": rows,
    });
    Ok((vec![table], plot, note, json))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    #[test]
    fn each_policy_improves_its_own_metric_and_never_touches_full_disks() {
        let args = Args {
            racks: 3,
            hosts_per_rack: 3,
            disks_per_host: 3,
            pg_num: 512,
            size: 3,
            choices: 2,
            objects: 6000,
            object_bytes: 4 << 20,
            disk_bytes: 1 << 40,
            seed: 7,
            metrics: MetricsMode::Static,
            changing_objects: 3000,
            interval_ms: 2.0,
            staleness_ms: 1.0,
            effect_delay_ms: 3.4,
            read_after_ms: 10_000.0,
            transient_ms: 5.0,
            cpu_ms: 1_000.0,
            memory_ms: 600_000.0,
            cpu_sensitivity: 0.02,
        };
        let report = run(&args, &mut NoProgress).expect("runs");
        let rows = report.json["policies"].as_array().expect("rows");
        let value = |policy: &str, key: &str| {
            rows.iter()
                .find(|r| r["policy"] == policy)
                .and_then(|r| r[key].as_f64())
                .expect("value")
        };
        for (policy, key) in [
            ("cpu", "cpu_percent"),
            ("memory", "memory_percent"),
            ("space", "space_percent"),
            ("latency", "latency_us"),
            ("journal", "journal_bytes"),
        ] {
            assert!(value(policy, key) < value("first", key) * 0.97, "{policy}: {key}");
        }
        assert!(value("local", "in_rack_percent") > value("first", "in_rack_percent") + 10.0);
        for row in rows {
            assert_eq!(row["copies_on_full_disks"], 0);
        }
        let again = run(&args, &mut NoProgress).expect("runs");
        assert_eq!(report.json, again.json, "fixed seed, same numbers");
    }

    fn changing_args(transient_ms: f64) -> Args {
        Args {
            racks: 3,
            hosts_per_rack: 3,
            disks_per_host: 3,
            pg_num: 512,
            size: 3,
            choices: 2,
            objects: 10,
            object_bytes: 4 << 20,
            disk_bytes: 1 << 40,
            seed: 7,
            metrics: MetricsMode::Changing,
            changing_objects: 4000,
            // 27 disks: an object every 6 ms loads them about half (the default cluster's 80
            // disks take one every 2 ms).
            interval_ms: 6.0,
            staleness_ms: 1.0,
            effect_delay_ms: 3.4,
            read_after_ms: 10_000.0,
            transient_ms,
            cpu_ms: 1_000.0,
            memory_ms: 600_000.0,
            cpu_sensitivity: 0.02,
        }
    }

    fn changing_value(report: &Report, policy: &str, key: &str) -> f64 {
        let rows = report.json["changing"]["policies"].as_array().expect("rows");
        rows.iter().find(|r| r["policy"] == policy).and_then(|r| r[key].as_f64()).expect(key)
    }

    #[test]
    fn changing_metrics_take_the_transient_policies_gain_away_and_leave_memorys() {
        // A disk's load that changes faster than a block flies (2 ms against 4.4 ms).
        let args = changing_args(2.0);
        let report = run(&args, &mut NoProgress).expect("runs");
        let value = |policy: &str, key: &str| changing_value(&report, policy, key);
        for policy in ["latency", "journal"] {
            // At the decision, the policy sees a clearly better candidate…
            let decided = value(policy, "own_metric_change_at_decision_percent");
            let effect = value(policy, "own_metric_change_at_effect_percent");
            assert!(decided < -15.0, "{policy} at decision: {decided}");
            // …which has lost most of its advantage when the block lands (what is left comes
            // from the client's own queued writes, which the metric saw).
            assert!(effect > decided * 0.6, "{policy}: {effect} at effect, {decided} at decision");
        }
        // Memory changes slowly: its gain is still there when the object is read.
        let memory = value("memory", "own_metric_change_at_effect_percent");
        assert!(memory < -5.0, "memory at read time: {memory}");
        let memory_read = value("memory", "read_latency_change_percent");
        assert!(memory_read < -5.0, "memory's reads: {memory_read}");
        // CPU barely matters to a read: the cpu policy's reads gain a fraction of memory's.
        let cpu_read = value("cpu", "read_latency_change_percent");
        assert!(cpu_read.abs() < memory_read.abs() / 5.0, "cpu's reads: {cpu_read}");
        assert_eq!(report.tables.len(), 1, "changing only: its table");
        let again = run(&args, &mut NoProgress).expect("runs");
        assert_eq!(report.json, again.json, "fixed seed, same numbers");
    }

    #[test]
    fn a_slowly_changing_load_keeps_the_latency_policys_gain() {
        let report = run(&changing_args(200.0), &mut NoProgress).expect("runs");
        let decided = changing_value(&report, "latency", "own_metric_change_at_decision_percent");
        let effect = changing_value(&report, "latency", "own_metric_change_at_effect_percent");
        assert!(effect < decided * 0.9, "{effect} at effect, {decided} at decision");
    }
}
