//! Rebalancing proves: after a map change (a device out, back in, removed) servers move data to
//! where the new map places it and every acknowledged object reads back intact — during the
//! move and after; a delete made while data moves stays deleted; a server restarted in the
//! middle resumes; the CLI refuses to remove a device holding the only copy of something.

use std::collections::BTreeMap;
use std::time::Duration;

use optio_client::{ClientError, Patch, Written};
use optio_local::cluster::LocalClusterSpec;
use optio_placement::{DeviceId, MapChange};

use crate::{client, cluster, data, runtime, small, statuses, support, wait_settled};

const POOLS: [&str; 5] = ["data", "blobs", "hetero", "elastic", "balanced"];

fn objects_per_pool() -> usize {
    24
}

/// Writes `objects_per_pool` objects of `len` bytes in every pool; returns (pool, key, index).
async fn fill(client: &optio_client::Client, len: usize) -> Vec<(&'static str, String, usize)> {
    let mut written = Vec::new();
    for (p, pool) in POOLS.iter().enumerate() {
        for i in 0..objects_per_pool() {
            let index = p * 1000 + i;
            let key = format!("obj/{pool}/{i}");
            client.put(pool, &key, data(index, len)).await.expect("the write succeeds");
            written.push((*pool, key, index));
        }
    }
    written
}

async fn read_all(client: &optio_client::Client, written: &[(&str, String, usize)], len: usize) {
    for (pool, key, index) in written {
        let got = match client.get(pool, key).await {
            Ok(got) => got,
            // A miss is a defect (issue 37, defect 4, seen once in CI and not reproduced in 40
            // runs under load): say where the object is, and whether it was only late.
            Err(error) => {
                let probe = client.probe(pool, key).await;
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                let again = client.get(pool, key).await.map(|d| d.len());
                let replicas = client.verify(pool, key).await;
                panic!(
                    "{pool}/{key}: {error}\nprobe: {probe:#?}\nread again 2 s later: {again:?}\nreplicas: {replicas:?}"
                )
            }
        };
        assert_eq!(got, data(*index, len), "{pool}/{key} reads back intact");
    }
}

/// Block objects (a volume's) of each pool: (pool, key) → (bytes, what the last write left).
type Blocks = BTreeMap<(&'static str, String), (Vec<u8>, Option<Written>)>;

const BLOCK_OBJECT: u64 = 32 * 1024;

/// Writes in place into 6 block objects per pool (creating them the first time), at an
/// offset that moves with `round`.
async fn write_blocks(client: &optio_client::Client, blocks: &mut Blocks, round: usize) {
    for pool in POOLS {
        for i in 0..6 {
            let (model, known) = blocks
                .entry((pool, format!("blk/{pool}/{i}")))
                .or_insert_with(|| (vec![0u8; BLOCK_OBJECT as usize], None));
            let offset = (round * 5000 + i * 100) % (BLOCK_OBJECT as usize - 3000);
            let bytes = data(round * 100 + i, 3000);
            model[offset..offset + 3000].copy_from_slice(&bytes);
            let key = format!("blk/{pool}/{i}");
            let patch = Patch::Data(bytes);
            let written = client
                .write_in_place(
                    pool,
                    &key,
                    BLOCK_OBJECT,
                    offset as u64,
                    &patch,
                    known.as_ref(),
                    false,
                )
                .await
                .unwrap_or_else(|e| panic!("{pool}/{key}: {e}"));
            *known = Some(written);
        }
    }
}

async fn read_blocks(client: &optio_client::Client, blocks: &Blocks) {
    for ((pool, key), (model, _)) in blocks {
        let got = client.get(pool, key).await.unwrap_or_else(|e| panic!("{pool}/{key}: {e}"));
        assert!(got[..] == model[..], "{pool}/{key} reads back as written in place");
        let part = client.read_in_place(pool, key, 4000, 9000).await.unwrap().expect("stored");
        assert!(part[..] == model[4000..13000], "{pool}/{key}: a ranged read");
    }
}

/// Objects each device holds, from the servers.
async fn objects_on(cluster: &optio_local::cluster::LocalCluster) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    for status in statuses(cluster).await.into_iter().flatten() {
        for device in status.devices {
            out.push((device.metrics.device, device.objects));
        }
    }
    out.sort_unstable();
    out
}

