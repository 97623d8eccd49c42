//! CHOICE's `local` policy (Li & Xu, §5.1 and §5.3): clients co-located with storage write
//! objects to the candidate whose primary is closest, so that reads — served by the primary —
//! stay in the rack.
//!
//! A cluster of racks × hosts × disks, a `crush` pool (replicas on distinct hosts), and clients
//! on the hosts. Each client writes its objects (with `first`: where they hash; with `local`:
//! the candidate whose primary shares most location levels with the client), then reads them
//! back. Two scenarios: clients in every rack, and clients in the first rack only (the paper's
//! production test, where the price of locality — data piling up in one rack — shows).

use std::fmt::Write as _;

use optio_placement::choice::{Candidates, ChoiceRequest, DeviceMetrics, Location, MetricsTable};
use optio_placement::stats::Summary;
use optio_placement::{
    ChoiceSettings, ClusterMap, ClusterMapBuilder, DeviceId, DeviceSpec, Placement, PolicySpec,
    PoolSpec, ReplicaSet,
};
use serde_json::json;

use crate::report::{Plot, PlotKind, Report, Series, Table};
use crate::{Progress, SimError};

/// Most objects one client writes (bounds the run time).
const OBJECTS_PER_CLIENT_MAX: u64 = 10_000_000;

/// Parameters of `optio sim local`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Racks.
    #[arg(long, default_value_t = 3)]
    pub racks: u32,
    /// Hosts per rack.
    #[arg(long, default_value_t = 5)]
    pub hosts_per_rack: u32,
    /// Disks per host.
    #[arg(long, default_value_t = 4)]
    pub disks_per_host: u32,
    /// Clients per rack (each on a host of its rack, round robin).
    #[arg(long, default_value_t = 5)]
    pub clients_per_rack: u32,
    /// PGs of the pool.
    #[arg(long, default_value_t = 2048)]
    pub pg_num: u32,
    /// Replicas.
    #[arg(long, default_value_t = 3)]
    pub size: u32,
    /// Objects each client writes and reads back.
    #[arg(long, default_value_t = 20_000)]
    pub objects_per_client: u64,
    /// Bytes per object (4 MiB, as the paper's images).
    #[arg(long, default_value_t = 4 << 20)]
    pub object_bytes: u64,
    /// Largest k.
    #[arg(long, default_value_t = 4)]
    pub max_choices: u32,
}

/// One run's outcome.
#[derive(Clone, Debug, Default)]
struct Outcome {
    reads: u64,
    in_rack: u64,
    in_host: u64,
    /// Copies per disk: max / mean.
    copies_max_over_mean: f64,
    /// Share of copies in the first rack.
    first_rack_share: f64,
}

fn check(args: &Args) -> Result<(), SimError> {
    let bad =
        |parameter: &'static str, reason: String| Err(SimError::Parameter { parameter, reason });
    if args.racks == 0
        || args.hosts_per_rack == 0
        || args.disks_per_host == 0
        || args.clients_per_rack == 0
    {
        return bad(
            "--racks/--hosts-per-rack/--disks-per-host/--clients-per-rack",
            "must be positive".into(),
        );
    }
    let hosts = args.racks * args.hosts_per_rack;
    if args.size == 0 || args.size > hosts {
        return bad("--size", format!("between 1 and the number of hosts ({hosts})"));
    }
    if !(1..=OBJECTS_PER_CLIENT_MAX).contains(&args.objects_per_client) {
        return bad("--objects-per-client", format!("between 1 and {OBJECTS_PER_CLIENT_MAX}"));
    }
    if args.max_choices < 2 || args.max_choices > optio_placement::choice::CHOICES_MAX {
        return bad(
            "--max-choices",
            format!("between 2 and {}", optio_placement::choice::CHOICES_MAX),
        );
    }
    Ok(())
}

fn cluster(args: &Args, choices: u32, policy: PolicySpec) -> Result<ClusterMap, SimError> {
    let mut builder = ClusterMapBuilder::new();
    let mut id = 0;
    for rack in 0..args.racks {
        for host in 0..args.hosts_per_rack {
            let (rack, host) = (format!("rack{rack}"), format!("rack{rack}-host{host}"));
            for _ in 0..args.disks_per_host {
                builder =
                    builder.device(DeviceSpec::new(id).at(&[("rack", &rack), ("host", &host)]));
                id += 1;
            }
        }
    }
    let mut pool = PoolSpec::crush(1, "volumes", args.pg_num, args.size);
    pool.choice = ChoiceSettings::new(choices, policy);
    Ok(builder.replicated_rule(0, "replicated_rule", "default", "host").pool(pool).build()?)
}

