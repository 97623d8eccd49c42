//! A write-back cache in front of an export ([`WriteBack`]): a write is acknowledged once its
//! bytes are held here, and written to the export behind it in the background; a flush
//! answers once every write acknowledged before it is in the export and the export's own
//! flush has made it durable. This is the guarantee of a disk with a volatile write cache
//! (and of librbd with `rbd_cache=true`): what a guest has not flushed may be lost if this
//! process dies, nothing it has flushed is.
//!
//! * Reads see every acknowledged write: the cached bytes that overlap a read are laid over
//!   what the export answers (taken before the export is asked, so a piece written back in
//!   the meantime is not missed).
//! * Writes are kept as non-overlapping pieces by offset; a write over cached bytes replaces
//!   them. Two writes of overlapping bytes are never sent to the export at once: a piece
//!   waits while bytes it covers are on their way, so the export receives them in order.
//! * Memory: at most [`WriteBack::new`]'s `limit` bytes are held; a write beyond it waits
//!   for room (a single write larger than the limit is taken when nothing else is held).
//! * A write to the export that fails is tried again (after 50 ms, doubling to 5 s); the
//!   flushes waiting then fail with `EIO` (as a disk whose cache cannot be written reports
//!   it at the next flush), and the bytes stay cached for the next try. A refusal that will
//!   not change (`EPERM`: the volume's lock is lost; `ESHUTDOWN`) fails every later request.
//! * FUA writes, trims and write-zeroes go through: a FUA write is cached and then flushed;
//!   a trim or write-zeroes drops the cached bytes it covers and waits for those on their
//!   way before it reaches the export.
//! * [`WriteBack::hold`] empties the cache and keeps new writes out while its guard lives
//!   (a volume takes a snapshot under it: every acknowledged write is in the snapshot);
//!   [`WriteBack::drain`] empties it before the export is closed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::{Notify, OwnedRwLockWriteGuard, RwLock};
use tokio::time::Instant;

use crate::export::{Errno, Export, Extent, IoFuture};

/// Writes to the export in flight at most, by default.
pub const CONCURRENCY: usize = 16;
/// Contiguous cached pieces are written back as one write of at most this many bytes.
const MERGE_MAX: usize = 1 << 20;
/// The first pause after a failed write-back, and the longest.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Bytes acknowledged and not yet in the export.
#[derive(Clone, Debug)]
struct Piece {
    data: Bytes,
    /// The write it came from (a split piece keeps it).
    generation: u64,
    /// On its way to the export.
    flushing: bool,
}

/// A write-back on its way: the bytes `[start, end)` and the writes they came from.
#[derive(Debug)]
struct InFlight {
    end: u64,
    generations: Vec<u64>,
}

#[derive(Debug, Default)]
struct State {
    /// Non-overlapping, by offset.
    pieces: BTreeMap<u64, Piece>,
    /// Bytes in `pieces`.
    bytes: u64,
    /// How many pieces each write still has cached (the oldest key: the oldest write not
    /// yet in the export).
    generations: BTreeMap<u64, usize>,
    next_generation: u64,
    /// Write-backs under way, by start; they never overlap.
    in_flight: BTreeMap<u64, InFlight>,
    /// Failed write-backs so far.
    failures: u64,
    /// A refusal every later request gets.
    fatal: Option<Errno>,
    /// No write-back starts before this (after a failure).
    retry_at: Option<Instant>,
    retry_pause: Duration,
    /// Pieces in the order they were written (generation, start), oldest first: write-backs
    /// start from the front, so that the oldest go first and those under way are spread
    /// over the export as the writes were (in offset order they would crowd into one
    /// region, where a volume orders writes to the same object one after another). An
    /// entry whose piece is gone, changed or under way is skipped.
    queue: VecDeque<(u64, u64)>,
}

impl State {
    fn add(&mut self, start: u64, piece: Piece) {
        self.bytes += piece.data.len() as u64;
        *self.generations.entry(piece.generation).or_default() += 1;
        self.pieces.insert(start, piece);
    }

    fn remove(&mut self, start: u64) -> Option<Piece> {
        let piece = self.pieces.remove(&start)?;
        self.bytes -= piece.data.len() as u64;
        if let Some(count) = self.generations.get_mut(&piece.generation) {
            *count -= 1;
            if *count == 0 {
                self.generations.remove(&piece.generation);
            }
        }
        Some(piece)
    }

    /// The starts of the pieces overlapping `[start, end)`, in order.
    fn overlapping(&self, start: u64, end: u64) -> Vec<u64> {
        let mut found: Vec<u64> = self
            .pieces
            .range(..end)
            .rev()
            .take_while(|(at, piece)| **at + piece.data.len() as u64 > start)
            .map(|(at, _)| *at)
            .collect();
        found.reverse();
        found
    }

