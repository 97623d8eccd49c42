//! Proves that the Ceph text and JSON formats are read and written as Ceph's crushtool reads
//! and writes them: the same weights, ids, classes and layout, byte for byte.

use std::fmt::Write as _;

use optio_mapfile::{ceph_json, ceph_text};
use optio_placement::ClusterMap;

use crate::support::{Rng, compile, crushtool, decompile, dump, examples};

/// Compiles `text` with crushtool and reads crushtool's JSON dump of the result.
fn crushtool_reading(text: &str) -> Option<(ClusterMap, String)> {
    let crushtool = crushtool()?;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binary = compile(&crushtool, dir.path(), text)
        .unwrap_or_else(|e| panic!("crushtool -c refused:\n{e}\n{text}"));
    let json = dump(&crushtool, &binary);
    let map = ceph_json::parse(&json)
        .unwrap_or_else(|e| panic!("crushtool's dump does not parse: {e}\n{json}"));
    Some((map, json))
}

/// Asserts two maps are equal, naming the first bucket or device that differs.
fn assert_same_map(ours: &ClusterMap, theirs: &ClusterMap, context: &str) {
    if ours == theirs {
        return;
    }
    for (a, b) in ours.buckets().zip(theirs.buckets()) {
        assert_eq!(a, b, "{context}: bucket differs");
    }
    assert_eq!(ours.devices(), theirs.devices(), "{context}: devices differ");
    assert_eq!(ours.rules(), theirs.rules(), "{context}: rules differ");
    assert_eq!(ours.classes(), theirs.classes(), "{context}: classes differ");
    assert_eq!(ours.choose_args(), theirs.choose_args(), "{context}: choose_args differ");
    assert_eq!(ours.tunables(), theirs.tunables(), "{context}: tunables differ");
    assert_eq!(ours, theirs, "{context}: maps differ");
}

#[test]
fn weights_convert_exactly_as_crushtool_converts_them() {
    let mut rng = Rng::new(2024);
    let mut device_weights: Vec<String> = Vec::new();
    for _ in 0..3000 {
        device_weights.push(format!("{}.{:03}", rng.below(100), rng.below(1000)));
    }
    for odd in [
        "2.8125",
        "0.001",
        "1e-5",
        "0.00002",
        "99.999",
        "7.77777",
        "1.0000001",
        "0.0000152587890625",
        "33.3333333",
        "1E-3",
        ".5",
        "5.",
        "+2",
        "0",
        "0.0001",
        "100",
        "100.00001",
        "3.14159265358979",
        "0.1",
        "0.3",
        "0.7",
        "1.001",
        "12.345678",
        "0.000031",
        "0.5e1",
        "1.5E+1",
    ] {
        device_weights.push(odd.to_string());
    }
    // Bucket items may weigh up to 65535 in crushtool; one per root so sums cannot overflow.
    let mut bucket_weights: Vec<String> = vec![
        "65534.999".into(),
        "65535".into(),
        "40000.123".into(),
        "12345.678".into(),
        "32768.0001".into(),
        "256.00390625".into(),
        "1000.001".into(),
        "16777.216".into(),
    ];
    for _ in 0..200 {
        bucket_weights.push(format!("{}.{:03}", rng.below(65535), rng.below(1000)));
    }

    let mut text = String::from("type 0 osd\ntype 1 host\ntype 2 root\n");
    for index in 0..device_weights.len() {
        let _ = writeln!(text, "device {index} osd.{index}");
    }
    for (host, chunk) in device_weights.chunks(100).enumerate() {
        let _ = writeln!(text, "host h{host} {{\n\tid -{}\n\talg straw2\n\thash 0", host + 1);
        for (offset, weight) in chunk.iter().enumerate() {
            let _ = writeln!(text, "\titem osd.{} weight {weight}", host * 100 + offset);
        }
        text.push_str("}\n");
    }
    let first_free = device_weights.len().div_ceil(100) + 1;
    for (index, weight) in bucket_weights.iter().enumerate() {
        let host = first_free + 2 * index;
        let _ = writeln!(
            text,
            "host empty{index} {{\n\tid -{host}\n\talg straw2\n}}\nroot r{index} {{\n\tid -{}\n\talg straw2\n\titem empty{index} weight {weight}\n}}",
            host + 1
        );
    }
    let ours = ceph_text::parse(&text).expect("our parser reads the map");
    let Some((theirs, _)) = crushtool_reading(&text) else { return };
    // Name the first differing weight with the text it came from.
    for bucket in ours.buckets() {
        let other = theirs.bucket(bucket.id).expect("the same buckets");
        for (position, (a, b)) in bucket.weights.iter().zip(&other.weights).enumerate() {
            assert_eq!(a, b, "bucket {} item {position}: ours {a:?}, crushtool {b:?}", bucket.name);
        }
    }
    assert_same_map(&ours, &theirs, "weights");
}

