//! `optio map`: validate, show and convert cluster maps.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use optio_placement::{BucketId, ClusterMap, EngineSpec, ItemId, Pool, Step};
use serde_json::json;

use crate::load::load_map;
use crate::output::{Table, bytes};

/// Hosts without an address `optio map init` names before it counts the rest.
const MISSING_NAMES_SHOWN: usize = 8;

/// `optio map` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Check a map; prints a one-line summary, or the first problem with its line.
    Validate {
        /// Map: a file (Optio TOML, Ceph text from crushtool -d or Ceph JSON from crushtool
        /// --dump), or a live cluster's — its directory or etcd://HOST:PORT[/prefix].
        #[arg(long, env = "OPTIO_MAP")]
        map: PathBuf,
        /// JSON for scripts (`{"valid": false, "error": …}` for an invalid map, exit 1).
        #[arg(long)]
        json: bool,
    },
    /// Print the hierarchy (like `ceph osd tree`), rules, pools and tunables.
    Show {
        /// Map: a file, a cluster directory or etcd://HOST:PORT[/prefix].
        #[arg(long, env = "OPTIO_MAP")]
        map: PathBuf,
        /// JSON for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Convert between Optio TOML, Ceph text and Ceph JSON.
    Convert {
        /// Map: a file, a cluster directory or etcd://HOST:PORT[/prefix].
        #[arg(long, env = "OPTIO_MAP")]
        map: PathBuf,
        /// Target format.
        #[arg(long, value_enum)]
        to: Target,
        /// Output file (default: standard output).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Add a device to a live map (prints what will move).
    AddDevice(super::edit::AddDeviceArgs),
    /// Make a new cluster's map — zones × hosts × devices, the pools `optio up` makes — in a
    /// map file, a cluster directory or etcd (never over an existing map).
    Init(InitArgs),
    /// Remove a device from a live map; refused while it holds the last copy of anything.
    RemoveDevice(super::edit::RemoveDeviceArgs),
    /// Change a device's CRUSH weight (or, with --override, its reweight).
    Reweight(super::edit::ReweightArgs),
    /// Mark a device up/down, in/out.
    SetState(super::edit::SetStateArgs),
    /// Change a device's capacity, bandwidth, class or address.
    SetAttr(super::edit::SetAttrArgs),
    /// Make servers of the elastic membership active (a new membership version).
    Activate(super::edit::MembershipArgs),
    /// Make servers of the elastic membership inactive (a new membership version).
    Deactivate(super::edit::MembershipArgs),
}

/// Formats `convert` writes.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Target {
    /// Optio TOML.
    Toml,
    /// The text of `crushtool -d` (compile it with `crushtool -c`).
    CephText,
    /// The JSON of `crushtool --dump`.
    CephJson,
}

