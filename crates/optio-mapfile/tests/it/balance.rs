//! Proves that Optio's balance settings (seed 002's `pps = "congruential"`, `balance_param`
//! and `alg = "linear"`; Optio's `balanced = true`) round-trip through Optio TOML exactly,
//! that `balance_param = "auto"` is searched once and written back as the number found, that
//! bad values are errors naming the line, and that Ceph's formats refuse what Ceph cannot
//! hold instead of writing a different map.

use optio_mapfile::{ParseErrorKind, WriteError, ceph_json, ceph_text, optio_toml};
use optio_placement::{BucketAlg, LINEAR_PARAM_ONE, Placement, PoolId, PpsGenerator};

/// Four hosts of two devices; `host_alg` for the hosts, and the pool lines given.
fn map_text(host_alg: &str, pool_lines: &str) -> String {
    let mut text = String::new();
    for id in 0..8 {
        text.push_str(&format!(
            "[[devices]]\nid = {id}\nlocation = {{ host = \"h{}\" }}\n\n",
            id / 2
        ));
    }
    for h in 0..4 {
        text.push_str(&format!(
            "[[buckets]]\nname = \"h{h}\"\ntype = \"host\"\nalg = \"{host_alg}\"\n\n"
        ));
    }
    text.push_str(&format!(
        "[[pools]]\nid = 1\nname = \"rbd\"\nsize = 2\npg_num = 128\n{pool_lines}\n"
    ));
    text
}

#[test]
fn settings_round_trip_through_toml() {
    let cases = [
        ("linear", "pps = \"congruential\"\nbalance_param = 1.5\n"),
        ("linear", "balance_param = 2.015625\n"),
        ("straw2", "balanced = true\n"),
        ("straw2", "pps = \"congruential\"\nbalanced = true\n"),
        ("straw2", "pps = \"congruential\"\n"),
    ];
    for (alg, lines) in cases {
        let map =
            optio_toml::parse(&map_text(alg, lines)).unwrap_or_else(|e| panic!("{lines}: {e}"));
        let written = optio_toml::write(&map);
        let again = optio_toml::parse(&written).unwrap_or_else(|e| panic!("{e}\n{written}"));
        assert_eq!(again, map, "{lines}\n{written}");
        let pool = &map.pools()[0];
        if lines.contains("congruential") {
            assert_eq!(pool.balance.pps, PpsGenerator::Congruential);
            assert!(written.contains("pps = \"congruential\""), "{written}");
        }
        if lines.contains("balanced") {
            assert!(pool.balance.balanced);
            assert!(written.contains("balanced = true"), "{written}");
        }
        if alg == "linear" {
            assert!(map.buckets().all(|b| b.type_id.0 != 1 || b.alg == BucketAlg::Linear));
            assert!(written.contains("alg = \"linear\""), "{written}");
            assert!(written.contains("balance_param = "), "{written}");
        }
        // The placement works end to end.
        let placement = Placement::new(&map).expect("compiles");
        assert_eq!(placement.pool(PoolId(1)).expect("pool").locate("obj").devices.len(), 2);
    }
    // Defaults are not written.
    let plain = optio_toml::parse(&map_text("straw2", "")).expect("valid");
    let written = optio_toml::write(&plain);
    for key in ["pps", "balance_param", "balanced"] {
        assert!(!written.contains(key), "{key} in\n{written}");
    }
    assert_eq!(plain.pools()[0].balance.linear_param, LINEAR_PARAM_ONE);
}

#[test]
fn auto_is_searched_once_and_written_as_the_number_found() {
    let map = optio_toml::parse(&map_text(
        "linear",
        "pps = \"congruential\"\nbalance_param = \"auto\"\n",
    ))
    .expect("valid");
    let param = map.pools()[0].balance.linear_param;
    assert!(param >= LINEAR_PARAM_ONE);
    let written = optio_toml::write(&map);
    assert!(!written.contains("auto"), "{written}");
    assert_eq!(optio_toml::parse(&written).expect("valid"), map);
}

#[test]
fn bad_settings_name_the_line() {
    let cases = [
        ("linear", "pps = \"fast\"\n", "congruential"),
        ("linear", "balance_param = 0.5\n", "at least 1.0"),
        ("linear", "balance_param = \"best\"\n", "auto"),
        ("straw2", "balance_param = 2.0\n", "reaches none"),
        ("straw2", "balanced = \"yes\"\n", "true or false"),
        ("linear", "balanced = true\nbalance_param = 2.0\n", "means nothing"),
    ];
    for (alg, lines, fragment) in cases {
        let text = map_text(alg, lines);
        let error = optio_toml::parse(&text).expect_err(lines);
        let message = error.to_string();
        assert!(message.contains(fragment), "{lines}: {message}");
        assert!(error.line.is_some(), "{lines}: no line in {message}");
    }
    // A linear host with devices of unequal weights.
    let text = map_text("linear", "").replace("id = 1\nlocation", "id = 1\nweight = 2.0\nlocation");
    let message = optio_toml::parse(&text).expect_err("unequal weights").to_string();
    assert!(message.contains("equal weight"), "{message}");
}

#[test]
fn ceph_formats_refuse_linear_buckets() {
    let map = optio_toml::parse(&map_text("linear", "")).expect("valid");
    for result in [ceph_text::write(&map), ceph_json::write(&map)] {
        match result {
            Err(WriteError::NotCephCompatible { bucket, feature }) => {
                assert!(bucket.starts_with('h'), "{bucket}");
                assert!(feature.contains("linear"), "{feature}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // A Ceph text map naming 'linear' is refused as Ceph itself would.
    let plain = optio_toml::parse(&map_text("straw2", "")).expect("valid");
    let text =
        ceph_text::write(&plain).expect("Ceph-compatible").replace("alg straw2", "alg linear");
    let error = ceph_text::parse(&text).expect_err("Ceph has no linear buckets");
    assert!(matches!(error.kind, ParseErrorKind::Value { .. }), "{error}");
    let json = ceph_json::write(&plain)
        .expect("Ceph-compatible")
        .replace("\"alg\": \"straw2\"", "\"alg\": \"linear\"");
    assert!(ceph_json::parse(&json).is_err());
}
