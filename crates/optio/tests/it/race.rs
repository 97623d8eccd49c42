//! Two clients racing to create the same 1,000 objects, each with its own policy: every
//! object ends up on exactly one candidate, the one its home's choice record names.

use std::collections::BTreeSet;

use futures_util::future::join_all;
use optio_local::cluster::CRUSH_POOL;

use optio_local::cluster::LocalClusterSpec;

use crate::{client, cluster, data, everything, runtime};

const OBJECTS: usize = 1_000;
const IN_FLIGHT: usize = 8;

#[test]
fn racing_creators_never_split_an_object() {
    let spec = LocalClusterSpec {
        hosts_per_zone: 2,
        capacity_bytes: 1 << 30,
        pg_num: 64,
        ..LocalClusterSpec::default()
    };
    let (_dir, cluster) = cluster(spec);
    runtime().block_on(async {
        let a = client(&cluster, Some("first")).await;
        let b = client(&cluster, Some("random")).await;
        let keys: Vec<String> = (0..OBJECTS).map(|i| format!("race/{i}")).collect();
        let run = |client: optio_client::Client, salt: usize| {
            let keys = keys.clone();
            async move {
                let chunks: Vec<Vec<(usize, String)>> = (0..IN_FLIGHT)
                    .map(|c| {
                        keys.iter()
                            .cloned()
                            .enumerate()
                            .filter(|(i, _)| i % IN_FLIGHT == c)
                            .collect()
                    })
                    .collect();
                let workers = chunks.into_iter().map(|chunk| {
                    let client = client.clone();
                    async move {
                        let mut reports = Vec::new();
                        for (i, key) in chunk {
                            let report = client
                                .put(CRUSH_POOL, &key, data(i + salt, 64))
                                .await
                                .expect("put");
                            reports.push((i, report.candidate));
                        }
                        reports
                    }
                });
                let mut reports = vec![0u8; keys.len()];
                for (i, candidate) in join_all(workers).await.into_iter().flatten() {
                    reports[i] = candidate;
                }
                reports
            }
        };
        let (a_reports, b_reports) = tokio::join!(run(a.clone(), 0), run(b.clone(), OBJECTS));
        let stored = everything(&a, CRUSH_POOL).await;
        let mut followed = 0;
        for (i, key) in keys.iter().enumerate() {
            let replicas = &stored[key];
            let holders: BTreeSet<u32> = replicas.iter().map(|(d, _, _)| *d).collect();
            let seeds: BTreeSet<Option<u64>> = replicas.iter().map(|(_, _, pg)| *pg).collect();
            assert_eq!(seeds.len(), 1, "{key}: replicas in several PGs: {replicas:?}");
            let seed = seeds.into_iter().next().flatten().expect("a PG seed");
            let candidates = a.candidates(CRUSH_POOL, key).unwrap();
            let on: Vec<u8> = candidates
                .iter()
                .filter(|c| c.pg.map(|pg| u64::from(pg.seed)) == Some(seed))
                .map(|c| c.index)
                .collect();
            assert_eq!(on.len(), 1, "{key} is in PG seed {seed}, candidates {candidates:?}");
            let chosen = &candidates[usize::from(on[0])];
            let expected: BTreeSet<u32> = chosen.devices.iter().map(|d| d.0).collect();
            assert_eq!(
                holders, expected,
                "{key}: every replica of the chosen candidate, nothing else"
            );
            if i % 10 == 0 {
                let probe = a.probe(CRUSH_POOL, key).await.expect("probe");
                assert_eq!(
                    probe.record.map(|r| r.candidate),
                    Some(on[0]),
                    "{key}: the record names the holder"
                );
            }
            let value = a.get(CRUSH_POOL, key).await.expect("get");
            assert!(
                value == data(i, 64) || value == data(i + OBJECTS, 64),
                "{key}: one writer's data"
            );
            assert_eq!(
                (a_reports[i], b_reports[i]),
                (on[0], on[0]),
                "{key}: both writes went where it is"
            );
            followed += usize::from(on[0] == 1);
        }
        // `first` always wants candidate 0: objects on candidate 1 are races `random` won.
        assert!(followed > 0, "no race was won by the random policy");
    });
}
