//! Failures as routine (issue 13): a server killed with SIGKILL is marked down by the
//! supervisor, writes go around it meanwhile, it is restarted, and it serves no read until it
//! has caught up on what it missed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use optio_local::cluster::{CRUSH_POOL, Event, LocalCluster, PLAIN_POOL, Supervision};

use crate::{client, cluster, data, runtime, small, statuses, wait_until};

/// What a device answers to a direct read.
#[derive(Debug, PartialEq, Eq)]
enum Direct {
    /// `recovering` (503): it is catching up.
    Recovering,
    /// `fenced` (503): its server holds no lease and serves nothing.
    Fenced,
    /// No such object (404).
    Absent,
    /// The object at this version.
    Found(u64, bytes::Bytes),
}

/// Reads `key` from `device` only (no client logic: no fallback, no repair).
async fn read_direct(addr: &str, device: u32, pool: u32, key: &str) -> Direct {
    let url = format!(
        "http://{addr}/v1/dev/{device}/objects/{pool}/{}",
        optio_proto::wire::percent_encode(key)
    );
    let response = reqwest::get(url).await.expect("the device answers");
    match response.status().as_u16() {
        200 => {
            let version = response.headers()["x-optio-version"].to_str().unwrap().parse().unwrap();
            Direct::Found(version, response.bytes().await.unwrap())
        }
        404 => Direct::Absent,
        503 => match response.headers()["x-optio-error"].to_str().unwrap() {
            "recovering" => Direct::Recovering,
            "fenced" => Direct::Fenced,
            other => panic!("device {device} answered 503 {other} for {key}"),
        },
        status => panic!("device {device} answered {status} for {key}"),
    }
}

