//! The `crush` engine: a crush pool compiled for lookups (its rule run by Ceph's mapper,
//! [`crate::crush`], then Ceph's post-processing: devices that do not exist or are down
//! removed, primary affinity applied), and its checks — the rule must be able to give the
//! pool `size` devices, and its Optio balance extensions (seed 002's pps and `linear`
//! parameter, the balanced placements) must fit the rule.

use crate::crush::hash::hash32_2;
use crate::crush::{CrushMap, CrushWork};
use crate::error::{MapError, MapErrorKind as Kind, Subject};
use crate::ids::{BucketId, ITEM_NONE, ItemId, RuleId, TypeId, Weight};
use crate::map::{
    BUCKETS_MAX, Bucket, BucketAlg, ClusterMap, EngineSpec, LINEAR_PARAM_ONE, PartialMap, Pool,
    PoolBalance, Rule, RuleKind, Step,
};
use crate::params::PoolBalanceSpec;
use crate::params::crush::{LinearParamSpec, RuleRef};
use crate::replica::ReplicaSet;

pub use crate::params::crush::CrushParams;

/// A crush pool compiled: what its lookups pass to the mapper.
#[derive(Clone, Debug)]
pub(crate) struct CrushPool {
    rule: RuleId,
    /// Erasure-coded (positional) sets keep holes and shard positions.
    erasure: bool,
    pool: i64,
    size: usize,
    linear_param: u32,
}

impl CrushPool {
    /// Compiles `pool`, placed by `rule`.
    pub(crate) fn new(map: &ClusterMap, pool: &Pool, params: &CrushParams) -> CrushPool {
        let rule = params.rule;
        CrushPool {
            rule,
            erasure: map.rule(rule).is_some_and(|r| r.kind == RuleKind::Erasure),
            pool: i64::from(pool.id.0),
            size: pool.size as usize,
            linear_param: params.linear_param,
        }
    }

    /// Ceph's up set for engine input `key`: the raw result with non-existent and down devices
    /// removed (shifted out for replicated pools, holes for erasure-coded ones) and primary
    /// affinity applied. `work` is the mapper's scratch and a buffer for the raw result.
    pub(crate) fn place(
        &self,
        crush: &CrushMap,
        devices: &DeviceTable,
        key: u32,
        (work, raw): (&mut CrushWork, &mut Vec<i32>),
        out: &mut ReplicaSet,
    ) {
        self.place_raw(crush, devices, key, work, raw);
        out.clear();
        for &item in raw.iter() {
            if devices.usable(item) {
                out.push(item);
            } else if self.erasure {
                out.push(ITEM_NONE);
            }
        }
        devices.apply_primary_affinity(key, self.erasure, out);
    }

    /// The mapper's raw result for engine input `key`, into `raw`.
    pub(crate) fn place_raw(
        &self,
        crush: &CrushMap,
        devices: &DeviceTable,
        key: u32,
        work: &mut CrushWork,
        raw: &mut Vec<i32>,
    ) {
        raw.resize(self.size, 0);
        let n = crush.do_rule_linear(
            self.rule,
            key,
            raw,
            &devices.reweights,
            crush.choose_args_for_pool(self.pool),
            self.linear_param,
            work,
        );
        raw.truncate(n);
    }
}

/// Per-device state the post-processing of CRUSH results needs (Ceph's OSDMap side): which
/// devices exist and are up, their primary affinities and reweights.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeviceTable {
    exists: Vec<bool>,
    up: Vec<bool>,
    primary_affinity: Vec<u32>,
    reweights: Vec<u32>,
    any_affinity: bool,
}

impl DeviceTable {
    /// The table of `map`'s devices.
    pub(crate) fn new(map: &ClusterMap) -> DeviceTable {
        let max = map.max_devices() as usize;
        let mut table = DeviceTable {
            exists: vec![false; max],
            up: vec![false; max],
            primary_affinity: vec![0x10000; max],
            reweights: map.reweight_vector(),
            any_affinity: false,
        };
        for device in map.devices() {
            let i = device.id.0 as usize;
            table.exists[i] = true;
            table.up[i] = device.up;
            table.primary_affinity[i] = device.primary_affinity.0;
            table.any_affinity |= device.primary_affinity.0 < 0x10000;
        }
        table
    }

