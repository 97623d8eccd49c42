//! One machine made to behave like several racks of hosts (`optio up --emulate FILE`, `optio
//! bench io`): each host a network namespace with its own private address, one bridge per
//! rack, racks joined by a router namespace, every link rate-limited with `tc tbf` in both
//! directions, and host conditions (memory pressure, a CPU hog, slow devices) as cgroup v1
//! groups. [`spec`] is the emulation file; [`Emulation::start`] builds it and
//! [`Emulation::cleanup`] (or dropping it) removes it.
//!
//! **Nothing is left behind.** Every name the emulation creates — namespaces, cgroups —
//! starts with a per-run prefix (`oeXXXXXX`, checked unused), and is written into a record
//! ([`record`]) before it is created. The emulation removes it all on exit; a watchdog
//! process in its own process group (`optio emulate-watchdog`), holding a pipe from the
//! supervisor, removes it all when the supervisor dies however it dies (SIGKILL included);
//! and every start first cleans records whose owner is gone.
//!
//! **What is emulated, and how.** Links: `tbf` queues (no added delay: `netem` is not
//! available on these kernels), so a link has the rate and queueing of the real thing but a
//! round trip of microseconds. Memory pressure: a v1 memory cgroup limit on the host's
//! processes, so its server's page cache holds only what is left. A CPU hog: a busy process in
//! the host's v1 cpu cgroup, whose quota stands for the host's cores (its server then reports
//! CPU utilisation against that quota). A slow device: a v1 blkio read throttle on the disk
//! under the cluster directory; only reads that miss the page cache reach the disk, so a slow
//! device goes with a memory limit. Everything shares this machine's cores and disk; `optio
//! bench io` reports the machine's CPU utilisation beside every result.

pub mod cgroup;
mod error;
pub mod net;
pub mod record;
pub mod spec;

use std::ffi::OsStr;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

pub use error::EmulateError;
pub use record::RECORD_COPY_FILE;
pub use spec::{Conditions, EmulationSpec, HostSpec, Link, RackSpec};

use crate::host::{DeviceDef, HostPlacement};

/// The emulation file as started, kept in the cluster directory.
pub const SPEC_COPY_FILE: &str = "emulation.toml";
/// The watchdog's log in the cluster directory.
const WATCHDOG_LOG: &str = "emulation-watchdog.log";
/// The hidden subcommand of the `optio` binary that runs the watchdog.
pub const WATCHDOG_COMMAND: &str = "emulate-watchdog";
/// What the supervisor writes to its watchdog when it has cleaned up itself.
pub const WATCHDOG_DONE: &str = "done";
/// The range of second octets of the emulations' addresses (`10.O.R.H`).
const OCTET_MIN: u8 = 64;
const OCTET_MAX: u8 = 250;
/// The tools the emulation runs.
const TOOLS: [&str; 4] = ["ip", "tc", "nsenter", "sysctl"];
/// Attempts at a prefix no namespace uses yet.
const PREFIX_ATTEMPTS_MAX: u32 = 16;

/// One emulated host: a server host (`z1-h2`) or a client-only host (`z1-c1`).
#[derive(Clone, Debug)]
pub struct EmulatedHost {
    /// `z{rack}-h{n}` or `z{rack}-c{n}`.
    pub name: String,
    /// Its rack, from 1.
    pub rack: u32,
    /// Its address.
    pub ip: Ipv4Addr,
    /// Its network namespace.
    pub netns: String,
    /// Its server's spec (`None`: a client-only host).
    pub server: Option<HostSpec>,
    /// Its link.
    pub link: Link,
    /// Its cgroup directories (none without conditions).
    pub cgroups: Vec<PathBuf>,
}

impl EmulatedHost {
    /// Its zone (rack) in the map: `z{rack}`.
    pub fn zone(&self) -> String {
        format!("z{}", self.rack)
    }

    /// Its location as a client's `--location` (`zone=z1,host=z1-c1`).
    pub fn location(&self) -> String {
        format!("zone={},host={}", self.zone(), self.name)
    }
}

