//! `optio analyze`: the balance of a map.

use std::path::PathBuf;

use anyhow::{Result, bail};
use optio_placement::analysis::{
    ClusterLoad, PoolLoad, cluster_load, cluster_load_steps, domain_loads, failure_domain,
};
use optio_placement::stats::{Histogram, Summary};
use optio_placement::{ClusterMap, EngineSpec, Placement, PoolId, TypeId};
use serde_json::json;

use super::PoolArgs;
use crate::load::load_map;
use crate::output::{Table, bytes, histogram, parse_size, progress};

/// Arguments of `optio analyze`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  optio analyze --map examples/ceph-1000osd.txt
  optio analyze --map examples/small.toml --pool rbd --objects 1000000 --object-size 4MiB
  optio analyze --map map.txt --pg-num 32768 --size 3 --by rack --json")]
pub struct Args {
    /// Map: a file (Optio TOML, Ceph text from crushtool -d or Ceph JSON from crushtool
    /// --dump), or a live cluster's — its directory or etcd://HOST:PORT[/prefix].
    #[arg(long, env = "OPTIO_MAP")]
    map: PathBuf,
    #[command(flatten)]
    pool: PoolArgs,
    /// Objects to simulate (named obj-0, obj-1, …) for object and byte counts.
    #[arg(long, default_value_t = 100_000)]
    objects: u64,
    /// Size of each simulated object.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    object_size: u64,
    /// Failure-domain type to aggregate by (default: the pool's failure domain).
    #[arg(long, value_name = "TYPE")]
    by: Option<String>,
    /// Bins of the histogram.
    #[arg(long, default_value_t = 16)]
    bins: usize,
    /// List every device (default: the 10 most and 5 least loaded).
    #[arg(long)]
    all_devices: bool,
    /// JSON for scripts.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let loaded = load_map(&args.map)?;
    let (map, pools) = args.pool.resolve(loaded.map)?;
    let placement = Placement::new(&map)?;
    let steps = cluster_load_steps(&map, &pools, args.objects);
    let bar = progress(steps, "placing", steps > 1_000_000);
    let load =
        cluster_load(&map, &placement, &pools, args.objects, args.object_size, &mut |n| bar.inc(n));
    bar.finish_and_clear();
    if load.eligible.is_empty() {
        bail!("no device can hold data in the selected pools (all out, down or zero weight?)");
    }
    let domain_type = match &args.by {
        Some(name) => Some(map.type_by_name(name).ok_or_else(|| {
            let names: Vec<&str> = map.types().iter().map(|t| t.name.as_str()).collect();
            anyhow::anyhow!("--by {name}: no such type; the map's types are {}", names.join(", "))
        })?),
        None => pools.first().and_then(|id| failure_domain(&map, *id)),
    };
    let domains = domain_type.map(|t| domain_summary(&map, t, &load));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json_report(&args, &map, &load, domains))?);
    } else {
        print_report(&args, &map, &pools, &load, domains);
    }
    Ok(())
}

/// The metric balance is judged on, its values over the eligible devices, and its histogram.
fn judged(load: &ClusterLoad, bins: usize) -> (Summary, f64, Histogram) {
    let (counts, summary, deviation) = if load.uses_pgs() {
        (&load.total.pg_copies, load.pg_summary(), load.pg_deviation())
    } else {
        (&load.total.objects, load.object_summary(), load.object_deviation())
    };
    let values: Vec<f64> = load.eligible.iter().map(|&i| counts[i] as f64).collect();
    (summary, deviation, Histogram::of(&values, bins))
}

fn json_report(
    args: &Args,
    map: &ClusterMap,
    load: &ClusterLoad,
    domains: Option<Domains>,
) -> serde_json::Value {
    let uses_pgs = load.uses_pgs();
    let (primary_summary, primary_deviation, hist) = judged(load, args.bins);
    let (pg_summary, object_summary) = (load.pg_summary(), load.object_summary());
    let (total, expected_pgs, expected_objects) =
        (&load.total, &load.expected_pgs, &load.expected_objects);
    let pool_reports: Vec<serde_json::Value> =
        load.pools.iter().map(|(id, pool, shares)| pool_report(map, *id, pool, shares)).collect();
    let devices: Vec<serde_json::Value> = load
        .eligible
        .iter()
        .map(|&i| {
            let device = map.device(optio_placement::DeviceId(i as u32));
            json!({
                "id": i,
                "name": device.map(|d| d.name.as_str()),
                "class": device.and_then(|d| d.class.as_deref()),
                "weight": device.map(|d| d.weight.as_f64()),
                "pgs": total.pg_copies[i],
                "expected_pgs": expected_pgs[i],
                "objects": total.objects[i],
                "expected_objects": expected_objects[i],
                "bytes": total.bytes[i],
            })
        })
        .collect();
    json!({
        "map": loaded_path(&args.map),
        "epoch": map.epoch().0,
        "pools": pool_reports,
        "metric": if uses_pgs { "pgs" } else { "objects" },
        "devices": devices,
        "mean": primary_summary.mean,
        "stdev": primary_summary.stdev,
        "min": primary_summary.min,
        "max": primary_summary.max,
        "max_over_mean": primary_summary.max_over_mean,
        "stdev_from_expected": primary_deviation,
        "pgs": summary_json(&pg_summary, Some(load.pg_deviation())),
        "objects": summary_json(&object_summary, Some(load.object_deviation())),
        "undersized": total.undersized,
        "histogram": { "lower": hist.lower, "width": hist.width, "counts": hist.counts },
        "domains": domains.map(|d| d.json),
    })
}

