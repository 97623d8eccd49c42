//! Proves: an object's candidates are distinct, deterministic, and unchanged by any change of
//! the cluster (a whole different set of devices, weights, states, sizes, epochs); candidate 0
//! is the ordinary placement; no policy — built-in or user-written, even a hostile one — ever
//! returns a candidate with a down or full device, and a decision is refused exactly when a
//! naive reference finds every candidate excluded; built-in policies pick the best candidate
//! by their metric; decisions do not depend on how the snapshot is stored; candidates match
//! the golden fixture; invalid settings are refused naming the pool.

use std::fmt::Write as _;
use std::path::PathBuf;

use optio_placement::choice::{
    CHOICES_MAX, Candidates, ChoiceError, ChoiceRequest, CompositeWeights, DeviceMetrics, Eligible,
    Location, MetricsSource, MetricsTable, Policy, PolicyContext,
};
use optio_placement::{
    ChoiceSettings, ClusterMap, ClusterMapBuilder, DeviceId, DeviceSpec, EngineRef, MapErrorKind,
    Placement, PolicySpec, PoolSpec, ReplicaSet, RingSpec, Subject,
};
use proptest::prelude::*;

use crate::strategies::{Shape, key, shape, with_pools};

/// `shape`'s map with every pool offering `choices` candidates picked by `policy`.
fn map_with_choices(shape: &Shape, size: u32, choices: u32, policy: PolicySpec) -> ClusterMap {
    let size = size.min(shape.weighted_hosts()).max(1);
    let mut builder = with_pools(shape.builder(), size);
    for pool in &mut builder.pools {
        pool.choice = ChoiceSettings::new(choices, policy);
    }
    builder.build().expect("a valid generated map")
}

/// Every pool's candidate keys of `name`: (pool id, [(index, suffix, PG, engine key)]).
type Identity = Vec<(u32, Vec<(u8, u32, Option<String>, u32)>)>;

fn identity(placement: &Placement, name: &str) -> Identity {
    let mut keys = optio_placement::choice::CandidateKeys::new();
    placement
        .pools()
        .map(|pool| {
            pool.candidate_keys(name, &mut keys);
            let ids = keys
                .as_slice()
                .iter()
                .map(|k| (k.index, k.suffix, k.pg.map(|pg| pg.to_string()), k.key))
                .collect();
            (pool.pool().id.0, ids)
        })
        .collect()
}

