//! A client that crashes between creating the choice record and writing the object: the
//! record binds later writers to its candidate, nobody reads a half-written object, and the
//! next client re-probes what the intent log says was in doubt.

use std::process::Command;

use optio_client::ClientError;
use optio_local::cluster::{CRUSH_POOL, LocalClusterSpec};

use crate::{binary, client, cluster, data, everything, runtime};

#[test]
fn a_crash_between_record_and_write_leaves_a_consistent_object() {
    let spec = LocalClusterSpec {
        hosts_per_zone: 2,
        capacity_bytes: 1 << 30,
        pg_num: 64,
        ..LocalClusterSpec::default()
    };
    let (_dir, cluster) = cluster(spec);
    let rt = runtime();
    let key = rt.block_on(async {
        let probe = client(&cluster, None).await;
        for i in 0..100 {
            let key = format!("crash/{i}");
            if probe.policy_pick(CRUSH_POOL, &key, 1, Some("random")).await.expect("pick") == 1 {
                return key;
            }
        }
        panic!("random picks candidate 1 for about half the keys");
    });
    let output = Command::new(binary())
        .args(["put", "--policy", "random", &key, "-"])
        .env("OPTIO_CLUSTER", cluster.dir())
        .env("OPTIO_TEST_CRASH_AFTER_CHOICE_RECORD", "1")
        .output()
        .expect("runs");
    assert!(!output.status.success(), "the client crashed");
    let logs: Vec<_> =
        std::fs::read_dir(cluster.dir().join("intents")).expect("intent dir").collect();
    assert_eq!(logs.len(), 1, "the crashed client's intent log is left behind");

    rt.block_on(async {
        let recovering = client(&cluster, Some("first")).await;
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
        let fresh = client(&cluster, Some("first")).await;
        assert_eq!(fresh.get(CRUSH_POOL, &key).await.expect("get"), data(9, 300));
    });
}
