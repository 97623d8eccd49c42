//! Turns the declarations of a text map into a [`ClusterMapBuilder`], with crushtool's
//! semantics (`CrushCompiler::parse_*`):
//!
//! * tunables start from the legacy (argonaut) values; `chooseleaf_descend_once` is 0 or 1;
//! * an item without `weight` weighs 1.0 if it is a device, its own total if it is a bucket;
//!   a parent may give a child bucket any weight, which is kept as written;
//! * a bucket without `id` gets the highest free id (-1, -2, …) at the moment crushtool
//!   compiles it, where the ids written on the first line of every bucket are taken in
//!   advance; buckets are compiled in crushtool's order (it moves a bucket defined after a
//!   bucket that uses it ahead of that bucket, `adjust_bucket_item_place`);
//! * device classes are numbered in order of first appearance: devices, then buckets' class
//!   ids in compile order.
//!
//! Where crushtool refuses a map for its order (a bucket used before it is defined in a way its
//! reordering does not fix), Optio compiles the buckets children first instead.

use std::collections::{HashMap, HashSet};

use optio_placement::{
    BucketId, BucketSpec, BucketType, ChooseArgSpec, ClusterMapBuilder, DeviceSpec, ItemId,
    ItemRef, RuleId, RuleSpec, StepSpec, Subject, Tunables, TypeId, Weight,
};

use super::parser::{BucketDef, Document};
use crate::error::{Lines, ParseError};

/// The tunables a text map may set.
pub(crate) const TUNABLE_NAMES: [&str; 8] = [
    "choose_local_tries",
    "choose_local_fallback_tries",
    "choose_total_tries",
    "chooseleaf_descend_once",
    "chooseleaf_vary_r",
    "chooseleaf_stable",
    "straw_calc_version",
    "allowed_bucket_algs",
];

fn value_error(line: usize, field: &str, reason: String) -> ParseError {
    ParseError::value(Some(line), field, reason)
}

