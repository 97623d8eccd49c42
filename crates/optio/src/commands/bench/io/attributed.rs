//! Attributed consistent hashing's I/O experiment (seed 003 §4.2.1, Fig. 6a) on an emulated
//! cluster: 3 racks of slow (HDD-like) and fast (SSD-like) devices, random 256 KiB reads by
//! 1, 2, 4… clients with 16 jobs each, on volumes in a `ring`, a `crush`, an `attributed` pool
//! restricted to its capacity strategy, and an `attributed` pool with both strategies.

use std::collections::BTreeMap;

use anyhow::Result;
use optio_local::emulate::EmulatedHost;
use optio_local::emulate::spec::{Conditions, EmulationSpec, HostSpec, Link, RackSpec};
use optio_sim::{Plot, PlotKind, Report, Series, Table};
use serde_json::json;

use super::context::IoContext;
use super::fio::Job;
use super::rig::{NbdOptions, Rig};
use super::stats::{change_percent, median};

const RACKS: u32 = 3;
/// Per rack: two HDD-like hosts, then two SSD-like.
const HDD_HOSTS: u32 = 2;
const SSD_HOSTS: u32 = 2;
/// Emulated device read rates (in the servers: `--emulated-read-rate`) and the bandwidth attributes the map gives them: both
/// 4:1, as a 500 MB/s SSD beside a 125 MB/s HDD.
const HDD_READ_BYTES_PER_SEC: u64 = 4_000_000;
const SSD_READ_BYTES_PER_SEC: u64 = 16_000_000;
const HDD_BANDWIDTH: &str = "125MB/s";
const SSD_BANDWIDTH: &str = "500MB/s";
/// Capacities 4:1 too (a large HDD, a small SSD): the ring and CRUSH weigh by capacity.
const HDD_CAPACITY: u64 = 64 << 30;
const SSD_CAPACITY: u64 = 16 << 30;
/// The paper's fio: 16 jobs per client, 256 KiB requests.
const JOBS: u32 = 16;
const REQUEST: u64 = 256 << 10;
const BLOCK: u64 = 4 << 20;
const BURST_BYTES: u64 = 64 << 10;
/// The most clients (the paper's 16).
const CLIENTS_MAX: u32 = 16;
/// Each measurement's length, seconds.
const MEASURE_SECONDS: u64 = 10;

/// The pools compared: (name, TOML).
fn pools() -> Vec<(&'static str, String)> {
    let rule = "[[rules]]\nid = 0\nname = \"by_zone\"\nsteps = [\"take default\", \"chooseleaf firstn 0 type zone\", \"emit\"]\n\n";
    vec![
        ("ring", format!("{rule}[[pools]]\nid = 1\nname = \"ring\"\nengine = \"ring\"\nsize = 3\nvnode_size = \"1GiB\"\nfailure_domain = \"zone\"\n\n")),
        ("crush", "[[pools]]\nid = 2\nname = \"crush\"\nengine = \"crush\"\nrule = \"by_zone\"\npg_num = 128\nsize = 3\n\n".to_string()),
        ("attributed-capacity", "[[pools]]\nid = 3\nname = \"attributed-capacity\"\nengine = \"attributed\"\nsize = 3\nthrottle = \"1GiB\"\nsector_size = 4\ndistinct_zones = true\nbandwidth_tolerance = 10000\n\n".to_string()),
        ("attributed", "[[pools]]\nid = 4\nname = \"attributed\"\nengine = \"attributed\"\nsize = 3\nthrottle = \"1GiB\"\nsector_size = 4\ndistinct_zones = true\n\n".to_string()),
    ]
}

