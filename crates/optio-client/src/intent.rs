//! The intent log: a small local file of writes in flight, so that after a client crash the
//! objects whose writes were in doubt are re-probed and their replicas made to agree
//! (CHOICE: "we force it to re-probe all blocks in doubt upon recovery").
//!
//! Each client process appends to its own file, `{dir}/{pid}.intents`: a line
//! `B {id} {pool} {key}` before a write starts and `E {id}` when it has ended (acknowledged or
//! definitely failed); keys are percent-encoded. Lines are written with one `write` each, not
//! fsynced: they survive the crash of the process (the case the log is for); a machine crash
//! loses them, and then read repair by version does the same work later. A starting client
//! takes over the files of processes that no longer run ([`IntentLog::orphans`]).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use optio_proto::wire::{percent_decode, percent_encode};

/// An object whose write was in doubt.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct InDoubt {
    /// Pool id.
    pub pool: u32,
    /// Key.
    pub key: String,
}

/// This process's intent log.
#[derive(Debug)]
pub struct IntentLog {
    path: PathBuf,
    file: Mutex<File>,
    next: AtomicU64,
}

/// A write in flight; [`IntentLog::end`] closes it.
#[derive(Debug)]
#[must_use = "end the intent when the write has ended"]
pub struct Intent(u64);

impl IntentLog {
    /// Opens this process's log in `dir` (created if needed).
    pub fn open(dir: &Path) -> io::Result<IntentLog> {
        // The logs name object keys: the owner's only.
        optio_cluster::private::create_dir_all(dir)?;
        let path = dir.join(format!("{}.intents", std::process::id()));
        let file = optio_cluster::private::append(&path)?;
        Ok(IntentLog { path, file: Mutex::new(file), next: AtomicU64::new(1) })
    }

    /// Records that a write of `key` begins.
    pub fn begin(&self, pool: u32, key: &str) -> io::Result<Intent> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let line = format!("B {id} {pool} {}\n", percent_encode(key));
        self.file.lock().expect("intent lock").write_all(line.as_bytes())?;
        Ok(Intent(id))
    }

    /// Records that a write has ended.
    pub fn end(&self, intent: Intent) {
        let line = format!("E {}\n", intent.0);
        // Failing to record the end only costs a re-probe after a crash.
        let _ = self.file.lock().expect("intent lock").write_all(line.as_bytes());
    }

    /// Empties this process's log when nothing is in flight (keeps it small).
    pub fn compact_if_idle(&self, in_flight: usize) {
        if in_flight == 0 {
            let _ = self.file.lock().expect("intent lock").set_len(0);
        }
    }

    /// The writes in doubt in the logs of processes that no longer run, with the files they
    /// came from (remove those with [`IntentLog::forget`] once the objects are recovered).
    pub fn orphans(dir: &Path) -> io::Result<(Vec<InDoubt>, Vec<PathBuf>)> {
        let mut doubts = Vec::new();
        let mut files = Vec::new();
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((doubts, files)),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let path = entry?.path();
            let Some(pid) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".intents"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            // Another starting client may take the same log over and remove it between the
            // listing and this read: then it is that client's to recover, not an error.
            let text = match fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            doubts.extend(parse(&text));
            files.push(path);
        }
        doubts.sort();
        doubts.dedup();
        Ok((doubts, files))
    }

    /// Removes recovered logs.
    pub fn forget(files: &[PathBuf]) {
        for file in files {
            let _ = fs::remove_file(file);
        }
    }

    /// The file of this log.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for IntentLog {
    /// A client that ends normally has nothing in doubt: its log goes. (A crash skips this,
    /// which is the point.) Writes still in flight when the client is dropped leave their
    /// lines, and the next client re-probes them.
    fn drop(&mut self) {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        if parse(&text).is_empty() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The writes begun and not ended in a log's text (a torn last line is ignored).
fn parse(text: &str) -> Vec<InDoubt> {
    let mut open = BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.split(' ');
        match (parts.next(), parts.next().and_then(|id| id.parse::<u64>().ok())) {
            (Some("B"), Some(id)) => {
                let pool = parts.next().and_then(|p| p.parse::<u32>().ok());
                let key =
                    parts.next().and_then(percent_decode).and_then(|k| String::from_utf8(k).ok());
                if let (Some(pool), Some(key)) = (pool, key) {
                    open.insert(id, InDoubt { pool, key });
                }
            }
            (Some("E"), Some(id)) => {
                open.remove(&id);
            }
            _ => {}
        }
    }
    open.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begun_and_not_ended_is_in_doubt() {
        let text = "B 1 1 a\nB 2 1 b%20c\nE 1\nB 3 2 d\nE 3\nB 4 1 tor";
        assert_eq!(
            parse(text),
            vec![InDoubt { pool: 1, key: "b c".into() }, InDoubt { pool: 1, key: "tor".into() },]
        );
    }

    #[test]
    fn logs_of_live_processes_are_not_taken() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = IntentLog::open(dir.path()).expect("open");
        let _intent = log.begin(1, "k").expect("begin");
        let (doubts, files) = IntentLog::orphans(dir.path()).expect("scan");
        assert!(doubts.is_empty() && files.is_empty(), "our own log is live");
        // A log left by a process that is gone (pid numbers above pid_max never run).
        fs::write(dir.path().join("4194305.intents"), "B 7 1 lost\n").expect("write");
        let (doubts, files) = IntentLog::orphans(dir.path()).expect("scan");
        assert_eq!(doubts, vec![InDoubt { pool: 1, key: "lost".into() }]);
        IntentLog::forget(&files);
        assert!(!dir.path().join("4194305.intents").exists());
    }

    #[test]
    fn a_log_another_client_removed_meanwhile_is_not_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::write(dir.path().join("4194306.intents"), "B 1 1 kept\n").expect("write");
        // Listed, then gone before it is read (as when another starting client took it over
        // and removed it): a dangling link reads as "not found", every time.
        std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("4194307.intents"))
            .expect("symlink");
        let (doubts, files) = IntentLog::orphans(dir.path()).expect("a vanished log is skipped");
        assert_eq!(doubts, vec![InDoubt { pool: 1, key: "kept".into() }]);
        assert_eq!(files, vec![dir.path().join("4194306.intents")]);
    }
}
