//! The test rig of `optio bench io`: an emulated cluster ([`optio_local::emulate`]) with an
//! `optio up`-style cluster placed on it, volumes, `optio nbd` in client hosts' namespaces,
//! and fio beside it — with the machine's CPU utilisation and the bytes that crossed the
//! emulated links measured around every run.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use optio_local::cluster::{LocalCluster, LocalClusterSpec};
use optio_local::emulate::{EmulatedHost, Emulation, EmulationSpec};
use optio_local::redis::RedisServer;
use serde::Serialize;

use super::cpu::{Meter, Utilisation};
use super::fio::{self, Job, Outcome};

/// How long `optio nbd` may take to stop after SIGTERM (it flushes and releases its locks).
const NBD_STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// Pause between two looks at a stopping process (a bounded wait).
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How often [`Rig::watch_servers`] asks the servers for their metrics.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// A server's metrics as the CHOICE policies read them, averaged over a watch.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct HostMetrics {
    /// Samples taken.
    pub samples: u32,
    /// The server's CPU utilisation (against its cgroup's quota when it has one), per mille.
    pub cpu_permille_mean: f64,
    /// Its memory utilisation (against its cgroup's limit when it has one), per mille.
    pub memory_permille_mean: f64,
}

/// A running [`Rig::watch_servers`].
pub struct Watch {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<BTreeMap<String, HostMetrics>>,
}

impl Watch {
    /// Stops sampling; each server's (by host name) mean metrics.
    pub fn stop(self) -> BTreeMap<String, HostMetrics> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// An emulated cluster with servers on it. Dropping it stops the servers, then removes the
/// emulation.
pub struct Rig {
    cluster: Option<LocalCluster>,
    /// The dirty table's Redis, in the router's namespace (see [`Rig::start_with_redis`]).
    redis: Option<RedisServer>,
    emulation: Emulation,
    /// The cluster directory.
    pub dir: PathBuf,
    binary: PathBuf,
    runs: std::sync::atomic::AtomicU32,
}

/// Bytes that crossed the emulated links during a run.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Traffic {
    /// Over the racks' links to the router (both directions).
    pub cross_rack_bytes: u64,
    /// Over the hosts' links to their racks' switches (both directions).
    pub host_link_bytes: u64,
}

/// One fio run: what fio saw, the machine's CPU meanwhile, the links' bytes.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// fio's results.
    pub fio: Outcome,
    /// The machine's CPU utilisation during the run.
    pub cpu: Utilisation,
    /// Link bytes.
    pub traffic: Traffic,
    /// Wall time, seconds.
    pub wall_seconds: f64,
}

/// fio on several clients at once.
#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    /// Each client's fio results.
    pub outcomes: Vec<Outcome>,
    /// The machine's CPU utilisation during the phase.
    pub cpu: Utilisation,
    /// Link bytes.
    pub traffic: Traffic,
    /// Wall time, seconds.
    pub wall_seconds: f64,
}

impl Phase {
    /// Reads (or writes) summed over the clients: total MB/s, and the I/O-weighted mean
    /// latency; the median latency is the median of the clients' medians.
    pub fn total(&self, read: bool) -> fio::Side {
        let sides: Vec<&fio::Side> =
            self.outcomes.iter().map(|o| if read { &o.read } else { &o.write }).collect();
        let ios: u64 = sides.iter().map(|s| s.ios).sum();
        let weighted = |f: fn(&fio::Side) -> f64| {
            if ios == 0 {
                0.0
            } else {
                sides.iter().map(|s| f(s) * s.ios as f64).sum::<f64>() / ios as f64
            }
        };
        fio::Side {
            io_bytes: sides.iter().map(|s| s.io_bytes).sum(),
            ios,
            mb_per_s: sides.iter().map(|s| s.mb_per_s).sum(),
            latency_ms_mean: weighted(|s| s.latency_ms_mean),
            latency_ms_p50: super::stats::median(
                &sides.iter().map(|s| s.latency_ms_p50).collect::<Vec<_>>(),
            ),
            latency_ms_p99: sides.iter().map(|s| s.latency_ms_p99).fold(0.0, f64::max),
        }
    }
}

/// How `optio nbd` serves.
#[derive(Clone, Debug, Default)]
pub struct NbdOptions {
    /// The policy for new data objects (`None`: the pool's).
    pub policy: Option<String>,
    /// Tell it where it runs (the `local` policy needs it).
    pub location: bool,
    /// Local reads from its own host's server (only for a client on a server host).
    pub local_reads: bool,
}

/// A running `optio nbd`. Dropping it stops it.
pub struct Nbd {
    child: Option<Child>,
    /// Its Unix socket.
    pub socket: PathBuf,
    log: PathBuf,
}

