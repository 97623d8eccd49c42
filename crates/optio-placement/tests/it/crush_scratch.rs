//! Proves: `CrushMap::do_rule` never panics for lack of permutation scratch — not when a rule
//! turns the local-fallback search on with `set_choose_local_fallback_tries` under tunables
//! that leave it off, and not with a `CrushWork::default()` on a map with uniform buckets.
//! (Both panicked with an out-of-range slice before the fix; the Ceph oracle test
//! `crushtool_text::rule_shapes` in optio-mapfile proves the results equal crushtool's.)

use optio_placement::crush::{CrushMap, CrushWork};
use optio_placement::{
    BucketAlg, BucketSpec, ClusterMapBuilder, DeviceSpec, ItemId, ItemRef, RuleId, RuleKind,
    RuleSpec, Step, StepSpec,
};

fn rule(steps: Vec<StepSpec>) -> RuleSpec {
    RuleSpec {
        id: RuleId(0),
        name: "r".into(),
        kind: RuleKind::Replicated,
        min_size: 1,
        max_size: 10,
        steps,
    }
}

fn leaf_steps() -> Vec<StepSpec> {
    vec![
        StepSpec::Take { item: ItemRef::Name("default".into()), class: None },
        StepSpec::Choose { leaf: true, indep: false, num: 0, type_name: "host".into() },
        StepSpec::Emit,
    ]
}

#[test]
fn set_choose_local_fallback_tries_step_with_optimal_tunables() {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..12u32 {
        let host = format!("host{}", id / 4);
        builder = builder.device(DeviceSpec::new(id).at(&[("host", &host)]));
    }
    let mut steps = vec![StepSpec::Set(Step::SetChooseLocalFallbackTries(3))];
    steps.extend(leaf_steps());
    let map = builder.rule(rule(steps)).build().expect("valid map");
    assert_eq!(map.tunables().choose_local_fallback_tries, 0, "the tunable leaves it off");
    let crush = CrushMap::new(&map);
    // Device 0 out: collisions and rejections reach the permutation fallback.
    let mut weights = vec![0x10000u32; 12];
    weights[0] = 0;
    weights[5] = 0x8000;
    for mut work in [CrushWork::new(&crush), CrushWork::default()] {
        let mut out = [0i32; 3];
        for x in 0..2000 {
            let n = crush.do_rule(RuleId(0), x, &mut out, &weights, None, &mut work);
            assert_eq!(n, 3, "x {x}: three hosts, three replicas");
            assert!(!out.contains(&0), "x {x}: device 0 is out");
        }
    }
}

#[test]
fn default_scratch_on_uniform_buckets() {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..9u32 {
        builder = builder.device(DeviceSpec::new(id));
    }
    for host in 0..3 {
        builder.buckets.push(BucketSpec {
            id: None,
            name: format!("host{host}"),
            type_name: "host".into(),
            alg: BucketAlg::Uniform,
            hash: 0,
            items: (0..3).map(|i| (ItemRef::Id(ItemId(host * 3 + i)), None)).collect(),
            class_ids: Vec::new(),
        });
    }
    builder.buckets.push(BucketSpec {
        id: None,
        name: "default".into(),
        type_name: "root".into(),
        alg: BucketAlg::Uniform,
        hash: 0,
        items: (0..3).map(|h| (ItemRef::Name(format!("host{h}")), None)).collect(),
        class_ids: Vec::new(),
    });
    let map = builder.rule(rule(leaf_steps())).build().expect("valid map");
    let crush = CrushMap::new(&map);
    let weights = vec![0x10000u32; 9];
    let mut fresh = CrushWork::new(&crush);
    let mut default = CrushWork::default();
    let (mut a, mut b) = ([0i32; 3], [0i32; 3]);
    for x in 0..2000 {
        let n = crush.do_rule(RuleId(0), x, &mut a, &weights, None, &mut fresh);
        let m = crush.do_rule(RuleId(0), x, &mut b, &weights, None, &mut default);
        assert_eq!((n, a), (m, b), "x {x}: a default scratch maps like a sized one");
    }
}
