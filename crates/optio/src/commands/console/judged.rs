//! The changes the console judged lately, and what it found: a what-if asked again, the commit
//! of a change just judged, and the first request at the epoch such a commit stores find the
//! placement done instead of doing it again (at 1,000 devices and 32,768 PGs per pool, most of
//! a second of CPU each time).
//!
//! A pure cache: an entry is what judging its change on its map computes (placement is a
//! function of the map), keyed by the whole map and the change, never by the epoch alone — a
//! map stored under the same epoch with other contents is judged afresh.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use optio_cluster::edit::MapEdit;
use optio_placement::ClusterMap;
use optio_placement::change::MapChange;
use serde_json::Value;

/// How many judged changes are kept: a few what-ifs an operator compares, and the one that is
/// then committed. At 1,000 devices and 32,768 PGs per pool an entry's placement is a few MB.
const JUDGED_KEPT: usize = 4;

/// A change judged on a map: the edit (the map before and after, the report), the answer the
/// what-if gave, and `B`, what the map after it gives (the console's balance: its placement).
pub struct Judgement<B> {
    pub edit: MapEdit,
    pub change: MapChange,
    pub value: Value,
    pub after: Arc<B>,
}

/// The last [`JUDGED_KEPT`] judgements, newest last.
pub struct Judged<B> {
    kept: Mutex<VecDeque<Arc<Judgement<B>>>>,
}

impl<B> Default for Judged<B> {
    fn default() -> Judged<B> {
        Judged { kept: Mutex::new(VecDeque::new()) }
    }
}

impl<B> Judged<B> {
    fn kept(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Judgement<B>>>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The judgement of `change` on `map`, if it was judged lately.
    pub fn of_change(&self, map: &ClusterMap, change: &MapChange) -> Option<Arc<Judgement<B>>> {
        self.kept().iter().rev().find(|j| j.change == *change && j.edit.old == *map).cloned()
    }

    /// The balance of `map` if a change judged lately leads to exactly it (a change the
    /// console committed, or one judged here and then made by the CLI).
    pub fn balance_of(&self, map: &ClusterMap) -> Option<Arc<B>> {
        self.kept().iter().rev().find(|j| j.edit.new == *map).map(|j| j.after.clone())
    }

    pub fn remember(&self, judgement: Arc<Judgement<B>>) {
        let mut kept = self.kept();
        if kept.len() >= JUDGED_KEPT {
            kept.pop_front();
        }
        kept.push_back(judgement);
    }
}

#[cfg(test)]
mod tests {
    use optio_cluster::edit::ApplyOptions;
    use optio_local::cluster::{LocalClusterSpec, layout, map_text};
    use optio_placement::DeviceId;

    use super::*;

    /// The local cluster's map at epoch 1, devices of `capacity_bytes`.
    fn map_of(capacity_bytes: u64) -> ClusterMap {
        let spec = LocalClusterSpec { capacity_bytes, ..LocalClusterSpec::default() };
        optio_mapfile::parse(&map_text(&spec, &layout(&spec), 1)).expect("a valid map")
    }

    fn map() -> ClusterMap {
        map_of(LocalClusterSpec::default().capacity_bytes)
    }

    fn out(device: u32) -> MapChange {
        MapChange::SetState { device: DeviceId(device), up: None, is_in: Some(false) }
    }

    /// `change` on `map`, judged as far as the cache needs (`after`: a tag to tell entries
    /// apart).
    fn judgement(map: &ClusterMap, change: MapChange, after: u32) -> Arc<Judgement<u32>> {
        let edit = MapEdit::new(map.clone(), &change, ApplyOptions::Unjudged).expect("applies");
        Arc::new(Judgement { edit, change, value: Value::Null, after: Arc::new(after) })
    }

    /// A change judged on a map is found for that map and change only — not for another
    /// change, nor for a map of the same epoch with other contents — and the map it leads to
    /// finds its balance; the oldest of more than JUDGED_KEPT is forgotten.
    #[test]
    fn a_judged_change_is_found_for_its_map_and_change_only() {
        let judged = Judged::<u32>::default();
        let map = map();
        let first = judgement(&map, out(1), 1);
        judged.remember(first.clone());
        let hit = judged.of_change(&map, &out(1)).expect("judged lately");
        assert!(Arc::ptr_eq(&hit, &first));
        assert!(judged.of_change(&map, &out(2)).is_none(), "another change");
        // Same epoch, other contents: devices of twice the capacity.
        let other = map_of(2 * LocalClusterSpec::default().capacity_bytes);
        assert_eq!(other.epoch(), map.epoch());
        assert_ne!(other, map);
        assert!(judged.of_change(&other, &out(1)).is_none(), "a map with other contents");
        assert_eq!(judged.balance_of(&first.edit.new).as_deref(), Some(&1));
        assert!(judged.balance_of(&map).is_none(), "no change judged leads to it");
        for device in 2..=JUDGED_KEPT as u32 {
            judged.remember(judgement(&map, out(device), device));
        }
        assert!(judged.of_change(&map, &out(1)).is_some(), "{JUDGED_KEPT} kept");
        judged.remember(judgement(&map, out(7), 7));
        assert!(judged.of_change(&map, &out(1)).is_none(), "the oldest forgotten");
        assert_eq!(judged.of_change(&map, &out(7)).map(|j| *j.after), Some(7));
    }
}
