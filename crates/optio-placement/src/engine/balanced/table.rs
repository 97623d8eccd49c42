//! A balanced pool compiled for lookups: its sets, computed once when the map is compiled.

use crate::error::{MapError, MapErrorKind, Subject};
use crate::ids::ITEM_NONE;
use crate::map::{BalanceMethod, ClusterMap, Pool};
use crate::replica::ReplicaSet;

/// `size` entries per placement unit (device ids, or [`ITEM_NONE`] for a missing copy).
#[derive(Clone, Debug)]
pub(crate) struct BalancedTable {
    members: Vec<i32>,
    size: usize,
}

impl BalancedTable {
    /// Computes the sets of `pool` (history-free or incremental, as the pool asks).
    pub(crate) fn new(map: &ClusterMap, pool: &Pool) -> Result<BalancedTable, MapError> {
        let balanced = if pool.balance().balanced == BalanceMethod::Incremental {
            super::incremental::place(map, pool)
        } else {
            super::balance(map, pool)
        };
        let balanced = balanced.map_err(|error| {
            MapError::new(
                Subject::Pool(pool.name.clone()),
                MapErrorKind::Unsupported {
                    feature: format!("balanced placement ({error})"),
                    hint: "turn balanced placement off for this pool",
                },
            )
        })?;
        let size = pool.size as usize;
        let mut members = vec![ITEM_NONE; balanced.sets.len() * size];
        for (slots, set) in members.chunks_mut(size).zip(&balanced.sets) {
            for (slot, &device) in slots.iter_mut().zip(set.as_slice()) {
                *slot = device;
            }
        }
        Ok(BalancedTable { members, size })
    }

    /// The set of placement unit `key` (empty for a key beyond the pool's units).
    pub(crate) fn place(&self, key: u32, out: &mut ReplicaSet) {
        out.clear();
        let start = key as usize * self.size;
        if let Some(slots) = self.members.get(start..start + self.size) {
            for &device in slots.iter().filter(|&&d| d != ITEM_NONE) {
                out.push(device);
            }
        }
    }
}
