//! `attributed-io`: how much data, and how much of the expected read load, lands on the fast
//! devices of a mixed HDD/SSD cluster under `attributed`, `ring` and `crush` — the mechanism
//! behind the attributed-CH paper's 105–303 % read-bandwidth gains, computed from placements.
//!
//! The cluster is the paper's testbed: 30 nodes in 3 racks (zones), half with a 200 GB SSD,
//! half with a 500 GB HDD, the SSDs 2.5 times as fast. Objects (optionally Zipf-popular) are
//! read whole. Two read models: every read served by the object's primary (first replica), or
//! by the fastest of its replicas. A device's read time is the bytes it serves over its
//! bandwidth; the cluster delivers all reads in the slowest device's time, so aggregate read
//! bandwidth = bytes read / max over devices of (bytes served / bandwidth). Also reported:
//! each class's share of stored data and how full the fullest device of each class is (the
//! price of the bandwidth strategy: SSDs hold more than their capacity share).

use optio_placement::crush::hash::hash32_2;
use optio_placement::{
    AttributedSpec, ClusterMap, ClusterMapBuilder, DeviceSpec, Placement, PoolId, PoolSpec,
    ReplicaSet, RingSpec,
};
use serde_json::json;

use super::hetero::{GIB, attributed_pool, ring_pool};
use crate::report::{Plot, PlotKind, Report, Series, Table};
use crate::{Progress, SimError};

/// Parameters of `optio sim attributed-io`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Nodes (half SSD, half HDD), spread over three racks.
    #[arg(long, default_value_t = 30)]
    pub nodes: u32,
    /// HDD bandwidth, MB/s.
    #[arg(long, default_value_t = 146)]
    pub hdd_mb_per_s: u32,
    /// SSD bandwidth over HDD bandwidth (the paper measured about 2.5).
    #[arg(long, default_value_t = 2.5)]
    pub ssd_speedup: f64,
    /// Objects.
    #[arg(long, default_value_t = 100_000)]
    pub objects: u32,
    /// Replicas (the paper's Sheepdog default: 3).
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Zipf exponent of object popularity (0: uniform; the paper's Figure 6(e)-(f) go to 1.5).
    #[arg(long, default_value_t = 0.0)]
    pub zipf: f64,
    /// Replicas in distinct racks (attributed: distinct zones; ring and crush: racks).
    #[arg(long)]
    pub distinct_racks: bool,
}

/// The testbed map: attributed (pool 1), ring (pool 2), crush straw2 across hosts (pool 3).
fn testbed(args: &Args) -> Result<ClusterMap, SimError> {
    let mut builder = ClusterMapBuilder::new();
    let ssd_bandwidth = (f64::from(args.hdd_mb_per_s) * args.ssd_speedup).round() as u32;
    for id in 0..args.nodes {
        let ssd = id % 2 == 0;
        let rack = format!("rack{}", id % 3);
        let host = format!("node{id}");
        let mut device = DeviceSpec::new(id)
            .capacity(if ssd { 200_000_000_000 } else { 500_000_000_000 })
            .at(&[("zone", &rack), ("host", &host)]);
        device.class = Some(if ssd { "ssd" } else { "hdd" }.into());
        device.bandwidth_mb_per_s = if ssd { ssd_bandwidth } else { args.hdd_mb_per_s };
        builder = builder.device(device);
    }
    let domain = if args.distinct_racks { "zone" } else { "host" };
    let mut attributed = attributed_pool(1, GIB, 4, args.replicas);
    if let optio_placement::EngineRef::Attributed(AttributedSpec { distinct_zones, .. }) =
        &mut attributed.engine
    {
        *distinct_zones = args.distinct_racks;
    }
    let mut ring = ring_pool(2, GIB, args.replicas);
    if let optio_placement::EngineRef::Ring(RingSpec { failure_domain, .. }) = &mut ring.engine {
        *failure_domain = Some(domain.into());
    }
    Ok(builder
        .replicated_rule(0, "replicated", "default", domain)
        .pool(attributed)
        .pool(ring)
        .pool(PoolSpec::crush(3, "crush", 4096, args.replicas))
        .build()?)
}

/// Zipf weights of `n` objects (rank by a hash so popularity is not tied to object ids).
fn popularity(n: u32, s: f64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            if s == 0.0 {
                return 1.0;
            }
            let rank = f64::from(hash32_2(i, 0x21bf) % n) + 1.0;
            rank.powf(-s)
        })
        .collect()
}

