//! Editing the live map: `optio map add-device | remove-device | reweight | set-state |
//! set-attr | activate | deactivate` and `optio resize`. Each loads the map from where it
//! lives (a file or etcd), applies one change, prints what it will move and the copies it
//! leaves short (the placement crate's `ChangeReport`), and stores the next epoch with
//! `MapSource::store_edit`: a compare-and-swap that never overwrites an edit made
//! concurrently by someone else — the change is applied again to their map (its min_size
//! check too), a bounded number of times.

use anyhow::{Context, Result, bail};
use optio_placement::change::ChangeEffect;
use optio_placement::change::PoolMovement;
use optio_placement::{
    ActiveSpec, ChangeReport, ClusterMap, DeviceId, DeviceSpec, MapChange, MovementSample, Weight,
};

use optio_cluster::{ApplyOptions, MapEdit, MapSource};

use super::live::LiveMap;
use crate::output::{bytes, parse_size};

/// What every edit takes besides its own arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct EditArgs {
    #[command(flatten)]
    pub live: LiveMap,
    /// Show what the change would move, and store nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Objects simulated per pool to estimate what moves.
    #[arg(long, default_value_t = SAMPLE_OBJECTS)]
    pub objects: u64,
    /// Write the edited map to this file instead of changing the map in place (a map file
    /// only; the format follows the extension: .toml Optio, .json Ceph JSON, else Ceph text).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Make the change even if it leaves data with fewer copies than its pool's min_size
    /// (writes to it then fail until the devices return).
    #[arg(long)]
    pub yes: bool,
    /// Print what the change moves and what was stored as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `optio map add-device`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:
  optio map add-device --id 9 --at zone=z2,host=z2-h4 --capacity 16GiB --addr 127.0.0.1:7009")]
pub struct AddDeviceArgs {
    /// Device id (unique).
    #[arg(long)]
    pub id: u32,
    /// Name (default osd.ID).
    #[arg(long)]
    pub name: Option<String>,
    /// Location as TYPE=NAME pairs, outermost first (missing buckets are created).
    #[arg(long, value_name = "TYPE=NAME,...")]
    pub at: String,
    /// Capacity.
    #[arg(long, value_parser = parse_size)]
    pub capacity: u64,
    /// CRUSH weight (default: capacity in TiB).
    #[arg(long)]
    pub weight: Option<f64>,
    /// Bandwidth, MB/s.
    #[arg(long, default_value_t = 0)]
    pub bandwidth: u32,
    /// Device class.
    #[arg(long)]
    pub class: Option<String>,
    /// Address of the server that serves it (HOST:PORT); it must answer and serve the
    /// device, unless --allow-unreachable.
    #[arg(long)]
    pub addr: Option<String>,
    /// Store the device even if nothing at --addr serves it yet (start its server next).
    #[arg(long)]
    pub allow_unreachable: bool,
    #[command(flatten)]
    pub edit: EditArgs,
}

/// `optio map remove-device`.
#[derive(clap::Args, Debug)]
pub struct RemoveDeviceArgs {
    /// Device id or name.
    pub device: String,
    /// Remove it even if it holds the last copy of something (that data is lost), or its
    /// server cannot be asked.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub edit: EditArgs,
}

/// `optio map reweight`.
#[derive(clap::Args, Debug)]
pub struct ReweightArgs {
    /// Device id or name.
    pub device: String,
    /// The new CRUSH weight, or with --override the reweight (0 to 1).
    pub weight: f64,
    /// Set the reweight (the share of its weight placement honours, 0 to 1) instead of the
    /// CRUSH weight.
    #[arg(long = "override")]
    pub reweight: bool,
    #[command(flatten)]
    pub edit: EditArgs,
}

/// `optio map set-state`.
#[derive(clap::Args, Debug)]
pub struct SetStateArgs {
    /// Device id or name.
    pub device: String,
    /// Mark it up.
    #[arg(long, conflicts_with = "down")]
    pub up: bool,
    /// Mark it down (its copies are not read; placement skips it).
    #[arg(long)]
    pub down: bool,
    /// Mark it in.
    #[arg(long = "in", conflicts_with = "out")]
    pub is_in: bool,
    /// Mark it out (its data moves to the others).
    #[arg(long)]
    pub out: bool,
    #[command(flatten)]
    pub edit: EditArgs,
}

