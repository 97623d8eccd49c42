//! `attributed-cost`: the attributed-CH paper's Table 1 (time to place 100,000 ids with 3
//! replicas on 64 … 32,768 nodes of two types) and Table 2 (memory at its node × vnode
//! counts), with `ring`, `crush` (straw2, one bucket) and `elastic` on the same nodes.
//!
//! Time: one thread places ids `0..ids` (each hashed to the engine's key, as an object-level
//! pool does, before the clock starts) through `PoolPlacement::place`, in id order — random
//! places on the ring — or, with `--key-order sorted`, in ascending key order, the order
//! libch-placement's benchmark looks its (random) ids up in; the best of `--runs` runs is
//! reported, since other work on a shared machine only ever adds time. CRUSH at large sizes
//! runs `--crush-ids` ids and is scaled to `--ids` (marked). Memory: the bytes of each
//! engine's compiled lookup tables (`memory_bytes`), the structure a client keeps to place
//! data.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use optio_placement::crush::hash::hash32_2;
use optio_placement::engine::ring::Ring;
use optio_placement::map::RingParams;
use optio_placement::{ClusterMap, Placement, PoolId, PoolPlacement, ReplicaSet};
use serde_json::json;

use super::hetero::{
    GIB, HDD, SSD, attributed_pool, crush_one_bucket, elastic_pool, nodes, ring_pool,
};
use crate::report::{Plot, PlotKind, Report, Series, Table};
use crate::{Progress, SimError};

/// The paper's Table 1: nodes, consistent hashing, CRUSH (straw), attributedCH (seconds).
pub const PAPER_TABLE_1: [(u32, f64, f64, f64); 4] = [
    (64, 0.0124, 1.4591, 0.0131),
    (512, 0.0204, 9.1039, 0.0218),
    (4096, 0.0332, 70.2185, 0.0361),
    (32768, 0.1783, 582.4153, 0.1948),
];

/// The paper's Table 2: nodes, vnodes per node, consistent hashing MB, attributedCH MB.
pub const PAPER_TABLE_2: [(u32, u32, f64, f64); 8] = [
    (100, 256, 0.72, 0.98),
    (500, 256, 3.51, 5.18),
    (1000, 256, 7.42, 9.77),
    (5000, 256, 39.06, 54.83),
    (10000, 256, 76.13, 107.65),
    (1000, 1024, 31.25, 45.06),
    (1000, 4096, 156.24, 195.30),
    (10000, 4096, 1562.4, 1953.0),
];

/// One megabyte as the paper counts it (its CH column is 40 bytes per vnode in MiB).
const MB: f64 = 1024.0 * 1024.0;

/// Parameters of `optio sim attributed-cost`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Node counts of Table 1 (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "64,512,4096,32768")]
    pub nodes: Vec<u32>,
    /// Ids placed per run (the paper: 100,000).
    #[arg(long, default_value_t = 100_000)]
    pub ids: u32,
    /// Replicas per id.
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Sector size s.
    #[arg(long, default_value_t = 4)]
    pub sector_size: u32,
    /// Runs per measurement; the best is reported.
    #[arg(long, default_value_t = 5)]
    pub runs: u32,
    /// Ids CRUSH places per run (straw2 is linear in the bucket size); scaled to --ids.
    #[arg(long, default_value_t = 10_000)]
    pub crush_ids: u32,
    /// Table 2 rows to measure, as NODESxVNODES (default: all eight of the paper's).
    #[arg(long, value_delimiter = ',')]
    pub memory_rows: Vec<String>,
    /// Skip Table 2.
    #[arg(long)]
    pub skip_memory: bool,
    /// Skip Table 1.
    #[arg(long)]
    pub skip_time: bool,
    /// Skip CRUSH in Table 1 (its column shows '-'; `scripts/bench-lookups.sh` uses this).
    #[arg(long)]
    pub skip_crush: bool,
    /// Order of the lookups in Table 1: `random` (ids in order, so keys at random places on
    /// the ring) or `sorted` (keys ascending, as libch-placement's benchmark sorts its ids
    /// before timing: neighbouring lookups share cache lines and branch outcomes).
    #[arg(long, value_enum, default_value_t = KeyOrder::Random)]
    pub key_order: KeyOrder,
    /// Also time libch-placement (the C library the paper measured with) in the same run:
    /// the path of its `ch-placement-benchmark` (built by `build.sh DIR` in
    /// `../shared/anchors/ch-placement/`). At each node count it runs `-s NODES -o IDS -r
    /// REPLICAS -p ring -v 256` (--runs times, the best kept) just before Optio's lookups, and
    /// the table gains its seconds and Optio's speed-ups over it. Its benchmark sorts its ids
    /// before timing, so `--key-order sorted` compares like with like.
    #[arg(long, value_name = "PATH")]
    pub compare_libch: Option<PathBuf>,
}

