//! Writes Optio TOML.
//!
//! Two layouts, one format. The *located* layout gives each device a `location` and declares
//! buckets without items (the builder derives the hierarchy), which is how people write maps;
//! it can express a tree whose buckets all hold devices, whose levels rise with type ids and
//! whose weights are the sums of their items. The *explicit* layout lists every bucket's items
//! and expresses any map. `write` produces the located layout when it reads back to the same
//! map, and the explicit layout otherwise. Both pin every bucket id, so a saved map is stable.

use std::fmt::Write as _;

use optio_placement::builder::DEFAULT_TYPES;
use optio_placement::choice::{COMPOSITE_METRICS, FULL_PPM_DEFAULT};
use optio_placement::engine::balanced::incremental::{BalanceState, CLASSES, STATE_VERSION};
use optio_placement::map::TIB;
use optio_placement::params::erasure::DEFAULT_STRIPE_UNIT_BYTES;
use optio_placement::{
    ActiveSet, AttributedParams, BalanceMethod, Bucket, BucketAlg, BucketId, ChoiceSettings,
    ClusterMap, Device, DeviceId, EngineSpec, LINEAR_PARAM_ONE, PolicySpec, Pool, PpsGenerator,
    RingParams, RuleKind, TunablesProfile, TypeId, Weight,
};

use super::FORMAT_VERSION;
use crate::ceph_text::TUNABLE_NAMES;
use crate::fixed::weight_to_decimal;
use crate::steps::format_step;
use crate::units::format_bytes;

/// Above this many devices (or buckets), each is written as a one-line inline table.
const TABLES_MAX: usize = 32;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    Located,
    Explicit,
}

/// `key = value` pairs of one table, values already in TOML syntax.
type Fields = Vec<(String, String)>;

pub(crate) fn write(map: &ClusterMap) -> String {
    let located = write_layout(map, Layout::Located);
    if super::parse(&located).is_ok_and(|parsed| parsed == *map) {
        return located;
    }
    write_layout(map, Layout::Explicit)
}

