//! Fencing: with the map in etcd, a server serves its devices only while it holds a lease
//! there, so that a server cut off from the cluster — by a partition, a long pause, a frozen
//! VM — stops answering before the monitor marks its devices down and clients write around
//! them. Without it, a reader still holding the old map (in the server's side of a
//! partition) could be answered with a version that is no longer the newest.
//!
//! The server takes one lease of `--fence-ttl` (default [`FENCE_TTL_DEFAULT`]) for all its
//! devices and renews it every quarter of the TTL. After each renewal it may serve for
//! three quarters of the TTL, counted on its monotonic clock from the moment it *sent* the
//! renewal; a renewal that fails or does not come back in time lets that run out, and the
//! server answers every device request with `fenced` (503) — writers go around it as around
//! a server that is not running. The monitor, before it marks a device down, fences it (a
//! marker that forbids a new lease) and revokes the lease, then waits the lease's TTL (see
//! `optio_cluster::etcd`'s `fence` module). When the server holds a lease again, its devices
//! first catch up — writes may have gone around them — before they serve reads.
//!
//! With the map in a file (one host) there is no lease: the server reads the file that the
//! supervisor writes, and serves as long as it runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use optio_cluster::etcd::{EtcdStore, FenceRefusal};

use crate::catchup::CatchUp;

/// The life of a server's lease by default.
pub const FENCE_TTL_DEFAULT: Duration = Duration::from_secs(10);
/// The shortest lease (etcd counts in whole seconds).
pub const FENCE_TTL_MIN: Duration = Duration::from_secs(2);
/// How often a server without a lease asks for one.
const RETRY_INTERVAL: Duration = Duration::from_millis(500);

/// Why fencing cannot be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The lease's TTL is too short or not whole seconds (etcd's leases are whole seconds).
    #[error("the fence TTL is {ttl:?}; it must be whole seconds, at least {FENCE_TTL_MIN:?}")]
    Ttl {
        /// The TTL given.
        ttl: Duration,
    },
}

/// Whether a server may serve, as its lease says.
#[derive(Debug)]
pub struct Fence {
    origin: Instant,
    /// Milliseconds since `origin` until which the server may serve; `u64::MAX` when no lease
    /// is needed.
    valid_until: AtomicU64,
    ttl: Duration,
    /// Times the server stopped serving for want of a lease.
    lapses: AtomicU64,
}

impl Fence {
    /// No fencing: always serving (no map, or a map file).
    pub fn open() -> Fence {
        Fence {
            origin: Instant::now(),
            valid_until: AtomicU64::new(u64::MAX),
            ttl: Duration::ZERO,
            lapses: AtomicU64::new(0),
        }
    }

    /// Fencing with leases of `ttl`: serving nothing until the first lease.
    pub fn leased(ttl: Duration) -> Result<Fence, FenceError> {
        if ttl < FENCE_TTL_MIN || ttl.subsec_nanos() != 0 {
            return Err(FenceError::Ttl { ttl });
        }
        Ok(Fence {
            origin: Instant::now(),
            valid_until: AtomicU64::new(0),
            ttl,
            lapses: AtomicU64::new(0),
        })
    }

    /// Whether the server may serve now.
    pub fn serving(&self) -> bool {
        let until = self.valid_until.load(Ordering::Acquire);
        until == u64::MAX || self.now_ms() < until
    }

    /// Whether a lease is needed at all.
    pub fn is_leased(&self) -> bool {
        self.valid_until.load(Ordering::Acquire) != u64::MAX
    }

    /// Times the server stopped serving for want of a lease, since it started.
    pub fn lapses(&self) -> u64 {
        self.lapses.load(Ordering::Relaxed)
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// A renewal sent at `sent` (ms) succeeded.
    fn renewed(&self, sent: u64, catchup: &CatchUp) {
        if !self.serving() {
            // Writes may have gone around this server while it served nothing: catch up
            // before serving reads.
            catchup.mark_all_recovering();
        }
        let until = sent + (self.ttl * 3 / 4).as_millis() as u64;
        self.valid_until.store(until, Ordering::Release);
    }

    fn lapse(&self) {
        self.valid_until.store(0, Ordering::Release);
        self.lapses.fetch_add(1, Ordering::Relaxed);
    }

    /// Holds and renews the lease for `devices` until the process ends.
    pub async fn run(self: Arc<Self>, store: EtcdStore, devices: Vec<u32>, catchup: Arc<CatchUp>) {
        let mut lease: Option<u64> = None;
        let mut refused_before = false;
        let mut was_serving = false;
        loop {
            let sent = self.now_ms();
            match lease {
                None => match store.hold_fence(&devices, self.ttl).await {
                    Ok(Ok(id)) => {
                        lease = Some(id);
                        refused_before = false;
                        self.renewed(sent, &catchup);
                        tracing::info!(lease = id, ttl = ?self.ttl, "holding the fencing lease: serving");
                    }
                    Ok(Err(FenceRefusal::Fenced(fenced))) => {
                        if !refused_before {
                            tracing::warn!(
                                ?fenced,
                                "the monitor fenced these devices (it is marking them down): \
                                 serving nothing until it lifts the fence"
                            );
                        }
                        refused_before = true;
                    }
                    Err(error) => tracing::warn!(%error, "cannot take the fencing lease"),
                },
                Some(id) => match store.keep_alive(id).await {
                    Ok(true) => self.renewed(sent, &catchup),
                    Ok(false) => {
                        tracing::warn!(
                            lease = id,
                            "the fencing lease is gone (revoked by the monitor, or expired): \
                             serving nothing until a new one"
                        );
                        lease = None;
                        self.lapse();
                        was_serving = false;
                        continue;
                    }
                    Err(error) => tracing::warn!(%error, "cannot renew the fencing lease"),
                },
            }
            let serving = self.serving();
            if was_serving && !serving {
                self.lapses.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("the fencing lease ran out without a renewal: serving nothing");
            }
            was_serving = serving;
            let pause = if serving { self.ttl / 4 } else { RETRY_INTERVAL.min(self.ttl / 4) };
            tokio::time::sleep(pause).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_fence_always_serves_and_a_leased_one_only_after_a_renewal() {
        assert!(Fence::open().serving());
        assert!(!Fence::open().is_leased());
        let fence = Fence::leased(Duration::from_secs(4)).unwrap();
        assert!(!fence.serving(), "no lease yet");
        assert!(fence.is_leased());
        fence.valid_until.store(fence.now_ms() + 3000, Ordering::Release);
        assert!(fence.serving());
        fence.lapse();
        assert!(!fence.serving());
        assert_eq!(fence.lapses(), 1);
    }

    #[test]
    fn fence_ttls_are_whole_seconds_of_at_least_two() {
        assert!(Fence::leased(Duration::from_secs(1)).is_err());
        let refused = Fence::leased(Duration::from_millis(2500));
        assert!(
            matches!(refused, Err(FenceError::Ttl { ttl }) if ttl == Duration::from_millis(2500)),
            "not whole seconds"
        );
        assert!(Fence::leased(Duration::from_secs(2)).is_ok());
    }
}