/// Builds the builder, and where each item was defined.
pub(crate) fn to_builder(document: Document) -> Result<(ClusterMapBuilder, Lines), ParseError> {
    let mut lines = Lines::default();
    let mut builder = ClusterMapBuilder::new();
    builder.tunables = tunables(&document, &mut lines)?;
    builder.types = types(&document, &mut lines);

    let device_names: HashMap<&str, usize> =
        document.devices.iter().enumerate().map(|(i, d)| (d.name.as_str(), i)).collect();
    let bucket_names: HashMap<&str, usize> =
        document.buckets.iter().enumerate().map(|(i, b)| (b.name.as_str(), i)).collect();
    for bucket in &document.buckets {
        for item in &bucket.items {
            if !device_names.contains_key(item.name.as_str())
                && !bucket_names.contains_key(item.name.as_str())
            {
                return Err(value_error(
                    item.line,
                    "item",
                    format!(
                        "'{}' in bucket '{}' is neither a device nor a bucket; define it with \
                         'device ID {}' or as a bucket",
                        item.name, bucket.name, item.name
                    ),
                ));
            }
        }
    }

    // Ceph allows an item in several buckets; Optio's hierarchy is a tree.
    let mut parents: HashMap<&str, (&str, usize)> = HashMap::new();
    for bucket in &document.buckets {
        for item in &bucket.items {
            if let Some((first, line)) = parents.insert(&item.name, (&bucket.name, item.line))
                && first != bucket.name
            {
                return Err(value_error(
                    item.line,
                    "item",
                    format!(
                        "'{}' is already an item of bucket '{first}' (line {line}); Optio's                          hierarchy is a tree, so an item has one parent: remove one of the two",
                        item.name
                    ),
                ));
            }
        }
    }

    let order = compile_order(&document.buckets, &bucket_names);
    let ids = bucket_ids(&document.buckets, &order);

    // Classes in crushtool's numbering: devices in file order, then bucket class ids. But when
    // every bucket gives an id for every class, as `crushtool -d` writes them, the class ids
    // decide nothing and the order of those lines (crushtool's class numbering) is kept.
    let mut classes: Vec<String> = complete_class_lines(&document.buckets, &document.devices);
    let mut note_class = |class: &str| {
        if !classes.iter().any(|c| c == class) {
            classes.push(class.to_string());
        }
    };
    for device in &document.devices {
        if let Some(class) = &device.class {
            note_class(class);
        }
    }
    for &index in &order {
        for (class, _, _) in &document.buckets[index].class_ids {
            note_class(class);
        }
    }
    builder.classes = classes;

    // A device's weight is the weight it has in its bucket (crushtool keeps no other).
    let mut device_weights: HashMap<&str, Weight> = HashMap::new();
    for bucket in &document.buckets {
        for item in &bucket.items {
            if device_names.contains_key(item.name.as_str()) {
                device_weights.entry(&item.name).or_insert(item.weight.unwrap_or(Weight::ONE));
            }
        }
    }
    for device in &document.devices {
        lines.record(Subject::Device(device.name.clone()), device.line);
        let mut spec = DeviceSpec::new(device.id);
        spec.name = device.name.clone();
        spec.class = device.class.clone();
        spec.weight = device_weights.get(device.name.as_str()).copied();
        builder.devices.push(spec);
    }

    for &index in &order {
        let bucket = &document.buckets[index];
        lines.record(Subject::Bucket(bucket.name.clone()), bucket.line);
        for (class, _, line) in &bucket.class_ids {
            lines.record(Subject::Bucket(format!("{}~{class}", bucket.name)), *line);
        }
        builder.buckets.push(bucket_spec(bucket, ids[index], &device_names)?);
    }

    let known_classes: HashSet<&str> = builder.classes.iter().map(String::as_str).collect();
    for rule in &document.rules {
        let name = rule.name.clone().unwrap_or_else(|| format!("rule{}", rule.id));
        lines.record(Subject::Rule(name.clone()), rule.line);
        let mut steps = Vec::with_capacity(rule.steps.len());
        for (step, line) in &rule.steps {
            if let StepSpec::Take { item: ItemRef::Name(item), class } = step {
                if !device_names.contains_key(item.as_str())
                    && !bucket_names.contains_key(item.as_str())
                {
                    return Err(value_error(
                        *line,
                        "step take",
                        format!("rule '{name}' takes '{item}', which is not defined"),
                    ));
                }
                if let Some(class) = class
                    && !known_classes.contains(class.as_str())
                {
                    return Err(value_error(
                        *line,
                        "step take … class",
                        format!(
                            "rule '{name}' takes class '{class}', which no device or bucket has; \
                             give devices that class ('device N NAME class {class}')"
                        ),
                    ));
                }
            }
            steps.push(step.clone());
        }
        builder.rules.push(RuleSpec {
            id: RuleId(rule.id),
            name,
            kind: rule.kind,
            min_size: rule.min_size,
            max_size: rule.max_size,
            steps,
        });
    }

    for set in document.choose_args {
        lines.record(Subject::ChooseArgs(set.id), set.line);
        if builder.choose_args.iter().any(|(id, _)| *id == set.id) {
            return Err(value_error(
                set.line,
                "choose_args",
                format!("choose_args {} is defined twice; merge the two blocks", set.id),
            ));
        }
        let mut args = Vec::with_capacity(set.args.len());
        for arg in set.args {
            // crushtool drops entries without weights or ids.
            if arg.weight_set.is_empty() && arg.ids.as_ref().is_none_or(Vec::is_empty) {
                continue;
            }
            args.push(ChooseArgSpec {
                bucket: ItemRef::Id(ItemId(arg.bucket_id)),
                ids: arg.ids.filter(|ids| !ids.is_empty()),
                weight_set: arg.weight_set,
            });
        }
        builder.choose_args.push((set.id, args));
    }
    Ok((builder, lines))
}

