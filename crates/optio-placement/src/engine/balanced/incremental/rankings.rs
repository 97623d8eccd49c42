//! Devices' rankings remembered between engines: building an engine ranks every (device,
//! unit) pair — most of its cost — and the engines a process builds one after another (the
//! placement of a map, the previous placement a rebalance starts from, the rebalance's own
//! engine, the placement of the map it gives) rank the same devices over the same units.
//!
//! A device's ranking of a pool's units depends only on the device's id and the units' keys;
//! an engine takes its first `count` entries (`count` from the device's target), and a
//! shorter ranking is a prefix of a longer one. So a ranking is remembered per keys and device
//! with some units to spare, and serves any engine that needs no more of it: a change that
//! raises targets a little (a device out, a reweight) is served from the rankings the map
//! before it was placed with. A pure cache: what it serves is exactly what ranking again
//! gives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::engine::balanced::rank;
use crate::engine::balanced::targets::Target;

/// How many pools' keys (each a set of rankings) a process remembers.
const KEY_SETS_KEPT: usize = 4;

/// A device's ranking: `(hash, unit)`, best first.
type Ranking = Arc<Vec<(u32, u32)>>;

/// The rankings of one set of keys, by device id.
struct KeySet {
    keys: Vec<u32>,
    lists: Mutex<HashMap<u32, Ranking>>,
}

/// The key sets remembered, the most recently used last.
static KEY_SETS: Mutex<Vec<Arc<KeySet>>> = Mutex::new(Vec::new());

/// The remembered rankings of one set of keys.
pub(crate) struct Rankings(Arc<KeySet>);

impl Rankings {
    /// The rankings of `keys` (a new, empty set if none is remembered).
    pub(crate) fn of(keys: &[u32]) -> Rankings {
        let mut sets = KEY_SETS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = sets.iter().position(|s| s.keys == keys) {
            let set = sets.remove(at);
            sets.push(set.clone());
            return Rankings(set);
        }
        if sets.len() >= KEY_SETS_KEPT {
            sets.remove(0);
        }
        let set = Arc::new(KeySet { keys: keys.to_vec(), lists: Mutex::new(HashMap::new()) });
        sets.push(set.clone());
        Rankings(set)
    }

    /// Device `device`'s ranking of the keys, best first, at least its first `count` entries
    /// (all of them when there are fewer units): remembered, or ranked now with some to spare
    /// and remembered. `scratch` is the ranking's scratch space.
    pub(crate) fn top(&self, device: u32, count: usize, scratch: &mut Vec<(u32, u32)>) -> Ranking {
        let keys = &self.0.keys;
        let count = count.min(keys.len());
        if let Some(list) = self.0.lists.lock().unwrap_or_else(|e| e.into_inner()).get(&device)
            && list.len() >= count
        {
            return list.clone();
        }
        // An eighth more (and 16), so that a target raised a little is served too.
        let spare = count.saturating_add(count / 8).saturating_add(16).min(keys.len());
        // (The scores a ranking gives depend on the target; only the order is kept.)
        let any = Target { numerator: 1, denominator: 1 };
        let list: Ranking = Arc::new(
            rank::ranking(device, keys, &any, spare, scratch)
                .iter()
                .map(|r| (r.hash, r.unit))
                .collect(),
        );
        let mut lists = self.0.lists.lock().unwrap_or_else(|e| e.into_inner());
        let longer = lists.get(&device).is_some_and(|kept| kept.len() >= list.len());
        if !longer {
            lists.insert(device, list.clone());
        }
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the remembered rankings serve is each device's own ranking, cut where asked,
    /// whether remembered longer, shorter or not at all.
    #[test]
    fn remembered_rankings_are_the_rankings() {
        let keys: Vec<u32> = (0..5_000u32).map(|k| k.wrapping_mul(2_654_435_761) ^ 0x77).collect();
        let rankings = Rankings::of(&keys);
        let any = Target { numerator: 3, denominator: 2 };
        let mut scratch = Vec::new();
        for (device, counts) in [(7u32, [40, 30, 90, 45]), (1_000, [200, 5_000, 10, 6_000])] {
            for count in counts {
                let served = rankings.top(device, count, &mut scratch);
                let fresh: Vec<(u32, u32)> =
                    rank::ranking(device, &keys, &any, count, &mut scratch)
                        .iter()
                        .map(|r| (r.hash, r.unit))
                        .collect();
                assert!(served.len() >= fresh.len(), "device {device}, {count}");
                assert_eq!(&served[..fresh.len()], &fresh[..], "device {device}, {count}");
            }
        }
        // The same keys find the same set again; other keys another.
        assert!(Arc::ptr_eq(&Rankings::of(&keys).0, &rankings.0));
        assert!(!Arc::ptr_eq(&Rankings::of(&keys[1..]).0, &rankings.0));
    }
}
