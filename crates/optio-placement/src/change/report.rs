//! What a change does, for people (and the manager) to judge before it is stored: for a
//! membership change, the versions and how many servers are active before and after; for any
//! other change, what moves in each pool against the least any placement must move; for
//! every change, the pools it leaves short of copies ([`super::copies`]), and whether it makes
//! data unwritable ([`ChangeReport::below_min_size`]).

use crate::analysis::{Movement, PlacedMap, movement_between};
use crate::error::MapError;
use crate::ids::{Epoch, PoolId};
use crate::map::{ClusterMap, EngineSpec};

use super::MapChange;
use super::copies::{ShortOfCopies, short_of_copies_placed};

/// The objects simulated to measure what moves in object-level pools (pools with PGs count
/// PG copies), and the size each stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovementSample {
    /// Objects simulated per object-level pool.
    pub objects: u64,
    /// Bytes per object (for the byte counts of every pool).
    pub object_bytes: u64,
}

/// A membership change (a new version with other servers active): nothing moves when it is
/// stored; re-integration moves offloaded copies later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipChange {
    /// The version in force before (0 without a membership).
    pub from_version: u64,
    /// The version the change makes.
    pub to_version: u64,
    /// Servers active before (0 without a membership).
    pub active_before: u32,
    /// Servers active after.
    pub active_after: u32,
    /// Ranked servers.
    pub servers: usize,
    /// Pools that are not elastic (unaffected): name and engine name.
    pub unaffected: Vec<(String, &'static str)>,
}

/// What moves in one pool.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolMovement {
    /// The pool.
    pub pool: PoolId,
    /// Its name.
    pub name: String,
    /// Whether it places PGs (its counts are PG copies) or objects (simulated copies).
    pub has_pgs: bool,
    /// What moves, against the minimum.
    pub movement: Movement,
}

/// What a change moves: a membership change, or what moves per pool.
#[derive(Clone, Debug, PartialEq)]
pub enum ChangeEffect {
    /// A new membership version (nothing moves now).
    Membership(MembershipChange),
    /// What moves in every pool of the next map that the previous one had.
    Moves(Vec<PoolMovement>),
}

/// What a change does: what it moves, and the copies it leaves short.
#[derive(Clone, Debug, PartialEq)]
pub struct ChangeReport {
    /// What it moves, or the membership it changes.
    pub effect: ChangeEffect,
    /// The pools whose sampled objects the next map leaves with fewer copies than their
    /// size (sampled with the [`MovementSample`]'s objects, at most
    /// [`COPIES_SAMPLE_MAX`](super::copies::COPIES_SAMPLE_MAX)).
    pub short_of_copies: Vec<ShortOfCopies>,
}

impl ChangeReport {
    /// The report of `change`, which made `new` from `old`.
    pub fn of(
        old: &ClusterMap,
        new: &ClusterMap,
        change: &MapChange,
        sample: MovementSample,
    ) -> Result<ChangeReport, MapError> {
        let placed_old = PlacedMap::new(old, sample.objects)?;
        let placed_new = PlacedMap::new(new, sample.objects)?;
        Ok(ChangeReport::of_placed(old, &placed_old, new, &placed_new, change, sample))
    }

    /// [`of`](Self::of) with both maps already placed, each with `sample.objects` simulated
    /// objects ([`PlacedMap::new`]) — so that a judge who also wants the next map's balance,
    /// or judges several changes of one map, places each map once.
    pub fn of_placed(
        old: &ClusterMap,
        placed_old: &PlacedMap,
        new: &ClusterMap,
        placed_new: &PlacedMap,
        change: &MapChange,
        sample: MovementSample,
    ) -> ChangeReport {
        let short_of_copies = short_of_copies_placed(new, placed_old, placed_new, sample.objects);
        let effect = if let MapChange::SetActive(_)
        | MapChange::Activate(_)
        | MapChange::Deactivate(_) = change
        {
            ChangeEffect::Membership(membership_change(old, new))
        } else {
            ChangeEffect::Moves(moves(old, placed_old, new, placed_new, sample))
        };
        ChangeReport { effect, short_of_copies }
    }

    /// Whether the change leaves more sampled objects of some pool with fewer copies than
    /// the pool's `min_size` than there were: writes to them would be refused until devices
    /// return. Editors refuse such a change unless told to make it anyway.
    pub fn below_min_size(&self) -> bool {
        self.short_of_copies.iter().any(ShortOfCopies::newly_below_min_size)
    }
}

/// What moves in every pool of `new` that `old` had.
fn moves(
    old: &ClusterMap,
    placed_old: &PlacedMap,
    new: &ClusterMap,
    placed_new: &PlacedMap,
    sample: MovementSample,
) -> Vec<PoolMovement> {
    let mut pools = Vec::new();
    for pool in new.pools() {
        let (Some(a), Some(b)) = (placed_old.pool(pool.id), placed_new.pool(pool.id)) else {
            continue;
        };
        pools.push(PoolMovement {
            pool: pool.id,
            name: pool.name.clone(),
            has_pgs: b.has_pgs(),
            movement: movement_between(old, a, new, b, sample.object_bytes),
        });
    }
    pools
}

/// The versions and active counts of a membership change.
fn membership_change(old: &ClusterMap, new: &ClusterMap) -> MembershipChange {
    let membership = new.membership().expect("a membership change has a membership");
    MembershipChange {
        from_version: old.membership().map_or(0, |m| m.current().version),
        to_version: membership.current().version,
        active_before: old.membership().map_or(0, |m| m.active_count(m.current())),
        active_after: membership.active_count(membership.current()),
        servers: membership.order.len(),
        unaffected: new
            .pools()
            .iter()
            .filter(|p| !matches!(p.engine_spec(), EngineSpec::Elastic(_)))
            .map(|p| (p.name.clone(), p.engine.name()))
            .collect(),
    }
}

impl ClusterMap {
    /// [`apply`](ClusterMap::apply) and the [`ChangeReport`] of the change: the next map, and
    /// what it moves per pool against the minimum or what membership it changes.
    pub fn apply_with_report(
        &self,
        change: &MapChange,
        expected: Epoch,
        sample: MovementSample,
    ) -> Result<(ClusterMap, ChangeReport), MapError> {
        let next = self.apply(change, expected)?;
        let report = ChangeReport::of(self, &next, change, sample)?;
        Ok((next, report))
    }
}
