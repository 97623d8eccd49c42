use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use proptest::prelude::*;

use super::*;
use crate::export::MemoryExport;

const SIZE: usize = 256 << 10;

/// A memory export whose writes take a while, may be refused, and are checked never to
/// overlap another write under way.
struct Behind {
    memory: MemoryExport,
    /// Each write waits this long (µs) times a factor from its offset.
    delay_us: u64,
    /// The next this many writes fail with this error.
    failing: AtomicU32,
    fail_with: Mutex<Errno>,
    /// Writes wait while this is set.
    stalled: AtomicBool,
    under_way: Mutex<Vec<(u64, u64)>>,
    overlapped: AtomicBool,
    writes: AtomicU64,
    flushes: AtomicU64,
}

impl Behind {
    fn new(delay_us: u64) -> Arc<Behind> {
        Arc::new(Behind {
            memory: MemoryExport::new(SIZE, false),
            delay_us,
            failing: AtomicU32::new(0),
            fail_with: Mutex::new(Errno::Io),
            stalled: AtomicBool::new(false),
            under_way: Mutex::new(Vec::new()),
            overlapped: AtomicBool::new(false),
            writes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        })
    }

    fn fail_next(&self, writes: u32, errno: Errno) {
        *self.fail_with.lock().unwrap() = errno;
        self.failing.store(writes, Ordering::SeqCst);
    }
}

impl Export for Behind {
    fn size(&self) -> u64 {
        SIZE as u64
    }

    fn read_only(&self) -> bool {
        false
    }

    fn read(&self, offset: u64, length: u32) -> IoFuture<'_, Bytes> {
        self.memory.read(offset, length)
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> IoFuture<'_, ()> {
        Box::pin(async move {
            let end = offset + data.len() as u64;
            {
                let mut under_way = self.under_way.lock().unwrap();
                if under_way.iter().any(|&(s, e)| s < end && offset < e) {
                    self.overlapped.store(true, Ordering::SeqCst);
                }
                under_way.push((offset, end));
            }
            while self.stalled.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let wait = self.delay_us * (1 + (offset / 4096) % 4);
            if wait > 0 {
                tokio::time::sleep(Duration::from_micros(wait)).await;
            }
            let failed = self
                .failing
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            let result = if failed {
                Err(*self.fail_with.lock().unwrap())
            } else {
                self.writes.fetch_add(1, Ordering::SeqCst);
                self.memory.write(offset, data, fua).await
            };
            let mut under_way = self.under_way.lock().unwrap();
            let at = under_way.iter().position(|&r| r == (offset, end)).expect("recorded");
            under_way.swap_remove(at);
            result
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(()) })
    }

    fn trim(&self, offset: u64, length: u32, fua: bool) -> IoFuture<'_, ()> {
        self.memory.trim(offset, length, fua)
    }

    fn write_zeroes(
        &self,
        offset: u64,
        length: u32,
        may_trim: bool,
        fua: bool,
    ) -> IoFuture<'_, ()> {
        self.memory.write_zeroes(offset, length, may_trim, fua)
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn pattern(seed: u64, len: usize) -> Bytes {
    (0..len).map(|i| (seed as usize * 31 + i * 7 + i / 251) as u8).collect::<Vec<u8>>().into()
}

