//! Group commit (issue 39): concurrent writes to one device share their syncs.
//!
//! A write to a device is made durable in two steps — its data, then the rename that
//! publishes it — and each step used to cost every writer a sync of its own (an `fdatasync`
//! of its file, then an `fsync` of its directory). Here each step is a [`GroupCommit::barrier`]
//! instead: a writer that arrives at a barrier waits for a sync of the device's file system
//! (`syncfs`) that *starts after it arrived*; one waiting writer (the leader) runs that sync
//! while the others wait, and every writer that arrived before it started shares it. Under
//! load a sync serves a whole batch of writers, in the data step or the rename step of their
//! writes alike: with 16 writes in flight a device does a few syncs per batch instead of two
//! per write (docs/failures.md, "Durability and group commit", has the numbers and the
//! crash-safety argument).
//!
//! Why a barrier is enough: `syncfs` returns once every write to the file system that was in
//! the page cache when it started — file data, inodes, directory entries — is on stable
//! storage (ext4 and XFS also flush the disk's cache). Whatever a writer wrote before it
//! arrived at the barrier was in the page cache before the leader's sync started, so it is
//! durable when the barrier returns. Nothing is acknowledged before that.
//!
//! Errors: `syncfs` reports a writeback error once to each open descriptor of the file
//! system that was open when it happened (Linux ≥ 5.8). The device directory is opened once,
//! with the store, and kept open, so that no error between two syncs goes unreported. A sync
//! that fails may have dropped any write not yet synced — also those of writers that will
//! only arrive later — so the first failure is sticky: every barrier after it fails, and the
//! device acknowledges no write until the server restarts and re-verifies what it holds
//! (PostgreSQL treats a failed fsync the same way).

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crate::disk::Disk;

/// A device's group commit: shared syncs of its file system.
#[derive(Debug)]
pub struct GroupCommit {
    /// The device directory, open for the store's life (see the module's docs on errors).
    dir: File,
    state: Mutex<State>,
    done: Condvar,
    syncs: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// Syncs started (the number of the latest).
    started: u64,
    /// The number of the latest sync completed.
    completed: u64,
    /// Whether a leader is syncing.
    running: bool,
    /// The first sync that failed, why: every barrier fails from then on.
    failed: Option<String>,
}

impl GroupCommit {
    /// The group commit of the device directory `root` (opened now and kept open).
    pub fn open(root: &Path) -> io::Result<GroupCommit> {
        Ok(GroupCommit {
            dir: File::open(root)?,
            state: Mutex::new(State::default()),
            done: Condvar::new(),
            syncs: AtomicU64::new(0),
        })
    }

    /// Returns once a sync of the device's file system that started after this call has
    /// completed (blocking): everything the calling thread wrote before calling is durable
    /// then. Fails when that sync failed, or any sync before it did.
    pub fn barrier(&self, disk: &dyn Disk) -> io::Result<()> {
        let mut state = self.state.lock().expect("group commit lock is never poisoned");
        // The next sync to start is the first to start after now.
        let need = state.started + 1;
        loop {
            if let Some(reason) = &state.failed {
                return Err(failed(reason));
            }
            if state.completed >= need {
                return Ok(());
            }
            if state.running {
                state = self.done.wait(state).expect("group commit lock is never poisoned");
                continue;
            }
            // Lead: run the sync for everyone waiting.
            state.running = true;
            state.started += 1;
            let generation = state.started;
            drop(state);
            let result = disk.sync_fs_of(&self.dir);
            self.syncs.fetch_add(1, Ordering::Relaxed);
            state = self.state.lock().expect("group commit lock is never poisoned");
            state.running = false;
            state.completed = generation;
            if let Err(error) = &result {
                tracing::error!(%error, "a sync of the device failed: it acknowledges no write until the server restarts");
                state.failed.get_or_insert_with(|| error.to_string());
            }
            self.done.notify_all();
        }
    }

    /// Syncs run since the device was opened.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

fn failed(reason: &str) -> io::Error {
    io::Error::other(format!(
        "a sync of this device failed ({reason}); it acknowledges no write until the server \
         restarts"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{FaultyDisk, RealDisk};
    use std::sync::Arc;

    #[test]
    fn concurrent_writers_share_syncs_and_a_lone_one_gets_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let commit = Arc::new(GroupCommit::open(dir.path()).unwrap());
        commit.barrier(&RealDisk).unwrap();
        assert_eq!(commit.syncs(), 1);
        commit.barrier(&RealDisk).unwrap();
        assert_eq!(commit.syncs(), 2, "a barrier never reuses a sync that started before it");
        let writers: Vec<_> = (0..16)
            .map(|_| {
                let commit = commit.clone();
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        commit.barrier(&RealDisk).unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let syncs = commit.syncs() - 2;
        assert!(syncs <= 16 * 20, "{syncs}");
        assert!(syncs >= 20, "each writer waited for 20 syncs of its own: {syncs}");
    }

    #[test]
    fn a_failed_sync_fails_every_barrier_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let commit = GroupCommit::open(dir.path()).unwrap();
        let disk = FaultyDisk::new();
        commit.barrier(&disk).unwrap();
        disk.set_fault(Some(crate::disk::Fault::WriteError));
        assert!(commit.barrier(&disk).is_err());
        disk.set_fault(None);
        let error = commit.barrier(&disk).expect_err("sticky");
        assert!(error.to_string().contains("restarts"), "{error}");
    }
}
