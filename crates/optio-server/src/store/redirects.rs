//! The state of redirected heads ([`super::redirect`]): their mark's layout in the head's
//! file, and the device's table of them by key.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use optio_placement::PoolId;
use optio_proto::ObjectVersion;
use optio_proto::blocks::{
    BlockLayout, REDIRECT_MAGIC, REDIRECT_MARK_AT, REDIRECT_MARK_BYTES, redirect_mark,
};
use optio_proto::snap::parse_clone_key;

use super::partials::{hold, holds};

/// Whether a head keyed `key_bytes` bytes, of a block object with `layout`, can be
/// redirected: its mark fits between its key and its checksum table.
pub(super) fn fits(key_bytes: usize, layout: &BlockLayout) -> bool {
    optio_proto::HEADER_BYTES + key_bytes <= REDIRECT_MARK_AT as usize
        && REDIRECT_MARK_AT + REDIRECT_MARK_BYTES as u64 <= layout.table_offset
}

/// The bytes the index's load reads of each file: enough for a redirect mark.
pub(super) const PREFIX_FOR_MARK: usize = REDIRECT_MARK_AT as usize + REDIRECT_MARK_BYTES;

/// The clone version a redirected head's mark names, if the first bytes of its file
/// (`prefix`, as the index's load reads them) hold one: a block object's file, not a clone's.
pub(super) fn redirected_to(
    prefix: &[u8],
    key: &str,
    header_blocks: bool,
) -> Option<ObjectVersion> {
    if !header_blocks || parse_clone_key(key).is_some() {
        return None;
    }
    redirect_mark(prefix).map(ObjectVersion)
}

/// A redirect mark naming the clone of `clone_version`.
pub(super) fn mark(clone_version: ObjectVersion) -> [u8; REDIRECT_MARK_BYTES] {
    let mut mark = [0u8; REDIRECT_MARK_BYTES];
    mark[..8].copy_from_slice(REDIRECT_MAGIC);
    mark[8..].copy_from_slice(&clone_version.0.to_le_bytes());
    mark
}

/// A redirected head: the clone that holds the blocks it does not.
#[derive(Clone, Debug)]
pub(super) struct Redirected {
    /// The clone's key.
    pub(super) clone: String,
    /// The head's layout (the clone's offsets are the same).
    pub(super) layout: BlockLayout,
    /// Block `b` held by the head: bit `b % 8` of byte `b / 8`.
    pub(super) held: Vec<u8>,
}

impl Redirected {
    pub(super) fn holds(&self, block: u64) -> bool {
        holds(&self.held, block)
    }
}

/// A device's redirected heads, by key. Each is read and changed under its head's stripe.
#[derive(Default)]
pub(super) struct Redirects {
    map: Mutex<HashMap<(PoolId, String), Redirected>>,
    count: AtomicUsize,
}

impl Redirects {
    pub(super) fn get(&self, pool: PoolId, head: &str) -> Option<Redirected> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.map.lock().expect("redirects lock").get(&(pool, head.to_string())).cloned()
    }

    pub(super) fn insert(&self, pool: PoolId, head: &str, redirected: Redirected) {
        let mut map = self.map.lock().expect("redirects lock");
        map.insert((pool, head.to_string()), redirected);
        self.count.store(map.len(), Ordering::Release);
    }

    pub(super) fn remove(&self, pool: PoolId, head: &str) -> Option<Redirected> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut map = self.map.lock().expect("redirects lock");
        let removed = map.remove(&(pool, head.to_string()));
        self.count.store(map.len(), Ordering::Release);
        removed
    }

    pub(super) fn hold(&self, pool: PoolId, head: &str, (first, last): (u64, u64)) {
        if let Some(redirected) =
            self.map.lock().expect("redirects lock").get_mut(&(pool, head.to_string()))
        {
            for b in first..=last.min(redirected.layout.blocks - 1) {
                hold(&mut redirected.held, b);
            }
        }
    }

    /// How many heads are redirected.
    pub(super) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}