/// One direction of one link, for its byte counter.
#[derive(Clone, Debug)]
pub struct LinkEnd {
    /// `z1-h1 up`, `rack 2 down`, …
    pub name: String,
    /// Whether it is a rack's link to the router.
    pub rack_link: bool,
    /// The namespace and device whose egress it is.
    pub netns: String,
    /// The device.
    pub dev: String,
    /// Its rate as the spec says.
    pub base: Link,
}

/// A running emulation. Dropping it removes everything it created.
#[derive(Debug)]
pub struct Emulation {
    spec: EmulationSpec,
    prefix: String,
    octet: u8,
    hosts: Vec<EmulatedHost>,
    links: Vec<LinkEnd>,
    record: record::Held,
    watchdog: Option<(Child, ChildStdin)>,
    hogs: Vec<Child>,
    cleaned: bool,
}

fn netns_path(name: &str) -> PathBuf {
    Path::new("/run/netns").join(name)
}

/// Whether this process can build emulations (root, and `ip`, `tc`, `nsenter`, `sysctl` on
/// the path); `Err` says what is missing.
pub fn available() -> Result<(), EmulateError> {
    if !rustix::process::geteuid().is_root() {
        return Err(EmulateError::Unsupported(
            "an emulated cluster needs root (it creates network namespaces and cgroups)".into(),
        ));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for tool in TOOLS {
        if !std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()) {
            return Err(EmulateError::Unsupported(format!(
                "an emulated cluster needs `{tool}` (Debian's iproute2, util-linux and procps)"
            )));
        }
    }
    Ok(())
}

/// A fresh prefix: `oe` and six hex digits no namespace or record uses.
fn fresh_prefix() -> Result<String, EmulateError> {
    let existing = record::existing_namespaces();
    let records = record::records();
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ (u64::from(std::process::id()) << 32);
    for _ in 0..PREFIX_ATTEMPTS_MAX {
        seed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29) ^ 0x5851_f42d_4c95_7f2d;
        let prefix = format!("oe{:06x}", seed & 0xff_ffff);
        let used = existing.iter().any(|n| n.starts_with(&prefix))
            || records.iter().any(|r| r.prefix == prefix);
        if !used {
            return Ok(prefix);
        }
    }
    Err(EmulateError::Unsupported("no unused emulation prefix found; try again".into()))
}

/// A second octet no live record uses.
fn fresh_octet(prefix: &str) -> Result<u8, EmulateError> {
    let used: Vec<u8> = record::records().iter().map(|r| r.octet).collect();
    let span = u32::from(OCTET_MAX - OCTET_MIN) + 1;
    let start = prefix.bytes().fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    (0..span)
        .map(|i| OCTET_MIN + ((start + i) % span) as u8)
        .find(|octet| !used.contains(octet))
        .ok_or_else(|| EmulateError::Unsupported("too many live emulations on this machine".into()))
}

impl Emulation {
    /// Builds the emulated cluster of `spec` for a cluster in `cluster_dir`: cleans stale
    /// emulations, writes the record, starts the watchdog (`binary emulate-watchdog`), then
    /// creates namespaces, links, cgroups and hogs.
    pub fn start(
        spec: &EmulationSpec,
        binary: &Path,
        cluster_dir: &Path,
    ) -> Result<Emulation, EmulateError> {
        available()?;
        let disk_needed =
            spec.servers().any(|(_, _, h)| h.conditions.device_read_bytes_per_sec.is_some());
        for (rack, index, host) in spec.servers() {
            cgroup::check(&host.conditions, &format!("z{rack}-h{index}"))?;
        }
        let disk = if disk_needed { Some(cgroup::disk_of(cluster_dir)?) } else { None };
        for prefix in record::clean_stale()? {
            eprintln!("emulation: removed what the stale emulation {prefix} left behind");
        }
        let prefix = fresh_prefix()?;
        let octet = fresh_octet(&prefix)?;
        let record = record::Held::create(
            record::new_record(&prefix, octet, cluster_dir),
            Some(cluster_dir.join(RECORD_COPY_FILE)),
        )?;
        let mut emulation = Emulation {
            spec: spec.clone(),
            prefix,
            octet,
            hosts: Vec::new(),
            links: Vec::new(),
            record,
            watchdog: None,
            hogs: Vec::new(),
            cleaned: false,
        };
        std::fs::write(cluster_dir.join(SPEC_COPY_FILE), spec.to_toml()).map_err(|source| {
            EmulateError::Io {
                what: format!("cannot write into {}", cluster_dir.display()),
                source,
            }
        })?;
        emulation.spawn_watchdog(binary, cluster_dir)?;
        // On any failure from here, dropping `emulation` removes what was made.
        emulation.build(disk.as_deref())?;
        Ok(emulation)
    }

