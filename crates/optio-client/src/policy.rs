//! Policies: which candidate a new object goes to, given the candidates' metrics.
//!
//! PROVISIONAL: this is the seam where the placement library's policies (issue 4, branch
//! `choice`: first, random, local, memory, cpu, space, latency, journal, composite) plug in.
//! Until they land, the client has `first`, `random` (by a hash of the key), `space` and `memory`, aggregated as the paper
//! does (space: the fullest device of the candidate; memory: the primary's).

use optio_proto::DeviceMetrics;

use crate::candidates::Candidate;

/// A candidate with what the client knows of its devices' metrics (primary first; `None`
/// for a device never heard from).
#[derive(Clone, Debug)]
pub struct CandidateView<'a> {
    /// The candidate.
    pub candidate: &'a Candidate,
    /// Metrics of its devices, in the candidate's device order.
    pub metrics: Vec<Option<DeviceMetrics>>,
    /// Whether its primary answered the probe.
    pub reachable: bool,
}

impl CandidateView<'_> {
    /// Whether the candidate can take an object of `size_bytes`: reachable, with devices,
    /// none known to be full.
    pub fn usable_for(&self, size_bytes: u64) -> bool {
        self.reachable
            && !self.candidate.devices.is_empty()
            && self.metrics.iter().flatten().all(|m| !m.is_full_for(size_bytes))
    }
}

/// A placement policy.
pub trait Policy: Send + Sync {
    /// Its name.
    fn name(&self) -> &str;
    /// The index (into `candidates`) of the chosen candidate for a new object `key` of
    /// `size_bytes`, or `None` when none is usable.
    fn choose(&self, key: &str, size_bytes: u64, candidates: &[CandidateView<'_>])
    -> Option<usize>;
}

/// The first usable candidate.
#[derive(Clone, Copy, Debug, Default)]
pub struct First;

impl Policy for First {
    fn name(&self) -> &str {
        "first"
    }
    fn choose(
        &self,
        _key: &str,
        size_bytes: u64,
        candidates: &[CandidateView<'_>],
    ) -> Option<usize> {
        candidates.iter().position(|c| c.usable_for(size_bytes))
    }
}

/// The candidate whose fullest device is the least full.
#[derive(Clone, Copy, Debug, Default)]
pub struct Space;

impl Policy for Space {
    fn name(&self) -> &str {
        "space"
    }
    fn choose(
        &self,
        _key: &str,
        size_bytes: u64,
        candidates: &[CandidateView<'_>],
    ) -> Option<usize> {
        min_by(candidates, size_bytes, |c| {
            c.metrics.iter().flatten().map(|m| m.space_permille).max().unwrap_or(0)
        })
    }
}

/// The candidate whose primary has the most free memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory;

impl Policy for Memory {
    fn name(&self) -> &str {
        "memory"
    }
    fn choose(
        &self,
        _key: &str,
        size_bytes: u64,
        candidates: &[CandidateView<'_>],
    ) -> Option<usize> {
        min_by(candidates, size_bytes, |c| {
            c.metrics.first().cloned().flatten().map(|m| m.memory_permille).unwrap_or(1000)
        })
    }
}

fn min_by(
    candidates: &[CandidateView<'_>],
    size_bytes: u64,
    score: impl Fn(&CandidateView<'_>) -> u16,
) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.usable_for(size_bytes))
        .min_by_key(|(i, c)| (score(c), *i))
        .map(|(i, _)| i)
}

/// A usable candidate drawn by a hash of the key (deterministic: every client draws the same).
#[derive(Clone, Copy, Debug, Default)]
pub struct Random;

impl Policy for Random {
    fn name(&self) -> &str {
        "random"
    }
    fn choose(
        &self,
        key: &str,
        size_bytes: u64,
        candidates: &[CandidateView<'_>],
    ) -> Option<usize> {
        let usable: Vec<usize> =
            (0..candidates.len()).filter(|&i| candidates[i].usable_for(size_bytes)).collect();
        if usable.is_empty() {
            return None;
        }
        let draw = xxhash_rust::xxh3::xxh3_64_with_seed(key.as_bytes(), 0x0c401ce);
        Some(usable[(draw % usable.len() as u64) as usize])
    }
}

/// The policy named `name`.
pub fn by_name(name: &str) -> Option<Box<dyn Policy>> {
    match name {
        "first" => Some(Box::new(First)),
        "random" => Some(Box::new(Random)),
        "space" => Some(Box::new(Space)),
        "memory" => Some(Box::new(Memory)),
        _ => None,
    }
}

/// The names [`by_name`] knows.
pub const POLICY_NAMES: &[&str] = &["first", "random", "space", "memory"];
