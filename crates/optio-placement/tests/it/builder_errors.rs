//! Proves: the builder refuses every kind of bad input with the right `MapErrorKind`, names
//! the offending item, and says in its message what to do.

use optio_placement::{
    ActiveSpec, AttributedSpec, BucketAlg, BucketSpec, ClusterMapBuilder, CrushSpec, DeviceId,
    DeviceSpec, ElasticSpec, EngineRef, ItemRef, MapError, MapErrorKind, MembershipSpec, PoolId,
    PoolSpec, RingSpec, RuleId, RuleKind, RuleRef, RuleSpec, StepSpec, Subject, VersionSpec,
    Weight,
};

/// 4 hosts × 2 devices, a replicated rule across hosts and a size-3 crush pool: valid.
fn base() -> ClusterMapBuilder {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..8u32 {
        let host = format!("host{}", id / 2);
        builder = builder.device(DeviceSpec::new(id).at(&[("host", &host)]));
    }
    builder
        .replicated_rule(0, "replicated", "default", "host")
        .pool(PoolSpec::crush(1, "rbd", 64, 3))
}

fn bucket(name: &str, type_name: &str, items: &[&str]) -> BucketSpec {
    BucketSpec {
        id: None,
        name: name.to_string(),
        type_name: type_name.to_string(),
        alg: BucketAlg::Straw2,
        hash: 0,
        items: items.iter().map(|i| (ItemRef::Name(i.to_string()), None)).collect(),
        class_ids: Vec::new(),
    }
}

fn rule(id: u32, name: &str, steps: Vec<StepSpec>) -> RuleSpec {
    RuleSpec {
        id: RuleId(id),
        name: name.into(),
        kind: RuleKind::Replicated,
        min_size: 1,
        max_size: 10,
        steps,
    }
}

fn take(item: &str, class: Option<&str>) -> StepSpec {
    StepSpec::Take { item: ItemRef::Name(item.into()), class: class.map(String::from) }
}

fn chooseleaf(type_name: &str) -> StepSpec {
    StepSpec::Choose { leaf: true, indep: false, num: 0, type_name: type_name.into() }
}

/// Builds, expects a refusal about `subject`, and checks that the message names the item
/// and contains `advice` (what to do).
fn refused(builder: ClusterMapBuilder, subject: Subject, advice: &str) -> MapErrorKind {
    let error: MapError = builder.build().expect_err("the builder must refuse this map");
    let message = error.to_string();
    assert_eq!(error.subject, subject, "subject of: {message}");
    let name = match &subject {
        Subject::Device(n)
        | Subject::Bucket(n)
        | Subject::Type(n)
        | Subject::Rule(n)
        | Subject::Pool(n) => n.clone(),
        other => format!("{other}"),
    };
    assert!(message.contains(&name), "the message names '{name}': {message}");
    assert!(message.contains(advice), "the message says what to do ({advice:?}): {message}");
    error.kind
}

#[test]
fn the_base_map_is_valid() {
    // Every refusal below is caused by its one change, not by the base map.
    base().build().expect("valid");
}

#[test]
fn duplicate_device_id() {
    let mut device = DeviceSpec::new(3);
    device.name = "spare".into();
    let kind = refused(
        base().device(device),
        Subject::Device("spare".into()),
        "give each item its own id",
    );
    assert_eq!(kind, MapErrorKind::DuplicateId { id: 3, other: "device 'osd.3'".into() });
}

#[test]
fn duplicate_device_name() {
    let mut device = DeviceSpec::new(9);
    device.name = "osd.2".into();
    let kind = refused(base().device(device), Subject::Device("osd.2".into()), "rename");
    assert_eq!(kind, MapErrorKind::DuplicateName);
}

#[test]
fn device_named_like_a_bucket() {
    let mut device = DeviceSpec::new(9);
    device.name = "host1".into();
    let kind = refused(base().device(device), Subject::Bucket("host1".into()), "rename");
    assert_eq!(kind, MapErrorKind::DuplicateName);
}

#[test]
fn duplicate_bucket_id() {
    let mut builder = base();
    let mut a = bucket("a", "rack", &[]);
    a.id = Some(optio_placement::BucketId(-20));
    let mut b = bucket("b", "rack", &[]);
    b.id = Some(optio_placement::BucketId(-20));
    builder.buckets.extend([a, b]);
    let kind = refused(builder, Subject::Bucket("b".into()), "give each item its own id");
    assert_eq!(kind, MapErrorKind::DuplicateId { id: -20, other: "bucket 'a'".into() });
}

