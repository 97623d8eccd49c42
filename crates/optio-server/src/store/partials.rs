//! The state of partial snapshot clones ([`super::cow`]): their mark's layout in the clone's
//! file, and the device's table of them by their head's key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use optio_placement::PoolId;
use optio_proto::blocks::BlockLayout;

/// How a write in place after a volume snapshot keeps what the snapshot sees of the object it
/// changes (a server's `--snapshot-copy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SnapshotCopy {
    /// The whole object is copied to its clone at its first write after the snapshot (a
    /// reflink where the file system has them): a pause right after a snapshot while the
    /// objects written are copied, then writes at full speed.
    #[default]
    Objects,
    /// Only the blocks each write changes are copied ([this module](self)): no pause, but
    /// every write to a block not yet copied costs a copy and a journal record, until the
    /// snapshot is removed.
    Blocks,
    /// Nothing is copied: the object's file becomes the clone and a new, sparse file takes
    /// its place, holding what is written from then on ([`super::redirect`]): no pause, and
    /// each write costs what it did before the snapshot; reads of blocks not written since
    /// read the clone, and the whole object is copied back only when something needs it whole
    /// (a transfer, a scrub, the next snapshot, the snapshot's removal).
    Redirect,
}

impl SnapshotCopy {
    pub(super) fn as_u8(self) -> u8 {
        match self {
            SnapshotCopy::Objects => 0,
            SnapshotCopy::Blocks => 1,
            SnapshotCopy::Redirect => 2,
        }
    }
}

/// Where a partial clone's mark starts in its file: past the header and the longest key.
pub(super) const MARK_AT: u64 = 1536;
/// The first bytes of a partial clone's mark.
pub(super) const MAGIC: &[u8; 8] = b"OPTIOCOW";
/// The mark's bytes before its bitmap.
pub(super) const MARK_HEAD_BYTES: usize = 16;

pub(super) fn bitmap_bytes(blocks: u64) -> usize {
    usize::try_from(blocks.div_ceil(8)).expect("a block object's bitmap fits in memory")
}

/// Whether a clone keyed `clone_key_bytes` bytes of a block object with `layout` can be
/// partial: its mark fits between its key and its checksum table.
pub(super) fn fits(clone_key_bytes: usize, layout: &BlockLayout) -> bool {
    optio_proto::HEADER_BYTES + clone_key_bytes <= MARK_AT as usize
        && MARK_AT + (MARK_HEAD_BYTES + bitmap_bytes(layout.blocks)) as u64 <= layout.table_offset
}

/// The bitmap a partial clone's mark holds, if `bytes` (read at [`MARK_AT`]) is one for an
/// object of `blocks` blocks; `Err` when it is a mark of another size (damaged).
pub(super) fn decode_mark(bytes: &[u8], blocks: u64) -> Result<Option<Vec<u8>>, ()> {
    if bytes.len() < MARK_HEAD_BYTES || &bytes[..8] != MAGIC {
        return Ok(None);
    }
    let count = u32::from_le_bytes(bytes[8..12].try_into().expect("four bytes"));
    let want = bitmap_bytes(blocks);
    match bytes.get(MARK_HEAD_BYTES..MARK_HEAD_BYTES + want) {
        Some(bitmap) if u64::from(count) == blocks => Ok(Some(bitmap.to_vec())),
        _ => Err(()),
    }
}

/// Whether the first bytes of an object's file (`prefix`, as the index's load reads them)
/// show a partial clone's mark: a clone's block object with [`MAGIC`] at
/// [`MARK_AT`] (only such a file reads anything but zeros there).
pub(super) fn partial_magic_at(prefix: &[u8], key: &str, header_blocks: bool) -> bool {
    let at = MARK_AT as usize;
    header_blocks
        && optio_proto::snap::parse_clone_key(key).is_some()
        && prefix.get(at..at + MAGIC.len()) == Some(&MAGIC[..])
}

/// The bytes the index's load reads of each file: enough for a partial clone's magic.
pub(super) const PREFIX_FOR_MARK: usize = MARK_AT as usize + 8;