/// The classes in the order of the buckets' `id N class C` lines, if every bucket has a line
/// for every class (as in decompiled maps) and all buckets list them in the same order.
fn complete_class_lines(
    buckets: &[BucketDef],
    devices: &[super::parser::DeviceLine],
) -> Vec<String> {
    let Some(first) = buckets.first() else { return Vec::new() };
    let order: Vec<&str> = first.class_ids.iter().map(|(class, _, _)| class.as_str()).collect();
    let complete =
        buckets.iter().all(|bucket| {
            bucket.class_ids.len() == order.len()
                && bucket
                    .class_ids
                    .iter()
                    .zip(&order)
                    .all(|((class, _, _), expected)| class == expected)
        }) && devices.iter().filter_map(|d| d.class.as_deref()).all(|class| order.contains(&class));
    if complete { order.into_iter().map(str::to_string).collect() } else { Vec::new() }
}

fn tunables(document: &Document, lines: &mut Lines) -> Result<Tunables, ParseError> {
    let mut tunables = Tunables::legacy();
    for tunable in &document.tunables {
        lines.record(Subject::Tunable(tunable.name.clone()), tunable.line);
        let small = |value: u32| {
            u8::try_from(value).map_err(|_| {
                value_error(
                    tunable.line,
                    &tunable.name,
                    format!("{value} is out of range (0 to 255)"),
                )
            })
        };
        match tunable.name.as_str() {
            "choose_local_tries" => tunables.choose_local_tries = tunable.value,
            "choose_local_fallback_tries" => tunables.choose_local_fallback_tries = tunable.value,
            "choose_total_tries" => tunables.choose_total_tries = tunable.value,
            // crushtool stores `!!n`.
            "chooseleaf_descend_once" => {
                tunables.chooseleaf_descend_once = u32::from(tunable.value != 0)
            }
            "chooseleaf_vary_r" => tunables.chooseleaf_vary_r = small(tunable.value)?,
            "chooseleaf_stable" => tunables.chooseleaf_stable = small(tunable.value)?,
            "straw_calc_version" => tunables.straw_calc_version = small(tunable.value)?,
            "allowed_bucket_algs" => tunables.allowed_bucket_algs = tunable.value,
            other => {
                return Err(value_error(
                    tunable.line,
                    "tunable",
                    format!("unknown tunable '{other}'; known: {}", TUNABLE_NAMES.join(", ")),
                ));
            }
        }
    }
    Ok(tunables)
}

fn types(document: &Document, lines: &mut Lines) -> Vec<BucketType> {
    let mut types: Vec<BucketType> = document
        .types
        .iter()
        .map(|t| {
            lines.record(Subject::Type(t.name.clone()), t.line);
            BucketType { id: TypeId(t.id), name: t.name.clone() }
        })
        .collect();
    // crushtool -d prints `type 0 osd` for a map without a device type; do the same.
    if !types.is_empty() && !types.iter().any(|t| t.id == TypeId(0)) {
        types.push(BucketType { id: TypeId(0), name: "osd".to_string() });
    }
    types
}

/// The order crushtool compiles buckets in: its `adjust_bucket_item_place` swaps, for every
/// pair i < j where bucket i lists bucket j as an item, the buckets at positions i and j
/// (positions are fixed by the original order). If some bucket still comes before one of its
/// child buckets, crushtool refuses the map; Optio then compiles children first instead.
fn compile_order(buckets: &[BucketDef], names: &HashMap<&str, usize>) -> Vec<usize> {
    let children: Vec<HashSet<usize>> = buckets
        .iter()
        .map(|b| b.items.iter().filter_map(|item| names.get(item.name.as_str()).copied()).collect())
        .collect();
    let count = buckets.len();
    let mut order: Vec<usize> = (0..count).collect();
    let mut pairs_checked: u64 = 0;
    'swaps: for i in 0..count {
        if children[i].is_empty() {
            continue;
        }
        for j in (i + 1)..count {
            if children[i].contains(&j) {
                if children[j].contains(&i) {
                    break 'swaps; // crushtool: "are included each other"; the builder reports it
                }
                order.swap(i, j);
            }
            pairs_checked += 1;
        }
        // The pairwise pass is quadratic; a map this size is not a hand-made crushtool map.
        if pairs_checked > 50_000_000 {
            break;
        }
    }
    let mut position = vec![0usize; count];
    for (at, &index) in order.iter().enumerate() {
        position[index] = at;
    }
    let defined_first = order
        .iter()
        .all(|&parent| children[parent].iter().all(|&child| position[child] < position[parent]));
    if defined_first { order } else { children_first(&children) }
}