    /// Whether a raw result entry is a device that exists and is up.
    fn usable(&self, item: i32) -> bool {
        item >= 0
            && item != ITEM_NONE
            && self.exists.get(item as usize).copied().unwrap_or(false)
            && self.up[item as usize]
    }

    /// Ceph's `_apply_primary_affinity` on `set` (nothing when no device has an affinity
    /// below 1).
    pub(crate) fn apply_primary_affinity(&self, pps: u32, erasure: bool, set: &mut ReplicaSet) {
        if self.any_affinity {
            apply_primary_affinity(self, pps, erasure, set);
        }
    }
}

/// A crush pool's engine, with its rule unresolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrushSpec {
    /// The rule.
    pub rule: Option<RuleRef>,
}

/// What [`check_pool_balance`] needs of the pool being built: its name (for errors), size and
/// placement groups (`pgp_num` with its default) — the rest of its spec is the builder's.
pub(crate) struct PoolShape<'a> {
    /// The pool's name.
    pub(crate) name: &'a str,
    /// Replicas (or shards) per object.
    pub(crate) size: u32,
    /// Placement groups used for placement.
    pub(crate) pgp_num: u32,
}

/// Checks a pool's Optio balance extensions (`wanted`): crush pools only; a `linear` balance
/// parameter in range and only where the rule reaches a linear bucket; balanced placement only
/// with a rule it supports (and then no linear parameter: it does not use CRUSH's buckets).
pub(crate) fn check_pool_balance(
    map: &PartialMap<'_>,
    rules: &[Rule],
    pool: &PoolShape<'_>,
    wanted: &PoolBalanceSpec,
    engine: &EngineSpec,
) -> Result<PoolBalance, MapError> {
    let mut balance =
        PoolBalance { pps: wanted.pps, linear_param: LINEAR_PARAM_ONE, balanced: wanted.balanced };
    let subject = Subject::Pool(pool.name.to_string());
    let bad = |field: &'static str, value: String, reason: String| {
        MapError::new(subject.clone(), Kind::OutOfRange { field, value, reason })
    };
    let rule = match engine {
        EngineSpec::Crush { rule } => rules.iter().find(|r| r.id == *rule),
        _ => {
            if *wanted != PoolBalanceSpec::default() {
                return Err(bad(
                    "pps/balance_param/balanced",
                    format!("{wanted:?}"),
                    "Optio's balance settings apply to crush pools only; remove them or set engine = \"crush\"".into(),
                ));
            }
            return Ok(balance);
        }
    };
    if let Some(value) = checked_linear_param(map, rule, wanted, &bad)? {
        balance.linear_param = value;
    }
    check_balance_state(wanted, &bad)?;
    if wanted.balanced.is_on() {
        check_balanced(rule.expect("crush pools have a rule"), pool, wanted, &bad)?;
    }
    Ok(balance)
}

/// The error maker of [`check_pool_balance`]: an out-of-range value of a pool field.
type Bad<'a> = dyn Fn(&'static str, String, String) -> MapError + 'a;

/// The `linear` balance parameter as given: `None` for the default (1.0), else the value;
/// refused below 1.0, and anywhere the rule reaches no linear bucket. (`auto` is `None` here:
/// the tuning sets it once the map is valid.)
fn checked_linear_param(
    map: &PartialMap<'_>,
    rule: Option<&Rule>,
    wanted: &PoolBalanceSpec,
    bad: &Bad<'_>,
) -> Result<Option<u32>, MapError> {
    let reaches_linear = rule.is_some_and(|rule| rule_reaches_linear(map, rule));
    match wanted.linear_param {
        LinearParamSpec::Fixed(LINEAR_PARAM_ONE) => {}
        LinearParamSpec::Fixed(value) if value < LINEAR_PARAM_ONE => {
            return Err(bad(
                "balance_param",
                Weight(value).to_string(),
                "at least 1.0 (a linear bucket divides the pps by it), or \"auto\" to search for the best".into(),
            ));
        }
        other => {
            if !reaches_linear {
                return Err(bad(
                    "balance_param",
                    match other {
                        LinearParamSpec::Fixed(value) => Weight(value).to_string(),
                        LinearParamSpec::Auto => "auto".into(),
                    },
                    "it is the parameter of linear buckets (seed 002) and this pool's rule reaches none; remove it or make the hosts `alg = \"linear\"`".into(),
                ));
            }
            if let LinearParamSpec::Fixed(value) = other {
                return Ok(Some(value));
            }
        }
    }
    Ok(None)
}

