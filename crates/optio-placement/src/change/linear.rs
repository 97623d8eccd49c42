//! Seed 002's optimised CRUSH — **an Optio extension, not Ceph-compatible**.
//!
//! Intel's proposal to the Ceph community (seed 002) found that CRUSH spreads PGs over OSDs
//! like independent random placement (PGs-per-OSD stdev 10.09 with 2 replicas and 12.13 with
//! 3 on 40 OSDs in 4 hosts, 2048 PGs) and proposed three changes, all implemented here:
//!
//! 1. **A bijective pps generator** ([`PpsGenerator::Congruential`](crate::map::PpsGenerator::Congruential),
//!    [`crate::pg::congruential_pps`]): the PGs of a pool map to a permutation of
//!    `{0 … 2^n − 1}` instead of 32-bit hashes, with the pool id as the generator's seed.
//! 2. **`linear` buckets** ([`BucketAlg::Linear`](crate::map::BucketAlg::Linear)): a host
//!    picks device `⌊pps / balance_param⌋ mod size`. Because the pps values are a permutation, the
//!    PGs of the whole pool fall evenly on the residues; each host sees a random subset of
//!    them (its share of the PGs), so its devices' counts vary only as a sample *without
//!    replacement* from an even population — variance `t(1 − share)` instead of CRUSH's
//!    multinomial `t(1 − 1/devices)`, a large gain when a host holds most PGs (3 replicas
//!    on 4 hosts: three quarters).
//! 3. **An adaptive balance parameter** ([`tune_linear_param`]): the parameter that minimises
//!    the PGs-per-OSD stdev for the pool, found when the pool is created and stored with it.
//!
//! Where the seed is vague, these choices were made (and are pinned by golden tests):
//!
//! * "Dividing the key by the balance parameter": `p` is a real `≥ 1`, stored in 16.16 fixed
//!   point, and the bucket takes item `(⌊x·2^16 / p⌋ + retries) mod size`. Integer `p` would
//!   leave the search too few useful values: for `p` beyond `2^n / (10·size)` the quotients
//!   of a pool's pps values take too few values to spread over a host (measured: with
//!   integers, the best of `p ≤ 2048` gives stdev 5.52 / 5.32 on the paper's cluster; with
//!   steps of 1/64, 5.13 / 4.53).
//! * `retries` counts the retries of the current choose step, **not** CRUSH's `r`: `r` also
//!   counts the replica and, under `chooseleaf`, the host collisions of the descent; adding
//!   it shifts those PGs' residues at random and undoes the balance of the permutation
//!   (measured: 6.89 / 7.40 with `r`). So every replica of every PG in a host uses the
//!   residue `⌊x / p⌋`; a retry inside the host (legacy tunables, or `choose … type osd`
//!   from the host) takes the next device; under `chooseleaf` with `descend_once`, a PG
//!   whose device is out retries from the root and lands in another host.
//! * The search tries `p = 1, 1 + 1/64, 1 + 2/64, …`, [`LINEAR_SEARCH_TRIALS_MAX`] values
//!   (fewer for pools so large that the search would exceed [`LINEAR_SEARCH_MAPPINGS_MAX`]
//!   CRUSH mappings, never fewer than [`LINEAR_SEARCH_TRIALS_MIN`]) and keeps the least
//!   stdev, the smallest `p` on ties. The stdev is compared exactly, as `n·Σc² − (Σc)²` in
//!   integers, over the devices under the rule's `take` with weight > 0.
//! * Linear buckets need items of equal weight (like uniform buckets); they may hold any
//!   items, not only devices.

use crate::crush::{CrushMap, CrushWork};
use crate::map::{ClusterMap, EngineSpec, LINEAR_PARAM_ONE, Pool, Step};

/// Most balance parameters the adaptive search tries.
pub const LINEAR_SEARCH_TRIALS_MAX: u32 = 256;
/// The search tries `1.0, 1.0 + step, 1.0 + 2·step, …` (16.16 fixed point: 1/64).
pub const LINEAR_SEARCH_STEP: u32 = 0x400;
/// Fewest balance parameters the adaptive search tries, however large the pool.
pub const LINEAR_SEARCH_TRIALS_MIN: u32 = 16;
/// The search tries no more parameters than keep it within this many CRUSH mappings (unless
/// that is fewer than [`LINEAR_SEARCH_TRIALS_MIN`]).
pub const LINEAR_SEARCH_MAPPINGS_MAX: u64 = 1 << 22;

