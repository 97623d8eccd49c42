//! `elastic-layout`: the elastic-CH paper's equal-work layout and its guarantees.
//!
//! * The curve: objects per rank against the layout's expectation (primaries 1/(r·p) of the
//!   copies each, secondaries the rest in proportion to B/i).
//! * The check: a map whose membership versions shrink the cluster from n active servers down
//!   to p, one server at a time; for every object and every version, the placement as of that
//!   version has exactly one replica on a primary (when r − 1 secondaries are active; below
//!   that, primaries stand in and it is counted apart), and every object written at full power
//!   stays readable (one of its full-power replicas is active).
//! * Movement: going back up one server at a time, the copies that move against the copies
//!   the re-activated server takes (the least any placement giving it that load must move).
//! * The capacity-configuration helper: neighbouring ranks grouped into a few capacities.

use optio_placement::engine::elastic::{capacity_plan, default_primaries, expected_shares};
use optio_placement::{
    ActiveSpec, ClusterMap, ClusterMapBuilder, DeviceSpec, ElasticParams, ElasticSpec, EngineRef,
    MembershipSpec, Placement, PoolId, PoolSpec, ReplicaSet, VersionSpec,
};
use serde_json::json;

use crate::report::{Plot, PlotKind, Report, Series, Table};
use crate::{Progress, SimError};

/// Parameters of `optio sim elastic-layout`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Servers n.
    #[arg(long, default_value_t = 100)]
    pub servers: u32,
    /// Replicas r.
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Primaries p (default ⌈n / e²⌉).
    #[arg(long)]
    pub primaries: Option<u32>,
    /// B of the equal-work layout.
    #[arg(long, default_value_t = 65_536)]
    pub scale: u32,
    /// Objects placed.
    #[arg(long, default_value_t = 50_000)]
    pub objects: u32,
    /// Capacities for the configuration helper, in GB.
    #[arg(long, value_delimiter = ',', default_value = "2000,1500,1000,750,500,320")]
    pub capacities_gb: Vec<u64>,
}

/// n servers; versions 1..: n active, n − 1, …, p (a shrink, one server at a time).
fn shrinking_map(args: &Args, p: u32) -> Result<ClusterMap, SimError> {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..args.servers {
        builder = builder.device(DeviceSpec::new(id));
    }
    builder.membership = Some(MembershipSpec {
        order: Vec::new(),
        versions: (p..=args.servers)
            .rev()
            .map(|k| VersionSpec { version: None, active: ActiveSpec::FirstRanks(k) })
            .collect(),
    });
    let pool = PoolSpec {
        engine: EngineRef::Elastic(ElasticSpec { primaries: Some(p), scale: Some(args.scale) }),
        ..PoolSpec::crush(1, "elastic", 0, args.replicas)
    };
    Ok(builder.pool(pool).build()?)
}

