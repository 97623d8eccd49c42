//! `optio diff`: what moves between two maps.

use std::path::PathBuf;

use anyhow::{Result, bail};
use optio_placement::analysis::{Movement, movement};
use optio_placement::{ClusterMap, DeviceId, Placement, PoolPlacement};
use serde_json::json;

use super::find_pool;
use crate::load::load_map;
use crate::output::{Table, bytes, parse_size, progress};

/// Arguments of `optio diff`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  optio diff before.txt after.txt
  optio diff before.toml after.toml --pool rbd --objects 1000000 --json")]
pub struct Args {
    /// The map before the change (Optio TOML, Ceph text or Ceph JSON; or a live cluster's:
    /// its directory or etcd://HOST:PORT[/prefix]).
    map_a: PathBuf,
    /// The map after the change.
    map_b: PathBuf,
    /// Pool to compare, by name or id (default: every pool present in both maps).
    #[arg(long)]
    pool: Option<String>,
    /// Without pools in the maps: PGs, replicas, rule and pool id of the simulated pool.
    #[arg(long = "pg-num", default_value_t = 2048)]
    pg_num: u32,
    /// Without pools in the maps: replicas of the simulated pool.
    #[arg(long = "size", default_value_t = 3)]
    size: u32,
    /// Without pools in the maps: rule of the simulated pool (default the first).
    #[arg(long = "sim-rule", value_name = "RULE")]
    sim_rule: Option<String>,
    /// Objects to simulate for byte counts.
    #[arg(long, default_value_t = 100_000)]
    objects: u64,
    /// Size of each simulated object.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    object_size: u64,
    /// JSON for scripts.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let pool_args = super::PoolArgs {
        pool: None,
        sim_rule: args.sim_rule.clone(),
        pg_num: args.pg_num,
        size: args.size,
        sim_pool_id: 1,
    };
    let (map_a, _) = pool_args.resolve(load_map(&args.map_a)?.map)?;
    let (map_b, _) = pool_args.resolve(load_map(&args.map_b)?.map)?;
    let placement_a = Placement::new(&map_a)?;
    let placement_b = Placement::new(&map_b)?;
    let pairs: Vec<(optio_placement::PoolId, optio_placement::PoolId)> = match &args.pool {
        Some(name) => vec![(find_pool(&map_a, name)?, find_pool(&map_b, name)?)],
        None => {
            map_a.pools().iter().filter_map(|p| map_b.pool(p.id).map(|q| (p.id, q.id))).collect()
        }
    };
    if pairs.is_empty() {
        bail!("the two maps have no pool id in common; name one with --pool");
    }
    let mut reports = Vec::new();
    let mut text = String::new();
    for (id_a, id_b) in pairs {
        let pool_a = placement_a.pool(id_a).expect("exists");
        let pool_b = placement_b.pool(id_b).expect("exists");
        let steps = u64::from(pool_b.pool().pg_num) + args.objects;
        let bar = progress(steps, "comparing", steps > 1_000_000);
        let m = movement(
            &map_a,
            &placement_a,
            &map_b,
            &placement_b,
            pool_a,
            pool_b,
            args.objects,
            args.object_size,
            &mut |n| bar.inc(n),
        );
        bar.finish_and_clear();
        let movers = movers(&m);
        text.push_str(&pool_text(&map_a, &map_b, pool_b, &m, &movers));
        reports.push(pool_json(pool_b, &m, &movers));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json!({ "pools": reports }))?);
    } else {
        println!(
            "{} → {} (epoch {} → {})",
            args.map_a.display(),
            args.map_b.display(),
            map_a.epoch(),
            map_b.epoch()
        );
        print!("{text}");
    }
    Ok(())
}

fn ratio_text(ratio: f64) -> String {
    if ratio.is_finite() { format!("{ratio:.3}") } else { "∞ (nothing had to move)".to_string() }
}

/// The devices whose load changed, most changed first (ties by id).
fn movers(m: &Movement) -> Vec<(usize, i64)> {
    let mut movers: Vec<(usize, i64)> =
        m.gained.iter().copied().enumerate().filter(|(_, g)| *g != 0).collect();
    movers.sort_by_key(|(i, g)| (-g.abs(), *i));
    movers
}

/// One pool's movement, as text: what moves against the minimum, and who gains or loses most.
fn pool_text(
    map_a: &ClusterMap,
    map_b: &ClusterMap,
    pool_b: PoolPlacement<'_>,
    m: &Movement,
    movers: &[(usize, i64)],
) -> String {
    let unit = if pool_b.has_pgs() { "PG copies" } else { "object copies" };
    let percent = |part: f64, whole: f64| if whole > 0.0 { part / whole * 100.0 } else { 0.0 };
    let mut text = format!(
        "pool '{}' (id {}): {} of {} {unit} move ({:.2}%), {} of {}\n  minimum any placement must move: {:.1} {unit} ({:.2}%); moved / minimum = {}\n",
        pool_b.pool().name,
        pool_b.pool().id,
        m.moved,
        m.copies,
        percent(m.moved as f64, m.copies as f64),
        bytes(m.moved_bytes as f64),
        bytes(m.bytes as f64),
        m.minimum_copies(),
        m.minimum_share * 100.0,
        ratio_text(m.ratio_to_minimum()),
    );
    if pool_b.pool().balance().balanced == optio_placement::BalanceMethod::Incremental {
        text.push_str(
            "  incremental balanced pool: each map is placed from its own stored balance state\n",
        );
    }
    if !movers.is_empty() {
        let mut table = Table::new(&["device", "name", "gained"]).left(&[1]);
        for (i, gained) in movers.iter().take(10) {
            let name = map_b
                .device(DeviceId(*i as u32))
                .or(map_a.device(DeviceId(*i as u32)))
                .map_or("?".to_string(), |d| d.name.clone());
            table.row(vec![i.to_string(), name, format!("{gained:+}")]);
        }
        text.push_str(&format!("  devices that gain or lose the most {unit}:\n"));
        for line in table.render().lines() {
            text.push_str(&format!("    {line}\n"));
        }
    }
    text
}

/// One pool's movement, as JSON.
fn pool_json(
    pool_b: PoolPlacement<'_>,
    m: &Movement,
    movers: &[(usize, i64)],
) -> serde_json::Value {
    json!({
        "pool": pool_b.pool().name,
        "id": pool_b.pool().id.0,
        "balanced": super::balanced_method(pool_b.pool()),
        "unit": if pool_b.has_pgs() { "pg_copies" } else { "object_copies" },
        "copies": m.copies,
        "moved": m.moved,
        "moved_fraction": if m.copies > 0 { m.moved as f64 / m.copies as f64 } else { 0.0 },
        "bytes": m.bytes,
        "moved_bytes": m.moved_bytes,
        "minimum_fraction": m.minimum_share,
        "minimum_copies": m.minimum_copies(),
        "moved_over_minimum": if m.ratio_to_minimum().is_finite() { json!(m.ratio_to_minimum()) } else { json!(null) },
        "devices": movers.iter().map(|(i, g)| json!({"id": i, "gained": g})).collect::<Vec<_>>(),
    })
}