#[test]
fn duplicate_bucket_name() {
    let mut builder = base();
    builder.buckets.extend([bucket("r1", "rack", &[]), bucket("r1", "row", &[])]);
    assert_eq!(
        refused(builder, Subject::Bucket("r1".into()), "rename"),
        MapErrorKind::DuplicateName
    );
}

#[test]
fn located_bucket_with_another_type() {
    // host0 exists as a host; a device placing itself in "rack host0" must be refused.
    let device = DeviceSpec::new(9).at(&[("rack", "host0")]);
    let kind = refused(
        base().device(device),
        Subject::Device("osd.9".into()),
        "already exists with type 'host'",
    );
    assert!(matches!(kind, MapErrorKind::OutOfRange { field: "location", .. }), "{kind:?}");
}

#[test]
fn duplicate_rule_id_and_name() {
    let builder = base().rule(rule(
        0,
        "other",
        vec![take("default", None), chooseleaf("host"), StepSpec::Emit],
    ));
    let kind = refused(builder, Subject::Rule("other".into()), "give each item its own id");
    assert_eq!(kind, MapErrorKind::DuplicateId { id: 0, other: "rule 'replicated'".into() });
    let builder = base().rule(rule(
        1,
        "replicated",
        vec![take("default", None), chooseleaf("host"), StepSpec::Emit],
    ));
    assert_eq!(
        refused(builder, Subject::Rule("replicated".into()), "rename"),
        MapErrorKind::DuplicateName
    );
}

#[test]
fn duplicate_pool_id_and_name() {
    let builder = base().pool(PoolSpec::crush(1, "other", 64, 3));
    let kind = refused(builder, Subject::Pool("other".into()), "give each item its own id");
    assert_eq!(kind, MapErrorKind::DuplicateId { id: 1, other: "pool 'rbd'".into() });
    let builder = base().pool(PoolSpec::crush(2, "rbd", 64, 3));
    assert_eq!(
        refused(builder, Subject::Pool("rbd".into()), "rename"),
        MapErrorKind::DuplicateName
    );
}

#[test]
fn unknown_item() {
    let mut builder = base();
    builder.buckets.push(bucket("rack9", "rack", &["host-nine"]));
    let kind = refused(builder, Subject::Bucket("rack9".into()), "define it");
    assert_eq!(kind, MapErrorKind::UnknownReference { what: "item", name: "host-nine".into() });
    let builder =
        base().rule(rule(1, "r1", vec![take("nowhere", None), chooseleaf("host"), StepSpec::Emit]));
    let kind = refused(builder, Subject::Rule("r1".into()), "define it");
    assert_eq!(kind, MapErrorKind::UnknownReference { what: "item", name: "nowhere".into() });
}

#[test]
fn unknown_types() {
    let mut builder = base();
    builder.buckets.push(bucket("shelf1", "shelf", &[]));
    let kind = refused(builder, Subject::Bucket("shelf1".into()), "define it");
    assert_eq!(kind, MapErrorKind::UnknownReference { what: "type", name: "shelf".into() });
    let device = DeviceSpec::new(9).at(&[("shelf", "s1")]);
    let kind = refused(base().device(device), Subject::Device("osd.9".into()), "define it");
    assert_eq!(kind, MapErrorKind::UnknownReference { what: "type", name: "shelf".into() });
    let builder = base().rule(rule(
        1,
        "r1",
        vec![take("default", None), chooseleaf("shelf"), StepSpec::Emit],
    ));
    let kind = refused(builder, Subject::Rule("r1".into()), "define it");
    assert_eq!(kind, MapErrorKind::UnknownReference { what: "type", name: "shelf".into() });
    let mut ring = PoolSpec::crush(2, "objects", 0, 2);
    ring.engine =
        EngineRef::Ring(RingSpec { vnode_bytes: None, failure_domain: Some("shelf".into()) });
    let kind = refused(base().pool(ring), Subject::Pool("objects".into()), "define it");
    assert_eq!(kind, MapErrorKind::UnknownReference { what: "type", name: "shelf".into() });
}