/// The order Table 1's lookups run in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrder {
    /// Ids 0, 1, 2, … hashed: every lookup lands at a random place on the ring.
    Random,
    /// The same keys sorted ascending.
    Sorted,
}

/// The keys of ids `0..ids` in pool `salt`, in `order`.
fn keys(ids: u32, salt: u32, order: KeyOrder) -> Vec<u32> {
    let mut keys: Vec<u32> = (0..ids).map(|i| hash32_2(i, salt)).collect();
    if order == KeyOrder::Sorted {
        keys.sort_unstable();
    }
    keys
}

/// Seconds to place `ids` ids in `order` (best of `runs`).
fn time_pool(
    pool: PoolPlacement<'_>,
    placement: &Placement,
    (ids, order): (u32, KeyOrder),
    runs: u32,
) -> f64 {
    let mut scratch = placement.scratch();
    let mut out = ReplicaSet::new();
    let keys = keys(ids, pool.pool().id.0, order);
    let mut best = f64::INFINITY;
    let mut sink = 0usize;
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        for &key in &keys {
            pool.place(key, &mut scratch, &mut out);
            sink = sink.wrapping_add(out.len());
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    std::hint::black_box(sink);
    best
}

/// Seconds to place `ids` ids in `order` through an attributed ring's batch interface (best
/// of `runs`).
fn time_batch(pool: PoolPlacement<'_>, (ids, order): (u32, KeyOrder), runs: u32) -> f64 {
    let Some(ring) = pool.attributed() else { return f64::NAN };
    let size = pool.pool().size as usize;
    let keys = keys(ids, pool.pool().id.0, order);
    let mut out = vec![ReplicaSet::new(); ids as usize];
    let mut best = f64::INFINITY;
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        ring.place_batch(&keys, size, &mut out);
        best = best.min(start.elapsed().as_secs_f64());
    }
    std::hint::black_box(&out);
    best
}

/// Seconds libch-placement's benchmark (`binary`) takes to place `ids` ids × `replicas` on
/// `nodes` servers with its `ring` module and 256 virtual nodes per server: the best of `runs`
/// runs, each read from the time column of its result line.
fn time_libch(
    binary: &Path,
    nodes: u32,
    ids: u32,
    replicas: u32,
    runs: u32,
) -> Result<f64, SimError> {
    let fail = |reason: String| SimError::Parameter { parameter: "--compare-libch", reason };
    let mut best = f64::INFINITY;
    for _ in 0..runs.max(1) {
        let output = Command::new(binary)
            .args(["-s", &nodes.to_string(), "-o", &ids.to_string(), "-r", &replicas.to_string()])
            .args(["-p", "ring", "-v", "256"])
            .output()
            .map_err(|e| {
                fail(format!(
                    "cannot run {}: {e} (give the path of libch-placement's ch-placement-benchmark, built by its build.sh)",
                    binary.display()
                ))
            })?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(fail(format!(
                "{} -s {nodes} -o {ids} -r {replicas} -p ring -v 256 failed ({}): {}",
                binary.display(),
                output.status,
                stderr.trim().chars().take(300).collect::<String>()
            )));
        }
        best = best.min(libch_seconds(&stdout).ok_or_else(|| {
            fail(format!(
                "{} printed no result line ('<objects> <replication> <servers> <virt_factor> <algorithm> <time (s)> <rate>'); its output began: {}",
                binary.display(),
                stdout.trim().chars().take(300).collect::<String>()
            ))
        })?);
    }
    Ok(best)
}