#[test]
fn data_follows_the_map_out_in_and_removed() {
    let (_dir, mut cluster) = cluster(LocalClusterSpec { hosts_per_zone: 2, ..small() });
    let rt = runtime();
    rt.block_on(async {
        let client = client(&cluster, None).await;
        let written = fill(&client, 3000).await;
        let mut blocks = Blocks::new();
        write_blocks(&client, &mut blocks, 0).await;
        write_blocks(&client, &mut blocks, 1).await;
        // Out: device 4's copies go to the others; reads work during and after, and so do
        // writes in place while the data moves (written whole then) and after.
        cluster
            .change_map(&MapChange::SetState { device: DeviceId(4), up: None, is_in: Some(false) })
            .expect("device 4 out");
        read_all(&client, &written, 3000).await;
        write_blocks(&client, &mut blocks, 2).await;
        read_blocks(&client, &blocks).await;
        wait_settled(&cluster, Duration::from_secs(60)).await;
        read_all(&client, &written, 3000).await;
        read_blocks(&client, &blocks).await;
        write_blocks(&client, &mut blocks, 3).await;
        let on = objects_on(&cluster).await;
        assert_eq!(on.iter().find(|(d, _)| *d == 4).map(|(_, n)| *n), Some(0), "{on:?}");
        let moved: u64 =
            statuses(&cluster).await.iter().flatten().map(|s| s.migration.total_copies_moved).sum();
        assert!(moved > 0, "copies were sent");
        // In again: it takes its share back.
        cluster
            .change_map(&MapChange::SetState { device: DeviceId(4), up: None, is_in: Some(true) })
            .expect("device 4 in");
        wait_settled(&cluster, Duration::from_secs(60)).await;
        read_all(&client, &written, 3000).await;
        let on = objects_on(&cluster).await;
        assert!(on.iter().find(|(d, _)| *d == 4).is_some_and(|(_, n)| *n > 0), "{on:?}");
        // Out, settle, then removal is allowed (it holds nothing), and nothing is lost.
        cluster
            .change_map(&MapChange::SetState { device: DeviceId(4), up: None, is_in: Some(false) })
            .expect("device 4 out");
        wait_settled(&cluster, Duration::from_secs(60)).await;
        let dir = cluster.dir().display().to_string();
        let out = support::optio_ok(&["map", "remove-device", "4", "--cluster", &dir]);
        assert!(out.contains("stored epoch"), "{out}");
        wait_settled(&cluster, Duration::from_secs(60)).await;
        read_all(&client, &written, 3000).await;
        read_blocks(&client, &blocks).await;
        // A server restarted after all that holds the current epoch and serves its data.
        cluster.restart(0).expect("restart");
        read_all(&client, &written, 3000).await;
        write_blocks(&client, &mut blocks, 4).await;
        let fresh = crate::client(&cluster, None).await;
        read_blocks(&fresh, &blocks).await;
    });
}

/// A device marked down while its server runs (as a restarted server finds itself in the
/// map until it is marked up again) keeps its copies: it sends none away and drops none, and
/// once marked up holds what it held, and is not sent it again.
#[test]
fn a_device_marked_down_but_in_keeps_its_copies() {
    let (_dir, cluster) = cluster(LocalClusterSpec { hosts_per_zone: 2, ..small() });
    let rt = runtime();
    rt.block_on(async {
        let client = client(&cluster, None).await;
        let written = fill(&client, 3000).await;
        wait_settled(&cluster, Duration::from_secs(60)).await;
        // Device 4's objects per pool, and what its server sent in all.
        let held = async || {
            let (mut pools, mut sent) = (BTreeMap::new(), 0);
            for status in statuses(&cluster).await.into_iter().flatten() {
                for device in status.devices.iter().filter(|d| d.metrics.device == 4) {
                    pools = device.pools.iter().map(|p| (p.pool, p.objects)).collect();
                    sent = status.migration.total_copies_moved;
                }
            }
            (pools, sent)
        };
        let (before, _) = held().await;
        assert!(before.values().sum::<u64>() > 0, "device 4 holds copies: {before:?}");
        cluster
            .change_map(&MapChange::SetState { device: DeviceId(4), up: Some(false), is_in: None })
            .expect("device 4 down");
        wait_settled(&cluster, Duration::from_secs(60)).await;
        assert_eq!(held().await, (before.clone(), 0), "down: its copies kept, none sent");
        // Copies sent by every server, in all.
        let sent = async || {
            let all = statuses(&cluster).await.into_iter().flatten();
            all.map(|s| s.migration.total_copies_moved).sum::<u64>()
        };
        let sent_before_up = sent().await;
        cluster
            .change_map(&MapChange::SetState { device: DeviceId(4), up: Some(true), is_in: None })
            .expect("device 4 up");
        wait_settled(&cluster, Duration::from_secs(60)).await;
        // The balanced pool's placement follows the history of the map (each state computed
        // from the one before): down then up may leave it a PG or two elsewhere than before.
        let balanced = cluster.load_map().unwrap().pool_by_name("balanced").unwrap().id.0;
        // Back up, it is asked before anything is sent to it: it has it all. (Without asking,
        // every copy it holds was sent to it again.) What moves is the balanced pool's PG or
        // two.
        let sent_at_up = sent().await - sent_before_up;
        let others: u64 = before.iter().filter(|(p, _)| **p != balanced).map(|(_, n)| n).sum();
        assert!(
            sent_at_up * 4 <= others,
            "{sent_at_up} copies sent at the epoch that marks device 4 up; it held {others} \
             outside the balanced pool, all kept"
        );
        let (mut after, _) = held().await;
        let mut before = before;
        before.remove(&balanced);
        after.remove(&balanced);
        assert_eq!(after, before, "up again: what it held, in every other pool");
        read_all(&client, &written, 3000).await;
    });
}

