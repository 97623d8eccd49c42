//! kill -9 of a server during a write storm, then a restart: every acknowledged object reads
//! back intact, from every replica. One writer writes objects of 1 MiB or more, which servers
//! write with `O_DIRECT` (docs/store.md, "Large files go past the page cache").

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use optio_client::ReplicaState;
use optio_local::cluster::{CRUSH_POOL, LocalClusterSpec};

use crate::{client, cluster, data, runtime, wait_until};

const WRITERS: usize = 6;
const WRITES_PER_WRITER_MAX: usize = 3_000;
/// The writer of large objects, and how many it writes at most (they fill the devices).
const LARGE_WRITER: usize = 0;
const LARGE_WRITES_MAX: usize = 150;

/// The size of the `n`th write of writer `w`: 2-6 KiB, or 1-1.25 MiB for [`LARGE_WRITER`].
fn size_of(w: usize, n: usize) -> usize {
    if w == LARGE_WRITER { (1 << 20) + (n % 4096) * 64 } else { 2048 + n % 4096 }
}

/// An acknowledged write (key, data seed, size) the servers wrote with `O_DIRECT`.
fn is_large(acked: &(String, usize, usize)) -> bool {
    acked.2 >= 1 << 20
}

#[test]
fn acknowledged_writes_survive_kill_9_and_restart() {
    let spec = LocalClusterSpec {
        hosts_per_zone: 2,
        capacity_bytes: 1 << 30,
        pg_num: 32,
        ..LocalClusterSpec::default()
    };
    let (_dir, mut cluster) = cluster(spec);
    let rt = runtime();
    let writer = rt.block_on(client(&cluster, Some("space")));
    let acked: Arc<Mutex<Vec<(String, usize, usize)>>> = Arc::default();
    let failed = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (writer, acked, failed, stop) =
            (writer.clone(), acked.clone(), failed.clone(), stop.clone());
        tasks.push(rt.spawn(async move {
            for i in 0..WRITES_PER_WRITER_MAX {
                if stop.load(Ordering::Relaxed) || (w == LARGE_WRITER && i >= LARGE_WRITES_MAX) {
                    break;
                }
                let key = format!("storm/{w}/{i}");
                let n = w * WRITES_PER_WRITER_MAX + i;
                let size = size_of(w, n);
                match writer.put(CRUSH_POOL, &key, data(n, size)).await {
                    Ok(_) => acked.lock().unwrap().push((key, n, size)),
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let acked_count = || acked.lock().unwrap().len();
    let large_count = || acked.lock().unwrap().iter().filter(|a| is_large(a)).count();
    assert!(
        wait_until(Duration::from_secs(60), || acked_count() >= 60 && large_count() >= 2),
        "the storm runs, large objects too"
    );
    cluster.kill(0).expect("kill -9");
    let (at_kill, large_at_kill) = (acked_count(), large_count());
    assert!(
        wait_until(Duration::from_secs(60), || acked_count() >= at_kill + 60
            && large_count() >= large_at_kill + 3
            && writer.stats().degraded_writes >= 5),
        "writes go on around the dead server (degraded: 2 of 3 replicas, min_size 2), large \
         ones too"
    );
    cluster.restart(0).expect("restart");
    let at_restart = acked_count();
    assert!(
        wait_until(Duration::from_secs(60), || acked_count() >= at_restart + 60),
        "writes go on after the restart"
    );
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        rt.block_on(task).expect("writer task");
    }
    let acked = acked.lock().unwrap().clone();
    let large_after_kill = acked[at_kill..].iter().filter(|a| is_large(a)).count();
    eprintln!(
        "{} writes acknowledged ({} of 1 MiB or more, {large_after_kill} of them after the \
         kill; {} degraded), {} failed",
        acked.len(),
        acked.iter().filter(|a| is_large(a)).count(),
        writer.stats().degraded_writes,
        failed.load(Ordering::Relaxed)
    );
    rt.block_on(async {
        // The restarted server catches up before it serves reads; wait for that, then every
        // replica must hold every acknowledged write.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while crate::statuses(&cluster)
            .await
            .iter()
            .any(|s| s.as_ref().is_none_or(|s| s.devices.iter().any(|d| d.recovering)))
        {
            assert!(std::time::Instant::now() < deadline, "the restarted server caught up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let reader = client(&cluster, Some("space")).await;
        for (key, n, size) in &acked {
            let got = reader.get(CRUSH_POOL, key).await.unwrap_or_else(|e| panic!("{key}: {e}"));
            assert!(got == data(*n, *size), "{key}: {} bytes read, {size} written", got.len());
        }
        // Every replica, not just the primaries, holds every acknowledged object intact (and
        // every large one).
        for (key, _, _) in
            acked.iter().enumerate().filter_map(|(i, a)| (i % 7 == 0 || is_large(a)).then_some(a))
        {
            let states = reader.verify(CRUSH_POOL, key).await.expect("verify");
            assert!(states.iter().all(|(_, s)| *s == ReplicaState::Good), "{key}: {states:?}");
        }
    });
}