pub fn run(command: Command) -> Result<()> {
    match command {
        Command::AddDevice(args) => super::edit::add_device(args),
        Command::Init(args) => init(args),
        Command::RemoveDevice(args) => super::edit::remove_device(args),
        Command::Reweight(args) => super::edit::reweight(args),
        Command::SetState(args) => super::edit::set_state(args),
        Command::SetAttr(args) => super::edit::set_attr(args),
        Command::Activate(args) => super::edit::activate(args, true),
        Command::Deactivate(args) => super::edit::activate(args, false),
        Command::Validate { map, json } => {
            let loaded = match load_map(&map) {
                Ok(loaded) => loaded,
                Err(error) if json => {
                    let answer = serde_json::json!({
                        "file": map.display().to_string(), "valid": false,
                        "error": format!("{error:#}"),
                    });
                    println!("{answer}");
                    return Err(error);
                }
                Err(error) => return Err(error),
            };
            let m = &loaded.map;
            if json {
                let answer = serde_json::json!({
                    "file": map.display().to_string(), "valid": true,
                    "format": loaded.format.name(), "epoch": m.epoch().0,
                    "devices": m.devices().len(),
                    "buckets": m.buckets().filter(|b| b.shadow_of.is_none()).count(),
                    "rules": m.rules().len(), "pools": m.pools().len(),
                    "tunables": m.tunables().profile().map_or("custom", |p| p.name()),
                });
                println!("{answer}");
                return Ok(());
            }
            let plural = |n: usize, word: &str| {
                if n == 1 { format!("1 {word}") } else { format!("{n} {word}s") }
            };
            println!(
                "{}: valid {} map, epoch {}: {}, {}, {}, {}, tunables {}",
                map.display(),
                loaded.format.name(),
                m.epoch(),
                plural(m.devices().len(), "device"),
                plural(m.buckets().filter(|b| b.shadow_of.is_none()).count(), "bucket"),
                plural(m.rules().len(), "rule"),
                plural(m.pools().len(), "pool"),
                m.tunables().profile().map_or("custom", |p| p.name()),
            );
            Ok(())
        }
        Command::Show { map, json } => {
            let loaded = load_map(&map)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&show_json(&loaded.map))?);
            } else {
                print!("{}", show_text(&loaded.map));
            }
            Ok(())
        }
        Command::Convert { map, to, output } => {
            let loaded = load_map(&map)?;
            if !matches!(to, Target::Toml) && !loaded.map.pools().is_empty() {
                eprintln!("{}", pools_left_out(&loaded.map));
            }
            let (text, format) = match to {
                Target::Toml => (
                    optio_mapfile::optio_toml::write(&loaded.map),
                    optio_mapfile::Format::OptioToml,
                ),
                Target::CephText => {
                    (optio_mapfile::ceph_text::write(&loaded.map)?, optio_mapfile::Format::CephText)
                }
                Target::CephJson => {
                    (optio_mapfile::ceph_json::write(&loaded.map)?, optio_mapfile::Format::CephJson)
                }
            };
            if format != optio_mapfile::Format::OptioToml {
                let lost = super::edit::lost_in(&loaded.map, &text, format, false)?;
                if !lost.is_empty() {
                    eprintln!(
                        "warning: {} cannot hold everything in this map; {} setting(s) are left out:",
                        format.name(),
                        lost.len()
                    );
                    for line in lost.iter().take(LOST_LINES_SHOWN) {
                        eprintln!("  {line}");
                    }
                    if lost.len() > LOST_LINES_SHOWN {
                        eprintln!("  … and {} more", lost.len() - LOST_LINES_SHOWN);
                    }
                }
            }
            match output {
                Some(path) => {
                    optio_cluster::durable::replace(&path, text.as_bytes())
                        .with_context(|| format!("cannot write '{}'", path.display()))?;
                    eprintln!("wrote {}", path.display());
                }
                None => {
                    let mut stdout = std::io::stdout().lock();
                    stdout.write_all(text.as_bytes())?;
                }
            }
            Ok(())
        }
    }
}

/// `optio map init`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example (three hosts, one per zone, their servers on 10.0.0.1-3):
  optio map init --map etcd://10.0.0.10:2379 --zones 3 --hosts 1 --capacity 4TiB \\
      --addr z1-h1=10.0.0.1:7000 --addr z2-h1=10.0.0.2:7000 --addr z3-h1=10.0.0.3:7000")]
pub struct InitArgs {
    /// Where to store it: a map file (`.toml`), a cluster directory, or etcd://HOST:PORT[/prefix].
    #[arg(long, value_name = "SOURCE")]
    pub map: String,
    /// Zones (failure domains of the replicas when there are at least as many as replicas).
    #[arg(long, default_value_t = 3)]
    pub zones: u32,
    /// Hosts per zone (named zZONE-hHOST: z1-h1, z1-h2…).
    #[arg(long, default_value_t = 3)]
    pub hosts: u32,
    /// Devices per host (numbered from 0, host by host).
    #[arg(long, default_value_t = 1)]
    pub devices_per_host: u32,
    /// Capacity of each device.
    #[arg(long, default_value = "100GiB", value_parser = crate::output::parse_size)]
    pub capacity: u64,
    /// Replicas of every pool.
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Candidates (k) of the CHOICE pools.
    #[arg(long, default_value_t = 2)]
    pub choices: u32,
    /// Placement policy of the CHOICE pools.
    #[arg(long, default_value = "space")]
    pub policy: String,
    /// PGs of the crush pools.
    #[arg(long, default_value_t = 128)]
    pub pg_num: u32,
    /// The address of a host's server, HOST=IP:PORT (repeatable; a host without one is
    /// stored without, to be set with `optio map set-attr DEVICE --addr …`).
    #[arg(long = "addr", value_name = "HOST=IP:PORT")]
    pub addrs: Vec<String>,
}

