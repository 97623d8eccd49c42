//! Policies: which of an object's available candidates to write to.
//!
//! A policy only ever sees *eligible* candidates — [`choose`](crate::choice::choose) has
//! already removed every candidate with a device that is down or full, or with too few
//! devices — so no policy, built-in or user-written, can put data on a full or down device.
//! It returns a position in that list; ties go to the earliest candidate (the home when it is
//! eligible), so a policy that sees no difference leaves the object at home.

use crate::choice::candidates::Candidates;
use crate::choice::location::Location;
use crate::choice::metrics::{CandidateMetrics, MetricsSource};
use crate::choice::settings::{CompositeWeights, PPM, PolicySpec};
use crate::crush::hash::hash32_2;

/// A candidate that may be chosen, with its aggregated metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Eligible {
    /// The candidate's index in the object's candidate set.
    pub candidate: u8,
    /// Whether some of its devices are down (it has at least the pool's `min_size`, fewer
    /// than `size`). Degraded candidates are offered only when no candidate is whole.
    pub degraded: bool,
    /// Its metrics, aggregated as CHOICE does.
    pub metrics: CandidateMetrics,
}

/// What a policy may look at besides the eligible candidates.
#[derive(Clone, Copy)]
pub struct PolicyContext<'a> {
    /// The hash of the object's name (seeds `random`).
    pub name_hash: u32,
    /// The client's location, if known.
    pub client: Option<&'a Location>,
    /// All the object's candidates with their devices.
    pub candidates: &'a Candidates,
    /// The metrics snapshot, for policies that look at single devices.
    pub metrics: &'a dyn MetricsSource,
}

/// A placement policy. Implement it to add your own (see `docs/choice.md`); pass it per
/// request in [`ChoiceRequest`](crate::choice::ChoiceRequest).
///
/// Contract: `eligible` is never empty and is ordered by candidate index; return a position
/// in it (a position out of range is refused with
/// [`ChoiceError::PolicyOutOfRange`](crate::choice::ChoiceError)). Be deterministic — the
/// same inputs must give the same answer — so that every client decides alike.
///
/// A policy that keeps data near the client and, among the nearest candidates, takes the
/// least full:
///
/// ```
/// use optio_placement::choice::{Eligible, Policy, PolicyContext};
///
/// struct NearThenEmpty;
///
/// impl Policy for NearThenEmpty {
///     fn name(&self) -> &str {
///         "near-then-empty"
///     }
///     fn choose(&self, eligible: &[Eligible], _context: &PolicyContext<'_>) -> usize {
///         let nearest = eligible.iter().map(|e| e.metrics.shared_levels).max().unwrap_or(0);
///         (0..eligible.len())
///             .filter(|&i| eligible[i].metrics.shared_levels == nearest)
///             .min_by_key(|&i| (eligible[i].metrics.space_ppm, i))
///             .unwrap_or(0)
///     }
/// }
/// // Per request: ChoiceRequest { policy: Some(&NearThenEmpty), client: Some(&here) }.
/// ```
pub trait Policy {
    /// The policy's name, for reports and errors.
    fn name(&self) -> &str;
    /// The position in `eligible` of the candidate to write to.
    fn choose(&self, eligible: &[Eligible], context: &PolicyContext<'_>) -> usize;
}

/// Salt of the `random` policy's hash, so that its pick is independent of the PG hash.
const RANDOM_SALT: u32 = 0x4348_4f49;

/// Position of the smallest `value` (the first on ties).
fn argmin<T: Ord>(eligible: &[Eligible], value: impl Fn(&Eligible) -> T) -> usize {
    let mut best = 0;
    for position in 1..eligible.len() {
        if value(&eligible[position]) < value(&eligible[best]) {
            best = position;
        }
    }
    best
}

/// `value × 1,000,000 / max`, 0 when `max` is 0. `value` is one of the values `max` is the
/// maximum of, so the result is at most 1,000,000; it saturates if a caller breaks that.
fn relative_ppm(value: u64, max: u64) -> u64 {
    if max == 0 {
        return 0;
    }
    u64::try_from(u128::from(value) * u128::from(PPM) / u128::from(max)).unwrap_or(u64::MAX)
}

/// The composite score of each candidate (lower is better); see `docs/choice.md`.
pub fn composite_score(
    weights: &CompositeWeights,
    candidate: &CandidateMetrics,
    eligible: &[Eligible],
    client: Option<&Location>,
) -> u64 {
    let max_latency = eligible.iter().map(|e| e.metrics.latency_us).max().unwrap_or(0);
    let max_journal = eligible.iter().map(|e| e.metrics.journal_bytes).max().unwrap_or(0);
    let depth = client.map_or(0, |c| c.len() as u64);
    let distance = ((depth - u64::from(candidate.shared_levels).min(depth)) * u64::from(PPM))
        .checked_div(depth)
        .unwrap_or(0);
    let ppm = |value: u32| u64::from(value.min(PPM));
    u64::from(weights.cpu) * ppm(candidate.cpu_ppm)
        + u64::from(weights.memory) * ppm(candidate.memory_ppm)
        + u64::from(weights.space) * ppm(candidate.space_ppm)
        + u64::from(weights.latency) * relative_ppm(candidate.latency_us.into(), max_latency.into())
        + u64::from(weights.journal) * relative_ppm(candidate.journal_bytes, max_journal)
        + u64::from(weights.local) * distance
}

impl Policy for PolicySpec {
    fn name(&self) -> &str {
        PolicySpec::name(self)
    }

