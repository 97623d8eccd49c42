//! The JSON of `crushtool --dump` and `ceph osd crush dump`: exact 16.16 weights.
//!
//! Shadow (per-class) buckets in the dump (`host0~hdd`) are not imported as buckets: their ids
//! become the class ids of the buckets they shadow and the builder rebuilds the shadow trees,
//! exactly as Ceph does when it loads a map.
//!
//! [`write`] produces the layout of `crushtool --dump` (Ceph 16): shadow buckets included,
//! Pacific's `{"opcode": 10, "arg1": …}` form for the `set_choose_local_*` and
//! `set_chooseleaf_vary_r`/`_stable` steps, and the derived tunables fields (`profile`,
//! `minimum_required_version`, …), so that `parse(write(m)) == m` for maps Ceph can hold.

use optio_placement::{
    BucketAlg, BucketId, BucketSpec, BucketType, ChooseArgSpec, ClusterMap, ClusterMapBuilder,
    DeviceSpec, ItemId, ItemRef, RuleId, RuleKind, RuleSpec, Step, StepSpec, Tunables, TypeId,
    Weight,
};
use serde_json::{Map, Value};

use crate::error::{ParseError, ParseErrorKind};

mod writer;

/// Writes `map` in the layout of `crushtool --dump`.
///
/// Ceph's JSON has no place for Optio's pools, device attributes (capacity, bandwidth, up/in,
/// reweight, addresses) or epoch; they are left out.
///
/// # Errors
///
/// [`WriteError::NotCephCompatible`](crate::WriteError) for a map with buckets of Optio's own
/// algorithms (`linear`), which Ceph cannot read.
pub fn write(map: &ClusterMap) -> Result<String, crate::WriteError> {
    crate::error::check_ceph_compatible(map)?;
    Ok(writer::write(map))
}

type Object = Map<String, Value>;

fn bad(field: &str, reason: impl Into<String>) -> ParseError {
    ParseError::value(None, field, reason)
}

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Object, ParseError> {
    value.as_object().ok_or_else(|| bad(what, "expected a JSON object"))
}

fn array<'a>(object: &'a Object, key: &str, what: &str) -> Result<&'a [Value], ParseError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(values)) => Ok(values),
        Some(_) => Err(bad(&format!("{what}.{key}"), "expected an array")),
    }
}

fn int(object: &Object, key: &str, what: &str) -> Result<i64, ParseError> {
    match object.get(key) {
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| bad(&format!("{what}.{key}"), format!("{n} is not an integer"))),
        Some(other) => {
            Err(bad(&format!("{what}.{key}"), format!("expected an integer, found {other}")))
        }
        None => Err(bad(&format!("{what}.{key}"), "missing")),
    }
}

fn int_in<T: TryFrom<i64>>(object: &Object, key: &str, what: &str) -> Result<T, ParseError> {
    let value = int(object, key, what)?;
    T::try_from(value)
        .map_err(|_| bad(&format!("{what}.{key}"), format!("{value} is out of range")))
}

fn string<'a>(object: &'a Object, key: &str, what: &str) -> Result<&'a str, ParseError> {
    match object.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => {
            Err(bad(&format!("{what}.{key}"), format!("expected a string, found {other}")))
        }
        None => Err(bad(&format!("{what}.{key}"), "missing")),
    }
}

/// A 16.16 weight. Ceph prints weights through a signed `int`, so weights of 32768.0 and more
/// appear as negative numbers; they are read back as the unsigned values they stand for.
fn weight_16_16(object: &Object, key: &str, what: &str) -> Result<Weight, ParseError> {
    let value = int(object, key, what)?;
    u32::try_from(value)
        .or_else(|_| i32::try_from(value).map(|signed| signed as u32))
        .map(Weight)
        .map_err(|_| bad(&format!("{what}.{key}"), format!("weight {value} does not fit 16.16")))
}

/// Parses `crushtool --dump` JSON.
pub fn parse(text: &str) -> Result<ClusterMap, ParseError> {
    let root: Value = serde_json::from_str(text)
        .map_err(|e| ParseError::new(Some(e.line()), ParseErrorKind::Json(e.to_string())))?;
    builder(&root)?.build().map_err(|error| {
        let duplicate = matches!(
            error.kind,
            optio_placement::MapErrorKind::DuplicateName
                | optio_placement::MapErrorKind::DuplicateId { .. }
        );
        let line = subject_line(text, &error.subject, duplicate);
        ParseError::new(line, ParseErrorKind::Map(error))
    })
}

