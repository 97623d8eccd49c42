//! Proves that bad input gives an error that names the line and says what to do, in every
//! format, including errors the map builder finds after parsing.

use optio_mapfile::{ParseErrorKind, ceph_json, ceph_text, optio_toml};

/// (text, expected line, a fragment the message must contain).
const TEXT_CASES: &[(&str, usize, &str)] = &[
    ("device 0 osd.0\ndevice one osd.1\n", 2, "device id"),
    ("tunable choose_total_tries 50\ntunable choose_many_tries 3\n", 2, "unknown tunable"),
    ("device 0 osd.0\ntype 0 osd\ntype 1 host\nhost h {\n id -1\n alg straw3\n}\n", 6, "straw2"),
    (
        "device 0 osd.0\ntype 0 osd\ntype 1 host\nhost h {\n id -1\n item osd.9\n}\n",
        6,
        "neither a device nor a bucket",
    ),
    (
        "device 0 osd.0\ntype 0 osd\ntype 1 host\nhost h {\n id -1\n item osd.0 weight -2\n}\n",
        6,
        "negative",
    ),
    (
        "device 0 osd.0\ntype 0 osd\ntype 1 host\nhost h {\n id -1\n item osd.0 weight 1.0\n",
        6,
        "'}'",
    ),
    (
        "device 0 osd.0\ntype 0 osd\ntype 1 host\nhost h {\n id -1\n item osd.0\n}\nrule r {\n id 0\n type replicated\n step take h\n step chooseleaf firstn 0 type rack\n step emit\n}\n",
        8,
        "type 'rack'",
    ),
    (
        "device 0 osd.0\ntype 0 osd\ntype 1 host\nhost h {\n id -1\n item osd.0\n}\nrule r {\n id 0\n type msr_firstn\n step take h\n step emit\n}\n",
        10,
        "MSR",
    ),
    ("device 0 osd.0\ndevice 1 osd.0\n", 2, "used twice"),
    (
        "device 0 osd.0\ntype 0 osd\ntype 1 host\nhost h {\n id -1\n item osd.0\n}\nhost g {\n id -2\n item osd.0\n}\n",
        10,
        "already an item of bucket 'h' (line 6)",
    ),
    (
        "device 0 osd.0\ntype 0 osd\ntype 1 host\nhost a {\n id -1\n item osd.0\n}\nhost b {\n id -1\n}\n",
        8,
        "id -1",
    ),
];

#[test]
fn text_errors_point_at_the_line() {
    for (text, line, fragment) in TEXT_CASES {
        let error = ceph_text::parse(text).expect_err(text);
        let message = error.to_string();
        assert_eq!(error.line, Some(*line), "{text}\n{message}");
        assert!(message.contains(fragment), "{message} should mention {fragment}");
    }
}

/// A one-device map with pool 'p' (table on line 5), plus `$extra` keys from line 10.
macro_rules! choice_case {
    ($extra:literal) => {
        concat!(
            "[[devices]]\nid = 0\nlocation = { host = \"h\" }\n\n[[pools]]\nid = 1\nname = \"p\"\npg_num = 8\nsize = 1\n",
            $extra
        )
    };
}

