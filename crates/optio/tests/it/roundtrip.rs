//! Round trips on every engine (`crush` pool `data`, `ring` pool `blobs`, `attributed` pool
//! `hetero`, `elastic` pool `elastic`) and every policy,
//! with and without choices: what is written reads back, from the candidate that holds it,
//! and cached accesses send no probe.

use optio_client::ClientError;
use optio_local::cluster::{
    ATTRIBUTED_POOL, BALANCED_POOL, CRUSH_POOL, ELASTIC_POOL, LocalClusterSpec, PLAIN_POOL,
    RING_POOL,
};

use crate::{client, cluster, data, holders, runtime};

#[test]
fn every_engine_and_policy_round_trips() {
    let (_dir, cluster) = cluster(LocalClusterSpec {
        capacity_bytes: 1 << 30,
        pg_num: 64,
        ..LocalClusterSpec::default()
    });
    runtime().block_on(async {
        // Every policy but `composite` (which needs weights in the pool), on both engines with
        // k = 2, and the k = 1 pool.
        let mut runs: Vec<(&str, &str)> = Vec::new();
        for pool in [CRUSH_POOL, RING_POOL, ATTRIBUTED_POOL] {
            for policy in optio_client::policy::POLICY_NAMES.iter().filter(|p| **p != "composite") {
                runs.push((pool, policy));
            }
        }
        runs.push((PLAIN_POOL, "first"));
        runs.push((ELASTIC_POOL, "first"));
        runs.push((BALANCED_POOL, "first"));
        for (pool, policy) in runs {
            {
                let choices =
                    if [PLAIN_POOL, ELASTIC_POOL, BALANCED_POOL].contains(&pool) { 1 } else { 2 };
                let writer = client(&cluster, Some(policy)).await;
                let keys: Vec<String> =
                    (0..12).map(|i| format!("{pool}/{policy}/{choices}/{i}")).collect();
                for (i, key) in keys.iter().enumerate() {
                    let report = writer.put(pool, key, data(i, 100 + i * 37)).await.expect("put");
                    assert_eq!(report.devices.len(), 3, "r = 3");
                    assert!(choices > 1 || report.probes == 0, "k = 1 never probes");
                    // Every replica of the chosen candidate holds it, nothing else does.
                    let candidate =
                        &writer.candidates(pool, key).unwrap()[usize::from(report.candidate)];
                    let mut expected: Vec<u32> = candidate.devices.iter().map(|d| d.0).collect();
                    expected.sort_unstable();
                    assert_eq!(holders(&writer, pool, key).await, expected, "{key}");
                }
                let probes = writer.stats().probes;
                for (i, key) in keys.iter().enumerate() {
                    assert_eq!(writer.get(pool, key).await.expect("get"), data(i, 100 + i * 37));
                }
                assert_eq!(writer.stats().probes, probes, "cached reads send no probe");
                // A fresh client finds everything, asking each object's home once.
                let reader = client(&cluster, Some(policy)).await;
                for (i, key) in keys.iter().enumerate() {
                    let (info, range) =
                        reader.get_range(pool, key, Some((10, 19))).await.expect("range");
                    assert_eq!(info.size_bytes, (100 + i * 37) as u64);
                    assert_eq!(range, data(i, 100 + i * 37).slice(10..20));
                }
                let expected_probes = if choices == 1 { 0 } else { keys.len() as u64 };
                assert_eq!(
                    reader.stats().probes,
                    expected_probes,
                    "one probe per uncached object ({pool}, {policy})"
                );
                let listed =
                    reader.list(pool, &format!("{pool}/{policy}/{choices}/")).await.expect("list");
                assert_eq!(listed.len(), keys.len());
                reader.delete(pool, &keys[0]).await.expect("delete");
                assert!(matches!(
                    reader.get(pool, &keys[0]).await,
                    Err(ClientError::NotFound { .. })
                ));
                assert!(holders(&reader, pool, &keys[0]).await.is_empty());
            }
        }
    });
}

/// k and the policy come from the map (`optio up --choices 3 --policy random` writes them on
/// `data` and `blobs`): a client without an override writes where the pool's policy says, an
/// override changes the policy but never k, and `plain` has one candidate.
#[test]
fn the_pools_k_and_policy_come_from_the_map() {
    let (_dir, cluster) =
        cluster(LocalClusterSpec { choices: 3, policy: "random".into(), ..crate::small() });
    runtime().block_on(async {
        let pooled = client(&cluster, None).await;
        let first = client(&cluster, Some("first")).await;
        for pool in [CRUSH_POOL, RING_POOL] {
            let mut on = [0usize; 3];
            for i in 0..24 {
                let key = format!("{pool}/k3/{i}");
                let candidates = pooled.candidates(pool, &key).expect("candidates");
                assert_eq!(candidates.len(), 3, "k = 3, from the map");
                assert_eq!(first.candidates(pool, &key).expect("candidates"), candidates);
                let wanted = pooled.policy_pick(pool, &key, 100, None).await.expect("pick");
                let random = pooled.policy_pick(pool, &key, 100, Some("random")).await;
                assert_eq!(wanted, random.expect("pick"), "the pool's policy is random");
                let report = pooled.put(pool, &key, data(i, 100)).await.expect("put");
                assert_eq!(report.candidate, wanted, "{key}");
                assert_eq!(pooled.stat(pool, &key).await.expect("stat").candidate.index, wanted);
                on[usize::from(wanted)] += 1;
                let other = format!("{key}/first");
                assert_eq!(first.put(pool, &other, data(i, 100)).await.expect("put").candidate, 0);
            }
            assert!(on.iter().all(|&n| n > 0), "{pool}: random uses every candidate: {on:?}");
        }
        let plain = pooled.candidates(PLAIN_POOL, "plain/0").expect("candidates");
        assert_eq!(plain.len(), 1, "the pool without choices");
        assert_eq!(pooled.put(PLAIN_POOL, "plain/0", data(0, 10)).await.expect("put").probes, 0);
    });
}
