//! Writes a map in the layout of `crushtool --dump` (Ceph 16's `CrushWrapper::dump`).

use optio_placement::{BucketAlg, ClusterMap, Rule, Step, Tunables};

use crate::fixed::{format_g17, weight_set_value};

/// A JSON value, printed as Ceph's pretty JSON formatter prints it.
enum Json {
    Int(i64),
    /// A number already formatted.
    Number(String),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(&'static str, Json)>),
    /// An object whose keys are not known in advance (choose_args ids).
    Map(Vec<(String, Json)>),
}

impl Json {
    fn print(&self, out: &mut String, depth: usize) {
        match self {
            Json::Int(value) => out.push_str(&value.to_string()),
            Json::Number(text) => out.push_str(text),
            Json::Str(text) => out.push_str(&quote(text)),
            Json::Array(values) => {
                if values.is_empty() {
                    out.push_str("[]");
                    return;
                }
                out.push_str("[\n");
                for (index, value) in values.iter().enumerate() {
                    indent(out, depth + 1);
                    value.print(out, depth + 1);
                    out.push_str(if index + 1 < values.len() { ",\n" } else { "\n" });
                }
                indent(out, depth);
                out.push(']');
            }
            Json::Object(fields) => print_object(out, depth, fields.iter().map(|(k, v)| (*k, v))),
            Json::Map(fields) => {
                print_object(out, depth, fields.iter().map(|(k, v)| (k.as_str(), v)))
            }
        }
    }
}

fn print_object<'a>(
    out: &mut String,
    depth: usize,
    fields: impl ExactSizeIterator<Item = (&'a str, &'a Json)>,
) {
    let count = fields.len();
    if count == 0 {
        out.push_str("{}");
        return;
    }
    out.push_str("{\n");
    for (index, (key, value)) in fields.enumerate() {
        indent(out, depth + 1);
        out.push_str(&quote(key));
        out.push_str(": ");
        value.print(out, depth + 1);
        out.push_str(if index + 1 < count { ",\n" } else { "\n" });
    }
    indent(out, depth);
    out.push('}');
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("    ");
    }
}

fn quote(text: &str) -> String {
    serde_json::to_string(text).expect("a string always serializes")
}

fn int(value: impl Into<i64>) -> Json {
    Json::Int(value.into())
}

/// A 16.16 weight as Ceph prints it: through a signed `int`, so 32768.0 and more are negative.
fn ceph_int(weight: u32) -> Json {
    Json::Int(i64::from(weight as i32))
}

