//! CHOICE's microbenchmarks (seed 000 §5.1 and §5.2) on an emulated cluster: 3 racks × 3
//! server hosts, a client host per rack, volumes with k = 2 candidates per data object.
//!
//! * `local`, `memory`, `cpu` (Fig. 2a–c, Tables 2–3): volumes written, then read
//!   sequentially in 4 MiB blocks by the clients of every rack at once; the baseline `first`
//!   against the policy, each in volumes of its own (a policy decides at an object's first
//!   write).
//! * `latency`, `journal` (Fig. 2d, Table 4): fresh volumes written with 10 jobs each.
//! * `probe` (§5.2, Fig. 3): first 4 KiB writes into never-written 4 MiB objects, and 4 MiB
//!   sequential writes, in a pool with k = 2 against one with k = 1.

use std::collections::BTreeMap;

use anyhow::Result;
use optio_local::emulate::EmulatedHost;
use optio_local::emulate::spec::{
    Conditions, EmulationSpec, HostSpec, Link, RackSpec, format_rate_bits,
};
use optio_sim::{Plot, PlotKind, Report, Series, Table};
use serde_json::json;

use super::context::{Experiment, IoContext};
use super::fio::Job;
use super::rig::{HostMetrics, NbdOptions, Phase, Rig};
use super::stats::{change_percent, median, range};

/// Racks, server hosts per rack, and the hosts given a condition (memory pressure, a CPU
/// hog): the first host of the first two racks, as the paper's two servers.
const RACKS: u32 = 3;
const HOSTS_PER_RACK: u32 = 3;
const CONDITIONED: [&str; 2] = ["z1-h1", "z2-h1"];
/// The memory limit of the `memory` experiment's two hosts: a server's own memory under
/// concurrent 4 MiB writes reaches ~70 MiB (a 64 MiB limit killed one), the rest is cache.
const MEMORY_LIMIT: u64 = 160 << 20;
/// A 4 MiB block (the paper's, and a volume's object size).
const BLOCK: u64 = 4 << 20;
/// Links fill volumes this many times faster than they are measured at (filling is not
/// measured).
const FILL_RATE_FACTOR: u64 = 4;
/// The tbf bucket of every link.
const BURST_BYTES: u64 = 64 << 10;
/// PGs of the pools.
const PG_NUM: u32 = 128;

/// The pools: `data` with k = 2 (the policy is given per client), `plain` with k = 1.
fn pools_toml() -> String {
    format!(
        "[[rules]]\nid = 0\nname = \"by_zone\"\nsteps = [\"take default\", \"chooseleaf firstn 0 type zone\", \"emit\"]\n\n\
         [[pools]]\nid = 1\nname = \"data\"\nengine = \"crush\"\nrule = \"by_zone\"\npg_num = {PG_NUM}\nsize = 3\nchoices = 2\npolicy = \"first\"\n\n\
         [[pools]]\nid = 3\nname = \"plain\"\nengine = \"crush\"\nrule = \"by_zone\"\npg_num = {PG_NUM}\nsize = 3\n"
    )
}

/// The links of an experiment, bits per second.
#[derive(Clone, Copy, Debug)]
struct Links {
    host: u64,
    rack: u64,
    client: u64,
}

fn link(bits_per_sec: u64) -> Link {
    Link { bits_per_sec, burst_bytes: BURST_BYTES }
}

/// 3 racks × 3 hosts × 1 device, a client host per rack; `conditions` per host name.
fn cluster(links: Links, conditions: impl Fn(&str) -> Conditions) -> EmulationSpec {
    let racks = (1..=RACKS)
        .map(|r| RackSpec {
            uplink: link(links.rack),
            hosts: (1..=HOSTS_PER_RACK)
                .map(|h| HostSpec {
                    devices: 1,
                    capacity_bytes: 16 << 30,
                    class: None,
                    bandwidth_mb_per_sec: None,
                    link: link(links.host),
                    conditions: conditions(&format!("z{r}-h{h}")),
                })
                .collect(),
            clients: 1,
            client_link: link(links.client),
        })
        .collect();
    EmulationSpec { racks }
}

/// Where a variant's clients run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clients {
    /// On client-only hosts, one per rack, reading through the servers.
    Own,
    /// On the first server host of each rack, reading their own host's replicas locally.
    CoLocated,
}

/// One compared setting: a policy and where its clients run.
#[derive(Clone, Debug)]
struct Variant {
    policy: &'static str,
    clients: Clients,
}

impl Variant {
    fn label(&self) -> String {
        match self.clients {
            Clients::Own => self.policy.to_string(),
            Clients::CoLocated => format!("{} (co-located, local reads)", self.policy),
        }
    }
}

/// What the paper reports per policy: MB/s and mean latency, ms.
struct Paper {
    rows: Vec<(&'static str, f64, f64)>,
    figure: &'static str,
}

/// An experiment's setup.
struct Setup {
    experiment: Experiment,
    spec: EmulationSpec,
    variants: Vec<Variant>,
    read: bool,
    volumes_per_client: u32,
    volume_bytes: u64,
    jobs_per_volume: u32,
    runs: u32,
    paper: Paper,
    differences: Vec<String>,
}

impl Setup {
    /// The links' rates while the volumes are written (when the policies choose), against
    /// the measured ones: (numerator, denominator). `cpu` writes at the measured rates: four
    /// times them would bring the servers near their 0.3-core quotas, where a busy server
    /// looks like a hogged one (what they reported: `server_metrics_while_choosing` in the
    /// JSON).
    fn fill_rate(&self) -> (u64, u64) {
        if self.experiment == Experiment::Cpu { (1, 1) } else { (FILL_RATE_FACTOR, 1) }
    }

