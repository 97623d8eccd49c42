//! `optio place`: where objects, PGs or raw CRUSH inputs go.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use optio_placement::choice::Candidates;
use optio_placement::crush::CrushWork;
use optio_placement::crush::hash::hash32_2;
use optio_placement::pg::PgId;
use optio_placement::{
    ClusterMap, ErasureParams, ITEM_NONE, ItemId, Placement, Pool, PoolPlacement, ReplicaSet,
    RuleId,
};
use serde_json::json;

use super::PoolArgs;
use crate::load::load_map;
use crate::output::{Table, progress};

/// Output formats.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// JSON for scripts.
    Json,
    /// Exactly what `crushtool --test --show-mappings` prints (CRUSH-input mode only).
    Crushtool,
    /// Only the result-size counts, as `crushtool --test --show-statistics` prints them
    /// (CRUSH-input mode only).
    Statistics,
    /// Only the mappings with fewer devices than --num-rep, as `crushtool --test
    /// --show-bad-mappings` prints them (CRUSH-input mode only).
    BadMappings,
}

/// Arguments of `optio place`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  optio place --map examples/small.toml --object photo.jpg
  optio place --map examples/small.toml --object photo.jpg --candidates
  optio place --map map.txt --pg 1.2f --pg 1.30
  optio place --map map.txt --pool rbd --all-pgs --json
  optio place --map map.txt --rule 0 --num-rep 3 --min-x 0 --max-x 9999 --format crushtool
  optio place --map map.txt --rule 0 --num-rep 3 --pool-id 1 --weight 3 0.5 --format crushtool")]
pub struct Args {
    /// Map: a file (Optio TOML, Ceph text from crushtool -d or Ceph JSON from crushtool
    /// --dump), or a live cluster's — its directory or etcd://HOST:PORT[/prefix].
    #[arg(long, env = "OPTIO_MAP")]
    map: PathBuf,
    #[command(flatten)]
    pool: PoolArgs,
    /// Object to place (repeatable).
    #[arg(long = "object", value_name = "NAME")]
    objects: Vec<String>,
    /// PG to place, as POOL.SEED with the seed in hex (repeatable).
    #[arg(long = "pg", value_name = "PGID")]
    pgs: Vec<String>,
    /// Place every PG of the pool.
    #[arg(long)]
    all_pgs: bool,
    /// With --object: list the object's CHOICE candidates (the pool's `choices` of them) and
    /// each one's devices.
    #[arg(long)]
    candidates: bool,
    /// CRUSH-input mode (crushtool --test): the rule to run (default: every rule).
    #[arg(long, help_heading = "CRUSH-input mode (like crushtool --test)")]
    rule: Option<u32>,
    /// Replicas to ask for (default: each size from the rule's min_size to max_size).
    #[arg(long, help_heading = "CRUSH-input mode (like crushtool --test)")]
    num_rep: Option<u32>,
    /// First input.
    #[arg(long, help_heading = "CRUSH-input mode (like crushtool --test)")]
    min_x: Option<u32>,
    /// Last input (default 1023, as crushtool).
    #[arg(long, help_heading = "CRUSH-input mode (like crushtool --test)")]
    max_x: Option<u32>,
    /// A single input.
    #[arg(long, help_heading = "CRUSH-input mode (like crushtool --test)")]
    x: Option<u32>,
    /// Hash each input with this pool id, as a real pool does (crushtool --pool-id).
    #[arg(long, help_heading = "CRUSH-input mode (like crushtool --test)")]
    pool_id: Option<u32>,
    /// Override a device's reweight: DEV WEIGHT with WEIGHT in 0..1 (repeatable).
    #[arg(long, num_args = 2, value_names = ["DEV", "WEIGHT"], help_heading = "CRUSH-input mode (like crushtool --test)")]
    weight: Vec<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Shorthand for --format json.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let format = if args.json { Format::Json } else { args.format };
    if raw_crush_inputs(&args)? {
        return run_crush_inputs(&args, format);
    }
    check_pool_inputs(&args, format)?;
    let loaded = load_map(&args.map)?;
    let (map, pools) = args.pool.resolve(loaded.map)?;
    let placement = Placement::new(&map)?;
    if args.candidates {
        return run_candidates(&args, format, &map, &placement, &pools);
    }
    let mut out = Placed::new(&map);
    let mut scratch = placement.scratch();
    let mut set = ReplicaSet::new();
    for object in &args.objects {
        for &pool_id in &pools {
            let pool = placement.pool(pool_id).expect("resolved pools exist");
            let (pg, key) = pool.object_key(object);
            pool.place(key, &mut scratch, &mut set);
            out.emit(pool.pool(), Some(object), pg, key, &set);
        }
    }
    for text in &args.pgs {
        let (pool, pg) = pg_of(&placement, text)?;
        let key = pool.pg_key(pg.seed);
        pool.place(key, &mut scratch, &mut set);
        out.emit(pool.pool(), None, Some(pg), key, &set);
    }
    if args.all_pgs {
        for &pool_id in &pools {
            let pool = placement.pool(pool_id).expect("resolved pools exist");
            if !pool.has_pgs() {
                bail!(
                    "pool '{}' places objects one by one (pg_num 0): it has no PGs to list",
                    pool.pool().name
                );
            }
            let pg_num = pool.pool().pg_num;
            let bar = progress(u64::from(pg_num), "placing", pg_num > 200_000);
            for seed in 0..pg_num {
                let key = pool.pg_key(seed);
                pool.place(key, &mut scratch, &mut set);
                out.emit(pool.pool(), None, Some(PgId { pool: pool_id, seed }), key, &set);
                bar.inc(1);
            }
            bar.finish_and_clear();
        }
    }
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&out.rows)?),
        _ => print!("{}", out.table.render()),
    }
    Ok(())
}