/// Most devices `map init` makes.
const INIT_DEVICES_MAX: u64 = 100_000;

fn init(args: InitArgs) -> Result<()> {
    let devices = u64::from(args.zones) * u64::from(args.hosts) * u64::from(args.devices_per_host);
    if devices == 0 || devices > INIT_DEVICES_MAX {
        anyhow::bail!(
            "--zones {} × --hosts {} × --devices-per-host {} makes {devices} devices: use 1 to {INIT_DEVICES_MAX}",
            args.zones,
            args.hosts,
            args.devices_per_host
        );
    }
    let spec = optio_local::LocalClusterSpec {
        zones: args.zones,
        hosts_per_zone: args.hosts,
        devices_per_host: args.devices_per_host,
        capacity_bytes: args.capacity,
        replicas: args.replicas,
        choices: args.choices,
        policy: args.policy.clone(),
        pg_num: args.pg_num,
        ..optio_local::LocalClusterSpec::default()
    };
    let mut hosts = optio_local::cluster::layout(&spec);
    for pair in &args.addrs {
        let Some((host, addr)) = pair.split_once('=') else {
            anyhow::bail!("--addr '{pair}' is not HOST=IP:PORT (e.g. z1-h1=10.0.0.1:7000)");
        };
        if addr.parse::<std::net::SocketAddr>().is_err() {
            anyhow::bail!("--addr '{pair}': '{addr}' is not IP:PORT (e.g. 10.0.0.1:7000)");
        }
        let names: Vec<String> = hosts.iter().map(|h| h.name.clone()).collect();
        let Some(entry) = hosts.iter_mut().find(|h| h.name == host) else {
            anyhow::bail!("--addr '{pair}': no host '{host}' (the hosts are {})", names.join(", "));
        };
        entry.addr = Some(addr.to_string());
    }
    let text = optio_local::cluster::map_text(&spec, &hosts, 1);
    let map = optio_mapfile::parse(&text).context("the generated map is not valid")?;
    let source = optio_cluster::MapSource::parse(&args.map)?;
    let runtime = crate::commands::runtime()?;
    let stored = runtime.block_on(source.initialize(&map))?;
    if !stored {
        let epoch = runtime.block_on(source.load()).map(|m| m.epoch().0).unwrap_or(0);
        anyhow::bail!(
            "a map is already stored at {} (epoch {epoch}); nothing was written: change it with \
             `optio map add-device | set-state | …`",
            source.describe()
        );
    }
    println!(
        "stored epoch 1 at {}: {devices} devices of {} on {} hosts in {} zones; pools: {}",
        source.describe(),
        bytes(args.capacity as f64),
        hosts.len(),
        args.zones,
        map.pools().iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
    );
    println!("start each host's server (with its devices' directories and the cluster keyring):");
    for host in &hosts {
        let devices: Vec<String> = host
            .devices
            .iter()
            .map(|id| {
                format!(
                    "--device {id}:{}:/srv/optio/dev{id}",
                    bytes(args.capacity as f64).replace(' ', "")
                )
            })
            .collect();
        println!(
            "  {}: optio server --listen {} {} --map {} --keyring KEYRING --name {}",
            host.name,
            host.addr.as_deref().unwrap_or("IP:PORT"),
            devices.join(" "),
            source.describe(),
            host.name
        );
    }
    let missing: Vec<&str> =
        hosts.iter().filter(|h| h.addr.is_none()).map(|h| h.name.as_str()).collect();
    if !missing.is_empty() {
        // A few names and a count: a map of a thousand hosts would fill the screen.
        let shown = missing.len().min(MISSING_NAMES_SHOWN);
        let more = missing.len() - shown;
        let names = missing[..shown].join(", ");
        let names = if more > 0 { format!("{names} and {more} more") } else { names };
        eprintln!(
            "note: {} host(s) have no address yet ({names}): set them with `optio map set-attr DEVICE --addr IP:PORT`",
            missing.len(),
        );
    }
    Ok(())
}