    /// Why the servers' metrics are not sampled while this experiment's volumes are written,
    /// or `None` when they are: only where the policy reads those metrics (`memory`, `cpu`)
    /// and the writing is not measured. In `latency` and `journal` the writing is the
    /// measured phase, and a `optio status` every second would add to what is measured.
    fn unwatched_because(&self) -> Option<&'static str> {
        match self.experiment {
            Experiment::Memory | Experiment::Cpu => None,
            Experiment::Latency | Experiment::Journal => Some(
                "not sampled: the writes are the measured phase, and sampling the servers every second would disturb them",
            ),
            Experiment::Local
            | Experiment::Probe
            | Experiment::Attributed
            | Experiment::Crush
            | Experiment::Elastic => Some(
                "not sampled: this experiment's policy does not read the servers' CPU or memory metrics",
            ),
        }
    }
}

fn setup(experiment: Experiment, context: &IoContext) -> Setup {
    let override_links = |links: Links| Links {
        host: context.host_bits.unwrap_or(links.host),
        rack: context.rack_bits.unwrap_or(links.rack),
        client: context.host_bits.map_or(links.client, |h| h * 2),
    };
    // Reads: a rack's link is oversubscribed 3:1 against its hosts' (the paper's premise for
    // `local`: "the network bandwidth is limited").
    let read_links =
        override_links(Links { host: 200_000_000, rack: 100_000_000, client: 400_000_000 });
    // Writes: host links are the narrowest, so that a policy steering away from a busy host
    // could pay off.
    let write_links =
        override_links(Links { host: 100_000_000, rack: 400_000_000, client: 400_000_000 });
    let none = |_: &str| Conditions::default();
    let common = vec![
        "the paper: Ceph on a 3-host test cluster (15 HDDs each, 10 GbE, journals on the data disks), fio's librbd engine; here: Optio on one 2-core machine, 3 emulated racks × 3 hosts × 1 device (files on one virtio disk, the page cache shared), optio nbd + fio's nbd engine in a client host per rack".to_string(),
        "links are tc tbf rate limits without added delay (netem is not available): a round trip costs microseconds, not a switch hop".to_string(),
    ];
    let volume_bytes = context.scaled(96 << 20, 2 * BLOCK) / BLOCK * BLOCK;
    let memory_volume_bytes = context.scaled(64 << 20, 2 * BLOCK) / BLOCK * BLOCK;
    match experiment {
        Experiment::Local => Setup {
            experiment,
            spec: cluster(read_links, none),
            variants: vec![
                Variant { policy: "first", clients: Clients::Own },
                Variant { policy: "local", clients: Clients::Own },
                Variant { policy: "first", clients: Clients::CoLocated },
                Variant { policy: "local", clients: Clients::CoLocated },
            ],
            read: true,
            volumes_per_client: 2,
            volume_bytes,
            jobs_per_volume: 1,
            runs: context.runs(3),
            paper: Paper {
                rows: vec![("first", 1545.9, 44.23), ("local", 1900.2, 33.06)],
                figure: "seed 000 Fig. 2(a), Table 2",
            },
            differences: [
                common,
                vec![
                    format!("paper: 8 images of 6 GB, 1 thread each; here: 2 volumes of {} MiB per rack's client (6 in all), 1 thread each", volume_bytes >> 20),
                    format!("the rack links ({}) are a third of the hosts' ({}) together: the cross-rack share of reads decides the throughput", format_rate_bits(read_links.rack), format_rate_bits(read_links.host)),
                    "co-located rows: the client runs on a server host and reads its own host's replicas from their files (--local-reads-host); the paper's clients ran beside Ceph's OSDs without such reads".into(),
                ],
            ]
            .concat(),
        },
        Experiment::Memory => Setup {
            experiment,
            spec: cluster(read_links, |host| {
                if CONDITIONED.contains(&host) {
                    Conditions {
                        memory_limit_bytes: Some(MEMORY_LIMIT),
                        device_read_bytes_per_sec: Some(6_000_000),
                        ..Conditions::default()
                    }
                } else {
                    Conditions::default()
                }
            }),
            variants: vec![
                Variant { policy: "first", clients: Clients::Own },
                Variant { policy: "memory", clients: Clients::Own },
            ],
            read: true,
            volumes_per_client: 2,
            // On a disk (the blkio throttle needs one) shared with others: smaller.
            volume_bytes: memory_volume_bytes,
            jobs_per_volume: 2,
            runs: context.runs(3),
            paper: Paper {
                rows: vec![("first", 778.0, 41.46), ("memory", 1403.2, 23.26)],
                figure: "seed 000 Fig. 2(b), Table 3",
            },
            differences: [
                common,
                vec![
                    format!("memory pressure (emulated): a {} MiB memory cgroup limit on the servers of z1-h1 and z2-h1 (what their own memory leaves of it is their page cache), and that page cache emptied before every read run (`memory.force_empty`, as a program taking their memory would), so their reads reach the disk through a blkio read throttle of 6 MB/s (an HDD's share); the other servers' data stays in the page cache. The paper: a program occupying 48 GB of 128 GB on two servers", MEMORY_LIMIT >> 20),
                    "a server reports memory utilisation against its cgroup's limit (its page cache included), the others against the machine's memory".into(),
                    format!("paper: 8 images, 2 threads each; here: 2 volumes of {} MiB per rack's client, 2 threads each", memory_volume_bytes >> 20),
                ],
            ]
            .concat(),
        },
        Experiment::Cpu => Setup {
            experiment,
            spec: cluster(read_links, |host| Conditions {
                cpus_milli: Some(300),
                cpu_hog: CONDITIONED.contains(&host),
                ..Conditions::default()
            }),
            variants: vec![
                Variant { policy: "first", clients: Clients::Own },
                Variant { policy: "cpu", clients: Clients::Own },
            ],
            read: true,
            volumes_per_client: 2,
            volume_bytes,
            jobs_per_volume: 1,
            runs: context.runs(3),
            paper: Paper { rows: vec![("first", 1.0, 0.0), ("cpu", 1.0, 0.0)], figure: "seed 000 Fig. 2(c) (no table: no significant change)" },
            differences: [
                common,
                vec![
                    "CPU hog (emulated): every server host is a cpu cgroup with a quota of 0.3 cores (its server reports CPU utilisation against it); on z1-h1 and z2-h1 a busy process shares that quota with the server. The paper: CPU at 99 % on two servers".into(),
                    "the hogs use 0.6 of this machine's 2 cores throughout".into(),
                    "the volumes are written (and the policy chooses) at the measured link rates, not four times them as in the other experiments, so that the servers stay well below their quotas while the hogged hosts use all of theirs".into(),
                ],
            ]
            .concat(),
        },
        Experiment::Latency | Experiment::Journal => {
            let policy = if experiment == Experiment::Latency { "latency" } else { "journal" };
            let volume = context.scaled(80 << 20, 10 * BLOCK) / (10 * BLOCK) * (10 * BLOCK);
            Setup {
                experiment,
                spec: cluster(write_links, none),
                variants: vec![
                    Variant { policy: "first", clients: Clients::Own },
                    Variant { policy, clients: Clients::Own },
                ],
                read: false,
                volumes_per_client: 1,
                volume_bytes: volume,
                jobs_per_volume: 10,
                runs: context.runs(3),
                paper: Paper {
                    rows: vec![("first", 401.7, 723.49), ("latency", 396.1, 765.22), ("journal", 396.2, 727.46)],
                    figure: "seed 000 Fig. 2(d), Table 4",
                },
                differences: [
                    common,
                    vec![
                        format!("paper: 8 images, 10 threads each; here: 1 fresh volume of {} MiB per rack's client (3 in all), 10 threads each, 4 MiB sequential writes (every block a new object: every write probes)", volume >> 20),
                        format!("host links ({}) are the narrowest here, rack links {}: a host busy receiving replicas is the transient condition the policy could avoid", format_rate_bits(write_links.host), format_rate_bits(write_links.rack)),
                        "Optio's `journal` metric is a device's unflushed bytes: bytes of whole-object writes on their way to disk (written to a temporary file, not yet fsynced and renamed) — not Ceph's journal (a write-ahead log, committed and not yet applied to the data disk); writes in place into existing volume objects are not counted".into(),
                        "Optio's `latency` metric is an EWMA (weight 1/8) of the device's request service times".into(),
                    ],
                ]
                .concat(),
            }
        }
        Experiment::Probe | Experiment::Attributed | Experiment::Crush | Experiment::Elastic => {
            unreachable!("these experiments have runners of their own")
        }
    }
}

