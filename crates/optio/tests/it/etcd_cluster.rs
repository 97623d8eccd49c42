//! The map in a real etcd proves: `optio up --etcd`'s cluster runs on it; a map change reaches
//! every server and client quickly (the delay is printed: the target is 1 s); writes go on
//! while etcd is down and nothing acknowledged is lost across an etcd restart; edits after the
//! restart reach everyone; concurrent edits of one epoch: one wins, the other is told to retry.

use std::time::{Duration, Instant};

use optio_local::cluster::LocalClusterSpec;
use optio_placement::{DeviceId, MapChange};

use crate::{client, cluster, data, runtime, small, statuses, support, wait_settled};

fn etcd_or_skip() -> bool {
    optio_local::etcd::etcd_available()
}

/// Applies `change` and returns how long until every server and the client hold the new epoch.
async fn propagation(
    cluster: &optio_local::cluster::LocalCluster,
    client: &optio_client::Client,
    change: MapChange,
) -> Duration {
    let started = Instant::now();
    let epoch = cluster.change_map(&change).expect("the change is stored").epoch().0;
    loop {
        let servers = statuses(cluster).await;
        let everyone = servers.iter().all(|s| s.as_ref().is_some_and(|s| s.epoch >= epoch))
            && client.epoch() >= epoch;
        if everyone {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "epoch {epoch} never reached everyone"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn a_cluster_on_etcd_follows_changes_and_survives_an_etcd_restart() {
    if !etcd_or_skip() {
        return;
    }
    let (_dir, mut cluster) =
        cluster(LocalClusterSpec { etcd: true, hosts_per_zone: 2, ..small() });
    assert!(cluster.source().describe().starts_with("etcd://"));
    // The read-only commands take the live map: from etcd, and through the cluster directory
    // (whose map-source names the etcd).
    let url = cluster.source().describe();
    let shown = crate::support::optio_ok(&["map", "show", "--map", &url]);
    assert!(shown.contains("z1-h2"), "{shown}");
    let dir = cluster.dir().to_str().unwrap().to_string();
    let analyzed = crate::support::optio_ok(&["analyze", "--map", &dir, "--pool", "data"]);
    assert!(analyzed.contains("osd.1"), "{analyzed}");
    let rt = runtime();
    rt.block_on(async {
        let client = client(&cluster, None).await;
        let mut acknowledged = Vec::new();
        for i in 0..30 {
            let key = format!("k{i}");
            client.put("data", &key, data(i, 1000)).await.expect("write");
            acknowledged.push((key, i));
        }
        let mut delays = Vec::new();
        for round in 0..3 {
            let is_in = round % 2 == 1;
            let change = MapChange::SetState { device: DeviceId(1), up: None, is_in: Some(is_in) };
            delays.push(propagation(&cluster, &client, change).await);
            wait_settled(&cluster, Duration::from_secs(60)).await;
        }
        println!("etcd commit → every server and the client hold the epoch: {delays:?}");
        // etcd down: the data path does not need it.
        cluster.etcd().expect("an etcd").stop();
        for i in 30..40 {
            let key = format!("k{i}");
            client.put("data", &key, data(i, 1000)).await.expect("a write while etcd is down");
            acknowledged.push((key, i));
        }
        let dir = cluster.dir().display().to_string();
        let error = support::optio_err(&["map", "set-state", "2", "--out", "--cluster", &dir]);
        assert!(error.contains("cannot reach etcd"), "{error}");
        cluster.etcd().expect("an etcd").restart().expect("etcd restarts");
        let delay = propagation(
            &cluster,
            &client,
            MapChange::SetState { device: DeviceId(1), up: None, is_in: Some(true) },
        )
        .await;
        println!("after an etcd restart: {delay:?}");
        wait_settled(&cluster, Duration::from_secs(60)).await;
        for (key, i) in &acknowledged {
            assert_eq!(client.get("data", key).await.expect("read"), data(*i, 1000), "{key}");
        }
        // Two editors of the same epoch: one wins, the other is told to retry.
        let old = cluster.load_map().unwrap();
        let a = old
            .apply(
                &MapChange::SetState { device: DeviceId(0), up: None, is_in: Some(false) },
                old.epoch(),
            )
            .unwrap();
        let b = old
            .apply(
                &MapChange::SetState { device: DeviceId(3), up: None, is_in: Some(false) },
                old.epoch(),
            )
            .unwrap();
        cluster.source().compare_and_swap(old.epoch(), &a).await.expect("the first wins");
        let error = cluster.source().compare_and_swap(old.epoch(), &b).await.unwrap_err();
        assert!(error.to_string().contains("changed underneath you"), "{error}");
    });
}