/// Lines of what a conversion leaves out that `convert` shows.
const LOST_LINES_SHOWN: usize = 5;

/// The note `convert` prints when a Ceph format leaves out the map's pools (and with them
/// Optio's pool settings, such as an incremental balanced pool's state).
fn pools_left_out(map: &ClusterMap) -> String {
    let names: Vec<String> = map
        .pools()
        .iter()
        .map(|p| {
            if p.balance_state().is_some() {
                format!("'{}' (with its incremental balance state)", p.name)
            } else {
                format!("'{}'", p.name)
            }
        })
        .collect();
    format!(
        "note: Ceph's map formats hold no pools; left out: {}. Keep the Optio TOML map for them.",
        names.join(", ")
    )
}

fn show_text(map: &ClusterMap) -> String {
    let mut out = tree_text(map);
    out.push_str(&tunables_and_rules_text(map));
    for pool in map.pools() {
        out.push_str(&pool_line(map, pool));
    }
    if let Some(membership) = map.membership() {
        let current = membership.current();
        out.push_str(&format!(
            "membership: {} servers ranked (rank 1: {}); version {} in force, {} active{}; {} version(s)\n",
            membership.order.len(),
            membership.order.first().and_then(|d| map.device(*d)).map_or("-", |d| d.name.as_str()),
            current.version,
            membership.active_count(current),
            if membership.is_full_power(current) { " (full power)" } else { "" },
            membership.versions.len()
        ));
    }
    out
}