/// A balance state is only for incremental pools, and must be consistent.
fn check_balance_state(wanted: &PoolBalanceSpec, bad: &Bad<'_>) -> Result<(), MapError> {
    if let Some(state) = &wanted.state {
        if wanted.balanced != crate::map::BalanceMethod::Incremental {
            return Err(bad(
                "balance_state",
                format!("{} devices", state.devices.len()),
                "only incremental balanced pools carry a balance state; remove it or set balanced = \"incremental\"".into(),
            ));
        }
        if let Err(why) = state.check() {
            return Err(bad(
                "balance_state",
                format!("{} devices", state.devices.len()),
                format!(
                    "{why}; the state is written by Optio: remove it to balance this pool from scratch"
                ),
            ));
        }
    }
    Ok(())
}

/// A balanced pool: no linear parameter (it does not use CRUSH's buckets), a rule the
/// balancer supports, and at most [`BALANCED_UNITS_MAX`](crate::engine::balanced::BALANCED_UNITS_MAX)
/// placement units.
fn check_balanced(
    rule: &Rule,
    pool: &PoolShape<'_>,
    wanted: &PoolBalanceSpec,
    bad: &Bad<'_>,
) -> Result<(), MapError> {
    let value = match wanted.balanced {
        crate::map::BalanceMethod::Incremental => "\"incremental\"",
        _ => "true",
    };
    if wanted.linear_param != LinearParamSpec::Fixed(LINEAR_PARAM_ONE) {
        return Err(bad(
            "balance_param",
            format!("{:?}", wanted.linear_param),
            "a balanced pool does not use CRUSH's buckets, so the linear balance parameter means nothing; remove it".into(),
        ));
    }
    if let Err(why) = crate::engine::balanced::rule_shape(rule, pool.size) {
        return Err(bad(
            "balanced",
            value.into(),
            format!("rule '{}' cannot be balanced: {why}", rule.name),
        ));
    }
    let pgp_num = pool.pgp_num;
    if pgp_num > crate::engine::balanced::BALANCED_UNITS_MAX {
        return Err(bad(
            "pgp_num",
            pgp_num.to_string(),
            format!(
                "a balanced pool has at most {} placement groups",
                crate::engine::balanced::BALANCED_UNITS_MAX
            ),
        ));
    }
    Ok(())
}

/// Whether a bucket the rule takes, or one below it, is a linear bucket.
fn rule_reaches_linear(map: &PartialMap<'_>, rule: &Rule) -> bool {
    let mut stack: Vec<BucketId> = rule
        .steps
        .iter()
        .filter_map(|step| match step {
            Step::Take(item) => item.bucket(),
            _ => None,
        })
        .collect();
    let mut visited = 0usize;
    while let Some(id) = stack.pop() {
        visited += 1;
        if visited > BUCKETS_MAX {
            break;
        }
        let Some(bucket) = map.bucket(id) else { continue };
        if bucket.alg == BucketAlg::Linear {
            return true;
        }
        stack.extend(bucket.items.iter().filter_map(|item| item.bucket()));
    }
    false
}