/// The rack of a device (devices are numbered rack by rack).
fn rack_of(args: &Args, device: DeviceId) -> u32 {
    device.0 / (args.hosts_per_rack * args.disks_per_host)
}

fn host_of(args: &Args, device: DeviceId) -> u32 {
    device.0 / args.disks_per_host
}

fn simulate(
    args: &Args,
    choices: u32,
    policy: PolicySpec,
    client_racks: u32,
) -> Result<Outcome, SimError> {
    let map = cluster(args, choices, policy)?;
    let placement = Placement::new(&map)?;
    let pool = placement.pool_by_name("volumes").expect("built with this pool");
    let mut scratch = placement.scratch();
    let pg_devices: Vec<ReplicaSet> = (0..args.pg_num)
        .map(|seed| {
            let mut set = ReplicaSet::new();
            pool.place(pool.pg_key(seed), &mut scratch, &mut set);
            set
        })
        .collect();
    let mut metrics = MetricsTable::new(map.max_devices());
    for device in map.devices() {
        let m = DeviceMetrics {
            location: Location::of_device(&map, device.id),
            ..DeviceMetrics::default()
        };
        metrics.set(device.id, m).expect("within the table");
    }
    let mut copies = vec![0f64; map.devices().len()];
    let mut outcome = Outcome::default();
    let (mut candidates, mut name) = (Candidates::new(), String::new());
    for rack in 0..client_racks {
        for client in 0..args.clients_per_rack {
            let host = client % args.hosts_per_rack;
            let client_host = rack * args.hosts_per_rack + host;
            let location = Location::from_levels([
                ("rack", format!("rack{rack}").as_str()),
                ("host", format!("rack{rack}-host{host}").as_str()),
            ]);
            let request = ChoiceRequest { policy: None, client: Some(&location) };
            for n in 0..args.objects_per_client {
                name.clear();
                let _ = write!(name, "rbd_data.r{rack}c{client}.{n:016x}");
                pool.candidates_with(&name, &mut candidates, |key, devices| {
                    *devices = pg_devices[key.pg.map_or(0, |pg| pg.seed as usize)];
                });
                let chosen = pool
                    .choose(&candidates, &metrics, &request)
                    .map_err(|e| SimError::Input(e.to_string()))?;
                let (_, devices) =
                    candidates.get(usize::from(chosen.key.index)).expect("chosen from the set");
                for device in devices.devices() {
                    copies[device.0 as usize] += 1.0;
                }
                let primary = devices.primary().expect("an eligible candidate has a primary");
                outcome.reads += 1;
                outcome.in_rack += u64::from(rack_of(args, primary) == rack);
                outcome.in_host += u64::from(host_of(args, primary) == client_host);
            }
        }
    }
    let per_rack = (args.hosts_per_rack * args.disks_per_host) as usize;
    let total: f64 = copies.iter().sum();
    outcome.first_rack_share = copies[..per_rack].iter().sum::<f64>() / total.max(1.0);
    outcome.copies_max_over_mean = Summary::of(&copies).max_over_mean;
    Ok(outcome)
}

fn gib(bytes: f64) -> String {
    format!("{:.1}", bytes / f64::from(1u32 << 30))
}