fn write_layout(map: &ClusterMap, layout: Layout) -> String {
    let mut out = String::with_capacity(1024 + 96 * map.devices().len());
    out.push_str("# Optio cluster map (format: docs/map-format.md)\n");
    let _ = writeln!(out, "format_version = {FORMAT_VERSION}");
    let _ = writeln!(out, "epoch = {}", map.epoch());
    if !classes_are_implied(map) {
        let list: Vec<String> = map.classes().iter().map(|c| quote(c)).collect();
        let _ = writeln!(out, "classes = [{}]", list.join(", "));
    }
    if map.rules().is_empty() {
        // Without this, a map with located devices would get the default rule.
        out.push_str("rules = []\n");
    }

    let devices: Vec<Fields> = device_order(map, layout)
        .into_iter()
        .map(|device| device_fields(map, device, layout))
        .collect();
    let shadows = crate::ceph_text::shadow_ids(map);
    let buckets: Vec<Fields> = crate::ceph_text::decompile_order(map)
        .into_iter()
        .map(|bucket| {
            let classes = shadows.get(&bucket.id).map_or(&[][..], Vec::as_slice);
            bucket_fields(map, bucket, classes, layout)
        })
        .collect();
    let inline_devices = devices.len() > TABLES_MAX;
    let inline_buckets = buckets.len() > TABLES_MAX;
    if inline_devices {
        write_inline_array(&mut out, "devices", &devices);
    }
    if inline_buckets {
        write_inline_array(&mut out, "buckets", &buckets);
    }

    out.push_str("\n[tunables]\n");
    for (key, value) in tunables_fields(map) {
        let _ = writeln!(out, "{key} = {value}");
    }

    if !types_are_default(map) {
        for t in map.types() {
            write_table(
                &mut out,
                "[[types]]",
                &vec![("id".into(), t.id.to_string()), ("name".into(), quote(&t.name))],
            );
        }
    }
    if !inline_devices {
        for fields in &devices {
            write_table(&mut out, "[[devices]]", fields);
        }
    }
    if !inline_buckets {
        for fields in &buckets {
            write_table(&mut out, "[[buckets]]", fields);
        }
    }
    for rule in map.rules() {
        let mut fields: Fields = vec![
            ("id".into(), rule.id.to_string()),
            ("name".into(), quote(&rule.name)),
            (
                "type".into(),
                match rule.kind {
                    RuleKind::Replicated => quote("replicated"),
                    RuleKind::Erasure => quote("erasure"),
                    RuleKind::Other(code) => code.to_string(),
                },
            ),
        ];
        if rule.min_size != 1 {
            fields.push(("min_size".into(), rule.min_size.to_string()));
        }
        if rule.max_size != 10 {
            fields.push(("max_size".into(), rule.max_size.to_string()));
        }
        let steps: Vec<String> =
            rule.steps.iter().map(|step| quote(&format_step(map, step))).collect();
        fields.push(("steps".into(), format!("[{}]", steps.join(", "))));
        write_table(&mut out, "[[rules]]", &fields);
    }
    for pool in map.pools() {
        let mut fields: Fields = vec![
            ("id".into(), pool.id.to_string()),
            ("name".into(), quote(&pool.name)),
            ("engine".into(), quote(pool.engine.name())),
        ];
        let default_min_size = match &pool.erasure {
            Some(erasure) => {
                fields.push(("erasure".into(), quote(&erasure.to_string())));
                if erasure.stripe_unit_bytes != DEFAULT_STRIPE_UNIT_BYTES {
                    let bytes = u64::from(erasure.stripe_unit_bytes);
                    let text = format_bytes(bytes).map_or(bytes.to_string(), |text| quote(&text));
                    fields.push(("stripe_unit".into(), text));
                }
                erasure.default_min_size()
            }
            None => {
                fields.push(("size".into(), pool.size.to_string()));
                optio_placement::map::default_min_size(pool.size)
            }
        };
        if pool.min_size != default_min_size {
            fields.push(("min_size".into(), pool.min_size.to_string()));
        }
        if pool.pg_num != 0 || matches!(pool.engine_spec(), EngineSpec::Crush { .. }) {
            fields.push(("pg_num".into(), pool.pg_num.to_string()));
        }
        if pool.pgp_num != pool.pg_num {
            fields.push(("pgp_num".into(), pool.pgp_num.to_string()));
        }
        match pool.engine_spec() {
            EngineSpec::Crush { rule } => {
                let name =
                    map.rule(rule).map(|r| quote(&r.name)).unwrap_or_else(|| rule.to_string());
                fields.push(("rule".into(), name));
            }
            EngineSpec::Ring(params) => {
                if params.vnode_bytes != RingParams::default().vnode_bytes {
                    match format_bytes(params.vnode_bytes) {
                        Some(text) => fields.push(("vnode_size".into(), quote(&text))),
                        None => fields.push(("vnode_bytes".into(), params.vnode_bytes.to_string())),
                    }
                }
                if let Some(name) = params.failure_domain.and_then(|t| map.type_name(t)) {
                    fields.push(("failure_domain".into(), quote(name)));
                }
            }
            EngineSpec::Attributed(params) => attributed_fields(map, pool, &params, &mut fields),
            EngineSpec::Elastic(params) => {
                fields.push(("primaries".into(), params.primaries.to_string()));
                if params.scale != optio_placement::engine::elastic::ELASTIC_SCALE_DEFAULT {
                    fields.push(("scale".into(), params.scale.to_string()));
                }
            }
            _ => {}
        }
        if !pool.hashpspool {
            fields.push(("hashpspool".into(), "false".into()));
        }
        choice_fields(&pool.choice, &mut fields);
        if pool.balance().pps != PpsGenerator::Ceph {
            fields.push(("pps".into(), quote(pool.balance().pps.name())));
        }
        if pool.balance().linear_param != LINEAR_PARAM_ONE {
            fields.push((
                "balance_param".into(),
                weight_to_decimal(Weight(pool.balance().linear_param)),
            ));
        }
        match pool.balance().balanced {
            BalanceMethod::Off => {}
            BalanceMethod::HistoryFree => fields.push(("balanced".into(), "true".into())),
            BalanceMethod::Incremental => fields.push(("balanced".into(), quote("incremental"))),
        }
        write_table(&mut out, "[[pools]]", &fields);
        if let Some(state) = &pool.balance_state() {
            write_balance_state(&mut out, state);
        }
    }
    if let Some(membership) = map.membership() {
        out.push_str("\n[membership]\n");
        let by_id: Vec<DeviceId> = map.devices().iter().map(|d| d.id).collect();
        if membership.order != by_id {
            let names: Vec<String> = membership.order.iter().map(|d| device_ref(map, *d)).collect();
            let _ = writeln!(out, "order = [{}]", names.join(", "));
        }
        for version in &membership.versions {
            let active = match &version.active {
                ActiveSet::All => quote("all"),
                ActiveSet::FirstRanks(k) => k.to_string(),
                ActiveSet::Devices(devices) => {
                    let names: Vec<String> = devices.iter().map(|d| device_ref(map, *d)).collect();
                    format!("[{}]", names.join(", "))
                }
            };
            write_table(
                &mut out,
                "[[membership.versions]]",
                &vec![("version".into(), version.version.to_string()), ("active".into(), active)],
            );
        }
    }
    for set in map.choose_args() {
        write_table(&mut out, "[[choose_args]]", &vec![("id".into(), set.id.to_string())]);
        for arg in &set.args {
            let bucket = map
                .bucket(arg.bucket)
                .map(|b| quote(&b.name))
                .unwrap_or_else(|| arg.bucket.to_string());
            let mut fields: Fields = vec![("bucket".into(), bucket)];
            if let Some(ids) = &arg.ids {
                let ids: Vec<String> = ids.iter().map(i32::to_string).collect();
                fields.push(("ids".into(), format!("[{}]", ids.join(", "))));
            }
            if !arg.weight_set.is_empty() {
                let positions: Vec<String> =
                    arg.weight_set.iter().map(|weights| weight_list(weights)).collect();
                fields.push(("weight_set".into(), format!("[{}]", positions.join(", "))));
            }
            write_table(&mut out, "[[choose_args.buckets]]", &fields);
        }
    }
    out
}