/// The JSON of `map` as `crushtool --dump` prints it.
pub(crate) fn write(map: &ClusterMap) -> String {
    // Ceph lists every id below max_devices, naming missing devices `device<ID>`.
    let devices = (0..map.max_devices())
        .map(|id| match map.device(optio_placement::DeviceId(id)) {
            Some(device) => {
                let mut fields =
                    vec![("id", int(device.id.0)), ("name", Json::Str(device.name.clone()))];
                if let Some(class) = &device.class {
                    fields.push(("class", Json::Str(class.clone())));
                }
                Json::Object(fields)
            }
            None => Json::Object(vec![("id", int(id)), ("name", Json::Str(format!("device{id}")))]),
        })
        .collect();
    let types = map
        .types()
        .iter()
        .map(|t| Json::Object(vec![("type_id", int(t.id.0)), ("name", Json::Str(t.name.clone()))]))
        .collect();
    let buckets = map
        .buckets()
        .map(|bucket| {
            let items = bucket
                .items
                .iter()
                .zip(&bucket.weights)
                .enumerate()
                .map(|(position, (item, weight))| {
                    Json::Object(vec![
                        ("id", int(item.0)),
                        ("weight", ceph_int(weight.0)),
                        ("pos", int(position as i64)),
                    ])
                })
                .collect();
            Json::Object(vec![
                ("id", int(bucket.id.0)),
                ("name", Json::Str(bucket.name.clone())),
                ("type_id", int(bucket.type_id.0)),
                ("type_name", Json::Str(map.type_name(bucket.type_id).unwrap_or("").to_string())),
                ("weight", ceph_int(bucket.weight().0)),
                ("alg", Json::Str(bucket.alg.name().to_string())),
                ("hash", Json::Str(if bucket.hash == 0 { "rjenkins1" } else { "unknown" }.into())),
                ("items", Json::Array(items)),
            ])
        })
        .collect();
    let rules = map.rules().iter().map(|rule| rule_json(map, rule)).collect();
    let choose_args = map
        .choose_args()
        .iter()
        .map(|set| {
            let args = set
                .args
                .iter()
                .filter(|arg| {
                    !arg.weight_set.is_empty() || arg.ids.as_ref().is_some_and(|i| !i.is_empty())
                })
                .map(|arg| {
                    let mut fields = vec![("bucket_id", int(arg.bucket.0))];
                    if !arg.weight_set.is_empty() {
                        let positions = arg
                            .weight_set
                            .iter()
                            .map(|weights| {
                                Json::Array(
                                    weights
                                        .iter()
                                        .map(|w| Json::Number(format_g17(weight_set_value(*w))))
                                        .collect(),
                                )
                            })
                            .collect();
                        fields.push(("weight_set", Json::Array(positions)));
                    }
                    if let Some(ids) = arg.ids.as_ref().filter(|ids| !ids.is_empty()) {
                        fields.push(("ids", Json::Array(ids.iter().map(|id| int(*id)).collect())));
                    }
                    Json::Object(fields)
                })
                .collect();
            (set.id.to_string(), Json::Array(args))
        })
        .collect();
    let root = Json::Object(vec![
        ("devices", Json::Array(devices)),
        ("types", Json::Array(types)),
        ("buckets", Json::Array(buckets)),
        ("rules", Json::Array(rules)),
        ("tunables", tunables_json(map)),
        ("choose_args", Json::Map(choose_args)),
    ]);
    let mut out = String::with_capacity(1024 + 256 * map.devices().len());
    root.print(&mut out, 0);
    out.push_str("\n\n");
    out
}

fn rule_json(map: &ClusterMap, rule: &Rule) -> Json {
    let type_name =
        |t: &optio_placement::TypeId| Json::Str(map.type_name(*t).unwrap_or("").to_string());
    let choose = |op: &str, num: &i32, t: &optio_placement::TypeId| {
        Json::Object(vec![
            ("op", Json::Str(op.to_string())),
            ("num", int(*num)),
            ("type", type_name(t)),
        ])
    };
    // Ceph 16 dumps these four by number.
    let opcode = |code: i64, arg1: &i32| {
        Json::Object(vec![("opcode", int(code)), ("arg1", int(*arg1)), ("arg2", int(0))])
    };
    let set = |op: &str, num: &i32| {
        Json::Object(vec![("op", Json::Str(op.to_string())), ("num", int(*num))])
    };
    let steps = rule
        .steps
        .iter()
        .map(|step| match step {
            Step::Noop => Json::Object(vec![("op", Json::Str("noop".into()))]),
            Step::Take(item) => Json::Object(vec![
                ("op", Json::Str("take".into())),
                ("item", int(item.0)),
                ("item_name", Json::Str(map.item_name(*item).unwrap_or("").to_string())),
            ]),
            Step::ChooseFirstn { num, type_id } => choose("choose_firstn", num, type_id),
            Step::ChooseIndep { num, type_id } => choose("choose_indep", num, type_id),
            Step::ChooseleafFirstn { num, type_id } => choose("chooseleaf_firstn", num, type_id),
            Step::ChooseleafIndep { num, type_id } => choose("chooseleaf_indep", num, type_id),
            Step::Emit => Json::Object(vec![("op", Json::Str("emit".into()))]),
            Step::SetChooseTries(n) => set("set_choose_tries", n),
            Step::SetChooseleafTries(n) => set("set_chooseleaf_tries", n),
            Step::SetChooseLocalTries(n) => opcode(10, n),
            Step::SetChooseLocalFallbackTries(n) => opcode(11, n),
            Step::SetChooseleafVaryR(n) => opcode(12, n),
            Step::SetChooseleafStable(n) => opcode(13, n),
        })
        .collect();
    Json::Object(vec![
        ("rule_id", int(rule.id.0)),
        ("rule_name", Json::Str(rule.name.clone())),
        ("ruleset", int(rule.id.0)),
        ("type", int(rule.kind.code())),
        ("min_size", int(rule.min_size)),
        ("max_size", int(rule.max_size)),
        ("steps", Json::Array(steps)),
    ])
}

