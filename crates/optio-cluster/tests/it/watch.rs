//! Proves that a watcher delivers each newer map from a file and from etcd (printing the
//! latency from commit to delivery), skips maps that are not newer, reports an unparseable map
//! and goes on, and survives an etcd restart — including a change made while it was
//! disconnected.

use std::time::{Duration, Instant};

use optio_cluster::{ClusterError, MapSource, MapWatcher};
use optio_placement::{ClusterMap, Epoch};

use crate::support::{
    WAIT_MAX, addr0, at_epoch, etcd, etcd_delete, etcd_put, file_source, small_map, unstamped,
};

/// How long a test lets a watcher run to show that it delivers nothing (it would deliver a
/// change within about a poll interval, or a reconnect).
const QUIET: Duration = Duration::from_secs(1);

async fn next_within(watcher: &mut MapWatcher) -> Result<ClusterMap, ClusterError> {
    tokio::time::timeout(WAIT_MAX, watcher.next()).await.expect("delivered within the bound")
}

/// Commits `next` over `expected` and returns the time from the commit to its delivery (0
/// when the watcher had it before the commit call returned).
async fn commit_and_time(
    source: &MapSource,
    watcher: &mut MapWatcher,
    expected: Epoch,
    next: &ClusterMap,
) -> Duration {
    // Race the watcher against the commit, so the clock starts when the commit returns.
    let delivery = async {
        let map = next_within(watcher).await.expect("a map");
        (map, Instant::now())
    };
    let commit = async {
        source.compare_and_swap(expected, next).await.expect("swap");
        Instant::now()
    };
    let ((delivered, at), committed) = tokio::join!(delivery, commit);
    assert_eq!(unstamped(&delivered), *next);
    at.saturating_duration_since(committed)
}

async fn delivers_newer_maps(source: &MapSource, kind: &str) {
    let first = small_map();
    source.replace(&first).await.expect("replace");
    let mut watcher = source.watch().await.expect("watch");
    assert_eq!(watcher.last_epoch(), Some(Epoch(1)));
    let mut latencies = Vec::new();
    for epoch in 2..=4 {
        let next = at_epoch(&first, epoch, &format!("e{epoch}"));
        latencies.push(commit_and_time(source, &mut watcher, Epoch(epoch - 1), &next).await);
    }
    println!(
        "{kind} watch: commit-to-delivery latencies {latencies:?} (0: before the commit returned)"
    );

    // Not newer (a map written back to epoch 2): skipped; the next newer one comes.
    source.replace(&at_epoch(&first, 2, "old")).await.expect("replace");
    let newer = at_epoch(&first, 9, "new");
    source.compare_and_swap(Epoch(2), &newer).await.expect("swap");
    let delivered = next_within(&mut watcher).await.expect("a map");
    assert_eq!(unstamped(&delivered), newer, "epoch 2 skipped");
    assert_eq!(watcher.last_epoch(), Some(Epoch(9)));

    // Following a map loaded earlier: the change made in between comes first.
    let mut late = source.watch_after(Some(Epoch(4)));
    assert_eq!(unstamped(&next_within(&mut late).await.expect("a map")), newer);
}

#[tokio::test]
async fn a_file_watcher_delivers_each_newer_map() {
    let (dir, source) = file_source();
    delivers_newer_maps(&source, "file").await;

    // An unparseable map is reported once; the watcher then goes on.
    let mut watcher = source.watch().await.expect("watch");
    let path = dir.path().join("map.toml");
    std::fs::write(dir.path().join("garbage"), "epoch = [").expect("write");
    std::fs::rename(dir.path().join("garbage"), &path).expect("rename");
    let error = next_within(&mut watcher).await.expect_err("garbage");
    assert!(error.to_string().contains("cannot parse the map at"), "{error}");
    let repaired = at_epoch(&small_map(), 10, "repaired");
    source.replace(&repaired).await.expect("replace");
    assert_eq!(unstamped(&next_within(&mut watcher).await.expect("a map")), repaired);
}

#[tokio::test]
async fn a_file_watcher_waits_for_a_map_that_does_not_exist_yet() {
    let (_dir, source) = file_source();
    let mut watcher = source.watch().await.expect("watch");
    assert_eq!(watcher.last_epoch(), None);
    assert!(tokio::time::timeout(QUIET / 5, watcher.next()).await.is_err(), "nothing yet");
    source.initialize(&small_map()).await.expect("initialize");
    assert_eq!(unstamped(&next_within(&mut watcher).await.expect("a map")), small_map());
}

#[tokio::test]
async fn an_etcd_watcher_delivers_each_newer_map() {
    let Some(etcd) = etcd() else { return };
    let source = MapSource::parse(&etcd.url()).expect("etcd");
    delivers_newer_maps(&source, "etcd").await;

    // An unparseable map is reported once; a deleted one is ignored; the watcher goes on.
    let mut watcher = source.watch().await.expect("watch");
    etcd_put(&etcd.endpoint(), "/optio/map", "epoch = [").await;
    let error = next_within(&mut watcher).await.expect_err("garbage");
    assert!(error.to_string().contains("cannot parse the map at etcd://"), "{error}");
    etcd_delete(&etcd.endpoint(), "/optio/map").await;
    let repaired = at_epoch(&small_map(), 10, "repaired");
    source.replace(&repaired).await.expect("replace");
    assert_eq!(unstamped(&next_within(&mut watcher).await.expect("a map")), repaired);
    assert_eq!(watcher.reconnects(), 0);
}

#[tokio::test]
async fn an_etcd_watcher_survives_restarts_and_catches_up() {
    let Some(mut etcd) = etcd() else { return };
    let source = MapSource::parse(&etcd.url()).expect("etcd");
    let first = small_map();
    source.initialize(&first).await.expect("initialize");
    let mut watcher = source.watch().await.expect("watch");
    let second = at_epoch(&first, 2, "second");
    commit_and_time(&source, &mut watcher, Epoch(1), &second).await;

    // Down: the watcher keeps trying rather than returning an error.
    etcd.stop();
    assert!(tokio::time::timeout(QUIET, watcher.next()).await.is_err(), "no error, no map");
    // Back, nothing changed: the watcher reconnects and delivers nothing.
    etcd.restart().expect("etcd restarts");
    assert!(tokio::time::timeout(QUIET, watcher.next()).await.is_err(), "nothing changed");
    // A change after the restart is delivered.
    let third = at_epoch(&first, 3, "third");
    let latency = commit_and_time(&source, &mut watcher, Epoch(2), &third).await;
    println!("etcd watch after a restart: commit-to-delivery latency {latency:?}");
    assert!(watcher.reconnects() >= 1, "the watch was re-established");

    // Down again; the change is made while the watcher is disconnected (it is not polled
    // between the restart and the change), and delivered when it reconnects.
    etcd.stop();
    assert!(tokio::time::timeout(QUIET, watcher.next()).await.is_err(), "no error, no map");
    etcd.restart().expect("etcd restarts");
    let fourth = at_epoch(&first, 4, "fourth");
    source.compare_and_swap(Epoch(3), &fourth).await.expect("swap");
    let started = Instant::now();
    let delivered = next_within(&mut watcher).await.expect("a map");
    println!("etcd watch, change made while disconnected: delivered {:?} later", started.elapsed());
    assert_eq!(unstamped(&delivered), fourth);
    assert_eq!(addr0(&delivered), addr0(&fourth));
    assert!(watcher.reconnects() >= 2, "re-established twice: {}", watcher.reconnects());
}