/// Runs the experiment.
pub fn run(args: &Args, progress: &mut dyn Progress) -> Result<Report, SimError> {
    if args.servers < 2 || args.servers > 100_000 || args.objects == 0 {
        return Err(SimError::Parameter {
            parameter: "--servers/--objects",
            reason: "2 to 100000 servers and a positive number of objects".into(),
        });
    }
    if args.replicas == 0 || args.replicas > args.servers.min(32) {
        return Err(SimError::Parameter {
            parameter: "--replicas",
            reason: format!("1 to {}", args.servers.min(32)),
        });
    }
    let p = args.primaries.unwrap_or_else(|| default_primaries(args.servers));
    let map = shrinking_map(args, p)?;
    let placement = Placement::new(&map)?;
    let pool = placement.pool(PoolId(1)).expect("pool 1");
    let ring = pool.elastic().expect("an elastic pool");
    let membership = map.membership().expect("versions");
    let n = args.servers as usize;
    let keys: Vec<u32> =
        (0..args.objects).map(|i| pool.object_key(&format!("obj-{i}")).1).collect();
    // Full power: version 1.
    let mut full: Vec<ReplicaSet> = Vec::with_capacity(keys.len());
    let mut per_rank = vec![0f64; n];
    let mut set = ReplicaSet::new();
    for key in &keys {
        pool.place_as_of(1, *key, &mut set);
        for d in set.devices() {
            per_rank[ring.rank_of(d).expect("ranked") as usize - 1] += 1.0;
        }
        full.push(set);
    }
    let params = ElasticParams { primaries: p, scale: args.scale };
    let expected = expected_shares(&params, args.servers, args.replicas);
    let copies: f64 = per_rank.iter().sum();
    // Every version, from n active down to p.
    progress.start("versions", membership.versions.len() as u64);
    let (mut violations, mut stand_in_objects, mut unreadable, mut checked) =
        (0u64, 0u64, 0u64, 0u64);
    let mut version_rows = Vec::new();
    for version in &membership.versions {
        let k = membership.active_count(version);
        let rule_holds = k >= p + args.replicas - 1;
        let (mut not_one, mut unread) = (0u64, 0u64);
        for (i, key) in keys.iter().enumerate() {
            pool.place_as_of(version.version, *key, &mut set);
            let on_primaries = set.devices().filter(|d| ring.is_primary(*d)).count();
            if on_primaries != 1 {
                not_one += 1;
            }
            let readable = full[i].devices().any(|d| ring.rank_of(d).is_some_and(|rank| rank <= k));
            unread += u64::from(!readable);
        }
        checked += keys.len() as u64;
        unreadable += unread;
        if rule_holds {
            violations += not_one;
        } else {
            stand_in_objects += not_one;
        }
        version_rows.push(json!({"active": k, "rule_holds": rule_holds, "objects_not_exactly_one_primary": not_one, "unreadable": unread}));
        progress.advance(1);
    }
    // Growing back one server at a time: copies moved against the woken server's intake.
    let versions: Vec<(u64, u32)> =
        membership.versions.iter().map(|v| (v.version, membership.active_count(v))).collect();
    let (mut worst_ratio, mut total_moved, mut total_intake) = (1.0f64, 0u64, 0u64);
    let mut growth_points = Vec::new();
    let (mut before, mut after) = (ReplicaSet::new(), ReplicaSet::new());
    for pair in versions.windows(2).rev() {
        // pair[1] has one server fewer than pair[0]: wake it (pair[1] → pair[0]).
        let ((big, k_big), (small, k_small)) = (pair[0], pair[1]);
        if k_small < p + args.replicas - 1 {
            continue;
        }
        let woken = ring.device_of_rank(k_big).expect("ranked");
        let (mut moved, mut intake) = (0u64, 0u64);
        for key in &keys {
            pool.place_as_of(small, *key, &mut before);
            pool.place_as_of(big, *key, &mut after);
            moved += after.devices().filter(|d| !before.contains(*d)).count() as u64;
            intake += u64::from(after.contains(woken));
        }
        total_moved += moved;
        total_intake += intake;
        if intake > 0 {
            let ratio = moved as f64 / intake as f64;
            worst_ratio = worst_ratio.max(ratio);
            growth_points.push((f64::from(k_big), ratio));
        }
    }
    // Adding server n + 1 (ranked last, p pinned) and activating it with all the others.
    let mut grown = map.to_builder().device(DeviceSpec::new(args.servers));
    if let Some(m) = grown.membership.as_mut() {
        m.versions
            .push(VersionSpec { version: None, active: ActiveSpec::FirstRanks(args.servers + 1) });
    }
    let grown = grown.build()?;
    let grown_placement = Placement::new(&grown)?;
    let grown_pool = grown_placement.pool(PoolId(1)).expect("pool 1");
    let grown_version = grown.membership().expect("versions").current().version;
    let (mut add_moved, mut add_intake) = (0u64, 0u64);
    for key in &keys {
        pool.place_as_of(1, *key, &mut before);
        grown_pool.place_as_of(grown_version, *key, &mut after);
        add_moved += after.devices().filter(|d| !before.contains(*d)).count() as u64;
        add_intake += u64::from(after.contains(optio_placement::DeviceId(args.servers)));
    }
    let add_ratio = add_moved as f64 / add_intake.max(1) as f64;
    // Tables.
    let mut curve = Table::new(
        &format!(
            "equal-work layout at full power: n = {}, p = {p}, r = {}, B = {}, {} objects",
            args.servers, args.replicas, args.scale, args.objects
        ),
        &["rank", "role", "vnodes", "objects", "expected", "objects/expected"],
    );
    let mut shown: Vec<usize> = (1..=p as usize).take(3).collect();
    shown.extend([p as usize + 1, p as usize + 2, (n + p as usize) / 2, n - 1, n]);
    shown.retain(|rank| *rank >= 1 && *rank <= n);
    shown.dedup();
    for rank in shown {
        let want = expected[rank - 1] * copies;
        curve.row(vec![
            rank.to_string(),
            if rank as u32 <= p { "primary".into() } else { "secondary".into() },
            optio_placement::engine::elastic::vnodes_of_rank(&params, rank as u32).to_string(),
            format!("{:.0}", per_rank[rank - 1]),
            format!("{want:.0}"),
            format!("{:.3}", per_rank[rank - 1] / want),
        ]);
    }
    let deviation =
        (0..n).map(|i| (per_rank[i] / (expected[i] * copies) - 1.0).abs()).fold(0.0f64, f64::max);
    let mut checks = Table::new(
        &format!(
            "every object, every active-set size from {} down to {p} ({} versions)",
            args.servers,
            versions.len()
        ),
        &["check", "result"],
    );
    checks.row(vec!["placements checked".into(), checked.to_string()]);
    checks.row(vec![
        format!(
            "objects without exactly one primary copy (sizes >= p + r - 1 = {})",
            p + args.replicas - 1
        ),
        violations.to_string(),
    ]);
    checks.row(vec![
        format!("objects with primaries standing in (sizes < {})", p + args.replicas - 1),
        stand_in_objects.to_string(),
    ]);
    checks.row(vec!["objects written at full power not readable".into(), unreadable.to_string()]);
    checks.row(vec![
        "re-activation: copies moved / copies the woken server takes (all steps)".into(),
        format!(
            "{:.4} (worst step {:.4})",
            total_moved as f64 / total_intake.max(1) as f64,
            worst_ratio
        ),
    ]);
    checks.row(vec![
        format!("adding server {}: copies moved / copies it takes", args.servers + 1),
        format!("{add_ratio:.4} ({add_intake} copies)"),
    ]);
    let tb = 1_000_000_000u64;
    let capacities: Vec<u64> = args.capacities_gb.iter().map(|g| g.saturating_mul(tb)).collect();
    let plan = capacity_plan(&params, args.servers, args.replicas, &capacities);
    let mut tiers = Table::new(
        "capacity configuration: neighbouring ranks grouped into the available capacities",
        &["ranks", "servers", "capacity", "utilisation"],
    );
    for tier in &plan.tiers {
        tiers.row(vec![
            format!("{}-{}", tier.ranks.0, tier.ranks.1),
            (tier.ranks.1 - tier.ranks.0 + 1).to_string(),
            format!("{} GB", tier.capacity_bytes / tb),
            format!("{:.1}%", 100.0 * tier.utilisation),
        ]);
    }
    Ok(Report {
        title: "elastic-layout: the elastic-CH paper's equal-work layout, primary copies, readability and capacity tiers".into(),
        tables: vec![curve, checks, tiers],
        notes: vec![
            format!("Largest deviation of any rank from the equal-work expectation: {:.1}% (finite B and object count).", 100.0 * deviation),
            format!(
                "Capacity plan: {:.1}% of the capacity used when the most loaded server is full, against {:.1}% with every server at {} GB.",
                100.0 * plan.utilisation,
                100.0 * plan.uniform_utilisation,
                capacities.iter().max().copied().unwrap_or(0) / tb
            ),
            "Target: 100% of objects keep exactly one primary replica in every version (where r - 1 secondaries are active); data moved when a server is re-activated within 10% of the minimum (moved / woken server's intake <= 1.10).".into(),
        ],
        json: json!({
            "experiment": "elastic-layout",
            "servers": args.servers, "primaries": p, "replicas": args.replicas, "scale": args.scale,
            "objects_per_rank": per_rank,
            "expected_share_per_rank": expected,
            "largest_deviation": deviation,
            "versions": version_rows,
            "violations": violations, "stand_in_objects": stand_in_objects, "unreadable": unreadable,
            "reactivation_moved_over_intake": total_moved as f64 / total_intake.max(1) as f64,
            "reactivation_worst_step": worst_ratio,
            "addition_moved_over_intake": add_ratio,
            "capacity_plan": {
                "tiers": plan.tiers.iter().map(|t| json!({"first_rank": t.ranks.0, "last_rank": t.ranks.1, "capacity_bytes": t.capacity_bytes, "utilisation": t.utilisation})).collect::<Vec<_>>(),
                "utilisation": plan.utilisation, "uniform_utilisation": plan.uniform_utilisation,
            },
        }),
        plots: vec![
            Plot {
                title: "equal-work layout: objects per rank".into(),
                kind: PlotKind::Line,
                x_label: "rank".into(),
                y_label: "object copies".into(),
                series: vec![
                    Series { name: "placed".into(), points: per_rank.iter().enumerate().map(|(i, v)| (i as f64 + 1.0, *v)).collect() },
                    Series { name: "expected (B/p, B/i)".into(), points: expected.iter().enumerate().map(|(i, s)| (i as f64 + 1.0, s * copies)).collect() },
                ],
                log_x: false,
            },
            Plot {
                title: "re-activating one server: copies moved / copies it takes".into(),
                kind: PlotKind::Scatter,
                x_label: "active servers after".into(),
                y_label: "moved / intake".into(),
                series: vec![Series { name: "elastic".into(), points: growth_points }],
                log_x: false,
            },
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    #[test]
    fn every_version_keeps_one_primary_copy_and_readability() {
        let args = Args {
            servers: 20,
            replicas: 2,
            primaries: None,
            scale: 8192,
            objects: 3000,
            capacities_gb: vec![2000, 1000, 500],
        };
        let report = run(&args, &mut NoProgress).expect("runs");
        assert_eq!(report.json["primaries"], 3);
        assert_eq!(report.json["violations"], 0);
        assert_eq!(report.json["unreadable"], 0);
        assert!(
            report.json["stand_in_objects"].as_u64().expect("number") > 0,
            "size p has no secondary"
        );
        let ratio = report.json["reactivation_moved_over_intake"].as_f64().expect("number");
        assert!((1.0..1.1).contains(&ratio), "{ratio}");
        let ratio = report.json["addition_moved_over_intake"].as_f64().expect("number");
        assert!((1.0..1.1).contains(&ratio), "{ratio}");
        assert!(run(&Args { replicas: 0, ..args }, &mut NoProgress).is_err());
    }
}
