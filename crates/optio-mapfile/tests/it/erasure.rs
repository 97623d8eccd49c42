//! Proves that erasure-coded pools (`erasure = "K+M"`, `stripe_unit`) read, write back
//! unchanged, default `min_size` to K+1, and that the map refuses profiles its pools cannot
//! place, with the line, the pool, its K+M and the failure domains it has.

use optio_mapfile::optio_toml;
use optio_placement::{ClusterMap, ErasureParams};
use proptest::prelude::*;

/// `hosts` hosts of one device each, an indep rule over hosts, then `pools` (TOML text).
fn map_text(hosts: u32, pools: &str) -> String {
    let mut text = String::from("format_version = 1\n");
    for id in 0..hosts {
        text.push_str(&format!(
            "\n[[devices]]\nid = {id}\ncapacity = \"1TiB\"\nlocation = {{ host = \"h{id}\" }}\n"
        ));
    }
    text.push_str(
        "\n[[rules]]\nid = 0\nname = \"ec\"\ntype = \"erasure\"\n\
         steps = [\"take default\", \"chooseleaf indep 0 type host\", \"emit\"]\n",
    );
    text.push_str(pools);
    text
}

fn parse(text: &str) -> ClusterMap {
    optio_toml::parse(text).unwrap_or_else(|error| panic!("{error}\n{text}"))
}

fn round_trips(map: &ClusterMap) {
    let written = optio_toml::write(map);
    assert_eq!(&optio_toml::parse(&written).expect("reads back"), map, "{written}");
}

#[test]
fn an_erasure_pool_reads_with_its_defaults_and_writes_back() {
    let map = parse(&map_text(
        8,
        "\n[[pools]]\nid = 1\nname = \"ec\"\npg_num = 32\nerasure = \"4+2\"\n\
         \n[[pools]]\nid = 2\nname = \"wide\"\nengine = \"ring\"\nerasure = \"5 + 3\"\n\
         stripe_unit = \"1MiB\"\nmin_size = 7\nfailure_domain = \"host\"\n\
         \n[[pools]]\nid = 3\nname = \"plain\"\npg_num = 8\nsize = 3\n",
    ));
    let ec = map.pool_by_name("ec").expect("pool ec");
    assert_eq!(ec.erasure, Some(ErasureParams { k: 4, m: 2, stripe_unit_bytes: 64 << 10 }));
    assert_eq!((ec.size, ec.min_size), (6, 5));
    let wide = map.pool_by_name("wide").expect("pool wide");
    assert_eq!(wide.erasure, Some(ErasureParams { k: 5, m: 3, stripe_unit_bytes: 1 << 20 }));
    assert_eq!((wide.size, wide.min_size), (8, 7));
    assert_eq!(map.pool_by_name("plain").expect("pool plain").erasure, None);

    let written = optio_toml::write(&map);
    assert!(written.contains("erasure = \"4+2\""), "{written}");
    assert!(written.contains("stripe_unit = \"1MiB\""), "{written}");
    assert_eq!(written.matches("stripe_unit").count(), 1, "the default is not written");
    assert_eq!(written.matches("\nsize = ").count(), 1, "only the replicated pool has a size");
    round_trips(&map);

    // Placement spreads an erasure pool's K+M chunks over K+M distinct hosts.
    let placement = optio_placement::Placement::new(&map).expect("compiles");
    let pool = placement.pool(ec.id).expect("placed");
    for key in 0..200u32 {
        let location = pool.locate(&format!("object-{key}"));
        let mut devices: Vec<i32> = location.devices.as_slice().to_vec();
        assert_eq!(devices.len(), 6);
        assert!(devices.iter().all(|device| *device >= 0), "no holes: every device is up");
        devices.sort_unstable();
        devices.dedup();
        assert_eq!(devices.len(), 6, "distinct devices, one host each");
    }
}