    /// Drops the cached bytes of `[start, end)` (pieces cut at its edges keep the rest).
    fn punch(&mut self, start: u64, end: u64) {
        for at in self.overlapping(start, end) {
            let Some(piece) = self.remove(at) else { continue };
            let piece_end = at + piece.data.len() as u64;
            if at < start {
                let head = piece.data.slice(..(start - at) as usize);
                self.add(at, Piece { data: head, ..piece.clone() });
            }
            if piece_end > end {
                let tail = piece.data.slice((end - at) as usize..);
                self.queue.push_back((piece.generation, end));
                self.add(end, Piece { data: tail, ..piece });
            }
        }
    }

    fn insert(&mut self, offset: u64, data: Bytes) -> u64 {
        let generation = self.next_generation;
        self.next_generation += 1;
        if data.is_empty() {
            return generation;
        }
        self.punch(offset, offset + data.len() as u64);
        self.queue.push_back((generation, offset));
        self.add(offset, Piece { data, generation, flushing: false });
        generation
    }

    fn in_flight_overlaps(&self, start: u64, end: u64) -> bool {
        self.in_flight.range(..end).next_back().is_some_and(|(_, f)| f.end > start)
    }

    /// Whether every write older than `generation` is in the export.
    fn clean_below(&self, generation: u64) -> bool {
        self.generations.first_key_value().is_none_or(|(oldest, _)| *oldest >= generation)
    }

    /// Up to `most` write-backs to start (contiguous pieces merged), marked under way.
    fn pick(&mut self, most: usize) -> Vec<(u64, Bytes)> {
        let mut picked = Vec::new();
        // Pieces that must wait for bytes under way keep their place at the front.
        let mut waiting = Vec::new();
        while picked.len() < most {
            let Some((generation, at)) = self.queue.pop_front() else { break };
            let Some(piece) = self.pieces.get(&at) else { continue };
            if piece.generation != generation || piece.flushing {
                continue;
            }
            let end = at + piece.data.len() as u64;
            if self.in_flight_overlaps(at, end) {
                waiting.push((generation, at));
                continue;
            }
            // This piece and the cached ones right after it, while contiguous and free.
            let mut run = vec![at];
            let mut run_end = end;
            let mut run_bytes = piece.data.len();
            while let Some(next) = self.pieces.get(&run_end) {
                let len = next.data.len();
                if next.flushing
                    || run_bytes + len > MERGE_MAX
                    || self.in_flight_overlaps(run_end, run_end + len as u64)
                {
                    break;
                }
                run.push(run_end);
                run_end += len as u64;
                run_bytes += len;
            }
            let mut generations = Vec::with_capacity(run.len());
            let data = if run.len() == 1 {
                let piece = self.pieces.get_mut(&at).expect("found above");
                piece.flushing = true;
                generations.push(piece.generation);
                piece.data.clone()
            } else {
                let mut joined = BytesMut::with_capacity(run_bytes);
                for start in &run {
                    let piece = self.pieces.get_mut(start).expect("found above");
                    piece.flushing = true;
                    generations.push(piece.generation);
                    joined.extend_from_slice(&piece.data);
                }
                joined.freeze()
            };
            self.in_flight.insert(at, InFlight { end: run_end, generations });
            picked.push((at, data));
        }
        for entry in waiting.into_iter().rev() {
            self.queue.push_front(entry);
        }
        picked
    }

    /// A write-back of `[start, ..)` finished.
    fn finished(&mut self, start: u64, result: Result<(), Errno>) {
        let Some(flight) = self.in_flight.remove(&start) else { return };
        let mine: Vec<u64> = self
            .pieces
            .range(start..flight.end)
            .filter(|(_, p)| p.flushing && flight.generations.contains(&p.generation))
            .map(|(at, _)| *at)
            .collect();
        match result {
            Ok(()) => {
                for at in mine {
                    self.remove(at);
                }
                self.retry_pause = Duration::ZERO;
            }
            Err(errno) => {
                // Tried again first.
                for at in mine.into_iter().rev() {
                    if let Some(piece) = self.pieces.get_mut(&at) {
                        piece.flushing = false;
                        self.queue.push_front((piece.generation, at));
                    }
                }
                self.failures += 1;
                if matches!(errno, Errno::Perm | Errno::Shutdown) {
                    self.fatal = Some(errno);
                }
                self.retry_pause = (self.retry_pause * 2).clamp(RETRY_FIRST, RETRY_MAX);
                self.retry_at = Some(Instant::now() + self.retry_pause);
            }
        }
    }
}