/// Whether raw CRUSH inputs (crushtool's `--test` flags) were given; an error if pool inputs
/// were given too.
fn raw_crush_inputs(args: &Args) -> Result<bool> {
    let crush_mode = args.rule.is_some()
        || args.num_rep.is_some()
        || args.min_x.is_some()
        || args.max_x.is_some()
        || args.x.is_some()
        || args.pool_id.is_some()
        || !args.weight.is_empty();
    if crush_mode && (!args.objects.is_empty() || !args.pgs.is_empty() || args.all_pgs) {
        bail!(
            "--object, --pg and --all-pgs place through a pool; --rule/--num-rep/--min-x/--max-x/--x/--pool-id/--weight run raw CRUSH inputs. Use one or the other."
        );
    }
    Ok(crush_mode)
}

/// Refuses pool inputs that ask for nothing, or for what only raw CRUSH inputs give.
fn check_pool_inputs(args: &Args, format: Format) -> Result<()> {
    if matches!(format, Format::Crushtool | Format::Statistics | Format::BadMappings) {
        bail!(
            "--format {} prints raw CRUSH inputs; add --rule, --num-rep and --min-x/--max-x (as for crushtool --test)",
            clap::ValueEnum::to_possible_value(&format)
                .map_or(String::new(), |v| v.get_name().to_string())
        );
    }
    if args.objects.is_empty() && args.pgs.is_empty() && !args.all_pgs {
        bail!(
            "nothing to place: give --object NAME, --pg POOL.SEED, --all-pgs, or CRUSH inputs (--rule, --num-rep, --min-x, --max-x)"
        );
    }
    if args.candidates && (args.objects.is_empty() || !args.pgs.is_empty() || args.all_pgs) {
        bail!(
            "--candidates lists an object's candidates: give --object NAME (repeatable), without --pg or --all-pgs"
        );
    }
    Ok(())
}

