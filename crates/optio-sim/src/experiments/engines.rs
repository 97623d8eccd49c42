//! Balance and movement of every engine on one generated cluster: hosts of equal devices, one
//! pool per engine, then one device added, one removed and one reweighted to half.
//!
//! Balance is the spread of data per device (PG copies for PG pools, object copies for
//! object-level pools) against its mean; movement is the copies that change device against
//! the minimum any placement must move for that change (`analysis::movement`).

use optio_placement::analysis::{movement, pool_load};
use optio_placement::stats::Summary;
use optio_placement::{
    AttributedSpec, ClusterMap, ClusterMapBuilder, DeviceSpec, EngineRef, Placement, PoolId,
    PoolSpec, RingSpec, Weight,
};
use serde_json::json;

use crate::report::{Plot, PlotKind, Report, Series, Table};
use crate::{Progress, SimError};

/// Parameters of `optio sim engines`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Hosts (each its own failure domain).
    #[arg(long, default_value_t = 10)]
    pub hosts: u32,
    /// Devices per host.
    #[arg(long, default_value_t = 10)]
    pub devices_per_host: u32,
    /// PGs of the crush pool.
    #[arg(long, default_value_t = 4096)]
    pub pg_num: u32,
    /// Replicas.
    #[arg(long, default_value_t = 3)]
    pub size: u32,
    /// Objects simulated (object-level pools place each one).
    #[arg(long, default_value_t = 200_000)]
    pub objects: u64,
}

/// A change applied to the cluster.
#[derive(Clone, Copy, Debug)]
enum Change {
    Add,
    Remove,
    Reweight,
}

impl Change {
    fn name(self) -> &'static str {
        match self {
            Change::Add => "add",
            Change::Remove => "remove",
            Change::Reweight => "reweight",
        }
    }
}

/// The pools compared: (name, pool id, spec).
fn pools(args: &Args) -> Vec<(&'static str, PoolSpec)> {
    vec![
        ("crush", PoolSpec::crush(1, "crush", args.pg_num, args.size)),
        (
            "ring",
            PoolSpec {
                engine: EngineRef::Ring(RingSpec {
                    vnode_bytes: None,
                    failure_domain: Some("host".into()),
                }),
                ..PoolSpec::crush(2, "ring", 0, args.size)
            },
        ),
        (
            "attributed",
            PoolSpec {
                engine: EngineRef::Attributed(AttributedSpec {
                    throttle_bytes: Some(64 << 30),
                    sector_size: None,
                    zone_type: Some("host".into()),
                    distinct_zones: true,
                    bandwidth_tolerance_percent: None,
                    sector_base: None,
                    selection: None,
                }),
                ..PoolSpec::crush(3, "attributed", 0, args.size)
            },
        ),
        (
            "elastic",
            PoolSpec {
                engine: EngineRef::elastic(),
                ..PoolSpec::crush(4, "elastic", 0, args.size)
            },
        ),
        (
            "attributed-rdv",
            PoolSpec {
                engine: EngineRef::Attributed(AttributedSpec {
                    throttle_bytes: Some(64 << 30),
                    sector_size: None,
                    zone_type: Some("host".into()),
                    distinct_zones: true,
                    bandwidth_tolerance_percent: None,
                    sector_base: None,
                    selection: Some(optio_placement::SectorSelection::Rendezvous),
                }),
                ..PoolSpec::crush(5, "attributed-rdv", 0, args.size)
            },
        ),
    ]
}

fn cluster(args: &Args) -> Result<ClusterMap, SimError> {
    let mut builder = ClusterMapBuilder::new();
    let mut id = 0;
    for host in 0..args.hosts {
        let name = format!("host{host}");
        for _ in 0..args.devices_per_host {
            builder = builder.device(DeviceSpec::new(id).capacity(4 << 40).at(&[("host", &name)]));
            id += 1;
        }
    }
    builder = builder.replicated_rule(0, "replicated_rule", "default", "host");
    for (_, pool) in pools(args) {
        builder = builder.pool(pool);
    }
    Ok(builder.build()?)
}

/// `base` changed as an operator changes a map (its builder: bucket ids, the attributed
/// pool's sectors and the elastic pool's ranks and p stay). The removed and reweighted device
/// is the last one (the elastic layout's lowest rank, an ordinary device for the others).
fn changed(base: &ClusterMap, change: Change) -> Result<ClusterMap, SimError> {
    let mut builder = base.to_builder();
    let last = base.devices().last().map_or(0, |d| d.id.0);
    match change {
        Change::Add => {
            let id = base.max_devices();
            builder =
                builder.device(DeviceSpec::new(id).capacity(4 << 40).at(&[("host", "host0")]));
        }
        Change::Remove => {
            let item = optio_placement::ItemRef::Id(optio_placement::ItemId(last as i32));
            builder.devices.retain(|d| d.id.0 != last);
            for bucket in &mut builder.buckets {
                bucket.items.retain(|(i, _)| *i != item);
            }
            if let Some(membership) = builder.membership.as_mut() {
                membership.order.retain(|i| *i != item);
            }
        }
        Change::Reweight => {
            if let Some(device) = builder.devices.iter_mut().find(|d| d.id.0 == last) {
                device.reweight = Weight(0x8000);
            }
        }
    }
    Ok(builder.build()?)
}