/// A clone being filled by the writes to its head.
pub(super) struct Partial {
    /// The clone's key.
    pub(super) clone: String,
    /// The clone's layout.
    pub(super) layout: BlockLayout,
    /// Block `b` held: bit `b % 8` of byte `b / 8`.
    pub(super) held: Vec<u8>,
    /// Completed, trimmed or dropped: nothing more is copied into it.
    pub(super) gone: bool,
}

/// Whether bit `block` of a bitmap of blocks (bit `b % 8` of byte `b / 8`) is set.
pub(super) fn holds(bitmap: &[u8], block: u64) -> bool {
    bitmap[(block / 8) as usize] & (1 << (block % 8)) != 0
}

/// Sets bit `block` of a bitmap of blocks.
pub(super) fn hold(bitmap: &mut [u8], block: u64) {
    bitmap[(block / 8) as usize] |= 1 << (block % 8);
}

impl Partial {
    pub(super) fn holds(&self, block: u64) -> bool {
        holds(&self.held, block)
    }

    pub(super) fn hold(&mut self, block: u64) {
        hold(&mut self.held, block);
    }

    pub(super) fn whole(&self) -> bool {
        (0..self.layout.blocks).all(|b| self.holds(b))
    }

    pub(super) fn missing(&self) -> Vec<u64> {
        (0..self.layout.blocks).filter(|&b| !self.holds(b)).collect()
    }

    pub(super) fn mark(&self) -> Vec<u8> {
        let count = u32::try_from(self.layout.blocks).expect("block objects have < 2^32 blocks");
        let mut mark = Vec::with_capacity(MARK_HEAD_BYTES + self.held.len());
        mark.extend_from_slice(MAGIC);
        mark.extend_from_slice(&count.to_le_bytes());
        mark.extend_from_slice(&[0; 4]);
        mark.extend_from_slice(&self.held);
        mark
    }
}

/// A partial clone, shared by the writes to its head and whoever trims or drops it.
pub(super) type Shared = Arc<Mutex<Partial>>;

/// A device's partial clones, by their head's key.
#[derive(Default)]
pub(super) struct Partials {
    pub(super) map: Mutex<HashMap<(PoolId, String), Shared>>,
    count: AtomicUsize,
}

impl Partials {
    pub(super) fn get(&self, pool: PoolId, head: &str) -> Option<Shared> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.map.lock().expect("partials lock").get(&(pool, head.to_string())).cloned()
    }

    pub(super) fn insert(&self, pool: PoolId, head: &str, partial: Partial) {
        let mut map = self.map.lock().expect("partials lock");
        map.insert((pool, head.to_string()), Arc::new(Mutex::new(partial)));
        self.count.store(map.len(), Ordering::Release);
    }

    /// Removes `head`'s entry if it is `which` (any, without).
    pub(super) fn remove(
        &self,
        pool: PoolId,
        head: &str,
        which: Option<&Shared>,
    ) -> Option<Shared> {
        let mut map = self.map.lock().expect("partials lock");
        let k = (pool, head.to_string());
        if which.is_some_and(|w| map.get(&k).is_none_or(|p| !Arc::ptr_eq(p, w))) {
            return None;
        }
        let removed = map.remove(&k);
        self.count.store(map.len(), Ordering::Release);
        removed
    }

    /// How many partial clones the device has.
    pub(super) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_decodes_to_its_bitmap_and_a_mark_of_another_size_is_refused() {
        let layout = BlockLayout::new(40, 4 << 20);
        let mut partial = Partial {
            clone: "c".into(),
            layout,
            held: vec![0; bitmap_bytes(layout.blocks)],
            gone: false,
        };
        partial.hold(0);
        partial.hold(1023);
        let mark = partial.mark();
        let held = decode_mark(&mark, layout.blocks).unwrap().unwrap();
        assert_eq!(held, partial.held);
        assert_eq!(decode_mark(&mark, layout.blocks + 1), Err(()));
        assert_eq!(decode_mark(&[0; 64], layout.blocks), Ok(None));
        assert!(fits(1024, &BlockLayout::new(1024, 64 << 20)));
        assert!(!partial.whole());
        assert_eq!(partial.missing().len(), 1022);
    }
}