struct Shared {
    inner: Arc<dyn Export>,
    state: Mutex<State>,
    /// Something was written back (or failed): waiters look again.
    changed: Notify,
    /// Something was cached: the write-back task looks again.
    work: Notify,
    limit: u64,
    concurrency: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `done` holds of the state (or fails as it says).
    async fn wait<T>(
        &self,
        mut done: impl FnMut(&State) -> Option<Result<T, Errno>>,
    ) -> Result<T, Errno> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(result) = done(&self.lock()) {
                return result;
            }
            changed.await;
        }
    }

    /// Waits until every write older than `generation` is in the export; fails if a
    /// write-back fails meanwhile.
    async fn clean_below(&self, generation: u64) -> Result<(), Errno> {
        let failures = self.lock().failures;
        self.wait(|state| {
            if let Some(errno) = state.fatal {
                return Some(Err(errno));
            }
            if state.clean_below(generation) {
                return Some(Ok(()));
            }
            (state.failures != failures).then_some(Err(Errno::Io))
        })
        .await
    }

    /// The write-back task: starts write-backs while there is room and something cached.
    async fn run(self: Arc<Shared>) {
        let mut under_way = tokio::task::JoinSet::new();
        loop {
            let work = self.work.notified();
            tokio::pin!(work);
            work.as_mut().enable();
            let pause = {
                let mut state = self.lock();
                let now = Instant::now();
                match state.retry_at {
                    _ if state.fatal.is_some() => None,
                    Some(at) if at > now => Some(at),
                    _ => {
                        state.retry_at = None;
                        let room = self.concurrency.saturating_sub(under_way.len());
                        for (start, data) in state.pick(room) {
                            let inner = self.inner.clone();
                            under_way.spawn(async move {
                                (start, inner.write(start, data, false).await)
                            });
                        }
                        None
                    }
                }
            };
            tokio::select! {
                Some(done) = under_way.join_next(), if !under_way.is_empty() => {
                    if let Ok((start, result)) = done {
                        self.lock().finished(start, result);
                    } else {
                        // A write-back that panicked: every one under way is tried again.
                        tracing::error!("a write-back panicked; its bytes are written again");
                        under_way.abort_all();
                        {
                            let mut state = self.lock();
                            let starts: Vec<u64> = state.in_flight.keys().copied().collect();
                            for start in starts {
                                state.finished(start, Err(Errno::Io));
                            }
                        }
                        while under_way.join_next().await.is_some() {}
                    }
                    self.changed.notify_waiters();
                }
                _ = &mut work => {}
                _ = tokio::time::sleep_until(pause.unwrap_or_else(Instant::now)), if pause.is_some() => {}
            }
        }
    }
}

/// What [`WriteBack::hold_hook`] returns while writes are kept out.
pub type Held = Box<dyn std::any::Any + Send>;

/// [`WriteBack::hold_hook`]: empties the cache and keeps writes out until the guard goes.
pub type HoldHook = Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Held, String>> + Send>>
        + Send
        + Sync,
>;

/// A write-back cache in front of an export (see the module).
pub struct WriteBack {
    shared: Arc<Shared>,
    /// Held shared while a write is cached, exclusively by [`WriteBack::hold`].
    gate: Arc<RwLock<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl WriteBack {
    /// A cache of at most `limit` bytes in front of `inner`, writing back with up to
    /// `concurrency` writes in flight. Starts its write-back task: call within a tokio
    /// runtime.
    pub fn new(inner: Arc<dyn Export>, limit: u64, concurrency: usize) -> WriteBack {
        let shared = Arc::new(Shared {
            inner,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            work: Notify::new(),
            limit: limit.max(1),
            concurrency: concurrency.max(1),
        });
        let task = tokio::spawn(shared.clone().run());
        WriteBack { shared, gate: Arc::new(RwLock::new(())), task }
    }

    /// Bytes acknowledged and not yet in the export.
    pub fn dirty_bytes(&self) -> u64 {
        self.shared.lock().bytes
    }

    /// Writes every cached byte to the export (not flushed: the export's own flush, or
    /// closing it, does that).
    pub async fn drain(&self) -> Result<(), Errno> {
        let generation = self.shared.lock().next_generation;
        self.shared.clean_below(generation).await
    }

    /// Empties the cache and keeps new writes waiting until the guard is dropped: what
    /// follows (a snapshot) sees every write acknowledged before.
    pub async fn hold(&self) -> Result<OwnedRwLockWriteGuard<()>, Errno> {
        let guard = self.gate.clone().write_owned().await;
        self.drain().await?;
        Ok(guard)
    }

    /// [`WriteBack::hold`] as a hook for what sits below (a volume, before each snapshot):
    /// its guard boxed, its error as a message; once the cache is gone, a guard of nothing.
    pub fn hold_hook(cache: &Arc<WriteBack>) -> HoldHook {
        let cache = Arc::downgrade(cache);
        Arc::new(move || {
            let cache = cache.clone();
            Box::pin(async move {
                let Some(cache) = cache.upgrade() else { return Ok(Box::new(()) as Held) };
                match cache.hold().await {
                    Ok(guard) => Ok(Box::new(guard) as Held),
                    Err(errno) => Err(errno.message().to_string()),
                }
            })
        })
    }

    async fn cache(&self, offset: u64, data: Bytes) -> Result<u64, Errno> {
        let _open = self.gate.read().await;
        let len = data.len() as u64;
        let shared = &self.shared;
        let mut data = Some(data);
        loop {
            let changed = shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = shared.lock();
                if let Some(errno) = state.fatal {
                    return Err(errno);
                }
                if state.bytes == 0 || state.bytes + len <= shared.limit {
                    let generation = state.insert(offset, data.take().expect("inserted once"));
                    drop(state);
                    shared.work.notify_one();
                    return Ok(generation);
                }
            }
            changed.await;
        }
    }
}