fn policy_strategy() -> impl Strategy<Value = PolicySpec> {
    prop_oneof![
        Just(PolicySpec::First),
        Just(PolicySpec::Random),
        Just(PolicySpec::Local),
        Just(PolicySpec::Memory),
        Just(PolicySpec::Cpu),
        Just(PolicySpec::Space),
        Just(PolicySpec::Latency),
        Just(PolicySpec::Journal),
        (0u32..4, 0u32..4, 1u32..1000, 0u32..4, 0u32..4, 0u32..4).prop_map(
            |(cpu, memory, space, latency, journal, local)| PolicySpec::Composite(
                CompositeWeights { cpu, memory, space, latency, journal, local }
            )
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn candidates_are_distinct_deterministic_and_independent_of_the_cluster(
        before in shape(false),
        after in shape(false),
        (size_before, size_after) in (1u32..4, 1u32..4),
        choices in 1u32..=CHOICES_MAX,
        seed in any::<u32>(),
    ) {
        let a = map_with_choices(&before, size_before, choices, PolicySpec::Space);
        let mut changed = after.builder();
        changed.epoch = optio_placement::Epoch(a.epoch().0 + 7);
        let mut changed = with_pools(changed, size_after.min(after.weighted_hosts()).max(1));
        for pool in &mut changed.pools {
            pool.choice = ChoiceSettings::new(choices, PolicySpec::Local);
        }
        let b = changed.build().expect("valid");
        let (pa, pb) = (Placement::new(&a).expect("compiles"), Placement::new(&b).expect("compiles"));
        let again = Placement::new(&a).expect("compiles");
        let mut scratch = pa.scratch();
        let mut candidates = Candidates::new();
        for i in 0..24 {
            let name = format!("obj-{:x}", key(seed, i));
            let ids = identity(&pa, &name);
            prop_assert_eq!(&ids, &identity(&again, &name), "deterministic");
            prop_assert_eq!(&ids, &identity(&pb, &name), "independent of devices, states, sizes, epoch");
            for pool in pa.pools() {
                pool.candidates(&name, &mut scratch, &mut candidates);
                prop_assert_eq!(candidates.len(), choices as usize);
                let mut units: Vec<u64> = candidates
                    .iter()
                    .map(|(k, _)| k.pg.map_or(u64::from(k.key), |pg| 1 << 40 | u64::from(pg.seed)))
                    .collect();
                units.sort_unstable();
                units.dedup();
                prop_assert_eq!(units.len(), choices as usize, "distinct");
                let (home, devices) = candidates.get(0).expect("home");
                prop_assert_eq!((home.pg, home.key), pool.object_key(&name));
                let mut plain = ReplicaSet::new();
                pool.place(home.key, &mut scratch, &mut plain);
                prop_assert_eq!(*devices, plain, "candidate 0 is the ordinary placement");
            }
        }
    }
}

/// A user policy that tries its worst: the fullest candidate.
struct Fullest;

impl Policy for Fullest {
    fn name(&self) -> &str {
        "fullest"
    }
    fn choose(&self, eligible: &[Eligible], _: &PolicyContext<'_>) -> usize {
        (0..eligible.len()).max_by_key(|&i| (eligible[i].metrics.space_ppm, i)).unwrap_or(0)
    }
}

/// A user policy with a bug: a position past the end.
struct OffByOne;

impl Policy for OffByOne {
    fn name(&self) -> &str {
        "off-by-one"
    }
    fn choose(&self, eligible: &[Eligible], _: &PolicyContext<'_>) -> usize {
        eligible.len()
    }
}

/// The naive reference: may this candidate take data, and is it whole?
fn reference(
    pool: &optio_placement::Pool,
    devices: &ReplicaSet,
    metrics: &MetricsTable,
) -> Option<bool> {
    let list: Vec<DeviceId> = devices.devices().collect();
    let count = u32::try_from(list.len()).expect("a replica set is small");
    if list.is_empty() || count < pool.min_size {
        return None;
    }
    metrics.metrics(devices.primary()?)?;
    for device in &list {
        if let Some(m) = metrics.metrics(*device)
            && (!m.up || m.full || m.space_ppm >= pool.choice.full_ppm)
        {
            return None;
        }
    }
    Some(count == pool.size)
}

fn metrics_strategy(devices: usize) -> impl Strategy<Value = Vec<Option<DeviceMetrics>>> {
    let one = (
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.08),
        prop_oneof![3 => 0u32..1_000_000, 1 => 900_000u32..1_100_000],
        (0u32..1_000_000, 0u32..1_000_000, 0u32..50_000, 0u64..1 << 30, 0usize..4),
    )
        .prop_map(
            |(up, full, space_ppm, (cpu_ppm, memory_ppm, latency_us, journal_bytes, host))| {
                DeviceMetrics {
                    up,
                    full,
                    cpu_ppm,
                    memory_ppm,
                    space_ppm,
                    latency_us,
                    journal_bytes,
                    location: Location::from_levels([(
                        "host",
                        ["r0h0", "r0h1", "r1h0", "r2h3"][host],
                    )]),
                }
            },
        );
    prop::collection::vec(prop_oneof![9 => one.prop_map(Some), 1 => Just(None)], devices)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn no_policy_ever_returns_a_down_or_full_candidate(
        (shape, metrics) in shape(false).prop_flat_map(|s| {
            let n = s.devices().count();
            (Just(s), metrics_strategy(n))
        }),
        size in 1u32..4,
        choices in 1u32..=4,
        full_ppm in prop_oneof![Just(950_000u32), 500_000u32..=1_000_000],
        policy in policy_strategy(),
        seed in any::<u32>(),
    ) {
        let mut builder = with_pools(shape.builder(), size.min(shape.weighted_hosts()).max(1));
        for pool in &mut builder.pools {
            pool.choice = ChoiceSettings { choices, policy, full_ppm };
        }
        let map = builder.build().expect("valid");
        let placement = Placement::new(&map).expect("compiles");
        let mut table = MetricsTable::new(map.max_devices());
        for (id, m) in metrics.iter().enumerate() {
            if let Some(m) = m {
                table.set(DeviceId(u32::try_from(id).expect("a device id")), *m).expect("in range");
            }
        }
        let client = Location::from_levels([("rack", "r0"), ("host", "r0h1")]);
        let mut scratch = placement.scratch();
        let mut candidates = Candidates::new();
        for i in 0..16 {
            let name = format!("{:08x}", key(seed, i));
            for pool in placement.pools() {
                pool.candidates(&name, &mut scratch, &mut candidates);
                let verdicts: Vec<Option<bool>> =
                    candidates.iter().map(|(_, d)| reference(pool.pool(), d, &table)).collect();
                let any_whole = verdicts.contains(&Some(true));
                for user in [None, Some(&Fullest as &dyn Policy)] {
                    let request = ChoiceRequest { policy: user, client: Some(&client) };
                    match pool.choose(&candidates, &table, &request) {
                        Ok(chosen) => {
                            let index = usize::from(chosen.key.index);
                            let verdict = verdicts[index];
                            prop_assert!(verdict.is_some(), "chose excluded {index}: {verdicts:?}");
                            prop_assert_eq!(verdict == Some(true), !chosen.degraded);
                            prop_assert!(!any_whole || verdict == Some(true), "degraded chosen over whole");
                            let (_, devices) = candidates.get(index).expect("chosen");
                            for device in devices.devices() {
                                if let Some(m) = table.metrics(device) {
                                    prop_assert!(m.up && !m.full && m.space_ppm < full_ppm);
                                }
                            }
                        }
                        Err(ChoiceError::NoCandidate { excluded, .. }) => {
                            prop_assert!(verdicts.iter().all(Option::is_none), "{verdicts:?}");
                            prop_assert_eq!(excluded.len(), candidates.len());
                        }
                        Err(other) => prop_assert!(false, "{other}"),
                    }
                }
                let bug = ChoiceRequest { policy: Some(&OffByOne), client: None };
                let outcome = pool.choose(&candidates, &table, &bug);
                let refused = matches!(outcome, Err(ChoiceError::PolicyOutOfRange { .. }) | Err(ChoiceError::NoCandidate { .. }));
                prop_assert!(refused, "a buggy policy's answer is refused");
            }
        }
    }
}

/// Candidates with chosen metrics on a 6-host map: the builtin policies pick by their metric.
#[test]
fn builtin_policies_pick_the_best_candidate_by_their_metric() {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..18u32 {
        let (rack, host) = (format!("rack{}", id / 6), format!("host{}", id / 3));
        builder = builder.device(DeviceSpec::new(id).at(&[("rack", &rack), ("host", &host)]));
    }
    let mut pool = PoolSpec::crush(1, "rbd", 256, 3);
    pool.choice = ChoiceSettings::new(4, PolicySpec::First);
    let map = builder.replicated_rule(0, "r", "default", "host").pool(pool).build().expect("valid");
    let placement = Placement::new(&map).expect("compiles");
    let pool = placement.pool_by_name("rbd").expect("pool");
    let mut table = MetricsTable::new(map.max_devices());
    for device in map.devices() {
        let d = device.id.0;
        let metrics = DeviceMetrics {
            cpu_ppm: (d * 7919) % 1_000_000,
            memory_ppm: (d * 104_729) % 1_000_000,
            space_ppm: (d * 15_485_863) % 900_000,
            latency_us: (d * 31) % 1000,
            journal_bytes: u64::from(d * 1299709 % 1_000_000),
            location: Location::of_device(&map, device.id),
            ..DeviceMetrics::default()
        };
        table.set(device.id, metrics).expect("in range");
    }
    let client = Location::from_levels([("rack", "rack1"), ("host", "host3")]);
    let mut scratch = placement.scratch();
    let mut candidates = Candidates::new();
    let mut differs = 0;
    for i in 0..200 {
        let name = format!("vm-disk-{i}");
        pool.candidates(&name, &mut scratch, &mut candidates);
        let aggregates: Vec<_> = candidates
            .iter()
            .map(|(_, devices)| {
                let primary = table.metrics(devices.primary().expect("primary")).expect("known");
                optio_placement::choice::CandidateMetrics::aggregate(
                    devices,
                    primary,
                    &table,
                    Some(&client),
                )
            })
            .collect();
        let best = |value: &dyn Fn(&optio_placement::choice::CandidateMetrics) -> u64| {
            let min = aggregates.iter().map(value).min().expect("non-empty");
            aggregates.iter().position(|a| value(a) == min).expect("exists")
        };
        let expected = [
            (PolicySpec::First, 0),
            (PolicySpec::Cpu, best(&|a| a.cpu_ppm.into())),
            (PolicySpec::Memory, best(&|a| a.memory_ppm.into())),
            (PolicySpec::Space, best(&|a| a.space_ppm.into())),
            (PolicySpec::Latency, best(&|a| a.latency_us.into())),
            (PolicySpec::Journal, best(&|a| a.journal_bytes)),
            (PolicySpec::Local, best(&|a| u64::from(u8::MAX - a.shared_levels))),
        ];
        for (policy, index) in expected {
            let request = ChoiceRequest { policy: Some(&policy), client: Some(&client) };
            let chosen = pool.choose(&candidates, &table, &request).expect("room");
            assert_eq!(usize::from(chosen.key.index), index, "{policy} for {name}");
            differs += usize::from(index != 0);
        }
    }
    assert!(differs > 500, "policies leave home often ({differs})");
}

#[test]
fn decisions_do_not_depend_on_how_the_snapshot_is_stored() {
    let shape_map = {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..12u32 {
            builder = builder.device(DeviceSpec::new(id).at(&[("host", &format!("h{}", id / 2))]));
        }
        let mut pool = PoolSpec::crush(1, "rbd", 64, 2);
        pool.choice = ChoiceSettings::new(3, PolicySpec::Random);
        builder.replicated_rule(0, "r", "default", "host").pool(pool).build().expect("valid")
    };
    let placement = Placement::new(&shape_map).expect("compiles");
    let pool = placement.pool_by_name("rbd").expect("pool");
    let mut table = MetricsTable::new(12);
    let mut pairs = Vec::new();
    for d in (0..12u32).rev() {
        let m = DeviceMetrics {
            space_ppm: d * 10_000,
            cpu_ppm: 1_000_000 - d * 3,
            ..DeviceMetrics::default()
        };
        table.set(DeviceId(d), m).expect("in range");
        pairs.push((DeviceId(d), m));
    }
    let mut scratch = placement.scratch();
    let mut candidates = Candidates::new();
    for i in 0..100 {
        pool.candidates(&format!("o{i}"), &mut scratch, &mut candidates);
        for policy in [PolicySpec::Random, PolicySpec::Space, PolicySpec::Cpu] {
            let request = ChoiceRequest { policy: Some(&policy), client: None };
            assert_eq!(
                pool.choose(&candidates, &table, &request),
                pool.choose(&candidates, &pairs, &request)
            );
        }
    }
}

#[test]
fn no_room_says_which_device_is_full_and_what_to_do() {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..4u32 {
        builder = builder.device(DeviceSpec::new(id).at(&[("host", &format!("h{id}"))]));
    }
    let mut pool = PoolSpec::crush(1, "rbd", 16, 1);
    pool.choice = ChoiceSettings::new(2, PolicySpec::Space);
    let map = builder.replicated_rule(0, "r", "default", "host").pool(pool).build().expect("valid");
    let placement = Placement::new(&map).expect("compiles");
    let pool = placement.pool_by_name("rbd").expect("pool");
    let mut table = MetricsTable::new(4);
    for d in 0..4u32 {
        table
            .set(DeviceId(d), DeviceMetrics { space_ppm: 960_000, ..DeviceMetrics::default() })
            .expect("in range");
    }
    let (mut scratch, mut candidates) = (placement.scratch(), Candidates::new());
    pool.candidates("x", &mut scratch, &mut candidates);
    let error = pool.choose(&candidates, &table, &ChoiceRequest::default()).expect_err("all full");
    let message = error.to_string();
    assert!(message.starts_with("pool 'rbd': no candidate has room"), "{message}");
    assert!(message.contains("96.00% used, full_ratio 95.00%"), "{message}");
    assert!(message.contains("raise the pool's full_ratio"), "{message}");
    // Every device down instead: not a question of room.
    for d in 0..4u32 {
        table
            .set(DeviceId(d), DeviceMetrics { up: false, ..DeviceMetrics::default() })
            .expect("in range");
    }
    let message =
        pool.choose(&candidates, &table, &ChoiceRequest::default()).expect_err("down").to_string();
    assert!(
        message.contains("no candidate can take the object") && message.contains("is down"),
        "{message}"
    );
}

#[test]
fn invalid_settings_are_refused_naming_the_pool() {
    let base = || {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..4u32 {
            builder = builder
                .device(DeviceSpec::new(id).capacity(1 << 40).at(&[("host", &format!("h{id}"))]));
        }
        builder.replicated_rule(0, "r", "default", "host")
    };
    let composite = |weights: CompositeWeights| PolicySpec::Composite(weights);
    let cases: Vec<(u32, ChoiceSettings, &str, &str)> = vec![
        (16, ChoiceSettings::new(0, PolicySpec::First), "choices", "at least one candidate"),
        (16, ChoiceSettings::new(CHOICES_MAX + 1, PolicySpec::Space), "choices", "maximum of 8"),
        (2, ChoiceSettings::new(3, PolicySpec::Space), "choices", "only 2 placement groups"),
        (
            16,
            ChoiceSettings::new(2, composite(CompositeWeights::default())),
            "policy_weights",
            "non-zero weight",
        ),
        (
            16,
            ChoiceSettings::new(
                2,
                composite(CompositeWeights { cpu: 5000, ..CompositeWeights::default() }),
            ),
            "policy_weights",
            "above 1000",
        ),
        (
            16,
            ChoiceSettings { full_ppm: 0, ..ChoiceSettings::new(2, PolicySpec::Space) },
            "full_ratio",
            "above 0",
        ),
        (
            16,
            ChoiceSettings { full_ppm: 1_000_001, ..ChoiceSettings::new(2, PolicySpec::Space) },
            "full_ratio",
            "at most 1.0",
        ),
    ];
    for (pg_num, settings, field, fragment) in cases {
        for ring in [false, true] {
            let mut pool = PoolSpec::crush(7, "photos", pg_num, 2);
            if ring {
                pool.engine =
                    EngineRef::Ring(RingSpec { vnode_bytes: Some(1 << 36), failure_domain: None });
                if field == "choices" && pg_num == 2 {
                    continue; // object-level pools have no PGs to run out of
                }
                pool.pg_num = 0;
            }
            pool.choice = settings;
            let error = base().pool(pool).build().expect_err("invalid");
            assert_eq!(error.subject, Subject::Pool("photos".into()), "{error}");
            match &error.kind {
                MapErrorKind::OutOfRange { field: f, .. } => assert_eq!(*f, field, "{error}"),
                other => panic!("{other:?}"),
            }
            let message = error.to_string();
            assert!(message.starts_with("pool 'photos': "), "{message}");
            assert!(message.contains(fragment), "{message} should mention {fragment}");
        }
    }
    // The same settings at the limit are accepted.
    let mut pool = PoolSpec::crush(7, "photos", 8, 2);
    pool.choice = ChoiceSettings {
        full_ppm: 1_000_000,
        ..ChoiceSettings::new(CHOICES_MAX, PolicySpec::Space)
    };
    base().pool(pool).build().expect("valid");
}

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("golden").join("choice.json")
}