fn print_report(
    args: &Args,
    map: &ClusterMap,
    pools: &[PoolId],
    load: &ClusterLoad,
    domains: Option<Domains>,
) {
    let uses_pgs = load.uses_pgs();
    let (_, _, hist) = judged(load, args.bins);
    let (pg_summary, object_summary) = (load.pg_summary(), load.object_summary());
    let (total, expected_pgs, expected_objects, eligible) =
        (&load.total, &load.expected_pgs, &load.expected_objects, &load.eligible);

    let plural =
        |n: usize, word: &str| if n == 1 { format!("1 {word}") } else { format!("{n} {word}s") };
    println!(
        "map {} (epoch {}): {}, {}, {}",
        args.map.display(),
        map.epoch(),
        plural(map.devices().len(), "device"),
        plural(map.buckets().filter(|b| b.shadow_of.is_none()).count(), "bucket"),
        plural(map.rules().len(), "rule"),
    );
    for id in pools {
        println!("  {}", describe_pool(map, *id, args.objects, args.object_size));
    }
    if args.objects > 0 {
        println!("  space of the simulated objects (raw: every replica or chunk placed):");
        for (id, pool_load, _) in &load.pools {
            let Some(pool) = map.pool(*id) else { continue };
            let space = space_json(pool, pool_load);
            println!(
                "    {:<12} {:<14} logical {:>10}  raw {:>10}  raw/logical {:.3}",
                pool.name,
                space["redundancy"].as_str().unwrap_or("?"),
                bytes(pool_load.logical_bytes as f64),
                bytes(pool_load.raw_bytes() as f64),
                space["raw_over_logical"].as_f64().unwrap_or(0.0),
            );
        }
    }
    if total.undersized > 0 {
        println!("  warning: {} placements got fewer devices than the pool size", total.undersized);
    }
    println!();
    let line = |label: &str, s: &Summary, dev: f64| {
        println!(
            "{label:<22} mean {:>10.2}  stdev {:>8.2}  min {:>8}  max {:>8}  max/mean {:.3}  (stdev from weight-expected {:.2})",
            s.mean, s.stdev, s.min, s.max, s.max_over_mean, dev
        );
    };
    if uses_pgs {
        line("PG copies per device", &pg_summary, load.pg_deviation());
    }
    if args.objects > 0 {
        line("objects per device", &object_summary, load.object_deviation());
    }
    println!("\n{} per device:", if uses_pgs { "PG copies" } else { "objects" });
    print!("{}", histogram(&hist, 50));
    if let Some(domains) = &domains {
        println!("\n{}", domains.text);
    }
    let order = load.by_excess();
    let shown: Vec<usize> = if args.all_devices || order.len() <= 15 {
        order
    } else {
        let mut v = order[..10].to_vec();
        v.extend_from_slice(&order[order.len() - 5..]);
        v
    };
    let mut table = Table::new(&[
        "id",
        "name",
        "class",
        "weight",
        "pgs",
        "expected",
        "objects",
        "bytes",
        "vs expected",
    ])
    .left(&[1, 2]);
    for &i in &shown {
        let device = map.device(optio_placement::DeviceId(i as u32));
        let (count, expected) = if uses_pgs {
            (total.pg_copies[i] as f64, expected_pgs[i])
        } else {
            (total.objects[i] as f64, expected_objects[i])
        };
        table.row(vec![
            i.to_string(),
            device.map_or("?".into(), |d| d.name.clone()),
            device.and_then(|d| d.class.clone()).unwrap_or_else(|| "-".into()),
            device.map_or("-".into(), |d| format!("{:.3}", d.weight.as_f64())),
            total.pg_copies[i].to_string(),
            format!("{:.1}", if uses_pgs { expected_pgs[i] } else { expected_objects[i] }),
            total.objects[i].to_string(),
            bytes(total.bytes[i] as f64),
            if expected > 0.0 {
                format!("{:+.1}%", (count / expected - 1.0) * 100.0)
            } else {
                "-".into()
            },
        ]);
    }
    println!(
        "\n{}:",
        if shown.len() < eligible.len() {
            "most and least loaded devices (--all-devices for all)"
        } else {
            "devices"
        }
    );
    print!("{}", table.render());
}

fn loaded_path(path: &std::path::Path) -> String {
    path.display().to_string()
}

fn summary_json(s: &Summary, deviation: Option<f64>) -> serde_json::Value {
    let mut value = json!({
        "mean": s.mean, "stdev": s.stdev, "min": s.min, "max": s.max,
        "max_over_mean": s.max_over_mean,
    });
    if let Some(deviation) = deviation {
        value["stdev_from_expected"] = json!(deviation);
    }
    value
}

