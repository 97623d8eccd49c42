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