/// The client hosts of a variant, one per rack.
fn clients_of(rig: &Rig, clients: Clients) -> Result<Vec<EmulatedHost>> {
    (1..=RACKS)
        .map(|r| match clients {
            Clients::Own => rig.host(&format!("z{r}-c1")),
            Clients::CoLocated => rig.host(&format!("z{r}-h1")),
        })
        .collect()
}

fn volume_name(variant: usize, client: &EmulatedHost, index: u32, run: u32) -> String {
    format!("v{variant}-r{run}-{}-{index}", client.name)
}

/// fio jobs over `volumes`: each volume split between `jobs` threads, 4 MiB blocks.
fn jobs(volumes: &[String], volume_bytes: u64, jobs: u32, rw: &str, iodepth: u32) -> Vec<Job> {
    volumes
        .iter()
        .map(|volume| Job {
            name: volume.clone(),
            volume: volume.clone(),
            rw: rw.into(),
            block_bytes: BLOCK,
            size_bytes: volume_bytes / u64::from(jobs),
            offset_bytes: 0,
            numjobs: jobs,
            iodepth,
            runtime_seconds: None,
            ..Job::default()
        })
        .collect()
}

/// What one variant measured.
#[derive(Default)]
struct Measured {
    phases: Vec<Phase>,
    /// Share of data objects whose primary is in the client's rack, host; on a conditioned host.
    in_rack: f64,
    in_host: f64,
    on_conditioned: f64,
    /// Share of data objects with any replica on the client's host (what local reads can
    /// read).
    replica_in_host: f64,
    local_reads: (u64, u64),
    /// Per read run: MB the conditioned hosts read from the disk (their blkio groups' counts:
    /// the reads their page cache missed).
    disk_read_mb: Vec<f64>,
    /// The most primaries on one server host over the mean per server host.
    primaries_max_over_mean: f64,
    /// Each server's metrics while the policy chose (the last fill); `None` when not watched.
    fill_metrics: Option<BTreeMap<String, HostMetrics>>,
}