struct Outcome {
    ssd_data_share: f64,
    ssd_read_share_primary: f64,
    ssd_read_share_fastest: f64,
    bandwidth_primary: f64,
    bandwidth_fastest: f64,
    fullest_ssd: f64,
    fullest_hdd: f64,
}

fn evaluate(map: &ClusterMap, placement: &Placement, pool: u32, weights: &[f64]) -> Outcome {
    let pool = placement.pool(PoolId(pool)).expect("pool");
    let n = map.max_devices() as usize;
    let (mut stored, mut primary, mut fastest) = (vec![0f64; n], vec![0f64; n], vec![0f64; n]);
    let bandwidth: Vec<f64> = (0..n)
        .map(|d| {
            map.device(optio_placement::DeviceId(d as u32))
                .map_or(1.0, |d| f64::from(d.bandwidth_mb_per_s))
        })
        .collect();
    let mut scratch = placement.scratch();
    let mut set = ReplicaSet::new();
    for (i, weight) in weights.iter().enumerate() {
        let (_, key) = pool.object_key(&format!("obj-{i}"));
        pool.place(key, &mut scratch, &mut set);
        let devices: Vec<usize> = set.devices().map(|d| d.0 as usize).collect();
        for d in &devices {
            stored[*d] += 1.0;
        }
        if let Some(first) = devices.first() {
            primary[*first] += weight;
        }
        if let Some(best) = devices.iter().max_by(|a, b| bandwidth[**a].total_cmp(&bandwidth[**b]))
        {
            fastest[*best] += weight;
        }
    }
    let is_ssd = |d: usize| {
        map.device(optio_placement::DeviceId(d as u32)).and_then(|d| d.class.as_deref())
            == Some("ssd")
    };
    let share = |v: &[f64]| {
        let total: f64 = v.iter().sum();
        (0..n).filter(|d| is_ssd(*d)).map(|d| v[d]).sum::<f64>() / total.max(f64::MIN_POSITIVE)
    };
    // Bytes read over the slowest device's time (object size cancels out in ratios).
    let aggregate = |served: &[f64]| {
        let total: f64 = served.iter().sum();
        let slowest = (0..n).map(|d| served[d] / bandwidth[d]).fold(0.0f64, f64::max);
        if slowest > 0.0 { total / slowest } else { 0.0 }
    };
    // Fill: copies per byte of capacity, relative to the cluster's average.
    let capacity: Vec<f64> = (0..n)
        .map(|d| {
            map.device(optio_placement::DeviceId(d as u32)).map_or(0.0, |d| d.capacity_bytes as f64)
        })
        .collect();
    let average = stored.iter().sum::<f64>() / capacity.iter().sum::<f64>();
    let fullest = |ssd: bool| {
        (0..n)
            .filter(|d| is_ssd(*d) == ssd && capacity[*d] > 0.0)
            .map(|d| stored[d] / capacity[d] / average)
            .fold(0.0f64, f64::max)
    };
    Outcome {
        ssd_data_share: share(&stored),
        ssd_read_share_primary: share(&primary),
        ssd_read_share_fastest: share(&fastest),
        bandwidth_primary: aggregate(&primary),
        bandwidth_fastest: aggregate(&fastest),
        fullest_ssd: fullest(true),
        fullest_hdd: fullest(false),
    }
}