const TOML_CASES: &[(&str, usize, &str)] = &[
    ("epoch = 1\n[[devices]]\nid = 0\ncapacty = \"4TiB\"\n", 4, "did you mean 'capacity'"),
    ("[[devices]]\nid = 0\ncapacity = \"4 TeraBytes\"\n", 3, "unknown unit"),
    ("[[devices]]\nid = 0\nweight = -1.0\n", 3, "not a weight"),
    ("[[devices]]\nid = 0\nreweight = 1.5\n", 3, "between 0.0 and 1.0"),
    ("[[devices]]\nid = 0\nup_from = -2\n", 3, "an epoch, 0 or more"),
    ("[[devices]]\nid = 0\ndown_at = \"7\"\n", 3, "an integer"),
    ("epoch = 2\n[[devices]]\nid = 0\nup_from = 5\n", 2, "after the map's epoch 2"),
    ("[tunables]\nprofile = \"newest\"\n", 2, "unknown profile"),
    (
        "[[devices]]\nid = 0\nlocation = { host = \"h\" }\n\n[[rules]]\nid = 0\nname = \"r\"\nsteps = [\"take default\", \"chooseleaf firstn 0 tpye host\"]\n",
        8,
        "'type'",
    ),
    (
        "[[devices]]\nid = 0\nlocation = { host = \"h\" }\n\n[[pools]]\nid = 1\nname = \"p\"\npg_num = 8\nsize = 3\n",
        5,
        "needs 3 devices",
    ),
    ("[[devices]]\nid = 0\n\n[[devices]]\nid = 0\n", 4, "id 0 is used twice"),
    ("[[pools]]\nid = 1\nname = \"p\"\nsize = 1\n", 1, "pg_num"),
    ("devices = 3\n", 1, "expected an array"),
    ("[[devices]\nid = 0\n", 1, "invalid TOML"),
    ("format_version = 9\n", 1, "newer Optio"),
    // Choices: the pool table is on line 5, the first choice key on line 10.
    (
        choice_case!("choices = 0\n"),
        5,
        "pool 'p': choices = 0 is out of range: an object needs at least one candidate",
    ),
    (choice_case!("choices = 9\n"), 5, "above the maximum of 8"),
    (choice_case!("choices = -1\n"), 10, "out of range (1 to 8)"),
    (
        choice_case!("policy = \"fastest\"\n"),
        10,
        "unknown policy 'fastest'; use one of first, random",
    ),
    (choice_case!("policy = \"composite\"\n"), 5, "needs policy_weights"),
    (
        choice_case!("policy = \"composite\"\npolicy_weights = { space = 0 }\n"),
        5,
        "at least one non-zero weight",
    ),
    (
        choice_case!("policy = \"composite\"\npolicy_weights = { speed = 1 }\n"),
        11,
        "unknown metric 'speed'",
    ),
    (choice_case!("policy = \"composite\"\npolicy_weights = { space = 1001 }\n"), 5, "above 1000"),
    (choice_case!("policy = \"space\"\npolicy_weights = { space = 1 }\n"), 11, "only"),
    (choice_case!("full_ratio = 1.5\n"), 10, "at most 1.0"),
    (choice_case!("full_ratio = 0\n"), 10, "above 0"),
    (
        "[[devices]]\nid = 0\nlocation = { host = \"h\" }\n\n[[pools]]\nid = 1\nname = \"p\"\npg_num = 2\nsize = 1\nchoices = 4\n",
        5,
        "only 2 placement groups",
    ),
    // The attributed and elastic engines: parameters and membership versions.
    (
        "[[devices]]\nid = 0\n\n[[pools]]\nid = 1\nname = \"a\"\nengine = \"attributed\"\nsize = 1\nsector_size = 0\n",
        4,
        "sector_size (s) = 0",
    ),
    (
        "[[devices]]\nid = 0\n\n[[pools]]\nid = 1\nname = \"a\"\nengine = \"attributed\"\nsize = 1\nthrottle = 0\n",
        4,
        "throttle (c_throttle) = 0",
    ),
    (
        "[[devices]]\nid = 0\n\n[[pools]]\nid = 1\nname = \"a\"\nengine = \"attributed\"\nsize = 1\nzone_type = \"galaxy\"\n",
        4,
        "type 'galaxy'",
    ),
    (
        "[[devices]]\nid = 0\n\n[[pools]]\nid = 1\nname = \"a\"\nengine = \"ring\"\nsize = 1\nsector_size = 4\n",
        4,
        "'sector_size' applies to attributed pools only",
    ),
    (
        "[[devices]]\nid = 0\n\n[[pools]]\nid = 1\nname = \"a\"\nengine = \"attributed\"\nsize = 1\nselection = \"random\"\n",
        9,
        "use \"paper\" (the default) or \"rendezvous\"",
    ),
    (
        "[[devices]]\nid = 0\n\n[[pools]]\nid = 1\nname = \"e\"\nengine = \"elastic\"\nsize = 1\nprimaries = 2\n",
        4,
        "p must not exceed the number of servers n = 1",
    ),
    (
        "[[devices]]\nid = 0\n\n[[pools]]\nid = 1\nname = \"e\"\nengine = \"elastic\"\nsize = 1\nfailure_domain = \"host\"\n",
        4,
        "does not apply to elastic pools",
    ),
    (
        "[[devices]]\nid = 0\n\n[[pools]]\nid = 1\nname = \"e\"\nengine = \"elastic\"\nsize = 1\n\n[membership]\n\n[[membership.versions]]\nversion = 3\nactive = [\"osd.0\", \"osd.7\"]\n",
        12,
        "'osd.7', which is not defined",
    ),
    (
        "[[devices]]\nid = 0\n\n[[devices]]\nid = 1\n\n[[pools]]\nid = 1\nname = \"e\"\nengine = \"elastic\"\nsize = 1\n\n[membership]\norder = [\"osd.1\", \"osd.0\"]\n\n[[membership.versions]]\nversion = 2\nactive = 0\n",
        16,
        "keep ranks 1 to 1 active",
    ),
    (
        "[[devices]]\nid = 0\n\n[membership]\norder = [\"osd.3\"]\n",
        4,
        "'osd.3', which is not defined",
    ),
    (
        "[[devices]]\nid = 0\n\n[membership]\n\n[[membership.versions]]\nversion = 5\nactive = 1\n\n[[membership.versions]]\nversion = 4\nactive = 1\n",
        10,
        "versions must increase",
    ),
];

#[test]
fn toml_errors_point_at_the_line() {
    for (text, line, fragment) in TOML_CASES {
        let error = optio_toml::parse(text).expect_err(text);
        let message = error.to_string();
        assert_eq!(error.line, Some(*line), "{text}\n{message}");
        assert!(message.contains(fragment), "{message} should mention {fragment}");
    }
}

#[test]
fn json_builder_errors_point_at_the_item() {
    let json = "{\n  \"devices\": [\n    {\"id\": 0, \"name\": \"osd.0\"},\n    {\"id\": 1, \"name\": \"osd.0\"}\n  ]\n}";
    let error = ceph_json::parse(json).expect_err("duplicate name");
    assert_eq!(error.line, Some(4), "{error}");
}

#[test]
fn json_errors_say_what_is_wrong() {
    let error =
        ceph_json::parse("{\"devices\": [{\"id\": -4, \"name\": \"osd.0\"}]}").expect_err("bad id");
    assert!(error.to_string().contains("devices[0].id"), "{error}");
    let error = ceph_json::parse(
        "{\"rules\": [{\"rule_id\": 0, \"rule_name\": \"r\", \"type\": 4, \"steps\": []}]}",
    )
    .expect_err("MSR");
    assert!(matches!(error.kind, ParseErrorKind::Unsupported { .. }), "{error}");
}
