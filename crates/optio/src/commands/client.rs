//! The client commands: `optio put`, `get`, `rm`, `ls`, `stat`, `probe`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use optio_client::{Client, ClientConfig, ReplicaState};

use crate::output::{self, Table};

/// How client commands find and use the cluster (every flag but the pool: commands that do
/// not work in one pool, such as the volume commands, take this alone).
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterConn {
    /// The cluster directory `optio up` printed.
    #[arg(long, env = "OPTIO_CLUSTER", value_name = "DIR", global = true)]
    pub cluster: Option<PathBuf>,
    /// The dirty table of elastic pools: `local` (the log under the cluster directory) or
    /// redis://HOST:PORT (default: the cluster's, as `optio up` set it).
    #[arg(long, env = "OPTIO_DIRTY", global = true, value_name = "SPEC")]
    pub dirty: Option<String>,
    #[command(flatten)]
    pub identity: crate::commands::identity::Identity,
}

/// How client commands find and use the cluster, and the pool they work in.
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub conn: ClusterConn,
    /// Pool.
    #[arg(long, default_value = "data", global = true)]
    pub pool: String,
}

impl ClusterArgs {
    /// The client configuration.
    pub fn config(&self) -> Result<ClientConfig> {
        self.conn.config()
    }

    /// A connected client.
    pub async fn connect(&self) -> Result<Client> {
        self.conn.connect().await
    }

    /// A client with this configuration.
    pub async fn connect_with(&self, config: ClientConfig) -> Result<Client> {
        self.conn.connect_with(config).await
    }
}

impl ClusterConn {
    /// The cluster directory.
    pub fn dir(&self) -> Result<PathBuf> {
        match &self.cluster {
            Some(dir) => Ok(dir.clone()),
            None => bail!(
                "which cluster? pass --cluster DIR or set OPTIO_CLUSTER (start one with `optio up --dir DIR`)"
            ),
        }
    }

    /// The cluster's dirty table.
    pub async fn dirty_table(&self) -> Result<optio_cluster::dirty::DirtyTable> {
        let dir = self.dir()?;
        let spec = match &self.dirty {
            Some(spec) => Some(spec.clone()),
            None => optio_cluster::dir::cluster_dirty_spec(&dir)?,
        };
        optio_cluster::dirty::DirtyTable::open(spec.as_deref().filter(|s| *s != "local"), &dir)
            .await
            .context("cannot open the dirty table")
    }

    /// The client configuration.
    pub fn config(&self) -> Result<ClientConfig> {
        let dir = self.dir()?;
        Ok(ClientConfig {
            intent_dir: Some(dir.join("intents")),
            crash_after_choice_record: std::env::var_os("OPTIO_TEST_CRASH_AFTER_CHOICE_RECORD")
                .is_some(),
            credentials: self.identity.credentials(Some(&dir))?,
            tls_ca: self.identity.tls_ca(Some(&dir)),
            tls_identity: self.identity.tls_identity(),
            ..ClientConfig::default()
        })
    }

    /// A connected client.
    pub async fn connect(&self) -> Result<Client> {
        self.connect_with(self.config()?).await
    }

    /// A client with this configuration.
    pub async fn connect_with(&self, mut config: ClientConfig) -> Result<Client> {
        let dir = self.dir()?;
        if config.dirty.is_none() {
            config.dirty = Some(std::sync::Arc::new(self.dirty_table().await?));
        }
        let source = optio_cluster::dir::cluster_source(&dir)?;
        if let optio_cluster::source::MapSource::File(file) = &source
            && !file.path().exists()
        {
            bail!(
                "no cluster map at {}; start a cluster with `optio up --dir {}`",
                file.path().display(),
                dir.display()
            );
        }
        Client::connect_source(source, config).await.context("cannot connect to the cluster")
    }
}