    fn spawn_watchdog(&mut self, binary: &Path, cluster_dir: &Path) -> Result<(), EmulateError> {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(cluster_dir.join(WATCHDOG_LOG))
            .map_err(|source| EmulateError::Io {
                what: "cannot open the watchdog's log".into(),
                source,
            })?;
        let mut child = Command::new(binary)
            .arg(WATCHDOG_COMMAND)
            .arg("--record")
            .arg(self.record.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            // Its own process group: a Ctrl-C (or a kill of the supervisor's group) leaves it
            // to clean up after the supervisor.
            .process_group(0)
            .spawn()
            .map_err(|source| EmulateError::Io {
                what: format!("cannot start {} {WATCHDOG_COMMAND}", binary.display()),
                source,
            })?;
        let stdin = child.stdin.take().expect("stdin is piped");
        self.watchdog = Some((child, stdin));
        Ok(())
    }

    fn ns(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.prefix)
    }

    fn add_namespace(&mut self, name: &str) -> Result<(), EmulateError> {
        self.record.add_namespace(name)?;
        net::add_namespace(name)
    }

    fn build(&mut self, disk: Option<&str>) -> Result<(), EmulateError> {
        let router = self.ns("router");
        self.add_namespace(&router)?;
        net::make_router(&router)?;
        let racks = self.spec.racks.clone();
        for (r, rack) in racks.iter().enumerate() {
            let r = r as u32 + 1;
            let rack_ns = self.ns(&format!("rack{r}"));
            self.add_namespace(&rack_ns)?;
            let gateway = Ipv4Addr::new(10, self.octet, r as u8, 1);
            let router_dev = format!("rack{r}");
            net::make_rack(&rack_ns, &router, &router_dev, gateway, rack.uplink)?;
            self.links.push(LinkEnd {
                name: format!("rack {r} up"),
                rack_link: true,
                netns: rack_ns.clone(),
                dev: "uplink".into(),
                base: rack.uplink,
            });
            self.links.push(LinkEnd {
                name: format!("rack {r} down"),
                rack_link: true,
                netns: router.clone(),
                dev: router_dev,
                base: rack.uplink,
            });
            let servers = rack
                .hosts
                .iter()
                .enumerate()
                .map(|(i, h)| (format!("h{}", i + 1), 11 + i, Some(h.clone()), h.link));
            let clients = (0..rack.clients as usize)
                .map(|i| (format!("c{}", i + 1), 101 + i, None, rack.client_link));
            for (port, last_octet, server, link) in servers.chain(clients).collect::<Vec<_>>() {
                let name = format!("z{r}-{port}");
                let host_ns = self.ns(&name);
                self.add_namespace(&host_ns)?;
                let ip = Ipv4Addr::new(10, self.octet, r as u8, last_octet as u8);
                net::make_host(&host_ns, &rack_ns, &port, ip, gateway, link)?;
                self.links.push(LinkEnd {
                    name: format!("{name} up"),
                    rack_link: false,
                    netns: host_ns.clone(),
                    dev: "eth0".into(),
                    base: link,
                });
                self.links.push(LinkEnd {
                    name: format!("{name} down"),
                    rack_link: false,
                    netns: rack_ns.clone(),
                    dev: port,
                    base: link,
                });
                let conditions = server.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
                let group = self.ns(&name);
                let record = &mut self.record;
                let cgroups =
                    cgroup::create(&group, &conditions, disk, |dir| record.add_cgroup(dir))?;
                let host =
                    EmulatedHost { name, rack: r, ip, netns: host_ns, server, link, cgroups };
                if conditions.cpu_hog {
                    self.start_hog(&host)?;
                }
                self.hosts.push(host);
            }
        }
        Ok(())
    }