/// Bytes the conditioned hosts' processes read from the disk so far (0 without blkio groups).
fn conditioned_disk_bytes(rig: &Rig) -> u64 {
    CONDITIONED
        .iter()
        .filter_map(|name| rig.emulation().host(name))
        .flat_map(|host| host.cgroups.iter())
        .filter(|dir| dir.to_string_lossy().contains("/blkio/"))
        .filter_map(|dir| optio_local::emulate::cgroup::read_bytes(dir))
        .sum()
}

/// The conditioned hosts' metrics and the other servers'.
fn conditioned_and_others(
    metrics: &BTreeMap<String, HostMetrics>,
) -> (Vec<HostMetrics>, Vec<HostMetrics>) {
    let (conditioned, others): (Vec<_>, Vec<_>) =
        metrics.iter().partition(|(name, _)| CONDITIONED.contains(&name.as_str()));
    (
        conditioned.into_iter().map(|(_, m)| *m).collect(),
        others.into_iter().map(|(_, m)| *m).collect(),
    )
}

/// The mean of `value` over `metrics` (0 for none).
fn mean_of(metrics: &[HostMetrics], value: impl Fn(&HostMetrics) -> f64) -> f64 {
    if metrics.is_empty() {
        return 0.0;
    }
    metrics.iter().map(value).sum::<f64>() / metrics.len() as f64
}

/// Empties the pressured hosts' page cache (their memory groups'), as a program taking
/// their memory would, so that every run's reads of their replicas reach their disks.
fn empty_conditioned_caches(rig: &Rig) -> Result<()> {
    for host in CONDITIONED.iter().filter_map(|name| rig.emulation().host(name)) {
        for dir in &host.cgroups {
            optio_local::emulate::cgroup::drop_page_cache(dir)?;
        }
    }
    Ok(())
}

/// Writes a variant's volumes (its policy at work), watching the servers' metrics where
/// [`Setup::unwatched_because`] allows.
fn fill(
    rig: &Rig,
    setup: &Setup,
    variant_index: usize,
    variant: &Variant,
    run: u32,
) -> Result<Filled> {
    let clients = clients_of(rig, variant.clients)?;
    let mut volumes = Vec::new();
    for client in &clients {
        let names: Vec<String> = (0..setup.volumes_per_client)
            .map(|i| volume_name(variant_index, client, i, run))
            .collect();
        for name in &names {
            rig.create_volume(name, setup.volume_bytes, "data")?;
        }
        volumes.push(names);
    }
    let options = NbdOptions {
        policy: Some(variant.policy.to_string()),
        location: true,
        local_reads: variant.clients == Clients::CoLocated,
    };
    let mut servers = Vec::new();
    for (client, names) in clients.iter().zip(&volumes) {
        servers.push(rig.nbd(client, names, &options)?);
    }
    let (rw, iodepth) = if setup.read { ("write", 4) } else { ("write", 1) };
    let watch = setup.unwatched_because().is_none().then(|| rig.watch_servers());
    let work: Vec<_> = clients
        .iter()
        .zip(&servers)
        .zip(&volumes)
        .map(|((client, nbd), names)| {
            (client, nbd, jobs(names, setup.volume_bytes, setup.jobs_per_volume, rw, iodepth))
        })
        .collect();
    let phase = rig.fio_all(&work);
    let metrics = watch.map(|watch| watch.stop());
    drop(servers);
    Ok(Filled { clients, volumes, phase: phase?, metrics })
}

/// What [`fill`] wrote and saw.
struct Filled {
    clients: Vec<EmulatedHost>,
    /// Each client's volumes.
    volumes: Vec<Vec<String>>,
    phase: Phase,
    /// Each server's metrics while the policy chose (host name → means); `None` when not
    /// watched.
    metrics: Option<BTreeMap<String, HostMetrics>>,
}

/// Where the variant's data objects are, as shares of them.
#[derive(Clone, Copy, Debug, Default)]
struct Shares {
    /// The primary in the client's rack.
    rack: f64,
    /// The primary on the client's host.
    host: f64,
    /// The primary on a conditioned host.
    conditioned: f64,
    /// Any replica on the client's host.
    replica_host: f64,
    /// The most primaries on one server host over the mean per server host.
    max_over_mean: f64,
}

