//! `optio auth`: the cluster keyring — init, add, ls, rm, rotate (docs/security.md).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use optio_proto::auth::{self, Cap, Entity, Key, Keyring};

use crate::commands::identity::KEYRING_FILE;
use crate::output::Table;

/// `optio auth`.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Create a keyring holding client.admin (what `optio up` does for its cluster).
    Init(Target),
    /// Add an entity with a new key and write its key file (0600): client.NAME for a person
    /// or program, server.NAME for a server.
    Add(AddArgs),
    /// List the entities and their capabilities (never the keys).
    Ls(LsArgs),
    /// Remove an entity: its requests are refused when the command returns (it waits for the
    /// servers of --cluster or --map to hold the change).
    Rm(EntityArgs),
    /// Give an entity a new key; the old one stays valid for --grace (rotation without
    /// downtime), and the new key file is written.
    Rotate(RotateArgs),
}

/// Which keyring.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// The keyring file (default: the cluster directory's `keyring`).
    #[arg(long, value_name = "FILE")]
    pub keyring: Option<PathBuf>,
    /// The cluster directory `optio up` printed.
    #[arg(long, env = "OPTIO_CLUSTER", value_name = "DIR")]
    pub cluster: Option<PathBuf>,
    /// The cluster's map (a map file, a cluster directory or etcd://…): a change returns once
    /// every server it names that answers holds it (with --cluster, that cluster's map).
    #[arg(long, value_name = "SOURCE")]
    pub map: Option<String>,
}

/// How long a keyring change waits for the servers to hold it.
const SERVERS_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);
/// How often it asks them.
const SERVERS_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

impl Target {
    fn path(&self) -> Result<PathBuf> {
        match (&self.keyring, &self.cluster) {
            (Some(path), _) => Ok(path.clone()),
            (None, Some(dir)) => Ok(dir.join(KEYRING_FILE)),
            (None, None) => {
                bail!("which keyring? pass --keyring FILE or --cluster DIR (or set OPTIO_CLUSTER)")
            }
        }
    }
}

/// `optio auth add`.
#[derive(clap::Args, Debug)]
pub struct AddArgs {
    /// client.NAME or server.NAME.
    pub entity: String,
    /// What it may do: read (get, probe, list, status), write (read + put, delete), gateway
    /// (write + the S3 gateway's own state: users, secrets, buckets, uploads — for `optio s3`),
    /// admin (everything), server (a server's own traffic).
    #[arg(long, value_parser = ["read", "write", "gateway", "admin", "server"])]
    pub caps: String,
    /// Where to write its key file (default: ENTITY.keyring in the current directory).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub target: Target,
}

/// `optio auth ls`.
#[derive(clap::Args, Debug)]
pub struct LsArgs {
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub target: Target,
}

/// One entity.
#[derive(clap::Args, Debug)]
pub struct EntityArgs {
    /// client.NAME or server.NAME.
    pub entity: String,
    #[command(flatten)]
    pub target: Target,
}

/// `optio auth rotate`.
#[derive(clap::Args, Debug)]
pub struct RotateArgs {
    /// client.NAME or server.NAME.
    pub entity: String,
    /// How long the old key stays valid (e.g. 1h, 10m; 0: not at all).
    #[arg(long, default_value = "1h", value_parser = crate::output::parse_duration)]
    pub grace: std::time::Duration,
    /// Where to write its new key file (default: ENTITY.keyring in the current directory).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub target: Target,
}

/// Runs `optio auth …`.
pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Init(target) => init(&target.path()?),
        Command::Add(args) => add(args),
        Command::Ls(args) => ls(args),
        Command::Rm(args) => rm(args),
        Command::Rotate(args) => rotate(args),
    }
}

/// Creates the keyring at `path` with client.admin, unless one exists.
pub fn init(path: &Path) -> Result<()> {
    if path.exists() {
        bail!("{} exists already: `optio auth ls` shows what it holds", path.display());
    }
    let mut keyring = Keyring::new();
    keyring.insert(Entity {
        name: auth::ADMIN.to_string(),
        key: Key::generate()?,
        cap: Cap::Admin,
        previous: None,
    });
    keyring.save(path)?;
    println!("created {} (mode 0600) with {} (admin)", path.display(), auth::ADMIN);
    Ok(())
}

fn load(path: &Path) -> Result<Keyring> {
    Keyring::load(path).with_context(|| {
        format!("create the keyring with `optio auth init --keyring {}`", path.display())
    })
}

fn key_file_path(output: &Option<PathBuf>, entity: &str) -> PathBuf {
    output.clone().unwrap_or_else(|| PathBuf::from(format!("{entity}.keyring")))
}

/// Writes a key file holding `entity` alone.
fn write_key_file(path: &Path, entity: &Entity) -> Result<()> {
    let mut single = Keyring::new();
    single.insert(Entity { previous: None, ..entity.clone() });
    single.save(path)?;
    Ok(())
}