    /// A busy process in `host`'s cpu group.
    fn start_hog(&mut self, host: &EmulatedHost) -> Result<(), EmulateError> {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| EmulateError::Io { what: "cannot start a CPU hog".into(), source })?;
        let pid = child.id();
        self.hogs.push(child);
        cgroup::join(pid, &host.cgroups)
    }

    /// The prefix of every name this emulation created.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// What it emulates.
    pub fn spec(&self) -> &EmulationSpec {
        &self.spec
    }

    /// Every host, servers and clients, rack by rack.
    pub fn hosts(&self) -> &[EmulatedHost] {
        &self.hosts
    }

    /// A host by name (`z1-h2`, `z2-c1`).
    pub fn host(&self, name: &str) -> Option<&EmulatedHost> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// The client-only hosts of rack `rack` (from 1).
    pub fn clients_of(&self, rack: u32) -> Vec<&EmulatedHost> {
        self.hosts.iter().filter(|h| h.rack == rack && h.server.is_none()).collect()
    }

    /// The router's namespace (it reaches every host).
    pub fn router_netns(&self) -> String {
        self.ns("router")
    }

    /// The router's address on rack `rack`'s subnet (from 1): every host reaches it.
    pub fn router_address(&self, rack: u32) -> Ipv4Addr {
        Ipv4Addr::new(10, self.octet, rack as u8, 1)
    }

    /// Every link end, for byte counters.
    pub fn links(&self) -> &[LinkEnd] {
        &self.links
    }

    /// Bytes each link end has sent so far (its tbf qdisc's counter), in [`links`](Self::links)
    /// order.
    pub fn sent_bytes(&self) -> Result<Vec<u64>, EmulateError> {
        self.links.iter().map(|l| net::sent_bytes(&l.netns, &l.dev)).collect()
    }

    /// Changes every host link's rate to `host_bits` and every rack link's to `rack_bits` per
    /// second (`None`: as the spec says).
    pub fn set_rates(
        &self,
        host_bits: Option<u64>,
        rack_bits: Option<u64>,
    ) -> Result<(), EmulateError> {
        for end in &self.links {
            let bits = if end.rack_link { rack_bits } else { host_bits };
            let link = Link { bits_per_sec: bits.unwrap_or(end.base.bits_per_sec), ..end.base };
            net::shape(&end.netns, &end.dev, link)?;
        }
        Ok(())
    }

    /// A command that runs `program` in `host`'s network namespace (`nsenter --net`); spawn it
    /// with [`spawn`](Self::spawn) so that it joins the host's cgroups too.
    pub fn command(&self, host: &EmulatedHost, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("nsenter");
        command.arg(format!("--net={}", netns_path(&host.netns).display())).arg("--").arg(program);
        command
    }

    /// Spawns `command` (made by [`command`](Self::command)) and moves it into `host`'s
    /// cgroups.
    pub fn spawn(&self, host: &EmulatedHost, command: &mut Command) -> Result<Child, EmulateError> {
        let mut child = command.spawn().map_err(|source| EmulateError::Io {
            what: format!("cannot start a process on {}", host.name),
            source,
        })?;
        if let Err(error) = cgroup::join(child.id(), &host.cgroups) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(error);
        }
        Ok(child)
    }

    /// Moves the calling thread into the router's namespace, from which every host is
    /// reachable; threads and processes it starts afterwards are there too. (Supervisors do
    /// this to watch their servers.)
    pub fn enter_router(&self) -> Result<(), EmulateError> {
        let path = netns_path(&self.router_netns());
        let file = std::fs::File::open(&path).map_err(|source| EmulateError::Io {
            what: format!("cannot open {}", path.display()),
            source,
        })?;
        use std::os::fd::AsFd;
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| EmulateError::Io {
            what: "cannot enter the router's namespace".into(),
            source: e.into(),
        })
    }

    /// The server hosts as `optio up` places them: their namespaces, addresses, cgroups and
    /// devices (numbered from 0, host by host).
    pub fn placements(&self) -> Vec<HostPlacement> {
        let mut next = 0u32;
        self.hosts
            .iter()
            .filter_map(|host| {
                let server = host.server.as_ref()?;
                let devices = (0..server.devices)
                    .map(|_| {
                        next += 1;
                        DeviceDef {
                            id: next - 1,
                            capacity_bytes: server.capacity_bytes,
                            class: server.class.clone(),
                            bandwidth_mb_per_sec: server.bandwidth_mb_per_sec,
                        }
                    })
                    .collect();
                Some(HostPlacement {
                    name: host.name.clone(),
                    bind: host.ip.to_string(),
                    launcher: vec![
                        "nsenter".into(),
                        format!("--net={}", netns_path(&host.netns).display()).into(),
                        "--".into(),
                    ],
                    cgroups: host.cgroups.clone(),
                    devices,
                    server_args: server
                        .conditions
                        .server_read_bytes_per_sec
                        .map(|rate| vec!["--emulated-read-rate".into(), rate.to_string().into()])
                        .unwrap_or_default(),
                })
            })
            .collect()
    }

    /// Lines describing the emulation, each starting with `emulation:`.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "emulation: {} racks, prefix {}, addresses 10.{}.R.H/24 in network namespaces; links are tc tbf rate limits (no added delay)",
            self.spec.racks.len(),
            self.prefix,
            self.octet
        )];
        for (r, rack) in self.spec.racks.iter().enumerate() {
            lines.push(format!(
                "emulation: rack z{}: uplink {} each way; {} server host(s), {} client host(s)",
                r + 1,
                spec::format_rate_bits(rack.uplink.bits_per_sec),
                rack.hosts.len(),
                rack.clients
            ));
        }
        for host in &self.hosts {
            let mut what = vec![format!(
                "{} link {}",
                host.ip,
                spec::format_rate_bits(host.link.bits_per_sec)
            )];
            if let Some(server) = &host.server {
                let c = &server.conditions;
                if let Some(limit) = c.memory_limit_bytes {
                    what.push(format!("memory pressure: memory cgroup limit {} MiB", limit >> 20));
                }
                if let Some(cpus) = c.cpus_milli {
                    what.push(format!("cpu cgroup quota {:.2} cores", f64::from(cpus) / 1000.0));
                }
                if c.cpu_hog {
                    what.push("CPU hog: a busy process in its cpu cgroup".into());
                }
                if let Some(rate) = c.server_read_bytes_per_sec {
                    what.push(format!(
                        "device: reads served at {:.1} MB/s by its server (--emulated-read-rate, page cache or not)",
                        rate as f64 / 1e6
                    ));
                }
                if let Some(rate) = c.device_read_bytes_per_sec {
                    what.push(format!(
                        "slow device: blkio read throttle {:.1} MB/s",
                        rate as f64 / 1e6
                    ));
                }
            } else {
                what.push("client only".into());
            }
            lines.push(format!("emulation: host {}: {}", host.name, what.join("; ")));
        }
        lines
    }

    /// Removes everything the emulation created (idempotent), and lets the watchdog go.
    pub fn cleanup(&mut self) -> Result<(), EmulateError> {
        if self.cleaned {
            return Ok(());
        }
        for hog in &mut self.hogs {
            let _ = hog.kill();
            let _ = hog.wait();
        }
        self.hogs.clear();
        let result = self.record.clean();
        self.cleaned = true;
        if let Some((mut child, mut stdin)) = self.watchdog.take() {
            let _ = writeln!(stdin, "{WATCHDOG_DONE}");
            drop(stdin);
            let _ = child.wait();
        }
        result
    }
}

impl Drop for Emulation {
    fn drop(&mut self) {
        if let Err(error) = self.cleanup() {
            eprintln!("emulation: {error}");
        }
    }
}

/// The watchdog (`optio emulate-watchdog --record FILE`): waits for its standard input to
/// close; if the supervisor did not say it cleaned up, cleans up after it. Returns whether it
/// cleaned.
pub fn watchdog(record_file: &Path) -> Result<bool, EmulateError> {
    use std::io::BufRead;
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.trim() == WATCHDOG_DONE => return Ok(false),
            Ok(_) => {}
        }
    }
    record::clean_after_supervisor(record_file)
}