/// Upper bound on how many devices `rule` can return, from the weights alone (up/in states do
/// not matter: a degraded cluster still has a valid map). Refuses pools larger than that.
pub(crate) fn check_rule_capacity(
    map: &PartialMap<'_>,
    rule: &Rule,
    pool: &PoolShape<'_>,
) -> Result<(), MapError> {
    let result_max = i64::from(pool.size);
    let mut emitted: i64 = 0;
    // The working set: every item it may hold, and at most how many it holds.
    let mut candidates: Vec<ItemId> = Vec::new();
    let mut limit: i64 = 0;
    for step in &rule.steps {
        match *step {
            Step::Take(item) => {
                candidates = vec![item];
                limit = 1;
            }
            Step::ChooseFirstn { num, type_id }
            | Step::ChooseIndep { num, type_id }
            | Step::ChooseleafFirstn { num, type_id }
            | Step::ChooseleafIndep { num, type_id } => {
                let n = if num > 0 { i64::from(num) } else { i64::from(num) + result_max };
                let leaf =
                    matches!(step, Step::ChooseleafFirstn { .. } | Step::ChooseleafIndep { .. });
                let mut next = Vec::new();
                let mut yields = Vec::new();
                for item in &candidates {
                    let Some(bucket) = item.bucket().and_then(|b| map.bucket(b)) else { continue };
                    let mut found = Vec::new();
                    collect_of_type(map, bucket, type_id, leaf, &mut found);
                    yields.push(n.max(0).min(found.len() as i64));
                    next.extend(found);
                }
                // Best case: the `limit` most productive candidates are the ones chosen.
                yields.sort_unstable_by(|a, b| b.cmp(a));
                let take = usize::try_from(limit).unwrap_or(0);
                limit = yields.iter().take(take).sum::<i64>().min(result_max);
                candidates = next;
            }
            Step::Emit => {
                emitted += limit.min(candidates.len() as i64);
                candidates.clear();
                limit = 0;
            }
            _ => {}
        }
    }
    let available = emitted.min(result_max);
    if available < result_max {
        let hint = if emitted == 0 {
            "the rule emits nothing for this pool (check its take and emit steps, and that its buckets have weight)".to_string()
        } else {
            format!(
                "lower the pool size to {available}, add failure domains, or choose a lower failure-domain type"
            )
        };
        return Err(MapError::new(
            Subject::Pool(pool.name.to_string()),
            Kind::RuleCannotSatisfy {
                rule: rule.name.clone(),
                needed: pool.size,
                available: u32::try_from(available).expect("at most the pool's size, a u32"),
                hint,
            },
        ));
    }
    Ok(())
}

/// Items of `type_id` below `bucket` that carry weight (for chooseleaf: that have a device
/// with weight below them).
fn collect_of_type(
    map: &PartialMap<'_>,
    bucket: &Bucket,
    type_id: TypeId,
    leaf: bool,
    found: &mut Vec<ItemId>,
) {
    let mut stack = vec![bucket];
    while let Some(bucket) = stack.pop() {
        for (item, weight) in bucket.items.iter().zip(&bucket.weights) {
            if weight.0 == 0 {
                continue;
            }
            match item.bucket().and_then(|b| map.bucket(b)) {
                Some(child)
                    if child.type_id == type_id && (!leaf || has_weighted_device(map, child)) =>
                {
                    found.push(*item);
                }
                Some(child) => stack.push(child),
                None if type_id == TypeId(0) && map.device_weight(item.0).0 > 0 => {
                    found.push(*item)
                }
                None => {}
            }
        }
    }
}

fn has_weighted_device(map: &PartialMap<'_>, bucket: &Bucket) -> bool {
    let mut stack = vec![bucket];
    while let Some(bucket) = stack.pop() {
        for (item, weight) in bucket.items.iter().zip(&bucket.weights) {
            if weight.0 == 0 {
                continue;
            }
            match item.bucket().and_then(|b| map.bucket(b)) {
                Some(child) => stack.push(child),
                None => return true,
            }
        }
    }
    false
}

/// Ceph's `_apply_primary_affinity`.
fn apply_primary_affinity(table: &DeviceTable, pps: u32, erasure: bool, set: &mut ReplicaSet) {
    let items = set.as_slice();
    let any = items.iter().any(|&o| o != ITEM_NONE && table.primary_affinity[o as usize] < 0x10000);
    if !any {
        return;
    }
    let mut chosen: Option<usize> = None;
    for (position, &osd) in items.iter().enumerate() {
        if osd == ITEM_NONE {
            continue;
        }
        let affinity = table.primary_affinity[osd as usize];
        if affinity < 0x10000 && (hash32_2(pps, osd as u32) >> 16) >= affinity {
            // Rejected; remember the first one as a fallback.
            if chosen.is_none() {
                chosen = Some(position);
            }
            continue;
        }
        chosen = Some(position);
        break;
    }
    let Some(position) = chosen else { return };
    if erasure {
        // Shards keep their positions; only the primary changes.
        set.set_primary_position(position);
    } else {
        // Replicas: the primary moves to the front, the others keep their order.
        set.move_to_front(position);
    }
}