/// An attributed pool's keys: the parameters that differ from the defaults, and always the
/// sector base (it pins the sectors).
fn attributed_fields(
    map: &ClusterMap,
    pool: &Pool,
    params: &AttributedParams,
    fields: &mut Fields,
) {
    let defaults = AttributedParams::default();
    if params.throttle_bytes != defaults.throttle_bytes {
        match format_bytes(params.throttle_bytes) {
            Some(text) => fields.push(("throttle".into(), quote(&text))),
            None => fields.push(("throttle".into(), params.throttle_bytes.to_string())),
        }
    }
    if params.sector_size != defaults.sector_size {
        fields.push(("sector_size".into(), params.sector_size.to_string()));
    }
    let default_zone = map.type_by_name("zone").unwrap_or(TypeId(0));
    if params.zone_type != default_zone
        && let Some(name) = map.type_name(params.zone_type)
    {
        fields.push(("zone_type".into(), quote(name)));
    }
    if params.distinct_zones {
        fields.push(("distinct_zones".into(), "true".into()));
    }
    if params.bandwidth_tolerance_percent != defaults.bandwidth_tolerance_percent {
        fields.push(("bandwidth_tolerance".into(), params.bandwidth_tolerance_percent.to_string()));
    }
    if params.selection != defaults.selection {
        fields.push(("selection".into(), quote(params.selection.name())));
    }
    let mut base = String::from("[");
    for (n, (device, count)) in pool.sector_base().iter().enumerate() {
        if n % 8 == 0 {
            base.push_str("\n    ");
        } else {
            base.push(' ');
        }
        let _ = write!(base, "[{device}, {count}],");
    }
    base.push_str(if pool.sector_base().is_empty() { "]" } else { "\n]" });
    fields.push(("sector_base".into(), base));
}

