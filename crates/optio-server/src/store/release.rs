//! Files replaced by smaller ones, closed in the background.
//!
//! Freeing a file's blocks is not free: on a file system mounted with online `discard` (ext4
//! here, and many cloud volumes) the blocks a truncate or an unlink frees are discarded
//! before the call returns — 1.7–2.4 ms for a 4 MiB file on this machine, in the caller's
//! thread. A delete that cut a 4 MiB object's file down to its tombstone in the device's
//! writer thread held every write queued behind it for that long: 4 MiB deletes ran at
//! 0.26–0.38× Ceph's (docs/benchmarks.md, "Large files freed in the background").
//!
//! So a large file replaced by a small one (a tombstone over a large object, a large object
//! rewritten smaller) is replaced by a rename, as any file is, with the old file held open
//! across it: the rename then only unlinks it, and the blocks go when the last descriptor
//! closes — in this thread, one per device, started at the first file it is given. The path
//! holds the whole new file from the rename on; nothing reads the old inode but readers that
//! opened it before. The thread ends once its store is dropped and what it holds is closed.

use std::fs::File;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};

/// A replaced file whose size reaches this is released in the background; a smaller one
/// frees less than this when cut or unlinked, which costs less than the rename and the open
/// that avoid it.
pub(crate) const RELEASE_FROM_BYTES: u64 = 64 << 10;

/// The queue of a device's releasing thread.
#[derive(Default)]
pub(crate) struct Releaser {
    queue: Mutex<Option<Sender<File>>>,
}

impl Releaser {
    /// Closes `file` in the releasing thread (started if it has not been, or if it died); in
    /// the caller's when no thread can be started.
    pub(crate) fn release(&self, file: File) {
        let mut queue = self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let file = match queue.as_ref() {
            Some(sender) => match sender.send(file) {
                Ok(()) => return,
                Err(returned) => returned.0,
            },
            None => file,
        };
        let (sender, receiver) = channel();
        match std::thread::Builder::new()
            .name("optio-release".into())
            .spawn(move || close_all(receiver))
        {
            Ok(_) => {
                // A new thread's receiver is alive until the sender below is dropped.
                let _ = sender.send(file);
                *queue = Some(sender);
            }
            Err(error) => {
                tracing::warn!(%error, "cannot start the thread that closes replaced files");
                drop(file);
            }
        }
    }
}

/// Closes each file received, until every sender is gone.
fn close_all(files: Receiver<File>) {
    for file in files {
        drop(file);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::time::{Duration, Instant};

    /// Waits (10 s at most, else fails) until this process no longer holds open an unlinked
    /// file of inode `ino`.
    pub(in crate::store) fn wait_until_closed(ino: u64) {
        let held = || {
            std::fs::read_dir("/proc/self/fd").unwrap().any(|fd| {
                std::fs::metadata(fd.unwrap().path())
                    .is_ok_and(|m| m.ino() == ino && m.nlink() == 0)
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while held() {
            assert!(Instant::now() < deadline, "inode {ino} is still open");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A file given is closed in the background: its descriptor leaves this process's table
    /// (and with it the last reference to its unlinked inode).
    #[test]
    fn a_file_given_is_closed_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let file = File::open(&path).unwrap();
        let ino = file.metadata().unwrap().ino();
        std::fs::remove_file(&path).unwrap();
        let releaser = Releaser::default();
        releaser.release(file);
        wait_until_closed(ino);
    }

    /// The thread's loop ends once every sender is gone (a store's releaser dropped), after
    /// closing what it was given.
    #[test]
    fn the_closing_loop_ends_when_its_senders_are_gone() {
        let (sender, receiver) = channel();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"a").unwrap();
        sender.send(File::open(dir.path().join("a")).unwrap()).unwrap();
        let thread = std::thread::spawn(move || close_all(receiver));
        drop(sender);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !thread.is_finished() {
            assert!(Instant::now() < deadline, "the loop is still running");
            std::thread::sleep(Duration::from_millis(5));
        }
        thread.join().unwrap();
    }
}