fn add(args: AddArgs) -> Result<()> {
    auth::validate_name(&args.entity)?;
    let path = args.target.path()?;
    let mut keyring = load(&path)?;
    if keyring.get(&args.entity).is_some() {
        bail!(
            "{} exists already in {}: `optio auth rotate` gives it a new key",
            args.entity,
            path.display()
        );
    }
    let cap = Cap::parse(&args.caps)?;
    let entity = Entity { name: args.entity.clone(), key: Key::generate()?, cap, previous: None };
    let file = key_file_path(&args.output, &args.entity);
    write_key_file(&file, &entity)?;
    keyring.insert(entity.clone());
    keyring.save(&path)?;
    println!("added {} ({cap}) to {}", args.entity, path.display());
    println!(
        "key file: {} (mode 0600; use it with --id {} --keyring {})",
        file.display(),
        args.entity,
        file.display()
    );
    println!("key (shown once): {}", entity.key.to_base64());
    wait_for_servers(&args.target, &path)
}

fn ls(args: LsArgs) -> Result<()> {
    let path = args.target.path()?;
    let keyring = load(&path)?;
    let now = now_secs();
    if args.json {
        let entities: Vec<serde_json::Value> = keyring
            .entities()
            .map(|e| {
                serde_json::json!({
                    "entity": e.name,
                    "caps": e.cap.name(),
                    "previous_key_until": e.previous.as_ref().map(|(_, until)| *until).filter(|u| *u > now),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&entities)?);
        return Ok(());
    }
    let mut table = Table::new(&["entity", "caps", "old key valid"]).left(&[0, 1, 2]);
    for e in keyring.entities() {
        let old = match &e.previous {
            Some((_, until)) if *until > now => format!("{} s more", *until - now),
            _ => "-".to_string(),
        };
        table.row(vec![e.name.clone(), e.cap.name().to_string(), old]);
    }
    print!("{}", table.render());
    Ok(())
}

fn rm(args: EntityArgs) -> Result<()> {
    let path = args.target.path()?;
    let mut keyring = load(&path)?;
    if !keyring.remove(&args.entity) {
        bail!("{} has no entity {}", path.display(), args.entity);
    }
    if !keyring.entities().any(|e| e.cap == Cap::Admin) {
        bail!("{} is the last admin: add another admin first", args.entity);
    }
    keyring.save(&path)?;
    println!("removed {} from {}", args.entity, path.display());
    wait_for_servers(&args.target, &path)
}

/// Waits until every server of the cluster's map that answers `/health` holds the keyring
/// now at `path` (its hash), for at most [`SERVERS_WAIT_MAX`]: when the command returns, its
/// change holds. Without a map (a keyring copied to servers by hand) it says so instead.
fn wait_for_servers(target: &Target, path: &Path) -> Result<()> {
    let source = match (&target.map, &target.cluster) {
        (Some(spec), _) => optio_cluster::MapSource::parse(spec)?,
        (None, Some(dir)) => optio_cluster::dir::cluster_source(dir)?,
        (None, None) => {
            println!(
                "(no --cluster or --map: copy the keyring to every server; each loads it within 1 s of the change)"
            );
            return Ok(());
        }
    };
    let map = crate::rt::runtime()?
        .block_on(source.load())
        .context("cannot read the map to tell which servers must hold the change")?;
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let digest = blake3::hash(&bytes).to_hex()[..16].to_string();
    let mut addrs: Vec<String> =
        map.devices().iter().filter(|d| d.up).filter_map(|d| d.addr.clone()).collect();
    addrs.sort();
    addrs.dedup();
    let deadline = std::time::Instant::now() + SERVERS_WAIT_MAX;
    let mut waiting = addrs;
    loop {
        // A server that does not answer loads the keyring when it starts; one with
        // authentication off (an empty digest) checks no key.
        waiting.retain(|addr| {
            optio_local::cluster::health(addr)
                .and_then(|h| h.keyring)
                .is_some_and(|held| !held.is_empty() && held != digest)
        });
        if waiting.is_empty() {
            println!("every server holds the change");
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "{} is written, but the servers at {} do not hold it after {SERVERS_WAIT_MAX:?}: \
                 check that they read this keyring file (their --keyring) and their logs",
                path.display(),
                waiting.join(", ")
            );
        }
        std::thread::sleep(SERVERS_POLL_INTERVAL);
    }
}

fn rotate(args: RotateArgs) -> Result<()> {
    let path = args.target.path()?;
    let mut keyring = load(&path)?;
    let Some(old) = keyring.get(&args.entity).cloned() else {
        bail!("{} has no entity {}", path.display(), args.entity);
    };
    let until = now_secs() + args.grace.as_secs();
    let previous = (!args.grace.is_zero()).then(|| (old.key.clone(), until));
    let entity = Entity { key: Key::generate()?, previous, ..old };
    let file = key_file_path(&args.output, &args.entity);
    write_key_file(&file, &entity)?;
    keyring.insert(entity.clone());
    keyring.save(&path)?;
    println!("rotated {}: new key in {} (mode 0600)", args.entity, file.display());
    wait_for_servers(&args.target, &path)?;
    if args.grace.is_zero() {
        println!("the old key is refused from now on");
    } else {
        println!("the old key stays valid for {:?}", args.grace);
    }
    if args.entity.starts_with("server.") {
        println!("restart that server within the grace: it signs with the key it read at start");
    }
    println!("key (shown once): {}", entity.key.to_base64());
    Ok(())
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