/// `optio map set-attr`.
#[derive(clap::Args, Debug)]
pub struct SetAttrArgs {
    /// Device id or name.
    pub device: String,
    /// Capacity.
    #[arg(long, value_parser = parse_size)]
    pub capacity: Option<u64>,
    /// Bandwidth, MB/s.
    #[arg(long)]
    pub bandwidth: Option<u32>,
    /// Device class (`none` removes it).
    #[arg(long)]
    pub class: Option<String>,
    /// Address of its server.
    #[arg(long)]
    pub addr: Option<String>,
    #[command(flatten)]
    pub edit: EditArgs,
}

/// `optio map activate` / `deactivate`.
#[derive(clap::Args, Debug)]
pub struct MembershipArgs {
    /// Devices (ids or names) of the elastic membership.
    #[arg(required = true)]
    pub devices: Vec<String>,
    #[command(flatten)]
    pub edit: EditArgs,
}

/// `optio resize`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  optio resize --active 6     # ranks 1 to 6 active: writes skip the others (offloading)
  optio resize --active 10    # full power again: re-integration moves what was offloaded")]
pub struct ResizeArgs {
    /// Servers to keep active: ranks 1 to N (at least the primaries, at most all).
    #[arg(long)]
    pub active: u32,
    #[command(flatten)]
    pub edit: EditArgs,
}

/// A device by id or name.
pub fn find_device(map: &ClusterMap, text: &str) -> Result<DeviceId> {
    if let Some(device) = map.devices().iter().find(|d| d.name == text) {
        return Ok(device.id);
    }
    if let Ok(id) = text.parse::<u32>()
        && map.device(DeviceId(id)).is_some()
    {
        return Ok(DeviceId(id));
    }
    bail!("no device '{text}' in the map; `optio map show` lists them")
}

pub(crate) fn weight(value: f64, what: &str) -> Result<Weight> {
    Weight::from_f64(value)
        .ok_or_else(|| anyhow::anyhow!("{what} {value} is out of range: use 0 to 65535"))
}

/// A new device as `optio map add-device` and the console describe it: `at` is its location
/// as TYPE=NAME pairs, outermost first (`zone=z2,host=z2-h4`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn device_spec(
    id: u32,
    name: Option<String>,
    at: &str,
    capacity: u64,
    weight_value: Option<f64>,
    bandwidth: u32,
    class: Option<String>,
    addr: Option<String>,
) -> Result<DeviceSpec> {
    let mut location = Vec::new();
    for pair in at.split(',').filter(|p| !p.is_empty()) {
        let Some((kind, name)) = pair.split_once('=') else {
            bail!("--at '{at}': '{pair}' is not TYPE=NAME (e.g. zone=z2,host=z2-h4)");
        };
        location.push((kind.trim().to_string(), name.trim().to_string()));
    }
    if location.is_empty() {
        bail!("--at is empty: give the device's location, e.g. zone=z2,host=z2-h4");
    }
    let mut spec = DeviceSpec::new(id).capacity(capacity);
    spec.name = name.unwrap_or_default();
    spec.location = location;
    spec.bandwidth_mb_per_s = bandwidth;
    spec.class = class;
    spec.addr = addr;
    if let Some(w) = weight_value {
        spec.weight = Some(weight(w, "--weight")?);
    }
    Ok(spec)
}

pub fn add_device(args: AddDeviceArgs) -> Result<()> {
    let spec = device_spec(
        args.id,
        args.name.clone(),
        &args.at,
        args.capacity,
        args.weight,
        args.bandwidth,
        args.class.clone(),
        args.addr.clone(),
    )?;
    let (id, capacity) = (args.id, args.capacity);
    let check_addr = args.addr.clone().filter(|_| !args.allow_unreachable);
    let transport = match &check_addr {
        Some(_) => Some(args.edit.live.transport()?),
        None => None,
    };
    let source = args
        .edit
        .live
        .map
        .clone()
        .or_else(|| args.edit.live.cluster.as_ref().map(|dir| dir.display().to_string()));
    edit_checked(
        &args.edit,
        |_| Ok(MapChange::AddDevice(spec)),
        move |_, _| {
            Box::pin(async move {
                let (Some(addr), Some(transport)) = (check_addr, transport) else { return Ok(()) };
                serves_device(&transport, &addr, id, capacity, source.as_deref()).await
            })
        },
    )
}

