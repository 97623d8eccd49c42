//! The choice cache: which candidate holds an object, in 8 bytes a slot.
//!
//! CHOICE's client keeps a hash table from object id to placement group, "less than 50 bytes"
//! an entry. This one keeps no key at all: a slot is one `u64`, a 56-bit fingerprint of
//! (pool, key) and the 8-bit candidate index, in an open-addressing table (linear probing)
//! that grows by 1.5× at a load of 7/8, so it holds between 8/(7/8) ≈ 9.1 and
//! 8/(7/12) ≈ 13.7 bytes per cached object, below the 16-byte budget whatever its size
//! ([`ChoiceCache::bytes_per_entry`] measures it; a test checks it at every size).
//!
//! A fingerprint collision (two keys with the same 56 bits: about 1 in 10¹¹ for a million
//! cached objects) can only make the client look on the wrong candidate first; it then finds
//! nothing there and asks the object's home, so the cache is a hint, never the truth. At
//! `capacity_max` entries the table stops growing and overwrites the slot it probes first.

use std::sync::Mutex;

/// Default most entries of a cache (about 14 MB at the largest).
pub const CACHE_ENTRIES_MAX_DEFAULT: usize = 1 << 20;
const EMPTY: u64 = 0;
const INITIAL_SLOTS: usize = 16;

/// A thread-safe choice cache.
#[derive(Debug)]
pub struct ChoiceCache {
    inner: Mutex<Table>,
}

#[derive(Debug)]
struct Table {
    slots: Vec<u64>,
    len: usize,
    entries_max: usize,
}

/// The fingerprint of an object: 56 bits of the xxh3 of pool and key, never 0.
pub fn fingerprint(pool: u32, key: &str) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::with_seed(u64::from(pool));
    hasher.update(key.as_bytes());
    let hash = hasher.digest() >> 8;
    if hash == 0 { 1 } else { hash }
}

impl Table {
    fn slot_of(&self, fingerprint: u64) -> usize {
        // Fast range reduction: spreads the fingerprint over any table size.
        ((u128::from(fingerprint) * self.slots.len() as u128) >> 56) as usize
    }

    fn find(&self, fingerprint: u64) -> Result<usize, usize> {
        let n = self.slots.len();
        let mut i = self.slot_of(fingerprint);
        for _ in 0..n {
            let slot = self.slots[i];
            if slot == EMPTY {
                return Err(i);
            }
            if slot >> 8 == fingerprint {
                return Ok(i);
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
        Err(self.slot_of(fingerprint))
    }

    fn grow(&mut self) {
        let new_len = self.slots.len() + self.slots.len() / 2;
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; new_len]);
        self.len = 0;
        for slot in old.into_iter().filter(|&s| s != EMPTY) {
            self.insert(slot >> 8, slot as u8);
        }
    }

    fn insert(&mut self, fingerprint: u64, candidate: u8) {
        let value = (fingerprint << 8) | u64::from(candidate);
        match self.find(fingerprint) {
            Ok(i) => self.slots[i] = value,
            Err(i) => {
                let can_grow = self.slots.len() + self.slots.len() / 2
                    <= self.entries_max * 8 / 7 + INITIAL_SLOTS;
                if self.len * 8 >= self.slots.len() * 7 && !can_grow {
                    // At its maximum: the newcomer takes its home slot (the slot stays
                    // occupied, so no other entry's probe chain breaks).
                    let home = self.slot_of(fingerprint);
                    self.slots[home] = value;
                    return;
                }
                self.slots[i] = value;
                self.len += 1;
                if self.len * 8 > self.slots.len() * 7 && can_grow {
                    self.grow();
                }
            }
        }
    }

