//! The async runtime of the commands that talk to a cluster.

use anyhow::{Context, Result};

/// A multi-threaded runtime for the commands that talk to servers.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    runtime_with_workers(None)
}

/// A multi-threaded runtime with `workers` worker threads (default: tokio's, one per core,
/// or `TOKIO_WORKER_THREADS`).
pub fn runtime_with_workers(workers: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    builder.enable_all().build().context("cannot start the async runtime")
}

/// How a daemon's threads are scheduled (`--scheduling` of `optio server`, `optio s3` and
/// `optio nbd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheduling {
    /// Linux's `SCHED_BATCH`: a thread woken does not preempt the one running, so a thread
    /// that answers a request keeps its core until it blocks instead of being switched out by
    /// each peer it wakes. Same priority and share of the CPU as `normal`; fewer context
    /// switches where servers and clients share cores (docs/benchmarks.md "Batch
    /// scheduling").
    Batch,
    /// The system's default (`SCHED_OTHER`): a thread woken may preempt the one running.
    Normal,
}

/// `--scheduling`, the same for every daemon.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct SchedulingArgs {
    /// How this daemon's threads are scheduled: `batch` (Linux's SCHED_BATCH: a thread woken
    /// does not preempt one running; same priority and CPU share) or `normal` (SCHED_OTHER).
    /// Default: as the daemon was started (the system's default, or what `chrt` set). Where
    /// clients share the servers' cores, `batch` made small requests faster and 4 MiB reads
    /// slower (docs/benchmarks.md, "Batch scheduling").
    #[arg(long, value_enum, env = "OPTIO_SCHEDULING", value_name = "POLICY")]
    pub scheduling: Option<Scheduling>,
}

/// Sets the calling thread's scheduling policy; threads it starts afterwards (a runtime's
/// workers, their blocking pool, the store's writers) inherit it. Call it before the runtime
/// is built. The policy needs no privilege (`SCHED_BATCH` keeps the nice value).
#[allow(unsafe_code)]
pub fn set_scheduling(scheduling: Scheduling) -> Result<()> {
    let policy = match scheduling {
        Scheduling::Batch => libc::SCHED_BATCH,
        Scheduling::Normal => libc::SCHED_OTHER,
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler` reads `param`, a valid `sched_param` that lives across the
    // call; pid 0 is the calling thread, whose policy is all it changes.
    let status = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if status != 0 {
        let error = std::io::Error::last_os_error();
        anyhow::bail!("cannot set the scheduling policy to {scheduling:?}: {error}");
    }
    Ok(())
}

/// A daemon's `--scheduling`, if given, set before its first thread starts. A policy the
/// system refuses (a sandbox's filter) is a warning, not a reason not to serve: the daemon
/// keeps the policy it was started with.
pub fn schedule_daemon(args: SchedulingArgs) {
    let Some(scheduling) = args.scheduling else { return };
    if let Err(error) = set_scheduling(scheduling) {
        eprintln!("warning: {error:#}; running with the policy it was started with");
    }
}

/// The calling thread's scheduling policy (`libc::SCHED_*`).
#[cfg(test)]
#[allow(unsafe_code)]
fn scheduling_policy() -> i32 {
    // SAFETY: `sched_getscheduler` only reads the policy of the calling thread (pid 0).
    unsafe { libc::sched_getscheduler(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread set to batch is batch, and so is a thread it starts; normal sets it back.
    #[test]
    fn batch_scheduling_is_set_and_inherited_and_normal_undoes_it() {
        std::thread::spawn(|| {
            set_scheduling(Scheduling::Batch).unwrap();
            assert_eq!(scheduling_policy(), libc::SCHED_BATCH);
            let child = std::thread::spawn(scheduling_policy).join().unwrap();
            assert_eq!(child, libc::SCHED_BATCH);
            set_scheduling(Scheduling::Normal).unwrap();
            assert_eq!(scheduling_policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