impl Drop for WriteBack {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Export for WriteBack {
    fn size(&self) -> u64 {
        self.shared.inner.size()
    }

    fn read_only(&self) -> bool {
        self.shared.inner.read_only()
    }

    /// Every connection goes through this one cache.
    fn multi_conn(&self) -> bool {
        self.shared.inner.multi_conn()
    }

    fn read(&self, offset: u64, length: u32) -> IoFuture<'_, Bytes> {
        Box::pin(async move {
            let end = offset + u64::from(length);
            let overlay: Vec<(u64, Bytes)> = {
                let state = self.shared.lock();
                state
                    .overlapping(offset, end)
                    .into_iter()
                    .map(|at| {
                        let data = &state.pieces[&at].data;
                        let from = offset.max(at);
                        let to = end.min(at + data.len() as u64);
                        (from, data.slice((from - at) as usize..(to - at) as usize))
                    })
                    .collect()
            };
            let covered: u64 = overlay.iter().map(|(_, d)| d.len() as u64).sum();
            if covered == u64::from(length) && overlay.len() == 1 {
                return Ok(overlay.into_iter().next().expect("one").1);
            }
            let mut bytes = if covered == u64::from(length) {
                BytesMut::zeroed(length as usize)
            } else {
                BytesMut::from(&self.shared.inner.read(offset, length).await?[..])
            };
            for (at, data) in overlay {
                let from = (at - offset) as usize;
                bytes[from..from + data.len()].copy_from_slice(&data);
            }
            Ok(bytes.freeze())
        })
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> IoFuture<'_, ()> {
        Box::pin(async move {
            let generation = self.cache(offset, data).await?;
            if fua {
                self.shared.clean_below(generation + 1).await?;
                self.shared.inner.flush().await?;
            }
            Ok(())
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        Box::pin(async move {
            self.drain().await?;
            self.shared.inner.flush().await
        })
    }

    fn trim(&self, offset: u64, length: u32, fua: bool) -> IoFuture<'_, ()> {
        Box::pin(async move {
            self.clear(offset, length).await?;
            self.shared.inner.trim(offset, length, fua).await
        })
    }

    fn write_zeroes(
        &self,
        offset: u64,
        length: u32,
        may_trim: bool,
        fua: bool,
    ) -> IoFuture<'_, ()> {
        Box::pin(async move {
            self.clear(offset, length).await?;
            self.shared.inner.write_zeroes(offset, length, may_trim, fua).await
        })
    }

    /// Cached bytes are data whatever the export says of them.
    fn block_status(&self, offset: u64, length: u32) -> IoFuture<'_, Vec<Extent>> {
        Box::pin(async move {
            let end = offset + u64::from(length);
            let cached = !self.shared.lock().overlapping(offset, end).is_empty();
            if cached {
                return Ok(vec![Extent::data(length)]);
            }
            self.shared.inner.block_status(offset, length).await
        })
    }

    fn allocation_depth(&self) -> bool {
        self.shared.inner.allocation_depth()
    }
}

impl WriteBack {
    /// Drops the cached bytes of `[offset, offset + length)` and waits for those on their way
    /// (a trim or write-zeroes then reaches the export after them).
    async fn clear(&self, offset: u64, length: u32) -> Result<(), Errno> {
        let end = offset + u64::from(length);
        {
            let mut state = self.shared.lock();
            if let Some(errno) = state.fatal {
                return Err(errno);
            }
            state.punch(offset, end);
        }
        self.shared
            .wait(|state| {
                if let Some(errno) = state.fatal {
                    return Some(Err(errno));
                }
                (!state.in_flight_overlaps(offset, end)).then_some(Ok(()))
            })
            .await
    }
}

#[cfg(test)]
mod tests;