    fn choose(&self, eligible: &[Eligible], context: &PolicyContext<'_>) -> usize {
        if eligible.len() <= 1 {
            return 0;
        }
        match self {
            PolicySpec::First => 0,
            PolicySpec::Random => {
                hash32_2(context.name_hash, RANDOM_SALT) as usize % eligible.len()
            }
            PolicySpec::Local => argmin(eligible, |e| std::cmp::Reverse(e.metrics.shared_levels)),
            PolicySpec::Memory => argmin(eligible, |e| e.metrics.memory_ppm),
            PolicySpec::Cpu => argmin(eligible, |e| e.metrics.cpu_ppm),
            PolicySpec::Space => argmin(eligible, |e| e.metrics.space_ppm),
            PolicySpec::Latency => argmin(eligible, |e| e.metrics.latency_us),
            PolicySpec::Journal => argmin(eligible, |e| e.metrics.journal_bytes),
            PolicySpec::Composite(weights) => {
                argmin(eligible, |e| composite_score(weights, &e.metrics, eligible, context.client))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choice::metrics::MetricsTable;

    fn eligible(values: &[(u32, u32, u32, u32, u64, u8)]) -> Vec<Eligible> {
        values
            .iter()
            .enumerate()
            .map(|(i, &(cpu, memory, space, latency, journal, shared))| Eligible {
                candidate: u8::try_from(i).expect("a test has few candidates"),
                degraded: false,
                metrics: CandidateMetrics {
                    cpu_ppm: cpu,
                    memory_ppm: memory,
                    space_ppm: space,
                    latency_us: latency,
                    journal_bytes: journal,
                    shared_levels: shared,
                    devices: 3,
                    reporting: 3,
                },
            })
            .collect()
    }

    #[test]
    fn each_policy_minimises_its_metric_and_breaks_ties_to_the_first() {
        let candidates = Candidates::new();
        let table = MetricsTable::new(0);
        let client: Location = "zone=a/host=b".parse().expect("valid");
        let context = PolicyContext {
            name_hash: 7,
            client: Some(&client),
            candidates: &candidates,
            metrics: &table,
        };
        //            cpu  mem  space lat journal shared
        let list =
            eligible(&[(50, 90, 30, 9, 500, 0), (10, 20, 80, 9, 100, 2), (90, 20, 10, 1, 900, 1)]);
        let pick = |policy: PolicySpec| policy.choose(&list, &context);
        assert_eq!(pick(PolicySpec::First), 0);
        assert_eq!(pick(PolicySpec::Cpu), 1);
        assert_eq!(pick(PolicySpec::Memory), 1, "tie between 1 and 2 goes to 1");
        assert_eq!(pick(PolicySpec::Space), 2);
        assert_eq!(pick(PolicySpec::Latency), 2);
        assert_eq!(pick(PolicySpec::Journal), 1);
        assert_eq!(pick(PolicySpec::Local), 1);
        let space_heavy = CompositeWeights { space: 10, cpu: 1, ..CompositeWeights::default() };
        assert_eq!(pick(PolicySpec::Composite(space_heavy)), 2);
        let cpu_heavy = CompositeWeights { space: 1, cpu: 10, ..CompositeWeights::default() };
        assert_eq!(pick(PolicySpec::Composite(cpu_heavy)), 1);
        let random = pick(PolicySpec::Random);
        assert!(random < 3);
        assert_eq!(random, pick(PolicySpec::Random), "deterministic");
    }

    #[test]
    fn random_spreads_over_candidates() {
        let candidates = Candidates::new();
        let table = MetricsTable::new(0);
        let list = eligible(&[(0, 0, 0, 0, 0, 0); 2]);
        let mut counts = [0u32; 2];
        for name_hash in 0..1000u32 {
            let context = PolicyContext {
                name_hash: hash32_2(name_hash, 1),
                client: None,
                candidates: &candidates,
                metrics: &table,
            };
            counts[PolicySpec::Random.choose(&list, &context)] += 1;
        }
        assert!(counts[0] > 400 && counts[1] > 400, "{counts:?}");
    }
}
