//! Bounds on logins: at most [`LOGIN_CHECKS_MAX`] checked at once (a flood of logins waits,
//! then is answered 429, instead of burning the CPU), and per client address at most a number
//! of refused logins in a window (beyond them: 429 with `Retry-After` until the oldest leaves
//! the window).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Most logins checked at once.
pub const LOGIN_CHECKS_MAX: usize = 4;
/// Longest a login waits for its turn to be checked before it is answered 429.
pub const LOGIN_QUEUE_WAIT: Duration = Duration::from_secs(1);
/// Refused logins per client address within [`REFUSAL_WINDOW`] beyond which its logins are
/// answered 429 without being checked.
pub const REFUSALS_MAX: usize = 10;
/// The window refused logins are counted in.
pub const REFUSAL_WINDOW: Duration = Duration::from_secs(60);
/// Most client addresses whose refusals are remembered (a flood from more addresses is still
/// bounded by [`LOGIN_CHECKS_MAX`]).
pub const CLIENTS_MAX: usize = 4096;

/// Why a login was not checked.
#[derive(Debug, PartialEq, Eq)]
pub struct Throttled {
    /// What to tell the client.
    pub message: String,
    /// Seconds after which to try again.
    pub retry_after_s: u64,
}

/// An address's refused logins in the window, and its logins being checked now (counted
/// against the bound as if refused, so that a burst at once cannot pass it).
#[derive(Default)]
struct Record {
    refused: VecDeque<Instant>,
    pending: usize,
}

/// A login admitted to be checked: say [`Admitted::refused`] if it was; when dropped, it no
/// longer counts as pending.
pub struct Admitted<'a> {
    gate: &'a LoginGate,
    ip: Option<IpAddr>,
    refused: bool,
}

impl Admitted<'_> {
    /// The login was refused: it counts against its address.
    pub fn refused(&mut self) {
        self.refused = true;
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let Some(ip) = self.ip else { return };
        let mut records = self.gate.records.lock().unwrap_or_else(|e| e.into_inner());
        let Some(record) = records.get_mut(&ip) else { return };
        record.pending = record.pending.saturating_sub(1);
        if self.refused {
            record.refused.push_back(Instant::now());
            while record.refused.len() > self.gate.max_refused {
                record.refused.pop_front();
            }
        }
        if record.refused.is_empty() && record.pending == 0 {
            records.remove(&ip);
        }
    }
}

/// The login bounds and what they refused.
pub struct LoginGate {
    checks: tokio::sync::Semaphore,
    records: Mutex<HashMap<IpAddr, Record>>,
    window: Duration,
    max_refused: usize,
    /// Logins answered 429 (too many refused from their address, or too many at once).
    pub throttled: AtomicU64,
}

impl LoginGate {
    /// A gate allowing `max_refused` refused logins per address in `window`.
    pub fn new(window: Duration, max_refused: usize) -> LoginGate {
        LoginGate {
            checks: tokio::sync::Semaphore::new(LOGIN_CHECKS_MAX),
            records: Mutex::new(HashMap::new()),
            window,
            max_refused: max_refused.max(1),
            throttled: AtomicU64::new(0),
        }
    }

    fn throttled(&self, message: String, retry_after_s: u64) -> Throttled {
        self.throttled.fetch_add(1, Ordering::Relaxed);
        Throttled { message, retry_after_s: retry_after_s.max(1) }
    }

    /// Whether a login from `ip` may be checked now: `Err` when its address had too many
    /// refused (those being checked counted as refused).
    pub fn admit(&self, ip: Option<IpAddr>) -> Result<Admitted<'_>, Throttled> {
        // (Made only when admitted: its drop undoes what admitting did.)
        let unremembered = Admitted { gate: self, ip: None, refused: false };
        let Some(ip) = ip else { return Ok(unremembered) };
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let window = self.window;
        let fresh = |t: &Instant| now.duration_since(*t) < window;
        if records.len() >= CLIENTS_MAX && !records.contains_key(&ip) {
            records.retain(|_, r| r.pending > 0 || r.refused.back().is_some_and(fresh));
            if records.len() >= CLIENTS_MAX {
                // Not remembered: bounded by LOGIN_CHECKS_MAX alone.
                return Ok(unremembered);
            }
        }
        let record = records.entry(ip).or_default();
        while record.refused.front().is_some_and(|t| !fresh(t)) {
            record.refused.pop_front();
        }
        if record.refused.len() + record.pending >= self.max_refused {
            let wait = match record.refused.front() {
                Some(oldest) => window.saturating_sub(now.duration_since(*oldest)),
                None => Duration::from_secs(1),
            };
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            if record.refused.is_empty() && record.pending == 0 {
                records.remove(&ip);
            }
            drop(records);
            return Err(self.throttled(
                format!(
                    "{} logins from {ip} were refused in the last {} s (or are being checked): try again in {seconds} s",
                    self.max_refused,
                    window.as_secs()
                ),
                seconds,
            ));
        }
        record.pending += 1;
        Ok(Admitted { gate: self, ip: Some(ip), refused: false })
    }

    /// Waits for a turn to check a login (at most [`LOGIN_QUEUE_WAIT`]).
    pub async fn turn(&self) -> Result<tokio::sync::SemaphorePermit<'_>, Throttled> {
        match tokio::time::timeout(LOGIN_QUEUE_WAIT, self.checks.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(self.throttled(
                format!("{LOGIN_CHECKS_MAX} logins are being checked already: try again in 1 s"),
                1,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_with_too_many_refusals_waits_for_the_window() {
        let gate = LoginGate::new(Duration::from_millis(200), 3);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            gate.admit(Some(a)).expect("admitted").refused();
        }
        let throttled = gate.admit(Some(a)).err().expect("a fourth is throttled");
        assert_eq!(throttled.retry_after_s, 1);
        assert!(gate.admit(Some(b)).is_ok(), "another address is not");
        assert_eq!(gate.throttled.load(Ordering::Relaxed), 1);
        std::thread::sleep(Duration::from_millis(250));
        assert!(gate.admit(Some(a)).is_ok(), "after the window");
        assert!(gate.records.lock().unwrap().is_empty(), "nothing kept for nothing refused");
    }

    #[test]
    fn logins_being_checked_count_against_the_bound() {
        let gate = LoginGate::new(Duration::from_secs(60), 3);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let checking: Vec<_> = (0..3).map(|_| gate.admit(Some(a)).expect("admitted")).collect();
        assert!(gate.admit(Some(a)).is_err(), "three being checked: a fourth waits for them");
        assert!(gate.admit(Some(a)).is_err(), "(a refusal undoes nothing of the others')");
        drop(checking);
        let mut accepted = gate.admit(Some(a)).expect("none refused: admitted again");
        drop(accepted);
        accepted = gate.admit(Some(a)).expect("admitted");
        accepted.refused();
        drop(accepted);
        assert_eq!(gate.records.lock().unwrap()[&a].refused.len(), 1);
    }
}