/// `[pools.balance_state]`: an incremental balanced pool's state, one device or domain a
/// line.
fn write_balance_state(out: &mut String, state: &BalanceState) {
    let _ = write!(
        out,
        "\n# Written by Optio: the incremental balancer's state (docs/balance.md). Edit the map,\n# not this table; Optio rebalances from it when the map changes.\n[pools.balance_state]\nversion = {STATE_VERSION}\nunits = {}\nsize = {}\nclasses = {CLASSES}\ndomains = [",
        state.units, state.size
    );
    for domain in &state.domains {
        let prices: Vec<String> = domain.prices.iter().map(u64::to_string).collect();
        let _ = write!(out, "\n    [{}, {}],", quote(&domain.name), prices.join(", "));
    }
    out.push_str(if state.domains.is_empty() { "]\n" } else { "\n]\n" });
    out.push_str("devices = [");
    for device in &state.devices {
        let prices: Vec<String> = device.prices.iter().map(u64::to_string).collect();
        let _ = write!(
            out,
            "\n    [{}, {}, {}, {}],",
            device.id.0,
            quote(&device.domain),
            device.weight,
            prices.join(", ")
        );
    }
    out.push_str(if state.devices.is_empty() { "]\n" } else { "\n]\n" });
}

/// A device in a membership list: its name, quoted.
fn device_ref(map: &ClusterMap, device: DeviceId) -> String {
    match map.device(device) {
        Some(d) => quote(&d.name),
        None => device.to_string(),
    }
}

fn weight_list(weights: &[Weight]) -> String {
    let weights: Vec<String> = weights.iter().map(|w| weight_to_decimal(*w)).collect();
    format!("[{}]", weights.join(", "))
}

/// A pool's choice settings, the ones that differ from the defaults.
fn choice_fields(choice: &ChoiceSettings, fields: &mut Fields) {
    if choice.choices != ChoiceSettings::default().choices {
        fields.push(("choices".into(), choice.choices.to_string()));
    }
    if choice.policy != PolicySpec::First {
        fields.push(("policy".into(), quote(choice.policy.name())));
    }
    if let PolicySpec::Composite(weights) = choice.policy {
        let pairs: Fields = COMPOSITE_METRICS
            .iter()
            .zip(weights.as_array())
            .filter(|(_, weight)| *weight > 0)
            .map(|(metric, weight)| (metric.to_string(), weight.to_string()))
            .collect();
        fields.push(("policy_weights".into(), inline(&pairs)));
    }
    if choice.full_ppm != FULL_PPM_DEFAULT {
        fields.push(("full_ratio".into(), ppm_to_decimal(choice.full_ppm)));
    }
}

/// Parts per million as the shortest exact decimal fraction (`950000` → `0.95`).
fn ppm_to_decimal(ppm: u32) -> String {
    let text = format!("{}.{:06}", ppm / 1_000_000, ppm % 1_000_000);
    let trimmed = text.trim_end_matches('0');
    if trimmed.ends_with('.') { format!("{trimmed}0") } else { trimmed.to_string() }
}

fn write_table(out: &mut String, header: &str, fields: &Fields) {
    let _ = writeln!(out, "\n{header}");
    for (key, value) in fields {
        let _ = writeln!(out, "{key} = {value}");
    }
}

fn inline(fields: &Fields) -> String {
    let pairs: Vec<String> = fields.iter().map(|(key, value)| format!("{key} = {value}")).collect();
    format!("{{ {} }}", pairs.join(", "))
}

fn write_inline_array(out: &mut String, key: &str, entries: &[Fields]) {
    let _ = writeln!(out, "{key} = [");
    for fields in entries {
        let _ = writeln!(out, "    {},", inline(fields));
    }
    out.push_str("]\n");
}