/// The time column of libch-placement's benchmark output: the first line not starting with
/// `#` that has at least seven fields, the sixth a positive number of seconds.
fn libch_seconds(output: &str) -> Option<f64> {
    output
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 7 {
                return None;
            }
            fields[5].parse::<f64>().ok().filter(|s| s.is_finite() && *s > 0.0)
        })
        .next()
}

/// The map of Table 1: attributed (pool 1), ring with 16 GiB vnodes (pool 2: 256 per HDD,
/// as the paper's CH had per node), elastic (pool 3), ring with 1 GiB vnodes (pool 4, as many as attributed).
fn table1_map(count: u32, args: &Args) -> Result<ClusterMap, SimError> {
    let mut ring_same = ring_pool(4, GIB, args.replicas);
    ring_same.name = "ring_1g".into();
    let mut builder = nodes(count, HDD, SSD)
        .pool(attributed_pool(1, GIB, args.sector_size, args.replicas))
        // 256 virtual nodes per HDD, 64 per SSD: the paper's CH had 256 per node; the ring
        // engine weights them by capacity.
        .pool(ring_pool(2, 16 * GIB, args.replicas))
        .pool(elastic_pool(3, args.replicas));
    // The ring engine is capped at 2^24 vnodes (about 6,500 of these nodes at 1 GiB).
    if u64::from(count) * 2560 <= optio_placement::engine::ring::RING_VNODES_MAX {
        builder = builder.pool(ring_same);
    }
    Ok(builder.build()?)
}

fn parse_row(row: &str) -> Result<(u32, u32), SimError> {
    let bad = || SimError::Parameter {
        parameter: "--memory-rows",
        reason: format!("'{row}' is not NODESxVNODES, e.g. 100x256"),
    };
    let (n, v) = row.split_once(['x', 'X', '×']).ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    let v: u32 = v.trim().parse().map_err(|_| bad())?;
    if n == 0 || v == 0 || v > 65_536 || u64::from(n) * u64::from(v) > 1 << 27 {
        return Err(SimError::Parameter {
            parameter: "--memory-rows",
            reason: format!("{row}: 1 to 65536 vnodes per node and at most 2^27 in all"),
        });
    }
    Ok((n, v))
}

