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

/// The login bounds and what they refused.
pub struct LoginGate {
    checks: tokio::sync::Semaphore,
    refusals: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
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
            refusals: Mutex::new(HashMap::new()),
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
    /// refused.
    pub fn admit(&self, ip: Option<IpAddr>) -> Result<(), Throttled> {
        let Some(ip) = ip else { return Ok(()) };
        let mut refusals = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let Some(times) = refusals.get_mut(&ip) else { return Ok(()) };
        while times.front().is_some_and(|t| now.duration_since(*t) >= self.window) {
            times.pop_front();
        }
        if times.is_empty() {
            refusals.remove(&ip);
            return Ok(());
        }
        if times.len() >= self.max_refused {
            let oldest = *times.front().expect("not empty");
            let wait = self.window.saturating_sub(now.duration_since(oldest));
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            drop(refusals);
            return Err(self.throttled(
                format!(
                    "{} logins from {ip} were refused in the last {} s: try again in {seconds} s",
                    self.max_refused,
                    self.window.as_secs()
                ),
                seconds,
            ));
        }
        Ok(())
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

    /// Counts a refused login from `ip`.
    pub fn refused(&self, ip: Option<IpAddr>) {
        let Some(ip) = ip else { return };
        let mut refusals = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if refusals.len() >= CLIENTS_MAX && !refusals.contains_key(&ip) {
            let window = self.window;
            refusals
                .retain(|_, times| times.back().is_some_and(|t| now.duration_since(*t) < window));
            if refusals.len() >= CLIENTS_MAX {
                return;
            }
        }
        let times = refusals.entry(ip).or_default();
        times.push_back(now);
        while times.len() > self.max_refused {
            times.pop_front();
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
            assert!(gate.admit(Some(a)).is_ok());
            gate.refused(Some(a));
        }
        let throttled = gate.admit(Some(a)).expect_err("a fourth is throttled");
        assert_eq!(throttled.retry_after_s, 1);
        assert!(gate.admit(Some(b)).is_ok(), "another address is not");
        assert_eq!(gate.throttled.load(Ordering::Relaxed), 1);
        std::thread::sleep(Duration::from_millis(250));
        assert!(gate.admit(Some(a)).is_ok(), "after the window");
    }
}