/// Ceph's name for the profile these tunables match (`CrushWrapper::dump_tunables`).
fn profile_name(t: &Tunables) -> &'static str {
    let placement = (
        t.choose_local_tries,
        t.choose_local_fallback_tries,
        t.choose_total_tries,
        t.chooseleaf_descend_once,
        t.chooseleaf_vary_r,
        t.chooseleaf_stable,
        t.allowed_bucket_algs,
    );
    match placement {
        (0, 0, 50, 1, 1, 1, 54) => "jewel",
        (0, 0, 50, 1, 1, 0, 54) => "hammer",
        (0, 0, 50, 1, 1, 0, 22) => "firefly",
        (0, 0, 50, 1, 0, 0, 22) => "bobtail",
        (2, 5, 19, 0, 0, 0, 22) => "argonaut",
        _ => "unknown",
    }
}

fn tunables_json(map: &ClusterMap) -> Json {
    let t = map.tunables();
    let any_step =
        |wanted: &dyn Fn(&Step) -> bool| map.rules().iter().any(|r| r.steps.iter().any(wanted));
    let v2_rules = any_step(&|s| {
        matches!(
            s,
            Step::ChooseIndep { .. }
                | Step::ChooseleafIndep { .. }
                | Step::SetChooseTries(_)
                | Step::SetChooseleafTries(_)
        )
    });
    let v3_rules = any_step(&|s| matches!(s, Step::SetChooseleafVaryR(_)));
    let v5_rules = any_step(&|s| matches!(s, Step::SetChooseleafStable(_)));
    let v4_buckets = map.buckets().any(|b| b.alg == BucketAlg::Straw2);
    let nondefault = t.choose_local_tries != 2
        || t.choose_local_fallback_tries != 5
        || t.choose_total_tries != 19;
    let nondefault2 = t.chooseleaf_descend_once != 0;
    let nondefault3 = t.chooseleaf_vary_r != 0;
    let nondefault5 = t.chooseleaf_stable != 0;
    let minimum = if v5_rules || nondefault5 {
        "jewel"
    } else if v4_buckets {
        "hammer"
    } else if nondefault3 {
        "firefly"
    } else if nondefault2 || nondefault {
        "bobtail"
    } else {
        "argonaut"
    };
    let profile = profile_name(t);
    let flag = |b: bool| int(i64::from(b));
    Json::Object(vec![
        ("choose_local_tries", int(t.choose_local_tries)),
        ("choose_local_fallback_tries", int(t.choose_local_fallback_tries)),
        ("choose_total_tries", int(t.choose_total_tries)),
        ("chooseleaf_descend_once", int(t.chooseleaf_descend_once)),
        ("chooseleaf_vary_r", int(t.chooseleaf_vary_r)),
        ("chooseleaf_stable", int(t.chooseleaf_stable)),
        ("straw_calc_version", int(t.straw_calc_version)),
        ("allowed_bucket_algs", int(t.allowed_bucket_algs)),
        ("profile", Json::Str(profile.to_string())),
        ("optimal_tunables", flag(profile == "jewel")),
        ("legacy_tunables", flag(profile == "argonaut")),
        ("minimum_required_version", Json::Str(minimum.to_string())),
        ("require_feature_tunables", flag(nondefault)),
        ("require_feature_tunables2", flag(nondefault2)),
        ("has_v2_rules", flag(v2_rules)),
        ("require_feature_tunables3", flag(nondefault3)),
        ("has_v3_rules", flag(v3_rules)),
        ("has_v4_buckets", flag(v4_buckets)),
        ("require_feature_tunables5", flag(nondefault5)),
        ("has_v5_rules", flag(v5_rules)),
    ])
}