/// Where the variant's data objects' primaries (and replicas) are.
fn placement_shares(
    rig: &Rig,
    clients: &[EmulatedHost],
    volumes: &[Vec<String>],
) -> Result<Shares> {
    let hosts: BTreeMap<u32, String> = rig.device_hosts().into_iter().collect();
    let (mut objects, mut rack, mut host, mut conditioned, mut replica_host) = (0u64, 0, 0, 0, 0);
    let mut per_host: BTreeMap<&str, u64> = hosts.values().map(|name| (name.as_str(), 0)).collect();
    for (client, names) in clients.iter().zip(volumes) {
        for name in names {
            for devices in rig.volume_placement(name)? {
                let Some(primary) = devices.first().and_then(|d| hosts.get(d)) else { continue };
                objects += 1;
                *per_host.entry(primary.as_str()).or_default() += 1;
                rack += u64::from(primary.split('-').next() == Some(client.zone().as_str()));
                host += u64::from(*primary == client.name);
                conditioned += u64::from(CONDITIONED.contains(&primary.as_str()));
                replica_host +=
                    u64::from(devices.iter().any(|d| hosts.get(d) == Some(&client.name)));
            }
        }
    }
    let share = |n: u64| if objects == 0 { 0.0 } else { n as f64 / objects as f64 };
    let most = per_host.values().copied().max().unwrap_or(0);
    let mean = objects as f64 / per_host.len().max(1) as f64;
    Ok(Shares {
        max_over_mean: if objects == 0 { 0.0 } else { most as f64 / mean },
        rack: share(rack),
        host: share(host),
        conditioned: share(conditioned),
        replica_host: share(replica_host),
    })
}

impl Measured {
    fn placed(&mut self, shares: Shares) {
        (self.in_rack, self.in_host, self.on_conditioned, self.replica_in_host) =
            (shares.rack, shares.host, shares.conditioned, shares.replica_host);
        self.primaries_max_over_mean = shares.max_over_mean;
    }
}

/// `local`, `memory`, `cpu`, `latency`, `journal`.
pub fn run(experiment: Experiment, context: &IoContext) -> Result<Report> {
    let setup = setup(experiment, context);
    context.say(format!("{}: starting the emulated cluster…", experiment.name()));
    let rig = Rig::start(&setup.spec, &pools_toml(), &context.dir, |_| {})?;
    let mut measured: Vec<Measured> = setup.variants.iter().map(|_| Measured::default()).collect();
    if setup.read {
        // Fill every variant's volumes (other link rates: filling is not measured), then read.
        let (times, over) = setup.fill_rate();
        let fast = |bits: u64| Some(bits * times / over);
        let racks = &setup.spec.racks[0];
        rig.set_rates(fast(racks.hosts[0].link.bits_per_sec), fast(racks.uplink.bits_per_sec))?;
        let mut filled = Vec::new();
        for (i, variant) in setup.variants.iter().enumerate() {
            context.say(format!("writing the volumes of '{}'…", variant.label()));
            let Filled { clients, volumes, metrics, .. } = fill(&rig, &setup, i, variant, 0)?;
            measured[i].placed(placement_shares(&rig, &clients, &volumes)?);
            measured[i].fill_metrics = metrics;
            filled.push((clients, volumes));
        }
        rig.set_rates(None, None)?;
        for run in 0..setup.runs {
            // Alternate the order, so that neither variant always runs first.
            let order: Vec<usize> = if run % 2 == 0 {
                (0..setup.variants.len()).collect()
            } else {
                (0..setup.variants.len()).rev().collect()
            };
            for i in order {
                let variant = &setup.variants[i];
                context.say(format!(
                    "run {}/{}: reading '{}'…",
                    run + 1,
                    setup.runs,
                    variant.label()
                ));
                let (clients, volumes) = &filled[i];
                let options = NbdOptions {
                    local_reads: variant.clients == Clients::CoLocated,
                    ..NbdOptions::default()
                };
                let mut servers = Vec::new();
                for (client, names) in clients.iter().zip(volumes) {
                    servers.push(rig.nbd(client, names, &options)?);
                }
                let work: Vec<_> = clients
                    .iter()
                    .zip(&servers)
                    .zip(volumes)
                    .map(|((client, nbd), names)| {
                        (
                            client,
                            nbd,
                            jobs(names, setup.volume_bytes, setup.jobs_per_volume, "read", 1),
                        )
                    })
                    .collect();
                if setup.experiment == Experiment::Memory {
                    empty_conditioned_caches(&rig)?;
                }
                let disk_before = conditioned_disk_bytes(&rig);
                let phase = rig.fio_all(&work)?;
                let disk_read = conditioned_disk_bytes(&rig).saturating_sub(disk_before);
                measured[i].disk_read_mb.push(disk_read as f64 / 1e6);
                for mut nbd in servers {
                    let (reads, local) = nbd.stop();
                    measured[i].local_reads.0 += reads;
                    measured[i].local_reads.1 += local;
                }
                measured[i].phases.push(phase);
            }
        }
    } else {
        for run in 0..setup.runs {
            for (i, variant) in setup.variants.iter().enumerate() {
                context.say(format!(
                    "run {}/{}: writing with '{}'…",
                    run + 1,
                    setup.runs,
                    variant.label()
                ));
                let Filled { clients, volumes, phase, metrics } =
                    fill(&rig, &setup, i, variant, run)?;
                measured[i].placed(placement_shares(&rig, &clients, &volumes)?);
                measured[i].fill_metrics = metrics;
                measured[i].phases.push(phase);
            }
        }
    }
    let report = report(&setup, context, &rig, &measured);
    drop(rig);
    Ok(report)
}