#[test]
fn unknown_rule() {
    let mut pool = PoolSpec::crush(2, "rgw", 32, 2);
    pool.engine = EngineRef::Crush(CrushSpec { rule: Some(RuleRef::Name("fast".into())) });
    let kind = refused(base().pool(pool), Subject::Pool("rgw".into()), "define it");
    assert_eq!(kind, MapErrorKind::UnknownReference { what: "rule", name: "fast".into() });
    let mut pool = PoolSpec::crush(2, "rgw", 32, 2);
    pool.engine = EngineRef::Crush(CrushSpec { rule: Some(RuleRef::Id(RuleId(7))) });
    let kind = refused(base().pool(pool), Subject::Pool("rgw".into()), "define it");
    assert_eq!(kind, MapErrorKind::UnknownReference { what: "rule", name: "7".into() });
}

#[test]
fn unknown_class() {
    let mut builder = base();
    builder.devices[0].class = Some("hdd".into());
    let builder = builder.rule(rule(
        1,
        "fast",
        vec![take("default", Some("ssd")), chooseleaf("host"), StepSpec::Emit],
    ));
    let kind = refused(builder, Subject::Rule("fast".into()), "define it");
    assert_eq!(kind, MapErrorKind::UnknownReference { what: "class", name: "ssd".into() });
}

#[test]
fn cycles() {
    let mut builder = base();
    builder.buckets.extend([bucket("a", "rack", &["b"]), bucket("b", "row", &["a"])]);
    let error = builder.build().expect_err("a cycle");
    assert!(
        matches!(&error.kind, MapErrorKind::Cycle { path } if path.contains('a') && path.contains('b')),
        "{error}"
    );
    assert!(error.to_string().contains("remove"), "says what to do: {error}");
    let mut builder = base();
    builder.buckets.push(bucket("self", "rack", &["self"]));
    let kind = refused(builder, Subject::Bucket("self".into()), "remove");
    assert!(matches!(kind, MapErrorKind::Cycle { .. }), "{kind:?}");
}

#[test]
fn items_with_two_parents() {
    let mut builder = base();
    builder.buckets.push(bucket("rack1", "rack", &["osd.3"]));
    let kind = refused(builder, Subject::Device("osd.3".into()), "remove it from one of them");
    assert_eq!(
        kind,
        MapErrorKind::MultipleParents { first: "host1".into(), second: "rack1".into() }
    );
    let mut builder = base();
    builder.buckets.extend([
        bucket("hx", "host", &[]),
        bucket("rack1", "rack", &["hx"]),
        bucket("rack2", "rack", &["hx"]),
    ]);
    let kind = refused(builder, Subject::Bucket("hx".into()), "remove it from one of them");
    assert!(matches!(kind, MapErrorKind::MultipleParents { .. }), "{kind:?}");
}

#[test]
fn weight_sums_that_overflow_16_16() {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..3u32 {
        builder =
            builder.device(DeviceSpec::new(id).weight(Weight(0x6000_0000)).at(&[("host", "big")]));
    }
    let kind = refused(builder, Subject::Bucket("big".into()), "use smaller weight units");
    assert_eq!(kind, MapErrorKind::WeightOverflow);
    // Each host fits; their root does not.
    let mut builder = ClusterMapBuilder::new();
    for id in 0..4u32 {
        let host = format!("h{id}");
        builder =
            builder.device(DeviceSpec::new(id).weight(Weight(0x5000_0000)).at(&[("host", &host)]));
    }
    let kind = refused(builder, Subject::Bucket("default".into()), "use smaller weight units");
    assert_eq!(kind, MapErrorKind::WeightOverflow);
}

#[test]
fn reweight_and_primary_affinity_above_one() {
    let mut builder = base();
    builder.devices[5].reweight = Weight(0x10001);
    let kind = refused(builder, Subject::Device("osd.5".into()), "between 0 and 1");
    assert!(matches!(kind, MapErrorKind::OutOfRange { field: "reweight", .. }), "{kind:?}");
    let mut builder = base();
    builder.devices[5].primary_affinity = Weight(0x20000);
    let kind = refused(builder, Subject::Device("osd.5".into()), "between 0 and 1");
    assert!(matches!(kind, MapErrorKind::OutOfRange { field: "primary_affinity", .. }), "{kind:?}");
}

