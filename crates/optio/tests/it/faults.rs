//! Faults: a flipped byte on disk is detected and repaired from another replica; a full
//! cluster is steered around and then fails with a clear message; a stale epoch makes the
//! client reload the map and retry.

use optio_client::{ClientError, ReplicaState};
use optio_local::cluster::{CRUSH_POOL, LocalClusterSpec};
use optio_placement::PoolId;
use optio_proto::ObjectHeader;

use crate::{client, cluster, data, runtime, small};

#[test]
fn a_flipped_byte_is_detected_and_repaired() {
    let (_dir, cluster) = cluster(small());
    runtime().block_on(async {
        let writer = client(&cluster, Some("first")).await;
        writer.put(CRUSH_POOL, "precious", data(1, 10_000)).await.expect("put");
        let location = writer.stat(CRUSH_POOL, "precious").await.expect("stat");
        let primary = location.candidate.devices[0].0;
        let file = optio_server::store::object_path(
            &cluster.device_dir(primary).unwrap(),
            PoolId(1),
            "precious",
        );
        let mut bytes = std::fs::read(&file).expect("the primary's file");
        bytes[5_000] ^= 0x04;
        std::fs::write(&file, &bytes).expect("damage it");

        let reader = client(&cluster, Some("first")).await;
        assert_eq!(reader.get(CRUSH_POOL, "precious").await.expect("get"), data(1, 10_000));
        let stats = reader.stats();
        assert_eq!((stats.corrupt_replicas, stats.repairs), (1, 1), "detected and repaired");
        let repaired = std::fs::read(&file).expect("rewritten");
        assert!(ObjectHeader::decode(&repaired).is_ok(), "the primary holds a good copy again");
        let states = reader.verify(CRUSH_POOL, "precious").await.expect("verify");
        assert!(states.iter().all(|(_, s)| *s == ReplicaState::Good), "{states:?}");
    });
}

#[test]
fn a_lost_replica_file_is_restored_from_another() {
    let (_dir, cluster) = cluster(small());
    runtime().block_on(async {
        let writer = client(&cluster, Some("first")).await;
        writer.put(CRUSH_POOL, "lost", data(3, 5_000)).await.expect("put");
        let location = writer.stat(CRUSH_POOL, "lost").await.expect("stat");
        let primary = location.candidate.devices[0].0;
        let file = optio_server::store::object_path(
            &cluster.device_dir(primary).unwrap(),
            PoolId(1),
            "lost",
        );
        std::fs::remove_file(&file).expect("lose the primary's file");
        let reader = client(&cluster, Some("first")).await;
        assert_eq!(reader.get(CRUSH_POOL, "lost").await.expect("get"), data(3, 5_000));
        assert_eq!(reader.stats().repairs, 1, "the primary was repaired");
        assert!(ObjectHeader::decode(&std::fs::read(&file).expect("restored")).is_ok());
    });
}

#[test]
fn a_full_cluster_is_steered_around_then_refuses_clearly() {
    let spec = LocalClusterSpec { capacity_bytes: 160 << 10, pg_num: 32, ..small() };
    let (_dir, cluster) = cluster(spec);
    runtime().block_on(async {
        let writer = client(&cluster, Some("space")).await;
        let mut stored = Vec::new();
        let error = loop {
            let i = stored.len();
            assert!(i < 100, "160 KiB devices cannot take 100 objects of 16 KiB");
            match writer.put(CRUSH_POOL, &format!("fill/{i}"), data(i, 16 << 10)).await {
                Ok(_) => stored.push(i),
                Err(error) => break error,
            }
        };
        assert!(matches!(error, ClientError::NoRoom { .. }), "{error}");
        assert!(error.to_string().contains("has room"), "{error}");
        // With 3 devices of 160 KiB and r = 3, about 9 objects of 16 KiB fit.
        assert!(stored.len() >= 8, "only {} stored before the cluster was full", stored.len());
        for i in stored {
            assert_eq!(
                writer.get(CRUSH_POOL, &format!("fill/{i}")).await.expect("get"),
                data(i, 16 << 10)
            );
        }
    });
}

#[test]
fn a_stale_epoch_is_refreshed_and_retried() {
    let (_dir, cluster) = cluster(small());
    runtime().block_on(async {
        let writer = client(&cluster, Some("first")).await;
        writer.put(CRUSH_POOL, "before", data(1, 100)).await.expect("put");
        let epoch = writer.epoch();
        let next = optio_cluster::mapstore::update(&cluster.map_path(), |_| {}).expect("bump");
        assert_eq!(next.epoch().0, epoch + 1);
        cluster.wait_for_epoch(epoch + 1).expect("servers reload");
        writer.put(CRUSH_POOL, "after", data(2, 100)).await.expect("put after the change");
        assert_eq!(writer.epoch(), epoch + 1);
        assert_eq!(writer.stats().map_refreshes, 1);
        assert_eq!(writer.get(CRUSH_POOL, "before").await.expect("get"), data(1, 100));
    });
}
