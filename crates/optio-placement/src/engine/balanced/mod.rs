//! Balanced placement with no exception tables: Optio's own.
//!
//! Ceph's upmap balancer evens out PGs with per-PG exception entries that a central optimiser
//! computes and stores in the map. Here the balanced placement is a pure function of the map:
//! every client computes it from the map alone, the same everywhere; nothing per PG is
//! stored. See `docs/balance.md` for the design, the alternatives measured and the numbers.
//!
//! * **Targets** (`targets.rs`): every usable device (up, in, weight and reweight > 0) below
//!   the rule's `take` should hold its weight's share of the pool's copies, failure domains
//!   capped at one copy per PG (water-filling), in exact rational arithmetic. A device may
//!   hold between `⌈t⌉ − 1 − LOWER_SLACK` and `⌊t⌋ + UPPER_SLACK` copies.
//! * **Rankings** (`rank.rs`): every device orders the PGs by a hash of (device, pps); the PG
//!   at position `k` scores `(2k + 1) / 2t`. Every device thus has the same number of PGs
//!   below any score, whatever its hash luck — the source of CRUSH's imbalance is removed at
//!   the root — and no device's ranking depends on another device.
//! * **Matching** (`matching.rs`): the stable matching over those scores with the caps and
//!   distinct failure domains (order-independent), then a repair that lifts devices below
//!   their floor by taking copies only from devices above theirs.
//!
//! Determinism: integer arithmetic only, ties broken by hashes and indices, no hash-map
//! iteration; every client gets the same sets. Complexity: O(devices × PGs) hashes, a sort
//! of about `RANKED_PER_TARGET × copies` pairs, and a linear pass.
//!
//! ```
//! use optio_placement::{ClusterMapBuilder, DeviceSpec, Placement, PoolSpec};
//!
//! let mut builder = ClusterMapBuilder::new();
//! for id in 0..12u32 {
//!     let host = format!("host{}", id / 3);
//!     builder = builder.device(DeviceSpec::new(id).at(&[("host", &host)]));
//! }
//! let mut pool = PoolSpec::crush(1, "rbd", 256, 3);
//! pool.balance.balanced = optio_placement::BalanceMethod::HistoryFree; // `balanced = true`
//! let map = builder.replicated_rule(0, "r", "default", "host").pool(pool).build().expect("valid");
//!
//! // Every device holds 64 copies (256 × 3 / 12), within one of that.
//! let balanced = optio_placement::engine::balanced::balance(&map, &map.pools()[0]).expect("balances");
//! assert!(balanced.devices.iter().all(|d| d.load.abs_diff(64) <= 2));
//! // Placement computes it once and looks PGs up in the table.
//! let placement = Placement::new(&map).expect("compiles");
//! assert_eq!(placement.pool_by_name("rbd").expect("pool").locate("obj").devices.len(), 3);
//! ```

pub mod incremental;
mod matching;
mod rank;
mod score;
pub(crate) mod table;
mod targets;

use crate::ids::{DeviceId, ItemId, TypeId};
use crate::map::{ClusterMap, EngineSpec, Pool, Rule, RuleKind, Step};
use crate::replica::ReplicaSet;

pub use crate::params::balanced::BalancedParams;

/// How far above its target a device may go: at most `⌊t⌋ + UPPER_SLACK` copies.
pub const UPPER_SLACK: i64 = 1;
/// How far below its target a device may go: at least `⌈t⌉ − 1 − LOWER_SLACK` copies.
pub const LOWER_SLACK: i64 = 1;
/// Each device ranks about `RANKED_PER_TARGET × t + RANKED_EXTRA` PGs: the pairs the matching
/// considers (the rest of a device's ranking never matters unless a fallback is needed).
pub const RANKED_PER_TARGET: u64 = 6;
/// See [`RANKED_PER_TARGET`].
pub const RANKED_EXTRA: u64 = 16;
/// Most placement units (PGs) a balanced pool may have.
pub const BALANCED_UNITS_MAX: u32 = 1 << 20;
/// Most devices a balanced pool may span.
pub const BALANCED_DEVICES_MAX: usize = 1 << 16;

/// Why a pool cannot be balanced.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BalanceError {
    /// The pool is not a CRUSH pool.
    #[error(
        "pool '{0}' is not a crush pool with placement groups; balanced placement applies to crush pools only"
    )]
    NotCrush(String),
    /// The rule has a shape the balanced method does not support.
    #[error(
        "rule '{rule}' of pool '{pool}' cannot be balanced: {why}; balanced placement supports replicated rules `take ROOT [class C]; chooseleaf firstn 0 type T; emit` (or `choose firstn 0 type osd`)"
    )]
    RuleShape {
        /// The pool.
        pool: String,
        /// The rule.
        rule: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The pool is too large for the balanced method.
    #[error(
        "pool '{pool}' has {what}, more than the balanced method's limit of {limit}; use fewer placement groups or plain CRUSH"
    )]
    TooLarge {
        /// The pool.
        pool: String,
        /// What exceeds the limit.
        what: String,
        /// The limit.
        limit: u64,
    },
}

