//! Proves that members' status documents round-trip through both stores, that a newer one
//! replaces the older, and that bad member names and undecodable documents are errors.

use optio_cluster::{ClusterError, MapSource};
use serde::{Deserialize, Serialize};

use crate::support::{etcd, etcd_put, file_source};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Progress {
    epoch: u64,
    moved_objects: u64,
    total_objects: u64,
    phase: String,
}

fn progress(moved: u64, phase: &str) -> Progress {
    Progress { epoch: 7, moved_objects: moved, total_objects: 100, phase: phase.into() }
}

async fn round_trip(source: &MapSource) {
    let none: std::collections::BTreeMap<String, Progress> =
        source.statuses().await.expect("no statuses yet");
    assert!(none.is_empty());

    source.put_status("z1-h1", &progress(10, "migrating")).await.expect("put");
    source.put_status("server-3", &progress(0, "waiting")).await.expect("put");
    source.put_status("z1-h1", &progress(100, "done")).await.expect("replace");
    let statuses: std::collections::BTreeMap<String, Progress> =
        source.statuses().await.expect("statuses");
    assert_eq!(statuses.len(), 2, "{statuses:?}");
    assert_eq!(statuses["z1-h1"], progress(100, "done"));
    assert_eq!(statuses["server-3"], progress(0, "waiting"));

    for bad in ["", "a/b", ".hidden", &"x".repeat(129)] {
        let error = source.put_status(bad, &progress(1, "x")).await.expect_err(bad);
        assert!(matches!(error, ClusterError::BadMember { .. }), "{bad:?}: {error:?}");
    }

    // A document of another shape is an error naming the member and the source.
    source.put_status("z2-h1", &"just a string").await.expect("put");
    let error = source.statuses::<Progress>().await.expect_err("a string is not a Progress");
    let message = error.to_string();
    assert!(message.contains("z2-h1") && message.contains(&source.describe()), "{message}");
}

#[tokio::test]
async fn statuses_round_trip_in_a_file_store() {
    let (dir, source) = file_source();
    round_trip(&source).await;
    assert!(dir.path().join("status/z1-h1.json").is_file());
    // A writer's temporary file is not a status.
    std::fs::write(dir.path().join("status/z3-h1.json.tmp.1.2"), "{").expect("write");
    std::fs::remove_file(dir.path().join("status/z2-h1.json")).expect("remove");
    let statuses = source.statuses::<Progress>().await.expect("statuses");
    assert_eq!(statuses.keys().collect::<Vec<_>>(), ["server-3", "z1-h1"]);
}

#[tokio::test]
async fn statuses_round_trip_in_etcd() {
    let Some(etcd) = etcd() else { return };
    let source = MapSource::parse(&etcd.url()).expect("etcd");
    round_trip(&source).await;
    // Another prefix sees none of them; keys that are not member names are ignored.
    let other = MapSource::parse(&format!("{}/other", etcd.url())).expect("etcd");
    assert!(other.statuses::<Progress>().await.expect("statuses").is_empty());
    etcd_put(&etcd.endpoint(), "/other/status/bad name", "{}").await;
    assert!(other.statuses::<Progress>().await.expect("statuses").is_empty());
}
