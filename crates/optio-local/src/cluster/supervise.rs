//! Supervision: `optio up` restarts a server that dies (with backoff), and — playing the
//! monitor's part for its cluster, with the map in a file or in etcd — marks a server's
//! devices `down` in the map once it has not answered for the down grace, `out` after the
//! out grace (its data is then re-replicated elsewhere by rebalancing), and back `up`/`in`
//! when it answers again.
//!
//! A server *answers* when its process runs and `/health` answers. Only the devices the
//! supervisor marked out are marked in again: a device an operator set out stays out.

use std::time::{Duration, Instant};

use optio_cluster::monitor::{self, Graces, Leadership, Marked, Monitor};

use super::LocalCluster;
use crate::LocalError;

pub use optio_cluster::monitor::{DOWN_GRACE_DEFAULT, OUT_GRACE_DEFAULT};
/// First wait before restarting a server that died; doubles up to the maximum.
pub const RESTART_BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Longest wait between two restarts.
pub const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A server that ran this long since its last restart starts again from the shortest wait.
const RESTART_BACKOFF_RESET: Duration = Duration::from_secs(60);

/// What the supervisor does.
#[derive(Clone, Debug)]
pub struct Supervision {
    /// Restart servers that die.
    pub restart: bool,
    /// Mark devices down after this long without an answer.
    pub down_grace: Duration,
    /// Mark them out after this long.
    pub out_grace: Duration,
}

impl Default for Supervision {
    fn default() -> Supervision {
        Supervision { restart: true, down_grace: DOWN_GRACE_DEFAULT, out_grace: OUT_GRACE_DEFAULT }
    }
}

/// What the supervisor knows of one server.
#[derive(Clone, Debug, Default)]
pub(super) struct Watch {
    /// When it was last (re)started.
    started: Option<Instant>,
    /// When to try the next restart.
    next_restart: Option<Instant>,
    /// The wait before the restart after that.
    backoff: Duration,
    /// Restarts so far.
    pub(super) restarts: u32,
}

/// Something the supervisor did or saw, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A server's process ended.
    Died {
        /// The host.
        host: String,
        /// How it ended.
        status: String,
    },
    /// A server was restarted.
    Restarted {
        /// The host.
        host: String,
        /// Restarts so far.
        restarts: u32,
    },
    /// A restart failed; the next is due after `retry_in`.
    RestartFailed {
        /// The host.
        host: String,
        /// Why.
        error: String,
        /// Wait before the next attempt.
        retry_in: Duration,
    },
    /// The monitor marked devices down, out, up or in.
    Marked(Marked),
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Died { host, status } => write!(f, "server {host} died ({status})"),
            Event::Restarted { host, restarts } => {
                write!(f, "server {host} restarted (restart {restarts})")
            }
            Event::RestartFailed { host, error, retry_in } => {
                write!(f, "server {host} did not restart: {error}; retrying in {retry_in:?}")
            }
            Event::Marked(marked) => marked.fmt(f),
        }
    }
}

impl LocalCluster {
    /// One round of supervision at `now`: restarts dead servers that are due, marks devices
    /// down/out/up/in as the graces say. Call it every few hundred milliseconds.
    pub fn supervise(&mut self, policy: &Supervision) -> Result<Vec<Event>, LocalError> {
        let mut events = Vec::new();
        let now = Instant::now();
        for i in 0..self.servers.len() {
            self.check_process(i, policy, now, &mut events);
        }
        self.mark_states(policy, &mut events)?;
        Ok(events)
    }