/// The hierarchy as `ceph osd tree` shows it, and the devices outside it.
fn tree_text(map: &ClusterMap) -> String {
    let mut table = Table::new(&[
        "ID",
        "CLASS",
        "WEIGHT",
        "TYPE NAME",
        "STATUS",
        "REWEIGHT",
        "CAPACITY",
        "MB/s",
    ])
    .left(&[1, 3, 4]);
    let mut roots: Vec<BucketId> = map
        .buckets()
        .filter(|b| b.shadow_of.is_none() && map.parent(ItemId(b.id.0)).is_none())
        .map(|b| b.id)
        .collect();
    roots.sort_by_key(|b| std::cmp::Reverse(*b));
    let mut stack: Vec<(ItemId, usize)> = roots.iter().rev().map(|r| (ItemId(r.0), 0)).collect();
    let mut shown = std::collections::HashSet::new();
    while let Some((item, depth)) = stack.pop() {
        if !shown.insert(item) {
            continue;
        }
        let indent = "    ".repeat(depth);
        match item.device() {
            Some(id) => {
                let Some(d) = map.device(id) else { continue };
                table.row(vec![
                    id.to_string(),
                    d.class.clone().unwrap_or_default(),
                    format!("{:.5}", d.weight.as_f64()),
                    format!("{indent}{}", d.name),
                    format!(
                        "{}{}",
                        if d.up { "up" } else { "down" },
                        if d.is_in { "" } else { ",out" }
                    ),
                    format!("{:.5}", d.reweight.as_f64()),
                    bytes(d.capacity_bytes as f64),
                    if d.bandwidth_mb_per_s > 0 {
                        d.bandwidth_mb_per_s.to_string()
                    } else {
                        "-".into()
                    },
                ]);
            }
            None => {
                let Some(b) = map.bucket(BucketId(item.0)) else { continue };
                table.row(vec![
                    b.id.to_string(),
                    String::new(),
                    format!("{:.5}", b.weight().as_f64()),
                    format!("{indent}{} {}", map.type_name(b.type_id).unwrap_or("?"), b.name),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
                for child in b.items.iter().rev() {
                    stack.push((*child, depth + 1));
                }
            }
        }
    }
    let mut out = table.render();
    let outside: Vec<&str> = map
        .devices()
        .iter()
        .filter(|d| map.parent(ItemId(d.id.0 as i32)).is_none())
        .map(|d| d.name.as_str())
        .collect();
    if !outside.is_empty() {
        out.push_str(&format!("\ndevices outside the hierarchy: {}\n", outside.join(" ")));
    }
    out
}

/// The tunables and every rule's steps.
fn tunables_and_rules_text(map: &ClusterMap) -> String {
    let mut out = format!(
        "\ntunables: {} (choose_total_tries {}, chooseleaf_descend_once {}, chooseleaf_vary_r {}, chooseleaf_stable {})\n",
        map.tunables().profile().map_or("custom", |p| p.name()),
        map.tunables().choose_total_tries,
        map.tunables().chooseleaf_descend_once,
        map.tunables().chooseleaf_vary_r,
        map.tunables().chooseleaf_stable,
    );
    for rule in map.rules() {
        let steps: Vec<String> = rule.steps.iter().map(|s| step_text(map, s)).collect();
        out.push_str(&format!("rule {} '{}': {}\n", rule.id, rule.name, steps.join("; ")));
    }
    out
}

/// One pool: its engine, extensions, sizes and choices.
fn pool_line(map: &ClusterMap, pool: &Pool) -> String {
    let engine = match pool.engine_spec() {
        EngineSpec::Crush { rule } => {
            format!("crush, rule '{}'", map.rule(rule).map_or("?", |r| r.name.as_str()))
        }
        EngineSpec::Ring(p) => format!("ring, {} per vnode", bytes(p.vnode_bytes as f64)),
        _ => super::engine_text(map, pool),
    };
    let choice = if pool.choice.is_default() {
        String::new()
    } else {
        format!(
            ", {} choices, policy {}, full at {}%",
            pool.choice.choices,
            pool.choice.policy,
            f64::from(pool.choice.full_ppm) / 1e4
        )
    };
    let extensions = pool.balance().describe().map(|d| format!(" ({d})")).unwrap_or_default();
    format!(
        "pool {} '{}': {engine}{extensions}, pg_num {}, size {}, min_size {}{choice}\n",
        pool.id, pool.name, pool.pg_num, pool.size, pool.min_size
    )
}

/// A rule step as Ceph writes it.
pub fn step_text(map: &ClusterMap, step: &Step) -> String {
    let type_name = |t: &optio_placement::TypeId| map.type_name(*t).unwrap_or("?").to_string();
    match step {
        Step::Noop => "noop".into(),
        Step::Take(item) => match item.bucket().and_then(|b| map.bucket(b)) {
            Some(b) => match &b.shadow_of {
                Some((original, class)) => format!(
                    "take {} class {class}",
                    map.bucket(*original).map_or("?", |o| o.name.as_str())
                ),
                None => format!("take {}", b.name),
            },
            None => format!("take {}", map.item_name(*item).unwrap_or("?")),
        },
        Step::ChooseFirstn { num, type_id } => {
            format!("choose firstn {num} type {}", type_name(type_id))
        }
        Step::ChooseIndep { num, type_id } => {
            format!("choose indep {num} type {}", type_name(type_id))
        }
        Step::ChooseleafFirstn { num, type_id } => {
            format!("chooseleaf firstn {num} type {}", type_name(type_id))
        }
        Step::ChooseleafIndep { num, type_id } => {
            format!("chooseleaf indep {num} type {}", type_name(type_id))
        }
        Step::Emit => "emit".into(),
        Step::SetChooseTries(n) => format!("set_choose_tries {n}"),
        Step::SetChooseleafTries(n) => format!("set_chooseleaf_tries {n}"),
        Step::SetChooseLocalTries(n) => format!("set_choose_local_tries {n}"),
        Step::SetChooseLocalFallbackTries(n) => format!("set_choose_local_fallback_tries {n}"),
        Step::SetChooseleafVaryR(n) => format!("set_chooseleaf_vary_r {n}"),
        Step::SetChooseleafStable(n) => format!("set_chooseleaf_stable {n}"),
    }
}

/// One device as `optio map show --json` prints it (and the console serves it).
pub(crate) fn device_json(map: &ClusterMap, d: &optio_placement::Device) -> serde_json::Value {
    let location: Vec<serde_json::Value> =
        map.location(d.id).iter().map(|(t, n)| json!({"type": t, "name": n})).collect();
    json!({
        "id": d.id.0, "name": d.name, "class": d.class, "weight": d.weight.as_f64(),
        "capacity_bytes": d.capacity_bytes, "bandwidth_mb_per_s": d.bandwidth_mb_per_s,
        "up": d.up, "in": d.is_in, "reweight": d.reweight.as_f64(),
        "primary_affinity": d.primary_affinity.as_f64(), "addr": d.addr, "location": location,
        "up_from": d.up_from.map(|e| e.0), "down_at": d.down_at.map(|e| e.0),
    })
}

/// One pool as `optio map show --json` prints it (and the console serves it); `erasure` is
/// its profile (`null` for a replicated pool).
pub(crate) fn pool_json(map: &ClusterMap, p: &Pool) -> serde_json::Value {
    json!({
        "id": p.id.0, "name": p.name, "engine": p.engine.name(),
        "engine_detail": super::engine_text(map, p), "pg_num": p.pg_num, "pgp_num": p.pgp_num,
        "size": p.size, "min_size": p.min_size, "choices": p.choice.choices,
        "policy": p.choice.policy.to_string(), "full_ratio": f64::from(p.choice.full_ppm) / 1e6,
        "pps": p.balance().pps.name(),
        "balance_param": f64::from(p.balance().linear_param) / 65536.0,
        "balanced": super::balanced_method(p),
        "balance_state_devices": p.balance_state().map(|s| s.devices.len()),
        "erasure": p.erasure.as_ref().map(|e| json!({
            "k": e.k, "m": e.m, "stripe_unit_bytes": e.stripe_unit_bytes,
        })),
    })
}

fn show_json(map: &ClusterMap) -> serde_json::Value {
    let devices: Vec<serde_json::Value> =
        map.devices().iter().map(|d| device_json(map, d)).collect();
    let buckets: Vec<serde_json::Value> = map
        .buckets()
        .filter(|b| b.shadow_of.is_none())
        .map(|b| {
            json!({
                "id": b.id.0, "name": b.name, "type": map.type_name(b.type_id), "alg": b.alg.name(),
                "weight": b.weight().as_f64(),
                "items": b.items.iter().zip(&b.weights).map(|(i, w)| json!({"id": i.0, "name": map.item_name(*i), "weight": w.as_f64()})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let rules: Vec<serde_json::Value> = map
        .rules()
        .iter()
        .map(|r| json!({"id": r.id.0, "name": r.name, "type": r.kind.code(), "steps": r.steps.iter().map(|s| step_text(map, s)).collect::<Vec<_>>()}))
        .collect();
    let pools: Vec<serde_json::Value> = map.pools().iter().map(|p| pool_json(map, p)).collect();
    let membership = map.membership().map(|m| {
        let name = |d: &optio_placement::DeviceId| map.device(*d).map(|d| d.name.clone());
        json!({
            "order": m.order.iter().map(name).collect::<Vec<_>>(),
            "versions": m.versions.iter().map(|v| json!({
                "version": v.version,
                "active": m.active_count(v),
                "full_power": m.is_full_power(v),
                "active_devices": m.order.iter().enumerate()
                    .filter(|(i, _)| m.is_active(v, *i as u32 + 1))
                    .map(|(_, d)| name(d)).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    });
    json!({
        "epoch": map.epoch().0,
        "tunables": map.tunables().profile().map_or("custom", |p| p.name()),
        "devices": devices, "buckets": buckets, "rules": rules, "pools": pools,
        "membership": membership,
    })
}
