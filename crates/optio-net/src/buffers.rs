//! Large buffers, reused: a server's whole-object reads from files, and the bodies of frames
//! read from a connection (objects a client reads, objects a server is sent). Reading 4 MiB
//! into fresh memory makes the kernel zero every page it maps for it (`clear_page`: 13 % of
//! the samples of servers and client together in a profile of 4 MiB reads at 64 in flight);
//! a buffer read into before is mapped already. The data is used where it was read to (a
//! [`Bytes`] that owns the buffer), and the buffer comes back to its pool when the last of
//! those bytes is dropped.

use std::sync::{Arc, LazyLock, Mutex};

use bytes::Bytes;

/// Buffers kept at most, and their total bytes at most: enough for the reads in flight of
/// one process under load, a bounded cost when it is idle.
const KEPT: usize = 24;
const KEPT_BYTES_MAX: usize = 96 << 20;

/// Reads below this size take fresh memory (the allocator's small pages are reused anyway);
/// buffers larger than [`KEPT_BUFFER_MAX`] are not kept.
pub const POOLED_MIN: usize = 64 << 10;
const KEPT_BUFFER_MAX: usize = 16 << 20;

/// The capacity to give a buffer for reading `len` bytes: one more (a read to the end sees
/// the end without growing it), and for pooled sizes rounded up to [`POOLED_MIN`], so that
/// a buffer kept from one read fits the next of about the same size (4 MiB objects whose
/// files differ by the length of their keys).
pub fn capacity_for(len: usize) -> usize {
    let capacity = len.saturating_add(1);
    if len < POOLED_MIN {
        capacity
    } else {
        capacity.div_ceil(POOLED_MIN).saturating_mul(POOLED_MIN)
    }
}

/// Free buffers, lent out as [`Bytes`] and given back when those are dropped.
#[derive(Default)]
pub struct BufferPool {
    free: Mutex<Free>,
}

/// The process's pool.
pub fn shared() -> &'static Arc<BufferPool> {
    static SHARED: LazyLock<Arc<BufferPool>> = LazyLock::new(Arc::default);
    &SHARED
}

#[derive(Default)]
struct Free {
    buffers: Vec<Vec<u8>>,
    bytes: usize,
}

impl BufferPool {
    /// An empty buffer to read about `len` bytes into: a kept one of a fitting size when
    /// there is one (more than `len`, at most four times it, so that a small read does not
    /// hold a large buffer while its bytes live), else a fresh one, to be given
    /// [`capacity_for`] `len`.
    pub fn take(&self, len: usize) -> Vec<u8> {
        if len >= POOLED_MIN {
            let mut free = self.free.lock().expect("buffer pool lock");
            // The most recently returned first: its pages are the likeliest in the cache.
            let fits =
                |buffer: &Vec<u8>| (len + 1..=len.saturating_mul(4)).contains(&buffer.capacity());
            if let Some(at) = free.buffers.iter().rposition(fits) {
                let buffer = free.buffers.remove(at);
                free.bytes -= buffer.capacity();
                return buffer;
            }
        }
        Vec::new()
    }

    /// `buffer` as bytes that give it back to `home` when the last of them is dropped.
    pub fn bytes(home: &Arc<BufferPool>, buffer: Vec<u8>) -> Bytes {
        if buffer.capacity() < POOLED_MIN {
            return Bytes::from(buffer);
        }
        Bytes::from_owner(Lent { buffer, home: home.clone() })
    }

    fn give_back(&self, mut buffer: Vec<u8>) {
        let capacity = buffer.capacity();
        if !(POOLED_MIN..=KEPT_BUFFER_MAX).contains(&capacity) {
            return;
        }
        let mut free = self.free.lock().expect("buffer pool lock");
        if free.buffers.len() < KEPT && free.bytes + capacity <= KEPT_BYTES_MAX {
            buffer.clear();
            free.bytes += capacity;
            free.buffers.push(buffer);
        }
    }

    #[cfg(test)]
    fn kept(&self) -> (usize, usize) {
        let free = self.free.lock().unwrap();
        (free.buffers.len(), free.bytes)
    }
}

/// A buffer lent out as [`Bytes`].
struct Lent {
    buffer: Vec<u8>,
    home: Arc<BufferPool>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        self.home.give_back(std::mem::take(&mut self.buffer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_when_its_last_bytes_are_dropped_and_is_lent_again() {
        let home = Arc::new(BufferPool::default());
        let mut buffer = home.take(1 << 20);
        buffer.reserve_exact(capacity_for(1 << 20));
        buffer.extend((0..(1u32 << 20)).map(|i| i as u8));
        let pointer = buffer.as_ptr();
        let bytes = BufferPool::bytes(&home, buffer);
        let tail = bytes.slice(100..);
        drop(bytes);
        assert_eq!(home.kept(), (0, 0), "a slice still holds it");
        assert_eq!(tail[0], 100);
        drop(tail);
        let (kept, kept_bytes) = home.kept();
        assert_eq!(kept, 1);
        assert!(kept_bytes >= 1 << 20);
        let again = home.take(1 << 20);
        assert!(again.is_empty(), "handed out empty");
        assert_eq!(again.as_ptr(), pointer, "the same memory");
        assert_eq!(home.kept(), (0, 0));
    }

    #[test]
    fn a_buffer_is_lent_again_for_a_read_of_about_its_size_only() {
        let home = Arc::new(BufferPool::default());
        let object = 4 << 20;
        let mut buffer = home.take(object + 300);
        buffer.reserve_exact(capacity_for(object + 300));
        drop(BufferPool::bytes(&home, buffer));
        // A file a few bytes longer (a longer key) fits the same buffer.
        let again = home.take(object + 310);
        assert!(again.capacity() > object + 310);
        drop(BufferPool::bytes(&home, again));
        // A 64 KiB read does not take a 4 MiB buffer.
        assert_eq!(home.take(64 << 10).capacity(), 0);
        assert_eq!(home.kept().0, 1);
        assert_eq!(capacity_for(100), 101);
        assert_eq!(capacity_for(POOLED_MIN), 2 * POOLED_MIN);
    }

    #[test]
    fn small_reads_are_not_pooled_and_the_pool_is_bounded() {
        let home = Arc::new(BufferPool::default());
        assert_eq!(home.take(100).capacity(), 0);
        drop(BufferPool::bytes(&home, vec![1u8; 100]));
        assert_eq!(home.kept(), (0, 0));
        let lent: Vec<Bytes> =
            (0..KEPT + 4).map(|_| BufferPool::bytes(&home, vec![0u8; 4 << 20])).collect();
        drop(lent);
        let (kept, bytes) = home.kept();
        assert_eq!(kept, KEPT);
        assert!(bytes <= KEPT_BYTES_MAX);
        drop(BufferPool::bytes(&home, vec![0u8; KEPT_BUFFER_MAX + 1]));
        assert_eq!(home.kept().0, KEPT, "an oversized buffer is not kept");
    }
}