/// The pool and PG that `--pg POOL.SEED` names, checked against the map.
fn pg_of<'a>(placement: &'a Placement, text: &str) -> Result<(PoolPlacement<'a>, PgId)> {
    let pg: PgId = text.parse().map_err(anyhow::Error::msg)?;
    let pool = placement
        .pool(pg.pool)
        .with_context(|| format!("PG {pg}: the map has no pool with id {}", pg.pool))?;
    if !pool.has_pgs() {
        bail!(
            "PG {pg}: pool '{}' places objects one by one (pg_num 0); use --object",
            pool.pool().name
        );
    }
    if pg.seed >= pool.pool().pg_num {
        bail!(
            "PG {pg}: pool '{}' has {} PGs (seeds 0..{:x})",
            pool.pool().name,
            pool.pool().pg_num,
            pool.pool().pg_num - 1
        );
    }
    Ok((pool, pg))
}

/// What was placed, as JSON rows and as a table.
struct Placed<'a> {
    map: &'a ClusterMap,
    rows: Vec<serde_json::Value>,
    table: Table,
}

impl<'a> Placed<'a> {
    fn new(map: &'a ClusterMap) -> Placed<'a> {
        let table =
            Table::new(&["pool", "object", "pg", "key", "devices", "primary"]).left(&[0, 1, 2, 4]);
        Placed { map, rows: Vec::new(), table }
    }

    /// A device's name, or `NONE` for an empty slot.
    fn item(&self, item: i32) -> String {
        if item == ITEM_NONE {
            "NONE".to_string()
        } else {
            self.map.item_name(ItemId(item)).unwrap_or("?").to_string()
        }
    }

    /// One placed object or PG. For an erasure-coded pool, position `i` of the set holds
    /// chunk `i`: the table labels each device with its chunk (`d0`… data, `p0`… parity) and
    /// the JSON adds a `chunks` list.
    fn emit(
        &mut self,
        pool: &Pool,
        object: Option<&str>,
        pg: Option<PgId>,
        key: u32,
        set: &ReplicaSet,
    ) {
        let pool_name = pool.name.as_str();
        let devices: Vec<serde_json::Value> = set
            .as_slice()
            .iter()
            .map(|&d| if d == ITEM_NONE { json!(null) } else { json!(d) })
            .collect();
        let mut row = json!({
            "pool": pool_name,
            "object": object,
            "pg": pg.map(|p| p.to_string()),
            "key": key,
            "devices": devices,
            "primary": set.primary().map(|d| d.0),
        });
        let mut names: Vec<String> = set.as_slice().iter().map(|&d| self.item(d)).collect();
        if let Some(erasure) = &pool.erasure {
            let chunks: Vec<serde_json::Value> = devices
                .iter()
                .enumerate()
                .map(|(index, device)| {
                    let kind = if index < erasure.k as usize { "data" } else { "parity" };
                    json!({ "index": index, "kind": kind, "device": device })
                })
                .collect();
            row["erasure"] = json!(erasure.to_string());
            row["chunks"] = json!(chunks);
            for (index, name) in names.iter_mut().enumerate() {
                *name = chunk_label(erasure, index, name);
            }
        }
        self.rows.push(row);
        let primary = set.primary().map_or("-".to_string(), |d| self.item(d.0 as i32));
        self.table.row(vec![
            pool_name.to_string(),
            object.unwrap_or("-").to_string(),
            pg.map_or("-".to_string(), |p| p.to_string()),
            format!("{key:#010x}"),
            format!("[{}]", names.join(",")),
            primary,
        ]);
    }
}

/// A device of an erasure-coded placement with its chunk: `d0:osd.3` holds data chunk 0,
/// `p1:osd.7` parity chunk 1 (chunk K + 1).
fn chunk_label(erasure: &ErasureParams, index: usize, device: &str) -> String {
    let k = erasure.k as usize;
    if index < k { format!("d{index}:{device}") } else { format!("p{}:{device}", index - k) }
}

/// `--candidates`: every candidate of every object in every selected pool.
fn run_candidates(
    args: &Args,
    format: Format,
    map: &optio_placement::ClusterMap,
    placement: &Placement,
    pools: &[optio_placement::PoolId],
) -> Result<()> {
    let mut scratch = placement.scratch();
    let mut candidates = Candidates::new();
    let mut rows: Vec<serde_json::Value> = Vec::new();
    let mut table = Table::new(&[
        "pool",
        "object",
        "candidate",
        "as object",
        "pg",
        "key",
        "devices",
        "primary",
    ])
    .left(&[0, 1, 3, 4, 6]);
    let name = |d: i32| -> String {
        if d == ITEM_NONE {
            "NONE".to_string()
        } else {
            map.item_name(ItemId(d)).unwrap_or("?").to_string()
        }
    };
    for object in &args.objects {
        for &pool_id in pools {
            let pool = placement.pool(pool_id).expect("resolved pools exist");
            pool.candidates(object, &mut scratch, &mut candidates);
            for (key, devices) in candidates.iter() {
                // Candidate i sits where the object `name + suffix` would.
                let alias = if key.suffix == 0 {
                    object.clone()
                } else {
                    format!("{object}{}", key.suffix)
                };
                let mut items: Vec<String> = devices.as_slice().iter().map(|&d| name(d)).collect();
                if let Some(erasure) = &pool.pool().erasure {
                    for (index, item) in items.iter_mut().enumerate() {
                        *item = chunk_label(erasure, index, item);
                    }
                }
                let primary = devices.primary().map(|d| name(d.0 as i32));
                rows.push(json!({
                    "pool": pool.pool().name,
                    "object": object,
                    "candidate": key.index,
                    "suffix": key.suffix,
                    "as_object": alias,
                    "pg": key.pg.map(|p| p.to_string()),
                    "key": key.key,
                    "devices": devices.as_slice().iter().map(|&d| if d == ITEM_NONE { json!(null) } else { json!(d) }).collect::<Vec<_>>(),
                    "primary": devices.primary().map(|d| d.0),
                }));
                table.row(vec![
                    pool.pool().name.clone(),
                    object.clone(),
                    if key.index == 0 { "0 (home)".to_string() } else { key.index.to_string() },
                    alias,
                    key.pg.map_or("-".to_string(), |p| p.to_string()),
                    format!("{:#010x}", key.key),
                    format!("[{}]", items.join(",")),
                    primary.unwrap_or_else(|| "-".to_string()),
                ]);
            }
        }
    }
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        _ => print!("{}", table.render()),
    }
    Ok(())
}