/// Text maps that exercise crushtool's semantics: missing ids, weights and tunables, weights
/// that differ from the children's sums, forward references, classes, every algorithm.
const SEMANTIC_CASES: &[(&str, &str)] = &[
    (
        "missing ids, weights and tunables; overridden parent weight",
        "device 0 osd.0\ndevice 1 osd.1 class ssd\ndevice 2 osd.2 class hdd\ndevice 3 osd.3\n\
         type 0 osd\ntype 1 host\ntype 2 root\n\
         host h0 {\n id -3\n alg straw2\n hash 0\n item osd.0\n item osd.1 weight 2.8125\n}\n\
         host h1 {\n alg straw2\n item osd.2 weight 0.001\n item osd.3 weight 1e-5\n}\n\
         root default {\n alg straw2\n item h1 weight 5.0\n item h0\n}\n\
         rule r {\n id 0\n type replicated\n min_size 1\n max_size 10\n step take default\n \
         step chooseleaf firstn 0 type host\n step emit\n}\n\
         rule e {\n ruleset 1\n type erasure\n min_size 3\n max_size 10\n step take default class ssd\n step emit\n}\n",
    ),
    (
        "a bucket used before it is defined (crushtool reorders it)",
        "device 0 osd.0\ndevice 1 osd.1\ntype 0 osd\ntype 1 host\ntype 2 root\n\
         root default {\n alg straw2\n item h0\n}\n\
         host h0 {\n alg straw2\n item osd.0 weight 2\n item osd.1 weight 3\n}\n\
         rule r {\n id 0\n type replicated\n min_size 1\n max_size 10\n step take default\n step emit\n}\n",
    ),
    (
        "two roots, class ids given for some buckets only, classes out of device order",
        "device 0 osd.0 class hdd\ndevice 2 osd.2 class ssd\ndevice 1 osd.1 class nvme\n\
         type 0 osd\ntype 1 host\ntype 3 rack\ntype 10 root\n\
         host h0 {\n id -1\n id -10 class ssd\n alg straw2\n hash 0\n item osd.0 weight 1.0\n item osd.1 weight 1.0\n}\n\
         root default {\n id -2\n alg straw2\n hash 0\n item h0\n}\n\
         host h1 {\n id -3\n alg straw2\n hash 0\n item osd.2 weight 1.0\n}\n\
         root other {\n id -4\n alg straw2\n item h1\n}\n\
         rule r {\n id 0\n type replicated\n min_size 1\n max_size 10\n step take default class nvme\n step emit\n}\n",
    ),
    (
        "every bucket algorithm, positions, non-default tunables",
        "tunable choose_local_tries 0\ntunable choose_local_fallback_tries 0\n\
         tunable choose_total_tries 50\ntunable chooseleaf_descend_once 5\ntunable chooseleaf_vary_r 1\n\
         tunable straw_calc_version 1\ntunable allowed_bucket_algs 54\n\
         device 0 osd.0\ndevice 1 osd.1\ndevice 2 osd.2\ndevice 3 osd.3\ndevice 4 osd.4\ndevice 5 osd.5\n\
         device 6 osd.6\ndevice 7 osd.7\ntype 0 osd\ntype 1 host\ntype 2 root\n\
         host u {\n id -1\n alg uniform\n item osd.1 weight 2 pos 1\n item osd.0 weight 2 pos 0\n}\n\
         host l {\n id -2\n alg list\n item osd.2 weight 1.5\n item osd.3 weight 0.5\n}\n\
         host t {\n id -3\n alg tree\n item osd.4 pos 1\n item osd.5 weight 3 pos 0\n}\n\
         host s {\n id -4\n alg straw\n item osd.6 weight 1\n item osd.7 weight 4\n}\n\
         root default {\n id -5\n alg straw2\n item u\n item l\n item t\n item s\n}\n\
         rule r {\n id 0\n type replicated\n min_size 1\n max_size 10\n step take default\n \
         step set_choose_tries 100\n step set_chooseleaf_tries 5\n step set_choose_local_tries 0\n \
         step set_choose_local_fallback_tries 0\n step set_chooseleaf_vary_r 1\n step set_chooseleaf_stable 1\n \
         step choose indep 2 type host\n step choose firstn -1 type osd\n step emit\n}\n",
    ),
];

