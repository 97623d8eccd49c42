//! Proves that the local dirty log is a durable FIFO: order across push/range/pop, every entry
//! exactly once under concurrent pushes from tasks and from processes (one killed with SIGKILL
//! mid-stream), torn tails cut on reopen, compaction (forced, automatic, interrupted) keeping
//! order and content, and clear errors for bad entries, specs and damaged files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use optio_cluster::dirty::{
    DirtyEntry, DirtyError, DirtyTable, KEY_BYTES_MAX, LocalDirtyLog, PUSH_ENTRIES_MAX,
    RANGE_ENTRIES_MAX,
};

/// The environment variable that turns the test binary into a child appender.
const CHILD_ENV: &str = "OPTIO_DIRTY_TEST_CHILD";
/// The test a child runs.
const CHILD_TEST: &str = "dirty_local::child_appender";

pub fn entry(pool: u32, seq: u64) -> DirtyEntry {
    DirtyEntry { pool, key: format!("obj {pool}/{seq}\nwith newline"), version: seq }
}

/// Reads the whole table, oldest first.
pub async fn read_all(table: &DirtyTable) -> Vec<DirtyEntry> {
    let mut all = Vec::new();
    loop {
        let chunk = table.range(all.len() as u64, RANGE_ENTRIES_MAX).await.expect("range");
        if chunk.is_empty() {
            return all;
        }
        all.extend(chunk);
    }
}

/// FIFO order across push, range and pop, with LRANGE/LPOP semantics at the edges.
pub async fn check_fifo(table: &DirtyTable) {
    let [a, b, c, d] = [entry(1, 0), entry(1, 1), entry(2, 2), entry(1, 3)];
    assert_eq!(table.len().await.unwrap(), 0);
    assert!(table.is_empty().await.unwrap());
    table.push(&[a.clone(), b.clone(), c.clone()]).await.unwrap();
    table.push(&[]).await.unwrap();
    table.push(std::slice::from_ref(&d)).await.unwrap();
    assert_eq!(table.len().await.unwrap(), 4);
    assert_eq!(table.range(0, 2).await.unwrap(), [a.clone(), b.clone()]);
    assert_eq!(table.range(1, 10).await.unwrap(), [b.clone(), c.clone(), d.clone()]);
    assert_eq!(table.range(3, 0).await.unwrap(), []);
    assert_eq!(table.range(4, 1).await.unwrap(), []);
    assert_eq!(table.range(u64::MAX, 1).await.unwrap(), []);
    assert_eq!(table.pop_front(0).await.unwrap(), 0);
    assert_eq!(table.pop_front(3).await.unwrap(), 3);
    assert_eq!(table.range(0, 10).await.unwrap(), std::slice::from_ref(&d));
    let e = entry(3, 4);
    table.push(std::slice::from_ref(&e)).await.unwrap();
    assert_eq!(table.range(0, 10).await.unwrap(), [d, e]);
    assert_eq!(table.pop_front(5).await.unwrap(), 2);
    assert_eq!(table.len().await.unwrap(), 0);
    assert_eq!(table.pop_front(1).await.unwrap(), 0);
    assert_eq!(table.range(0, 10).await.unwrap(), []);
}

/// Asserts that `entries` hold, for each pool in `expected`, exactly the sequence numbers
/// `0..count`, each once, in order.
fn assert_each_once_in_order(entries: &[DirtyEntry], expected: &BTreeMap<u32, u64>) {
    let mut next: BTreeMap<u32, u64> = BTreeMap::new();
    for entry in entries {
        let seq = next.entry(entry.pool).or_default();
        assert_eq!(
            *entry,
            self::entry(entry.pool, *seq),
            "pool {} out of order or torn",
            entry.pool
        );
        *seq += 1;
    }
    assert_eq!(&next, expected);
}

async fn open_local(dir: &Path) -> DirtyTable {
    DirtyTable::open(None, dir).await.expect("the local log opens")
}