/// `optio put KEY [FILE]`.
#[derive(clap::Args, Debug)]
pub struct PutArgs {
    /// Object key.
    pub key: String,
    /// File to store (`-` or none: standard input).
    pub file: Option<PathBuf>,
    /// Placement policy for a new object (default: the pool's; k is always the pool's).
    #[arg(long)]
    pub policy: Option<String>,
    /// Replicas that must be durable before the write is acknowledged (default: all; at
    /// least the pool's min_size).
    #[arg(long, value_name = "W")]
    pub write_quorum: Option<usize>,
    /// Print what was stored as JSON (on standard output).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `optio get KEY`.
#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// Object key.
    pub key: String,
    /// Write to this file instead of standard output.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Only bytes START-END (inclusive).
    #[arg(long, value_name = "START-END")]
    pub range: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `optio rm KEY`, `optio probe KEY`.
#[derive(clap::Args, Debug)]
pub struct KeyArgs {
    /// Object key.
    pub key: String,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `optio stat KEY`.
#[derive(clap::Args, Debug)]
pub struct StatArgs {
    /// Object key.
    pub key: String,
    /// Read every replica and repair those damaged, missing or stale.
    #[arg(long)]
    pub verify: bool,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `optio ls [PREFIX]`.
#[derive(clap::Args, Debug)]
pub struct LsArgs {
    /// Key prefix.
    #[arg(default_value = "")]
    pub prefix: String,
    /// JSON for scripts.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

fn read_input(file: Option<&Path>) -> Result<Vec<u8>> {
    match file {
        None => read_stdin(),
        Some(path) if path == Path::new("-") => read_stdin(),
        Some(path) => {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
        }
    }
}

fn read_stdin() -> Result<Vec<u8>> {
    let mut data = Vec::new();
    std::io::stdin().read_to_end(&mut data).context("cannot read standard input")?;
    Ok(data)
}

pub fn put(args: PutArgs) -> Result<()> {
    crate::commands::init_logging("warn");
    let data = read_input(args.file.as_deref())?;
    crate::commands::runtime()?.block_on(async {
        let config = ClientConfig {
            policy: args.policy.clone(),
            write_quorum: args.write_quorum,
            ..args.cluster.config()?
        };
        let client = args.cluster.connect_with(config).await?;
        let size = data.len();
        let report = client.put(&args.cluster.pool, &args.key, data.into()).await?;
        if args.json {
            let devices = &report.devices;
            println!(
                "{}",
                serde_json::json!({
                    "key": args.key, "pool": args.cluster.pool, "size": size,
                    "candidate": report.candidate, "devices": devices,
                    "version": report.version.0, "probes": report.probes,
                })
            );
            return Ok(());
        }
        eprintln!(
            "stored '{}' ({}) on candidate {} → devices {:?}, version {}, {} probe(s)",
            args.key,
            output::bytes(size as f64),
            report.candidate,
            report.devices,
            report.version.0,
            report.probes
        );
        Ok(())
    })
}

fn parse_range(text: &str) -> Result<(u64, u64)> {
    let (a, b) =
        text.split_once('-').with_context(|| format!("range '{text}' is not START-END"))?;
    let start = a.trim().parse().with_context(|| format!("range start '{a}' is not a number"))?;
    let end = b.trim().parse().with_context(|| format!("range end '{b}' is not a number"))?;
    if end < start {
        bail!("range '{text}' ends before it starts");
    }
    Ok((start, end))
}

pub fn get(args: GetArgs) -> Result<()> {
    crate::commands::init_logging("warn");
    let range = args.range.as_deref().map(parse_range).transpose()?;
    crate::commands::runtime()?.block_on(async {
        let client = args.cluster.connect().await?;
        // Written out in the pieces it arrived in (a large object is not gathered first).
        let (_, data) = client.get_chunks(&args.cluster.pool, &args.key, range).await?;
        let write = |out: &mut dyn Write| -> std::io::Result<()> {
            for chunk in data.chunks() {
                out.write_all(chunk)?;
            }
            out.flush()
        };
        match &args.output {
            Some(path) => std::fs::File::create(path)
                .and_then(|mut file| write(&mut file))
                .with_context(|| format!("cannot write {}", path.display()))?,
            None => write(&mut std::io::stdout().lock()).context("cannot write standard output")?,
        }
        let stats = client.stats();
        if stats.repairs > 0 {
            eprintln!("repaired {} replica(s) of '{}'", stats.repairs, args.key);
        }
        Ok(())
    })
}

pub fn rm(args: KeyArgs) -> Result<()> {
    crate::commands::init_logging("warn");
    crate::commands::runtime()?.block_on(async {
        let client = args.cluster.connect().await?;
        client.delete(&args.cluster.pool, &args.key).await?;
        if args.json {
            let removed =
                serde_json::json!({"key": args.key, "pool": args.cluster.pool, "removed": true});
            println!("{removed}");
            return Ok(());
        }
        eprintln!("removed '{}'", args.key);
        Ok(())
    })
}

pub fn ls(args: LsArgs) -> Result<()> {
    crate::commands::init_logging("warn");
    crate::commands::runtime()?.block_on(async {
        let client = args.cluster.connect().await?;
        let objects = client.list(&args.cluster.pool, &args.prefix).await?;
        // An erasure-coded object's crc32c is its data's, known only once decoded (a
        // listing reads each object's size from a chunk's header, not the object).
        let erasure =
            client.map().pool_by_name(&args.cluster.pool).is_some_and(|p| p.erasure.is_some());
        let crc = |checksum: u32| (!erasure).then(|| format!("{checksum:08x}"));
        if args.json {
            let list: Vec<serde_json::Value> = objects
                .iter()
                .map(|o| {
                    serde_json::json!({
                        "key": o.key, "size": o.size_bytes, "version": o.version.0,
                        "crc32c": crc(o.checksum),
                    })
                })
                .collect();
            let listing = serde_json::json!({"pool": args.cluster.pool, "objects": list});
            println!("{}", serde_json::to_string_pretty(&listing)?);
            return Ok(());
        }
        let mut table = Table::new(&["key", "size", "version", "crc32c"]).left(&[0]);
        for object in &objects {
            table.row(vec![
                object.key.clone(),
                object.size_bytes.to_string(),
                object.version.0.to_string(),
                crc(object.checksum).unwrap_or_else(|| "-".into()),
            ]);
        }
        print!("{}", table.render());
        eprintln!("{} object(s) in pool '{}'", objects.len(), args.cluster.pool);
        Ok(())
    })
}

pub fn stat(args: StatArgs) -> Result<()> {
    crate::commands::init_logging("warn");
    crate::commands::runtime()?.block_on(async {
        let client = args.cluster.connect().await?;
        let location = client.stat(&args.cluster.pool, &args.key).await?;
        let c = &location.candidate;
        let candidates = client.candidates(&args.cluster.pool, &args.key)?.len();
        let replicas = match args.verify {
            true => client.verify(&args.cluster.pool, &args.key).await?,
            false => Vec::new(),
        };
        let state_text = |state: &ReplicaState| match state {
            ReplicaState::Good => ("intact", String::new()),
            ReplicaState::Repaired(why) => ("repaired", why.to_string()),
            ReplicaState::Failed(why) => ("failed", why.to_string()),
        };
        if args.json {
            let replicas: Vec<serde_json::Value> = replicas
                .iter()
                .map(|(device, state)| {
                    let (state, reason) = state_text(state);
                    serde_json::json!({"device": device, "state": state, "reason": reason})
                })
                .collect();
            let stat = serde_json::json!({
                "key": args.key, "pool": args.cluster.pool, "size": location.info.size_bytes,
                "version": location.info.version.0, "crc32c": format!("{:08x}", location.info.checksum),
                "candidate": c.index, "candidates": candidates, "pg": c.pg.map(|pg| pg.to_string()),
                "devices": c.devices.iter().map(|d| d.0).collect::<Vec<_>>(),
                "replicas": if args.verify { Some(replicas) } else { None },
            });
            println!("{}", serde_json::to_string_pretty(&stat)?);
            return Ok(());
        }
        println!("key:       {}", args.key);
        println!("pool:      {}", args.cluster.pool);
        println!(
            "size:      {} ({} bytes)",
            output::bytes(location.info.size_bytes as f64),
            location.info.size_bytes
        );
        println!("version:   {}", location.info.version.0);
        println!("crc32c:    {:08x}", location.info.checksum);
        println!("candidate: {} of {candidates}", c.index);
        if let Some(pg) = c.pg {
            println!("pg:        {pg}");
        }
        println!(
            "devices:   {:?} (primary first)",
            c.devices.iter().map(|d| d.0).collect::<Vec<_>>()
        );
        for (device, state) in &replicas {
            let text = match state {
                ReplicaState::Good => "intact".to_string(),
                ReplicaState::Repaired(why) => format!("repaired ({why})"),
                ReplicaState::Failed(why) => format!("FAILED ({why})"),
            };
            println!("replica on device {device}: {text}");
        }
        Ok(())
    })
}

pub fn probe(args: KeyArgs) -> Result<()> {
    crate::commands::init_logging("warn");
    crate::commands::runtime()?.block_on(async {
        let client = args.cluster.connect().await?;
        let report = client.probe(&args.cluster.pool, &args.key).await?;
        if args.json {
            let candidates: Vec<serde_json::Value> = report
                .candidates
                .iter()
                .map(|p| {
                    let c = &p.candidate;
                    serde_json::json!({
                        "candidate": c.index, "pg": c.pg.map(|pg| pg.to_string()),
                        "devices": c.devices.iter().map(|d| d.0).collect::<Vec<_>>(),
                        "primary": c.primary().map(|d| d.0),
                        "holds": p.info.as_ref().map(|i| serde_json::json!({"size": i.size_bytes, "version": i.version.0})),
                        "error": p.error.as_ref().map(|e| e.to_string()),
                        "metrics": p.metrics.as_ref().map(|m| serde_json::json!({
                            "cpu_permille": m.cpu_permille, "memory_permille": m.memory_permille,
                            "space_permille": m.space_permille, "latency_us": m.latency_us,
                            "unflushed_bytes": m.unflushed_bytes, "location": m.location,
                        })),
                    })
                })
                .collect();
            let record = report.record.as_ref().map(|r| {
                serde_json::json!({"candidate": r.candidate, "choices": r.choices, "writer": format!("{:016x}", r.writer)})
            });
            let answer = serde_json::json!({
                "key": args.key, "pool": args.cluster.pool, "candidates": candidates,
                "record": record, "holder": report.holder,
            });
            println!("{}", serde_json::to_string_pretty(&answer)?);
            return Ok(());
        }
        let mut table = Table::new(&[
            "cand",
            "pg",
            "devices",
            "primary",
            "holds",
            "cpu‰",
            "mem‰",
            "space‰",
            "lat µs",
            "unflushed",
            "location",
        ])
        .left(&[1, 2, 3, 4, 10]);
        // Candidates whose primary is one device get one answer from it: it cannot tell them
        // apart, so their "yes" is marked.
        let shared: Vec<bool> = report
            .candidates
            .iter()
            .map(|p| {
                let primary = p.candidate.primary();
                report.candidates.iter().filter(|q| q.candidate.primary() == primary).count() > 1
            })
            .collect();
        for (probe, &shared) in report.candidates.iter().zip(&shared) {
            let c = &probe.candidate;
            let primary = c.primary().map(|d| d.0.to_string()).unwrap_or_default();
            let holds = match (&probe.info, &probe.error) {
                (_, Some(error)) => format!("? ({error})"),
                (Some(info), None) => format!(
                    "yes{}, {} B v{}",
                    if shared { "*" } else { "" },
                    info.size_bytes,
                    info.version.0
                ),
                (None, None) => "no".into(),
            };
            let m = probe.metrics.clone().unwrap_or_default();
            let known = probe.metrics.is_some();
            let cell = |v: u64| if known { v.to_string() } else { "-".into() };
            table.row(vec![
                c.index.to_string(),
                c.pg.map(|pg| pg.to_string()).unwrap_or_else(|| "-".into()),
                format!("{:?}", c.devices.iter().map(|d| d.0).collect::<Vec<_>>()),
                primary,
                holds,
                cell(u64::from(m.cpu_permille)),
                cell(u64::from(m.memory_permille)),
                cell(u64::from(m.space_permille)),
                cell(m.latency_us),
                cell(m.unflushed_bytes),
                m.location,
            ]);
        }
        print!("{}", table.render());
        if shared.iter().zip(&report.candidates).any(|(s, p)| *s && p.info.is_some()) {
            println!(
                "* these candidates share their primary device, whose answer cannot tell them apart: the object is on one of them"
            );
        }
        match (report.record, report.holder) {
            (Some(record), _) => println!(
                "choice record at the home: candidate {} (of {}), writer {:016x}",
                record.candidate, record.choices, record.writer
            ),
            (None, Some(holder)) => {
                println!("no choice record; candidate {holder} holds the object")
            }
            (None, None) => println!("no candidate holds '{}'", args.key),
        }
        Ok(())
    })
}