/// Runs supervision rounds until `condition` holds on an event (bounded); returns when.
fn supervise_until(
    cluster: &mut LocalCluster,
    policy: &Supervision,
    bound: Duration,
    mut condition: impl FnMut(&Event) -> bool,
) -> Instant {
    let deadline = Instant::now() + bound;
    loop {
        for event in cluster.supervise(policy).expect("supervision") {
            eprintln!("supervisor: {event}");
            if condition(&event) {
                return Instant::now();
            }
        }
        assert!(Instant::now() < deadline, "supervision did not get there within {bound:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn kill_9(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -9 {pid}");
}

#[test]
fn a_dead_server_is_marked_down_written_around_and_serves_nothing_stale_when_back() {
    let (_dir, mut cluster) = cluster(small());
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    let pool = cluster.load_map().unwrap().pool_by_name(PLAIN_POOL).unwrap().id.0;
    let keys: Vec<String> = (0..24).map(|i| format!("k{i}")).collect();
    rt.block_on(async {
        for (i, key) in keys.iter().enumerate() {
            client.put(PLAIN_POOL, key, data(i, 1000)).await.expect("v1");
        }
    });
    let victim = 0u32;
    let addr = cluster.servers()[0].addr.clone();
    let killed_at = Instant::now();
    kill_9(cluster.servers()[0].pid().expect("running"));

    // Before the map says anything, writes go around the dead replica (its connection is
    // refused: it is not running) and are acknowledged by the two others (min_size 2).
    let mut newest: HashMap<String, Option<bytes::Bytes>> = HashMap::new();
    rt.block_on(async {
        for (i, key) in keys.iter().enumerate() {
            let value = data(1000 + i, 1500);
            client.put(PLAIN_POOL, key, value.clone()).await.expect("a degraded write");
            newest.insert(key.clone(), Some(value));
        }
        for key in &keys[..4] {
            client.delete(PLAIN_POOL, key).await.expect("a degraded delete");
            newest.insert(key.clone(), None);
        }
    });
    assert_eq!(client.stats().degraded_writes, keys.len() as u64);

    // The supervisor (no restarts here) marks it down after the grace.
    let policy = Supervision {
        restart: false,
        down_grace: Duration::from_secs(1),
        out_grace: Duration::from_secs(3600),
    };
    let down_at = supervise_until(
        &mut cluster,
        &policy,
        Duration::from_secs(30),
        |e| matches!(e, Event::Marked(m) if m.state == "down" && m.devices.contains(&victim)),
    );
    eprintln!("kill -9 to down in the map: {:?}", down_at - killed_at);
    let (code, text) = status(&cluster);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("health: HEALTH_WARN") && text.contains("1 device(s) down: osd.0"),
        "{text}"
    );
    rt.block_on(async {
        for (i, key) in keys.iter().enumerate().skip(4).step_by(2) {
            let value = data(2000 + i, 700);
            client.put(PLAIN_POOL, key, value.clone()).await.expect("a write while down");
            newest.insert(key.clone(), Some(value));
        }
    });

    // Back: it must never answer an older version than the newest acknowledged, whether
    // the map still marks it down or it is catching up.
    cluster.restart(victim).expect("restart");
    supervise_until(
        &mut cluster,
        &policy,
        Duration::from_secs(30),
        |e| matches!(e, Event::Marked(m) if m.state == "up" && m.devices.contains(&victim)),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut recovering_answers = 0;
    rt.block_on(async {
        loop {
            let mut all_current = true;
            for key in &keys {
                match (read_direct(&addr, victim, pool, key).await, &newest[key]) {
                    (Direct::Recovering, _) => {
                        recovering_answers += 1;
                        all_current = false;
                    }
                    (Direct::Found(_, got), Some(want)) => assert_eq!(&got, want, "{key}"),
                    (Direct::Absent, None) => {}
                    (answer, want) => {
                        panic!("{key}: device {victim} answered {answer:?}, the newest is {want:?}")
                    }
                }
            }
            if all_current {
                break;
            }
            assert!(Instant::now() < deadline, "device {victim} did not catch up within 60 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let status = statuses(&cluster).await;
        let device = status[0].as_ref().expect("answers").devices[0].clone();
        assert!(!device.recovering);
        eprintln!(
            "caught up: {} versions fetched, {recovering_answers} reads refused meanwhile",
            device.caught_up
        );
        crate::wait_settled(&cluster, Duration::from_secs(60)).await;
    });
    let (code, text) = status(&cluster);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("health: HEALTH_OK"), "{text}");
}

/// `optio status` on the cluster: (exit code, standard output).
fn status(cluster: &LocalCluster) -> (i32, String) {
    let output = std::process::Command::new(crate::binary())
        .args(["status", "--cluster"])
        .arg(cluster.dir())
        .output()
        .expect("optio status runs");
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn health_is_err_when_placement_groups_have_fewer_than_min_size_replicas_serving() {
    let (_dir, mut cluster) = cluster(small());
    // Servers that just started are still planning epoch 1 (HEALTH_WARN) for a moment.
    runtime().block_on(crate::wait_settled(&cluster, Duration::from_secs(60)));
    let (code, text) = status(&cluster);
    assert_eq!(code, 0, "{text}");
    cluster.kill(0).unwrap();
    let (code, text) = status(&cluster);
    assert_eq!(code, 2, "one of three replicas silent: writes still succeed\n{text}");
    assert!(text.contains("up in the map but not answering: osd.0"), "{text}");
    cluster.kill(1).unwrap();
    let (code, text) = status(&cluster);
    assert_eq!(code, 3, "{text}");
    assert!(
        text.contains("health: HEALTH_ERR") && text.contains("their writes are refused"),
        "{text}"
    );
    // Each server by name, an unreachable one with a short reason and no progress.
    let killed = cluster
        .servers()
        .iter()
        .find(|s| s.devices.iter().any(|(d, _)| *d == 0))
        .map(|s| s.host.clone())
        .expect("the server of device 0");
    let line = text.lines().find(|l| l.starts_with(&killed)).unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("unreachable") && line.contains("not running (connection refused)"),
        "{line}"
    );
    let devices: Vec<u32> =
        cluster.servers().iter().flat_map(|s| s.devices.iter().map(|(d, _)| *d)).collect();
    for device in devices.into_iter().filter(|d| *d > 1) {
        cluster.kill(device).unwrap();
    }
    let (code, text) = status(&cluster);
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("no server answers"), "{text}");
}

#[test]
fn the_supervisor_restarts_a_server_killed_with_sigkill() {
    let (_dir, mut cluster) = cluster(small());
    let policy = Supervision::default();
    let pid = cluster.servers()[1].pid().expect("running");
    kill_9(pid);
    supervise_until(
        &mut cluster,
        &policy,
        Duration::from_secs(30),
        |e| matches!(e, Event::Restarted { host, restarts: 1 } if *host == cluster_host(1)),
    );
    let server = &cluster.servers()[1];
    assert_ne!(server.pid(), Some(pid));
    let addr = server.addr.clone();
    assert!(
        wait_until(Duration::from_secs(20), || optio_local::cluster::health_epoch(&addr).is_some()),
        "the restarted server answers"
    );
    assert_eq!(cluster.restarts()[1].1, 1);
}

fn cluster_host(i: usize) -> String {
    // small(): 3 zones × 1 host, named z{zone}-h1.
    format!("z{}-h1", i + 1)
}

/// What a writer knows of one of its keys.
#[derive(Clone, Debug)]
enum Known {
    /// The last acknowledged write.
    Written(bytes::Bytes),
    /// The last acknowledged delete.
    Deleted,
    /// The last operation failed: it may or may not have been applied.
    Uncertain,
}

/// Seconds the kill loop runs.
const KILL_LOOP_SECONDS: u64 = 40;
/// Tasks, each writing, reading and deleting keys of its own.
const KILL_LOOP_TASKS: usize = 8;
const KILL_LOOP_KEYS: usize = 16;

/// The pool of a kill-loop task: half write to `plain` (k = 1), half to `data` (CHOICE, k = 2:
/// choice records at the home, probes).
fn kill_loop_pool(task: usize) -> &'static str {
    if task.is_multiple_of(2) { PLAIN_POOL } else { CRUSH_POOL }
}

