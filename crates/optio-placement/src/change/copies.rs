//! Copies a change leaves short: per pool, how many sampled objects the next map places on
//! fewer devices than the pool's `size`, and than its `min_size` (writes to those are refused
//! until devices return), against the previous map.
//!
//! This is part of [`ChangeReport`](super::ChangeReport) rather than of one front end, so that
//! every editor of the map — the CLI, the manager, a console — sees the same judgement and
//! refuses (or warns about) the same changes.
//!
//! The sampled objects are the movement's simulated ones (`obj-0`, `obj-1`, …, the first
//! [`COPIES_SAMPLE_MAX`] of them): deterministic, so two reports of one change agree, and
//! counted from the sets the report's movement placed ([`PlacedMap`]), so judging a change
//! places each map once.

use crate::analysis::PlacedMap;
use crate::error::MapError;
use crate::ids::PoolId;
use crate::map::ClusterMap;

/// Most objects sampled per pool to count copies after a change.
pub const COPIES_SAMPLE_MAX: u64 = 20_000;

/// One pool whose sampled objects the next map leaves with fewer copies than its size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShortOfCopies {
    /// The pool.
    pub pool: PoolId,
    /// Its name.
    pub name: String,
    /// Objects sampled.
    pub sampled: u64,
    /// Sampled objects with fewer copies than `size` under the next map.
    pub below_size: u64,
    /// Sampled objects with fewer copies than `min_size` under the next map (not writable).
    pub below_min_size: u64,
    /// The same under the previous map.
    pub below_min_size_before: u64,
    /// The pool's size.
    pub size: u32,
    /// The pool's min_size.
    pub min_size: u32,
}

impl ShortOfCopies {
    /// Whether the change leaves more sampled objects below `min_size` than there were: it
    /// makes data unwritable that was not.
    pub fn newly_below_min_size(&self) -> bool {
        self.below_min_size > self.below_min_size_before
    }
}

/// Samples `objects` object names (at most [`COPIES_SAMPLE_MAX`]) per pool of `new` that `old`
/// has too, and reports the pools where some would have fewer copies than the pool's size.
pub fn short_of_copies(
    old: &ClusterMap,
    new: &ClusterMap,
    objects: u64,
) -> Result<Vec<ShortOfCopies>, MapError> {
    let objects = objects.min(COPIES_SAMPLE_MAX);
    let (before, after) = (PlacedMap::new(old, objects)?, PlacedMap::new(new, objects)?);
    Ok(short_of_copies_placed(new, &before, &after, objects))
}

/// [`short_of_copies`] over maps already placed (with at least `objects` simulated objects
/// each, or all they have).
pub(super) fn short_of_copies_placed(
    new: &ClusterMap,
    before: &PlacedMap,
    after: &PlacedMap,
    objects: u64,
) -> Vec<ShortOfCopies> {
    let objects = objects.min(COPIES_SAMPLE_MAX);
    let mut short = Vec::new();
    for pool in new.pools() {
        let (Some(was), Some(is)) = (before.pool(pool.id), after.pool(pool.id)) else { continue };
        let sampled = objects.min(is.objects());
        let (_, below_min_size_before) = was.short_of(sampled, pool.size, pool.min_size);
        let (below_size, below_min_size) = is.short_of(sampled, pool.size, pool.min_size);
        if below_size == 0 {
            continue;
        }
        short.push(ShortOfCopies {
            pool: pool.id,
            name: pool.name.clone(),
            sampled,
            below_size,
            below_min_size,
            below_min_size_before,
            size: pool.size,
            min_size: pool.min_size,
        });
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{ClusterMapBuilder, DeviceSpec, PoolSpec};
    use crate::change::MapChange;
    use crate::ids::DeviceId;

    /// Three hosts of one device each, a pool of size 3 and min_size 2.
    fn map() -> ClusterMap {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..3u32 {
            let host = format!("h{id}");
            builder = builder.device(DeviceSpec::new(id).capacity(1 << 40).at(&[("host", &host)]));
        }
        let mut pool = PoolSpec::crush(1, "p", 32, 3);
        pool.min_size = Some(2);
        builder
            .replicated_rule(0, "replicated_rule", "default", "host")
            .pool(pool)
            .build()
            .expect("a valid map")
    }

    fn out(map: &ClusterMap, device: u32) -> ClusterMap {
        let change = MapChange::SetState { device: DeviceId(device), up: None, is_in: Some(false) };
        map.apply(&change, map.epoch()).expect("applies")
    }

    #[test]
    fn one_host_out_leaves_every_object_degraded_but_writable() {
        let old = map();
        let new = out(&old, 0);
        let short = short_of_copies(&old, &new, 200).expect("placements");
        assert_eq!(short.len(), 1);
        let pool = &short[0];
        assert_eq!((pool.sampled, pool.below_size, pool.below_min_size), (200, 200, 0));
        assert!(!pool.newly_below_min_size());
    }

    #[test]
    fn two_hosts_out_make_every_object_unwritable_and_say_so_once() {
        let old = map();
        let one = out(&old, 0);
        let two = out(&one, 1);
        let short = short_of_copies(&one, &two, 100).expect("placements");
        assert_eq!((short[0].below_min_size, short[0].below_min_size_before), (100, 0));
        assert!(short[0].newly_below_min_size());
        // Already below min_size: a further change that keeps it so is not new.
        let again = short_of_copies(&two, &two, 100).expect("placements");
        assert!(!again[0].newly_below_min_size());
    }

    #[test]
    fn the_change_report_carries_the_judgement() {
        let sample = crate::change::MovementSample { objects: 100, object_bytes: 1 };
        let old = map();
        let out0 = MapChange::SetState { device: DeviceId(0), up: None, is_in: Some(false) };
        let (one, degraded) = old.apply_with_report(&out0, old.epoch(), sample).expect("applies");
        assert_eq!(degraded.short_of_copies.len(), 1, "{degraded:?}");
        assert!(!degraded.below_min_size(), "2 of 3 copies is still min_size");
        let out1 = MapChange::SetState { device: DeviceId(1), up: None, is_in: Some(false) };
        let (_, unwritable) = one.apply_with_report(&out1, one.epoch(), sample).expect("applies");
        assert!(unwritable.below_min_size(), "{unwritable:?}");
        assert!(matches!(unwritable.effect, crate::change::ChangeEffect::Moves(_)));
    }

    #[test]
    fn an_unchanged_map_is_short_of_nothing_and_samples_are_bounded() {
        let map = map();
        assert!(short_of_copies(&map, &map, u64::MAX / 2).map(|s| s.is_empty()).unwrap_or(false));
    }
}