/// The line where the item a builder error is about is named (`"name": "osd.3"`), if any: the
/// last such line for a duplicate (the builder reports the second of two), else the first.
fn subject_line(text: &str, subject: &optio_placement::Subject, last: bool) -> Option<usize> {
    use optio_placement::Subject;
    let quoted = |name: &str| serde_json::to_string(name).ok();
    let needles: Vec<String> = match subject {
        Subject::Device(name) | Subject::Bucket(name) | Subject::Type(name) => {
            vec![format!("\"name\": {}", quoted(name)?)]
        }
        Subject::Rule(name) => vec![format!("\"rule_name\": {}", quoted(name)?)],
        Subject::ChooseArgs(id) => vec![format!("\"{id}\":"), format!("\"{}\":", *id as u64)],
        _ => return None,
    };
    let at = needles.iter().find_map(|needle| {
        if last { text.rfind(needle.as_str()) } else { text.find(needle.as_str()) }
    })?;
    Some(text[..at].matches('\n').count() + 1)
}

/// Reads `crushtool --dump` JSON into a builder (not yet validated).
pub fn builder(root: &Value) -> Result<ClusterMapBuilder, ParseError> {
    let root = object(root, "map")?;
    let mut builder = ClusterMapBuilder::new();
    builder.tunables = tunables(root.get("tunables"))?;
    for (i, value) in array(root, "types", "map")?.iter().enumerate() {
        let what = format!("types[{i}]");
        let t = object(value, &what)?;
        builder.types.push(BucketType {
            id: TypeId(int_in(t, "type_id", &what)?),
            name: string(t, "name", &what)?.to_string(),
        });
    }
    // `crushtool -d` prints `type 0 osd` for a map without a device type; so does Optio.
    if !builder.types.is_empty() && !builder.types.iter().any(|t| t.id == TypeId(0)) {
        builder.types.push(BucketType { id: TypeId(0), name: "osd".to_string() });
    }
    for (i, value) in array(root, "devices", "map")?.iter().enumerate() {
        let what = format!("devices[{i}]");
        let d = object(value, &what)?;
        let mut device = DeviceSpec::new(int_in(d, "id", &what)?);
        device.name = string(d, "name", &what)?.to_string();
        if let Some(Value::String(class)) = d.get("class") {
            device.class = Some(class.clone());
        }
        builder.devices.push(device);
    }
    drop_placeholder_devices(&mut builder.devices, root)?;
    let buckets = array(root, "buckets", "map")?;
    let mut shadows: Vec<(String, String, BucketId)> = Vec::new();
    let mut names: Vec<(i64, String)> = Vec::new();
    for (i, value) in buckets.iter().enumerate() {
        let what = format!("buckets[{i}]");
        let b = object(value, &what)?;
        names.push((int(b, "id", &what)?, string(b, "name", &what)?.to_string()));
    }
    for (i, value) in buckets.iter().enumerate() {
        let what = format!("buckets[{i}]");
        let b = object(value, &what)?;
        let name = string(b, "name", &what)?;
        let id = BucketId(int_in(b, "id", &what)?);
        if let Some((original, class)) = name.split_once('~') {
            shadows.push((original.to_string(), class.to_string(), id));
            continue;
        }
        let alg_name = string(b, "alg", &what)?;
        // Ceph knows no `linear` buckets (an Optio extension): refused like any unknown name.
        let alg = BucketAlg::from_name(alg_name).filter(|alg| alg.is_ceph()).ok_or_else(|| {
            bad(&format!("{what}.alg"), format!("unknown bucket algorithm '{alg_name}'; expected uniform, list, tree, straw or straw2"))
        })?;
        let hash = match b.get("hash") {
            Some(Value::String(h)) if h == "rjenkins1" => 0,
            Some(Value::Number(n)) => {
                u8::try_from(n.as_u64().unwrap_or(u64::MAX)).unwrap_or(u8::MAX)
            }
            Some(other) => {
                return Err(ParseError::new(
                    None,
                    ParseErrorKind::Unsupported {
                        feature: format!("hash {other} in bucket '{name}'"),
                        hint: "only rjenkins1 (0) exists in Ceph".into(),
                    },
                ));
            }
            None => 0,
        };
        let type_name = match b.get("type_name") {
            Some(Value::String(t)) => t.clone(),
            _ => {
                let type_id: i64 = int(b, "type_id", &what)?;
                builder
                    .types
                    .iter()
                    .find(|t| i64::from(t.id.0) == type_id)
                    .map(|t| t.name.clone())
                    .ok_or_else(|| {
                        bad(&format!("{what}.type_id"), format!("type {type_id} is not defined"))
                    })?
            }
        };
        let mut items = Vec::new();
        for (j, value) in array(b, "items", &what)?.iter().enumerate() {
            let what = format!("{what}.items[{j}]");
            let item = object(value, &what)?;
            let item_id: i32 = int_in(item, "id", &what)?;
            items.push((ItemRef::Id(ItemId(item_id)), Some(weight_16_16(item, "weight", &what)?)));
        }
        builder.buckets.push(BucketSpec {
            id: Some(id),
            name: name.to_string(),
            type_name,
            alg,
            hash,
            items,
            class_ids: Vec::new(),
        });
    }
    // A device's weight is its weight in its bucket (Ceph keeps no other), so that its
    // capacity is derived from it.
    let device_index: std::collections::HashMap<i32, usize> =
        builder.devices.iter().enumerate().map(|(i, d)| (d.id.0 as i32, i)).collect();
    for bucket in &builder.buckets {
        for (item, weight) in &bucket.items {
            if let (ItemRef::Id(id), Some(weight)) = (item, weight)
                && let Some(&index) = device_index.get(&id.0)
                && builder.devices[index].weight.is_none()
            {
                builder.devices[index].weight = Some(*weight);
            }
        }
    }
    builder.classes = class_order(&builder.devices, &shadows);
    for (original, class, id) in shadows {
        let bucket = builder.buckets.iter_mut().find(|b| b.name == original).ok_or_else(|| {
            bad("buckets", format!("shadow bucket '{original}~{class}' has no bucket '{original}'"))
        })?;
        bucket.class_ids.push((class, id));
    }
    let name_of = |id: i64| names.iter().find(|(i, _)| *i == id).map(|(_, n)| n.clone());
    for (i, value) in array(root, "rules", "map")?.iter().enumerate() {
        let what = format!("rules[{i}]");
        let r = object(value, &what)?;
        let id: u32 = int_in(r, "rule_id", &what)?;
        let name = string(r, "rule_name", &what)?.to_string();
        let code: u8 = int_in(r, "type", &what)?;
        if code == 4 || code == 5 {
            return Err(ParseError::new(
                None,
                ParseErrorKind::Unsupported {
                    feature: format!("MSR rule '{name}' (Ceph 19+)"),
                    hint: "rewrite it as a firstn or indep rule".into(),
                },
            ));
        }
        let mut steps = Vec::new();
        for (j, value) in array(r, "steps", &what)?.iter().enumerate() {
            let what = format!("{what}.steps[{j}]");
            let s = object(value, &what)?;
            steps.push(step(s, &what, &name_of)?);
        }
        builder.rules.push(RuleSpec {
            id: RuleId(id),
            name,
            kind: RuleKind::from_code(code),
            min_size: if r.contains_key("min_size") { int_in(r, "min_size", &what)? } else { 1 },
            max_size: if r.contains_key("max_size") { int_in(r, "max_size", &what)? } else { 10 },
            steps,
        });
    }
    if let Some(Value::Object(sets)) = root.get("choose_args") {
        for (key, value) in sets {
            let id = parse_choose_args_id(key)
                .ok_or_else(|| bad("choose_args", format!("'{key}' is not a choose_args id")))?;
            let what = format!("choose_args.{key}");
            let entries = value.as_array().ok_or_else(|| bad(&what, "expected an array"))?;
            let mut args = Vec::new();
            for (j, entry) in entries.iter().enumerate() {
                let what = format!("{what}[{j}]");
                let e = object(entry, &what)?;
                let bucket: i32 = int_in(e, "bucket_id", &what)?;
                let ids = match e.get("ids") {
                    Some(Value::Array(ids)) => Some(
                        ids.iter()
                            .map(|v| {
                                v.as_i64()
                                    .and_then(|i| i32::try_from(i).ok())
                                    .ok_or_else(|| bad(&what, "ids must be integers"))
                            })
                            .collect::<Result<Vec<i32>, _>>()?,
                    ),
                    _ => None,
                };
                let mut weight_set = Vec::new();
                for position in array(e, "weight_set", &what)? {
                    let values = position
                        .as_array()
                        .ok_or_else(|| bad(&what, "weight_set entries must be arrays"))?;
                    weight_set.push(
                        values
                            .iter()
                            .map(|v| {
                                v.as_f64().and_then(Weight::from_f64).ok_or_else(|| {
                                    bad(&what, format!("weight {v} is negative or too large"))
                                })
                            })
                            .collect::<Result<Vec<Weight>, _>>()?,
                    );
                }
                args.push(ChooseArgSpec { bucket: ItemRef::Id(ItemId(bucket)), ids, weight_set });
            }
            builder.choose_args.push((id, args));
        }
    }
    Ok(builder)
}