/// Post-order over buckets, roots in file order; tolerates cycles (the builder reports them).
fn children_first(children: &[HashSet<usize>]) -> Vec<usize> {
    let count = children.len();
    let mut sorted_children: Vec<Vec<usize>> =
        children.iter().map(|c| c.iter().copied().collect()).collect();
    for list in &mut sorted_children {
        list.sort_unstable();
    }
    let mut done = vec![false; count];
    let mut order = Vec::with_capacity(count);
    for start in 0..count {
        if done[start] {
            continue;
        }
        let mut stack = vec![(start, 0usize)];
        done[start] = true;
        while let Some((index, next_child)) = stack.pop() {
            match sorted_children[index].get(next_child) {
                Some(&child) => {
                    stack.push((index, next_child + 1));
                    if !done[child] {
                        done[child] = true;
                        stack.push((child, 0));
                    }
                }
                None => order.push(index),
            }
        }
    }
    order
}

/// Each bucket's id: as written, or crushtool's choice (`for (id=-1; id_item.count(id); id--)`).
fn bucket_ids(buckets: &[BucketDef], order: &[usize]) -> Vec<BucketId> {
    let mut taken: HashSet<i32> = buckets.iter().filter_map(|b| b.first_line_id).collect();
    let mut ids = vec![BucketId(0); buckets.len()];
    for &index in order {
        let id = match buckets[index].id {
            Some(id) => id,
            None => {
                let mut id = -1i32;
                while taken.contains(&id) && id > i32::MIN {
                    id -= 1;
                }
                id
            }
        };
        taken.insert(id);
        ids[index] = BucketId(id);
    }
    ids
}

fn bucket_spec(
    bucket: &BucketDef,
    id: BucketId,
    device_names: &HashMap<&str, usize>,
) -> Result<BucketSpec, ParseError> {
    // Items with `pos` go to that position; the others fill the free positions in order.
    let count = bucket.items.len();
    let mut slots: Vec<Option<usize>> = vec![None; count];
    for (index, item) in bucket.items.iter().enumerate() {
        if let Some(pos) = item.pos {
            let pos = pos as usize;
            if pos >= count {
                return Err(value_error(
                    item.line,
                    "pos",
                    format!(
                        "item '{}' in bucket '{}' has pos {pos}, but the bucket has {count} \
                         items (positions 0 to {})",
                        item.name,
                        bucket.name,
                        count.saturating_sub(1)
                    ),
                ));
            }
            if slots[pos].is_some() {
                return Err(value_error(
                    item.line,
                    "pos",
                    format!(
                        "item '{}' in bucket '{}' has pos {pos}, which another item already has",
                        item.name, bucket.name
                    ),
                ));
            }
            slots[pos] = Some(index);
        }
    }
    let mut free = 0usize;
    for (index, item) in bucket.items.iter().enumerate() {
        if item.pos.is_none() {
            while slots[free].is_some() {
                free += 1;
            }
            slots[free] = Some(index);
        }
    }
    let items = slots
        .into_iter()
        .map(|slot| {
            let item = &bucket.items[slot.expect("every position is filled")];
            let weight = match (item.weight, device_names.contains_key(item.name.as_str())) {
                (Some(weight), _) => Some(weight),
                (None, true) => Some(Weight::ONE),
                (None, false) => None,
            };
            (ItemRef::Name(item.name.clone()), weight)
        })
        .collect();
    Ok(BucketSpec {
        id: Some(id),
        name: bucket.name.clone(),
        type_name: bucket.type_name.clone(),
        alg: bucket.alg,
        hash: bucket.hash,
        items,
        class_ids: bucket
            .class_ids
            .iter()
            .map(|(class, id, _)| (class.clone(), BucketId(*id)))
            .collect(),
    })
}