fn cluster(context: &IoContext, clients_per_rack: u32) -> EmulationSpec {
    let link = |bits: u64| Link { bits_per_sec: bits, burst_bytes: BURST_BYTES };
    let host_bits = context.host_bits.unwrap_or(200_000_000);
    let rack_bits = context.rack_bits.unwrap_or(400_000_000);
    let host = |ssd: bool| HostSpec {
        devices: 1,
        capacity_bytes: if ssd { SSD_CAPACITY } else { HDD_CAPACITY },
        class: Some(if ssd { "ssd" } else { "hdd" }.into()),
        bandwidth_mb_per_sec: Some(
            optio_local::emulate::spec::parse_rate_bits(if ssd {
                SSD_BANDWIDTH
            } else {
                HDD_BANDWIDTH
            })
            .expect("a valid rate")
                / 8_000_000,
        ),
        link: link(host_bits),
        conditions: Conditions {
            server_read_bytes_per_sec: Some(if ssd {
                SSD_READ_BYTES_PER_SEC
            } else {
                HDD_READ_BYTES_PER_SEC
            }),
            ..Conditions::default()
        },
    };
    EmulationSpec {
        racks: (0..RACKS)
            .map(|_| RackSpec {
                uplink: link(rack_bits),
                hosts: (0..HDD_HOSTS)
                    .map(|_| host(false))
                    .chain((0..SSD_HOSTS).map(|_| host(true)))
                    .collect(),
                clients: clients_per_rack,
                client_link: link(host_bits * 2),
            })
            .collect(),
    }
}

/// Client `j` (from 0): round robin over the racks.
fn client_name(j: u32) -> String {
    format!("z{}-c{}", j % RACKS + 1, j / RACKS + 1)
}

/// Runs the experiment.
pub fn run(context: &IoContext) -> Result<Report> {
    let max_clients = ((4.0 * context.scale).round() as u32).clamp(1, CLIENTS_MAX);
    let counts: Vec<u32> = (0..5).map(|i| 1u32 << i).filter(|n| *n <= max_clients).collect();
    let clients_per_rack = max_clients.div_ceil(RACKS);
    let runs = context.runs(2);
    let region = context.scaled(16 << 20, 1 << 20).next_power_of_two();
    let volume_bytes = (region * u64::from(JOBS)).div_ceil(BLOCK) * BLOCK;
    let spec = cluster(context, clients_per_rack);
    let pools = pools();
    let toml: String = pools.iter().map(|(_, t)| t.as_str()).collect();
    context.say("attributed: starting the emulated cluster…");
    let rig = Rig::start(&spec, &toml, &context.dir, |_| {})?;
    let clients: Vec<EmulatedHost> =
        (0..max_clients).map(|j| rig.host(&client_name(j))).collect::<Result<_>>()?;
    // Fill: every client's volume in every pool.
    let racks = &spec.racks[0];
    rig.set_rates(Some(racks.hosts[0].link.bits_per_sec * 4), Some(racks.uplink.bits_per_sec * 4))?;
    let mut on_ssd = BTreeMap::new();
    let hosts: BTreeMap<u32, String> = rig.device_hosts().into_iter().collect();
    let ssd_host = |name: &str| {
        name.rsplit('h').next().and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| n > HDD_HOSTS)
    };
    for (pool, _) in &pools {
        context.say(format!("writing the volumes of pool '{pool}'…"));
        let names: Vec<String> = (0..max_clients).map(|j| format!("a-{pool}-{j}")).collect();
        let mut servers = Vec::new();
        for (client, name) in clients.iter().zip(&names) {
            rig.create_volume(name, volume_bytes, pool)?;
            servers.push(rig.nbd(client, std::slice::from_ref(name), &NbdOptions::default())?);
        }
        let work: Vec<_> = clients
            .iter()
            .zip(&servers)
            .zip(&names)
            .map(|((client, nbd), name)| (client, nbd, vec![write_job(name, volume_bytes)]))
            .collect();
        rig.fio_all(&work)?;
        drop(servers);
        let (mut primaries, mut ssd) = (0u64, 0u64);
        for name in &names {
            for devices in rig.volume_placement(name)? {
                if let Some(host) = devices.first().and_then(|d| hosts.get(d)) {
                    primaries += 1;
                    ssd += u64::from(ssd_host(host));
                }
            }
        }
        on_ssd.insert(*pool, if primaries == 0 { 0.0 } else { ssd as f64 / primaries as f64 });
    }
    rig.set_rates(None, None)?;
    // Measure: for each client count, each pool (order rotated), `runs` times.
    let mut results: BTreeMap<(&str, u32), Vec<(f64, f64)>> = BTreeMap::new();
    for run in 0..runs {
        for &n in &counts {
            let mut order: Vec<usize> = (0..pools.len()).collect();
            order.rotate_left((run as usize + n as usize) % pools.len());
            for i in order {
                let pool = pools[i].0;
                context.say(format!("run {}/{runs}: {n} client(s), pool '{pool}'…", run + 1));
                let mut servers = Vec::new();
                for (j, client) in clients.iter().enumerate().take(n as usize) {
                    let name = format!("a-{pool}-{j}");
                    servers.push(rig.nbd(
                        client,
                        std::slice::from_ref(&name),
                        &NbdOptions::default(),
                    )?);
                }
                let work: Vec<_> = (0..n as usize)
                    .map(|j| {
                        (&clients[j], &servers[j], vec![read_job(&format!("a-{pool}-{j}"), region)])
                    })
                    .collect();
                let phase = rig.fio_all(&work)?;
                drop(servers);
                results
                    .entry((pool, n))
                    .or_default()
                    .push((phase.total(true).mb_per_s, phase.cpu.busy_percent));
            }
        }
    }
    drop(rig);
    Ok(report(context, &spec, &pools, &counts, runs, region, &results, &on_ssd))
}

