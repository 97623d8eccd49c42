//! The `crush` engine's pool checks: a crush pool's rule must be able to give it `size`
//! devices, and its Optio balance extensions (seed 002's pps and `linear` parameter, the
//! balanced placements) must fit its rule. CRUSH itself (Ceph's mapper) is [`crate::crush`].

use crate::builder::{LinearParamSpec, PartialMap, PoolBalanceSpec, PoolSpec};
use crate::error::{MapError, MapErrorKind as Kind, Subject};
use crate::ids::{BucketId, ItemId, TypeId, Weight};
use crate::map::{
    BUCKETS_MAX, Bucket, BucketAlg, EngineSpec, LINEAR_PARAM_ONE, PoolBalance, Rule, Step,
};

/// Checks a pool's Optio balance extensions: crush pools only; a `linear` balance parameter
/// in range and only where the rule reaches a linear bucket; balanced placement only with a
/// rule it supports (and then no linear parameter: it does not use CRUSH's buckets).
pub(crate) fn check_pool_balance(
    map: &PartialMap<'_>,
    rules: &[Rule],
    spec: &PoolSpec,
    engine: &EngineSpec,
) -> Result<PoolBalance, MapError> {
    let wanted = &spec.balance;
    let mut balance =
        PoolBalance { pps: wanted.pps, linear_param: LINEAR_PARAM_ONE, balanced: wanted.balanced };
    let subject = Subject::Pool(spec.name.clone());
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
                balance.linear_param = value;
            }
        }
    }
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
    if wanted.balanced.is_on() {
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
        let rule = rule.expect("crush pools have a rule");
        if let Err(why) = crate::engine::balanced::rule_shape(rule, spec.size) {
            return Err(bad(
                "balanced",
                value.into(),
                format!("rule '{}' cannot be balanced: {why}", rule.name),
            ));
        }
        let pgp_num = spec.pgp_num.unwrap_or(spec.pg_num);
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
    }
    Ok(balance)
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
    pool: &PoolSpec,
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
                limit = yields.iter().take(limit.max(0) as usize).sum::<i64>().min(result_max);
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
            Subject::Pool(pool.name.clone()),
            Kind::RuleCannotSatisfy {
                rule: rule.name.clone(),
                needed: pool.size,
                available: available as u32,
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