/// Runs the experiment.
pub fn run(args: &Args, progress: &mut dyn Progress) -> Result<Report, SimError> {
    check(args)?;
    let mut tables = Vec::new();
    let mut json_scenarios = Vec::new();
    let mut series = Vec::new();
    let scenarios = [("clients in every rack", args.racks), ("clients in the first rack only", 1)];
    progress.start("simulating", (scenarios.len() as u64) * u64::from(args.max_choices));
    for (title, client_racks) in scenarios {
        let mut table = Table::new(
            &format!("{title}: reads served by the primary"),
            &[
                "policy",
                "k",
                "in-rack reads",
                "in-host reads",
                "cross-rack GiB",
                "saved GiB",
                "copies max/mean",
                "copies in rack0",
            ],
        );
        let mut rows = Vec::new();
        let mut points = Vec::new();
        let mut baseline_cross = 0.0;
        for k in 1..=args.max_choices {
            let policy = if k == 1 { PolicySpec::First } else { PolicySpec::Local };
            let outcome = simulate(args, k, policy, client_racks)?;
            progress.advance(1);
            let reads = outcome.reads.max(1) as f64;
            let cross = (outcome.reads - outcome.in_rack) as f64 * args.object_bytes as f64;
            if k == 1 {
                baseline_cross = cross;
            }
            table.row(vec![
                policy.name().into(),
                k.to_string(),
                format!("{:.1}%", outcome.in_rack as f64 / reads * 100.0),
                format!("{:.1}%", outcome.in_host as f64 / reads * 100.0),
                gib(cross),
                gib(baseline_cross - cross),
                format!("{:.3}", outcome.copies_max_over_mean),
                format!("{:.1}%", outcome.first_rack_share * 100.0),
            ]);
            rows.push(json!({
                "policy": policy.name(), "k": k, "reads": outcome.reads,
                "in_rack_share": outcome.in_rack as f64 / reads,
                "in_host_share": outcome.in_host as f64 / reads,
                "cross_rack_bytes": cross, "cross_rack_bytes_saved": baseline_cross - cross,
                "copies_max_over_mean": outcome.copies_max_over_mean,
                "first_rack_copy_share": outcome.first_rack_share,
            }));
            points.push((f64::from(k), outcome.in_rack as f64 / reads * 100.0));
        }
        tables.push(table);
        json_scenarios
            .push(json!({ "scenario": title, "client_racks": client_racks, "rows": rows }));
        series.push(Series { name: title.into(), points });
    }
    Ok(Report {
        title: format!(
            "local: {} racks x {} hosts x {} disks, {} clients per rack, {} objects of {} MiB each, pool of {} PGs x {} replicas",
            args.racks, args.hosts_per_rack, args.disks_per_host, args.clients_per_rack,
            args.objects_per_client, args.object_bytes >> 20, args.pg_num, args.size
        ),
        tables,
        notes: vec![
            "k = 1 is plain hashing (first); k ≥ 2 uses the local policy (most location levels shared with the client's primary).".into(),
            format!(
                "With first, a read stays in the rack with probability 1/racks ({:.1}%); with local and k candidates, 1 - (1 - 1/racks)^k.",
                100.0 / f64::from(args.racks)
            ),
            "copies max/mean: data per disk, the price of locality when clients are not spread evenly.".into(),
        ],
        json: json!({ "experiment": "local", "racks": args.racks, "hosts_per_rack": args.hosts_per_rack,
            "disks_per_host": args.disks_per_host, "clients_per_rack": args.clients_per_rack,
            "objects_per_client": args.objects_per_client, "object_bytes": args.object_bytes,
            "pg_num": args.pg_num, "size": args.size, "scenarios": json_scenarios }),
        plots: vec![Plot {
            title: "reads served in the client's rack".into(),
            kind: PlotKind::Line,
            x_label: "choices (k; 1 = first)".into(),
            y_label: "in-rack reads (%)".into(),
            series,
            log_x: false,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    #[test]
    fn local_keeps_reads_in_the_rack_as_predicted() {
        let args = Args {
            racks: 3,
            hosts_per_rack: 3,
            disks_per_host: 2,
            clients_per_rack: 2,
            pg_num: 256,
            size: 3,
            objects_per_client: 3000,
            object_bytes: 1 << 20,
            max_choices: 3,
        };
        let report = run(&args, &mut NoProgress).expect("runs");
        let rows = report.json["scenarios"][0]["rows"].as_array().expect("rows");
        let share = |k: usize| rows[k - 1]["in_rack_share"].as_f64().expect("number");
        for k in 1..=3 {
            let predicted = 1.0 - (2.0f64 / 3.0).powi(k as i32);
            assert!((share(k) - predicted).abs() < 0.05, "k = {k}: {} vs {predicted}", share(k));
        }
        assert!(rows[1]["cross_rack_bytes_saved"].as_f64().expect("number") > 0.0);
        let one_rack = report.json["scenarios"][1]["rows"].as_array().expect("rows");
        let share_of_rack0 =
            |k: usize| one_rack[k - 1]["first_rack_copy_share"].as_f64().expect("number");
        assert!(share_of_rack0(3) > share_of_rack0(1) + 0.05, "clients in rack0 pull data there");
        assert!(run(&Args { max_choices: 1, ..args.clone() }, &mut NoProgress).is_err());
    }
}