/// (pool keys, expected line, fragments the message must contain).
const ERROR_CASES: &[(&str, usize, &[&str])] = &[
    ("erasure = \"4+2\"\nsize = 6\n", 49, &["give either size", "not both"]),
    ("erasure = \"4-2\"\n", 48, &["\"4-2\"", "K+M"]),
    ("erasure = \"4+\"\n", 48, &["K+M"]),
    ("erasure = 6\n", 48, &["string"]),
    ("erasure = \"0+2\"\n", 44, &["K and M must both be at least 1"]),
    ("erasure = \"4+0\"\n", 44, &["at least 1"]),
    ("erasure = \"30+3\"\n", 44, &["\"30+3\"", "at most 32"]),
    ("erasure = \"99999999999+1\"\n", 48, &["\"99999999999+1\"", "at most 32"]),
    ("erasure = \"4+2\"\nstripe_unit = 100\n", 44, &["stripe_unit", "multiple of 64"]),
    ("erasure = \"4+2\"\nstripe_unit = \"1GiB\"\n", 44, &["stripe_unit", "16 MiB"]),
    ("erasure = \"4+2\"\nstripe_unit = 99999999999\n", 49, &["too large"]),
    ("size = 3\nstripe_unit = \"64KiB\"\n", 49, &["erasure-coded pools only"]),
    ("erasure = \"4+2\"\nmin_size = 3\n", 44, &["min_size", "between K (4) and K+M (6)"]),
    (
        "erasure = \"5+3\"\n",
        44,
        &["pool 'p'", "5+3", "K+M = 8 chunks", "only 7 failure domains", "crush rule 'ec'"],
    ),
];

#[test]
fn bad_erasure_pools_are_refused_with_the_line_and_what_to_do() {
    for (keys, line, fragments) in ERROR_CASES {
        // Seven hosts: the pool table starts on line 44, its keys on line 48.
        let text = map_text(7, &format!("\n[[pools]]\nid = 1\nname = \"p\"\npg_num = 8\n{keys}"));
        let error = optio_toml::parse(&text).expect_err(keys);
        let message = error.to_string();
        for fragment in *fragments {
            assert!(message.contains(fragment), "{keys}: {message} should mention {fragment}");
        }
        assert_eq!(error.line, Some(*line), "{keys}: {message}");
    }
}

#[test]
fn crush_pools_need_an_erasure_rule() {
    let text = map_text(8, "\n[[pools]]\nid = 1\nname = \"p\"\npg_num = 8\nerasure = \"4+2\"\n")
        .replace("type = \"erasure\"", "type = \"replicated\"");
    let message = optio_toml::parse(&text).expect_err("a replicated rule").to_string();
    assert!(message.contains("pool 'p'") && message.contains("rule = 'ec'"), "{message}");
    assert!(message.contains("needs a rule of type \"erasure\""), "{message}");
}

#[test]
fn engines_without_rules_count_their_failure_domains() {
    let cases = [
        (
            "engine = \"ring\"\nfailure_domain = \"host\"\n",
            "its ring engine's hosts holding devices with capacity",
        ),
        ("engine = \"ring\"\n", "its ring engine's devices with capacity"),
        ("engine = \"elastic\"\n", "its elastic engine's ranked servers"),
        ("engine = \"attributed\"\n", "its attributed engine's weighted devices"),
    ];
    for (keys, counted) in cases {
        let pool = format!("\n[[pools]]\nid = 1\nname = \"p\"\nerasure = \"3+2\"\n{keys}");
        let error = optio_toml::parse(&map_text(4, &pool)).expect_err(keys);
        let message = error.to_string();
        assert!(message.contains(&format!("only 4 failure domains ({counted})")), "{message}");
        assert!(message.contains("pool 'p'") && message.contains("3+2"), "{message}");
        // With one more host it fits.
        parse(&map_text(5, &pool));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any valid profile, stripe unit and min_size round-trips through TOML.
    #[test]
    fn any_valid_profile_round_trips(
        k in 1u32..=16,
        m in 1u32..=4,
        blocks in 1u32..=4096,
        min_extra in 0u32..=4,
        ring in any::<bool>(),
    ) {
        let min_size = (k + min_extra).min(k + m);
        let unit = blocks * 64;
        let engine = if ring { "engine = \"ring\"\n" } else { "pg_num = 16\n" };
        let pool = format!(
            "\n[[pools]]\nid = 1\nname = \"p\"\n{engine}erasure = \"{k}+{m}\"\n\
             stripe_unit = {unit}\nmin_size = {min_size}\n"
        );
        let map = parse(&map_text(20, &pool));
        let placed = map.pool_by_name("p").expect("pool p");
        prop_assert_eq!(placed.erasure, Some(ErasureParams { k, m, stripe_unit_bytes: unit }));
        prop_assert_eq!((placed.size, placed.min_size), (k + m, min_size));
        round_trips(&map);
    }
}