/// Refuses a new device's address unless a server there answers and serves the device: a
/// device nobody serves would leave rebalancing retrying "unreachable".
pub(crate) async fn serves_device(
    transport: &optio_net::HttpTransport,
    addr: &str,
    id: u32,
    capacity: u64,
    source: Option<&str>,
) -> Result<()> {
    let start = format!(
        "start it there first, e.g. `optio server --listen {addr} --device {id}:{}:/srv/optio/dev{id} \
         --map {} --keyring KEYRING`, or pass --allow-unreachable to store the device now and \
         start its server after",
        bytes(capacity as f64).replace(' ', ""),
        source.unwrap_or("SOURCE")
    );
    match optio_net::Transport::server_status(transport, addr).await {
        Ok(status) if status.devices.iter().any(|d| d.metrics.device == id) => Ok(()),
        Ok(status) => {
            let served: Vec<String> =
                status.devices.iter().map(|d| d.metrics.device.to_string()).collect();
            bail!(
                "the server at {addr} answers but does not serve device {id} (it serves {}); {start}",
                if served.is_empty() { "none".to_string() } else { served.join(", ") }
            )
        }
        Err(failure) => bail!("nothing at {addr} answers as an Optio server ({failure}); {start}"),
    }
}

pub fn remove_device(args: RemoveDeviceArgs) -> Result<()> {
    let force = args.force;
    let device_text = args.device.clone();
    let transport = args.edit.live.transport()?;
    edit_checked(
        &args.edit,
        |map| Ok(MapChange::RemoveDevice(find_device(map, &device_text)?)),
        move |old, change| {
            let MapChange::RemoveDevice(device) = change else { return Box::pin(async { Ok(()) }) };
            let (old, device) = (old.clone(), *device);
            let transport = transport.clone();
            Box::pin(async move {
                if force {
                    return Ok(());
                }
                Ok(optio_client::removal::check_not_last_copy(&transport, &old, device).await?)
            })
        },
    )
}

pub fn reweight(args: ReweightArgs) -> Result<()> {
    let (device, value, override_) = (args.device.clone(), args.weight, args.reweight);
    edit(&args.edit, move |map| {
        let device = find_device(map, &device)?;
        if override_ {
            if !(0.0..=1.0).contains(&value) {
                bail!("a reweight is 0 to 1, not {value}");
            }
            Ok(MapChange::SetReweight { device, reweight: weight(value, "the reweight")? })
        } else {
            Ok(MapChange::SetWeight { device, weight: weight(value, "the weight")? })
        }
    })
}

pub fn set_state(args: SetStateArgs) -> Result<()> {
    if !(args.up || args.down || args.is_in || args.out) {
        bail!("say what to set: --up or --down, --in or --out");
    }
    let up = (args.up || args.down).then_some(args.up);
    let is_in = (args.is_in || args.out).then_some(args.is_in);
    let device = args.device.clone();
    edit(&args.edit, move |map| {
        Ok(MapChange::SetState { device: find_device(map, &device)?, up, is_in })
    })
}

pub fn set_attr(args: SetAttrArgs) -> Result<()> {
    if args.capacity.is_none()
        && args.bandwidth.is_none()
        && args.class.is_none()
        && args.addr.is_none()
    {
        bail!("say what to set: --capacity, --bandwidth, --class or --addr");
    }
    let class = args.class.clone().map(|c| (c != "none").then_some(c));
    let device = args.device.clone();
    let (capacity_bytes, bandwidth_mb_per_s, addr) = (args.capacity, args.bandwidth, args.addr);
    edit(&args.edit, move |map| {
        Ok(MapChange::SetAttr {
            device: find_device(map, &device)?,
            capacity_bytes,
            bandwidth_mb_per_s,
            class,
            addr,
        })
    })
}

