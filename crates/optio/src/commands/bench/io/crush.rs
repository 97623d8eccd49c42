//! Optimised CRUSH's I/O effect (seed 002's Table 2: +12–13 % read throughput from a more even
//! PG spread), which the paper shows on Ceph and Optio's simulations only imply: 12 slow
//! devices in 3 emulated racks, random reads on volumes, once per placement — plain CRUSH,
//! seed 002's (congruential pps, linear buckets, searched balance parameter) and Optio's
//! incremental balanced placement — each on a cluster of its own. Reads go to primaries, so
//! the busiest device's share of the bytes served bounds the aggregate throughput.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use optio_local::emulate::spec::{Conditions, EmulationSpec};
use optio_placement::{Placement, ReplicaSet};
use optio_sim::{Plot, PlotKind, Report, Series, Table};
use serde_json::json;

use super::context::IoContext;
use super::fio::Job;
use super::rig::{NbdOptions, Rig};
use super::stats::{change_percent, median};

const RACKS: u32 = 3;
const HOSTS_PER_RACK: u32 = 4;
/// Every device serves reads at this rate (emulated inside its server).
const DEVICE_READ_BYTES_PER_SEC: u64 = 6_000_000;
const PG_NUM: u32 = 128;
const JOBS: u32 = 16;
const REQUEST: u64 = 256 << 10;
const BLOCK: u64 = 4 << 20;
const BURST_BYTES: u64 = 64 << 10;
const MEASURE_SECONDS: u64 = 12;

/// The methods: (name, the map's rules, buckets and pool).
fn methods() -> Vec<(&'static str, String)> {
    let rule = "[[rules]]\nid = 0\nname = \"by_zone\"\nsteps = [\"take default\", \"chooseleaf firstn 0 type zone\", \"emit\"]\n\n";
    let pool = |extra: &str| {
        format!(
            "[[pools]]\nid = 1\nname = \"data\"\nengine = \"crush\"\nrule = \"by_zone\"\npg_num = {PG_NUM}\nsize = 3\n{extra}\n"
        )
    };
    // Seed 002's linear buckets one level above the devices: here the racks (zones) pick a
    // host of one device each (the paper's hosts picked among 10 devices).
    let linear: String = (1..=RACKS)
        .map(|r| format!("[[buckets]]\nname = \"z{r}\"\ntype = \"zone\"\nalg = \"linear\"\n\n"))
        .collect();
    vec![
        ("crush", format!("{rule}{}", pool(""))),
        (
            "seed 002",
            format!("{linear}{rule}{}", pool("pps = \"congruential\"\nbalance_param = \"auto\"")),
        ),
        ("incremental", format!("{rule}{}", pool("balanced = \"incremental\""))),
    ]
}

fn cluster(context: &IoContext) -> EmulationSpec {
    super::rig::uniform_spec(
        RACKS,
        HOSTS_PER_RACK,
        context.host_bits.unwrap_or(200_000_000),
        context.rack_bits.unwrap_or(400_000_000),
        BURST_BYTES,
        &Conditions {
            server_read_bytes_per_sec: Some(DEVICE_READ_BYTES_PER_SEC),
            ..Conditions::default()
        },
    )
}

/// PG copies and primary PGs per device of the map's pool `data`.
fn spread(map: &optio_placement::ClusterMap) -> Result<(Vec<u64>, Vec<u64>)> {
    let placement = Placement::new(map).context("the cluster's map places")?;
    let pool = placement.pool_by_name("data").context("the map has pool data")?;
    let mut copies = vec![0u64; map.max_devices() as usize];
    let mut primaries = vec![0u64; map.max_devices() as usize];
    let (mut scratch, mut set) = (placement.scratch(), ReplicaSet::new());
    for seed in 0..pool.pool().pg_num {
        pool.place(pool.pg_key(seed), &mut scratch, &mut set);
        for device in set.devices() {
            copies[device.0 as usize] += 1;
        }
        if let Some(primary) = set.primary() {
            primaries[primary.0 as usize] += 1;
        }
    }
    let usable: Vec<usize> = map.devices().iter().map(|d| d.id.0 as usize).collect();
    Ok((
        usable.iter().map(|d| copies[*d]).collect(),
        usable.iter().map(|d| primaries[*d]).collect(),
    ))
}

fn max_over_mean(values: &[u64]) -> f64 {
    let mean = values.iter().sum::<u64>() as f64 / values.len().max(1) as f64;
    values.iter().copied().max().unwrap_or(0) as f64 / mean.max(1e-9)
}

/// What one method measured.
struct Measured {
    name: &'static str,
    copies_max_over_mean: f64,
    primaries_max_over_mean: f64,
    object_primaries_max_over_mean: f64,
    runs: Vec<(f64, f64, f64)>,
}

