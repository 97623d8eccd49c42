//! `optio demo`: the README's tour on the embedded default — a local cluster, data written
//! and read under two policies, and what happened.

use std::path::PathBuf;

use anyhow::{Context, Result};
use optio_client::{ClientConfig, ReplicaState};
use optio_local::cluster::{CRUSH_POOL, LocalCluster, LocalClusterSpec, PLAIN_POOL};

use crate::commands::bench::{payload, read_all, write_all};
use crate::commands::client::{ClusterArgs, ClusterConn};
use crate::output::{self, Table, parse_size};

/// Arguments of `optio demo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Cluster directory (default: a temporary one, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Objects written under each policy.
    #[arg(long, default_value_t = 60)]
    pub objects: usize,
    /// Object size.
    #[arg(long, default_value = "256KiB")]
    pub size: String,
}

pub fn run(args: Args) -> Result<()> {
    crate::commands::init_logging("error");
    let size = parse_size(&args.size).map_err(anyhow::Error::msg)? as usize;
    let (dir, temporary) = match &args.dir {
        Some(dir) => (dir.clone(), false),
        None => (std::env::temp_dir().join(format!("optio-demo-{}", std::process::id())), true),
    };
    let result = demo(&dir, args.objects, size);
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn demo(dir: &std::path::Path, objects: usize, size: usize) -> Result<()> {
    let spec = LocalClusterSpec {
        capacity_bytes: 256 << 20,
        choices: 2,
        policy: "first".into(),
        ..LocalClusterSpec::default()
    };
    let binary = std::env::current_exe().context("cannot find the optio binary")?;
    println!(
        "1. Starting a local cluster: 3 zones × 3 hosts, one {} device each, one server process per host…",
        output::bytes(spec.capacity_bytes as f64)
    );
    let cluster =
        LocalCluster::start(&binary, dir, &spec).context("cannot start the local cluster")?;
    for server in cluster.servers() {
        println!("   {} at {} (pid {})", server.host, server.addr, server.pid().unwrap_or(0));
    }
    let args = ClusterArgs {
        conn: ClusterConn {
            cluster: Some(cluster.dir().to_path_buf()),
            dirty: None,
            identity: Default::default(),
        },
        pool: CRUSH_POOL.into(),
    };
    crate::commands::runtime()?.block_on(async {
        let hidden = indicatif::ProgressBar::hidden();
        let base = args.config()?;
        // Uneven ballast with no choice (k = 1): hashing alone decides.
        let ballast = args.connect_with(base.clone()).await?;
        let keys: Vec<String> = (0..24).map(|i| format!("ballast/{i}")).collect();
        write_all(&ballast, PLAIN_POOL, &keys, payload(2 << 20, 1), 4, &hidden).await?;
        println!("\n2. Wrote 24 ballast objects of 2 MiB in pool 'plain' (k = 1: hashing alone): devices are uneven.");
        let mut used = vec![("after ballast", usage(&ballast).await)];
        let mut summary = Table::new(&["policy", "objects", "cand 0", "cand 1", "write MB/s", "probes/write", "read probes/op", "cold read probes/op"]).left(&[0]);
        for (step, policy) in [(3, "first"), (4, "space")] {
            let client = args.connect_with(ClientConfig { policy: Some(policy.into()), ..base.clone() }).await?;
            let keys: Vec<String> = (0..objects).map(|i| format!("{policy}/{i}")).collect();
            let (write, candidates) = write_all(&client, CRUSH_POOL, &keys, payload(size, step), 4, &hidden).await?;
            let read = read_all(&client, CRUSH_POOL, &keys, size, 4, &hidden).await?;
            // A fresh client has an empty cache: one probe (the home) per object.
            let cold = args.connect_with(ClientConfig { policy: Some(policy.into()), ..base.clone() }).await?;
            let cold_read = read_all(&cold, CRUSH_POOL, &keys, size, 4, &hidden).await?;
            let on = |c: u8| candidates.iter().filter(|&&x| x == c).count().to_string();
            summary.row(vec![policy.into(), objects.to_string(), on(0), on(1), format!("{:.1}", write.mb_per_s), format!("{:.2}", write.probes_per_op), format!("{:.2}", read.probes_per_op), format!("{:.2}", cold_read.probes_per_op)]);
            println!("\n{step}. Wrote and read back {objects} objects of {} with k = 2, policy '{policy}'.", output::bytes(size as f64));
            used.push((if policy == "first" { "after 'first'" } else { "after 'space'" }, usage(&client).await));
        }
        println!("\nWhat happened:\n");
        print!("{}", summary.render());
        println!("\n'first' always takes candidate 0, like plain hashing; 'space' takes the candidate whose fullest device is emptier. A write probes both candidates' primaries (2 probes); a cached read sends none; a read with an empty cache asks the object's home only (1 probe).\n");
        let mut table = Table::new(&["device", "location", "after ballast", "after 'first'", "after 'space'"]).left(&[0, 1]);
        let map = ballast.map();
        for device in map.devices() {
            let location: Vec<String> = map.location(device.id).iter().map(|(_, n)| n.to_string()).collect();
            let mut row = vec![device.name.clone(), location.join("/")];
            for (_, u) in &used {
                row.push(format!("{:.1} MiB", u.get(&device.id.0).copied().unwrap_or(0) as f64 / (1 << 20) as f64));
            }
            table.row(row);
        }
        print!("{}", table.render());
        let spread = |u: &std::collections::BTreeMap<u32, u64>| {
            let max = u.values().copied().max().unwrap_or(0) as f64;
            let min = u.values().copied().min().unwrap_or(0) as f64;
            (max - min) / (1 << 20) as f64
        };
        println!("\nmax − min device usage: {:.1} MiB after 'first', {:.1} MiB after 'space' (the fullest device limits a hash-placed cluster).", spread(&used[1].1), spread(&used[2].1));

        // A flipped byte on disk: detected by the checksum, repaired from another replica.
        let client = args.connect_with(base.clone()).await?;
        let key = "first/0";
        let location = client.stat(CRUSH_POOL, key).await?;
        let primary = location.candidate.devices[0].0;
        let file = optio_server::store::object_path(&cluster.device_dir(primary)?, optio_placement::PoolId(1), key);
        let mut bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        std::fs::write(&file, &bytes)?;
        println!("\n5. Flipped one bit of '{key}' on its primary (device {primary}, {}).", file.display());
        let data = client.get(CRUSH_POOL, key).await?;
        let stats = client.stats();
        println!("   Read it back: {} bytes, intact; the server found {} corrupt replica(s), the client repaired {}.", data.len(), stats.corrupt_replicas, stats.repairs);
        let states = client.verify(CRUSH_POOL, key).await?;
        let good = states.iter().filter(|(_, s)| *s == ReplicaState::Good).count();
        println!("   Verified every replica: {good} of {} intact.", states.len());
        Ok::<_, anyhow::Error>(())
    })?;
    println!("\n6. Stopping the servers.");
    drop(cluster);
    Ok(())
}

async fn usage(client: &optio_client::Client) -> std::collections::BTreeMap<u32, u64> {
    let map = client.map();
    let mut out = std::collections::BTreeMap::new();
    for device in map.devices() {
        let addr = device.addr.clone().unwrap_or_default();
        let used = optio_status_used(&addr, device.id.0).unwrap_or(0);
        out.insert(device.id.0, used);
    }
    out
}

/// Bytes used on `device`, from its server's `/v1/status`.
fn optio_status_used(addr: &str, device: u32) -> Option<u64> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.write_all(b"GET /v1/status HTTP/1.0\r\nHost: optio\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let body = text.split("\r\n\r\n").nth(1)?;
    let status: optio_proto::ServerStatus = serde_json::from_str(body).ok()?;
    status.devices.iter().find(|d| d.metrics.device == device).map(|d| d.metrics.used_bytes)
}
