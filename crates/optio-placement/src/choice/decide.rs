//! The decision: filter an object's candidates down to the ones that may take data, then ask
//! the policy.
//!
//! A candidate is **excluded** when
//! * it has fewer devices than the pool's `min_size` (its devices are down or out in the
//!   map — the engine has already left them out of its set), or none at all;
//! * its primary has no metrics in the snapshot (the primary is the device a client probes
//!   and writes through: unknown means unreachable);
//! * any of its devices reports `up = false`;
//! * any of its devices is **full**: it reports `full = true` (a 507 from its server), or its
//!   `space_ppm` is at or above the pool's `full_ppm` (`full_ratio`, default 95 %).
//!
//! Devices other than the primary that have no metrics are not held against a candidate; they
//! are left out of its aggregates. Of the rest, candidates with all `size` devices are
//! preferred; *degraded* ones (at least `min_size`) are offered only when no candidate is
//! whole. With nothing left the answer is [`ChoiceError::NoCandidate`], which says for each
//! candidate why.
//!
//! Allocation-free unless it fails; for k = 2 on 3 replicas it costs a few tens of
//! nanoseconds (see `docs/benchmarks.md`).

use std::fmt;

use crate::choice::candidates::{CandidateKey, Candidates};
use crate::choice::location::Location;
use crate::choice::metrics::{CandidateMetrics, MetricsSource, Sums};
use crate::choice::policy::{Eligible, Policy, PolicyContext};
use crate::choice::settings::{CHOICES_MAX, PPM};
use crate::ids::DeviceId;
use crate::map::Pool;
use crate::narrow::small8;
use crate::placement::PoolPlacement;

/// Per-request options of a decision.
#[derive(Clone, Copy, Default)]
pub struct ChoiceRequest<'a> {
    /// A policy to use instead of the pool's (a built-in [`PolicySpec`](crate::PolicySpec)
    /// or your own).
    pub policy: Option<&'a dyn Policy>,
    /// Where the client is (for `local` and composites that weigh `local`).
    pub client: Option<&'a Location>,
}

/// The candidate a policy chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// Its key; `key.index` is what a client records as the object's choice.
    pub key: CandidateKey,
    /// Whether some of its devices are down (no whole candidate was available).
    pub degraded: bool,
    /// Its aggregated metrics.
    pub metrics: CandidateMetrics,
}

/// Why a candidate may not take data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exclusion {
    /// Fewer devices than the pool's `min_size` are up and in.
    TooFewDevices {
        /// Devices in its set.
        devices: u8,
        /// The pool's `min_size`.
        min_size: u32,
    },
    /// The primary has no metrics (it was not probed or did not answer).
    PrimaryUnknown {
        /// The primary.
        device: DeviceId,
    },
    /// A device reports it is down.
    Down {
        /// The device.
        device: DeviceId,
    },
    /// A device says it is full (refuses writes).
    MarkedFull {
        /// The device.
        device: DeviceId,
    },
    /// A device's space utilisation is at or above the pool's full threshold.
    Full {
        /// The device.
        device: DeviceId,
        /// Its utilisation, ppm.
        space_ppm: u32,
        /// The threshold, ppm.
        full_ppm: u32,
    },
}

impl Exclusion {
    /// Whether the candidate was excluded for lack of room (rather than availability).
    pub fn is_full(&self) -> bool {
        matches!(self, Exclusion::MarkedFull { .. } | Exclusion::Full { .. })
    }
}

fn percent(ppm: u32) -> f64 {
    f64::from(ppm) / f64::from(PPM) * 100.0
}

impl fmt::Display for Exclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Exclusion::TooFewDevices { devices, min_size } => {
                write!(f, "only {devices} device(s) up and in, below min_size {min_size}")
            }
            Exclusion::PrimaryUnknown { device } => {
                write!(f, "no metrics from its primary, device {device} (unreachable?)")
            }
            Exclusion::Down { device } => write!(f, "device {device} is down"),
            Exclusion::MarkedFull { device } => write!(f, "device {device} is full"),
            Exclusion::Full { device, space_ppm, full_ppm } => write!(
                f,
                "device {device} is full ({:.2}% used, full_ratio {:.2}%)",
                percent(space_ppm),
                percent(full_ppm)
            ),
        }
    }
}

/// Why no candidate could be chosen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChoiceError {
    /// Every candidate is excluded.
    #[error("{}", no_candidate_message(pool, excluded))]
    NoCandidate {
        /// The pool.
        pool: String,
        /// Each candidate and why it was excluded.
        excluded: Vec<(CandidateKey, Exclusion)>,
    },
    /// A policy returned a position outside the eligible list (a bug in that policy).
    #[error(
        "policy '{policy}' chose position {returned} among {eligible} eligible candidates; a Policy must return a position below the number of eligible candidates"
    )]
    PolicyOutOfRange {
        /// The policy's name.
        policy: String,
        /// What it returned.
        returned: usize,
        /// How many candidates it was offered.
        eligible: usize,
    },
}

fn no_candidate_message(pool: &str, excluded: &[(CandidateKey, Exclusion)]) -> String {
    if excluded.is_empty() {
        return format!(
            "pool '{pool}': there are no candidates to choose from; fill them with PoolPlacement::candidates first"
        );
    }
    let reasons: Vec<String> = excluded.iter().map(|(key, why)| format!("{key}: {why}")).collect();
    if excluded.iter().all(|(_, why)| why.is_full()) {
        format!(
            "pool '{pool}': no candidate has room ({}); free space, add devices, or raise the pool's full_ratio",
            reasons.join("; ")
        )
    } else {
        format!(
            "pool '{pool}': no candidate can take the object ({}); bring devices back up or probe their servers again",
            reasons.join("; ")
        )
    }
}

