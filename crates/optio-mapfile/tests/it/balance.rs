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
            assert_eq!(pool.balance().pps, PpsGenerator::Congruential);
            assert!(written.contains("pps = \"congruential\""), "{written}");
        }
        if lines.contains("balanced") {
            assert_eq!(pool.balance().balanced, optio_placement::BalanceMethod::HistoryFree);
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
    assert_eq!(plain.pools()[0].balance().linear_param, LINEAR_PARAM_ONE);
}

#[test]
fn auto_is_searched_once_and_written_as_the_number_found() {
    let map = optio_toml::parse(&map_text(
        "linear",
        "pps = \"congruential\"\nbalance_param = \"auto\"\n",
    ))
    .expect("valid");
    let param = map.pools()[0].balance().linear_param;
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

/// Every PG's devices in pool 1, in order.
fn placements(map: &optio_placement::ClusterMap) -> Vec<Vec<u32>> {
    let placement = Placement::new(map).expect("compiles");
    let pool = placement.pool(PoolId(1)).expect("pool 1");
    let (mut scratch, mut out) = (placement.scratch(), optio_placement::ReplicaSet::new());
    (0..map.pools()[0].pg_num)
        .map(|seed| {
            pool.place(pool.pg_key(seed), &mut scratch, &mut out);
            out.devices().map(|d| d.0).collect()
        })
        .collect()
}

#[test]
fn an_incremental_pool_and_its_state_round_trip_through_toml() {
    let map =
        optio_toml::parse(&map_text("straw2", "balanced = \"incremental\"\n")).expect("valid");
    let pool = &map.pools()[0];
    assert_eq!(pool.balance().balanced, optio_placement::BalanceMethod::Incremental);
    let state = pool.balance_state().expect("the builder computed the state");
    assert_eq!((state.units, state.size, state.devices.len(), state.domains.len()), (128, 2, 8, 4));
    let written = optio_toml::write(&map);
    assert!(written.contains("balanced = \"incremental\""), "{written}");
    assert!(written.contains("[pools.balance_state]"), "{written}");
    let again = optio_toml::parse(&written).unwrap_or_else(|e| panic!("{e}\n{written}"));
    assert_eq!(again, map, "{written}");
    assert_eq!(placements(&again), placements(&map));
    // Writing again gives the same text: the state read back is kept as it is.
    assert_eq!(optio_toml::write(&again), written);

    // A map derived by a live change carries a state rebalanced from the previous one; it
    // round-trips too.
    let change = optio_placement::change::MapChange::AddDevice(
        optio_placement::DeviceSpec::new(8).at(&[("host", "h1")]),
    );
    let grown = map.apply(&change, map.epoch()).expect("adds");
    assert_ne!(grown.pools()[0].balance_state(), map.pools()[0].balance_state());
    let written = optio_toml::write(&grown);
    let again = optio_toml::parse(&written).unwrap_or_else(|e| panic!("{e}\n{written}"));
    assert_eq!(again, grown, "{written}");
    assert_eq!(placements(&again), placements(&grown));
}

#[test]
fn a_hand_edited_map_rebalances_from_the_stored_state() {
    // The operator adds a device to the file and keeps the state table: the map is
    // rebalanced from that state, so little moves.
    let map =
        optio_toml::parse(&map_text("straw2", "balanced = \"incremental\"\n")).expect("valid");
    let written = optio_toml::write(&map);
    let first = written.find("[[devices]]").expect("devices are tables");
    let edited = format!(
        "{}[[devices]]\nid = 8\nlocation = {{ host = \"h2\" }}\n\n{}",
        &written[..first],
        &written[first..]
    );
    let grown = optio_toml::parse(&edited).unwrap_or_else(|e| panic!("{e}\n{edited}"));
    let (placement_a, placement_b) =
        (Placement::new(&map).expect("a"), Placement::new(&grown).expect("b"));
    let pool_a = placement_a.pool(PoolId(1)).expect("pool");
    let pool_b = placement_b.pool(PoolId(1)).expect("pool");
    let m = optio_placement::analysis::movement(
        &map,
        &placement_a,
        &grown,
        &placement_b,
        pool_a,
        pool_b,
        0,
        1,
        &mut |_| {},
    );
    // 256 copies over 9 devices: about 28 must move to the new one.
    assert!(m.minimum_copies() > 25.0, "{m:?}");
    assert!(m.ratio_to_minimum() <= 1.5, "moved {} of minimum {:.1}", m.moved, m.minimum_copies());
    // Without the state the pool is balanced from scratch: another placement.
    let start = edited.find("\n# Written by Optio").expect("the state's comment");
    let stateless = optio_toml::parse(&edited[..start]).expect("valid without a state");
    assert_ne!(placements(&stateless), placements(&grown));
}

#[test]
fn bad_balance_states_name_the_line() {
    let map =
        optio_toml::parse(&map_text("straw2", "balanced = \"incremental\"\n")).expect("valid");
    let written = optio_toml::write(&map);
    let first_device = written.find("devices = [\n    [0, ").expect("device 0's entry");
    let line_of = |text: &str, at: usize| text[..at].matches('\n').count() + 1;
    let device_line = line_of(&written, first_device) + 1;
    let table_line = line_of(&written, written.find("[pools.balance_state]").expect("table"));
    // (what to replace, with what, a fragment of the message, the line it must name)
    let cases: Vec<(&str, String, &str, usize)> = vec![
        ("\nversion = 1", "\nversion = 2".into(), "version 2 is not supported", table_line + 1),
        ("classes = 16", "classes = 8".into(), "16 price classes", table_line + 4),
        ("units = 128", "units = 0".into(), "at least 1", table_line + 2),
        (
            "\n    [0, \"h0\", 65536, ",
            "\n    [0, \"h0\", 0, ".into(),
            "weight above 0",
            device_line,
        ),
        (
            "\n    [0, \"h0\", 65536, ",
            "\n    [0, \"h0\", 65536, 0, ".into(),
            "found 20 values",
            device_line,
        ),
        (
            "\n    [0, \"h0\", 65536, ",
            "\n    [9, \"h0\", 65536, ".into(),
            "sorted by id",
            device_line + 1,
        ),
        ("\n    [\"h1\", ", "\n    [\"h0\", ".into(), "sorted by name", table_line + 7),
        ("\nunits = 128", "\nunits = 128\nunit = 3".into(), "unknown key 'unit'", table_line + 3),
        ("\nunits = 128", String::new(), "missing key 'units'", table_line),
    ];
    for (from, to, fragment, line) in cases {
        assert!(written.contains(from), "{from:?} in\n{written}");
        let text = written.replacen(from, &to, 1);
        let error = optio_toml::parse(&text).expect_err(fragment);
        let message = error.to_string();
        assert!(message.contains(fragment), "{to:?}: {message}");
        assert_eq!(error.line, Some(line), "{to:?}: {message}");
    }
    // A price out of range (2^56 + 1) in device 0's entry.
    let entry_start = first_device + "devices = [\n    ".len();
    let entry_end = entry_start + written[entry_start..].find(']').expect("entry end");
    let mut values: Vec<&str> = written[entry_start + 1..entry_end].split(", ").collect();
    values[3] = "72057594037927937";
    let text =
        format!("{}[{}{}", &written[..entry_start], values.join(", "), &written[entry_end..]);
    let error = optio_toml::parse(&text).expect_err("price out of range");
    assert!(error.to_string().contains("out of range (1 to"), "{error}");
    assert_eq!(error.line, Some(device_line), "{error}");
    // A state on a pool that is not incremental.
    let text = written.replace("balanced = \"incremental\"", "balanced = true");
    let message = optio_toml::parse(&text).expect_err("state without incremental").to_string();
    assert!(message.contains("only incremental balanced pools"), "{message}");
    // Both methods at once cannot be written; an unknown method names the choices.
    let message = optio_toml::parse(&map_text("straw2", "balanced = \"fast\"\n"))
        .expect_err("unknown method")
        .to_string();
    assert!(message.contains("\"incremental\""), "{message}");
}

#[test]
fn ceph_formats_leave_out_the_balance_state_with_the_pools() {
    let map =
        optio_toml::parse(&map_text("straw2", "balanced = \"incremental\"\n")).expect("valid");
    let text = ceph_text::write(&map).expect("Ceph-compatible");
    let json = ceph_json::write(&map).expect("Ceph-compatible");
    for written in [&text, &json] {
        assert!(!written.contains("incremental") && !written.contains("balance_state"));
    }
    // What Ceph's formats hold reads back to the same hierarchy, without the pool.
    let back = ceph_text::parse(&text).expect("reads back");
    assert!(back.pools().is_empty());
    assert_eq!(back.devices().len(), map.devices().len());
}