/// Ceph's dump lists every id below `max_devices`, naming the ones that do not exist
/// `device<ID>`. Such an entry without a class, in no bucket, is dropped.
fn drop_placeholder_devices(
    devices: &mut Vec<DeviceSpec>,
    root: &Object,
) -> Result<(), ParseError> {
    let mut placed = std::collections::HashSet::new();
    for value in array(root, "buckets", "map")? {
        if let Some(items) = value.get("items").and_then(Value::as_array) {
            placed.extend(items.iter().filter_map(|item| item.get("id")?.as_i64()));
        }
    }
    devices.retain(|device| {
        let placeholder = device.class.is_none()
            && device.name == format!("device{}", device.id.0)
            && !placed.contains(&i64::from(device.id.0));
        !placeholder
    });
    Ok(())
}

/// Ceph numbers device classes in order of creation, and the dump does not show the numbers.
/// Ceph creates shadow buckets class by class, each taking the highest free ids, so the class
/// whose shadow ids start highest is taken to be the first; classes without shadow buckets
/// follow in order of first appearance on devices.
fn class_order(devices: &[DeviceSpec], shadows: &[(String, String, BucketId)]) -> Vec<String> {
    let mut highest: Vec<(String, i32)> = Vec::new();
    for (_, class, id) in shadows {
        match highest.iter_mut().find(|(c, _)| c == class) {
            Some((_, top)) => *top = (*top).max(id.0),
            None => highest.push((class.clone(), id.0)),
        }
    }
    highest.sort_by_key(|(_, top)| std::cmp::Reverse(*top));
    let mut order: Vec<String> = highest.into_iter().map(|(class, _)| class).collect();
    for class in devices.iter().filter_map(|d| d.class.as_ref()) {
        if !order.contains(class) {
            order.push(class.clone());
        }
    }
    order
}