/// 3 racks × 2 hosts × 2 devices; crush pool (k = 4, 64 PGs, 3 replicas across hosts) and an
/// object-level ring pool (k = 3, 3 replicas across hosts).
fn golden_map() -> ClusterMap {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..12u32 {
        let (rack, host) = (format!("rack{}", id / 4), format!("host{}", id / 2));
        builder = builder.device(
            DeviceSpec::new(id)
                .capacity((1 + u64::from(id % 3)) << 40)
                .at(&[("rack", &rack), ("host", &host)]),
        );
    }
    let mut crush = PoolSpec::crush(1, "rbd", 64, 3);
    crush.choice = ChoiceSettings::new(4, PolicySpec::Space);
    let mut ring = PoolSpec::crush(2, "objects", 0, 3);
    ring.engine = EngineRef::Ring(RingSpec {
        vnode_bytes: Some(1 << 36),
        failure_domain: Some("host".into()),
    });
    ring.choice = ChoiceSettings::new(3, PolicySpec::Local);
    builder
        .replicated_rule(0, "r", "default", "host")
        .pool(crush)
        .pool(ring)
        .build()
        .expect("valid")
}

/// One line per object and pool: the candidates as [suffix, pg, key, devices].
fn golden_text(map: &ClusterMap) -> String {
    let placement = Placement::new(map).expect("compiles");
    let mut scratch = placement.scratch();
    let mut candidates = Candidates::new();
    let mut lines = Vec::new();
    for pool in placement.pools() {
        for i in 0..48 {
            let name =
                if i % 3 == 0 { format!("rbd_data.10ab.{i:016x}") } else { format!("object-{i}") };
            pool.candidates(&name, &mut scratch, &mut candidates);
            let mut line = format!("[{:?}, {:?}", pool.pool().name, name);
            for (key, devices) in candidates.iter() {
                let pg = key.pg.map_or("null".to_string(), |pg| format!("\"{pg}\""));
                let _ =
                    write!(line, ", [{}, {pg}, {}, {:?}]", key.suffix, key.key, devices.as_slice());
            }
            line.push(']');
            lines.push(line);
        }
    }
    format!(
        "{{\n  \"about\": \"Golden CHOICE candidates: see crates/optio-placement/tests/it/choice.rs (golden_map). Each line: pool, object, then per candidate [suffix j, PG, engine key, devices]. Rewrite with OPTIO_BLESS=1 only for a deliberate, named placement change.\",\n  \"candidates\": [\n    {}\n  ]\n}}\n",
        lines.join(",\n    ")
    )
}

#[test]
fn candidates_match_the_golden_fixture() {
    let text = golden_text(&golden_map());
    let path = golden_path();
    if std::env::var("OPTIO_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &text).expect("write fixture");
        return;
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e}; create it with OPTIO_BLESS=1 cargo test choice", path.display())
    });
    serde_json::from_str::<serde_json::Value>(&stored).expect("the fixture is JSON");
    for (line, (want, got)) in stored.lines().zip(text.lines()).enumerate() {
        assert_eq!(want, got, "choice.json line {}: candidates changed", line + 1);
    }
    assert_eq!(stored.lines().count(), text.lines().count());
}