#[test]
fn rule_that_cannot_satisfy_the_pool_size() {
    let builder = base().pool(PoolSpec::crush(2, "wide", 64, 5));
    let kind = refused(builder, Subject::Pool("wide".into()), "lower the pool size to 4");
    assert!(
        matches!(&kind, MapErrorKind::RuleCannotSatisfy { rule, needed: 5, available: 4, .. } if rule == "replicated"),
        "{kind:?}"
    );
    // Zero-weight hosts do not count: with host3 emptied, size 4 cannot be met either.
    let mut builder = base().pool(PoolSpec::crush(2, "four", 64, 4));
    builder.devices[6].weight = Some(Weight::ZERO);
    builder.devices[7].weight = Some(Weight::ZERO);
    let kind = refused(builder, Subject::Pool("four".into()), "lower the pool size to 3");
    assert!(
        matches!(kind, MapErrorKind::RuleCannotSatisfy { needed: 4, available: 3, .. }),
        "{kind:?}"
    );
}

#[test]
fn unsupported_hash() {
    let mut builder = base();
    let mut rack = bucket("rack1", "rack", &[]);
    rack.hash = 1;
    builder.buckets.push(rack);
    let kind = refused(builder, Subject::Bucket("rack1".into()), "use hash 0");
    assert!(matches!(kind, MapErrorKind::Unsupported { .. }), "{kind:?}");
}

#[test]
fn uniform_bucket_with_unequal_weights() {
    let mut builder = ClusterMapBuilder::new();
    builder = builder
        .device(DeviceSpec::new(0).weight(Weight::ONE))
        .device(DeviceSpec::new(1).weight(Weight(0x8000)));
    let mut host = bucket("h", "host", &["osd.0", "osd.1"]);
    host.alg = BucketAlg::Uniform;
    builder.buckets.push(host);
    let kind = refused(builder, Subject::Bucket("h".into()), "use straw2");
    assert!(matches!(kind, MapErrorKind::BucketShape(_)), "{kind:?}");
}

#[test]
fn crush_pool_without_pgs() {
    let builder = base().pool(PoolSpec::crush(2, "nopgs", 0, 2));
    let kind = refused(builder, Subject::Pool("nopgs".into()), "at least one placement group");
    assert!(matches!(kind, MapErrorKind::OutOfRange { field: "pg_num", .. }), "{kind:?}");
}

#[test]
fn pgp_num_above_pg_num() {
    let mut pool = PoolSpec::crush(2, "pgp", 64, 2);
    pool.pgp_num = Some(65);
    let kind = refused(base().pool(pool), Subject::Pool("pgp".into()), "between 1 and pg_num (64)");
    assert!(matches!(kind, MapErrorKind::OutOfRange { field: "pgp_num", .. }), "{kind:?}");
}

#[test]
fn ring_pool_with_zero_vnode_bytes() {
    let mut pool = PoolSpec::crush(2, "ring", 0, 2);
    pool.engine = EngineRef::Ring(RingSpec { vnode_bytes: Some(0), failure_domain: None });
    let kind = refused(base().pool(pool), Subject::Pool("ring".into()), "at least one byte");
    assert!(matches!(kind, MapErrorKind::OutOfRange { field: "vnode_bytes", .. }), "{kind:?}");
}

#[test]
fn refusals_leave_valid_siblings_alone() {
    // The same pool that was refused for pgp_num builds once corrected: the check is exact.
    let mut pool = PoolSpec::crush(2, "pgp", 64, 2);
    pool.pgp_num = Some(64);
    let map = base().pool(pool).build().expect("pgp_num = pg_num is valid");
    assert_eq!(map.pool(PoolId(2)).map(|p| p.pgp_num), Some(64));
}