/// The result of the adaptive search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearTuning {
    /// The balance parameter chosen (16.16 fixed point).
    pub param: u32,
    /// Parameters tried.
    pub trials: u32,
    /// PGs-per-device stdev with the chosen parameter (for reports).
    pub stdev: f64,
    /// The same with parameter 1 (for reports).
    pub stdev_at_one: f64,
}

/// Raw CRUSH copies per device id of `pool` with linear balance parameter `param` (16.16;
/// the pool's own pps generator, reweights and weight sets).
pub fn pg_counts(map: &ClusterMap, crush: &CrushMap, pool: &Pool, param: u32) -> Vec<u64> {
    let mut counts = vec![0u64; map.max_devices() as usize];
    let EngineSpec::Crush { rule } = pool.engine_spec() else { return counts };
    let reweights = map.reweight_vector();
    let choose_args = crush.choose_args_for_pool(i64::from(pool.id.0));
    let mut work = CrushWork::new(crush);
    let mut raw = vec![0i32; pool.size as usize];
    for seed in 0..pool.pgp_num {
        let key = crate::pg::pool_pps(pool, seed);
        let n =
            crush.do_rule_linear(rule, key, &mut raw, &reweights, choose_args, param, &mut work);
        for &item in &raw[..n] {
            if let Some(count) = usize::try_from(item).ok().and_then(|i| counts.get_mut(i)) {
                *count += 1;
            }
        }
    }
    counts
}

/// Devices that may hold the pool's data: below its rule's `take` items, weight > 0.
fn pool_devices(map: &ClusterMap, pool: &Pool) -> Vec<usize> {
    let EngineSpec::Crush { rule } = pool.engine_spec() else { return Vec::new() };
    let Some(rule) = map.rule(rule) else { return Vec::new() };
    let mut devices: Vec<usize> = rule
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Take(item) => Some(map.devices_under(*item)),
            _ => None,
        })
        .flatten()
        .filter(|d| map.device(*d).is_some_and(|d| d.weight.0 > 0))
        .map(|d| d.0 as usize)
        .collect();
    devices.sort_unstable();
    devices.dedup();
    devices
}

/// `n·Σc² − (Σc)²` (n² times the variance) over `devices`, exactly.
fn spread(counts: &[u64], devices: &[usize]) -> i128 {
    let n = devices.len() as i128;
    let (sum, squares) = devices.iter().fold((0i128, 0i128), |(s, q), &d| {
        let c = i128::from(counts[d]);
        (s + c, q + c * c)
    });
    n * squares - sum * sum
}

fn stdev(spread: i128, devices: usize) -> f64 {
    if devices == 0 {
        return 0.0;
    }
    (spread as f64).max(0.0).sqrt() / devices as f64
}

/// Seed 002's adaptive search: the balance parameter that gives `pool` the least
/// PGs-per-device stdev (see the module documentation for the trials).
pub fn tune_linear_param(map: &ClusterMap, pool: &Pool) -> LinearTuning {
    let crush = CrushMap::new(map);
    let devices = pool_devices(map, pool);
    let by_budget = LINEAR_SEARCH_MAPPINGS_MAX / u64::from(pool.pgp_num.max(1));
    let trials = u32::try_from(by_budget)
        .unwrap_or(LINEAR_SEARCH_TRIALS_MAX)
        .clamp(LINEAR_SEARCH_TRIALS_MIN, LINEAR_SEARCH_TRIALS_MAX);
    let mut best = (i128::MAX, LINEAR_PARAM_ONE);
    let mut at_one = 0i128;
    for trial in 0..trials {
        let param = LINEAR_PARAM_ONE.saturating_add(trial.saturating_mul(LINEAR_SEARCH_STEP));
        let spread = spread(&pg_counts(map, &crush, pool, param), &devices);
        if trial == 0 {
            at_one = spread;
        }
        if spread < best.0 {
            best = (spread, param);
        }
    }
    LinearTuning {
        param: best.1,
        trials,
        stdev: stdev(best.0, devices.len()),
        stdev_at_one: stdev(at_one, devices.len()),
    }
}