impl Nbd {
    /// Stops it (SIGTERM: it flushes and releases its locks) and returns (object reads, local
    /// object reads) from its log.
    pub fn stop(&mut self) -> (u64, u64) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let deadline = Instant::now() + NBD_STOP_TIMEOUT;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(POLL_INTERVAL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let field = |line: &str, name: &str| -> u64 {
            line.split(&format!("{name}="))
                .nth(1)
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        log.lines().filter(|l| l.contains("closing")).fold((0, 0), |(reads, local), line| {
            (reads + field(line, "object_reads"), local + field(line, "local_reads"))
        })
    }
}

impl Drop for Nbd {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Rig {
    /// Builds the emulation of `spec` in `dir`, moves this thread into its router's namespace,
    /// and starts a server per host with `pools_toml`'s pools (`adjust` may change the rest).
    pub fn start(
        spec: &EmulationSpec,
        pools_toml: &str,
        dir: &Path,
        adjust: impl FnOnce(&mut LocalClusterSpec),
    ) -> Result<Rig> {
        Rig::start_inner(spec, pools_toml, dir, false, adjust)
    }

    /// [`start`](Self::start), with the elastic pools' dirty table in a Redis
    /// (`redis-server`) that runs in the router's namespace on the router's address of rack
    /// 1: every client host reaches it over its links, and it stops with the rig.
    pub fn start_with_redis(
        spec: &EmulationSpec,
        pools_toml: &str,
        dir: &Path,
        adjust: impl FnOnce(&mut LocalClusterSpec),
    ) -> Result<Rig> {
        Rig::start_inner(spec, pools_toml, dir, true, adjust)
    }

    fn start_inner(
        spec: &EmulationSpec,
        pools_toml: &str,
        dir: &Path,
        redis: bool,
        adjust: impl FnOnce(&mut LocalClusterSpec),
    ) -> Result<Rig> {
        let _ = std::fs::remove_dir_all(dir);
        let emulation = crate::commands::emulate::start_spec(spec, dir)?;
        // Its prefix names everything it made (namespaces, links, cgroups): a reader (or a
        // test) can tell this run's from another emulation's on the same machine.
        eprintln!("bench io: emulation prefix {}", emulation.prefix());
        // This thread is in the router's namespace now: so is what it starts. (On an error,
        // the Redis stops before the emulation is removed: locals drop in reverse order.)
        let redis = if redis {
            Some(
                RedisServer::start_on(emulation.router_address(1))
                    .context("cannot start the dirty table's Redis (Debian's redis-server)")?,
            )
        } else {
            None
        };
        let dir = std::fs::canonicalize(dir)?;
        let binary = std::env::current_exe().context("cannot find the optio binary")?;
        let mut cluster_spec = LocalClusterSpec {
            auth: true,
            pools_toml: Some(pools_toml.to_string()),
            ..LocalClusterSpec::default()
        };
        crate::commands::emulate::place(&emulation, &mut cluster_spec);
        cluster_spec.dirty = redis.as_ref().map(RedisServer::url);
        adjust(&mut cluster_spec);
        let cluster = LocalCluster::start(&binary, &dir, &cluster_spec)
            .context("cannot start the servers on the emulated cluster")?;
        Ok(Rig {
            cluster: Some(cluster),
            redis,
            emulation,
            dir,
            binary,
            runs: std::sync::atomic::AtomicU32::new(0),
        })
    }

    /// The emulation.
    pub fn emulation(&self) -> &Emulation {
        &self.emulation
    }

    /// The dirty table's URL, if the rig runs a Redis for it.
    pub fn dirty_url(&self) -> Option<String> {
        self.redis.as_ref().map(RedisServer::url)
    }

    /// The servers.
    pub fn cluster(&self) -> &LocalCluster {
        self.cluster.as_ref().expect("the cluster runs until the rig is dropped")
    }

    /// A host by name.
    pub fn host(&self, name: &str) -> Result<EmulatedHost> {
        self.emulation.host(name).cloned().with_context(|| format!("no emulated host {name}"))
    }