/// choose_args ids are written as unsigned 64-bit numbers; the default set (-1) appears as
/// 18446744073709551615.
pub(crate) fn parse_choose_args_id(text: &str) -> Option<i64> {
    text.parse::<i64>().ok().or_else(|| text.parse::<u64>().ok().map(|v| v as i64))
}

fn step(
    s: &Object,
    what: &str,
    name_of: &dyn Fn(i64) -> Option<String>,
) -> Result<StepSpec, ParseError> {
    if !s.contains_key("op") && s.contains_key("opcode") {
        return opcode_step(s, what);
    }
    let op = string(s, "op", what)?;
    let num = || -> Result<i32, ParseError> { int_in(s, "num", what) };
    let choose = |leaf: bool, indep: bool| -> Result<StepSpec, ParseError> {
        Ok(StepSpec::Choose {
            leaf,
            indep,
            num: num()?,
            type_name: string(s, "type", what)?.to_string(),
        })
    };
    Ok(match op {
        "noop" => StepSpec::Noop,
        "emit" => StepSpec::Emit,
        "take" => {
            let item: i64 = int(s, "item", what)?;
            let name = match s.get("item_name") {
                Some(Value::String(name)) => name.clone(),
                _ => name_of(item).unwrap_or_default(),
            };
            match name.split_once('~') {
                Some((original, class)) => StepSpec::Take {
                    item: ItemRef::Name(original.to_string()),
                    class: Some(class.to_string()),
                },
                None => {
                    let item = i32::try_from(item)
                        .map_err(|_| bad(what, format!("item {item} is out of range")))?;
                    StepSpec::Take { item: ItemRef::Id(ItemId(item)), class: None }
                }
            }
        }
        "choose_firstn" => choose(false, false)?,
        "choose_indep" => choose(false, true)?,
        "chooseleaf_firstn" => choose(true, false)?,
        "chooseleaf_indep" => choose(true, true)?,
        "set_choose_tries" => StepSpec::Set(Step::SetChooseTries(num()?)),
        "set_chooseleaf_tries" => StepSpec::Set(Step::SetChooseleafTries(num()?)),
        "set_choose_local_tries" => StepSpec::Set(Step::SetChooseLocalTries(num()?)),
        "set_choose_local_fallback_tries" => {
            StepSpec::Set(Step::SetChooseLocalFallbackTries(num()?))
        }
        "set_chooseleaf_vary_r" => StepSpec::Set(Step::SetChooseleafVaryR(num()?)),
        "set_chooseleaf_stable" => StepSpec::Set(Step::SetChooseleafStable(num()?)),
        "choose_msr" | "set_msr_descents" | "set_msr_collision_tries" => {
            return Err(ParseError::new(
                None,
                ParseErrorKind::Unsupported {
                    feature: format!("rule step '{op}' (Ceph 19+ MSR rules)"),
                    hint: "rewrite the rule with choose/chooseleaf steps".into(),
                },
            ));
        }
        other => return Err(bad(&format!("{what}.op"), format!("unknown rule step '{other}'"))),
    })
}