fn report(setup: &Setup, context: &IoContext, rig: &Rig, measured: &[Measured]) -> Report {
    let read = setup.read;
    let totals: Vec<Vec<super::fio::Side>> =
        measured.iter().map(|m| m.phases.iter().map(|p| p.total(read)).collect()).collect();
    let mb: Vec<f64> =
        totals.iter().map(|t| median(&t.iter().map(|s| s.mb_per_s).collect::<Vec<_>>())).collect();
    let lat: Vec<f64> = totals
        .iter()
        .map(|t| median(&t.iter().map(|s| s.latency_ms_mean).collect::<Vec<_>>()))
        .collect();
    let baseline_of = |i: usize| {
        // Each variant against the baseline with the same clients.
        setup
            .variants
            .iter()
            .position(|v| v.policy == "first" && v.clients == setup.variants[i].clients)
            .unwrap_or(0)
    };
    let paper_row = |policy: &str| setup.paper.rows.iter().find(|r| r.0 == policy).copied();
    let paper_base = setup.paper.rows[0];
    let mut table = Table::new(
        &format!(
            "{} — {}, {} runs each (medians; range over runs in brackets)",
            setup.experiment.name(),
            if read { "sequential 4 MiB reads" } else { "sequential 4 MiB writes of new objects" },
            setup.runs
        ),
        &[
            "policy",
            "MB/s",
            "vs first",
            "paper vs baseline",
            "mean latency ms",
            "vs first",
            "paper vs baseline",
            "primaries in rack",
            "on conditioned hosts",
            "cross-rack MB",
            "CPU busy %",
        ],
    );
    let mut rows_json = Vec::new();
    for (i, variant) in setup.variants.iter().enumerate() {
        let base = baseline_of(i);
        let throughputs: Vec<f64> = totals[i].iter().map(|s| s.mb_per_s).collect();
        let (lo, hi) = range(&throughputs);
        let cpu: Vec<f64> = measured[i].phases.iter().map(|p| p.cpu.busy_percent).collect();
        let cross: Vec<f64> =
            measured[i].phases.iter().map(|p| p.traffic.cross_rack_bytes as f64 / 1e6).collect();
        let paper = paper_row(variant.policy).filter(|_| variant.clients == Clients::Own);
        let paper_mb = paper.map(|p| change_percent(p.1, paper_base.1));
        let paper_lat = paper.map(|p| change_percent(p.2, paper_base.2));
        let percent = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:+.1}%"));
        table.row(vec![
            variant.label(),
            format!("{:.1} [{lo:.1}–{hi:.1}]", mb[i]),
            format!("{:+.1}%", change_percent(mb[i], mb[base])),
            if setup.experiment == Experiment::Cpu {
                "≈0 (not significant)".into()
            } else {
                percent(paper_mb)
            },
            format!("{:.0}", lat[i]),
            format!("{:+.1}%", change_percent(lat[i], lat[base])),
            if setup.experiment == Experiment::Cpu { "-".into() } else { percent(paper_lat) },
            format!("{:.0}%", measured[i].in_rack * 100.0),
            if matches!(setup.experiment, Experiment::Memory | Experiment::Cpu) {
                format!("{:.0}%", measured[i].on_conditioned * 100.0)
            } else {
                "-".into()
            },
            format!("{:.0}", median(&cross)),
            format!("{:.0}", median(&cpu)),
        ]);
        rows_json.push(json!({
            "policy": variant.policy,
            "clients": match variant.clients { Clients::Own => "client hosts", Clients::CoLocated => "co-located, local reads" },
            "mb_per_s_median": mb[i],
            "mb_per_s_runs": throughputs,
            "latency_ms_mean_median": lat[i],
            "latency_ms_mean_runs": totals[i].iter().map(|s| s.latency_ms_mean).collect::<Vec<_>>(),
            "latency_ms_p50_runs": totals[i].iter().map(|s| s.latency_ms_p50).collect::<Vec<_>>(),
            "change_vs_first_percent": change_percent(mb[i], mb[base]),
            "latency_change_vs_first_percent": change_percent(lat[i], lat[base]),
            "paper_change_percent": paper_mb,
            "paper_latency_change_percent": paper_lat,
            "primaries_in_client_rack": measured[i].in_rack,
            "primaries_on_client_host": measured[i].in_host,
            "primaries_on_conditioned_hosts": measured[i].on_conditioned,
            "objects_with_a_replica_on_client_host": measured[i].replica_in_host,
            "object_reads": measured[i].local_reads.0,
            "local_object_reads": measured[i].local_reads.1,
            "cpu_busy_percent_runs": cpu,
            "cross_rack_mb_runs": cross,
            "conditioned_hosts_disk_read_mb_runs": measured[i].disk_read_mb,
            "primaries_max_over_mean": measured[i].primaries_max_over_mean,
            "server_metrics_while_choosing": measured[i].fill_metrics,
            "server_metrics_not_sampled_because": setup.unwatched_because(),
            "phases": measured[i].phases,
        }));
    }
    let mut notes = vec![format!(
        "scale {} (--scale); the paper's figure: {}",
        context.scale, setup.paper.figure
    )];
    notes.extend(setup.differences.iter().map(|d| format!("differs: {d}")));
    if setup.experiment == Experiment::Memory {
        for (i, variant) in setup.variants.iter().enumerate() {
            notes.push(format!(
                "{}: the pressured hosts read {:.0} MB from the disk per run (median; the reads their page cache missed, at the blkio throttle's rate)",
                variant.label(),
                median(&measured[i].disk_read_mb)
            ));
        }
    }
    if matches!(setup.experiment, Experiment::Memory | Experiment::Cpu) {
        for (i, variant) in setup.variants.iter().enumerate() {
            let Some(fill_metrics) = &measured[i].fill_metrics else { continue };
            let (conditioned, others) = conditioned_and_others(fill_metrics);
            let metric = if setup.experiment == Experiment::Cpu { "CPU" } else { "memory" };
            let pick = |m: &HostMetrics| {
                if setup.experiment == Experiment::Cpu {
                    m.cpu_permille_mean
                } else {
                    m.memory_permille_mean
                }
            };
            notes.push(format!(
                "{}: while it wrote (and its policy chose), the servers reported {metric} at {:.0} ‰ on the conditioned hosts and {:.0} ‰ on the others (means of `optio status` samples); the busiest server host held {:.2}× the mean of primaries",
                variant.label(),
                mean_of(&conditioned, pick),
                mean_of(&others, pick),
                measured[i].primaries_max_over_mean,
            ));
        }
    }
    notes.extend(rig.emulation().describe());
    notes.push("CPU busy %: the whole machine's (/proc/stat) during the measured runs, other users' work included; above ~90 % the cores, not the links, may be the bottleneck".into());
    let relative: Vec<(f64, f64, f64)> = setup
        .variants
        .iter()
        .enumerate()
        .filter(|(i, _)| baseline_of(*i) != *i)
        .map(|(i, v)| {
            let paper = paper_row(v.policy)
                .filter(|_| v.clients == Clients::Own)
                .map_or(0.0, |p| change_percent(p.1, paper_base.1));
            (i as f64, change_percent(mb[i], mb[baseline_of(i)]), paper)
        })
        .collect();
    let names: Vec<String> = setup
        .variants
        .iter()
        .enumerate()
        .filter(|(i, _)| baseline_of(*i) != *i)
        .map(|(_, v)| v.label())
        .collect();
    let plot = Plot {
        title: format!(
            "{}: throughput against `first` (Optio emulated vs the paper)",
            setup.experiment.name()
        ),
        kind: PlotKind::Bars,
        x_label: names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{i}: {n}"))
            .collect::<Vec<_>>()
            .join("   "),
        y_label: if read {
            "read MB/s vs first, %".into()
        } else {
            "write MB/s vs first, %".into()
        },
        series: vec![
            Series {
                name: "Optio (median of runs)".into(),
                points: relative.iter().enumerate().map(|(x, r)| (x as f64, r.1)).collect(),
            },
            Series {
                name: format!("paper ({})", setup.paper.figure),
                points: relative.iter().enumerate().map(|(x, r)| (x as f64, r.2)).collect(),
            },
        ],
        log_x: false,
    };
    Report {
        title: format!("optio bench io {}", setup.experiment.name()),
        tables: vec![table],
        notes: notes.clone(),
        json: json!({
            "experiment": setup.experiment.name(),
            "scale": context.scale,
            "runs": setup.runs,
            "paper_figure": setup.paper.figure,
            "paper": setup.paper.rows.iter().map(|r| json!({"policy": r.0, "mb_per_s": r.1, "latency_ms": r.2})).collect::<Vec<_>>(),
            "differences": setup.differences,
            "emulation": setup.spec.to_toml(),
            "volume_bytes": setup.volume_bytes,
            "volumes_per_client": setup.volumes_per_client,
            "jobs_per_volume": setup.jobs_per_volume,
            "rows": rows_json,
        }),
        plots: vec![plot],
    }
}