    /// Runs `optio ARGS --cluster DIR` (from the router's namespace) and returns its output.
    pub fn optio(&self, args: &[&str]) -> Result<String> {
        let output = Command::new(&self.binary)
            .args(args)
            .arg("--cluster")
            .arg(&self.dir)
            .output()
            .context("cannot run optio")?;
        if !output.status.success() {
            bail!(
                "optio {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Creates volume `name` of `size_bytes` in `pool`.
    pub fn create_volume(&self, name: &str, size_bytes: u64, pool: &str) -> Result<()> {
        self.optio(&["volume", "create", name, &size_bytes.to_string(), "--pool", pool]).map(|_| ())
    }

    /// The devices (primary first) of each allocated data object of volume `name`.
    pub fn volume_placement(&self, name: &str) -> Result<Vec<Vec<u32>>> {
        let text = self.optio(&["volume", "info", name, "--placement", "--json"])?;
        let value: serde_json::Value = serde_json::from_str(&text).context("volume info --json")?;
        Ok(value["placement"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| {
                o["devices"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|d| d.as_u64())
                    .map(|d| d as u32)
                    .collect()
            })
            .collect())
    }

    /// The host of each device id.
    pub fn device_hosts(&self) -> Vec<(u32, String)> {
        self.emulation
            .placements()
            .into_iter()
            .flat_map(|p| p.devices.into_iter().map(move |d| (d.id, p.name.clone())))
            .collect()
    }

    /// Starts `optio nbd` serving `volumes` in `host`'s namespace, on a Unix socket.
    pub fn nbd(
        &self,
        host: &EmulatedHost,
        volumes: &[String],
        options: &NbdOptions,
    ) -> Result<Nbd> {
        let n = self.next_number();
        let socket = self.dir.join(format!("nbd-{n}.sock"));
        let log = self.dir.join(format!("nbd-{n}.log"));
        let mut command = self.emulation.command(host, &self.binary);
        command
            .arg("nbd")
            .args(volumes)
            .arg("--socket")
            .arg(&socket)
            .arg("--cluster")
            .arg(&self.dir);
        if let Some(policy) = &options.policy {
            command.arg("--policy").arg(policy);
        }
        if options.location {
            command.arg("--location").arg(host.location());
        }
        if options.local_reads {
            command.arg("--local-reads-host").arg(&host.name);
        } else {
            command.arg("--no-local-reads");
        }
        let log_file = std::fs::File::create(&log).context("cannot create the nbd log")?;
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(log_file));
        let mut child = self.emulation.spawn(host, &mut command)?;
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut nbd = Nbd { child: Some(child), socket, log: log.clone() };
        // It prints one line per volume once it listens (or exits, closing stdout).
        for _ in volumes {
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap_or(0) == 0 || !line.starts_with("serving") {
                nbd.stop();
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                bail!(
                    "optio nbd on {} did not start: {}",
                    host.name,
                    text.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
                );
            }
        }
        Ok(nbd)
    }

    /// Bytes each link end has sent so far.
    fn link_bytes(&self) -> Result<Vec<u64>> {
        Ok(self.emulation.sent_bytes()?)
    }

    fn traffic(&self, before: &[u64], after: &[u64]) -> Traffic {
        let mut traffic = Traffic::default();
        for ((end, b), a) in self.emulation.links().iter().zip(before).zip(after) {
            let bytes = a.saturating_sub(*b);
            if end.rack_link {
                traffic.cross_rack_bytes += bytes;
            } else {
                traffic.host_link_bytes += bytes;
            }
        }
        traffic
    }

    fn next_number(&self) -> u32 {
        self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// Runs fio `jobs` in `host`'s namespace against `nbd`.
    pub fn fio(&self, host: &EmulatedHost, nbd: &Nbd, jobs: &[Job]) -> Result<Run> {
        let mut phase = self.fio_all(&[(host, nbd, jobs.to_vec())])?;
        Ok(Run {
            fio: phase.outcomes.remove(0),
            cpu: phase.cpu,
            traffic: phase.traffic,
            wall_seconds: phase.wall_seconds,
        })
    }

    /// Runs fio on several hosts at once (each `jobs` against its `nbd`), measuring the
    /// machine's CPU and the links around them all.
    pub fn fio_all(&self, clients: &[(&EmulatedHost, &Nbd, Vec<Job>)]) -> Result<Phase> {
        let mut files = Vec::new();
        for (_, nbd, jobs) in clients {
            let file = self.dir.join(format!("fio-{}.fio", self.next_number()));
            std::fs::write(&file, fio::job_file(jobs, &nbd.socket))
                .context("cannot write a fio job")?;
            files.push(file);
        }
        let before = self.link_bytes()?;
        let meter = Meter::start();
        let started = Instant::now();
        let mut children = Vec::new();
        for ((host, _, _), file) in clients.iter().zip(&files) {
            let mut command = self.emulation.command(host, "fio");
            command
                .arg("--output-format=json")
                .arg(file)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            children.push((
                host.name.clone(),
                command.spawn().context("cannot run fio (Debian's fio)")?,
            ));
        }
        let mut outputs = Vec::new();
        for (name, child) in children {
            outputs.push((name, child.wait_with_output().context("fio")?));
        }
        let wall_seconds = started.elapsed().as_secs_f64();
        let cpu = meter.stop();
        let after = self.link_bytes()?;
        let mut outcomes = Vec::new();
        for (name, output) in outputs {
            let text = String::from_utf8_lossy(&output.stdout);
            if !output.status.success() {
                bail!(
                    "fio on {name} failed ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                        .lines()
                        .rev()
                        .take(5)
                        .collect::<Vec<_>>()
                        .join(" | ")
                );
            }
            outcomes.push(fio::parse(&text).with_context(|| {
                format!("fio's output on {name}: {}", text.chars().take(400).collect::<String>())
            })?);
        }
        Ok(Phase { outcomes, cpu, traffic: self.traffic(&before, &after), wall_seconds })
    }

    /// Samples every server's CPU and memory metric (what the CHOICE policies read) with
    /// `optio status --json` every [`WATCH_INTERVAL`] until the watch is stopped.
    pub fn watch_servers(&self) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let (binary, dir, flag) = (self.binary.clone(), self.dir.clone(), stop.clone());
        // (A thread started here is in the router's namespace, as this one is.)
        let handle = std::thread::spawn(move || {
            let mut sums: BTreeMap<String, (u32, f64, f64)> = BTreeMap::new();
            while !flag.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let output = Command::new(&binary)
                    .args(["status", "--json", "--cluster"])
                    .arg(&dir)
                    .stderr(Stdio::null())
                    .output();
                // Exit 2 (HEALTH_WARN) still prints the servers.
                if let Ok(output) = output {
                    let text = String::from_utf8_lossy(&output.stdout);
                    if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
                        for server in value["servers"].as_array().into_iter().flatten() {
                            let (Some(name), Some(metrics)) =
                                (server["name"].as_str(), server["metrics"].as_array())
                            else {
                                continue;
                            };
                            let Some(first) = metrics.first() else { continue };
                            let entry = sums.entry(name.to_string()).or_default();
                            entry.0 += 1;
                            entry.1 += first["cpu_permille"].as_f64().unwrap_or(0.0);
                            entry.2 += first["memory_permille"].as_f64().unwrap_or(0.0);
                        }
                    }
                }
                while !flag.load(Ordering::Relaxed) && asked.elapsed() < WATCH_INTERVAL {
                    std::thread::sleep(POLL_INTERVAL * 5);
                }
            }
            sums.into_iter()
                .map(|(name, (n, cpu, memory))| {
                    let mean = |sum: f64| if n == 0 { 0.0 } else { sum / f64::from(n) };
                    (
                        name,
                        HostMetrics {
                            samples: n,
                            cpu_permille_mean: mean(cpu),
                            memory_permille_mean: mean(memory),
                        },
                    )
                })
                .collect()
        });
        Watch { stop, handle }
    }