#[test]
fn rule_steps_beyond_the_tunables_limits() {
    // `set_chooseleaf_vary_r 40` made the mapper shift a u32 by 39 bits (a panic in debug
    // builds, garbage in release) and `set_choose_tries 2^31` a practically endless loop; the
    // builder holds rule steps to the limits it holds the tunables to.
    use optio_placement::Step;
    for (step, field) in [
        (Step::SetChooseleafVaryR(33), "set_chooseleaf_vary_r"),
        (Step::SetChooseTries(1001), "set_choose_tries"),
        (Step::SetChooseleafTries(i32::MAX), "set_chooseleaf_tries"),
        (Step::SetChooseLocalTries(5000), "set_choose_local_tries"),
        (Step::SetChooseLocalFallbackTries(5000), "set_choose_local_fallback_tries"),
        (Step::SetChooseleafStable(2), "set_chooseleaf_stable"),
    ] {
        let steps =
            vec![StepSpec::Set(step), take("default", None), chooseleaf("host"), StepSpec::Emit];
        let kind =
            refused(base().rule(rule(1, "tuned", steps)), Subject::Rule("tuned".into()), "at most");
        assert!(
            matches!(kind, MapErrorKind::OutOfRange { field: f, .. } if f == field),
            "{kind:?}"
        );
    }
    // The limits themselves, and negative values (which Ceph ignores), are accepted.
    let steps = vec![
        StepSpec::Set(optio_placement::Step::SetChooseleafVaryR(32)),
        StepSpec::Set(optio_placement::Step::SetChooseTries(1000)),
        StepSpec::Set(optio_placement::Step::SetChooseleafTries(-5)),
        take("default", None),
        chooseleaf("host"),
        StepSpec::Emit,
    ];
    base().rule(rule(1, "tuned", steps)).build().expect("within the limits");
}

#[test]
fn ring_with_too_many_virtual_nodes() {
    // 300 devices of 1 TiB in 1 MiB vnodes: 65,536 each (the per-device cap), 19.7 million
    // in all — a ring of hundreds of megabytes. Refused, with the vnode_bytes that would do.
    let mut builder = ClusterMapBuilder::new();
    for id in 0..300u32 {
        builder = builder.device(DeviceSpec::new(id).capacity(1 << 40));
    }
    let mut pool = PoolSpec::crush(1, "tiny-vnodes", 0, 3);
    pool.engine = EngineRef::Ring(RingSpec { vnode_bytes: Some(1 << 20), failure_domain: None });
    let kind = refused(
        builder.clone().pool(pool),
        Subject::Pool("tiny-vnodes".into()),
        "raise vnode_bytes to",
    );
    assert!(matches!(kind, MapErrorKind::OutOfRange { field: "vnode_bytes", .. }), "{kind:?}");
    // The suggested size is accepted.
    let MapErrorKind::OutOfRange { reason, .. } = kind else { unreachable!() };
    let suggested: u64 = reason
        .rsplit("raise vnode_bytes to ")
        .next()
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a number");
    let mut pool = PoolSpec::crush(1, "tiny-vnodes", 0, 3);
    pool.engine = EngineRef::Ring(RingSpec { vnode_bytes: Some(suggested), failure_domain: None });
    builder.pool(pool).build().expect("the suggested vnode_bytes fits");
}

// --- The attributed and elastic engines. ---

fn attributed(sector_size: Option<u32>, throttle_bytes: Option<u64>) -> PoolSpec {
    PoolSpec {
        engine: EngineRef::Attributed(AttributedSpec {
            throttle_bytes,
            sector_size,
            zone_type: None,
            distinct_zones: false,
            bandwidth_tolerance_percent: None,
            sector_base: None,
            selection: None,
        }),
        ..PoolSpec::crush(2, "hetero", 0, 3)
    }
}

fn elastic(primaries: Option<u32>) -> PoolSpec {
    PoolSpec {
        engine: EngineRef::Elastic(ElasticSpec { primaries, scale: None }),
        ..PoolSpec::crush(2, "elastic", 0, 2)
    }
}

fn membership(order: &[&str], versions: Vec<ActiveSpec>) -> MembershipSpec {
    MembershipSpec {
        order: order.iter().map(|n| ItemRef::Name(n.to_string())).collect(),
        versions: versions
            .into_iter()
            .map(|active| VersionSpec { version: None, active })
            .collect(),
    }
}

#[test]
fn attributed_sector_size_below_one() {
    let kind = refused(
        base().pool(attributed(Some(0), None)),
        Subject::Pool("hetero".into()),
        "sector_size = 4",
    );
    assert!(matches!(kind, MapErrorKind::OutOfRange { field: "sector_size (s)", .. }));
}

