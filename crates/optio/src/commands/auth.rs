//! `optio auth`: the cluster keyring — init, add, ls, rm, rotate, and the client
//! certificates it records (cert) (docs/security.md).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use optio_local::tls::{Ca, inspect, now_unix};
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
    /// downtime), and the new key file is written. Its client certificates are revoked with
    /// the old key, and a new one is issued beside the key file when the CA is at hand.
    Rotate(RotateArgs),
    /// Issue a client certificate for an entity (mutual TLS: its common name is the entity)
    /// from the cluster's CA and record it in the keyring, or record one your own CA issued
    /// (--from): servers take a certificate only if the keyring records it.
    Cert(CertArgs),
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
    /// Also issue it a client certificate (ENTITY.pem and ENTITY-key.pem beside the key file)
    /// from the CA in --tls-dir, recorded in the keyring.
    #[arg(long)]
    pub cert: bool,
    #[command(flatten)]
    pub ca: CaDir,
    #[command(flatten)]
    pub target: Target,
}

/// Where the certificate authority is.
#[derive(clap::Args, Debug)]
pub struct CaDir {
    /// The directory of the CA that issues client certificates (ca.pem, ca-key.pem; default:
    /// `tls/` beside the keyring, what `optio up --tls` makes).
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<PathBuf>,
}

impl CaDir {
    fn path(&self, keyring: &Path) -> PathBuf {
        self.tls_dir.clone().unwrap_or_else(|| {
            keyring.parent().unwrap_or(Path::new(".")).join(optio_local::cluster::TLS_DIR)
        })
    }
}

/// `optio auth cert`.
#[derive(clap::Args, Debug)]
pub struct CertArgs {
    /// client.NAME.
    pub entity: String,
    /// Record this certificate (PEM; its common name must be the entity) instead of issuing
    /// one.
    #[arg(long, value_name = "CERT")]
    pub from: Option<PathBuf>,
    /// Where to write the certificate and its key (ENTITY.pem, ENTITY-key.pem; default: the
    /// current directory).
    #[arg(short, long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub ca: CaDir,
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
    pub ca: CaDir,
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
        Command::Cert(args) => cert(args),
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
    optio_cluster::keyring::save(&keyring, path)?;
    println!("created {} (mode 0600) with {} (admin)", path.display(), auth::ADMIN);
    Ok(())
}