#[test]
fn kill_9_a_server_every_few_seconds_under_load_loses_nothing_acknowledged() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let spec = optio_local::LocalClusterSpec { hosts_per_zone: 2, ..small() };
    let (_dir, mut cluster) = cluster(spec);
    let rt = runtime();
    let stop = Arc::new(AtomicBool::new(false));
    let counters: Arc<[AtomicU64; 6]> = Arc::new(Default::default());
    const WRITES: usize = 0;
    const WRITES_ACKED: usize = 1;
    const READS: usize = 2;
    const READS_OK: usize = 3;
    const STALE: usize = 4;
    const DELETES: usize = 5;
    let mut tasks = Vec::new();
    for t in 0..KILL_LOOP_TASKS {
        let (stop, counters) = (stop.clone(), counters.clone());
        let client = rt.block_on(client(&cluster, None));
        let pool = kill_loop_pool(t);
        tasks.push(rt.spawn(async move {
            let mut known: Vec<Known> = vec![Known::Deleted; KILL_LOOP_KEYS];
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = (x % KILL_LOOP_KEYS as u64) as usize;
                let key = format!("loop/{t}/{k}");
                match (x >> 32) % 20 {
                    0 => {
                        counters[DELETES].fetch_add(1, Ordering::Relaxed);
                        known[k] = match client.delete(pool, &key).await {
                            Ok(()) => Known::Deleted,
                            Err(optio_client::ClientError::NotFound { .. })
                                if matches!(known[k], Known::Deleted) =>
                            {
                                Known::Deleted
                            }
                            Err(_) => Known::Uncertain,
                        };
                    }
                    1..=11 => {
                        n += 1;
                        let value = data(t * 1_000_000 + n, 512 + (x as usize % 3000));
                        counters[WRITES].fetch_add(1, Ordering::Relaxed);
                        known[k] = match client.put(pool, &key, value.clone()).await {
                            Ok(_) => {
                                counters[WRITES_ACKED].fetch_add(1, Ordering::Relaxed);
                                Known::Written(value)
                            }
                            Err(_) => Known::Uncertain,
                        };
                    }
                    _ => {
                        counters[READS].fetch_add(1, Ordering::Relaxed);
                        let got = client.get(pool, &key).await;
                        let fresh = match (&known[k], &got) {
                            (Known::Uncertain, _) => true,
                            (Known::Written(want), Ok(got)) => got == want,
                            (Known::Deleted, Err(optio_client::ClientError::NotFound { .. })) => {
                                true
                            }
                            // A read that fails is unavailability, not staleness.
                            (_, Err(e))
                                if !matches!(e, optio_client::ClientError::NotFound { .. }) =>
                            {
                                true
                            }
                            _ => false,
                        };
                        if got.is_ok() || matches!(known[k], Known::Deleted) {
                            counters[READS_OK].fetch_add(u64::from(fresh), Ordering::Relaxed);
                        }
                        if !fresh {
                            let got = got.as_ref().map(|g| (g.len(), optio_proto::checksum(g)));
                            let want = match &known[k] {
                                Known::Written(w) => {
                                    format!("{} bytes, crc {:x}", w.len(), optio_proto::checksum(w))
                                }
                                other => format!("{other:?}"),
                            };
                            eprintln!("STALE read of {key}: {got:?} (length, crc) after {want}");
                            counters[STALE].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            (client, known)
        }));
    }
    let policy = Supervision {
        restart: true,
        down_grace: Duration::from_secs(3),
        out_grace: Duration::from_secs(3600),
    };
    let started = Instant::now();
    let mut kills = 0;
    let mut victim = 0usize;
    let mut next_kill = Instant::now() + Duration::from_secs(2);
    while started.elapsed() < Duration::from_secs(KILL_LOOP_SECONDS) {
        for event in cluster.supervise(&policy).expect("supervision") {
            eprintln!("supervisor: {event}");
        }
        // One server down at a time: the next kill waits until every server serves again.
        let all_serving = cluster.servers().iter().all(|s| {
            s.pid().is_some()
                && optio_local::cluster::health(&s.addr).is_some_and(|h| h.recovering == 0)
        });
        if Instant::now() >= next_kill && all_serving {
            victim = (victim + 5) % cluster.servers().len();
            kill_9(cluster.servers()[victim].pid().expect("running"));
            kills += 1;
            next_kill = Instant::now() + Duration::from_secs(3);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let finished: Vec<_> = tasks.into_iter().map(|t| rt.block_on(t).expect("task")).collect();
    // Let the last victim come back and catch up.
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster.servers().iter().any(|s| {
        s.pid().is_none() || optio_local::cluster::health(&s.addr).is_none_or(|h| h.recovering > 0)
    }) {
        cluster.supervise(&policy).expect("supervision");
        assert!(Instant::now() < deadline, "every server serves again");
        std::thread::sleep(Duration::from_millis(100));
    }
    let c = |i: usize| counters[i].load(Ordering::Relaxed);
    eprintln!(
        "kill loop: {kills} kills in {KILL_LOOP_SECONDS} s; writes {}/{} acknowledged ({:.2} %), \
         reads {}/{} answered, {} deletes, {} stale reads; restarts {:?}",
        c(WRITES_ACKED),
        c(WRITES),
        100.0 * c(WRITES_ACKED) as f64 / c(WRITES).max(1) as f64,
        c(READS_OK),
        c(READS),
        c(DELETES),
        c(STALE),
        cluster.restarts()
    );
    assert!(kills >= 3, "the loop killed servers ({kills})");
    assert_eq!(c(STALE), 0, "no read returned an older version than one acknowledged");
    // Writes keep succeeding with one replica of a set down (min_size 2): only the moments
    // a connection breaks under a write in flight may fail one.
    assert!(c(WRITES_ACKED) * 100 >= c(WRITES) * 95, "availability below 95 %");
    // Afterwards, from a fresh client: every acknowledged write reads back identical, every
    // acknowledged delete stays deleted.
    rt.block_on(async {
        let reader = client(&cluster, None).await;
        let mut checked = 0;
        for (t, (_, known)) in finished.iter().enumerate() {
            for (k, state) in known.iter().enumerate() {
                let key = format!("loop/{t}/{k}");
                match state {
                    Known::Written(want) => {
                        let got = reader.get(kill_loop_pool(t), &key).await;
                        assert_eq!(got.as_ref().ok(), Some(want), "{key}: {got:?}");
                        checked += 1;
                    }
                    Known::Deleted => {
                        let got = reader.get(kill_loop_pool(t), &key).await;
                        assert!(
                            matches!(got, Err(optio_client::ClientError::NotFound { .. })),
                            "{key} was deleted: {got:?}"
                        );
                        checked += 1;
                    }
                    Known::Uncertain => {}
                }
            }
        }
        eprintln!("{checked} keys checked after the loop");
    });
}

#[test]
fn a_client_started_during_rebalancing_finds_every_acknowledged_object() {
    // Issue 13, defect 1: the move is slow (1 MiB/s per server), the reader is a fresh client
    // for every key, as `optio get` is.
    let spec = optio_local::LocalClusterSpec {
        hosts_per_zone: 2,
        migration_rate_bytes_per_sec: Some(1 << 20),
        ..small()
    };
    let (_dir, cluster) = cluster(spec);
    let rt = runtime();
    let pool = optio_local::cluster::CRUSH_POOL;
    let keys: Vec<String> = (0..150).map(|i| format!("k{i}")).collect();
    rt.block_on(async {
        let writer = client(&cluster, None).await;
        for (i, key) in keys.iter().enumerate() {
            writer.put(pool, key, data(i, 200_000)).await.expect("put");
        }
    });
    let change = optio_placement::MapChange::SetState {
        device: optio_placement::DeviceId(5),
        up: None,
        is_in: Some(false),
    };
    let epoch = cluster.change_map(&change).expect("out").epoch().0;
    cluster.wait_for_epoch(epoch).expect("servers follow");
    rt.block_on(async {
        let mut moving_seen = false;
        for (i, key) in keys.iter().enumerate() {
            let reader = client(&cluster, None).await;
            let got = reader.get(pool, key).await.unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(got, data(i, 200_000), "{key}");
            if !moving_seen {
                moving_seen = statuses(&cluster)
                    .await
                    .iter()
                    .any(|s| s.as_ref().is_some_and(|s| !s.migration.settled_at(epoch)));
            }
        }
        assert!(moving_seen, "the reads ran while data was still moving");
    });
}

#[test]
fn a_server_down_past_the_out_grace_is_re_replicated_and_health_returns_to_ok() {
    let spec = optio_local::LocalClusterSpec { hosts_per_zone: 2, ..small() };
    let (_dir, mut cluster) = cluster(spec);
    let rt = runtime();
    let keys: Vec<String> = (0..40).map(|i| format!("o{i}")).collect();
    rt.block_on(async {
        let writer = client(&cluster, None).await;
        for (i, key) in keys.iter().enumerate() {
            writer.put(PLAIN_POOL, key, data(i, 20_000)).await.expect("put");
        }
    });
    kill_9(cluster.servers()[0].pid().expect("running"));
    let policy = Supervision {
        restart: false,
        down_grace: Duration::from_millis(500),
        out_grace: Duration::from_secs(2),
    };
    supervise_until(
        &mut cluster,
        &policy,
        Duration::from_secs(30),
        |e| matches!(e, Event::Marked(m) if m.state == "out" && m.devices.contains(&0)),
    );
    // The dead server does not answer; the others move its data until health is OK.
    assert!(
        wait_until(Duration::from_secs(120), || status(&cluster).0 == 0),
        "health did not return to OK: {}",
        status(&cluster).1
    );
    let (_, text) = status(&cluster);
    assert!(
        text.contains("health: HEALTH_OK") && text.contains("(note) 1 device(s) out: osd.0"),
        "{text}"
    );
    // Every object at full replication on the devices that are up, at one version.
    rt.block_on(async {
        let reader = client(&cluster, None).await;
        let everything = crate::everything(&reader, PLAIN_POOL).await;
        for key in &keys {
            let replicas = everything.get(key).unwrap_or_else(|| panic!("{key} is nowhere"));
            let devices: Vec<u32> = replicas.iter().map(|r| r.0).collect();
            assert_eq!(replicas.len(), 3, "{key}: {devices:?}");
            assert!(!devices.contains(&0), "{key} on the dead device: {devices:?}");
            assert!(replicas.windows(2).all(|w| w[0].1 == w[1].1), "{key}: {replicas:?}");
        }
    });
}

/// An `optio manager` process on the cluster's map; its standard error is read line by line.
struct Manager {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Manager {
    fn start(map: &str) -> Manager {
        let mut child = std::process::Command::new(crate::binary())
            .args(["manager", "--map", map, "--down-grace", "1s", "--out-grace", "1h"])
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("optio manager starts");
        let stderr = child.stderr.take().expect("piped");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("manager: {line}");
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Manager { child, lines }
    }

    /// Waits (bounded) for a line containing `text`.
    fn expect(&self, text: &str, bound: Duration) {
        let deadline = Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return,
                Ok(_) => {}
                Err(_) => panic!("the manager did not say '{text}' within {bound:?}"),
            }
        }
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn device_up(cluster: &LocalCluster, device: u32) -> bool {
    cluster.load_map().unwrap().device(optio_placement::DeviceId(device)).unwrap().up
}

#[test]
fn one_optio_manager_acts_another_stands_by_and_takes_over_when_it_dies() {
    if !optio_local::etcd::etcd_available() {
        return;
    }
    let spec = optio_local::LocalClusterSpec { etcd: true, ..small() };
    let (_dir, mut cluster) = cluster(spec);
    let map = cluster.source_spec();
    let mut first = Manager::start(&map);
    first.expect("acting for", Duration::from_secs(20));
    let second = Manager::start(&map);
    second.expect("standing by", Duration::from_secs(20));

    // A server dies: the acting manager marks its device down after the grace.
    let killed = Instant::now();
    kill_9(cluster.servers()[0].pid().expect("running"));
    assert!(wait_until(Duration::from_secs(30), || !device_up(&cluster, 0)), "marked down");
    eprintln!("kill -9 to down, by optio manager with a 1 s grace: {:?}", killed.elapsed());

    // The acting manager dies: the other takes over within the lease, and marks the server
    // up once it is back.
    let _ = first.child.kill();
    let _ = first.child.wait();
    second.expect("acting for", Duration::from_secs(30));
    cluster.restart(0).expect("restart");
    assert!(wait_until(Duration::from_secs(30), || device_up(&cluster, 0)), "marked up again");
}

#[test]
fn a_later_write_wins_over_a_writer_whose_clock_runs_ahead() {
    // Issue 13, defect 4: versions came from writers' clocks, and a replica holding a newer
    // version counted as an acknowledgement, so a write from a clock 5 s ahead (within the
    // 10 s servers take) silently won over every later write for 5 s.
    use optio_net::{Call, Endpoint, HttpTransport, Op, Transport};
    let (_dir, cluster) = cluster(small());
    let rt = runtime();
    rt.block_on(async {
        let client = client(&cluster, None).await;
        let map = cluster.load_map().unwrap();
        let pool = map.pool_by_name(PLAIN_POOL).unwrap().id;
        let transport = HttpTransport::new().unwrap();
        let ahead = |seconds: u64| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros() as u64;
            optio_proto::ObjectVersion(now + seconds * 1_000_000)
        };
        // The fast writer stores its version on every replica.
        let fast_write = |key: &'static str, seconds: u64| {
            let (map, transport, client) = (&map, &transport, &client);
            async move {
                let version = ahead(seconds);
                for device in &client.candidates(PLAIN_POOL, key).unwrap()[0].devices {
                    let addr = map.device(*device).unwrap().addr.clone().unwrap();
                    let endpoint = Endpoint { device: device.0, addr };
                    let data = bytes::Bytes::from_static(b"from the future");
                    let put = Op::Put {
                        key,
                        checksum: optio_proto::checksum(&data),
                        data,
                        version,
                        pg_seed: None,
                    };
                    transport.send(Call::new(&endpoint, pool, map.epoch().0, put)).await.unwrap();
                }
            }
        };
        fast_write("clock", 5).await;
        client.put(PLAIN_POOL, "clock", bytes::Bytes::from_static(b"later")).await.unwrap();
        assert_eq!(&client.get(PLAIN_POOL, "clock").await.unwrap()[..], b"later");
        // A fresh client (no version seen yet) too, and for deletes.
        let fresh = crate::client(&cluster, None).await;
        fast_write("gone", 8).await;
        fresh.delete(PLAIN_POOL, "gone").await.expect("the later delete");
        assert!(matches!(
            fresh.get(PLAIN_POOL, "gone").await,
            Err(optio_client::ClientError::NotFound { .. })
        ));
    });
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A paused server — a long GC pause, a frozen VM, SIGSTOP — wakes up holding its old map and
/// old data. Without fencing it would answer a reader queued on its socket with the version it
/// held, though the map marked it down meanwhile and a newer version was acknowledged around
/// it. With fencing the monitor revokes its lease and marks it down only once the lease has
/// run out, and the server, whose lease ran out on its own clock, answers `fenced`.
#[test]
fn a_server_paused_past_its_lease_is_fenced_before_it_is_marked_down_and_serves_nothing_stale() {
    if !optio_local::etcd::etcd_available() {
        return;
    }
    // A lease longer than the manager's 1 s grace: still alive when the grace runs out, so
    // the manager revokes it and waits.
    let spec = optio_local::LocalClusterSpec {
        etcd: true,
        fence_ttl: Some(Duration::from_secs(5)),
        ..small()
    };
    let (_dir, cluster) = cluster(spec);
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    let pool = cluster.load_map().unwrap().pool_by_name(PLAIN_POOL).unwrap().id.0;
    let keys: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    let server = &cluster.servers()[0];
    let (victim, addr, pid) = (server.devices[0].0, server.addr.clone(), server.pid().unwrap());
    rt.block_on(async {
        for (i, key) in keys.iter().enumerate() {
            client.put(PLAIN_POOL, key, data(i, 800)).await.expect("v1");
            // Three zones, three replicas: every key is on every device.
            assert!(matches!(read_direct(&addr, victim, pool, key).await, Direct::Found(..)));
        }
    });
    let manager = Manager::start(&cluster.source_spec());
    manager.expect("acting for", Duration::from_secs(20));

    let paused_at = Instant::now();
    signal(pid, "STOP");
    manager.expect("fenced", Duration::from_secs(30));
    assert!(wait_until(Duration::from_secs(30), || !device_up(&cluster, victim)), "marked down");
    let down_after = paused_at.elapsed();
    eprintln!("paused to down (1 s grace + the revoked lease's 5 s): {down_after:?}");

    // Marked down: writes go around the paused server and are acknowledged by the others.
    let down_epoch = cluster.load_map().unwrap().epoch().0;
    let mut newest = HashMap::new();
    rt.block_on(async {
        while client.epoch() < down_epoch {
            client.refresh().await.expect("refresh");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for (i, key) in keys.iter().enumerate() {
            let value = data(100 + i, 900);
            client.put(PLAIN_POOL, key, value.clone()).await.expect("a write around it");
            newest.insert(key.clone(), value);
        }
    });

    // A reader still holding the old map has its request queued on the paused server's
    // socket; the server wakes up.
    let queued = {
        let (addr, key) = (addr.clone(), keys[0].clone());
        std::thread::spawn(move || runtime().block_on(read_direct(&addr, victim, pool, &key)))
    };
    std::thread::sleep(Duration::from_millis(300));
    signal(pid, "CONT");
    let answer = queued.join().expect("the reader ends");
    if let Direct::Found(version, _) = answer {
        panic!("the woken server answered version {version} instead of refusing: a stale read");
    }
    assert!(matches!(answer, Direct::Fenced | Direct::Recovering), "{answer:?}");

    // It answers its health checks again: marked up, the fence lifted, a new lease, caught
    // up — and never an old version on the way.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut refused = 0;
    rt.block_on(async {
        loop {
            let mut all_current = true;
            for key in &keys {
                match read_direct(&addr, victim, pool, key).await {
                    Direct::Fenced | Direct::Recovering => {
                        refused += 1;
                        all_current = false;
                    }
                    Direct::Found(_, got) => assert_eq!(got, newest[key], "{key}: stale"),
                    Direct::Absent => panic!("{key}: absent from device {victim}"),
                }
            }
            if all_current {
                break;
            }
            assert!(Instant::now() < deadline, "device {victim} did not serve again within 60 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert!(device_up(&cluster, victim));
    let metrics = rt.block_on(async {
        reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap()
    });
    assert!(metrics.contains("optio_fenced 0"), "{metrics}");
    assert!(!metrics.contains("optio_fence_lapses_total 0"), "{metrics}");
    eprintln!("served again after {refused} refused reads");
}

/// A server that cannot reach etcd stops serving within its lease, and serves again (after
/// catching up) once etcd is back.
#[test]
fn a_server_cut_off_from_etcd_stops_serving_within_its_lease_and_comes_back() {
    if !optio_local::etcd::etcd_available() {
        return;
    }
    let spec = optio_local::LocalClusterSpec {
        etcd: true,
        fence_ttl: Some(Duration::from_secs(2)),
        ..small()
    };
    let (_dir, mut cluster) = cluster(spec);
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    let pool = cluster.load_map().unwrap().pool_by_name(PLAIN_POOL).unwrap().id.0;
    rt.block_on(client.put(PLAIN_POOL, "k", data(1, 500))).expect("put");
    let (device, addr) = (cluster.servers()[0].devices[0].0, cluster.servers()[0].addr.clone());
    let etcd = cluster.etcd().expect("etcd").pid().expect("etcd runs");
    signal(etcd, "STOP");
    let stopped = Instant::now();
    let fenced = rt.block_on(async {
        loop {
            match read_direct(&addr, device, pool, "k").await {
                Direct::Fenced => return stopped.elapsed(),
                Direct::Found(..) => {}
                other => panic!("answered {other:?} before it was fenced"),
            }
            assert!(stopped.elapsed() < Duration::from_secs(20), "never fenced");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    eprintln!(
        "etcd stopped to fenced: {fenced:?} (lease 2 s: at most 1.5 s after the last renewal)"
    );
    let (code, health) = rt.block_on(async {
        let response = reqwest::get(format!("http://{addr}/health")).await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    });
    assert_eq!(code, 200, "a fenced server still answers its health checks");
    assert!(health.contains("\"fenced\":true"), "{health}");
    signal(etcd, "CONT");
    let back = rt.block_on(async {
        let resumed = Instant::now();
        loop {
            match read_direct(&addr, device, pool, "k").await {
                Direct::Found(_, got) => {
                    assert_eq!(got, data(1, 500));
                    return resumed.elapsed();
                }
                Direct::Fenced | Direct::Recovering => {}
                Direct::Absent => panic!("absent"),
            }
            assert!(resumed.elapsed() < Duration::from_secs(30), "never served again");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    eprintln!("etcd back to serving: {back:?}");
}

/// The first report, on a pool with CHOICE (k = 2): a server dies, and new objects
/// whose home — or every candidate — has a replica on it are written at once. Before, their
/// choice needed the dead home (or excluded every candidate with a dead device) and failed
/// until the map marked it down after the 20 s grace; now the monitor marks a server whose
/// address refuses connections down at its next round, and a write waits for that map.
#[test]
fn new_objects_of_a_choice_pool_are_written_at_once_when_a_server_dies() {
    // Three servers, three replicas: every candidate of every key has a replica on the dead
    // one, and it is the home of a third of the keys.
    let (_dir, mut cluster) = cluster(small());
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    rt.block_on(client.put(CRUSH_POOL, "warm", data(0, 100))).expect("a write before");
    cluster.kill(0).expect("kill");
    let killed = Instant::now();
    let writer = std::thread::spawn(move || {
        let rt = runtime();
        rt.block_on(async {
            let mut results = Vec::new();
            for i in 0..24 {
                let key = format!("new{i}");
                results.push((key.clone(), client.put(CRUSH_POOL, &key, data(i, 4096)).await));
            }
            (results, client)
        })
    });
    // The default grace: marking down must not wait for it.
    let policy = Supervision { restart: false, ..Supervision::default() };
    while !writer.is_finished() {
        for event in cluster.supervise(&policy).expect("supervision") {
            eprintln!("supervisor: {event}");
        }
        assert!(killed.elapsed() < Duration::from_secs(60), "the writes did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (results, client) = writer.join().expect("the writer ends");
    eprintln!("24 writes after the kill took {:?}", killed.elapsed());
    for (key, result) in &results {
        assert!(result.is_ok(), "{key}: {:?}", result.as_ref().err().map(ToString::to_string));
    }
    assert!(!device_up(&cluster, 0), "marked down at once (a refused connection)");
    rt.block_on(async {
        for (i, (key, _)) in results.iter().enumerate() {
            assert_eq!(client.get(CRUSH_POOL, key).await.expect("read back"), data(i, 4096));
        }
    });
}

/// A copy of a key left on a candidate other than the chosen one — a write sent ahead of its
/// record whose undo never reached a server that died in between — must not be read as the
/// object when the record is lost (the home's records are dropped when the map marks it down:
/// reads then follow the newest copy), nor come back once a delete removed the record (a delete
/// leaves its tombstone on every candidate). Found by the kill loop on a CHOICE pool ("STALE
/// read … after Deleted").
#[test]
fn a_copy_left_on_another_candidate_is_never_read_as_the_object() {
    let spec = optio_local::LocalClusterSpec { hosts_per_zone: 2, ..small() };
    let (_dir, cluster) = cluster(spec);
    let rt = runtime();
    // Random choices: some objects land on candidate 1.
    let writer = rt.block_on(client(&cluster, Some("random")));
    let map = cluster.load_map().unwrap();
    let pool = map.pool_by_name(CRUSH_POOL).unwrap().id;
    let transport = optio_net::HttpTransport::new().unwrap();
    let endpoint = |device: optio_placement::DeviceId| optio_net::Endpoint {
        device: device.0,
        addr: map.device(device).unwrap().addr.clone().unwrap(),
    };
    rt.block_on(async {
        for i in 0..400 {
            let key = format!("stray{i}");
            let value = data(i, 1000);
            let put = writer.put(CRUSH_POOL, &key, value.clone()).await.expect("put");
            let probe = writer.probe(CRUSH_POOL, &key).await.expect("probe");
            // Wanted: the object on candidate 1, and the home (candidate 0's primary) outside
            // it, so that the stray sits where a reader without a record looks first.
            let home = probe.candidates[0].candidate.devices[0];
            if put.candidate != 1 || put.devices.contains(&home.0) {
                continue;
            }
            let old = data(10_000 + i, 700);
            let c0 = &probe.candidates[0].candidate;
            let plant = optio_net::Op::Put {
                key: &key,
                data: old.clone(),
                version: optio_proto::ObjectVersion(put.version.0 - 1),
                checksum: optio_proto::checksum(&old),
                pg_seed: Some(c0.pg.map(|pg| pg.seed).unwrap_or(c0.placement_key)),
            };
            let home = endpoint(home);
            let send = |op| optio_net::Call::new(&home, pool, map.epoch().0, op);
            optio_net::Transport::send(&transport, send(plant)).await.expect("planted");
            // The record is lost: a fresh client follows the newest copy.
            let forget = optio_net::Op::DeleteRecord { key: &key };
            optio_net::Transport::send(&transport, send(forget)).await.expect("record removed");
            let got = client(&cluster, None).await.get(CRUSH_POOL, &key).await.expect("read");
            assert!(got == value, "{key}: the older copy ({} bytes) was read", got.len());
            // Deleted: stays deleted for a fresh client.
            writer.delete(CRUSH_POOL, &key).await.expect("delete");
            let got = client(&cluster, None).await.get(CRUSH_POOL, &key).await;
            assert!(
                matches!(got, Err(optio_client::ClientError::NotFound { .. })),
                "{key} was deleted; read back {:?}",
                got.map(|g| g.len())
            );
            return;
        }
        panic!("no key on candidate 1 whose home is outside it");
    });
}
