//! A client that crashes between creating the choice record and writing the object: the
//! record binds later writers to its candidate, nobody reads a half-written object, and the
//! next client re-probes what the intent log says was in doubt.

use std::process::Command;

use optio_client::policy::{CandidateView, Policy, Random};
use optio_client::{Candidate, ClientError};
use optio_cluster::local::{CRUSH_POOL, LocalClusterSpec};
use optio_placement::DeviceId;

use crate::{binary, client, cluster, data, everything, runtime};

/// A key for which the `random` policy picks candidate 1 (so `first` would disagree).
fn key_on_second_candidate() -> String {
    let fake = |index| Candidate { index, pg: None, placement_key: 0, devices: vec![DeviceId(0)] };
    let (c0, c1) = (fake(0), fake(1));
    let views = [
        CandidateView { candidate: &c0, metrics: vec![None], reachable: true },
        CandidateView { candidate: &c1, metrics: vec![None], reachable: true },
    ];
    (0..100)
        .map(|i| format!("crash/{i}"))
        .find(|k| Random.choose(k, 1, &views) == Some(1))
        .expect("half the keys")
}

#[test]
fn a_crash_between_record_and_write_leaves_a_consistent_object() {
    let spec = LocalClusterSpec {
        hosts_per_zone: 2,
        capacity_bytes: 1 << 30,
        pg_num: 64,
        ..LocalClusterSpec::default()
    };
    let (_dir, cluster) = cluster(spec);
    let key = key_on_second_candidate();
    let output = Command::new(binary())
        .args(["put", "--choices", "2", "--policy", "random", &key, "-"])
        .env("OPTIO_CLUSTER", cluster.dir())
        .env("OPTIO_TEST_CRASH_AFTER_CHOICE_RECORD", "1")
        .output()
        .expect("runs");
    assert!(!output.status.success(), "the client crashed");
    let logs: Vec<_> =
        std::fs::read_dir(cluster.dir().join("intents")).expect("intent dir").collect();
    assert_eq!(logs.len(), 1, "the crashed client's intent log is left behind");

    runtime().block_on(async {
        let recovering = client(&cluster, 2, "first").await;
        assert_eq!(
            std::fs::read_dir(cluster.dir().join("intents"))
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .map(|e| {
                            !e.file_name()
                                .to_string_lossy()
                                .starts_with(&std::process::id().to_string())
                        })
                        .unwrap_or(false)
                })
                .count(),
            0,
            "the orphaned log was recovered and removed"
        );
        let probe = recovering.probe(CRUSH_POOL, &key).await.expect("probe");
        assert_eq!(probe.record.map(|r| r.candidate), Some(1), "the record survived the crash");
        assert!(probe.candidates.iter().all(|c| c.info.is_none()), "no data was written");
        assert!(matches!(
            recovering.get(CRUSH_POOL, &key).await,
            Err(ClientError::NotFound { .. })
        ));

        // A later writer whose policy would pick candidate 0 follows the record.
        let report = recovering.put(CRUSH_POOL, &key, data(9, 300)).await.expect("put");
        assert_eq!(report.candidate, 1);
        let stored = everything(&recovering, CRUSH_POOL).await;
        let holders: Vec<u32> = stored[&key].iter().map(|(d, _, _)| *d).collect();
        assert_eq!(holders.len(), 3, "{holders:?}");
        let fresh = client(&cluster, 2, "first").await;
        assert_eq!(fresh.get(CRUSH_POOL, &key).await.expect("get"), data(9, 300));
    });
}