#[test]
fn attributed_throttle_zero() {
    let kind = refused(
        base().pool(attributed(None, Some(0))),
        Subject::Pool("hetero".into()),
        "throttle = \"1GiB\"",
    );
    assert!(matches!(kind, MapErrorKind::OutOfRange { field: "throttle (c_throttle)", .. }));
}

#[test]
fn attributed_too_many_virtual_nodes() {
    // 2,100 devices of 65,536 virtual nodes (the per-device cap) exceed 2^27 in all.
    let mut builder = base().pool(attributed(None, Some(1)));
    for id in 8..2100 {
        builder = builder.device(DeviceSpec::new(id).capacity(1 << 40));
    }
    refused(builder, Subject::Pool("hetero".into()), "raise the throttle");
}

#[test]
fn attributed_unknown_zone_type() {
    let mut pool = attributed(None, None);
    if let EngineRef::Attributed(AttributedSpec { zone_type, .. }) = &mut pool.engine {
        *zone_type = Some("galaxy".into());
    }
    let kind = refused(
        base().pool(pool),
        Subject::Pool("hetero".into()),
        "define it or correct the reference",
    );
    assert!(matches!(kind, MapErrorKind::UnknownReference { what: "type", .. }));
}

#[test]
fn attributed_sector_base_twice_the_same_device() {
    let mut pool = attributed(None, None);
    if let EngineRef::Attributed(AttributedSpec { sector_base, .. }) = &mut pool.engine {
        *sector_base = Some(vec![(DeviceId(1), 4), (DeviceId(1), 5)]);
    }
    refused(base().pool(pool), Subject::Pool("hetero".into()), "keep one entry per device");
}

#[test]
fn elastic_more_primaries_than_servers() {
    let kind = refused(base().pool(elastic(Some(9))), Subject::Pool("elastic".into()), "at most 8");
    assert!(matches!(kind, MapErrorKind::OutOfRange { field: "primaries (p)", .. }));
    refused(base().pool(elastic(Some(0))), Subject::Pool("elastic".into()), "primaries = 2");
}

#[test]
fn elastic_version_naming_an_unknown_server() {
    let mut builder = base().pool(elastic(None));
    builder.membership = Some(membership(
        &[],
        vec![
            ActiveSpec::FirstRanks(8),
            ActiveSpec::Devices(vec![
                ItemRef::Name("osd.0".into()),
                ItemRef::Name("osd.99".into()),
            ]),
        ],
    ));
    let kind = refused(builder, Subject::Version(2), "define it or correct the reference");
    assert!(matches!(kind, MapErrorKind::UnknownReference { what: "device (server)", .. }));
}

#[test]
fn elastic_order_naming_an_unknown_server_or_a_bucket() {
    let mut builder = base().pool(elastic(None));
    builder.membership = Some(membership(&["osd.3", "nosuch"], Vec::new()));
    refused(builder, Subject::Membership, "define it or correct the reference");
    let mut builder = base().pool(elastic(None));
    builder.membership = Some(membership(&["host1"], Vec::new()));
    refused(builder, Subject::Membership, "define it or correct the reference");
    let mut builder = base().pool(elastic(None));
    builder.membership = Some(membership(&["osd.3", "osd.3"], Vec::new()));
    refused(builder, Subject::Membership, "list each server once");
}

#[test]
fn elastic_version_leaving_a_primary_inactive() {
    // 8 servers: p = 2; a version of one active server leaves rank 2 inactive.
    let mut builder = base().pool(elastic(None));
    builder.membership = Some(membership(&[], vec![ActiveSpec::FirstRanks(1)]));
    refused(builder, Subject::Version(1), "keep ranks 1 to 2 active");
    let mut builder = base().pool(elastic(None));
    builder.membership = Some(membership(&[], vec![ActiveSpec::FirstRanks(9)]));
    refused(builder, Subject::Version(1), "use at most 8");
}

#[test]
fn elastic_versions_out_of_order() {
    let mut builder = base().pool(elastic(None));
    builder.membership = Some(MembershipSpec {
        order: Vec::new(),
        versions: vec![
            VersionSpec { version: Some(5), active: ActiveSpec::FirstRanks(8) },
            VersionSpec { version: Some(5), active: ActiveSpec::FirstRanks(4) },
        ],
    });
    refused(builder, Subject::Version(5), "renumber or reorder them");
}