    /// Notes a server whose process ended, and restarts it when due.
    fn check_process(
        &mut self,
        i: usize,
        policy: &Supervision,
        now: Instant,
        events: &mut Vec<Event>,
    ) {
        let server = &mut self.servers[i];
        if let Some(child) = server.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            server.child = None;
            server.stdin = None;
            server._stdout = None;
            events.push(Event::Died { host: server.host.clone(), status: status.to_string() });
            let watch = &mut self.watches[i];
            let ran_long = watch.started.is_some_and(|s| now - s >= RESTART_BACKOFF_RESET);
            if ran_long || watch.backoff.is_zero() {
                watch.backoff = RESTART_BACKOFF_MIN;
            }
            watch.next_restart = Some(now + watch.backoff);
        }
        let watch = &self.watches[i];
        let due = watch.next_restart.is_some_and(|at| now >= at);
        if !(policy.restart && due && self.servers[i].child.is_none()) {
            return;
        }
        let host = self.servers[i].host.clone();
        match self.respawn(i) {
            Ok(()) => {
                let watch = &mut self.watches[i];
                watch.restarts += 1;
                watch.started = Some(Instant::now());
                watch.next_restart = None;
                watch.backoff = (watch.backoff * 2).min(RESTART_BACKOFF_MAX);
                events.push(Event::Restarted { host, restarts: watch.restarts });
            }
            Err(error) => {
                let watch = &mut self.watches[i];
                let retry_in = watch.backoff;
                watch.next_restart = Some(Instant::now() + retry_in);
                watch.backoff = (watch.backoff * 2).min(RESTART_BACKOFF_MAX);
                events.push(Event::RestartFailed { host, error: error.to_string(), retry_in });
            }
        }
    }

    /// Marks devices down/out/up/in as the graces say ([`optio_cluster::monitor`]), as the
    /// cluster's acting monitor (taken at the first round: a second monitor of the same
    /// cluster is refused).
    fn mark_states(
        &mut self,
        policy: &Supervision,
        events: &mut Vec<Event>,
    ) -> Result<(), LocalError> {
        let graces = Graces { down: policy.down_grace, out: policy.out_grace };
        if self.monitor.is_none() {
            let holder = format!("optio up (pid {})", std::process::id());
            let ttl = lease_ttl(policy.down_grace);
            match super::block_on(monitor::lead(&self.source, &holder, ttl))? {
                Ok(leadership) => {
                    self.monitor = Some((Monitor::new(self.source.clone(), graces), leadership));
                }
                Err(who) => {
                    return Err(LocalError::Spec(format!(
                        "another monitor acts for this cluster ({who}); stop it, or run optio up in another directory"
                    )));
                }
            }
        }
        let (monitor, leadership) = self.monitor.as_mut().expect("taken above");
        monitor.set_graces(graces);
        // One runtime for the round: keep the right to act, then mark.
        let marked = super::block_on(async {
            if !leadership.renew().await? {
                return Ok(None);
            }
            monitor.round().await.map(Some)
        })?;
        match marked {
            Some(marked) => events.extend(marked.into_iter().map(Event::Marked)),
            None => self.monitor = None,
        }
        Ok(())
    }

    /// Starts the server at `i` again on its address (it is not running).
    fn respawn(&mut self, i: usize) -> Result<(), LocalError> {
        let (host, devices, addr) = {
            let s = &self.servers[i];
            (s.host.clone(), s.devices.clone(), s.addr.clone())
        };
        let server = self.spawn(&host, &devices, &addr)?;
        self.servers[i] = server;
        Ok(())
    }

    /// How many times each server was restarted, by host.
    pub fn restarts(&self) -> Vec<(String, u32)> {
        self.servers.iter().zip(&self.watches).map(|(s, w)| (s.host.clone(), w.restarts)).collect()
    }
}

/// The life of the acting monitor's etcd lease for a down grace: half of it, 2 to 10 s (a
/// monitor that stops is replaced within that).
pub fn lease_ttl(down_grace: Duration) -> Duration {
    (down_grace / 2).clamp(Duration::from_secs(2), Duration::from_secs(10))
}

/// The acting monitor of a local cluster, and its right to act.
pub(super) type Acting = Option<(Monitor, Leadership)>;