/// Runs the experiment.
pub fn run(context: &IoContext) -> Result<Report> {
    let spec = cluster(context);
    let runs = context.runs(3);
    let region = context.scaled(16 << 20, 1 << 20).next_power_of_two();
    let volume_bytes = (region * u64::from(JOBS)).div_ceil(BLOCK) * BLOCK;
    let mut measured = Vec::new();
    for (name, toml) in methods() {
        context.say(format!("crush: '{name}': starting the emulated cluster…"));
        let rig = Rig::start(&spec, &toml, &context.dir, |_| {})?;
        let map = rig.cluster().load_map()?;
        let (copies, primaries) = spread(&map)?;
        let clients: Vec<_> =
            (1..=RACKS).map(|r| rig.host(&format!("z{r}-c1"))).collect::<Result<_>>()?;
        let volumes: Vec<String> = (1..=RACKS).map(|r| format!("c-{r}")).collect();
        rig.set_rates(
            Some(spec.racks[0].hosts[0].link.bits_per_sec * 4),
            Some(spec.racks[0].uplink.bits_per_sec * 4),
        )?;
        let mut servers = Vec::new();
        for (client, volume) in clients.iter().zip(&volumes) {
            rig.create_volume(volume, volume_bytes, "data")?;
            servers.push(rig.nbd(client, std::slice::from_ref(volume), &NbdOptions::default())?);
        }
        context.say(format!("crush: '{name}': writing the volumes…"));
        let work: Vec<_> = clients
            .iter()
            .zip(&servers)
            .zip(&volumes)
            .map(|((c, nbd), v)| (c, nbd, vec![job(v, "write", BLOCK, volume_bytes, 1, 4, None)]))
            .collect();
        rig.fio_all(&work)?;
        drop(servers);
        rig.set_rates(None, None)?;
        // Primaries of the objects actually written.
        let hosts: BTreeMap<u32, String> = rig.device_hosts().into_iter().collect();
        let mut per_device: BTreeMap<u32, u64> = hosts.keys().map(|d| (*d, 0)).collect();
        for volume in &volumes {
            for devices in rig.volume_placement(volume)? {
                if let Some(primary) = devices.first() {
                    *per_device.entry(*primary).or_default() += 1;
                }
            }
        }
        let object_primaries: Vec<u64> = per_device.values().copied().collect();
        let server_links: Vec<usize> = rig
            .emulation()
            .links()
            .iter()
            .enumerate()
            .filter(|(_, l)| l.name.ends_with(" up") && l.name.contains("-h"))
            .map(|(i, _)| i)
            .collect();
        let mut method_runs = Vec::new();
        for run in 0..runs {
            context.say(format!("crush: '{name}': run {}/{runs}…", run + 1));
            let mut servers = Vec::new();
            for (client, volume) in clients.iter().zip(&volumes) {
                servers.push(rig.nbd(
                    client,
                    std::slice::from_ref(volume),
                    &NbdOptions::default(),
                )?);
            }
            let before = rig.emulation().sent_bytes()?;
            let work: Vec<_> = clients
                .iter()
                .zip(&servers)
                .zip(&volumes)
                .map(|((c, nbd), v)| {
                    (
                        c,
                        nbd,
                        vec![job(v, "randread", REQUEST, region, JOBS, 1, Some(MEASURE_SECONDS))],
                    )
                })
                .collect();
            let phase = rig.fio_all(&work)?;
            let after = rig.emulation().sent_bytes()?;
            drop(servers);
            let served: Vec<u64> =
                server_links.iter().map(|i| after[*i].saturating_sub(before[*i])).collect();
            let total: u64 = served.iter().sum();
            let busiest = served.iter().copied().max().unwrap_or(0) as f64 / total.max(1) as f64;
            method_runs.push((phase.total(true).mb_per_s, busiest, phase.cpu.busy_percent));
        }
        measured.push(Measured {
            name,
            copies_max_over_mean: max_over_mean(&copies),
            primaries_max_over_mean: max_over_mean(&primaries),
            object_primaries_max_over_mean: max_over_mean(&object_primaries),
            runs: method_runs,
        });
        drop(rig);
    }
    Ok(report(context, &spec, runs, region, &measured))
}

#[allow(clippy::too_many_arguments)]
fn job(
    volume: &str,
    rw: &str,
    block: u64,
    size: u64,
    numjobs: u32,
    iodepth: u32,
    runtime: Option<u64>,
) -> Job {
    Job {
        name: volume.into(),
        volume: volume.into(),
        rw: rw.into(),
        block_bytes: block,
        size_bytes: size,
        offset_bytes: 0,
        numjobs,
        iodepth,
        runtime_seconds: runtime,
        ..Job::default()
    }
}