#[tokio::test]
async fn local_log_is_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let table = open_local(dir.path()).await;
    assert!(table.describe().contains("local log in"), "{}", table.describe());
    check_fifo(&table).await;
    // The same through the explicit spec, after reopening.
    drop(table);
    let table = DirtyTable::open(Some("local"), dir.path()).await.unwrap();
    assert_eq!(table.len().await.unwrap(), 0);
    table.push(&[entry(9, 0)]).await.unwrap();
    drop(table);
    assert_eq!(open_local(dir.path()).await.range(0, 5).await.unwrap(), [entry(9, 0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pushes_from_tasks_are_each_stored_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let table = std::sync::Arc::new(open_local(dir.path()).await);
    let tasks = 8u32;
    let pushes = 60u64;
    let mut handles = Vec::new();
    for pool in 0..tasks {
        let table = table.clone();
        handles.push(tokio::spawn(async move {
            let mut seq = 0;
            for push in 0..pushes {
                let batch: Vec<_> = (0..1 + push % 3).map(|i| entry(pool, seq + i)).collect();
                seq += batch.len() as u64;
                table.push(&batch).await.expect("push");
            }
            seq
        }));
    }
    let mut expected = BTreeMap::new();
    for (pool, handle) in handles.into_iter().enumerate() {
        expected.insert(pool as u32, handle.await.unwrap());
    }
    assert_each_once_in_order(&read_all(&table).await, &expected);
    // A fresh open (as after a restart) reads the same.
    assert_each_once_in_order(&read_all(&open_local(dir.path()).await).await, &expected);
}

/// Not a test on its own: the body of a child process started by the tests below (it does
/// nothing unless [`CHILD_ENV`] is set). `CHILD_ENV` = `DIR;POOL;COUNT` pushes COUNT entries
/// of pool POOL in batches of 1 to 4; COUNT = `forever` pushes one at a time until killed.
#[test]
fn child_appender() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(';').collect();
    let [dir, pool, count] = parts[..] else { panic!("bad {CHILD_ENV}: {spec}") };
    let pool: u32 = pool.parse().unwrap();
    let count: u64 = if count == "forever" { u64::MAX } else { count.parse().unwrap() };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let log = LocalDirtyLog::open(Path::new(dir)).await.unwrap();
        let mut seq = 0;
        while seq < count {
            let size = if count == u64::MAX { 1 } else { (1 + seq % 4).min(count - seq) };
            let batch: Vec<_> = (seq..seq + size).map(|s| entry(pool, s)).collect();
            log.push(&batch).await.unwrap();
            seq += size;
        }
    });
}

fn spawn_child(dir: &Path, pool: u32, count: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{};{pool};{count}", dir.display()))
        .stdout(Stdio::null())
        .spawn()
        .expect("the test binary re-runs as a child")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pushes_from_processes_are_each_stored_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("dirty");
    let table = open_local(dir.path()).await;
    let count = 300u64;
    let children: Vec<_> = (1..=4).map(|pool| spawn_child(&log_dir, pool, "300")).collect();
    // The parent appends at the same time, as pool 0.
    for seq in 0..count {
        table.push(&[entry(0, seq)]).await.unwrap();
    }
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a child appender failed");
    }
    let expected = (0..=4).map(|pool| (pool, count)).collect();
    assert_each_once_in_order(&read_all(&table).await, &expected);
}