/// Runs the experiment.
pub fn run(args: &Args, progress: &mut dyn Progress) -> Result<Report, SimError> {
    if args.nodes < 6
        || args.nodes > 4096
        || args.objects == 0
        || args.replicas == 0
        || args.replicas > 3
    {
        return Err(SimError::Parameter {
            parameter: "--nodes/--objects/--replicas",
            reason: "6 to 4096 nodes, objects positive, 1 to 3 replicas (three racks)".into(),
        });
    }
    let valid =
        args.ssd_speedup > 0.0 && args.ssd_speedup.is_finite() && (0.0..=4.0).contains(&args.zipf);
    if !valid {
        return Err(SimError::Parameter {
            parameter: "--ssd-speedup/--zipf",
            reason: "a positive speed-up and a Zipf exponent from 0 to 4".into(),
        });
    }
    let map = testbed(args)?;
    let placement = Placement::new(&map)?;
    let weights = popularity(args.objects, args.zipf);
    progress.start("placing", 3);
    let mut outcomes = Vec::new();
    for (name, pool) in [("attributed", 1u32), ("ring", 2), ("crush", 3)] {
        outcomes.push((name, evaluate(&map, &placement, pool, &weights)));
        progress.advance(1);
    }
    let ring = outcomes[1].1.bandwidth_primary;
    let ring_fastest = outcomes[1].1.bandwidth_fastest;
    let mut table = Table::new(
        &format!(
            "{} nodes (half SSD 200 GB at {:.1}x, half HDD 500 GB), {} objects x {} replicas, Zipf {}",
            args.nodes, args.ssd_speedup, args.objects, args.replicas, args.zipf
        ),
        &[
            "engine",
            "SSD data share",
            "SSD reads (primary)",
            "SSD reads (fastest)",
            "read bw (primary) vs ring",
            "read bw (fastest) vs ring",
            "fullest SSD",
            "fullest HDD",
        ],
    );
    let mut json_rows = Vec::new();
    for (name, o) in &outcomes {
        table.row(vec![
            name.to_string(),
            format!("{:.1}%", 100.0 * o.ssd_data_share),
            format!("{:.1}%", 100.0 * o.ssd_read_share_primary),
            format!("{:.1}%", 100.0 * o.ssd_read_share_fastest),
            format!("{:+.0}%", 100.0 * (o.bandwidth_primary / ring - 1.0)),
            format!("{:+.0}%", 100.0 * (o.bandwidth_fastest / ring_fastest - 1.0)),
            format!("{:.2}x", o.fullest_ssd),
            format!("{:.2}x", o.fullest_hdd),
        ]);
        json_rows.push(json!({
            "engine": name,
            "ssd_data_share": o.ssd_data_share,
            "ssd_read_share_primary": o.ssd_read_share_primary,
            "ssd_read_share_fastest": o.ssd_read_share_fastest,
            "read_bandwidth_primary_relative_to_ring": o.bandwidth_primary / ring,
            "read_bandwidth_fastest_relative_to_ring": o.bandwidth_fastest / ring_fastest,
            "fullest_ssd_relative_fill": o.fullest_ssd,
            "fullest_hdd_relative_fill": o.fullest_hdd,
        }));
    }
    let capacity_share = 200.0 / 700.0;
    let bars = Series {
        name: "SSD share of reads served by primaries".into(),
        points: outcomes
            .iter()
            .enumerate()
            .map(|(i, (_, o))| (i as f64, 100.0 * o.ssd_read_share_primary))
            .collect(),
    };
    let data = Series {
        name: "SSD share of data".into(),
        points: outcomes
            .iter()
            .enumerate()
            .map(|(i, (_, o))| (i as f64, 100.0 * o.ssd_data_share))
            .collect(),
    };
    Ok(Report {
        title: "attributed-io: data and reads on the fast devices (the mechanism of the attributed-CH paper's Figures 6 and 8)".into(),
        tables: vec![table],
        notes: vec![
            format!("SSDs are {:.1}% of the capacity; ring and crush place data by capacity, attributed's bandwidth strategy by bandwidth in mixed sectors.", 100.0 * capacity_share),
            "read bw: bytes read over the slowest device's time (every device reads at its bandwidth, reads spread as placed). The paper measured 105-303% more read bandwidth than CH and CRUSH on its 30-node Sheepdog testbed (Figure 6(a)-(b)); a placement-only model cannot include its network and client limits, so only the direction and the mechanism are comparable.".into(),
            "fullest: a class's most loaded device, data per byte of capacity over the cluster's average: above 1 it fills first. Attributed trades SSD space for read bandwidth.".into(),
        ],
        json: json!({ "experiment": "attributed-io", "engines": json_rows, "ssd_capacity_share": capacity_share }),
        plots: vec![Plot {
            title: "share on SSDs (0 = attributed, 1 = ring, 2 = crush)".into(),
            kind: PlotKind::Bars,
            x_label: "engine".into(),
            y_label: "percent".into(),
            series: vec![data, bars],
            log_x: false,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    #[test]
    fn attributed_puts_more_reads_on_ssds_than_ring_and_crush() {
        let args = Args {
            nodes: 12,
            hdd_mb_per_s: 146,
            ssd_speedup: 2.5,
            objects: 20_000,
            replicas: 3,
            zipf: 0.0,
            distinct_racks: false,
        };
        let report = run(&args, &mut NoProgress).expect("runs");
        let engines = report.json["engines"].as_array().expect("engines");
        let ssd = |i: usize| engines[i]["ssd_read_share_primary"].as_f64().expect("number");
        assert!(ssd(0) > ssd(1) && ssd(0) > ssd(2), "{engines:?}");
        assert!(
            engines[0]["read_bandwidth_primary_relative_to_ring"].as_f64().expect("number") > 1.0
        );
        assert!(run(&Args { nodes: 2, ..args }, &mut NoProgress).is_err());
    }
}