pub fn activate(args: MembershipArgs, activate: bool) -> Result<()> {
    let devices = args.devices.clone();
    edit(&args.edit, move |map| membership_change(map, &devices, activate))
}

/// `optio map activate|deactivate DEVICES` (and the console's) as a change of `map`.
pub(crate) fn membership_change(
    map: &ClusterMap,
    devices: &[String],
    activate: bool,
) -> Result<MapChange> {
    if devices.is_empty() {
        bail!("name the devices (ids or names) of the elastic membership");
    }
    let ids = devices.iter().map(|d| find_device(map, d)).collect::<Result<Vec<_>>>()?;
    Ok(if activate { MapChange::Activate(ids) } else { MapChange::Deactivate(ids) })
}

pub fn resize(args: ResizeArgs) -> Result<()> {
    let active = args.active;
    edit(&args.edit, move |map| resize_change(map, active))
}

/// `optio resize --active N` (and the console's) as a change of `map`: ranks 1 to N active.
pub(crate) fn resize_change(map: &ClusterMap, active: u32) -> Result<MapChange> {
    {
        let Some(membership) = map.membership() else {
            bail!("this map has no elastic pool, so there is no membership to resize");
        };
        let n = membership.order.len() as u32;
        let primaries = map
            .pools()
            .iter()
            .filter_map(|p| match p.engine_spec() {
                optio_placement::EngineSpec::Elastic(params) => Some(params.primaries),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        if active < primaries.max(1) {
            bail!(
                "--active {active} is below the {primaries} primaries, which hold a copy of every object and stay active: use {} to {n}",
                primaries.max(1)
            );
        }
        if active > n {
            bail!(
                "--active {active} is above the {n} ranked servers: use {} to {n}",
                primaries.max(1)
            );
        }
        Ok(MapChange::SetActive(ActiveSpec::FirstRanks(active)))
    }
}

type Check = Box<
    dyn FnOnce(
        &ClusterMap,
        &MapChange,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>>>>,
>;

fn edit(args: &EditArgs, change: impl FnOnce(&ClusterMap) -> Result<MapChange>) -> Result<()> {
    edit_checked(args, change, |_, _| Box::pin(async { Ok(()) }))
}

fn edit_checked(
    args: &EditArgs,
    change: impl FnOnce(&ClusterMap) -> Result<MapChange>,
    check: impl FnOnce(
        &ClusterMap,
        &MapChange,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>>>>
    + 'static,
) -> Result<()> {
    crate::commands::init_logging("warn");
    let check: Check = Box::new(check);
    let source = args.live.source()?;
    let runtime = crate::commands::runtime()?;
    runtime.block_on(async move {
        let old = source
            .load()
            .await
            .with_context(|| format!("cannot load the map from {}", source.describe()))?;
        let change = change(&old)?;
        let sample = MovementSample { objects: args.objects, object_bytes: OBJECT_BYTES };
        let options = ApplyOptions::Judged { sample, allow_below_min_size: args.yes };
        let edit = MapEdit::new(old, &change, options).context("the change was refused")?;
        let report = edit.report.as_ref().expect("a judged edit has a report");
        let (old, new) = (&edit.old, &edit.new);
        let mut json = serde_json::json!({
            "source": source.describe(), "epoch_before": old.epoch().0,
            "dry_run": args.dry_run, "stored": false, "short_of_copies": copies_json(report),
        });
        if args.json {
            json["moves"] = moves_json(report, args.objects);
        } else {
            print!("{}", what_moves(report, args.objects));
            print!("{}", copies_text(report));
        }
        if report.below_min_size() && !args.yes {
            let reason = "this change leaves data with fewer copies than its pool's min_size: \
                          writes to it would fail until devices return; nothing was stored — \
                          rerun with --yes to make it anyway";
            if args.json {
                json["refused"] = serde_json::json!(reason);
                println!("{}", serde_json::to_string_pretty(&json)?);
            }
            bail!("{reason}");
        }
        check(old, &change).await?;
        let done = |json: serde_json::Value, text: String| -> Result<()> {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&json)?);
            } else {
                println!("{text}");
            }
            Ok(())
        };
        if args.dry_run {
            let text = format!("dry run: nothing stored (the map stays at epoch {})", old.epoch());
            return done(json, text);
        }
        if let Some(written) = offline_file(&source, args.output.as_deref(), new)? {
            json["written_to"] =
                serde_json::json!(args.output.as_deref().unwrap_or(match &source {
                    MapSource::File(store) => store.path(),
                    _ => std::path::Path::new(""),
                }));
            json["epoch"] = serde_json::json!(new.epoch().0);
            return done(json, written);
        }
        // Stored with a compare-and-swap; should someone else store a map first, the change
        // is applied again to theirs (its min_size check too), never over it.
        let stored = source.store_edit(edit, &change, options).await?;
        let (old, new) = (&stored.old, &stored.new);
        let served = new.devices().iter().any(|d| d.addr.is_some());
        if args.json {
            json["stored"] = serde_json::json!(true);
            json["epoch"] = serde_json::json!(new.epoch().0);
            json["served"] = serde_json::json!(served);
            if stored.attempts > 1 {
                json["epoch_before"] = serde_json::json!(old.epoch().0);
                json["attempts"] = serde_json::json!(stored.attempts);
            }
            return done(json, String::new());
        }
        if stored.attempts > 1 {
            println!(
                "the map changed while this edit was made: the change was applied again, to epoch {}",
                old.epoch()
            );
        }
        println!(
            "stored epoch {} at {} (was {}){}",
            new.epoch(),
            source.describe(),
            old.epoch(),
            if served {
                "; servers rebalance now: `optio status` shows their progress"
            } else {
                " (no device has an address: no server serves this map)"
            }
        );
        Ok(())
    })
}

/// Where an edit of a map *file* goes when it is not a live cluster's Optio TOML map: to
/// `--output` (in the format its extension names), or back into a Ceph text or JSON file in
/// its own format — as a plain file replacement (no lock file left beside it), and only if
/// that format keeps the whole change. `None`: a live map, changed in place as usual.
fn offline_file(
    source: &MapSource,
    output: Option<&std::path::Path>,
    new: &ClusterMap,
) -> Result<Option<String>> {
    let MapSource::File(store) = source else {
        if let Some(output) = output {
            bail!(
                "--output {} is for map files; {} is a live map, changed in place",
                output.display(),
                source.describe()
            );
        }
        return Ok(None);
    };
    let (target, format) = match output {
        Some(path) => (path.to_path_buf(), format_of_extension(path)),
        None => {
            let text = std::fs::read_to_string(store.path())
                .with_context(|| format!("cannot read {}", store.path().display()))?;
            match optio_mapfile::detect(&text) {
                optio_mapfile::Format::OptioToml => return Ok(None),
                format => (store.path().to_path_buf(), format),
            }
        }
    };
    let text = match format {
        optio_mapfile::Format::OptioToml => optio_mapfile::optio_toml::write(new),
        optio_mapfile::Format::CephText => optio_mapfile::ceph_text::write(new)?,
        optio_mapfile::Format::CephJson => optio_mapfile::ceph_json::write(new)?,
    };
    if format != optio_mapfile::Format::OptioToml {
        check_kept(new, &text, format, &target)?;
    }
    optio_cluster::durable::replace(&target, text.as_bytes())
        .with_context(|| format!("cannot write {}", target.display()))?;
    Ok(Some(format!(
        "wrote the edited map to {} ({}); no server follows a file written this way",
        target.display(),
        format.name()
    )))
}

/// The format a file name asks for.
fn format_of_extension(path: &std::path::Path) -> optio_mapfile::Format {
    match path.extension().and_then(|e| e.to_str()) {
        Some("toml") => optio_mapfile::Format::OptioToml,
        Some("json") => optio_mapfile::Format::CephJson,
        _ => optio_mapfile::Format::CephText,
    }
}

/// Refuses to write `new` as `text` in a Ceph format that would lose part of it (the
/// formats have no in/out state, capacities, addresses…).
fn check_kept(
    new: &ClusterMap,
    text: &str,
    format: optio_mapfile::Format,
    target: &std::path::Path,
) -> Result<()> {
    // A map read from a Ceph format has capacities derived from the CRUSH weights; the
    // format keeps the weights, and the capacities follow them when it is read again.
    let lost = lost_in(new, text, format, true)?;
    if let Some(first) = lost.first() {
        bail!(
            "{} cannot hold this change (it would lose {} setting(s), the first: {first}); \
             nothing was written: keep the result as Optio TOML with --output FILE.toml (and \
             leave {} as it is)",
            format.name(),
            lost.len(),
            target.display()
        );
    }
    Ok(())
}

/// What `map` written as `text` in `format` loses, pools aside (Ceph's formats hold none,
/// and `convert` says so): each device setting the text, read back, does not give — state
/// (in/out, up/down), reweights, addresses, bandwidths, capacities unless `derived_capacity`
/// (a map read from a Ceph format has capacities derived from the CRUSH weights, which the
/// format keeps) — and an elastic membership.
pub(crate) fn lost_in(
    map: &ClusterMap,
    text: &str,
    format: optio_mapfile::Format,
    derived_capacity: bool,
) -> Result<Vec<String>> {
    let back = optio_mapfile::parse_as(text, format)
        .with_context(|| format!("the map written as {} does not read back", format.name()))?;
    let mut lost = Vec::new();
    for device in map.devices() {
        let Some(kept) = back.device(device.id) else {
            lost.push(format!("{}: the whole device", device.name));
            continue;
        };
        let mut differs = |what: &str, ours: String, theirs: String| {
            if ours != theirs {
                lost.push(format!("{}: {what} {ours} (read back: {theirs})", device.name));
            }
        };
        differs("in", device.is_in.to_string(), kept.is_in.to_string());
        differs("up", device.up.to_string(), kept.up.to_string());
        differs("weight", device.weight.to_string(), kept.weight.to_string());
        differs("reweight", device.reweight.to_string(), kept.reweight.to_string());
        differs(
            "primary affinity",
            device.primary_affinity.to_string(),
            kept.primary_affinity.to_string(),
        );
        differs("address", format!("{:?}", device.addr), format!("{:?}", kept.addr));
        differs(
            "bandwidth (MB/s)",
            device.bandwidth_mb_per_s.to_string(),
            kept.bandwidth_mb_per_s.to_string(),
        );
        differs("class", format!("{:?}", device.class), format!("{:?}", kept.class));
        if !derived_capacity {
            differs(
                "capacity",
                crate::output::bytes(device.capacity_bytes as f64),
                crate::output::bytes(kept.capacity_bytes as f64),
            );
        }
    }
    if map.membership().is_some() && back.membership().is_none() {
        lost.push("the elastic membership (ranks, versions)".to_string());
    }
    Ok(lost)
}

/// The size each simulated object stands for in what a change moves.
pub(crate) const OBJECT_BYTES: u64 = 4 << 20;
/// Objects simulated per pool to estimate what a change moves (`--objects`' default, and the
/// console's what-if: both report the same movement for the same change).
pub(crate) const SAMPLE_OBJECTS: u64 = 20_000;

/// The pools a change leaves short of copies ([`ChangeReport::short_of_copies`]), for people:
/// empty when every sampled object keeps its pool's size.
fn copies_text(report: &ChangeReport) -> String {
    let mut text = String::new();
    for pool in &report.short_of_copies {
        text.push_str(&format!(
            "pool '{}': {} of {} sampled objects would have fewer than {} copies{}\n",
            pool.name,
            pool.below_size,
            pool.sampled,
            pool.size,
            if pool.below_min_size > 0 {
                format!(
                    ", {} fewer than min_size {} (not writable)",
                    pool.below_min_size, pool.min_size
                )
            } else {
                format!(" (degraded, still writable: min_size {})", pool.min_size)
            }
        ));
    }
    text
}

/// [`copies_text`] as JSON, per pool.
pub(crate) fn copies_json(report: &ChangeReport) -> Vec<serde_json::Value> {
    report
        .short_of_copies
        .iter()
        .map(|pool| {
            serde_json::json!({
                "pool": pool.name, "sampled": pool.sampled, "below_size": pool.below_size,
                "below_min_size": pool.below_min_size, "size": pool.size, "min_size": pool.min_size,
            })
        })
        .collect()
}

/// [`what_moves`] as JSON: per pool the copies that move against the minimum and the copies
/// each device gains (`gained`: negative for a device that loses copies; devices with no
/// change left out), or the membership change. `optio map … --json` prints it and the
/// console's what-if and edits answer it.
pub(crate) fn moves_json(report: &ChangeReport, objects: u64) -> serde_json::Value {
    match &report.effect {
        ChangeEffect::Membership(m) => serde_json::json!({
            "membership": {
                "from_version": m.from_version, "to_version": m.to_version,
                "active_before": m.active_before, "active_after": m.active_after,
                "servers": m.servers,
            }
        }),
        ChangeEffect::Moves(pools) => serde_json::json!(pools
            .iter()
            .map(|p| {
                let m = &p.movement;
                let ratio = m.ratio_to_minimum();
                serde_json::json!({
                    "pool": p.name, "unit": if p.has_pgs { "pg_copies" } else { "simulated_object_copies" },
                    "moved": m.moved, "copies": m.copies, "minimum_share": m.minimum_share,
                    "moved_over_minimum": ratio.is_finite().then_some(ratio),
                    "simulated_objects": objects, "simulated_moved_bytes": m.moved_bytes,
                    "simulated_bytes": m.bytes,
                    "gained": m.gained.iter().enumerate().filter(|(_, g)| **g != 0)
                        .map(|(device, g)| serde_json::json!({"device": device, "copies": g}))
                        .collect::<Vec<_>>(),
                })
            })
            .collect::<Vec<_>>()),
    }
}

/// What a change moves, per pool, against the minimum (from simulated objects), or what
/// membership it changes: the placement crate's [`ChangeReport`], for people.
pub fn what_moves(report: &ChangeReport, objects: u64) -> String {
    let mut out = String::new();
    match &report.effect {
        ChangeEffect::Membership(m) => {
            let (before, after, n) = (m.active_before, m.active_after, m.servers);
            out.push_str(&format!(
                "membership version {} → {}: {before} → {after} of {n} servers active\n",
                m.from_version, m.to_version
            ));
            if after < before {
                out.push_str("  nothing moves: data on the inactive servers stays there and every object keeps a copy on a primary; new writes to elastic pools skip the inactive servers (offloaded) and are recorded in the dirty table\n");
            } else if after == n as u32 {
                out.push_str("  full power: re-integration moves the offloaded copies recorded in the dirty table back to their servers, then empties it\n");
            } else {
                out.push_str("  re-integration moves the offloaded copies recorded in the dirty table to where this version places them\n");
            }
            for (name, engine) in &m.unaffected {
                out.push_str(&format!("  pool '{name}' ({engine}): not elastic, unaffected\n"));
            }
        }
        ChangeEffect::Moves(pools) => {
            for PoolMovement { name, has_pgs, movement: m, .. } in pools {
                let unit = if *has_pgs { "PG copies" } else { "object copies (simulated)" };
                let ratio = m.ratio_to_minimum();
                out.push_str(&format!(
                    "pool '{}': {} of {} {unit} move ({:.2}%; minimum {:.2}%{}); for {objects} simulated objects of 4 MiB that is {} of {} — not the cluster's own data (`optio status` shows what the servers move)\n",
                    name,
                    m.moved,
                    m.copies,
                    if m.copies > 0 { m.moved as f64 * 100.0 / m.copies as f64 } else { 0.0 },
                    m.minimum_share * 100.0,
                    if ratio.is_finite() && m.minimum_share > 0.0 { format!(", moved/minimum {ratio:.2}") } else { String::new() },
                    bytes(m.moved_bytes as f64),
                    bytes(m.bytes as f64),
                ));
            }
        }
    }
    out
}