/// A TOML basic string.
pub(crate) fn quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\r' => quoted.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(quoted, "\\u{:04X}", u32::from(c));
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// A TOML key: bare when it can be.
fn key(text: &str) -> String {
    let bare =
        !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare { text.to_string() } else { quote(text) }
}

fn tunables_fields(map: &ClusterMap) -> Fields {
    let t = map.tunables();
    if let Some(profile) = TunablesProfile::ALL.iter().find(|p| p.tunables() == *t) {
        let name = if *profile == TunablesProfile::Jewel { "optimal" } else { profile.name() };
        return vec![("profile".into(), quote(name))];
    }
    let values = [
        u64::from(t.choose_local_tries),
        u64::from(t.choose_local_fallback_tries),
        u64::from(t.choose_total_tries),
        u64::from(t.chooseleaf_descend_once),
        u64::from(t.chooseleaf_vary_r),
        u64::from(t.chooseleaf_stable),
        u64::from(t.straw_calc_version),
        u64::from(t.allowed_bucket_algs),
    ];
    TUNABLE_NAMES
        .iter()
        .zip(values)
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn types_are_default(map: &ClusterMap) -> bool {
    map.types().len() == DEFAULT_TYPES.len()
        && map
            .types()
            .iter()
            .zip(DEFAULT_TYPES)
            .all(|(t, (id, name))| t.id.0 == id && t.name == name)
}

/// Whether the builder numbers the classes as the map does without a `classes` list: in order
/// of first appearance on devices, by id.
fn classes_are_implied(map: &ClusterMap) -> bool {
    let mut implied: Vec<&str> = Vec::new();
    for class in map.devices().iter().filter_map(|d| d.class.as_deref()) {
        if !implied.contains(&class) {
            implied.push(class);
        }
    }
    implied.len() == map.classes().len() && implied.iter().zip(map.classes()).all(|(a, b)| *a == b)
}

/// Devices in the order the located layout needs: depth first through the hierarchy, so that
/// every bucket receives its items in its own order; unplaced devices last, by id.
fn device_order(map: &ClusterMap, layout: Layout) -> Vec<&Device> {
    if layout == Layout::Explicit {
        return map.devices().iter().collect();
    }
    let mut order: Vec<&Device> = Vec::with_capacity(map.devices().len());
    let mut placed = vec![false; map.max_devices() as usize];
    for root in map.buckets().filter(|b| b.shadow_of.is_none() && map.parent(b.id.into()).is_none())
    {
        let mut stack: Vec<(&Bucket, usize)> = vec![(root, 0)];
        while let Some((bucket, next)) = stack.pop() {
            let Some(item) = bucket.items.get(next) else { continue };
            stack.push((bucket, next + 1));
            match item.device() {
                Some(id) => {
                    if let Some(device) = map.device(id)
                        && !std::mem::replace(&mut placed[id.0 as usize], true)
                    {
                        order.push(device);
                    }
                }
                None => {
                    if let Some(child) = item.bucket().and_then(|b| map.bucket(b)) {
                        stack.push((child, 0));
                    }
                }
            }
        }
    }
    order.extend(map.devices().iter().filter(|d| !placed[d.id.0 as usize]));
    order
}

fn capacity_of_weight(weight: Weight) -> u64 {
    ((u128::from(weight.0) * u128::from(TIB)) >> 16) as u64
}

fn device_fields(map: &ClusterMap, device: &Device, layout: Layout) -> Fields {
    let mut fields: Fields = vec![("id".into(), device.id.to_string())];
    if device.name != format!("osd.{}", device.id) {
        fields.push(("name".into(), quote(&device.name)));
    }
    if let Some(class) = &device.class {
        fields.push(("class".into(), quote(class)));
    }
    let capacity_text = || match format_bytes(device.capacity_bytes) {
        Some(text) => quote(&text),
        None => device.capacity_bytes.to_string(),
    };
    let weight_of_capacity = optio_placement::builder::weight_from_capacity(device.capacity_bytes);
    // A round capacity ("4TiB", "1920GB") says more to people than the weight it implies.
    let round_capacity = format_bytes(device.capacity_bytes)
        .filter(|text| text.trim_end_matches(|c: char| c.is_ascii_alphabetic()).len() <= 5);
    let implied_capacity = device.capacity_bytes == capacity_of_weight(device.weight);
    if implied_capacity && device.weight == Weight::ONE {
        // Both defaults.
    } else if weight_of_capacity == Some(device.weight) && round_capacity.is_some() {
        fields.push(("capacity".into(), capacity_text()));
    } else if implied_capacity {
        fields.push(("weight".into(), weight_to_decimal(device.weight)));
    } else if weight_of_capacity == Some(device.weight) {
        fields.push(("capacity".into(), capacity_text()));
    } else {
        fields.push(("capacity".into(), capacity_text()));
        fields.push(("weight".into(), weight_to_decimal(device.weight)));
    }
    if device.bandwidth_mb_per_s != 0 {
        fields.push(("bandwidth".into(), quote(&format!("{}MB/s", device.bandwidth_mb_per_s))));
    }
    if !device.up {
        fields.push(("up".into(), "false".into()));
    }
    if !device.is_in {
        fields.push(("in".into(), "false".into()));
    }
    if device.reweight != Weight::ONE {
        fields.push(("reweight".into(), weight_to_decimal(device.reweight)));
    }
    if device.primary_affinity != Weight::ONE {
        fields.push(("primary_affinity".into(), weight_to_decimal(device.primary_affinity)));
    }
    if let Some(addr) = &device.addr {
        fields.push(("addr".into(), quote(addr)));
    }
    if let Some(epoch) = device.up_from {
        fields.push(("up_from".into(), epoch.0.to_string()));
    }
    if let Some(epoch) = device.down_at {
        fields.push(("down_at".into(), epoch.0.to_string()));
    }
    if layout == Layout::Located {
        let location = map.location(device.id);
        if !location.is_empty() {
            let pairs: Vec<String> =
                location.iter().map(|(t, name)| format!("{} = {}", key(t), quote(name))).collect();
            fields.push(("location".into(), format!("{{ {} }}", pairs.join(", "))));
        }
    }
    fields
}

fn bucket_fields(
    map: &ClusterMap,
    bucket: &Bucket,
    shadows: &[(usize, BucketId, String)],
    layout: Layout,
) -> Fields {
    let mut fields: Fields = vec![
        ("id".into(), bucket.id.to_string()),
        ("name".into(), quote(&bucket.name)),
        ("type".into(), quote(map.type_name(bucket.type_id).unwrap_or_default())),
    ];
    if bucket.alg != BucketAlg::Straw2 {
        fields.push(("alg".into(), quote(bucket.alg.name())));
    }
    if bucket.hash != 0 {
        fields.push(("hash".into(), bucket.hash.to_string()));
    }
    if !shadows.is_empty() {
        let pairs: Vec<String> =
            shadows.iter().map(|(_, id, class)| format!("{} = {id}", key(class))).collect();
        fields.push(("class_ids".into(), format!("{{ {} }}", pairs.join(", "))));
    }
    if layout == Layout::Explicit {
        let items: Vec<String> = bucket
            .items
            .iter()
            .zip(&bucket.weights)
            .map(|(item, weight)| {
                let name = quote(map.item_name(*item).unwrap_or_default());
                let own = match item.bucket() {
                    Some(child) => map.bucket(child).map(Bucket::weight),
                    None => item.device().and_then(|d| map.device(d)).map(|d| d.weight),
                };
                if own == Some(*weight) {
                    name
                } else {
                    format!("{{ name = {name}, weight = {} }}", weight_to_decimal(*weight))
                }
            })
            .collect();
        fields.push(("items".into(), format!("[{}]", items.join(", "))));
    }
    fields
}