#[derive(Clone, Debug)]
enum Op {
    Write { offset: u64, len: usize, fua: bool },
    Trim { offset: u64, len: u32 },
    Read { offset: u64, len: u32 },
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    // Offsets on 512-byte sectors in the first 64 KiB, so that writes overlap often.
    let offset = (0u64..128).prop_map(|s| s * 512);
    prop_oneof![
        6 => (offset.clone(), 1usize..40, any::<bool>())
            .prop_map(|(offset, sectors, fua)| Op::Write { offset, len: sectors * 512, fua: fua && sectors % 7 == 0 }),
        1 => (offset.clone(), 1u32..20).prop_map(|(offset, sectors)| Op::Trim { offset, len: sectors * 512 }),
        3 => (offset, 1u32..40).prop_map(|(offset, sectors)| Op::Read { offset, len: sectors * 512 }),
        1 => Just(Op::Flush),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any sequence of writes, trims, reads and flushes, each awaited before the next (as a
    /// guest's ordered requests): every read answers what a plain disk would, the export
    /// never receives two overlapping writes at once, and after a flush it holds exactly
    /// what was written.
    #[test]
    fn reads_see_every_acknowledged_write_and_a_flush_writes_them_all(
        ops in proptest::collection::vec(op(), 1..120),
        limit_kib in prop_oneof![Just(4u64), Just(64), Just(1024)],
    ) {
        let rt = runtime();
        rt.block_on(async {
            let behind = Behind::new(30);
            let cache = WriteBack::new(behind.clone(), limit_kib << 10, 4);
            let mut model = vec![0u8; SIZE];
            for (n, op) in ops.iter().enumerate() {
                match *op {
                    Op::Write { offset, len, fua } => {
                        let data = pattern(n as u64, len);
                        model[offset as usize..offset as usize + len].copy_from_slice(&data);
                        cache.write(offset, data, fua).await.unwrap();
                    }
                    Op::Trim { offset, len } => {
                        model[offset as usize..(offset + u64::from(len)) as usize].fill(0);
                        cache.trim(offset, len, false).await.unwrap();
                    }
                    Op::Read { offset, len } => {
                        let got = cache.read(offset, len).await.unwrap();
                        let want = &model[offset as usize..(offset + u64::from(len)) as usize];
                        prop_assert_eq!(&got[..], want, "read {} after {:?}", n, &ops[..n]);
                    }
                    Op::Flush => {
                        cache.flush().await.unwrap();
                        prop_assert_eq!(cache.dirty_bytes(), 0);
                        prop_assert!(behind.memory.contents() == model, "flushed at {}", n);
                    }
                }
            }
            cache.flush().await.unwrap();
            prop_assert!(behind.memory.contents() == model);
            prop_assert!(!behind.overlapped.load(Ordering::SeqCst), "overlapping writes at once");
            Ok(())
        })?;
    }
}

/// Many writers at once, overlapping: each one's read-back after its own write is its own
/// bytes or a later writer's (never older), and the export ends equal to the cache.
#[test]
fn concurrent_overlapping_writers_never_read_older_bytes() {
    let rt = runtime();
    rt.block_on(async {
        let behind = Behind::new(50);
        let cache = Arc::new(WriteBack::new(behind.clone(), 32 << 10, 8));
        let mut tasks = tokio::task::JoinSet::new();
        for writer in 0..8u64 {
            let cache = cache.clone();
            tasks.spawn(async move {
                for round in 0..200u64 {
                    // Each writer owns one 4 KiB block and also writes a shared one.
                    let own = writer * 4096;
                    let stamp = Bytes::from(vec![(round % 251) as u8 + 1; 4096]);
                    cache.write(own, stamp.clone(), false).await.unwrap();
                    assert_eq!(cache.read(own, 4096).await.unwrap(), stamp, "writer {writer}");
                    let shared = Bytes::from(vec![writer as u8; 1024]);
                    cache.write(64 << 10, shared, false).await.unwrap();
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        let before = cache.read(0, SIZE as u32).await.unwrap();
        cache.flush().await.unwrap();
        assert_eq!(&behind.memory.contents()[..], &before[..]);
        assert!(!behind.overlapped.load(Ordering::SeqCst), "overlapping writes at once");
    });
}

/// A write is acknowledged before the export has it; the flush answers once it has it and
/// flushes the export too.
#[test]
fn a_write_is_acknowledged_from_memory_and_written_by_the_flush() {
    let rt = runtime();
    rt.block_on(async {
        let behind = Behind::new(0);
        behind.stalled.store(true, Ordering::SeqCst);
        let cache = WriteBack::new(behind.clone(), 1 << 20, 4);
        let data = pattern(1, 8192);
        cache.write(4096, data.clone(), false).await.unwrap();
        assert_eq!(cache.read(4096, 8192).await.unwrap(), data, "read from the cache");
        assert_eq!(cache.dirty_bytes(), 8192);
        assert!(behind.memory.contents()[4096..12288].iter().all(|b| *b == 0), "not yet written");
        let flush = tokio::spawn({
            let cache = Arc::new(cache);
            async move {
                cache.flush().await.unwrap();
                cache
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!flush.is_finished(), "the flush waits for the write-back");
        assert_eq!(behind.flushes.load(Ordering::SeqCst), 0);
        behind.stalled.store(false, Ordering::SeqCst);
        let cache = flush.await.unwrap();
        assert_eq!(&behind.memory.contents()[4096..12288], &data[..]);
        assert_eq!(behind.flushes.load(Ordering::SeqCst), 1, "the export flushed after");
        assert_eq!(cache.dirty_bytes(), 0);
    });
}

/// Past the limit, a write waits for room.
#[test]
fn writes_past_the_limit_wait_for_room() {
    let rt = runtime();
    rt.block_on(async {
        let behind = Behind::new(0);
        behind.stalled.store(true, Ordering::SeqCst);
        let cache = Arc::new(WriteBack::new(behind.clone(), 16 << 10, 4));
        for block in 0..4u64 {
            cache.write(block * 4096, pattern(block, 4096), false).await.unwrap();
        }
        let fifth = tokio::spawn({
            let cache = cache.clone();
            async move { cache.write(16 << 10, pattern(9, 4096), false).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!fifth.is_finished(), "16 KiB held: the fifth 4 KiB write waits");
        assert_eq!(cache.dirty_bytes(), 16 << 10);
        behind.stalled.store(false, Ordering::SeqCst);
        fifth.await.unwrap().unwrap();
        cache.flush().await.unwrap();
        assert_eq!(&behind.memory.contents()[16 << 10..20 << 10], &pattern(9, 4096)[..]);
    });
}

/// A failed write-back fails the flush waiting for it and keeps the bytes, which a later
/// flush writes; a lost lock (`EPERM`) fails everything after it.
#[test]
fn a_failed_write_back_fails_the_flush_and_is_tried_again() {
    let rt = runtime();
    rt.block_on(async {
        let behind = Behind::new(0);
        behind.stalled.store(true, Ordering::SeqCst);
        let cache = WriteBack::new(behind.clone(), 1 << 20, 4);
        let data = pattern(3, 4096);
        cache.write(0, data.clone(), false).await.unwrap();
        behind.fail_next(1, Errno::Io);
        behind.stalled.store(false, Ordering::SeqCst);
        assert_eq!(cache.flush().await, Err(Errno::Io), "the flush reports the failure");
        assert_eq!(cache.read(0, 4096).await.unwrap(), data, "still readable");
        cache.flush().await.unwrap();
        assert_eq!(&behind.memory.contents()[..4096], &data[..], "written at the next try");

        behind.stalled.store(true, Ordering::SeqCst);
        cache.write(8192, data.clone(), false).await.unwrap();
        behind.fail_next(1, Errno::Perm);
        behind.stalled.store(false, Ordering::SeqCst);
        assert_eq!(cache.flush().await, Err(Errno::Perm));
        assert_eq!(cache.write(0, data.clone(), false).await, Err(Errno::Perm));
        assert_eq!(cache.flush().await, Err(Errno::Perm));
    });
}

/// `hold` returns once the export holds every acknowledged write, and keeps new writes
/// waiting until its guard goes.
#[test]
fn hold_empties_the_cache_and_keeps_writes_out_until_released() {
    let rt = runtime();
    rt.block_on(async {
        let behind = Behind::new(200);
        let cache = Arc::new(WriteBack::new(behind.clone(), 1 << 20, 4));
        for block in 0..32u64 {
            cache.write(block * 4096, pattern(block, 4096), false).await.unwrap();
        }
        let guard = cache.hold().await.unwrap();
        let held = behind.memory.contents();
        for block in 0..32u64 {
            let at = block as usize * 4096;
            assert_eq!(&held[at..at + 4096], &pattern(block, 4096)[..], "block {block}");
        }
        let late = tokio::spawn({
            let cache = cache.clone();
            async move { cache.write(0, pattern(99, 4096), false).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!late.is_finished(), "a write waits while held");
        drop(guard);
        late.await.unwrap().unwrap();
        assert_eq!(cache.read(0, 4096).await.unwrap(), pattern(99, 4096));
    });
}

/// Contiguous cached writes reach the export as fewer, larger writes.
#[test]
fn contiguous_writes_are_written_back_merged() {
    let rt = runtime();
    rt.block_on(async {
        let behind = Behind::new(0);
        behind.stalled.store(true, Ordering::SeqCst);
        let cache = WriteBack::new(behind.clone(), 4 << 20, 1);
        // The first write-back may start with the first block alone.
        for block in 0..64u64 {
            cache.write(block * 4096, pattern(block, 4096), false).await.unwrap();
        }
        behind.stalled.store(false, Ordering::SeqCst);
        cache.flush().await.unwrap();
        let writes = behind.writes.load(Ordering::SeqCst);
        assert!(writes <= 3, "64 contiguous 4 KiB writes reached the export as {writes}");
        for block in 0..64u64 {
            let at = block as usize * 4096;
            assert_eq!(&behind.memory.contents()[at..at + 4096], &pattern(block, 4096)[..]);
        }
    });
}