/// Runs the experiment.
pub fn run(args: &Args, progress: &mut dyn Progress) -> Result<Report, SimError> {
    if args.ids == 0 || args.runs == 0 || args.replicas == 0 || args.replicas > 32 {
        return Err(SimError::Parameter {
            parameter: "--ids/--runs/--replicas",
            reason: "ids and runs must be positive, replicas 1 to 32".into(),
        });
    }
    if args.nodes.iter().any(|n| *n < args.replicas || *n > 1 << 20) {
        return Err(SimError::Parameter {
            parameter: "--nodes",
            reason: format!("each count from --replicas ({}) to 1048576", args.replicas),
        });
    }
    if args.skip_time && args.compare_libch.is_some() {
        return Err(SimError::Parameter {
            parameter: "--compare-libch",
            reason: "it times libch-placement beside Table 1, which --skip-time skips: drop one"
                .into(),
        });
    }
    let mut tables = Vec::new();
    let mut notes = Vec::new();
    let mut plots = Vec::new();
    let mut json_time = Vec::new();
    let mut json_memory = Vec::new();
    if !args.skip_time {
        progress.start("table 1", args.nodes.len() as u64 * 4);
        let mut table = Table::new(
            &format!(
                "Table 1: seconds to place {} ids x {} replicas, one thread, keys in {} order (best of {}); paper values (for 100,000 ids) for reference",
                args.ids,
                args.replicas,
                match args.key_order {
                    KeyOrder::Random => "random",
                    KeyOrder::Sorted => "sorted",
                },
                args.runs
            ),
            &[
                &[
                    "nodes",
                    "paper CH",
                    "paper CRUSH",
                    "paper attrCH",
                    "ring",
                    "ring 1G",
                    "crush",
                    "attributed",
                    "attr batch",
                    "elastic",
                    "attr vs paper",
                    "batch vs paper",
                    "attr/ring",
                    "attr/ring 1G",
                    "elastic/ring",
                    "attr MB",
                ][..],
                if args.compare_libch.is_some() {
                    &["libch ring", "ch/attr", "ch/ring", "ch/elastic"][..]
                } else {
                    &[][..]
                },
            ]
            .concat(),
        );
        let mut speedups = Vec::new();
        let mut batch_speedups = Vec::new();
        let mut over_libch: [Vec<(f64, f64)>; 3] = Default::default();
        for &count in &args.nodes {
            let paper = PAPER_TABLE_1.iter().find(|p| p.0 == count);
            // libch first, then Optio's lookups: on a shared machine, drift hits both.
            let libch = match &args.compare_libch {
                Some(binary) => {
                    Some(time_libch(binary, count, args.ids, args.replicas, args.runs)?)
                }
                None => None,
            };
            let map = table1_map(count, args)?;
            let placement = Placement::new(&map)?;
            let pool = |id| placement.pool(PoolId(id)).expect("built with pools 1 to 3");
            let ids = (args.ids, args.key_order);
            let attributed = time_pool(pool(1), &placement, ids, args.runs);
            let batch = time_batch(pool(1), ids, args.runs);
            progress.advance(1);
            let ring = time_pool(pool(2), &placement, ids, args.runs);
            let ring_same =
                placement.pool(PoolId(4)).map(|p| time_pool(p, &placement, ids, args.runs));
            progress.advance(1);
            let elastic = time_pool(pool(3), &placement, ids, args.runs);
            progress.advance(1);
            let attributed_bytes = pool(1).attributed().map_or(0, |r| r.memory_bytes());
            drop(placement);
            drop(map);
            let crush_ids = args.crush_ids.min(args.ids).max(1);
            let crush = if args.skip_crush {
                None
            } else {
                let crush_map = crush_one_bucket(count, HDD, SSD, args.replicas);
                let crush_placement = Placement::new(&crush_map)?;
                let crush_pool = crush_placement.pool(PoolId(1)).expect("pool 1");
                Some(
                    time_pool(
                        crush_pool,
                        &crush_placement,
                        (crush_ids, args.key_order),
                        args.runs.min(3),
                    ) * f64::from(args.ids)
                        / f64::from(crush_ids),
                )
            };
            progress.advance(1);
            let cell = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
            // The paper's times are for 100,000 ids; compare per id.
            let per_id = f64::from(args.ids) / 100_000.0;
            let speedup = paper.map(|p| p.3 * per_id / attributed);
            let batch_speedup = paper.map(|p| p.3 * per_id / batch);
            if let (Some(s), Some(b)) = (speedup, batch_speedup) {
                speedups.push((f64::from(count), s));
                batch_speedups.push((f64::from(count), b));
            }
            let mut cells = vec![
                count.to_string(),
                cell(paper.map(|p| p.1)),
                cell(paper.map(|p| p.2)),
                cell(paper.map(|p| p.3)),
                format!("{ring:.4}"),
                cell(ring_same),
                crush.map_or("-".into(), |crush| {
                    format!("{crush:.4}{}", if crush_ids < args.ids { "*" } else { "" })
                }),
                format!("{attributed:.4}"),
                format!("{batch:.4}"),
                format!("{elastic:.4}"),
                speedup.map_or("-".into(), |s| format!("{s:.1}x")),
                batch_speedup.map_or("-".into(), |s| format!("{s:.1}x")),
                format!("{:.2}", attributed / ring),
                ring_same.map_or("-".into(), |r| format!("{:.2}", attributed / r)),
                format!("{:.2}", elastic / ring),
                format!("{:.1}", attributed_bytes as f64 / MB),
            ];
            if let Some(libch) = libch {
                cells.push(format!("{libch:.4}"));
                for (i, ours) in [attributed, ring, elastic].into_iter().enumerate() {
                    cells.push(format!("{:.2}x", libch / ours));
                    over_libch[i].push((f64::from(count), libch / ours));
                }
            }
            table.row(cells);
            json_time.push(json!({
                "nodes": count,
                "key_order": format!("{:?}", args.key_order).to_lowercase(),
                "seconds": {"ring": ring, "ring_1g": ring_same, "crush": crush, "attributed": attributed, "attributed_batch": batch, "elastic": elastic},
                "crush_ids_measured": crush_ids,
                "paper_seconds": paper.map(|p| json!({"ch": p.1, "crush": p.2, "attributed": p.3})),
                "attributed_speedup_over_paper": speedup,
                "attributed_batch_speedup_over_paper": batch_speedup,
                "attributed_over_ring_1g": ring_same.map(|r| attributed / r),
                "attributed_over_ring": attributed / ring,
                "elastic_over_ring": elastic / ring,
                "attributed_memory_bytes": attributed_bytes,
                "libch_ring_seconds": libch,
                "libch_over": libch.map(|l| json!({"attributed": l / attributed, "ring": l / ring, "elastic": l / elastic})),
            }));
        }
        tables.push(table);
        notes.push(format!(
            "Nodes alternate <4096 GiB, 146 MB/s, zone0, hdd> and <1024 GiB, 540 MB/s, zone1, ssd>. attributed: c_throttle 1 GiB (4096 and 1024 vnodes), s = {}; 'attr batch': AttributedRing::place_batch (same placements, lookups of 16 keys interleaved); ring: 16 GiB vnodes, 256 per HDD and 64 per SSD (the paper's CH had 256 per node; the ring engine weights by capacity); ring 1G: 1 GiB vnodes, as many as attributed (absent above the ring's 2^24-vnode cap); crush: straw2, all nodes in one bucket; elastic: p = ceil(n/e^2), B = 65536. * = CRUSH measured on --crush-ids ids and scaled.",
            args.sector_size
        ));
        notes.push("The paper's columns are a 2016 machine's times, for reference only. Targets (issue 18), against libch-placement's ring with 256 virtual nodes per node timed in the same run (--compare-libch): attributed one lookup at a time at least 2x faster ('ch/attr' >= 2), ring at least 3x ('ch/ring' >= 3), elastic at least 2x ('ch/elastic' >= 2); and attributed at most 1.2x the ring with as many virtual nodes ('attr/ring 1G' <= 1.2). scripts/bench-lookups.sh runs both orders, interleaved, best of several rounds.".into());
        plots.push(Plot {
            title: "attributed: speed-up over the paper's Table 1".into(),
            kind: PlotKind::Line,
            x_label: "nodes".into(),
            y_label: "paper time / our time".into(),
            series: vec![
                Series { name: "attributed (one lookup at a time)".into(), points: speedups },
                Series { name: "attributed (batches of 16)".into(), points: batch_speedups },
            ],
            log_x: true,
        });
        if args.compare_libch.is_some() {
            let [attributed, ring, elastic] = over_libch;
            plots.push(Plot {
                title: "speed-up over libch-placement's ring (256 vnodes per node), same run"
                    .into(),
                kind: PlotKind::Line,
                x_label: "nodes".into(),
                y_label: "libch time / our time".into(),
                series: vec![
                    Series { name: "attributed (target 2x)".into(), points: attributed },
                    Series { name: "ring (target 3x)".into(), points: ring },
                    Series { name: "elastic (target 2x)".into(), points: elastic },
                ],
                log_x: true,
            });
        }
    }
    if !args.skip_memory {
        let rows: Vec<(u32, u32)> = if args.memory_rows.is_empty() {
            PAPER_TABLE_2.iter().map(|r| (r.0, r.1)).collect()
        } else {
            args.memory_rows.iter().map(|r| parse_row(r)).collect::<Result<_, _>>()?
        };
        progress.start("table 2", rows.len() as u64);
        let mut table = Table::new(
            "Table 2: memory of the lookup tables (MB = 2^20 bytes); paper values for reference",
            &[
                "nodes x vnodes",
                "paper CH",
                "paper attrCH",
                "ring",
                "attributed",
                "attr B/vnode",
                "attr / paper",
            ],
        );
        for (count, vnodes) in rows {
            let paper = PAPER_TABLE_2.iter().find(|p| p.0 == count && p.1 == vnodes);
            let capacity = u64::from(vnodes) * GIB;
            let first = super::hetero::NodeType { capacity_bytes: capacity, ..HDD };
            let second = super::hetero::NodeType { capacity_bytes: capacity, ..SSD };
            let map = nodes(count, first, second)
                .pool(attributed_pool(1, GIB, args.sector_size, args.replicas))
                .build()?;
            let placement = Placement::new(&map)?;
            let ring_attr =
                placement.pool(PoolId(1)).and_then(|p| p.attributed()).expect("attributed pool");
            let attributed = ring_attr.memory_bytes() as f64;
            let slots = ring_attr.vnode_count() as f64;
            drop(placement);
            // The ring is compiled directly: the builder caps ring pools at 2^24 vnodes.
            let ring = Ring::new(&map, &RingParams { vnode_bytes: GIB, failure_domain: None });
            let ring_bytes = ring.memory_bytes() as f64;
            drop(ring);
            let ratio = paper.map(|p| attributed / MB / p.3);
            table.row(vec![
                format!("{count} x {vnodes}"),
                paper.map_or("-".into(), |p| format!("{:.2}", p.2)),
                paper.map_or("-".into(), |p| format!("{:.2}", p.3)),
                format!("{:.2}", ring_bytes / MB),
                format!("{:.2}", attributed / MB),
                format!("{:.2}", attributed / slots),
                ratio.map_or("-".into(), |r| format!("{r:.3}")),
            ]);
            json_memory.push(json!({
                "nodes": count, "vnodes_per_node": vnodes,
                "ring_bytes": ring_bytes, "attributed_bytes": attributed,
                "attributed_bytes_per_vnode": attributed / slots,
                "paper_mb": paper.map(|p| json!({"ch": p.2, "attributed": p.3})),
                "attributed_over_paper": ratio,
            }));
            progress.advance(1);
        }
        tables.push(table);
        notes.push("Target: attributed memory at most 1/4 of the paper's at every row ('attr / paper' <= 0.25). Memory rows: every node V GiB (V vnodes at c_throttle 1 GiB), alternating hdd 146 MB/s and ssd 540 MB/s.".into());
    }
    Ok(Report {
        title: "attributed-cost: the attributed-CH paper's Tables 1 and 2 on Optio's engines"
            .into(),
        tables,
        notes,
        json: json!({ "experiment": "attributed-cost", "table1": json_time, "table2": json_memory }),
        plots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    /// Sorted keys are the random-order keys, ascending: the same lookups in another order.
    #[test]
    fn sorted_keys_are_the_same_keys_ascending() {
        let random = keys(5000, 2, KeyOrder::Random);
        let sorted = keys(5000, 2, KeyOrder::Sorted);
        assert!(sorted.windows(2).all(|w| w[0] <= w[1]));
        assert_ne!(random, sorted);
        let mut again = random.clone();
        again.sort_unstable();
        assert_eq!(again, sorted);
        assert_eq!(random[7], hash32_2(7, 2));
    }

    /// A run small enough for a test: 8 nodes, 2,000 ids, both tables (one memory row).
    fn small_args() -> Args {
        Args {
            nodes: vec![8],
            ids: 2000,
            replicas: 3,
            sector_size: 4,
            runs: 1,
            crush_ids: 500,
            memory_rows: vec!["10x16".into()],
            skip_memory: false,
            skip_time: false,
            skip_crush: false,
            key_order: KeyOrder::Random,
            compare_libch: None,
        }
    }

    #[test]
    fn small_run_reports_both_tables() {
        let args = small_args();
        let report = run(&args, &mut NoProgress).expect("runs");
        assert_eq!(report.tables.len(), 2);
        let row = &report.json["table1"][0];
        assert!(row["seconds"]["attributed"].as_f64().expect("number") > 0.0);
        let memory = &report.json["table2"][0];
        assert!(memory["attributed_bytes"].as_f64().expect("number") > 0.0);
        let no_crush = run(
            &Args { skip_crush: true, skip_memory: true, memory_rows: vec![], ..args.clone() },
            &mut NoProgress,
        )
        .expect("runs");
        assert!(no_crush.json["table1"][0]["seconds"]["crush"].is_null());
        assert!(no_crush.json["table1"][0]["seconds"]["ring"].as_f64().expect("number") > 0.0);
        let sorted = run(
            &Args { key_order: KeyOrder::Sorted, skip_memory: true, ..args.clone() },
            &mut NoProgress,
        )
        .expect("runs");
        assert_eq!(sorted.json["table1"][0]["key_order"], "sorted");
        assert!(sorted.json["table1"][0]["seconds"]["elastic"].as_f64().expect("number") > 0.0);
        assert!(
            run(
                &Args { memory_rows: vec!["10by16".into()], skip_time: true, ..args },
                &mut NoProgress
            )
            .is_err()
        );
    }

    /// libch's result line is found among its comment lines; anything else is no result.
    #[test]
    fn libch_output_is_parsed_or_refused() {
        let output = "# Generating random object IDs...\n# Done.\n# <objects>\t<replication>\t<servers>\t<virt_factor>\t<algorithm>\t<time (s)>\t<rate oids/s>\n100000\t3\t64\t256\tring\t0.003672\t27232203.609921\n";
        assert_eq!(libch_seconds(output), Some(0.003672));
        assert_eq!(libch_seconds("# only comments\n"), None);
        assert_eq!(libch_seconds("100000 3 64 256 ring\n"), None);
        assert_eq!(libch_seconds("100000 3 64 256 ring nan 1\n"), None);
        assert_eq!(libch_seconds("100000 3 64 256 ring -1 1\n"), None);
        assert_eq!(libch_seconds(""), None);
    }

    /// With --compare-libch the table gains libch's seconds and the speed-ups over it,
    /// computed from what the binary printed; a binary that is missing, fails or prints no
    /// result line is a clear error.
    #[cfg(unix)]
    #[test]
    fn compare_libch_runs_the_given_binary() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temporary directory");
        let script = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            path
        };
        // Refuses any arguments but those the run should pass (8 nodes, 2,000 ids, 3
        // replicas, its ring module with 256 virtual nodes per node).
        let fake = script(
            "libch",
            "[ \"$1 $2 $3 $4 $5 $6 $7 $8 $9 ${10}\" = '-s 8 -o 2000 -r 3 -p ring -v 256' ] || { echo \"unexpected arguments: $*\" >&2; exit 2; }\necho '# header'; echo '2000 3 8 256 ring 2.5 800'",
        );
        let args = Args {
            skip_memory: true,
            skip_crush: true,
            key_order: KeyOrder::Sorted,
            compare_libch: Some(fake),
            ..small_args()
        };
        let report = run(&args, &mut NoProgress).expect("runs");
        let row = &report.json["table1"][0];
        assert_eq!(row["libch_ring_seconds"].as_f64(), Some(2.5));
        let attributed = row["seconds"]["attributed"].as_f64().expect("number");
        let over = row["libch_over"]["attributed"].as_f64().expect("number");
        assert!((over - 2.5 / attributed).abs() < 1e-9 * over);
        assert!(report.tables[0].headers.iter().any(|h| h == "ch/attr"));
        let bad = |binary: PathBuf| {
            run(&Args { compare_libch: Some(binary), ..args.clone() }, &mut NoProgress)
                .expect_err("refused")
                .to_string()
        };
        let missing = bad(dir.path().join("absent"));
        assert!(missing.contains("--compare-libch") && missing.contains("cannot run"), "{missing}");
        let failing = bad(script("failing", "echo 'bad option' >&2; exit 3"));
        assert!(failing.contains("failed") && failing.contains("bad option"), "{failing}");
        let silent = bad(script("silent", "echo '# nothing'"));
        assert!(silent.contains("no result line"), "{silent}");
        let skipped = run(
            &Args { skip_time: true, memory_rows: vec!["10x16".into()], ..args.clone() },
            &mut NoProgress,
        );
        assert!(skipped.is_err());
    }
}
