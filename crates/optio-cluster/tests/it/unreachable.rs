//! Proves that an etcd that does not answer gives the clear "cannot reach etcd" error on every
//! operation, and that a watcher keeps waiting instead.

use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

use optio_cluster::{ClusterError, MapSource};
use optio_placement::Epoch;

use crate::support::{at_epoch, small_map};

#[tokio::test]
async fn every_operation_says_etcd_cannot_be_reached() {
    // A port nobody listens on: bound, then closed.
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let source = MapSource::parse(&format!("etcd://127.0.0.1:{port}")).expect("etcd");
    let map = small_map();
    let errors = [
        source.load().await.expect_err("load"),
        source.initialize(&map).await.expect_err("initialize"),
        source.replace(&map).await.expect_err("replace"),
        source.compare_and_swap(Epoch(1), &at_epoch(&map, 2, "")).await.expect_err("swap"),
        source
            .apply(
                &optio_placement::MapChange::RemoveDevice(optio_placement::DeviceId(0)),
                optio_cluster::ApplyOptions::Unjudged,
            )
            .await
            .expect_err("apply"),
        source.watch().await.expect_err("watch"),
        source.put_status("z1-h1", &1).await.expect_err("put_status"),
        source.statuses::<u64>().await.expect_err("statuses"),
    ];
    for error in errors {
        assert!(matches!(error, ClusterError::EtcdUnreachable { .. }), "{error:?}");
        let message = error.to_string();
        let expected = format!("cannot reach etcd at http://127.0.0.1:{port} (");
        assert!(message.starts_with(&expected), "{message}");
        assert!(message.ends_with("): is it running? check --map"), "{message}");
        println!("{message}");
    }

    // A watcher made without a read keeps trying: no error, no map.
    let mut watcher = source.watch_after(None);
    let waited = tokio::time::timeout(Duration::from_millis(500), watcher.next()).await;
    assert!(waited.is_err(), "the watcher keeps trying: {waited:?}");
}