#[test]
fn text_maps_mean_what_they_mean_to_crushtool() {
    for (name, text) in SEMANTIC_CASES {
        let ours = ceph_text::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let Some((theirs, _)) = crushtool_reading(text) else { return };
        assert_same_map(&ours, &theirs, name);
    }
    for (name, text) in examples() {
        if !name.ends_with(".txt") {
            continue;
        }
        let ours = ceph_text::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let Some((theirs, _)) = crushtool_reading(&text) else { return };
        assert_same_map(&ours, &theirs, &name);
    }
}

#[test]
fn written_text_and_json_match_crushtool_byte_for_byte() {
    let Some(crushtool) = crushtool() else { return };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut cases: Vec<(String, String)> =
        SEMANTIC_CASES.iter().map(|(name, text)| (name.to_string(), text.to_string())).collect();
    cases.extend(examples().into_iter().filter(|(name, _)| name.ends_with(".txt")));
    for (name, text) in cases {
        let binary = compile(&crushtool, dir.path(), &text).expect("crushtool compiles the case");
        let their_text = decompile(&crushtool, &binary);
        let their_json = dump(&crushtool, &binary);
        let from_json = ceph_json::parse(&their_json).expect("crushtool's JSON parses");
        assert_eq!(
            ceph_json::write(&from_json).expect("a Ceph-compatible map"),
            their_json,
            "{name}: JSON differs"
        );
        assert_eq!(
            ceph_text::write(&from_json).expect("a Ceph-compatible map"),
            their_text,
            "{name}: text differs"
        );
        let from_text = ceph_text::parse(&their_text).expect("crushtool's text parses");
        assert_eq!(
            ceph_text::write(&from_text).expect("a Ceph-compatible map"),
            their_text,
            "{name}: text round trip differs"
        );
    }
}

#[test]
fn crushtool_compiles_our_text_back_to_the_same_map() {
    let Some(crushtool) = crushtool() else { return };
    let dir = tempfile::tempdir().expect("a temporary directory");
    // Weights here are multiples of 1/8, which three decimals hold exactly.
    let cases = crate::roundtrip::sample_maps(24);
    for (index, map) in cases.iter().enumerate() {
        let expected = crate::roundtrip::ceph_part(&crate::roundtrip::crushtool_compatible(map));
        let text = ceph_text::write(&expected).expect("a Ceph-compatible map");
        let binary = compile(&crushtool, dir.path(), &text)
            .unwrap_or_else(|e| panic!("case {index}: crushtool refuses our text: {e}\n{text}"));
        let their_json = dump(&crushtool, &binary);
        let theirs = ceph_json::parse(&their_json).expect("crushtool's JSON parses");
        assert_same_map(&theirs, &expected, &format!("case {index}"));
        assert_eq!(
            ceph_json::write(&expected).expect("a Ceph-compatible map"),
            their_json,
            "case {index}: JSON differs"
        );
    }
}
