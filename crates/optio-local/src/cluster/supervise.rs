//! Supervision: `optio up` restarts a server that dies (with backoff), and — playing the
//! monitor's part for its cluster, with the map in a file or in etcd — marks a server's
//! devices `down` in the map once it has not answered for the down grace, `out` after the
//! out grace (its data is then re-replicated elsewhere by rebalancing), and back `up`/`in`
//! when it answers again.
//!
//! A server *answers* when its process runs and `/health` answers. Only the devices the
//! supervisor marked out are marked in again: a device an operator set out stays out.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use optio_placement::{DeviceId, MapChange};

use super::{LocalCluster, health_epoch};
use crate::LocalError;

/// How long a server may not answer before its devices are marked down, by default (Ceph's
/// `osd_heartbeat_grace`).
pub const DOWN_GRACE_DEFAULT: Duration = Duration::from_secs(20);
/// How long before they are marked out, by default (Ceph's `mon_osd_down_out_interval`).
pub const OUT_GRACE_DEFAULT: Duration = Duration::from_secs(600);
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
    /// Since when it has not answered.
    silent_since: Option<Instant>,
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
    /// The map marks devices down, out, up or in (at `epoch`).
    Marked {
        /// The devices.
        devices: Vec<u32>,
        /// `down`, `out`, `up` or `in`.
        state: &'static str,
        /// The map's epoch after the change.
        epoch: u64,
    },
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
            Event::Marked { devices, state, epoch } => {
                write!(f, "marked device(s) {devices:?} {state} (epoch {epoch})")
            }
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
        self.mark_states(policy, now, &mut events)?;
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

    /// Marks the devices of servers silent past a grace down or out, and those answering
    /// again up (and in, if the supervisor took them out).
    fn mark_states(
        &mut self,
        policy: &Supervision,
        now: Instant,
        events: &mut Vec<Event>,
    ) -> Result<(), LocalError> {
        let mut answering = Vec::new();
        for (i, server) in self.servers.iter().enumerate() {
            let answers = server.child.is_some() && health_epoch(&server.addr).is_some();
            let watch = &mut self.watches[i];
            if answers {
                watch.silent_since = None;
            } else if watch.silent_since.is_none() {
                watch.silent_since = Some(now);
            }
            answering.push(answers);
        }
        let map = self.load_map()?;
        let mut down = Vec::new();
        let mut out = Vec::new();
        let mut up = Vec::new();
        let mut back_in = Vec::new();
        for (i, server) in self.servers.iter().enumerate() {
            let silent = self.watches[i].silent_since.map(|since| now - since);
            for (id, _) in &server.devices {
                let Some(device) = map.device(DeviceId(*id)) else { continue };
                match silent {
                    None => {
                        if !device.up {
                            up.push(*id);
                        }
                        if !device.is_in && self.marked_out.contains(id) {
                            back_in.push(*id);
                        }
                    }
                    Some(silent) => {
                        if device.up && silent >= policy.down_grace {
                            down.push(*id);
                        }
                        if device.is_in && silent >= policy.out_grace {
                            out.push(*id);
                        }
                    }
                }
            }
        }
        let changes: [StateChange; 4] = [
            ("down", down, Some(false), None),
            ("out", out, None, Some(false)),
            ("up", up, Some(true), None),
            ("in", back_in, None, Some(true)),
        ];
        for (state, devices, up, is_in) in changes {
            if devices.is_empty() {
                continue;
            }
            let mut epoch = 0;
            for &device in &devices {
                let change = MapChange::SetState { device: DeviceId(device), up, is_in };
                epoch = self.change_map(&change)?.epoch().0;
                match state {
                    "out" => {
                        self.marked_out.insert(device);
                    }
                    "in" => {
                        self.marked_out.remove(&device);
                    }
                    _ => {}
                }
            }
            events.push(Event::Marked { devices, state, epoch });
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

/// A state to set on devices: its name, the devices, and the new up / in flags.
type StateChange = (&'static str, Vec<u32>, Option<bool>, Option<bool>);

/// The devices the supervisor itself marked out (to mark in again when they answer).
pub(super) type MarkedOut = HashSet<u32>;