/// A step Ceph 16 dumps by number: `{"opcode": 10, "arg1": 0, "arg2": 0}`.
fn opcode_step(s: &Object, what: &str) -> Result<StepSpec, ParseError> {
    let opcode: i64 = int(s, "opcode", what)?;
    let arg1: i32 = match s.get("arg1") {
        None => 0,
        Some(_) => int_in(s, "arg1", what)?,
    };
    Ok(match opcode {
        0 => StepSpec::Noop,
        4 => StepSpec::Emit,
        8 => StepSpec::Set(Step::SetChooseTries(arg1)),
        9 => StepSpec::Set(Step::SetChooseleafTries(arg1)),
        10 => StepSpec::Set(Step::SetChooseLocalTries(arg1)),
        11 => StepSpec::Set(Step::SetChooseLocalFallbackTries(arg1)),
        12 => StepSpec::Set(Step::SetChooseleafVaryR(arg1)),
        13 => StepSpec::Set(Step::SetChooseleafStable(arg1)),
        14..=16 => {
            return Err(ParseError::new(
                None,
                ParseErrorKind::Unsupported {
                    feature: format!("rule step opcode {opcode} (Ceph 19+ MSR rules)"),
                    hint: "rewrite the rule with choose/chooseleaf steps".into(),
                },
            ));
        }
        other => {
            return Err(bad(
                &format!("{what}.opcode"),
                format!(
                    "opcode {other} cannot be read in this form; take, choose and chooseleaf                      steps are written with \"op\""
                ),
            ));
        }
    })
}

fn tunables(value: Option<&Value>) -> Result<Tunables, ParseError> {
    let mut tunables = Tunables::legacy();
    let Some(value) = value else { return Ok(tunables) };
    let t = object(value, "tunables")?;
    let get = |key: &str| -> Result<Option<u32>, ParseError> {
        match t.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().and_then(|v| u32::try_from(v).ok()).map(Some).ok_or_else(|| {
                bad(&format!("tunables.{key}"), format!("{v} is not a non-negative integer"))
            }),
        }
    };
    let small = |key: &str, v: u32| {
        u8::try_from(v).map_err(|_| bad(&format!("tunables.{key}"), format!("{v} is too large")))
    };
    if let Some(v) = get("choose_local_tries")? {
        tunables.choose_local_tries = v;
    }
    if let Some(v) = get("choose_local_fallback_tries")? {
        tunables.choose_local_fallback_tries = v;
    }
    if let Some(v) = get("choose_total_tries")? {
        tunables.choose_total_tries = v;
    }
    if let Some(v) = get("chooseleaf_descend_once")? {
        tunables.chooseleaf_descend_once = v;
    }
    if let Some(v) = get("chooseleaf_vary_r")? {
        tunables.chooseleaf_vary_r = small("chooseleaf_vary_r", v)?;
    }
    if let Some(v) = get("chooseleaf_stable")? {
        tunables.chooseleaf_stable = small("chooseleaf_stable", v)?;
    }
    if let Some(v) = get("straw_calc_version")? {
        tunables.straw_calc_version = small("straw_calc_version", v)?;
    }
    if let Some(v) = get("allowed_bucket_algs")? {
        tunables.allowed_bucket_algs = v;
    }
    Ok(tunables)
}

#[cfg(test)]
mod tests {
    #[test]
    fn garbage_is_an_error_with_a_line() {
        let error = super::parse("{\n \"devices\": [ 1, ]\n}").expect_err("invalid");
        assert_eq!(error.line, Some(2));
    }
}