/// One device of a balanced pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BalancedDevice {
    /// The device.
    pub id: DeviceId,
    /// Its target: its weight's share of the copies (exact value, shown as a float).
    pub target: f64,
    /// The fewest copies the method aims for.
    pub lower: u64,
    /// The most copies the method aims for.
    pub upper: u64,
    /// The copies it holds.
    pub load: u64,
}

/// The balanced placement of one pool.
#[derive(Clone, Debug, PartialEq)]
pub struct Balanced {
    /// The devices of every placement unit (the PG seed folded by `pgp_num`), best first.
    /// A set is short when the usable failure domains are fewer than the pool's size.
    pub sets: Vec<ReplicaSet>,
    /// Every usable device of the pool, with its target and load.
    pub devices: Vec<BalancedDevice>,
    /// Copies placed by the fallback (a PG whose ranked candidates could not complete it).
    pub fallback: u64,
    /// Copies by which devices end outside their band because the constraints allowed no
    /// better (0 on any map with room in every failure domain).
    pub unresolved: u64,
}

/// The devices a balanced pool may use, their failure domains and weights.
struct Devices {
    ids: Vec<u32>,
    weights: Vec<u64>,
    domain: Vec<u32>,
    domain_count: usize,
}

/// Whether `rule` has a shape the balanced method supports for pools of `size`: the item it
/// takes and the failure-domain type, or what is wrong.
pub fn rule_shape(rule: &Rule, size: u32) -> Result<(ItemId, TypeId), &'static str> {
    // `set_*` steps only tune CRUSH's retries; they mean nothing to the balanced method.
    let steps: Vec<&Step> = rule
        .steps
        .iter()
        .filter(|s| {
            !matches!(
                s,
                Step::Noop
                    | Step::SetChooseTries(_)
                    | Step::SetChooseleafTries(_)
                    | Step::SetChooseLocalTries(_)
                    | Step::SetChooseLocalFallbackTries(_)
                    | Step::SetChooseleafVaryR(_)
                    | Step::SetChooseleafStable(_)
            )
        })
        .collect();
    let covers = |num: i32| {
        (num <= 0 && i64::from(num) + i64::from(size) >= i64::from(size))
            || (num > 0 && num as u32 >= size)
    };
    if rule.kind == RuleKind::Erasure
        || steps
            .iter()
            .any(|s| matches!(s, Step::ChooseIndep { .. } | Step::ChooseleafIndep { .. }))
    {
        return Err("erasure-coded (indep) rules are not supported");
    }
    match steps.as_slice() {
        [Step::Take(take), Step::ChooseleafFirstn { num, type_id }, Step::Emit] if covers(*num) => {
            Ok((*take, *type_id))
        }
        [Step::Take(take), Step::ChooseFirstn { num, type_id: TypeId(0) }, Step::Emit]
            if covers(*num) =>
        {
            Ok((*take, TypeId(0)))
        }
        [Step::Take(_), Step::ChooseFirstn { type_id, .. }, Step::Emit]
            if *type_id != TypeId(0) =>
        {
            Err(
                "a `choose` step must pick devices (type 0); use `chooseleaf` to spread over failure domains",
            )
        }
        [Step::Take(_), Step::ChooseleafFirstn { .. } | Step::ChooseFirstn { .. }, Step::Emit] => {
            Err("its choose step must pick every replica (firstn 0, or N ≥ the pool size)")
        }
        _ => Err("it must have exactly one take, one choose and one emit step"),
    }
}

fn pool_rule<'m>(map: &'m ClusterMap, pool: &Pool) -> Result<(ItemId, TypeId), BalanceError> {
    let EngineSpec::Crush { rule } = pool.engine_spec() else {
        return Err(BalanceError::NotCrush(pool.name.clone()));
    };
    let rule: &'m Rule = map.rule(rule).ok_or_else(|| BalanceError::NotCrush(pool.name.clone()))?;
    rule_shape(rule, pool.size).map_err(|why| BalanceError::RuleShape {
        pool: pool.name.clone(),
        rule: rule.name.clone(),
        why,
    })
}

/// A device the balancer may place copies on, with its failure domain and effective weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub id: u32,
    pub domain: String,
    /// CRUSH weight × reweight (16.16), > 0.
    pub weight: u64,
}