fn write_job(volume: &str, volume_bytes: u64) -> Job {
    Job {
        name: volume.into(),
        volume: volume.into(),
        rw: "write".into(),
        block_bytes: BLOCK,
        size_bytes: volume_bytes,
        offset_bytes: 0,
        numjobs: 1,
        iodepth: 4,
        runtime_seconds: None,
        ..Job::default()
    }
}

fn read_job(volume: &str, region: u64) -> Job {
    Job {
        name: volume.into(),
        volume: volume.into(),
        rw: "randread".into(),
        block_bytes: REQUEST,
        size_bytes: region,
        offset_bytes: 0,
        numjobs: JOBS,
        iodepth: 1,
        runtime_seconds: Some(MEASURE_SECONDS),
        ..Job::default()
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    context: &IoContext,
    spec: &EmulationSpec,
    pools: &[(&'static str, String)],
    counts: &[u32],
    runs: u32,
    region: u64,
    results: &BTreeMap<(&str, u32), Vec<(f64, f64)>>,
    on_ssd: &BTreeMap<&str, f64>,
) -> Report {
    let mb =
        |pool: &str, n: u32| median(&results[&(pool, n)].iter().map(|r| r.0).collect::<Vec<_>>());
    let cpu =
        |pool: &str, n: u32| median(&results[&(pool, n)].iter().map(|r| r.1).collect::<Vec<_>>());
    let mut headers = vec!["pool".to_string(), "primaries on SSD hosts".to_string()];
    headers.extend(counts.iter().map(|n| format!("{n} client(s) MB/s")));
    headers.push("CPU busy %".into());
    let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut table = Table::new(
        &format!(
            "attributed — aggregate random 256 KiB read bandwidth, {JOBS} jobs per client, {MEASURE_SECONDS} s per run, median of {runs} runs"
        ),
        &header_refs,
    );
    for (pool, _) in pools {
        let mut row = vec![pool.to_string(), format!("{:.0}%", on_ssd[pool] * 100.0)];
        row.extend(counts.iter().map(|n| format!("{:.1}", mb(pool, *n))));
        row.push(
            counts.iter().map(|n| format!("{:.0}", cpu(pool, *n))).collect::<Vec<_>>().join("/"),
        );
        table.row(row);
    }
    let mut gains = Table::new(
        "attributed (capacity + bandwidth strategies) against the others (paper, Fig. 6a: +112 % to +303 % over consistent hashing and CRUSH)",
        &["clients", "vs ring", "vs crush", "vs attributed-capacity"],
    );
    let mut gain_json = Vec::new();
    for &n in counts {
        let a = mb("attributed", n);
        let vs = |other: &str| change_percent(a, mb(other, n));
        gains.row(vec![
            n.to_string(),
            format!("{:+.0}%", vs("ring")),
            format!("{:+.0}%", vs("crush")),
            format!("{:+.0}%", vs("attributed-capacity")),
        ]);
        gain_json.push(json!({"clients": n, "vs_ring_percent": vs("ring"), "vs_crush_percent": vs("crush"), "vs_attributed_capacity_percent": vs("attributed-capacity")}));
    }
    let differences = vec![
        "the paper: Sheepdog, 1 to 16 clients on VMs, 16 jobs each on 100 MB files, real HDDs and SSDs in 3 racks; here: Optio volumes over optio nbd, 3 emulated racks of 2 HDD-like and 2 SSD-like hosts, clients on client hosts".to_string(),
        format!("devices (emulated inside the servers, --emulated-read-rate): every read served at {} MB/s (HDD) or {} MB/s (SSD), one after another, page cache or not, no seek time; the map's bandwidth attributes {HDD_BANDWIDTH} and {SSD_BANDWIDTH}, capacities 64 and 16 GiB (CRUSH weights and ring virtual nodes follow capacity)", HDD_READ_BYTES_PER_SEC / 1_000_000, SSD_READ_BYTES_PER_SEC / 1_000_000),
        format!("each job reads its own {} MiB region (the paper's 100 MB file); clients {:?} (the paper: 1 to 16; --scale 4 runs up to 16)", region >> 20, counts),
        "reads go to each object's primary replica (as Sheepdog's and Ceph's do): what matters is where primaries land".into(),
    ];
    let mut notes =
        vec![format!("scale {}; the paper's figure: seed 003 Fig. 6(a)", context.scale)];
    notes.extend(differences.iter().map(|d| format!("differs: {d}")));
    notes.push("CPU busy %: the machine's, per client count (/)".into());
    let plot = Plot {
        title: "attributed: aggregate random-read bandwidth (Optio, emulated)".into(),
        kind: PlotKind::Line,
        x_label: "clients (16 jobs each)".into(),
        y_label: "MB/s".into(),
        series: pools
            .iter()
            .map(|(pool, _)| Series {
                name: pool.to_string(),
                points: counts.iter().map(|n| (f64::from(*n), mb(pool, *n))).collect(),
            })
            .collect(),
        log_x: false,
    };
    let gain_plot = Plot {
        title: "attributed over ring and crush: Optio (emulated) and the paper's range".into(),
        kind: PlotKind::Line,
        x_label: "clients (16 jobs each)".into(),
        y_label: "bandwidth gain, %".into(),
        series: vec![
            Series {
                name: "Optio: vs ring".into(),
                points: counts
                    .iter()
                    .map(|n| (f64::from(*n), change_percent(mb("attributed", *n), mb("ring", *n))))
                    .collect(),
            },
            Series {
                name: "Optio: vs crush".into(),
                points: counts
                    .iter()
                    .map(|n| (f64::from(*n), change_percent(mb("attributed", *n), mb("crush", *n))))
                    .collect(),
            },
            Series {
                name: "paper: lowest gain (+112 %)".into(),
                points: counts.iter().map(|n| (f64::from(*n), 112.0)).collect(),
            },
            Series {
                name: "paper: highest gain (+303 %)".into(),
                points: counts.iter().map(|n| (f64::from(*n), 303.0)).collect(),
            },
        ],
        log_x: false,
    };
    Report {
        title: "optio bench io attributed".into(),
        tables: vec![table, gains],
        notes,
        json: json!({
            "experiment": "attributed", "scale": context.scale, "runs": runs, "clients": counts,
            "differences": differences, "emulation": spec.to_toml(),
            "pools": pools.iter().map(|(pool, _)| json!({
                "pool": pool,
                "primaries_on_ssd_hosts": on_ssd[pool],
                "runs": counts.iter().map(|n| json!({"clients": n, "mb_per_s": results[&(*pool, *n)].iter().map(|r| r.0).collect::<Vec<_>>(), "cpu_busy_percent": results[&(*pool, *n)].iter().map(|r| r.1).collect::<Vec<_>>(), "mb_per_s_median": mb(pool, *n)})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "gains": gain_json,
            "paper_gain_percent": [112, 303],
        }),
        plots: vec![plot, gain_plot],
    }
}