fn load(path: &Path) -> Result<Keyring> {
    optio_cluster::keyring::load(path).with_context(|| {
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
    optio_cluster::keyring::save(&single, path)?;
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
    keyring.insert(entity.clone());
    let issued = if args.cert {
        let ca = open_ca(&args.ca.path(&path))?;
        Some(issue_certificate(&mut keyring, &ca, &args.entity, beside(&file))?)
    } else {
        None
    };
    write_key_file(&file, &entity)?;
    optio_cluster::keyring::save(&keyring, &path)?;
    println!("added {} ({cap}) to {}", args.entity, path.display());
    if let Some(issued) = &issued {
        print_issued(&args.entity, issued);
    }
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
                let certs = keyring.certificates(&e.name);
                let previous = certs.previous.as_ref().filter(|(_, until)| *until > now);
                serde_json::json!({
                    "entity": e.name,
                    "caps": e.cap.name(),
                    "previous_key_until": e.previous.as_ref().map(|(_, until)| *until).filter(|u| *u > now),
                    "certificates": certs.current.iter().map(|f| f.to_hex()).collect::<Vec<_>>(),
                    "previous_certificates": previous.map(|(old, _)| old.iter().map(|f| f.to_hex()).collect::<Vec<_>>()),
                    "previous_certificates_until": previous.map(|(_, until)| *until),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&entities)?);
        return Ok(());
    }
    let mut table =
        Table::new(&["entity", "caps", "old key valid", "certificates"]).left(&[0, 1, 2, 3]);
    for e in keyring.entities() {
        let old = match &e.previous {
            Some((_, until)) if *until > now => format!("{} s more", *until - now),
            _ => "-".to_string(),
        };
        let certs = keyring.certificates(&e.name);
        let mut shown = certs.current.len().to_string();
        if let Some((previous, until)) = &certs.previous
            && *until > now
        {
            shown.push_str(&format!(" (+{} old, {} s more)", previous.len(), *until - now));
        }
        table.row(vec![e.name.clone(), e.cap.name().to_string(), old, shown]);
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
    optio_cluster::keyring::save(&keyring, &path)?;
    println!("removed {} (its key and client certificates) from {}", args.entity, path.display());
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
    keyring.insert(entity.clone());
    // Its certificates go with its old key: at once, or at the end of the grace.
    let certificates = keyring.certificates(&args.entity);
    let had_certificates = !certificates.current.is_empty()
        || certificates.previous.as_ref().is_some_and(|(_, until)| *until > now_secs());
    keyring.revoke_certificates(&args.entity, (!args.grace.is_zero()).then_some(until));
    let tls_dir = args.ca.path(&path);
    let issued = match had_certificates.then(|| open_ca(&tls_dir)) {
        Some(Ok(ca)) => Some(issue_certificate(&mut keyring, &ca, &args.entity, beside(&file))?),
        Some(Err(error)) => {
            eprintln!(
                "warning: no new certificate for {}: {error:#}; issue one with `optio auth cert {}`",
                args.entity, args.entity
            );
            None
        }
        None => None,
    };
    write_key_file(&file, &entity)?;
    optio_cluster::keyring::save(&keyring, &path)?;
    println!("rotated {}: new key in {} (mode 0600)", args.entity, file.display());
    if args.grace.is_zero() {
        println!("the old key is refused once every server holds the change (below)");
    } else {
        println!("the old key stays valid for {:?}", args.grace);
    }
    if had_certificates {
        if args.grace.is_zero() {
            println!("its client certificates are revoked with it");
        } else {
            println!("its client certificates stay valid for {:?}, then are revoked", args.grace);
        }
    }
    if let Some(issued) = &issued {
        print_issued(&args.entity, issued);
    }
    if args.entity.starts_with("server.") {
        println!("restart that server within the grace: it signs with the key it read at start");
    }
    println!("key (shown once): {}", entity.key.to_base64());
    wait_for_servers(&args.target, &path)
}

fn cert(args: CertArgs) -> Result<()> {
    auth::validate_name(&args.entity)?;
    let path = args.target.path()?;
    let mut keyring = load(&path)?;
    if keyring.get(&args.entity).is_none() {
        bail!("{} has no entity {}: add it with `optio auth add`", path.display(), args.entity);
    }
    match &args.from {
        Some(file) => {
            let info = inspect(file)?;
            if info.common_name.as_deref() != Some(args.entity.as_str()) {
                bail!(
                    "the common name of {} is {:?}, not {}: a server takes a client certificate \
                     as the entity its common name names",
                    file.display(),
                    info.common_name.unwrap_or_default(),
                    args.entity
                );
            }
            if info.not_after_unix <= i64::try_from(now_unix()).unwrap_or(i64::MAX) {
                bail!("{} has expired: issue a new one", file.display());
            }
            keyring.record_certificate(&args.entity, info.fingerprint)?;
            optio_cluster::keyring::save(&keyring, &path)?;
            println!(
                "recorded the certificate {} of {} (SHA-256 {}) in {}",
                file.display(),
                args.entity,
                info.fingerprint,
                path.display()
            );
        }
        None => {
            let ca = open_ca(&args.ca.path(&path))?;
            let dir = args.output.clone().unwrap_or_default();
            let issued = issue_certificate(&mut keyring, &ca, &args.entity, &dir)?;
            optio_cluster::keyring::save(&keyring, &path)?;
            print_issued(&args.entity, &issued);
        }
    }
    wait_for_servers(&args.target, &path)
}

fn open_ca(dir: &Path) -> Result<Ca> {
    Ca::open(dir).context(
        "cannot issue a client certificate (pass --tls-dir DIR, or record one your CA issued \
         with `optio auth cert ENTITY --from CERT.pem`)",
    )
}

/// The directory of a key file (where its entity's certificate goes; empty: the current
/// directory).
fn beside(key_file: &Path) -> &Path {
    key_file.parent().unwrap_or(Path::new(""))
}

/// Issues a client certificate for `entity` into `dir` (`ENTITY.pem`, `ENTITY-key.pem`) and
/// records it in `keyring` (the caller saves it).
fn issue_certificate(
    keyring: &mut Keyring,
    ca: &Ca,
    entity: &str,
    dir: &Path,
) -> Result<optio_local::tls::Issued> {
    let issued = ca.issue_client(dir, entity, entity)?;
    keyring.record_certificate(entity, issued.fingerprint)?;
    Ok(issued)
}

fn print_issued(entity: &str, issued: &optio_local::tls::Issued) {
    println!(
        "client certificate of {entity}: {} (key {}, mode 0600), valid {} days, SHA-256 {}; \
         recorded in the keyring (servers take it within 1 s); use it with --tls-cert {} \
         --tls-key {}",
        issued.cert.display(),
        issued.key.display(),
        optio_local::tls::LEAF_VALIDITY.as_secs() / 86_400,
        issued.fingerprint,
        issued.cert.display(),
        issued.key.display()
    );
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
