//! The cleanup record: everything an emulation creates is written down *before* it is
//! created, in a record under [`REGISTRY_DIR`] (and a copy in the cluster directory), so that
//! whoever cleans up — the emulation itself on exit, its watchdog after a SIGKILL of the
//! supervisor, or the next emulation finding a stale record — removes exactly that.
//!
//! A live emulation holds an exclusive `flock` on `PREFIX.lock` beside its record (released by
//! the kernel however the process ends): a record whose lock can be taken has no owner left,
//! and is cleaned.
//!
//! Cleaning is idempotent and ordered: kill the processes in the record's cgroups and network
//! namespaces (all started by the emulation: servers, clients, hogs), remove the cgroups,
//! delete the namespaces (interfaces, bridges and qdiscs go with them), then the record.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::error::EmulateError;

/// The copy of the cleanup record kept in the cluster directory.
pub const RECORD_COPY_FILE: &str = "emulation-record.json";

/// Where live emulations keep their records (a tmpfs: a reboot, which removes namespaces and
/// cgroups too, removes the records).
pub const REGISTRY_DIR: &str = "/run/optio-emulate";
/// The record's format.
const RECORD_FORMAT: u32 = 1;
/// How long cleaning waits for killed processes to leave a cgroup.
const PROCESSES_GONE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two looks at a cgroup's processes (a bounded wait).
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long a watchdog waits for the lock its supervisor held.
pub const WATCHDOG_LOCK_WAIT: Duration = Duration::from_secs(30);
/// Most records a registry scan looks at.
const RECORDS_MAX: usize = 256;

/// What one emulation created (or was about to).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// Format of this file.
    pub format: u32,
    /// The emulation's prefix (every name it creates starts with it).
    pub prefix: String,
    /// The supervisor's pid.
    pub pid: u32,
    /// Second octet of its private addresses (`10.OCTET.RACK.HOST`).
    pub octet: u8,
    /// Its cluster directory.
    pub cluster_dir: PathBuf,
    /// Network namespaces, in order of creation.
    pub namespaces: Vec<String>,
    /// Cgroup directories, in order of creation.
    pub cgroups: Vec<PathBuf>,
}

/// A record this process owns: its lock is held while it lives.
#[derive(Debug)]
pub struct Held {
    path: PathBuf,
    copy: Option<PathBuf>,
    lock_path: PathBuf,
    /// The record as saved.
    pub record: Record,
    _lock: fs::File,
}

fn registry() -> PathBuf {
    PathBuf::from(REGISTRY_DIR)
}

fn record_path(prefix: &str) -> PathBuf {
    registry().join(format!("{prefix}.json"))
}