#[test]
fn a_delete_while_data_moves_stays_deleted_and_a_restart_resumes() {
    // Slow migration (64 KiB/s per server), so that the deletes and the restart land in it.
    let spec = LocalClusterSpec {
        hosts_per_zone: 2,
        migration_rate_bytes_per_sec: Some(64 << 10),
        ..small()
    };
    let (_dir, mut cluster) = cluster(spec);
    let rt = runtime();
    rt.block_on(async {
        let client = client(&cluster, None).await;
        let len = 8 << 10;
        let written = fill(&client, len).await;
        cluster
            .change_map(&MapChange::SetState { device: DeviceId(2), up: None, is_in: Some(false) })
            .expect("device 2 out");
        let moving_to = cluster.load_map().expect("the map loads").epoch().0;
        // Delete every third object while the servers move data. Whether they do is asked
        // once the first delete is done (not after the last: on a loaded machine the
        // deletes may outlast the move): a server not settled at the new epoch then (still
        // moving, or not started yet) holds copies where the old map placed them.
        let started = std::time::Instant::now();
        let mut busy = None;
        let mut deleted = Vec::new();
        let mut kept = Vec::new();
        for (n, object) in written.into_iter().enumerate() {
            if n % 3 == 0 {
                client.delete(object.0, &object.1).await.expect("the delete succeeds");
                deleted.push(object);
                if busy.is_none() {
                    let all = statuses(&cluster).await;
                    busy = Some(all.iter().flatten().any(|s| !s.migration.settled_at(moving_to)));
                }
            } else {
                kept.push(object);
            }
        }
        let busy = busy.expect("some objects are deleted");
        eprintln!(
            "{} deletes in {:?}, the first while data moved: {busy}",
            deleted.len(),
            started.elapsed()
        );
        // Kill a server mid-migration (its device's copies are among those moving) and
        // restart it: it resumes from the map it finished last.
        cluster.kill(2).expect("kill");
        cluster.restart(2).expect("restart");
        wait_settled(&cluster, Duration::from_secs(180)).await;
        assert!(busy, "the deletes happened while data moved (the migration was too fast)");
        read_all(&client, &kept, len).await;
        for (pool, key, _) in &deleted {
            match client.get(pool, key).await {
                Err(ClientError::NotFound { .. }) => {}
                other => {
                    panic!("{pool}/{key} was deleted during the migration but reads {other:?}")
                }
            }
        }
        // A fresh client (no cache, no previous map) sees the same.
        let fresh = crate::client(&cluster, None).await;
        read_all(&fresh, &kept, len).await;
        for (pool, key, _) in &deleted {
            assert!(matches!(fresh.get(pool, key).await, Err(ClientError::NotFound { .. })));
        }
    });
}