fn report(
    context: &IoContext,
    spec: &EmulationSpec,
    runs: u32,
    region: u64,
    measured: &[Measured],
) -> Report {
    let devices = (RACKS * HOSTS_PER_RACK) as f64;
    let mut table = Table::new(
        &format!(
            "crush — random 256 KiB reads, 3 clients × {JOBS} jobs, {MEASURE_SECONDS} s per run, median of {runs} runs; {PG_NUM} PGs × 3 replicas on {} devices",
            RACKS * HOSTS_PER_RACK
        ),
        &[
            "placement",
            "PG copies max/mean",
            "primary PGs max/mean",
            "objects' primaries max/mean",
            "busiest device's share of bytes served",
            "MB/s",
            "vs crush",
            "paper (read, vs crush)",
            "CPU busy %",
        ],
    );
    let mb: Vec<f64> =
        measured.iter().map(|m| median(&m.runs.iter().map(|r| r.0).collect::<Vec<_>>())).collect();
    let mut rows = Vec::new();
    for (i, m) in measured.iter().enumerate() {
        let share = median(&m.runs.iter().map(|r| r.1).collect::<Vec<_>>());
        let cpu = median(&m.runs.iter().map(|r| r.2).collect::<Vec<_>>());
        table.row(vec![
            m.name.into(),
            format!("{:.3}", m.copies_max_over_mean),
            format!("{:.3}", m.primaries_max_over_mean),
            format!("{:.3}", m.object_primaries_max_over_mean),
            format!("{:.1}% (even: {:.1}%)", share * 100.0, 100.0 / devices),
            format!("{:.1}", mb[i]),
            format!("{:+.1}%", change_percent(mb[i], mb[0])),
            if m.name == "seed 002" {
                "+12 % (10 MB) to +13 % (128 KB)".into()
            } else {
                "-".into()
            },
            format!("{cpu:.0}"),
        ]);
        rows.push(json!({
            "placement": m.name,
            "pg_copies_max_over_mean": m.copies_max_over_mean,
            "primary_pgs_max_over_mean": m.primaries_max_over_mean,
            "object_primaries_max_over_mean": m.object_primaries_max_over_mean,
            "busiest_share_runs": m.runs.iter().map(|r| r.1).collect::<Vec<_>>(),
            "mb_per_s_runs": m.runs.iter().map(|r| r.0).collect::<Vec<_>>(),
            "cpu_busy_percent_runs": m.runs.iter().map(|r| r.2).collect::<Vec<_>>(),
            "mb_per_s_median": mb[i],
        }));
    }
    let differences = vec![
        "the paper: Ceph, 40 OSDs on 4 hosts, 2048 PGs, COSBench with 100 M objects of 128 KB or 1 M of 10 MB; here: 12 emulated devices (one per host, 4 hosts in each of 3 racks), 128 PGs, random 256 KiB reads of volumes by 3 clients".to_string(),
        format!("every device (emulated inside its server, --emulated-read-rate): reads served at {} MB/s one after another, page cache or not, no seek time, so that devices, not links, bound the throughput", DEVICE_READ_BYTES_PER_SEC / 1_000_000),
        "seed 002's linear buckets are the racks here (choosing among 4 hosts of one device each); the paper's were hosts of 10 devices".into(),
        format!("each job reads its own {} MiB region of its client's volume", region >> 20),
        "the busiest device's share is measured from its host link's bytes sent (tc counters) during the reads".into(),
    ];
    let mut notes = vec![format!(
        "scale {}; the paper: seed 002 Table 2 (read throughput +12–13 %) and Figs. 4–5 (PG spread)",
        context.scale
    )];
    notes.extend(differences.iter().map(|d| format!("differs: {d}")));
    let plot = Plot {
        title: "crush: read throughput against plain CRUSH (Optio emulated vs seed 002)".into(),
        kind: PlotKind::Bars,
        x_label: "0: seed 002   1: incremental".into(),
        y_label: "read MB/s vs crush, %".into(),
        series: vec![
            Series {
                name: "Optio (median of runs)".into(),
                points: (1..measured.len())
                    .map(|i| ((i - 1) as f64, change_percent(mb[i], mb[0])))
                    .collect(),
            },
            Series {
                name: "paper (seed 002, 10 MB reads: +12 %)".into(),
                points: vec![(0.0, 12.0)],
            },
        ],
        log_x: false,
    };
    Report {
        title: "optio bench io crush".into(),
        tables: vec![table],
        notes,
        json: json!({"experiment": "crush", "scale": context.scale, "runs": runs, "differences": differences, "emulation": spec.to_toml(), "rows": rows, "paper_read_gain_percent": [12, 13]}),
        plots: vec![plot],
    }
}
