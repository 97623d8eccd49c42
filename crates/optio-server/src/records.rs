//! Choice records of one device: held in memory, where create-if-absent is atomic, and
//! persisted in an append-only log (`choices.log`) written by group commit.
//!
//! A record is visible to every client the moment it is created; it becomes durable at the
//! next commit (every [`COMMIT_INTERVAL`], or at once when a client asks to wait for it). Why
//! not one fsynced file per record: creating a file, linking and fsyncing it costs a journal
//! commit per new object, which doubled the latency of a first small write on a shared disk.
//! A record lost in a crash before its commit is safe (see `docs/store.md`): its writer checks
//! the home's incarnation after writing, and a later creator that finds no record probes every
//! candidate and follows the data.
//!
//! Log entry: `u32 length | u8 op (1 set, 2 remove) | u16 key length | pool u32 | key |
//! 32-byte record | crc32c of everything after the length`. A torn tail (a crash mid-append)
//! fails its checksum and ends the replay; the log is rewritten compacted at every start.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use optio_placement::PoolId;
use optio_proto::ChoiceRecord;
use optio_proto::choice::RECORD_BYTES;

use crate::disk::Disk;
use crate::error::StoreError;

/// How often queued records are committed.
pub const COMMIT_INTERVAL: Duration = Duration::from_millis(200);
/// After a crash (no clean-shutdown marker), how long the device refuses to create records:
/// longer than any first write may take from its record request to its acknowledgement (the
/// client's `RECORD_LEASE`), so every write whose record the crash may have lost has either
/// stored its object — which creators then find by probing — or given up.
pub const RECORD_GRACE_AFTER_CRASH: Duration = Duration::from_secs(2);
const CLEAN_MARKER: &str = "choices.clean";
/// How long a refused create makes a key "contended" (longer than any first write may take,
/// the client's 1 s lease).
pub const CONTENTION_WINDOW: Duration = Duration::from_secs(5);
/// Most contended keys remembered.
const REFUSED_MAX: usize = 100_000;
const OP_SET: u8 = 1;
const OP_REMOVE: u8 = 2;

/// The records of one device.
pub struct RecordLog {
    path: PathBuf,
    grace_until: Option<std::time::Instant>,
    state: Mutex<State>,
    durable: tokio::sync::watch::Sender<u64>,
    commit: Mutex<()>,
}

struct State {
    records: HashMap<(PoolId, String), (ChoiceRecord, u64)>,
    /// When another writer's create was last refused, per key (recent ones only): that
    /// writer may have sent its object ahead of its record request and is now undoing it.
    refused: HashMap<(PoolId, String), std::time::Instant>,
    queue: Vec<u8>,
    queued_seq: u64,
}

