//! What a dirty-table push costs, against its peers measured in the same run: a bare
//! `write` + `fdatasync` of one record (the local log's floor) and a bare `RPUSH` (the Redis
//! table's floor). Prints a Markdown table for `docs/dirty-table.md`.
//!
//! ```text
//! cargo run --release -p optio-cluster --example dirty_push_cost [-- DIR]
//! ```
//!
//! DIR (default: a temporary directory) should be on the disk the log will live on. The Redis
//! rows need Debian's `redis-server` (started here on a free loopback port).

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use optio_cluster::dirty::{DirtyEntry, DirtyTable};
use optio_local::redis::RedisServer;

/// Sequential pushes per measurement.
const SEQUENTIAL_PUSHES: u64 = 1000;
/// Concurrent pushers, and pushes each.
const TASKS: u64 = 64;
const PUSHES_PER_TASK: u64 = 50;

fn entry(task: u64, seq: u64) -> DirtyEntry {
    DirtyEntry { pool: task as u32, key: format!("bucket/object-{task}-{seq:08}"), version: 7 }
}

fn row(what: &str, pushes: u64, elapsed: Duration, peer: Option<Duration>) {
    let per_push_us = elapsed.as_secs_f64() * 1e6 / pushes as f64;
    let per_second = pushes as f64 / elapsed.as_secs_f64();
    let ratio = peer.map_or(String::from("–"), |peer| {
        format!("{:.2}×", elapsed.as_secs_f64() / peer.as_secs_f64())
    });
    println!("| {what} | {pushes} | {per_push_us:.1} | {per_second:.0} | {ratio} |");
}

async fn sequential(table: &DirtyTable) -> Duration {
    let start = Instant::now();
    for seq in 0..SEQUENTIAL_PUSHES {
        table.push(&[entry(0, seq)]).await.expect("push");
    }
    start.elapsed()
}

async fn concurrent(table: Arc<DirtyTable>) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let table = table.clone();
            tokio::spawn(async move {
                for seq in 0..PUSHES_PER_TASK {
                    table.push(&[entry(task, seq)]).await.expect("push");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    start.elapsed()
}

/// The floor of a durable local append: one `pwrite` and one `fdatasync` per record.
fn bare_fdatasync(dir: &Path) -> Duration {
    let path = dir.join("bare-fdatasync");
    let file = std::fs::File::create(&path).expect("create");
    let record = [0x5a_u8; 44];
    let start = Instant::now();
    for seq in 0..SEQUENTIAL_PUSHES {
        file.write_all_at(&record, seq * record.len() as u64).expect("write");
        file.sync_data().expect("fdatasync");
    }
    let elapsed = start.elapsed();
    std::fs::remove_file(path).expect("remove");
    elapsed
}

/// The floor of a Redis push: one `RPUSH` round trip per record.
async fn bare_rpush(url: &str) -> Duration {
    let client = redis::Client::open(url).expect("url");
    let mut connection = client.get_multiplexed_async_connection().await.expect("connect");
    let start = Instant::now();
    for _ in 0..SEQUENTIAL_PUSHES {
        let _: u64 = redis::cmd("RPUSH")
            .arg("bare")
            .arg(&[0x5a_u8; 36][..])
            .query_async(&mut connection)
            .await
            .expect("RPUSH");
    }
    start.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = std::env::args().nth(1).map_or(temp.path().to_path_buf(), Into::into);
    std::fs::create_dir_all(&dir).expect("dir");
    let concurrent_pushes = TASKS * PUSHES_PER_TASK;
    println!("| push of one entry | pushes | µs per push | pushes/s | × peer |");
    println!("|---|---:|---:|---:|---:|");

    let floor = bare_fdatasync(&dir);
    row("peer: bare pwrite + fdatasync", SEQUENTIAL_PUSHES, floor, None);
    let local = DirtyTable::open(None, &dir.join("cost-local")).await.expect("open");
    row("local log, one pusher", SEQUENTIAL_PUSHES, sequential(&local).await, Some(floor));
    let local = Arc::new(local);
    let elapsed = concurrent(local).await;
    row(&format!("local log, {TASKS} concurrent pushers"), concurrent_pushes, elapsed, None);

    let Ok(mut redis) = RedisServer::start() else {
        println!("\n(redis-server not installed: no Redis rows)");
        return;
    };
    let url = redis.url();
    let floor = bare_rpush(&url).await;
    row("peer: bare RPUSH", SEQUENTIAL_PUSHES, floor, None);
    let spec = format!("{url}?list=cost");
    let table = DirtyTable::open(Some(&spec), &dir.join("cost-redis")).await.expect("open");
    row("Redis table, one pusher", SEQUENTIAL_PUSHES, sequential(&table).await, Some(floor));
    let table = Arc::new(table);
    let elapsed = concurrent(table.clone()).await;
    row(&format!("Redis table, {TASKS} concurrent pushers"), concurrent_pushes, elapsed, None);
    redis.stop().expect("stop");
    row(
        "Redis down: into the spill, one pusher",
        SEQUENTIAL_PUSHES,
        sequential(&table).await,
        None,
    );
    std::io::stdout().flush().expect("flush");
}