/// Checks one candidate in one pass over its devices: fills `out` (aggregated metrics,
/// degraded or not) if it may take data, else says why not.
#[inline(always)]
fn assess<M: MetricsSource + ?Sized>(
    pool: &Pool,
    devices: &crate::replica::ReplicaSet,
    metrics: &M,
    client: Option<&Location>,
    out: &mut Eligible,
) -> Result<(), Exclusion> {
    let count = small8(devices.devices().count());
    let primary_id = match devices.primary() {
        Some(primary) if u32::from(count) >= pool.min_size => primary,
        _ => {
            return Err(Exclusion::TooFewDevices { devices: count, min_size: pool.min_size });
        }
    };
    let full_ppm = pool.choice.full_ppm;
    let mut sums = Sums::default();
    let mut primary = None;
    for device in devices.devices() {
        sums.devices += 1;
        let Some(m) = metrics.metrics(device) else { continue };
        if !m.up {
            return Err(Exclusion::Down { device });
        }
        if m.full {
            return Err(Exclusion::MarkedFull { device });
        }
        if m.space_ppm >= full_ppm {
            return Err(Exclusion::Full { device, space_ppm: m.space_ppm, full_ppm });
        }
        if device == primary_id {
            primary = Some(m);
        }
        sums.add(m);
    }
    let primary = primary.ok_or(Exclusion::PrimaryUnknown { device: primary_id })?;
    out.degraded = u32::from(count) < pool.size;
    out.metrics = sums.finish(primary, client);
    Ok(())
}

/// Chooses one of `candidates` (computed for `pool`) with the request's policy, or the
/// pool's: never a candidate with a down or full device (see the module docs).
pub fn choose<M: MetricsSource + ?Sized>(
    pool: &Pool,
    candidates: &Candidates,
    metrics: &M,
    request: &ChoiceRequest<'_>,
) -> Result<Chosen, ChoiceError> {
    let mut eligible = [Eligible::default(); CHOICES_MAX as usize];
    let mut count = 0;
    let mut whole = 0;
    for (key, devices) in candidates.iter() {
        let slot = &mut eligible[count];
        if assess(pool, devices, metrics, request.client, slot).is_ok() {
            slot.candidate = key.index;
            whole += usize::from(!slot.degraded);
            count += 1;
        }
    }
    if count == 0 {
        let mut scratch = Eligible::default();
        let excluded = candidates
            .iter()
            .filter_map(|(key, devices)| {
                let verdict = assess(pool, devices, metrics, request.client, &mut scratch);
                verdict.err().map(|why| (*key, why))
            })
            .collect();
        return Err(ChoiceError::NoCandidate { pool: pool.name.clone(), excluded });
    }
    // Whole candidates first; degraded ones only when there is no whole one.
    let offered = if whole > 0 && whole < count {
        let mut kept = 0;
        for position in 0..count {
            if !eligible[position].degraded {
                eligible[kept] = eligible[position];
                kept += 1;
            }
        }
        kept
    } else {
        count
    };
    let offered = &eligible[..offered];
    let policy: &dyn Policy = request.policy.unwrap_or(&pool.choice.policy);
    let erased = Erased(metrics);
    let context = PolicyContext {
        name_hash: candidates.name_hash(),
        client: request.client,
        candidates,
        metrics: &erased,
    };
    let position = policy.choose(offered, &context);
    let picked = offered.get(position).ok_or_else(|| ChoiceError::PolicyOutOfRange {
        policy: policy.name().to_string(),
        returned: position,
        eligible: offered.len(),
    })?;
    let key = *candidates
        .keys()
        .get(usize::from(picked.candidate))
        .expect("eligible candidates come from the set");
    Ok(Chosen { key, degraded: picked.degraded, metrics: picked.metrics })
}

/// Any metrics source (slices included) as a `dyn MetricsSource` for policies.
struct Erased<'a, M: ?Sized>(&'a M);

impl<M: MetricsSource + ?Sized> MetricsSource for Erased<'_, M> {
    fn metrics(&self, device: DeviceId) -> Option<&crate::choice::DeviceMetrics> {
        self.0.metrics(device)
    }
}

impl PoolPlacement<'_> {
    /// Chooses one of this pool's `candidates` for a new object (see [`choose`]).
    pub fn choose<M: MetricsSource + ?Sized>(
        &self,
        candidates: &Candidates,
        metrics: &M,
        request: &ChoiceRequest<'_>,
    ) -> Result<Chosen, ChoiceError> {
        choose(self.pool(), candidates, metrics, request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choice::MetricsTable;

    #[test]
    fn choosing_among_no_candidates_says_what_to_do() {
        let mut builder = crate::ClusterMapBuilder::new();
        for id in 0..3u32 {
            builder = builder.device(crate::DeviceSpec::new(id).at(&[("host", &format!("h{id}"))]));
        }
        let map = builder
            .replicated_rule(0, "r", "default", "host")
            .pool(crate::PoolSpec::crush(1, "rbd", 8, 3))
            .build()
            .expect("valid");
        let pool = map.pool_by_name("rbd").expect("pool");
        let error =
            choose(pool, &Candidates::new(), &MetricsTable::new(0), &ChoiceRequest::default())
                .expect_err("nothing to choose");
        assert!(error.to_string().contains("no candidates to choose from"), "{error}");
    }
}