#[test]
fn the_cli_refuses_to_remove_the_only_copy_and_edits_show_what_moves() {
    // One replica: every object's only copy is on one device.
    let (_dir, cluster) = cluster(LocalClusterSpec { replicas: 1, choices: 1, ..small() });
    let rt = runtime();
    rt.block_on(async {
        let client = client(&cluster, None).await;
        for i in 0..30 {
            client.put("data", &format!("k{i}"), data(i, 100)).await.expect("write");
        }
    });
    let dir = cluster.dir().display().to_string();
    let device = (0..3)
        .find(|d| rt.block_on(objects_on(&cluster)).iter().any(|(id, n)| id == d && *n > 0))
        .expect("some device holds objects");
    let error =
        support::optio_err(&["map", "remove-device", &device.to_string(), "--cluster", &dir]);
    assert!(error.contains("only copy"), "{error}");
    assert!(error.contains("--out"), "says what to do: {error}");
    // What an edit moves, without storing it.
    let out = support::optio_ok(&["map", "reweight", "1", "2.0", "--dry-run", "--cluster", &dir]);
    assert!(out.contains("pool 'data'") && out.contains("dry run"), "{out}");
    assert_eq!(cluster.load_map().unwrap().epoch().0, 1, "a dry run stores nothing");
    // Bad edits: clear errors, nothing stored.
    let error = support::optio_err(&["map", "set-state", "99", "--out", "--cluster", &dir]);
    assert!(error.contains("no device '99'"), "{error}");
    let error = support::optio_err(&["map", "set-state", "1", "--cluster", &dir]);
    assert!(error.contains("--up or --down"), "{error}");
    let error = support::optio_err(&["resize", "--active", "0", "--cluster", &dir]);
    assert!(error.contains("primaries"), "{error}");
    let error = support::optio_err(&["resize", "--active", "40", "--cluster", &dir]);
    assert!(error.contains("ranked servers"), "{error}");
    // A new device's address must answer and serve it.
    let add = |addr: &str, extra: &[&str]| {
        let mut args = vec!["map", "add-device", "--id", "9", "--at", "zone=z1,host=z1-h9"];
        args.extend(["--capacity", "1GiB", "--addr", addr, "--cluster", &dir]);
        args.extend(extra);
        args.iter().map(|a| a.to_string()).collect::<Vec<String>>()
    };
    let refuse = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        support::optio_err(&args)
    };
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let error = refuse(add(&nobody.to_string(), &[]));
    assert!(error.contains("nothing at") && error.contains("optio server --listen"), "{error}");
    let error = refuse(add(&cluster.servers()[0].addr, &[]));
    assert!(error.contains("does not serve device 9"), "{error}");
    assert_eq!(cluster.load_map().unwrap().epoch().0, 1);
    let args = add(&nobody.to_string(), &["--allow-unreachable", "--dry-run"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(support::optio_ok(&args).contains("dry run"));
    assert_eq!(cluster.load_map().unwrap().epoch().0, 1);
    let status = support::optio_ok(&["status", "--cluster", &dir, "--json"]);
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    assert_eq!(status["settled"], true);
    assert_eq!(status["servers"].as_array().map(Vec::len), Some(3));
}

/// A rebalancing round that fails on a silent target is retried within the same epoch; the
/// progress each server reports then counts the earlier rounds in its plan too (it once showed
/// "81/13": done above planned).
#[test]
fn progress_across_retry_rounds_stays_within_its_plan() {
    let (_dir, mut cluster) = cluster(LocalClusterSpec { hosts_per_zone: 2, ..small() });
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    rt.block_on(async {
        for i in 0..120 {
            client.put("data", &format!("r{i}"), data(i, 2000)).await.expect("write");
        }
    });
    // Device 5's server stops; devices 0 and 4 go out: 0's data moves to device 1 (its zone's
    // other host), 4's to device 5, which does not answer.
    cluster.kill(5).unwrap();
    for device in [0, 4] {
        let out = MapChange::SetState { device: DeviceId(device), up: None, is_in: Some(false) };
        cluster.change_map(&out).expect("out");
    }
    let epoch = cluster.load_map().unwrap().epoch().0;
    let retried = crate::wait_until(Duration::from_secs(30), || {
        rt.block_on(statuses(&cluster)).iter().flatten().any(|s| {
            s.epoch == epoch
                && s.migration.phase == optio_proto::MigrationPhase::Retrying
                && s.migration.copies_done > 0
        })
    });
    let seen = rt.block_on(statuses(&cluster));
    assert!(retried, "some server moved copies and retries others (device 5 is down): {seen:#?}");
    std::thread::sleep(Duration::from_millis(1500)); // at least one retry round planned
    for s in rt.block_on(statuses(&cluster)).iter().flatten() {
        let m = &s.migration;
        assert!(m.copies_done <= m.copies_planned, "done above planned: {m:?}");
        assert!(m.bytes_moved <= m.bytes_planned, "bytes above planned: {m:?}");
    }
    cluster.restart(5).unwrap();
    rt.block_on(wait_settled(&cluster, Duration::from_secs(60)));
    // Servers log what an operator needs at their default level (info).
    let host = cluster.servers()[0].host.clone();
    let log = std::fs::read_to_string(cluster.dir().join(format!("{host}.log"))).unwrap();
    assert!(log.contains("map epoch changed") && log.contains("rebalancing"), "{host}: {log}");
    rt.block_on(async {
        for i in 0..120 {
            assert_eq!(client.get("data", &format!("r{i}")).await.unwrap(), data(i, 2000));
        }
    });
}

/// Ten map changes in a row (reweights and elastic resizes, as fast as the map store takes
/// them) while a client started just before reads every object over and over: not one read
/// fails. Servers skip some of those maps (they poll the map file every 100 ms); a skipped
/// map used to make every device of every server catch up at once, and reads found every
/// replica "recovering" (issue 37, defect 1: `optio bench elastic`'s phase 3).
#[test]
fn a_fresh_client_reads_through_ten_quick_map_changes_without_a_failure() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let (_dir, cluster) = cluster(LocalClusterSpec { hosts_per_zone: 2, ..small() });
    let rt = runtime();
    rt.block_on(async {
        let writer = client(&cluster, None).await;
        let len = 4 << 10;
        let written = Arc::new(fill(&writer, len).await);
        let reader = crate::client(&cluster, None).await;
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let mut readers = Vec::new();
        for task in 0..2 {
            let (reader, written, stop, reads) =
                (reader.clone(), written.clone(), stop.clone(), reads.clone());
            readers.push(tokio::spawn(async move {
                let mut failures = Vec::new();
                let mut passes_after_stop = 0;
                while passes_after_stop < 1 {
                    if stop.load(Ordering::Acquire) {
                        passes_after_stop += 1;
                    }
                    for (pool, key, index) in written.iter().skip(task).step_by(2) {
                        match reader.get(pool, key).await {
                            Ok(got) if got == data(*index, len) => {}
                            Ok(_) => failures.push(format!("{pool}/{key}: other bytes")),
                            Err(error) => failures.push(format!("{pool}/{key}: {error}")),
                        }
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                }
                failures
            }));
        }
        let weight = |device: u32| {
            cluster.load_map().expect("the map").device(DeviceId(device)).expect("device").weight
        };
        let (w1, w4) = (weight(1), weight(4));
        let half = |w: optio_placement::Weight| optio_placement::Weight(w.0 / 2);
        let changes = [
            MapChange::SetWeight { device: DeviceId(1), weight: half(w1) },
            MapChange::SetActive(optio_placement::ActiveSpec::FirstRanks(4)),
            MapChange::SetReweight {
                device: DeviceId(2),
                reweight: optio_placement::Weight(0xb333),
            },
            MapChange::SetActive(optio_placement::ActiveSpec::FirstRanks(5)),
            MapChange::SetWeight { device: DeviceId(1), weight: w1 },
            MapChange::SetActive(optio_placement::ActiveSpec::FirstRanks(3)),
            MapChange::SetReweight { device: DeviceId(2), reweight: optio_placement::Weight::ONE },
            MapChange::SetActive(optio_placement::ActiveSpec::FirstRanks(6)),
            MapChange::SetWeight { device: DeviceId(4), weight: half(w4) },
            MapChange::SetWeight { device: DeviceId(4), weight: w4 },
        ];
        let epoch = cluster.load_map().expect("the map").epoch().0;
        for change in &changes {
            cluster.change_map(change).expect("the change is stored");
        }
        // Every change stored; the supervisor's re-integration may store a map of its own in
        // between (pruning versions once back at full power), and a change that loses that
        // race is applied again to its map (MapSource::apply), not refused.
        let stored = cluster.load_map().expect("the map").epoch().0;
        assert!((epoch + 10..=epoch + 11).contains(&stored), "epoch {stored}, was {epoch}");
        wait_settled(&cluster, Duration::from_secs(120)).await;
        stop.store(true, Ordering::Release);
        let mut failures = Vec::new();
        for task in readers {
            failures.extend(task.await.expect("the reader ran"));
        }
        let reads = reads.load(Ordering::Relaxed);
        assert!(reads >= written.len() as u64, "{reads} reads");
        assert!(
            failures.is_empty(),
            "{} of {reads} reads failed through the map changes, first: {:?}",
            failures.len(),
            &failures[..failures.len().min(5)]
        );
    });
}
