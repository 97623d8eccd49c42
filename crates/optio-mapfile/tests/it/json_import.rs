//! Proves: Optio's reader of `crushtool --dump` JSON gets every bucket (per-class shadow trees
//! included, which it rebuilds), weight and tunable exactly as crushtool has them.

use crate::ceph::ceph;
use crate::textmap::{TextMap, Weights, level};

#[test]
fn buckets_and_shadow_trees_match_crushtool() {
    // Optio rebuilds per-class shadow trees instead of importing them; they must come out as
    // crushtool's: same ids, types, algorithms, items and weights.
    let Some(ceph) = ceph() else { return };
    let levels = [level("root", "straw2", 3), level("rack", "list", 2), level("host", "straw", 4)];
    let map = TextMap::hierarchy(&levels, Weights::Random { zero_percent: 5 }, &["hdd", "ssd"], 23)
        .rule(
            0,
            "replicated",
            &["take default class hdd", "chooseleaf firstn 0 type host", "emit"],
        );
    let path = ceph.compile(&map.text());
    let dump: serde_json::Value = serde_json::from_str(&ceph.dump(&path)).expect("JSON");
    let optio = ceph.load(&path);
    let mut shadows = 0;
    for bucket in dump["buckets"].as_array().expect("buckets") {
        let name = bucket["name"].as_str().expect("name");
        let ours =
            optio.bucket_by_name(name).unwrap_or_else(|| panic!("Optio lacks bucket {name}"));
        let items: Vec<(i64, u64)> = bucket["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| (i["id"].as_i64().expect("id"), i["weight"].as_u64().expect("weight")))
            .collect();
        let our_items: Vec<(i64, u64)> = ours
            .items
            .iter()
            .zip(&ours.weights)
            .map(|(i, w)| (i64::from(i.0), u64::from(w.0)))
            .collect();
        assert_eq!(our_items, items, "items of {name}");
        assert_eq!(i64::from(ours.id.0), bucket["id"].as_i64().expect("id"), "id of {name}");
        assert_eq!(ours.alg.name(), bucket["alg"].as_str().expect("alg"), "alg of {name}");
        assert_eq!(
            i64::from(ours.type_id.0),
            bucket["type_id"].as_i64().expect("type"),
            "type of {name}"
        );
        shadows += usize::from(name.contains('~'));
    }
    assert_eq!(optio.buckets().count(), dump["buckets"].as_array().expect("buckets").len());
    assert_eq!(shadows, 2 * 10, "two classes shadow all 10 buckets");
}

#[test]
fn tunables_match_crushtool() {
    let Some(ceph) = ceph() else { return };
    let levels = [level("root", "straw", 3), level("host", "straw", 2)];
    let variants: [&[(&str, u32)]; 3] = [
        &[],
        &[("choose_total_tries", 77), ("chooseleaf_vary_r", 2), ("straw_calc_version", 1)],
        &crate::textmap::OPTIMAL,
    ];
    for tunables in variants {
        let map = TextMap::hierarchy(&levels, Weights::Equal, &[], 1).tunables(tunables);
        let path = ceph.compile(&map.text());
        let dump: serde_json::Value = serde_json::from_str(&ceph.dump(&path)).expect("JSON");
        let ours = *ceph.load(&path).tunables();
        let t = &dump["tunables"];
        let field = |name: &str| t[name].as_u64().unwrap_or_else(|| panic!("tunables.{name}"));
        let expected = (
            field("choose_local_tries"),
            field("choose_local_fallback_tries"),
            field("choose_total_tries"),
            field("chooseleaf_descend_once"),
            field("chooseleaf_vary_r"),
            field("chooseleaf_stable"),
            field("straw_calc_version"),
            field("allowed_bucket_algs"),
        );
        let actual = (
            u64::from(ours.choose_local_tries),
            u64::from(ours.choose_local_fallback_tries),
            u64::from(ours.choose_total_tries),
            u64::from(ours.chooseleaf_descend_once),
            u64::from(ours.chooseleaf_vary_r),
            u64::from(ours.chooseleaf_stable),
            u64::from(ours.straw_calc_version),
            u64::from(ours.allowed_bucket_algs),
        );
        assert_eq!(actual, expected, "tunables {tunables:?}");
    }
}

#[test]
fn raw_opcode_steps() {
    // crushtool --dump writes set_choose_local_tries, set_choose_local_fallback_tries,
    // set_chooseleaf_vary_r and set_chooseleaf_stable as {"opcode": 10..13, "arg1", "arg2"}.
    let Some(ceph) = ceph() else { return };
    let levels = [level("root", "straw2", 3), level("host", "straw2", 2)];
    let map = TextMap::hierarchy(&levels, Weights::Equal, &[], 1).rule(
        0,
        "replicated",
        &[
            "set_choose_local_tries 1",
            "set_choose_local_fallback_tries 2",
            "set_chooseleaf_vary_r 0",
            "set_chooseleaf_stable 0",
            "take default",
            "chooseleaf firstn 0 type host",
            "emit",
        ],
    );
    let json = ceph.dump(&ceph.compile(&map.text()));
    assert!(json.contains("\"opcode\": 10"), "crushtool still dumps raw opcodes");
    let parsed = optio_mapfile::ceph_json::parse(&json).expect("Optio reads crushtool's dump");
    use optio_placement::Step;
    assert_eq!(
        parsed.rules()[0].steps[..4],
        [
            Step::SetChooseLocalTries(1),
            Step::SetChooseLocalFallbackTries(2),
            Step::SetChooseleafVaryR(0),
            Step::SetChooseleafStable(0)
        ]
    );
}