fn describe_pool(map: &ClusterMap, id: PoolId, objects: u64, object_size: u64) -> String {
    let pool = map.pool(id).expect("resolved");
    let engine = match pool.engine_spec() {
        EngineSpec::Crush { rule } => {
            format!("crush rule '{}'", map.rule(rule).map_or("?", |r| r.name.as_str()))
        }
        EngineSpec::Ring(params) => format!(
            "ring ({} per vnode{})",
            bytes(params.vnode_bytes as f64),
            params
                .failure_domain
                .and_then(|t| map.type_name(t))
                .map(|t| format!(", distinct {t}s"))
                .unwrap_or_default()
        ),
        _ => super::engine_text(map, pool),
    };
    let pgs = if pool.pg_num > 0 {
        format!("{} PGs", pool.pg_num)
    } else {
        "objects placed one by one".to_string()
    };
    let extensions = pool.balance().describe().map(|d| format!(" ({d})")).unwrap_or_default();
    let copies = match &pool.erasure {
        Some(e) => format!(
            "erasure {e}: {} chunks of {} each",
            e.chunks(),
            bytes(e.chunk_bytes(object_size) as f64)
        ),
        None => format!("{} replicas", pool.size),
    };
    format!(
        "pool '{}' (id {}): {engine}{extensions}, {pgs}, {copies}; {objects} simulated objects of {}",
        pool.name,
        pool.id,
        bytes(object_size as f64)
    )
}

/// The space of a pool's simulated objects: raw (every replica or chunk placed) against
/// logical (what clients stored), and the factor between them.
fn space_json(pool: &optio_placement::Pool, load: &PoolLoad) -> serde_json::Value {
    let raw = load.raw_bytes();
    let factor = if load.logical_bytes > 0 { raw as f64 / load.logical_bytes as f64 } else { 0.0 };
    json!({
        "redundancy": match &pool.erasure {
            Some(e) => format!("erasure {e}"),
            None => format!("replicated {}", pool.size),
        },
        "logical_bytes": load.logical_bytes,
        "raw_bytes": raw,
        "raw_over_logical": (factor * 1000.0).round() / 1000.0,
    })
}

/// One pool's balance as `optio analyze --json` reports it (and the console serves it).
pub(crate) fn pool_report(
    map: &ClusterMap,
    id: PoolId,
    load: &PoolLoad,
    shares: &[f64],
) -> serde_json::Value {
    let pool = map.pool(id).expect("resolved");
    let eligible: Vec<usize> = (0..shares.len())
        .filter(|&i| shares[i] > 0.0 || load.pg_copies[i] > 0 || load.objects[i] > 0)
        .collect();
    let pgs: Vec<f64> = eligible.iter().map(|&i| load.pg_copies[i] as f64).collect();
    let objects: Vec<f64> = eligible.iter().map(|&i| load.objects[i] as f64).collect();
    let pg_summary = Summary::of(&pgs);
    let object_summary = Summary::of(&objects);
    json!({
        "id": pool.id.0,
        "name": pool.name,
        "engine": pool.engine.name(),
        "balanced": super::balanced_method(pool),
        "pg_num": pool.pg_num,
        "size": pool.size,
        "undersized": load.undersized,
        "stdev": if pool.pg_num > 0 { pg_summary.stdev } else { object_summary.stdev },
        "max_over_mean": if pool.pg_num > 0 { pg_summary.max_over_mean } else { object_summary.max_over_mean },
        "pgs": summary_json(&pg_summary, None),
        "objects": summary_json(&object_summary, None),
        "space": space_json(pool, load),
    })
}

struct Domains {
    text: String,
    json: serde_json::Value,
}

fn domain_summary(map: &ClusterMap, type_id: TypeId, load: &ClusterLoad) -> Domains {
    let uses_pgs = load.uses_pgs();
    let per = domain_loads(map, type_id, &load.eligible, &load.total);
    let type_name = map.type_name(type_id).unwrap_or("?").to_string();
    let values: Vec<f64> = per
        .values()
        .map(|d| if uses_pgs { d.pg_copies as f64 } else { d.objects as f64 })
        .collect();
    let s = Summary::of(&values);
    let text = format!(
        "per {type_name} ({} {type_name}s), {}: mean {:.2}  stdev {:.2}  min {}  max {}  max/mean {:.3}",
        per.len(),
        if uses_pgs { "PG copies" } else { "objects" },
        s.mean,
        s.stdev,
        s.min,
        s.max,
        s.max_over_mean
    );
    let entries: Vec<serde_json::Value> = per
        .iter()
        .map(|(name, d)| json!({"name": name, "pgs": d.pg_copies, "objects": d.objects, "bytes": d.bytes}))
        .collect();
    Domains {
        text,
        json: json!({"type": type_name, "mean": s.mean, "stdev": s.stdev, "min": s.min, "max": s.max, "max_over_mean": s.max_over_mean, "entries": entries}),
    }
}