#[tokio::test]
async fn a_process_killed_while_pushing_leaves_no_gap_and_no_torn_record() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("dirty");
    let table = open_local(dir.path()).await;
    let mut child = spawn_child(&log_dir, 1, "forever");
    let deadline = Instant::now() + Duration::from_secs(30);
    while table.len().await.unwrap() < 100 {
        assert!(Instant::now() < deadline, "the child did not push 100 entries in 30 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    table.push(&[entry(0, 0), entry(0, 1)]).await.unwrap();
    let all = read_all(&table).await;
    let pushed_by_child = all.iter().filter(|e| e.pool == 1).count() as u64;
    assert!(pushed_by_child >= 100);
    assert_eq!(all[all.len() - 2..], [entry(0, 0), entry(0, 1)]);
    assert_each_once_in_order(&all, &BTreeMap::from([(0, 2), (1, pushed_by_child)]));
}

fn log_file(dir: &Path) -> PathBuf {
    dir.join("dirty").join("log")
}

#[tokio::test]
async fn a_torn_tail_is_cut_on_reopen_and_every_complete_record_kept() {
    let dir = tempfile::tempdir().unwrap();
    let table = open_local(dir.path()).await;
    for seq in 0..10 {
        table.push(&[entry(1, seq)]).await.unwrap();
    }
    drop(table);
    let path = log_file(dir.path());
    let full = std::fs::metadata(&path).unwrap().len();
    // A crash in the middle of the last record's write.
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(full - 5).unwrap();
    let table = open_local(dir.path()).await;
    let nine: Vec<_> = (0..9).map(|seq| entry(1, seq)).collect();
    assert_eq!(table.range(0, 100).await.unwrap(), nine);
    let record_bytes = 8 + 13 + entry(1, 9).key.len() as u64;
    assert_eq!(std::fs::metadata(&path).unwrap().len(), full - record_bytes, "tail cut");
    table.push(&[entry(1, 9)]).await.unwrap();
    drop(table);

    // Garbage after the last record (a torn write of a longer record) is cut too.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0x2a, 0, 0, 0, 1, 2, 3, 4, 5, 6]);
    std::fs::write(&path, &bytes).unwrap();
    let table = open_local(dir.path()).await;
    table.push(&[entry(1, 10)]).await.unwrap();
    let eleven: Vec<_> = (0..11).map(|seq| entry(1, seq)).collect();
    assert_eq!(table.range(0, 100).await.unwrap(), eleven);
    assert_eq!(open_local(dir.path()).await.range(0, 100).await.unwrap(), eleven);
}

#[tokio::test]
async fn an_appender_cuts_a_torn_tail_left_while_it_was_open() {
    let dir = tempfile::tempdir().unwrap();
    let table = open_local(dir.path()).await;
    table.push(&[entry(1, 0)]).await.unwrap();
    // Another process died in the middle of its write.
    let path = log_file(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    let one_record = bytes.len() as u64;
    bytes.extend_from_slice(&[0x20, 0, 0, 0, 9, 9]);
    bytes.extend_from_slice(&[0x55; 300]);
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(table.len().await.unwrap(), 1, "a reader stops at the torn record");
    table.push(&[entry(1, 1)]).await.unwrap();
    assert_eq!(table.range(0, 10).await.unwrap(), [entry(1, 0), entry(1, 1)]);
    let two_records = 2 * one_record - 32;
    assert_eq!(std::fs::metadata(&path).unwrap().len(), two_records, "the torn tail was cut");
}

#[tokio::test]
async fn compaction_keeps_order_and_content_for_every_handle() {
    let dir = tempfile::tempdir().unwrap();
    let a = LocalDirtyLog::open(&dir.path().join("dirty")).await.unwrap();
    let b = LocalDirtyLog::open(&dir.path().join("dirty")).await.unwrap();
    let all: Vec<_> = (0..1000).map(|seq| entry(seq as u32 % 7, seq)).collect();
    for chunk in all.chunks(100) {
        a.push(chunk).await.unwrap();
    }
    assert_eq!(b.range(990, 20).await.unwrap(), all[990..]);
    assert_eq!(a.pop_front(600).await.unwrap(), 600);
    let before = std::fs::metadata(a.log_path()).unwrap().len();
    assert!(a.compact().await.unwrap());
    assert!(!a.compact().await.unwrap(), "nothing left to drop");
    let after = std::fs::metadata(a.log_path()).unwrap().len();
    assert!(after < before / 2, "{after} bytes after, {before} before");
    // `b` read the old file: it must notice the new generation.
    assert_eq!(b.len().await.unwrap(), 400);
    assert_eq!(b.range(0, 1000).await.unwrap(), all[600..]);
    assert_eq!(b.range(300, 5).await.unwrap(), all[900..905]);
    assert_eq!(b.pop_front(100).await.unwrap(), 100);
    b.push(&[entry(9, 1000)]).await.unwrap();
    let mut rest = all[700..].to_vec();
    rest.push(entry(9, 1000));
    assert_eq!(a.range(0, 1000).await.unwrap(), rest);
    let reopened = LocalDirtyLog::open(a.dir()).await.unwrap();
    assert_eq!(reopened.range(0, 1000).await.unwrap(), rest);
}

#[tokio::test]
async fn compaction_runs_by_itself_once_the_popped_prefix_is_large() {
    let dir = tempfile::tempdir().unwrap();
    let log = LocalDirtyLog::open(&dir.path().join("dirty")).await.unwrap();
    let long = |seq: u64| DirtyEntry { pool: 1, key: format!("{seq:0>1000}"), version: seq };
    for push in 0..3 {
        let batch: Vec<_> = (0..PUSH_ENTRIES_MAX as u64).map(|i| long(push * 4096 + i)).collect();
        log.push(&batch).await.unwrap();
    }
    let before = std::fs::metadata(log.log_path()).unwrap().len();
    assert_eq!(log.pop_front(RANGE_ENTRIES_MAX as u64).await.unwrap(), RANGE_ENTRIES_MAX as u64);
    let after = std::fs::metadata(log.log_path()).unwrap().len();
    assert!(after < before / 4, "compacted: {after} bytes after, {before} before");
    let expected: Vec<_> = (10_000..3 * 4096).map(long).collect();
    assert_eq!(log.range(0, 5000).await.unwrap(), expected);
}

#[tokio::test]
async fn a_crash_in_the_middle_of_compaction_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("dirty");
    let log = LocalDirtyLog::open(&log_dir).await.unwrap();
    let all: Vec<_> = (0..50).map(|seq| entry(2, seq)).collect();
    log.push(&all).await.unwrap();
    log.pop_front(20).await.unwrap();
    // Crash after the rename, before the head is reset: the old head stays.
    let old_head = std::fs::read(log_dir.join("head")).unwrap();
    log.compact().await.unwrap();
    std::fs::write(log_dir.join("head"), old_head).unwrap();
    // And an unfinished compaction file from an earlier crash.
    std::fs::write(log_dir.join("log.compact"), b"half a file").unwrap();
    drop(log);
    let log = LocalDirtyLog::open(&log_dir).await.unwrap();
    assert_eq!(log.range(0, 100).await.unwrap(), all[20..]);
    assert!(!log_dir.join("log.compact").exists());
}

#[tokio::test]
async fn bad_entries_and_counts_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let table = open_local(dir.path()).await;
    let bad = |key: String| vec![entry(1, 0), DirtyEntry { pool: 4, key, version: 1 }];
    for (key, reason) in [
        (String::new(), "empty"),
        ("a\0b".to_string(), "NUL"),
        ("k".repeat(KEY_BYTES_MAX + 1), "at most 1024"),
    ] {
        let error = table.push(&bad(key)).await.unwrap_err();
        assert!(matches!(error, DirtyError::InvalidEntry { index: 1, pool: 4, .. }), "{error:?}");
        assert!(error.to_string().contains(reason), "{error}");
    }
    let many: Vec<_> = (0..PUSH_ENTRIES_MAX as u64 + 1).map(|seq| entry(1, seq)).collect();
    let error = table.push(&many).await.unwrap_err();
    assert!(matches!(error, DirtyError::TooMany { operation: "push", .. }), "{error:?}");
    assert!(error.to_string().contains("split it"), "{error}");
    assert!(matches!(table.range(0, RANGE_ENTRIES_MAX + 1).await, Err(DirtyError::TooMany { .. })));
    assert!(matches!(
        table.pop_front(RANGE_ENTRIES_MAX as u64 + 1).await,
        Err(DirtyError::TooMany { .. })
    ));
    assert_eq!(table.len().await.unwrap(), 0);
    table
        .push(&[DirtyEntry { pool: 0, key: "k".repeat(KEY_BYTES_MAX), version: 0 }])
        .await
        .unwrap();
    assert_eq!(table.len().await.unwrap(), 1);
}

#[tokio::test]
async fn bad_specs_say_what_is_wrong_and_what_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    for spec in [
        "",
        "file",
        "Local",
        "redis+unix:///r.sock",
        "redis://",
        "redis://h:1?list=a b",
        "redis://h:1?x=1",
    ] {
        let error = DirtyTable::open(Some(spec), dir.path()).await.unwrap_err();
        assert!(matches!(error, DirtyError::InvalidSpec { .. }), "{spec}: {error:?}");
        let message = error.to_string();
        assert!(message.contains("use `local` or `redis://[USER@]HOST:PORT"), "{message}");
    }
}

#[tokio::test]
async fn a_damaged_header_is_reported_not_repaired() {
    let dir = tempfile::tempdir().unwrap();
    open_local(dir.path()).await.push(&[entry(1, 1)]).await.unwrap();
    let path = log_file(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[3] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let error = DirtyTable::open(None, dir.path()).await.unwrap_err();
    assert!(matches!(error, DirtyError::Corrupt { offset: 0, .. }), "{error:?}");
    assert!(error.to_string().contains("move the directory aside"), "{error}");
}
