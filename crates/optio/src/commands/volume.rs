//! `optio volume create | ls | info | resize | rm | import | export | snap | clone | flatten |
//! diff | export-diff | import-diff | du`: block volumes ([`optio_client::volume`]).

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use optio_client::volume::{self, OpenOptions, Volume, VolumeHeader};

use crate::commands::client::ClusterConn;
use crate::output::{self, Table, parse_size};

/// Block volumes: thin-provisioned, striped over objects (serve them with `optio nbd`).
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Create a volume of SIZE bytes (e.g. 10GiB) in the pool (--pool, default `data`).
    Create(CreateArgs),
    /// List the volumes.
    Ls(ListArgs),
    /// A volume's size, object size, pool, allocated objects and lock (--placement: each
    /// allocated object's candidate, PG and devices).
    Info(InfoArgs),
    /// Grow a volume (shrink only with --allow-shrink: what lies beyond is discarded).
    Resize(ResizeArgs),
    /// Remove a volume and every object of it (run it again to finish one interrupted).
    Rm(RmArgs),
    /// Copy a raw image (a file or `-` for standard input) into a volume; runs of zeros are
    /// not written.
    Import(CopyArgs),
    /// Copy a volume, or a snapshot VOL@SNAP, into a raw image (a file, written sparse, or
    /// `-` for standard output).
    Export(CopyArgs),
    /// Snapshots: `snap create|ls|rm|rollback|protect|unprotect` (VOL@SNAP names one).
    #[command(subcommand)]
    Snap(SnapCommand),
    /// Make volume NEW from the protected snapshot VOL@SNAP: nothing is copied; what NEW
    /// never wrote reads from the snapshot (clones of clones too).
    Clone(CloneArgs),
    /// Copy into clone NAME everything it still reads from its parent snapshot, then detach
    /// it (the snapshot may then be unprotected and removed): at --rate, by `optio nbd` if it
    /// serves the clone (it goes on serving), else here. Run again if interrupted: it resumes.
    Flatten(FlattenArgs),
    /// The extents that differ between snapshot --from-snap and VOL (or snapshot VOL@SNAP);
    /// without --from-snap, every allocated extent. Whole data objects: the granularity.
    Diff(crate::commands::volume_diff::DiffArgs),
    /// Write what differs between --from-snap and VOL (or VOL@SNAP) as a diff stream (a file,
    /// or `-` for standard output) that `import-diff` applies: an incremental backup.
    ExportDiff(crate::commands::volume_diff::ExportDiffArgs),
    /// Apply a diff stream (a file, or `-` for standard input) to volume VOL: it must have
    /// the stream's start snapshot; takes its lock; resizes it to the stream's size; then
    /// takes the stream's end snapshot on it.
    ImportDiff(crate::commands::volume_diff::ImportDiffArgs),
    /// The bytes each snapshot, and the head, hold alone (what removing a snapshot frees),
    /// whole data objects counted.
    Du(crate::commands::volume_diff::DuArgs),
}