/// The usable devices (up, in, weight and reweight > 0) under `take`, in the order CRUSH
/// lists them, with the names of their failure domains of type `domain_type` (the device's
/// own name for type 0). Devices with no ancestor of that type are left out.
pub(crate) fn members(map: &ClusterMap, take: ItemId, domain_type: TypeId) -> Vec<Member> {
    let mut out = Vec::new();
    for device in map.devices_under(take) {
        let Some(d) = map.device(device) else { continue };
        let weight = d.balance_weight();
        if weight == 0 {
            continue;
        }
        let domain = if domain_type == TypeId(0) {
            d.name.clone()
        } else {
            match map.ancestor_of_type(ItemId::from(device), domain_type) {
                Some(bucket) => bucket.name.clone(),
                None => continue,
            }
        };
        out.push(Member { id: device.0, domain, weight });
    }
    out
}

fn usable_devices(map: &ClusterMap, take: ItemId, domain_type: TypeId) -> Devices {
    let mut devices =
        Devices { ids: Vec::new(), weights: Vec::new(), domain: Vec::new(), domain_count: 0 };
    // Domains (names are unique) are numbered in order of first use.
    let mut domain_names: Vec<String> = Vec::new();
    for member in members(map, take, domain_type) {
        let domain = match domain_names.iter().position(|n| *n == member.domain) {
            Some(index) => index,
            None => {
                domain_names.push(member.domain);
                domain_names.len() - 1
            }
        };
        devices.ids.push(member.id);
        devices.weights.push(member.weight);
        devices.domain.push(crate::narrow::index32(domain));
    }
    devices.domain_count = domain_names.len();
    devices
}

/// Balances pool `pool` of `map` (its placement units are its `pgp_num` PGs, keyed by their
/// pps as the pool computes it).
pub fn balance(map: &ClusterMap, pool: &Pool) -> Result<Balanced, BalanceError> {
    let keys: Vec<u32> = (0..pool.pgp_num).map(|seed| crate::pg::pool_pps(pool, seed)).collect();
    balance_with_keys(map, pool, &keys)
}

/// Balances pool `pool` of `map`; `keys[u]` is the CRUSH input (pps) of placement unit `u`.
/// Out, down and zero-weight devices get nothing; with fewer usable failure domains than the
/// pool's size, sets are short.
pub fn balance_with_keys(
    map: &ClusterMap,
    pool: &Pool,
    keys: &[u32],
) -> Result<Balanced, BalanceError> {
    let (take, domain_type) = pool_rule(map, pool)?;
    let size = pool.size as usize;
    if keys.len() as u64 > u64::from(BALANCED_UNITS_MAX) {
        return Err(BalanceError::TooLarge {
            pool: pool.name.clone(),
            what: format!("{} placement groups", keys.len()),
            limit: u64::from(BALANCED_UNITS_MAX),
        });
    }
    let devices = usable_devices(map, take, domain_type);
    if devices.ids.len() > BALANCED_DEVICES_MAX {
        return Err(BalanceError::TooLarge {
            pool: pool.name.clone(),
            what: format!("{} usable devices", devices.ids.len()),
            limit: BALANCED_DEVICES_MAX as u64,
        });
    }
    let targets = targets::targets(
        &devices.weights,
        &devices.domain,
        devices.domain_count,
        keys.len() as u64,
        size as u64,
    );
    let lower: Vec<i64> = targets.iter().map(|t| (t.ceil() - 1 - LOWER_SLACK).max(0)).collect();
    let upper: Vec<i64> = targets.iter().map(|t| t.floor() + UPPER_SLACK).collect();
    let mut scratch = Vec::new();
    let rankings: Vec<Vec<rank::Ranked>> = devices
        .ids
        .iter()
        .zip(&targets)
        .map(|(&id, target)| {
            let count = target.numerator.saturating_mul(u128::from(RANKED_PER_TARGET))
                / target.denominator
                + u128::from(RANKED_EXTRA);
            let count = usize::try_from(count).unwrap_or(usize::MAX);
            rank::ranking(id, keys, target, count, &mut scratch)
        })
        .collect();
    let problem = matching::Problem {
        size,
        units: keys.len(),
        keys,
        ids: &devices.ids,
        weights: &devices.weights,
        domain: &devices.domain,
        lower: &lower,
        upper: &upper,
        rankings: &rankings,
    };
    let solution = matching::solve(&problem);
    let sets = solution
        .members
        .chunks(size.max(1))
        .map(|members| {
            let mut set = ReplicaSet::new();
            for &m in members.iter().filter(|&&m| m != matching::NONE) {
                set.push(devices.ids[m as usize] as i32);
            }
            set
        })
        .collect();
    let devices = (0..devices.ids.len())
        .map(|d| BalancedDevice {
            id: DeviceId(devices.ids[d]),
            target: targets[d].as_f64(),
            lower: lower[d] as u64,
            upper: upper[d] as u64,
            load: solution.load[d] as u64,
        })
        .collect();
    Ok(Balanced { sets, devices, fallback: solution.fallback, unresolved: solution.unresolved })
}
