//! Proves that every example map parses, is detected as its format, and means what it says.

use optio_mapfile::{Format, detect, parse};
use optio_placement::{EngineSpec, Placement};

use crate::support::examples;

#[test]
fn every_example_parses_with_the_detected_format() {
    let examples = examples();
    assert!(examples.len() >= 6, "examples/ should hold the example maps");
    for (name, text) in examples {
        let expected = if name.ends_with(".toml") {
            Format::OptioToml
        } else if name.ends_with(".json") {
            Format::CephJson
        } else {
            Format::CephText
        };
        assert_eq!(detect(&text), expected, "{name}");
        let map = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!map.devices().is_empty(), "{name}");
        Placement::new(&map).unwrap_or_else(|e| panic!("{name}: placement: {e}"));
    }
}

#[test]
fn small_example_has_three_zones_and_two_engines() {
    let text = std::fs::read_to_string(crate::support::examples_dir().join("small.toml"))
        .expect("small.toml");
    let map = parse(&text).expect("valid");
    assert_eq!(map.devices().len(), 9);
    let zone = map.type_by_name("zone").expect("zone type");
    assert_eq!(map.buckets().filter(|b| b.type_id == zone && b.shadow_of.is_none()).count(), 3);
    let engines: Vec<&str> = map.pools().iter().map(|p| p.engine.name()).collect();
    assert_eq!(engines, vec!["crush", "ring"]);
    assert!(
        map.devices().iter().all(|d| d.capacity_bytes == 4 << 40 && d.bandwidth_mb_per_s == 250)
    );
    assert!(
        matches!(map.pools()[1].engine_spec(), EngineSpec::Ring(params) if params.vnode_bytes == 64 << 30)
    );
}

#[test]
fn ceph_json_example_equals_its_text() {
    let dir = crate::support::examples_dir();
    let text = std::fs::read_to_string(dir.join("ceph-classes.txt")).expect("text example");
    let json = std::fs::read_to_string(dir.join("ceph-classes.json")).expect("json example");
    let from_text = parse(&text).expect("text parses");
    let from_json = parse(&json).expect("json parses");
    // The text rounds 2.8125 to 2.812: that one weight differs, as in Ceph.
    let device = |map: &optio_placement::ClusterMap| map.device_by_name("osd.3").map(|d| d.weight);
    assert_eq!(device(&from_json), Some(optio_placement::Weight(184_320)));
    assert_eq!(device(&from_text), Some(optio_placement::Weight(184_287)));
    assert_eq!(from_text.rules(), from_json.rules());
    assert_eq!(from_text.classes(), from_json.classes());
}

#[test]
fn detect_tells_the_formats_apart() {
    let cases = [
        ("{\"devices\": []}", Format::CephJson),
        ("  \n# a comment\n{", Format::CephJson),
        ("# begin crush map\ntunable choose_total_tries 50\n", Format::CephText),
        ("device 0 osd.0\n", Format::CephText),
        ("host h0 {\n id -1\n}\n", Format::CephText),
        ("rule r {\n", Format::CephText),
        ("epoch = 3\n", Format::OptioToml),
        ("[[devices]]\nid = 0\n", Format::OptioToml),
        ("# Optio map\n\n[tunables]\nprofile = \"optimal\"\n", Format::OptioToml),
        ("type = \"x\"\n", Format::OptioToml),
        ("\u{feff}device 0 osd.0\n", Format::CephText),
        ("", Format::OptioToml),
    ];
    for (text, format) in cases {
        assert_eq!(detect(text), format, "{text:?}");
    }
}

#[test]
fn incremental_example_keeps_its_stored_state() {
    let text = std::fs::read_to_string(crate::support::examples_dir().join("incremental.toml"))
        .expect("incremental.toml");
    let map = parse(&text).expect("valid");
    let pool = &map.pools()[0];
    assert_eq!(pool.balance().balanced, optio_placement::BalanceMethod::Incremental);
    let state = pool.balance_state().expect("the stored state");
    assert_eq!((state.units, state.size, state.devices.len()), (256, 3, 12));
    // The file is what Optio writes for it, comments aside: the state read back is kept.
    let body = &text[text.find("# Optio cluster map").expect("the writer's header")..];
    assert_eq!(optio_mapfile::optio_toml::write(&map), body);
}