/// Runs the experiment.
pub fn run(args: &Args, progress: &mut dyn Progress) -> Result<Report, SimError> {
    if args.hosts < args.size {
        return Err(SimError::Parameter {
            parameter: "--hosts",
            reason: format!(
                "{} hosts cannot hold {} replicas on distinct hosts",
                args.hosts, args.size
            ),
        });
    }
    if args.devices_per_host == 0 || args.objects == 0 {
        return Err(SimError::Parameter {
            parameter: "--devices-per-host/--objects",
            reason: "must be positive".into(),
        });
    }
    let base = cluster(args)?;
    let placement = Placement::new(&base)?;
    let changes = [Change::Add, Change::Remove, Change::Reweight];
    let mut table = Table::new(
        "balance (per-device load) and movement (copies moved / minimum) per engine",
        &["engine", "unit", "mean", "stdev", "max/mean", "add", "remove", "reweight"],
    );
    let mut json_rows = Vec::new();
    let mut bars = Vec::new();
    progress.start("placing", (pools(args).len() * (1 + changes.len())) as u64);
    for (index, (name, spec)) in pools(args).into_iter().enumerate() {
        let pool = placement.pool(spec.id).expect("built with this pool");
        let load = pool_load(&placement, pool, base.max_devices(), args.objects, 1, &mut |_| {});
        let counts: Vec<f64> = if pool.has_pgs() {
            load.pg_copies.iter().map(|&c| c as f64).collect()
        } else {
            load.objects.iter().map(|&c| c as f64).collect()
        };
        let summary = Summary::of(&counts);
        progress.advance(1);
        let mut ratios = Vec::new();
        for change in changes {
            let changed = changed(&base, change)?;
            let changed_placement = Placement::new(&changed)?;
            let m = movement(
                &base,
                &placement,
                &changed,
                &changed_placement,
                pool,
                changed_placement.pool(PoolId(spec.id.0)).expect("same pools"),
                args.objects,
                1,
                &mut |_| {},
            );
            ratios.push((change, m.moved, m.minimum_copies(), m.ratio_to_minimum()));
            progress.advance(1);
        }
        table.row(vec![
            name.to_string(),
            if pool.has_pgs() { "PG copies".into() } else { "objects".into() },
            format!("{:.1}", summary.mean),
            format!("{:.2}", summary.stdev),
            format!("{:.3}", summary.max_over_mean),
            format!("{:.2}", ratios[0].3),
            format!("{:.2}", ratios[1].3),
            format!("{:.2}", ratios[2].3),
        ]);
        bars.push(Series {
            name: name.to_string(),
            points: ratios.iter().enumerate().map(|(i, r)| (i as f64, r.3)).collect(),
        });
        let _ = index;
        json_rows.push(json!({
            "engine": name,
            "unit": if pool.has_pgs() { "pg_copies" } else { "objects" },
            "mean": summary.mean,
            "stdev": summary.stdev,
            "max_over_mean": summary.max_over_mean,
            "movement": ratios.iter().map(|(c, moved, minimum, ratio)| json!({
                "change": c.name(), "moved": moved, "minimum": minimum, "moved_over_minimum": ratio,
            })).collect::<Vec<_>>(),
        }));
    }
    Ok(Report {
        title: format!(
            "engines: {} hosts x {} devices, {} replicas, {} PGs (crush), {} objects (object-level pools)",
            args.hosts, args.devices_per_host, args.size, args.pg_num, args.objects
        ),
        tables: vec![table],
        notes: vec![
            "add: one device joins host0; remove: the last device leaves; reweight: the last device goes to 0.5 (elastic ignores reweights other than 0). Changes are made on the map's builder, so the attributed sectors, elastic ranks and p stay.".into(),
            "moved/minimum: 1.00 is optimal; the minimum is the change of the devices' weight shares.".into(),
        ],
        json: json!({ "experiment": "engines", "engines": json_rows }),
        plots: vec![Plot {
            title: "data moved / minimum (0 = add, 1 = remove, 2 = reweight)".into(),
            kind: PlotKind::Bars,
            x_label: "change".into(),
            y_label: "moved / minimum".into(),
            series: bars,
            log_x: false,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    #[test]
    fn small_cluster_runs_and_rings_move_near_the_minimum() {
        let args = Args { hosts: 4, devices_per_host: 3, pg_num: 256, size: 2, objects: 20_000 };
        let report = run(&args, &mut NoProgress).expect("runs");
        let engines = report.json["engines"].as_array().expect("array");
        assert_eq!(engines.len(), 5);
        let ring = &engines[1];
        assert_eq!(ring["engine"], "ring");
        for change in ring["movement"].as_array().expect("array") {
            let ratio = change["moved_over_minimum"].as_f64().expect("number");
            assert!(ratio > 0.5 && ratio < 2.0, "ring {}: {ratio}", change["change"]);
        }
        assert!(run(&Args { hosts: 1, ..args }, &mut NoProgress).is_err());
    }
}