fn lock_path(prefix: &str) -> PathBuf {
    registry().join(format!("{prefix}.lock"))
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> EmulateError {
    move |source| EmulateError::Io { what, source }
}

impl Held {
    /// Takes `prefix`'s lock and writes its (empty) record; `copy`: a second copy to keep
    /// current (the cluster directory's).
    pub fn create(record: Record, copy: Option<PathBuf>) -> Result<Held, EmulateError> {
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(registry())
            .map_err(io(format!("cannot create {REGISTRY_DIR}")))?;
        let lock_path = lock_path(&record.prefix);
        let lock = optio_cluster::lockfile::hold(&lock_path, Duration::ZERO).map_err(|_| {
            EmulateError::Unsupported(format!(
                "the emulation prefix {} is in use: start again (prefixes are random)",
                record.prefix
            ))
        })?;
        let held = Held { path: record_path(&record.prefix), copy, lock_path, record, _lock: lock };
        held.save()?;
        Ok(held)
    }

    /// Writes the record (atomically) and its copy.
    pub fn save(&self) -> Result<(), EmulateError> {
        let text = serde_json::to_string_pretty(&self.record).expect("a record serializes");
        optio_cluster::durable::replace(&self.path, text.as_bytes())
            .map_err(io(format!("cannot write {}", self.path.display())))?;
        if let Some(copy) = &self.copy {
            optio_cluster::durable::replace(copy, text.as_bytes())
                .map_err(io(format!("cannot write {}", copy.display())))?;
        }
        Ok(())
    }

    /// Adds a namespace about to be created.
    pub fn add_namespace(&mut self, name: &str) -> Result<(), EmulateError> {
        self.record.namespaces.push(name.to_string());
        self.save()
    }

    /// Adds a cgroup directory about to be created.
    pub fn add_cgroup(&mut self, dir: &Path) -> Result<(), EmulateError> {
        self.record.cgroups.push(dir.to_path_buf());
        self.save()
    }

    /// The record file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Cleans everything up and removes the record (the lock file last).
    pub fn clean(&mut self) -> Result<(), EmulateError> {
        clean(&self.record)?;
        remove_files(&self.path, self.copy.as_deref(), &self.lock_path);
        Ok(())
    }
}

fn remove_files(record: &Path, copy: Option<&Path>, lock: &Path) {
    let _ = fs::remove_file(record);
    if let Some(copy) = copy {
        let _ = fs::remove_file(copy);
    }
    let _ = fs::remove_file(lock);
}

/// Every record in the registry (unreadable ones are skipped).
pub fn records() -> Vec<Record> {
    let Ok(entries) = fs::read_dir(registry()) else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .take(RECORDS_MAX)
        .filter_map(|p| serde_json::from_str::<Record>(&fs::read_to_string(p).ok()?).ok())
        .collect()
}

/// Cleans every record in the registry whose owner is gone (its lock can be taken); returns
/// the prefixes cleaned.
pub fn clean_stale() -> Result<Vec<String>, EmulateError> {
    let mut cleaned = Vec::new();
    for record in records() {
        let lock = lock_path(&record.prefix);
        let Ok(_held) = optio_cluster::lockfile::hold(&lock, Duration::ZERO) else { continue };
        // Still there, now that we hold the lock? (Another cleaner may have finished.)
        let path = record_path(&record.prefix);
        let Ok(text) = fs::read_to_string(&path) else {
            let _ = fs::remove_file(&lock);
            continue;
        };
        let current: Record = serde_json::from_str(&text).unwrap_or(record);
        clean(&current)?;
        let copy = current.cluster_dir.join(RECORD_COPY_FILE);
        remove_files(&path, Some(&copy), &lock);
        cleaned.push(current.prefix);
    }
    Ok(cleaned)
}

/// The watchdog's half: once the supervisor is gone (standard input closed without "done"),
/// take its lock and clean its record.
pub fn clean_after_supervisor(record_file: &Path) -> Result<bool, EmulateError> {
    let Some(prefix) = record_file.file_stem().and_then(|s| s.to_str()) else {
        return Err(EmulateError::Unsupported(format!(
            "{} is not an emulation record",
            record_file.display()
        )));
    };
    let lock = lock_path(prefix);
    let _held = optio_cluster::lockfile::hold(&lock, WATCHDOG_LOCK_WAIT).map_err(|_| {
        EmulateError::Unsupported(format!(
            "the emulation {prefix} is still held after {WATCHDOG_LOCK_WAIT:?}; not cleaning"
        ))
    })?;
    let Ok(text) = fs::read_to_string(record_file) else {
        // Cleaned already (by the supervisor, or a stale scan).
        let _ = fs::remove_file(&lock);
        return Ok(false);
    };
    let record: Record = serde_json::from_str(&text).map_err(|e| {
        EmulateError::Unsupported(format!("{} is unreadable: {e}", record_file.display()))
    })?;
    debug_assert_eq!(record.format, RECORD_FORMAT);
    clean(&record)?;
    let copy = record.cluster_dir.join(RECORD_COPY_FILE);
    remove_files(record_file, Some(&copy), &lock);
    Ok(true)
}

/// A new record for `prefix`.
pub fn new_record(prefix: &str, octet: u8, cluster_dir: &Path) -> Record {
    Record {
        format: RECORD_FORMAT,
        prefix: prefix.to_string(),
        pid: std::process::id(),
        octet,
        cluster_dir: cluster_dir.to_path_buf(),
        namespaces: Vec::new(),
        cgroups: Vec::new(),
    }
}

/// Kills `pid` with SIGKILL — never this process, which may itself be in one of the
/// namespaces (a supervisor watches its servers from the router's).
fn kill(pid: i32) {
    if u32::try_from(pid).is_ok_and(|p| p == std::process::id()) {
        return;
    }
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// The pids in a cgroup directory.
fn cgroup_pids(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// The pids in a network namespace (`ip netns pids`).
fn namespace_pids(name: &str) -> Vec<i32> {
    Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes what `record` names (idempotent: what is already gone is skipped).
pub fn clean(record: &Record) -> Result<(), EmulateError> {
    // Only names with the record's prefix are ever touched.
    let ours = |name: &str| name.starts_with(&record.prefix) && !record.prefix.is_empty();
    let cgroups: Vec<&PathBuf> = record
        .cgroups
        .iter()
        .filter(|d| d.file_name().and_then(|n| n.to_str()).is_some_and(ours))
        .collect();
    let namespaces: Vec<&String> = record.namespaces.iter().filter(|n| ours(n)).collect();
    // 1. Processes: every one in our cgroups and namespaces is one the emulation started.
    for dir in &cgroups {
        cgroup_pids(dir).into_iter().for_each(kill);
    }
    for name in &namespaces {
        namespace_pids(name).into_iter().for_each(kill);
    }
    // 2. Cgroups, children first (a cgroup holds no processes once they are reaped).
    let deadline = Instant::now() + PROCESSES_GONE_TIMEOUT;
    let mut left = Vec::new();
    for dir in cgroups.iter().rev() {
        if !dir.exists() {
            continue;
        }
        loop {
            match fs::remove_dir(dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) if Instant::now() >= deadline => {
                    left.push(format!("{} ({e})", dir.display()));
                    break;
                }
                Err(_) => {
                    cgroup_pids(dir).into_iter().for_each(kill);
                    std::thread::sleep(POLL_INTERVAL);
                }
            }
        }
    }
    // 3. Namespaces (their interfaces, bridges and qdiscs go with them).
    let existing = existing_namespaces();
    for name in namespaces.iter().rev() {
        if !existing.iter().any(|n| n == *name) {
            continue;
        }
        let output = Command::new("ip").args(["netns", "delete", name]).output();
        match output {
            Ok(o) if o.status.success() => {}
            Ok(o) => left.push(format!("{name} ({})", String::from_utf8_lossy(&o.stderr).trim())),
            Err(e) => left.push(format!("{name} ({e})")),
        }
    }
    if left.is_empty() {
        Ok(())
    } else {
        Err(EmulateError::Unsupported(format!(
            "could not remove everything of emulation {}: {}",
            record.prefix,
            left.join(", ")
        )))
    }
}

/// The network namespaces `ip netns` knows.
pub fn existing_namespaces() -> Vec<String> {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}