    fn remove(&mut self, fingerprint: u64) {
        let Ok(mut hole) = self.find(fingerprint) else { return };
        // Backward-shift deletion keeps linear probing correct without tombstones.
        let n = self.slots.len();
        self.slots[hole] = EMPTY;
        self.len -= 1;
        let mut i = (hole + 1) % n;
        while self.slots[i] != EMPTY {
            let home = self.slot_of(self.slots[i] >> 8);
            let distance_now = (i + n - home) % n;
            let distance_hole = (hole + n - home) % n;
            if distance_hole < distance_now {
                self.slots[hole] = self.slots[i];
                self.slots[i] = EMPTY;
                hole = i;
            }
            i = (i + 1) % n;
        }
    }
}

impl Default for ChoiceCache {
    fn default() -> ChoiceCache {
        ChoiceCache::new(CACHE_ENTRIES_MAX_DEFAULT)
    }
}

impl ChoiceCache {
    /// An empty cache that holds at most about `entries_max` objects.
    pub fn new(entries_max: usize) -> ChoiceCache {
        let entries_max = entries_max.max(INITIAL_SLOTS);
        ChoiceCache {
            inner: Mutex::new(Table { slots: vec![EMPTY; INITIAL_SLOTS], len: 0, entries_max }),
        }
    }

    /// The cached candidate of an object.
    pub fn get(&self, pool: u32, key: &str) -> Option<u8> {
        let fp = fingerprint(pool, key);
        let table = self.inner.lock().expect("cache lock");
        table.find(fp).ok().map(|i| table.slots[i] as u8)
    }

    /// Caches the candidate of an object.
    pub fn insert(&self, pool: u32, key: &str, candidate: u8) {
        let fp = fingerprint(pool, key);
        self.inner.lock().expect("cache lock").insert(fp, candidate);
    }

    /// Forgets an object.
    pub fn remove(&self, pool: u32, key: &str) {
        let fp = fingerprint(pool, key);
        self.inner.lock().expect("cache lock").remove(fp);
    }

    /// Objects cached.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("cache lock").len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes the table holds.
    pub fn heap_bytes(&self) -> usize {
        self.inner.lock().expect("cache lock").slots.len() * std::mem::size_of::<u64>()
    }

    /// Heap bytes per cached object (the budget is 16).
    pub fn bytes_per_entry(&self) -> f64 {
        let table = self.inner.lock().expect("cache lock");
        if table.len == 0 {
            return 0.0;
        }
        (table.slots.len() * std::mem::size_of::<u64>()) as f64 / table.len as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_16_bytes_per_entry_at_every_size() {
        let cache = ChoiceCache::new(1 << 20);
        let mut worst: f64 = 0.0;
        for i in 0..200_000u32 {
            cache.insert(1, &format!("object-{i}"), (i % 3) as u8);
            if i >= INITIAL_SLOTS as u32 {
                worst = worst.max(cache.bytes_per_entry());
            }
        }
        assert!(worst <= 16.0, "worst {worst} bytes per entry");
        assert_eq!(cache.len(), 200_000);
        for i in (0..200_000u32).step_by(997) {
            assert_eq!(cache.get(1, &format!("object-{i}")), Some((i % 3) as u8));
        }
        assert_eq!(cache.get(2, "object-1"), None, "pools are apart");
    }

    #[test]
    fn removal_keeps_every_other_entry_reachable() {
        let cache = ChoiceCache::new(1 << 16);
        for i in 0..5_000u32 {
            cache.insert(7, &i.to_string(), (i % 2) as u8);
        }
        for i in (0..5_000u32).filter(|i| i % 3 == 0) {
            cache.remove(7, &i.to_string());
        }
        for i in 0..5_000u32 {
            let expected = (i % 3 != 0).then_some((i % 2) as u8);
            assert_eq!(cache.get(7, &i.to_string()), expected, "key {i}");
        }
    }

    #[test]
    fn a_full_cache_stops_growing() {
        let cache = ChoiceCache::new(1000);
        for i in 0..50_000u32 {
            cache.insert(1, &i.to_string(), 1);
        }
        assert!(cache.heap_bytes() <= 8 * (1000 * 8 / 7 + 64) * 3 / 2, "{}", cache.heap_bytes());
        assert!(cache.get(1, "49999").is_some(), "the latest entry is cached");
    }
}