/// `optio volume clone`.
#[derive(clap::Args, Debug)]
pub struct CloneArgs {
    /// The parent snapshot, as VOLUME@SNAPSHOT (protected).
    pub spec: String,
    /// The new volume's name.
    pub new: String,
    /// The pool of the new volume's objects (default: the parent's).
    #[arg(long)]
    pub pool: Option<String>,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume flatten`.
#[derive(clap::Args, Debug)]
pub struct FlattenArgs {
    /// The clone.
    pub name: String,
    /// Objects copied per second at most (0: no limit).
    #[arg(long, default_value_t = optio_client::flatten::RATE_DEFAULT, value_name = "N")]
    pub rate: u32,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume snap …`: point-in-time, read-only copies of a volume that cost nothing until
/// the volume changes (docs/volumes.md, "Snapshots and clones").
#[derive(clap::Subcommand, Debug)]
pub enum SnapCommand {
    /// Take snapshot VOL@SNAP: crash-consistent (every write acknowledged before it is in it,
    /// none issued after); while `optio nbd` serves the volume, that process takes it.
    Create(SnapArgs),
    /// List a volume's snapshots (VOL).
    Ls(SnapListArgs),
    /// Remove snapshot VOL@SNAP (not a protected one): at once; the copies only it kept are
    /// trimmed in the background (`optio status` shows it), or before returning with --wait.
    Rm(SnapRmArgs),
    /// Run (or resume) the background trim of volume VOL now, in this command: the copies of
    /// removed snapshots, or everything of a volume removed with its snapshots.
    Trim(SnapTrimArgs),
    /// Write the volume back as snapshot VOL@SNAP holds it (takes the volume's lock; the
    /// other snapshots stay).
    Rollback(SnapArgs),
    /// Protect VOL@SNAP from removal.
    Protect(SnapArgs),
    /// Let VOL@SNAP be removed again.
    Unprotect(SnapArgs),
}

/// A command on one snapshot.
#[derive(clap::Args, Debug)]
pub struct SnapArgs {
    /// The snapshot, as VOLUME@SNAPSHOT.
    pub spec: String,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume snap rm`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "The snapshot is gone when the command returns. The copies only it kept are deleted by a
trim job recorded in the volume's header: `optio up` and `optio manager` run such jobs in the
background at their --trim-rate; `optio status` shows their progress; a job resumes where it
stopped after a crash. --wait runs the trim in this command instead."
)]
pub struct SnapRmArgs {
    /// The snapshot, as VOLUME@SNAPSHOT.
    pub spec: String,
    /// Trim the copies in this command, and return when they are gone.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: copies removed per second at most (0: no limit).
    #[arg(long, default_value_t = optio_client::trim::RATE_DEFAULT, value_name = "N")]
    pub rate: u32,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume snap trim`.
#[derive(clap::Args, Debug)]
pub struct SnapTrimArgs {
    /// Volume name.
    pub name: String,
    /// Copies removed per second at most (0: no limit).
    #[arg(long, default_value_t = optio_client::trim::RATE_DEFAULT, value_name = "N")]
    pub rate: u32,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume snap ls`.
#[derive(clap::Args, Debug)]
pub struct SnapListArgs {
    /// Volume name.
    pub name: String,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume create`.
#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// Volume name (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Size (bytes, or with a unit: 512MiB, 10GiB, 1TiB).
    #[arg(value_parser = parse_size)]
    pub size: u64,
    /// Bytes per data object (a power of two, 4KiB to 64MiB).
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub object_size: u64,
    /// The pool of the volume's objects.
    #[arg(long, default_value = "data")]
    pub pool: String,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume ls`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume info`.
#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// Volume name.
    pub name: String,
    /// Also each allocated object's candidate, PG and devices.
    #[arg(long)]
    pub placement: bool,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume resize`.
#[derive(clap::Args, Debug)]
pub struct ResizeArgs {
    /// Volume name.
    pub name: String,
    /// New size.
    #[arg(value_parser = parse_size)]
    pub size: u64,
    /// Allow a smaller size (the data beyond it is discarded).
    #[arg(long)]
    pub allow_shrink: bool,
    /// Take the lock even if another client holds it.
    #[arg(long)]
    pub break_lock: bool,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume rm`.
#[derive(clap::Args, Debug)]
pub struct RmArgs {
    /// Volume name.
    pub name: String,
    /// Remove it even if a client holds it open read-write.
    #[arg(long)]
    pub break_lock: bool,
    /// A volume with snapshots: delete its data and the snapshots' copies in this command
    /// (they are deleted in the background otherwise).
    #[arg(long)]
    pub wait: bool,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume import` / `export`.
#[derive(clap::Args, Debug)]
pub struct CopyArgs {
    /// Volume name.
    pub name: String,
    /// The raw image (`-`: standard input or output).
    pub file: PathBuf,
    /// Import: create the volume (with the image's size rounded up to 512 bytes) if it does
    /// not exist.
    #[arg(long)]
    pub create: bool,
    /// Import with --create: the pool of the new volume.
    #[arg(long, default_value = "data")]
    pub pool: String,
    /// Bytes per request.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub chunk: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// Take the lock even if another client holds it (import).
    #[arg(long)]
    pub break_lock: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

pub fn run(command: Command) -> Result<()> {
    crate::commands::init_logging("warn");
    crate::commands::runtime()?.block_on(async {
        match command {
            Command::Create(args) => create(args).await,
            Command::Ls(args) => ls(args).await,
            Command::Info(args) => info(args).await,
            Command::Resize(args) => resize(args).await,
            Command::Rm(args) => rm(args).await,
            Command::Import(args) => import(args).await,
            Command::Export(args) => export(args).await,
            Command::Snap(SnapCommand::Protect(args)) => snap_protect(args, true).await,
            Command::Snap(SnapCommand::Unprotect(args)) => snap_protect(args, false).await,
            Command::Snap(command) => snap(command).await,
            Command::Clone(args) => clone(args).await,
            Command::Diff(args) => crate::commands::volume_diff::diff(args).await,
            Command::ExportDiff(args) => crate::commands::volume_diff::export_diff(args).await,
            Command::ImportDiff(args) => crate::commands::volume_diff::import_diff(args).await,
            Command::Du(args) => crate::commands::volume_diff::du(args).await,
            Command::Flatten(args) => {
                let client = args.cluster.connect().await?;
                let bar = output::progress(0, "flatten", std::io::stderr().is_terminal());
                let copied =
                    optio_client::flatten::flatten(&client, &args.name, args.rate, |job| {
                        bar.set_length(job.objects);
                        bar.set_position(job.next.min(job.objects));
                    })
                    .await?;
                bar.finish_and_clear();
                println!(
                    "flattened volume '{}' ({copied} objects copied from its parent)",
                    args.name
                );
                Ok(())
            }
        }
    })
}

async fn snap(command: SnapCommand) -> Result<()> {
    use optio_client::snapshot;
    match command {
        SnapCommand::Ls(args) => {
            let client = args.cluster.connect().await?;
            let snapshots = snapshot::list(&client, &args.name).await?;
            if args.json {
                println!("{}", serde_json::to_value(&snapshots).expect("snapshots serialize"));
                return Ok(());
            }
            if snapshots.is_empty() {
                println!(
                    "volume '{}' has no snapshots; take one with `optio volume snap create {}@NAME`",
                    args.name, args.name
                );
                return Ok(());
            }
            let mut table =
                Table::new(&["id", "name", "size", "protected", "created (unix s)"]).left(&[1]);
            for s in &snapshots {
                table.row(vec![
                    s.id.to_string(),
                    s.name.clone(),
                    output::bytes(s.size as f64),
                    if s.protected { "yes".into() } else { "no".into() },
                    s.created_unix_s.to_string(),
                ]);
            }
            print!("{}", table.render());
            Ok(())
        }
        SnapCommand::Create(args) => {
            let (name, snap) = snapshot::parse_spec(&args.spec)?;
            let client = args.cluster.connect().await?;
            let started = std::time::Instant::now();
            let taken = snapshot::create(&client, name, snap).await?;
            let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
            if args.json {
                let mut value = serde_json::to_value(&taken).expect("snapshots serialize");
                value["elapsed_ms"] = serde_json::json!(elapsed_ms);
                println!("{value}");
            } else {
                println!(
                    "took snapshot '{}' (id {}) of volume '{name}' in {elapsed_ms:.1} ms",
                    taken.name, taken.id
                );
            }
            Ok(())
        }
        SnapCommand::Rm(args) => {
            let (name, snap) = snapshot::parse_spec(&args.spec)?;
            let client = args.cluster.connect().await?;
            snapshot::remove(&client, name, snap).await?;
            let trimmed = if args.wait {
                Some(run_trim(&client, name, args.rate, args.json).await?)
            } else {
                None
            };
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({ "removed": args.spec, "clones_trimmed": trimmed,
                                        "trim": if args.wait { "done" } else { "background" } })
                );
            } else if let Some(trimmed) = trimmed {
                println!("removed snapshot '{}' ({trimmed} kept copies trimmed)", args.spec);
            } else {
                println!(
                    "removed snapshot '{}'; the copies only it kept are trimmed in the background (`optio status` shows it; `optio volume snap trim {name}` runs it here)",
                    args.spec
                );
            }
            Ok(())
        }
        SnapCommand::Trim(args) => {
            let client = args.cluster.connect().await?;
            let trimmed = run_trim(&client, &args.name, args.rate, args.json).await?;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({ "volume": args.name, "clones_trimmed": trimmed })
                );
            } else {
                println!("volume '{}': {trimmed} kept copies trimmed", args.name);
            }
            Ok(())
        }
        SnapCommand::Rollback(args) => {
            let (name, snap) = snapshot::parse_spec(&args.spec)?;
            let client = args.cluster.connect().await?;
            let changed = snapshot::rollback(&client, name, snap).await?;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({ "rolled_back_to": args.spec, "objects_written": changed })
                );
            } else {
                println!("rolled volume '{name}' back to '{snap}' ({changed} objects written)");
            }
            Ok(())
        }
        SnapCommand::Protect(args) | SnapCommand::Unprotect(args) => {
            bail!("internal: handled below ({})", args.spec)
        }
    }
}

async fn clone(args: CloneArgs) -> Result<()> {
    let (volume, snap) = optio_client::snapshot::parse_spec(&args.spec)?;
    let client = args.cluster.connect().await?;
    if let Some(pool) = &args.pool {
        client.map().pool_by_name(pool).with_context(|| {
            format!("no pool '{pool}' in the map; pass --pool with one of its pools")
        })?;
    }
    let header =
        optio_client::snapshot::clone(&client, volume, snap, &args.new, args.pool.as_deref())
            .await?;
    if args.json {
        println!("{}", header_json(&header));
    } else {
        println!(
            "cloned '{}' into volume '{}' ({}, pool '{}'; nothing copied)",
            args.spec,
            header.name,
            output::bytes(header.size as f64),
            header.pool
        );
    }
    Ok(())
}

async fn snap_protect(args: SnapArgs, protected: bool) -> Result<()> {
    let (name, snap) = optio_client::snapshot::parse_spec(&args.spec)?;
    let client = args.cluster.connect().await?;
    optio_client::snapshot::set_protected(&client, name, snap, protected).await?;
    let what = if protected { "protected" } else { "unprotected" };
    if args.json {
        println!("{}", serde_json::json!({ "snapshot": args.spec, "protected": protected }));
    } else {
        println!("snapshot '{}' {what}", args.spec);
    }
    Ok(())
}

/// A volume as `optio volume ls --json`, `create --json` and the console show it.
pub(crate) fn header_json(header: &VolumeHeader) -> serde_json::Value {
    serde_json::to_value(header).expect("headers serialize")
}

/// Whether `pool` can hold a volume's objects (`optio volume create` and the console).
pub(crate) fn check_volume_pool(client: &optio_client::Client, pool: &str) -> Result<()> {
    client.map().pool_by_name(pool).with_context(|| {
        format!("no pool '{pool}' in the map; pass --pool with one of its pools")
    })?;
    Ok(())
}

/// Resizes volume `name` under its lock (`optio volume resize` and the console): its size
/// before.
pub(crate) async fn resize_volume(
    client: &optio_client::Client,
    name: &str,
    size: u64,
    allow_shrink: bool,
    break_lock: bool,
) -> Result<u64, volume::VolumeError> {
    let opened =
        Volume::open(client, name, OpenOptions { break_lock, ..OpenOptions::default() }).await?;
    let old = opened.size();
    let result = opened.resize(size, allow_shrink).await;
    opened.close().await?;
    result?;
    Ok(old)
}

/// A resize as `optio volume resize --json` and the console answer it.
pub(crate) fn resized_json(name: &str, old: u64, new: u64) -> serde_json::Value {
    serde_json::json!({ "volume": name, "size_before": old, "size": new })
}

/// A removal as `optio volume rm --json` and the console answer it.
pub(crate) fn removed_json(name: &str, removed: &volume::Removed) -> serde_json::Value {
    match removed {
        volume::Removed::Now(objects) => serde_json::json!({
            "removed": name, "data_objects_deleted": objects, "in_background": false,
        }),
        volume::Removed::InBackground => serde_json::json!({
            "removed": name, "data_objects_deleted": null, "in_background": true,
        }),
    }
}

async fn create(args: CreateArgs) -> Result<()> {
    let client = args.cluster.connect().await?;
    check_volume_pool(&client, &args.pool)?;
    let header =
        volume::create(&client, &args.name, args.size, &args.pool, args.object_size).await?;
    if args.json {
        println!("{}", header_json(&header));
    } else {
        println!(
            "created volume '{}': {} in pool '{}', {} objects of {} (thin: none stored yet)",
            header.name,
            output::bytes(header.size as f64),
            header.pool,
            header.objects(),
            output::bytes(header.object_size as f64)
        );
    }
    Ok(())
}

async fn ls(args: ListArgs) -> Result<()> {
    let client = args.cluster.connect().await?;
    let volumes = volume::list(&client).await?;
    if args.json {
        let list: Vec<_> = volumes.iter().map(header_json).collect();
        println!("{}", serde_json::Value::Array(list));
        return Ok(());
    }
    if volumes.is_empty() {
        println!("no volumes; create one with `optio volume create NAME SIZE`");
        return Ok(());
    }
    let mut table =
        Table::new(&["name", "size", "object size", "pool", "locked by"]).left(&[0, 3, 4]);
    for v in &volumes {
        table.row(vec![
            v.name.clone(),
            output::bytes(v.size as f64),
            output::bytes(v.object_size as f64),
            v.pool.clone(),
            v.lock.as_ref().map_or("-".into(), |l| l.holder.clone()),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}

async fn info(args: InfoArgs) -> Result<()> {
    let client = args.cluster.connect().await?;
    let opened = Volume::open(
        &client,
        &args.name,
        OpenOptions { read_only: true, ..OpenOptions::default() },
    )
    .await?;
    let header = opened.header();
    let allocated = volume::allocated(&client, &header).await?;
    let mut placements = Vec::new();
    if args.placement {
        for index in &allocated {
            let key = header.data_key(*index);
            let location = client.stat(&header.pool, &key).await?;
            placements.push((*index, key, location));
        }
    }
    if args.json {
        let mut value = header_json(&header);
        value["allocated_objects"] = serde_json::json!(allocated.len());
        value["objects"] = serde_json::json!(header.objects());
        if args.placement {
            value["placement"] = placements
                .iter()
                .map(|(index, key, l)| {
                    serde_json::json!({
                        "index": index, "key": key, "candidate": l.candidate.index,
                        "pg": l.candidate.pg.map(|pg| pg.to_string()),
                        "devices": l.candidate.devices.iter().map(|d| d.0).collect::<Vec<_>>(),
                        "version": l.info.version.0,
                    })
                })
                .collect();
        }
        println!("{value}");
        return Ok(());
    }
    println!("volume       {}", header.name);
    println!("id           {}", header.id);
    println!("pool         {}", header.pool);
    println!("size         {} ({} bytes)", output::bytes(header.size as f64), header.size);
    println!("object size  {}", output::bytes(header.object_size as f64));
    println!(
        "allocated    {} of {} objects ({} stored, before replication)",
        allocated.len(),
        header.objects(),
        output::bytes((allocated.len() as u64 * header.object_size) as f64)
    );
    println!("features     {}", header.features.join(", "));
    if header.snapshots.is_empty() {
        println!("snapshots    none");
    }
    for s in &header.snapshots {
        let protected = if s.protected { ", protected" } else { "" };
        let children = if s.children.is_empty() {
            String::new()
        } else {
            format!(", clones: {}", s.children.join(", "))
        };
        println!(
            "snapshot     {}@{} (id {}, {}{protected}{children})",
            header.name,
            s.name,
            s.id,
            output::bytes(s.size as f64)
        );
    }
    if let Some(parent) = &header.parent {
        println!("parent       {}@{}", parent.volume, parent.snapshot);
    }
    if let Some(job) = &header.flatten {
        println!(
            "flattening   {} of {} objects looked at, {} copied{}",
            job.next.min(job.objects),
            job.objects,
            job.copied,
            job.by.as_ref().map(|b| format!(", by {b}")).unwrap_or_default()
        );
    }
    if let Some(job) = &header.trim {
        println!(
            "trimming     {} of {} objects with copies looked at, {} copies removed (in the background)",
            job.done, job.objects, job.removed
        );
    }
    match &header.lock {
        Some(lock) => println!("locked by    {}", lock.holder),
        None => println!("locked by    nobody"),
    }
    if args.placement {
        let mut table =
            Table::new(&["object", "key", "candidate", "pg", "devices"]).left(&[1, 3, 4]);
        for (index, key, l) in &placements {
            table.row(vec![
                index.to_string(),
                key.clone(),
                l.candidate.index.to_string(),
                l.candidate.pg.map_or("-".into(), |pg| pg.to_string()),
                l.candidate.devices.iter().map(|d| d.0.to_string()).collect::<Vec<_>>().join(","),
            ]);
        }
        print!("{}", table.render());
    }
    Ok(())
}

async fn resize(args: ResizeArgs) -> Result<()> {
    let client = args.cluster.connect().await?;
    let old =
        resize_volume(&client, &args.name, args.size, args.allow_shrink, args.break_lock).await?;
    if args.json {
        println!("{}", resized_json(&args.name, old, args.size));
        return Ok(());
    }
    println!(
        "volume '{}' resized from {} to {}",
        args.name,
        output::bytes(old as f64),
        output::bytes(args.size as f64)
    );
    Ok(())
}

async fn rm(args: RmArgs) -> Result<()> {
    let client = args.cluster.connect().await?;
    let removed = volume::remove(&client, &args.name, args.break_lock).await?;
    if args.json {
        if matches!(removed, volume::Removed::InBackground) && args.wait {
            run_trim(&client, &args.name, optio_client::trim::RATE_DEFAULT, true).await?;
        }
        println!("{}", removed_json(&args.name, &removed));
        return Ok(());
    }
    match removed {
        volume::Removed::Now(removed) => {
            println!("removed volume '{}' ({removed} data objects deleted)", args.name);
        }
        volume::Removed::InBackground if args.wait => {
            let trimmed =
                run_trim(&client, &args.name, optio_client::trim::RATE_DEFAULT, false).await?;
            println!(
                "removed volume '{}' and its snapshots ({trimmed} kept copies trimmed)",
                args.name
            );
        }
        volume::Removed::InBackground => println!(
            "removed volume '{}' and its snapshots: its data is deleted in the background (`optio status` shows it; `optio volume snap trim {}` runs it here)",
            args.name, args.name
        ),
    }
    Ok(())
}

/// Runs volume `name`'s trim job to its end in this command, with a progress bar on a
/// terminal; the copies removed. A job that cannot run yet is waited for (up to a minute: a
/// writer follows a removal within its poll); one another runner carries out is followed to
/// its end (and taken over if that runner stops).
async fn run_trim(
    client: &optio_client::Client,
    name: &str,
    rate: u32,
    quiet: bool,
) -> Result<u64> {
    use optio_client::trim::{self, Outcome};
    let bar = output::progress(0, "trim", !quiet && std::io::stderr().is_terminal());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Copies removed by this command, and as the job last recorded (other runners' too).
    let (mut removed, mut recorded) = (0, 0);
    loop {
        let outcome = trim::run(client, name, rate, |progress| {
            bar.set_length(progress.objects);
            bar.set_position(progress.done);
            recorded = recorded.max(progress.removed);
        })
        .await?;
        match outcome {
            Outcome::Idle => break,
            Outcome::Done { removed: n, .. } => {
                removed += n;
                break;
            }
            Outcome::Elsewhere { by, progress } => {
                // Another runner (`optio up`, the manager, another command) has the job: follow
                // it to its end; if it stops, its claim lapses and this command takes over.
                tracing::debug!("trim of {name} is carried out by {by}");
                bar.set_length(progress.objects);
                bar.set_position(progress.done);
                recorded = recorded.max(progress.removed);
                tokio::time::sleep(optio_client::volume::HOLDER_POLL * 25).await;
            }
            Outcome::Waiting(why) if std::time::Instant::now() < deadline => {
                tracing::debug!("trim of {name} waits: {why}");
                tokio::time::sleep(optio_client::volume::HOLDER_POLL * 5).await;
            }
            Outcome::Waiting(why) => {
                bail!(
                    "the trim of volume '{name}' cannot run: {why}; it stays recorded and runs later (`optio volume snap trim {name}`)"
                )
            }
        }
    }
    bar.finish_and_clear();
    Ok(removed.max(recorded))
}

/// Whether every byte is zero.
fn all_zero(data: &[u8]) -> bool {
    data.iter().all(|b| *b == 0)
}

async fn import(args: CopyArgs) -> Result<()> {
    if args.chunk == 0 || !args.chunk.is_multiple_of(512) || args.chunk > 64 << 20 {
        bail!("--chunk must be a multiple of 512 bytes up to 64MiB");
    }
    let client = args.cluster.connect().await?;
    let stdin = args.file.as_os_str() == "-";
    let mut input: Box<dyn Read + Send> = if stdin {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(&args.file)
                .with_context(|| format!("cannot open {}", args.file.display()))?,
        )
    };
    let length = if stdin { None } else { Some(std::fs::metadata(&args.file)?.len()) };
    if args.create {
        let Some(length) = length else {
            bail!(
                "--create needs a file (its size); create the volume first to import from standard input"
            )
        };
        volume::create(
            &client,
            &args.name,
            length.div_ceil(512).max(1) * 512,
            &args.pool,
            volume::DEFAULT_OBJECT_SIZE,
        )
        .await?;
    }
    let opened = Volume::open(
        &client,
        &args.name,
        OpenOptions { break_lock: args.break_lock, ..OpenOptions::default() },
    )
    .await?;
    let size = opened.size();
    if let Some(length) = length
        && length > size
    {
        opened.close().await?;
        bail!(
            "{} is {length} bytes, more than volume '{}' ({size} bytes): resize it first",
            args.file.display(),
            args.name
        );
    }
    let bar = output::progress(
        length.unwrap_or(size),
        "import",
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
    let result = copy_in(&opened, &mut input, args.chunk, args.parallel.max(1), &bar).await;
    bar.finish_and_clear();
    let closed = opened.close().await;
    let (read, written) = result?;
    closed?;
    println!(
        "imported {} into volume '{}' ({} written, runs of zeros skipped)",
        output::bytes(read as f64),
        args.name,
        output::bytes(written as f64)
    );
    Ok(())
}

/// Reads `input` chunk by chunk and writes the chunks that are not all zeros, `parallel` at
/// a time; returns the bytes read and written.
async fn copy_in(
    opened: &Arc<Volume>,
    input: &mut (dyn Read + Send),
    chunk: u64,
    parallel: usize,
    bar: &indicatif::ProgressBar,
) -> Result<(u64, u64)> {
    let size = opened.size();
    let mut offset = 0u64;
    let mut written = 0u64;
    let mut pending = futures_util::stream::FuturesUnordered::new();
    use futures_util::StreamExt;
    loop {
        let want = chunk.min(size - offset) as usize;
        if want == 0 {
            let mut probe = [0u8; 1];
            if input.read(&mut probe)? != 0 {
                bail!("the input is longer than the volume ({size} bytes): resize it first");
            }
            break;
        }
        let mut buf = vec![0u8; want];
        let mut got = 0;
        while got < want {
            let n = input.read(&mut buf[got..]).context("cannot read the image")?;
            if n == 0 {
                break;
            }
            got += n;
        }
        if got == 0 {
            break;
        }
        buf.truncate(got);
        if !all_zero(&buf) {
            while pending.len() >= parallel {
                pending.next().await.expect("pending writes")?;
            }
            written += got as u64;
            let volume = opened.clone();
            let at = offset;
            pending.push(async move { volume.write(at, Bytes::from(buf), false).await });
        }
        offset += got as u64;
        bar.set_position(offset);
        if got < want {
            break;
        }
    }
    while let Some(result) = pending.next().await {
        result?;
    }
    opened.flush().await?;
    Ok((offset, written))
}

async fn export(args: CopyArgs) -> Result<()> {
    if args.chunk == 0 || args.chunk > 64 << 20 {
        bail!("--chunk must be 1 byte to 64MiB");
    }
    let client = args.cluster.connect().await?;
    let opened = Volume::open(
        &client,
        &args.name,
        OpenOptions { read_only: true, ..OpenOptions::default() },
    )
    .await?;
    let size = opened.size();
    let stdout = args.file.as_os_str() == "-";
    let mut file = if stdout {
        None
    } else {
        let file = std::fs::File::create(&args.file)
            .with_context(|| format!("cannot create {}", args.file.display()))?;
        file.set_len(size)?;
        Some(file)
    };
    let bar =
        output::progress(size, "export", std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let mut out = std::io::stdout().lock();
    let mut offset = 0u64;
    let mut reads = futures_util::stream::FuturesOrdered::new();
    use futures_util::StreamExt;
    let mut next = 0u64;
    let mut zero_bytes = 0u64;
    while offset < size {
        while next < size && reads.len() < args.parallel.max(1) {
            let len = args.chunk.min(size - next);
            let volume = opened.clone();
            let at = next;
            reads.push_back(async move { volume.read(at, len).await });
            next += len;
        }
        let data = reads.next().await.expect("pending reads")?;
        match &mut file {
            Some(file) => {
                if all_zero(&data) {
                    zero_bytes += data.len() as u64;
                } else {
                    use std::os::unix::fs::FileExt;
                    file.write_all_at(&data, offset)?;
                }
            }
            None => out.write_all(&data).context("cannot write standard output")?,
        }
        offset += data.len() as u64;
        bar.set_position(offset);
    }
    bar.finish_and_clear();
    if let Some(file) = file {
        file.sync_all()?;
        eprintln!(
            "exported volume '{}' ({}) to {} ({} of zeros left as holes)",
            args.name,
            output::bytes(size as f64),
            args.file.display(),
            output::bytes(zero_bytes as f64)
        );
    }
    Ok(())
}