fn entry(op: u8, pool: PoolId, key: &str, record: &ChoiceRecord) -> Vec<u8> {
    let mut body = Vec::with_capacity(7 + key.len() + RECORD_BYTES + 4);
    body.push(op);
    body.extend_from_slice(&(key.len() as u16).to_le_bytes());
    body.extend_from_slice(&pool.0.to_le_bytes());
    body.extend_from_slice(key.as_bytes());
    body.extend_from_slice(&record.encode());
    let crc = optio_proto::checksum(&body);
    let mut out = Vec::with_capacity(4 + body.len() + 4);
    out.extend_from_slice(&((body.len() + 4) as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Replays a log; returns the records and whether the whole log was valid.
fn replay(bytes: &[u8]) -> (HashMap<(PoolId, String), ChoiceRecord>, bool) {
    let mut records = HashMap::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let Some(len) =
            bytes.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        else {
            return (records, false);
        };
        let Some(entry) = bytes.get(at + 4..at + 4 + len) else { return (records, false) };
        if len < 7 + RECORD_BYTES + 4 {
            return (records, false);
        }
        let (body, crc) = entry.split_at(len - 4);
        if optio_proto::checksum(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return (records, false);
        }
        let op = body[0];
        let key_len = usize::from(u16::from_le_bytes([body[1], body[2]]));
        let pool = PoolId(u32::from_le_bytes([body[3], body[4], body[5], body[6]]));
        let (Some(key), Some(record)) = (body.get(7..7 + key_len), body.get(7 + key_len..)) else {
            return (records, false);
        };
        let (Ok(key), Ok(record)) = (std::str::from_utf8(key), ChoiceRecord::decode(record)) else {
            return (records, false);
        };
        match op {
            OP_SET => {
                records.insert((pool, key.to_string()), record);
            }
            OP_REMOVE => {
                records.remove(&(pool, key.to_string()));
            }
            _ => return (records, false),
        }
        at += 4 + len;
    }
    (records, true)
}

impl RecordLog {
    /// Loads `dir/choices.log` and rewrites it compacted (durably).
    pub fn open(dir: &Path, disk: &dyn Disk, temp: &Path) -> Result<RecordLog, StoreError> {
        let path = dir.join("choices.log");
        let bytes = match disk.read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(StoreError::Io { operation: "read", path, source: e }),
        };
        let marker = dir.join(CLEAN_MARKER);
        let clean = disk.read(&marker).is_ok();
        if clean {
            disk.remove(&marker).map_err(StoreError::io("remove", &marker))?;
        }
        // A log without a clean-shutdown marker: the server crashed, and may have lost the
        // records of its last moments.
        let crashed = !bytes.is_empty() && !clean;
        let grace_until = crashed.then(|| std::time::Instant::now() + RECORD_GRACE_AFTER_CRASH);
        if crashed {
            tracing::warn!(path = %path.display(), "no clean shutdown: refusing new choice records for {RECORD_GRACE_AFTER_CRASH:?}");
        }
        let (records, whole) = replay(&bytes);
        if !whole {
            tracing::warn!(path = %path.display(), "the choice log ends with a torn entry; dropped");
        }
        let mut compacted = Vec::new();
        for ((pool, key), record) in &records {
            compacted.extend_from_slice(&entry(OP_SET, *pool, key, record));
        }
        disk.write_temp(temp, &[&compacted], true).map_err(StoreError::io("write", temp))?;
        disk.publish(temp, &path).map_err(StoreError::io("rename", &path))?;
        let (durable, _) = tokio::sync::watch::channel(0);
        Ok(RecordLog {
            path,
            grace_until,
            state: Mutex::new(State {
                records: records.into_iter().map(|(k, r)| (k, (r, 0))).collect(),
                refused: HashMap::new(),
                queue: Vec::new(),
                queued_seq: 0,
            }),
            durable,
            commit: Mutex::new(()),
        })
    }

    /// Whether new records are refused for now (just after a crash).
    pub fn in_grace(&self) -> bool {
        self.grace_until.is_some_and(|until| std::time::Instant::now() < until)
    }

    /// Commits and leaves the clean-shutdown marker (the next start needs no grace).
    pub fn close(&self, disk: &dyn Disk, temp: &Path) -> Result<(), StoreError> {
        self.commit(disk)?;
        let marker = self.path.with_file_name(CLEAN_MARKER);
        disk.write_temp(temp, &[b"clean"], true).map_err(StoreError::io("write", temp))?;
        disk.publish(temp, &marker).map_err(StoreError::io("rename", &marker))
    }

    /// The record of a key.
    pub fn get(&self, pool: PoolId, key: &str) -> Option<ChoiceRecord> {
        self.state
            .lock()
            .expect("records lock")
            .records
            .get(&(pool, key.to_string()))
            .map(|(r, _)| *r)
    }

    /// Creates `record` unless one exists (or replaces it when its writer is
    /// `replace_if_writer`), atomically; returns the record in place, whether this call set
    /// it, and the sequence number to wait for.
    ///
    /// A replacement with `unless_contended` is refused (the record stays) when another
    /// writer's create of the same key was refused within [`CONTENTION_WINDOW`]: the copies
    /// its writer found elsewhere may be that loser's, sent ahead of its record request and
    /// about to be undone, so following them would split the object.
    pub fn create(
        &self,
        pool: PoolId,
        key: &str,
        record: ChoiceRecord,
        replace_if_writer: Option<u64>,
        unless_contended: bool,
    ) -> (ChoiceRecord, bool, u64) {
        let mut state = self.state.lock().expect("records lock");
        let id = (pool, key.to_string());
        if let Some((existing, seq)) = state.records.get(&id).copied() {
            let own = replace_if_writer == Some(existing.writer);
            let contended =
                state.refused.get(&id).is_some_and(|at| at.elapsed() < CONTENTION_WINDOW);
            if !own || (unless_contended && contended) {
                if !own && existing.writer != record.writer {
                    if state.refused.len() >= REFUSED_MAX {
                        state.refused.retain(|_, at| at.elapsed() < CONTENTION_WINDOW);
                    }
                    if state.refused.len() < REFUSED_MAX {
                        state.refused.insert(id, std::time::Instant::now());
                    }
                }
                return (existing, false, seq);
            }
        }
        state.queued_seq += 1;
        let seq = state.queued_seq;
        state.queue.extend_from_slice(&entry(OP_SET, pool, key, &record));
        state.records.insert((pool, key.to_string()), (record, seq));
        (record, true, seq)
    }

    /// Every record held, in (pool, key) order: a snapshot for the rebalancer.
    pub fn all(&self) -> Vec<(PoolId, String, ChoiceRecord)> {
        let state = self.state.lock().expect("records lock");
        let mut out: Vec<(PoolId, String, ChoiceRecord)> = state
            .records
            .iter()
            .map(|((pool, key), (record, _))| (*pool, key.clone(), *record))
            .collect();
        out.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        out
    }

    /// Removes a record; `None` when there was none, else the sequence number to wait for.
    pub fn remove(&self, pool: PoolId, key: &str) -> Option<u64> {
        let mut state = self.state.lock().expect("records lock");
        let (record, _) = state.records.remove(&(pool, key.to_string()))?;
        state.queued_seq += 1;
        let seq = state.queued_seq;
        state.queue.extend_from_slice(&entry(OP_REMOVE, pool, key, &record));
        Some(seq)
    }

    /// The sequence number up to which records are durable.
    pub fn durable_seq(&self) -> u64 {
        *self.durable.borrow()
    }

    /// The sequence number of the latest change to `key`'s record (0: none pending).
    pub fn seq_of(&self, pool: PoolId, key: &str) -> u64 {
        self.state
            .lock()
            .expect("records lock")
            .records
            .get(&(pool, key.to_string()))
            .map_or(0, |(_, s)| *s)
    }

    /// A receiver of the durable sequence number.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.durable.subscribe()
    }

    /// Appends what is queued and fsyncs it (blocking); one commit covers every record
    /// queued so far.
    pub fn commit(&self, disk: &dyn Disk) -> Result<(), StoreError> {
        let _commit = self.commit.lock().expect("commit lock");
        let (bytes, seq) = {
            let mut state = self.state.lock().expect("records lock");
            (std::mem::take(&mut state.queue), state.queued_seq)
        };
        if bytes.is_empty() {
            return Ok(());
        }
        if let Err(error) = disk.append(&self.path, &bytes) {
            // Keep the entries for the next commit, in order.
            let mut state = self.state.lock().expect("records lock");
            let mut queue = bytes;
            queue.extend_from_slice(&state.queue);
            state.queue = queue;
            return Err(StoreError::Io {
                operation: "append",
                path: self.path.clone(),
                source: error,
            });
        }
        self.durable.send_replace(seq);
        Ok(())
    }

    /// Forgets every record (the removals are logged): the device stopped being the home of
    /// its keys for a while — the map marked it down — so another device held their records
    /// meanwhile, and those must not be overridden by older ones kept here. Clients that find
    /// no record probe the candidates and follow the data (as after a lost record). Returns
    /// how many were dropped.
    pub fn clear(&self) -> usize {
        let mut state = self.state.lock().expect("records lock");
        let records = std::mem::take(&mut state.records);
        for ((pool, key), (record, _)) in &records {
            let entry = entry(OP_REMOVE, *pool, key, record);
            state.queue.extend_from_slice(&entry);
        }
        if !records.is_empty() {
            state.queued_seq += 1;
        }
        records.len()
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.state.lock().expect("records lock").records.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_cannot_follow_copies_while_a_loser_undoes_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let disk = crate::disk::RealDisk;
        let log = RecordLog::open(dir.path(), &disk, &dir.path().join("t")).expect("opens");
        let (a, b) = (0xa, 0xb);
        let record = |candidate, writer| ChoiceRecord { candidate, choices: 2, writer };
        let (r, created, _) = log.create(PoolId(1), "k", record(0, a), None, false);
        assert!(created && r.candidate == 0);
        // Without contention, the creator may re-point its own record.
        let (r, created, _) = log.create(PoolId(1), "k", record(1, a), Some(a), true);
        assert!(created && r.candidate == 1);
        // Another writer loses the race for the key…
        let (r, created, _) = log.create(PoolId(1), "k", record(0, b), None, false);
        assert!(!created && r.writer == a);
        // …so the creator's attempt to follow copies elsewhere is refused for a while.
        let (r, created, _) = log.create(PoolId(1), "k", record(0, a), Some(a), true);
        assert!(!created && r.candidate == 1, "the record stays");
        // A plain replacement by its writer (a full candidate, re-chosen) still works.
        let (r, created, _) = log.create(PoolId(1), "k", record(0, a), Some(a), false);
        assert!(created && r.candidate == 0);
    }

    #[test]
    fn cleared_records_stay_cleared_after_a_restart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let disk = crate::disk::RealDisk;
        let temp = dir.path().join("t");
        let log = RecordLog::open(dir.path(), &disk, &temp).expect("opens");
        let record = |candidate| ChoiceRecord { candidate, choices: 2, writer: 7 };
        log.create(PoolId(1), "a", record(0), None, false);
        log.create(PoolId(1), "b", record(1), None, false);
        log.commit(&disk).expect("commit");
        assert_eq!(log.clear(), 2);
        assert!(log.get(PoolId(1), "a").is_none());
        log.create(PoolId(1), "c", record(1), None, false);
        log.close(&disk, &temp).expect("close");
        let reopened = RecordLog::open(dir.path(), &disk, &temp).expect("reopens");
        assert_eq!(reopened.len(), 1, "the removals were logged");
        assert_eq!(reopened.get(PoolId(1), "c"), Some(record(1)));
    }

    #[test]
    fn replay_stops_at_a_torn_tail() {
        let r = |c| ChoiceRecord { candidate: c, choices: 2, writer: 9 };
        let mut log = entry(OP_SET, PoolId(1), "a", &r(0));
        log.extend(entry(OP_SET, PoolId(1), "b", &r(1)));
        log.extend(entry(OP_REMOVE, PoolId(1), "a", &r(0)));
        let (records, whole) = replay(&log);
        assert!(whole);
        assert_eq!(records.len(), 1);
        assert_eq!(records[&(PoolId(1), "b".to_string())], r(1));
        let mut torn = log.clone();
        torn.extend(&entry(OP_SET, PoolId(1), "c", &r(1))[..10]);
        let (records, whole) = replay(&torn);
        assert!(!whole);
        assert_eq!(records.len(), 1);
        let mut flipped = log;
        let last = flipped.len() - 6;
        flipped[last] ^= 1;
        let (records, whole) = replay(&flipped);
        assert!(!whole);
        assert_eq!(records.len(), 2, "the damaged removal is not applied");
    }
}