/// crushtool's `--weight DEV W`: single-precision multiply, truncated, capped at 1.0.
fn parse_weight_pairs(pairs: &[String], max_devices: u32) -> Result<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    for pair in pairs.chunks(2) {
        let device: u32 = pair[0]
            .parse()
            .with_context(|| format!("--weight: '{}' is not a device id", pair[0]))?;
        let weight: f32 = pair[1]
            .parse()
            .with_context(|| format!("--weight: '{}' is not a number between 0 and 1", pair[1]))?;
        if !(0.0..=1.0).contains(&weight) {
            bail!("--weight {device} {weight}: the weight must be between 0 and 1");
        }
        if device >= max_devices {
            bail!(
                "--weight {device}: the map's device ids go up to {}",
                max_devices.saturating_sub(1)
            );
        }
        out.push((device, (weight * 65536.0f32) as u32));
    }
    Ok(out)
}

fn run_crush_inputs(args: &Args, format: Format) -> Result<()> {
    let loaded = load_map(&args.map)?;
    let map = loaded.map;
    let placement = Placement::new(&map)?;
    let crush = placement.crush();
    // crushtool --test: devices in the hierarchy get 1.0, others 0; --weight overrides.
    let mut weights = vec![0u32; map.max_devices() as usize];
    for device in map.devices() {
        if map.parent(ItemId(device.id.0 as i32)).is_some() {
            weights[device.id.0 as usize] = 0x10000;
        }
    }
    for (device, weight) in parse_weight_pairs(&args.weight, map.max_devices())? {
        weights[device as usize] = weight;
    }
    let rules: Vec<&optio_placement::Rule> = match args.rule {
        Some(id) => vec![map.rule(RuleId(id)).with_context(|| {
            let ids: Vec<String> =
                map.rules().iter().map(|r| format!("{} ({})", r.id, r.name)).collect();
            format!(
                "--rule {id}: no such rule; the map's rules are {}",
                if ids.is_empty() { "none".into() } else { ids.join(", ") }
            )
        })?],
        None => map.rules().iter().collect(),
    };
    if rules.is_empty() {
        bail!("the map has no rules to test");
    }
    let (min_x, max_x) = match args.x {
        Some(x) => (x, x),
        None => (args.min_x.unwrap_or(0), args.max_x.unwrap_or(1023)),
    };
    if min_x > max_x {
        bail!("--min-x {min_x} is above --max-x {max_x}");
    }
    // crushtool --test uses weight set 0, else the default set (-1), whatever --pool-id is.
    let choose_args = crush.choose_args_for_pool(0);
    let mut work = CrushWork::new(crush);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut json_rows = Vec::new();
    let total: u64 = rules
        .iter()
        .map(|r| {
            let reps = match args.num_rep {
                Some(_) => 1,
                None => u64::from(r.max_size.saturating_sub(r.min_size) + 1),
            };
            reps * (u64::from(max_x - min_x) + 1)
        })
        .sum();
    let bar = progress(total, "mapping", total > 2_000_000);
    for rule in rules {
        let reps: Vec<u32> = match args.num_rep {
            Some(n) => vec![n],
            None => (rule.min_size..=rule.max_size).collect(),
        };
        if format == Format::Statistics {
            writeln!(
                out,
                "rule {} ({}), x = {min_x}..{max_x}, numrep = {}..{}",
                rule.id,
                rule.name,
                reps.first().copied().unwrap_or(0),
                reps.last().copied().unwrap_or(0)
            )?;
        }
        for num_rep in reps {
            let mut sizes = vec![0u64; num_rep as usize + 1];
            if num_rep as usize > optio_placement::map::REPLICAS_MAX * 8 {
                bail!(
                    "--num-rep {num_rep} is too large (at most {})",
                    optio_placement::map::REPLICAS_MAX * 8
                );
            }
            let mut result = vec![0i32; num_rep as usize];
            for x in min_x..=max_x {
                let input = match args.pool_id {
                    Some(pool) => hash32_2(x, pool),
                    None => x,
                };
                let n =
                    crush.do_rule(rule.id, input, &mut result, &weights, choose_args, &mut work);
                let items = &result[..n];
                sizes[n] += 1;
                match format {
                    Format::Statistics => {}
                    Format::BadMappings => {
                        if n != num_rep as usize {
                            let list: Vec<String> = items.iter().map(|v| v.to_string()).collect();
                            writeln!(
                                out,
                                "bad mapping rule {} x {} num_rep {num_rep} result [{}]",
                                rule.id,
                                x,
                                list.join(",")
                            )?;
                        }
                    }
                    Format::Crushtool | Format::Table => {
                        let list: Vec<String> = items.iter().map(|v| v.to_string()).collect();
                        writeln!(out, "CRUSH rule {} x {} [{}]", rule.id, x, list.join(","))?;
                    }
                    Format::Json => json_rows.push(json!({
                        "rule": rule.id.0, "x": x, "num_rep": num_rep, "input": input, "devices": items,
                    })),
                }
                if x % 65536 == 0 {
                    bar.inc(65536.min(u64::from(max_x - x) + 1));
                }
            }
            if format == Format::Statistics {
                let total = u64::from(max_x - min_x) + 1;
                for (size, count) in sizes.iter().enumerate().filter(|(_, c)| **c > 0) {
                    writeln!(
                        out,
                        "rule {} ({}) num_rep {num_rep} result size == {size}:\t{count}/{total}",
                        rule.id, rule.name
                    )?;
                }
            }
        }
    }
    bar.finish_and_clear();
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut out, &json_rows)?;
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}