    /// Sets every host link to `host_bits` and rack link to `rack_bits` per second (`None`:
    /// the spec's).
    pub fn set_rates(&self, host_bits: Option<u64>, rack_bits: Option<u64>) -> Result<()> {
        Ok(self.emulation.set_rates(host_bits, rack_bits)?)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // Servers first (they run in the namespaces), the dirty table's Redis, then the
        // emulation.
        drop(self.cluster.take());
        drop(self.redis.take());
        if let Err(error) = self.emulation.cleanup() {
            eprintln!("emulation: {error}");
        }
    }
}

/// An emulation of `racks` racks of `hosts_per_rack` alike server hosts (one 16 GiB device
/// each, `conditions`) and one client host per rack (its link twice a host's): host links at
/// `host_bits`, rack links at `rack_bits` per second, buckets of `burst_bytes`.
pub fn uniform_spec(
    racks: u32,
    hosts_per_rack: u32,
    host_bits: u64,
    rack_bits: u64,
    burst_bytes: u64,
    conditions: &optio_local::emulate::spec::Conditions,
) -> EmulationSpec {
    use optio_local::emulate::spec::{HostSpec, Link, RackSpec};
    let link = |bits_per_sec: u64| Link { bits_per_sec, burst_bytes };
    EmulationSpec {
        racks: (0..racks)
            .map(|_| RackSpec {
                uplink: link(rack_bits),
                hosts: (0..hosts_per_rack)
                    .map(|_| HostSpec {
                        devices: 1,
                        capacity_bytes: 16 << 30,
                        class: None,
                        bandwidth_mb_per_sec: None,
                        link: link(host_bits),
                        conditions: conditions.clone(),
                    })
                    .collect(),
                clients: 1,
                client_link: link(host_bits * 2),
            })
            .collect(),
    }
}