/// One run's write latencies, ms (mean, median), and the machine's CPU busy %.
type Latencies = (f64, f64, f64);

/// §5.2: the cost of probing on first writes.
pub fn probe(context: &IoContext) -> Result<Report> {
    let links = Links {
        host: context.host_bits.unwrap_or(200_000_000),
        rack: context.rack_bits.unwrap_or(100_000_000),
        client: context.host_bits.map_or(400_000_000, |h| h * 2),
    };
    let spec = cluster(links, |_| Conditions::default());
    let runs = context.runs(5);
    // 4 KiB first writes are cheap; 4 MiB ones cross the rate-limited links three times.
    let objects = context.scaled(48, 4);
    let big_objects = context.scaled(16, 2);
    context.say("probe: starting the emulated cluster…");
    let rig = Rig::start(&spec, &pools_toml(), &context.dir, |_| {})?;
    let client = rig.host("z1-c1")?;
    // (workload, k) → per-run (mean, median) latency, ms; and CPU.
    let workloads = [
        ("4 KiB first write into a new 4 MiB object", "write:4190208", 4u64 << 10),
        ("4 MiB sequential write", "write", BLOCK),
    ];
    let mut results: BTreeMap<(usize, u8), Vec<Latencies>> = BTreeMap::new();
    for run in 0..runs {
        for (w, (label, rw, block)) in workloads.iter().enumerate() {
            let order: [(u8, &str); 2] = if run % 2 == 0 {
                [(2, "data"), (1, "plain")]
            } else {
                [(1, "plain"), (2, "data")]
            };
            for (k, pool) in order {
                context.say(format!("run {}/{runs}: {label}, k = {k}…", run + 1));
                let name = format!("p{w}-k{k}-r{run}");
                let size = if *block == BLOCK { big_objects } else { objects } * BLOCK;
                rig.create_volume(&name, size, pool)?;
                let nbd = rig.nbd(&client, std::slice::from_ref(&name), &NbdOptions::default())?;
                let job = Job {
                    name: name.clone(),
                    volume: name.clone(),
                    rw: rw.to_string(),
                    block_bytes: *block,
                    size_bytes: size,
                    offset_bytes: 0,
                    numjobs: 1,
                    iodepth: 1,
                    runtime_seconds: None,
                    ..Job::default()
                };
                let measured = rig.fio(&client, &nbd, &[job])?;
                drop(nbd);
                let side = &measured.fio.write;
                results.entry((w, k)).or_default().push((
                    side.latency_ms_mean,
                    side.latency_ms_p50,
                    measured.cpu.busy_percent,
                ));
            }
        }
    }
    let paper = [(39.19, 41.90), (99.69, 102.39)];
    let mut table = Table::new(
        &format!(
            "probe — write latency with k = 2 (probing) against k = 1, {runs} runs of {objects} (4 KiB) and {big_objects} (4 MiB) writes each (client z1-c1; per run, then the median over runs)"
        ),
        &[
            "workload",
            "k=1 mean ms",
            "k=2 mean ms",
            "overhead mean",
            "k=1 median ms",
            "k=2 median ms",
            "overhead median",
            "overhead per run (mean)",
            "paper",
            "CPU busy %",
        ],
    );
    let mut json_rows = Vec::new();
    let mut series = Vec::new();
    for (w, (label, _, _)) in workloads.iter().enumerate() {
        let one = &results[&(w, 1)];
        let two = &results[&(w, 2)];
        let per_run: Vec<f64> =
            one.iter().zip(two).map(|(a, b)| change_percent(b.0, a.0)).collect();
        let per_run_p50: Vec<f64> =
            one.iter().zip(two).map(|(a, b)| change_percent(b.1, a.1)).collect();
        let m = |v: &[Latencies], f: fn(&Latencies) -> f64| {
            median(&v.iter().map(f).collect::<Vec<_>>())
        };
        let cpu: Vec<f64> = one.iter().chain(two).map(|r| r.2).collect();
        let paper_overhead = change_percent(paper[w].1, paper[w].0);
        table.row(vec![
            label.to_string(),
            format!("{:.2}", m(one, |r| r.0)),
            format!("{:.2}", m(two, |r| r.0)),
            format!("{:+.1}%", median(&per_run)),
            format!("{:.2}", m(one, |r| r.1)),
            format!("{:.2}", m(two, |r| r.1)),
            format!("{:+.1}%", median(&per_run_p50)),
            per_run.iter().map(|p| format!("{p:+.1}")).collect::<Vec<_>>().join(" "),
            format!("{paper_overhead:+.1}% ({:.2} → {:.2} ms)", paper[w].0, paper[w].1),
            format!("{:.0}", median(&cpu)),
        ]);
        series.push((label.to_string(), median(&per_run), paper_overhead));
        json_rows.push(json!({
            "workload": label,
            "k1_ms": one.iter().map(|r| json!({"mean": r.0, "median": r.1, "cpu_busy_percent": r.2})).collect::<Vec<_>>(),
            "k2_ms": two.iter().map(|r| json!({"mean": r.0, "median": r.1, "cpu_busy_percent": r.2})).collect::<Vec<_>>(),
            "overhead_mean_percent_runs": per_run,
            "overhead_median_percent_runs": per_run_p50,
            "overhead_mean_percent_median": median(&per_run),
            "overhead_median_percent_median": median(&per_run_p50),
            "paper_overhead_percent": paper_overhead,
        }));
    }
    let differences = vec![
        "the paper: Ceph RBD, a probe per access in the worst case, HDDs with journals (40 ms writes); here: Optio volumes over optio nbd, every first write of an object looks it up and probes its k candidates' primaries across emulated racks".to_string(),
        "links are tbf rate limits without added delay: a probe round trip costs what this machine's network stack costs (tens to hundreds of µs), not a switch hop".into(),
        format!("{objects} first 4 KiB writes and {big_objects} 4 MiB writes per run instead of the paper's (unstated) counts; per-run means and medians in --json (the paper's Fig. 3 is a CDF)"),
    ];
    let mut notes = vec![format!(
        "scale {} (--scale); the paper: seed 000 §5.2, Fig. 3(a)/(b), Table 6",
        context.scale
    )];
    notes.extend(differences.iter().map(|d| format!("differs: {d}")));
    notes.extend(rig.emulation().describe());
    let plot = Plot {
        title: "probe: latency overhead of k = 2 over k = 1 (median of runs)".into(),
        kind: PlotKind::Bars,
        x_label: "0: 4 KiB first write into a new object   1: 4 MiB sequential write".into(),
        y_label: "mean latency overhead, %".into(),
        series: vec![
            Series {
                name: "Optio (median of runs)".into(),
                points: series.iter().enumerate().map(|(x, s)| (x as f64, s.1)).collect(),
            },
            Series {
                name: "paper (Table 6)".into(),
                points: series.iter().enumerate().map(|(x, s)| (x as f64, s.2)).collect(),
            },
        ],
        log_x: false,
    };
    let report = Report {
        title: "optio bench io probe".into(),
        tables: vec![table],
        notes,
        json: json!({
            "experiment": "probe", "scale": context.scale, "runs": runs, "objects_per_run": objects, "big_objects_per_run": big_objects,
            "differences": differences, "emulation": spec.to_toml(), "rows": json_rows,
        }),
        plots: vec![plot],
    };
    drop(rig);
    Ok(report)
}
