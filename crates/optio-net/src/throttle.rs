//! A byte-rate limit for background traffic — rebalancing, scrubbing, re-integration — kept by
//! the `governor` crate (GCRA, the leaky-bucket algorithm of network shapers): callers wait
//! before they send or read, so that over any second no more than the rate goes by, with at
//! most one second's worth in a burst.

use std::num::NonZeroU32;

use governor::{DefaultDirectRateLimiter, Quota};

/// Bytes per cell: the limiter counts KiB, so that rates up to 4 TiB/s fit its 32-bit counts.
const CELL: u64 = 1024;

/// A byte-rate limit, or none.
pub struct Throttle {
    limiter: Option<(DefaultDirectRateLimiter, u32)>,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per_second = self.limiter.as_ref().map(|(_, burst)| u64::from(*burst) * CELL);
        f.debug_struct("Throttle").field("bytes_per_second", &per_second).finish()
    }
}

impl Throttle {
    /// At most `bytes_per_second` (rounded to whole KiB, at least 1 KiB/s); `None` or 0: no
    /// limit.
    pub fn new(bytes_per_second: Option<u64>) -> Throttle {
        let limiter = bytes_per_second.filter(|r| *r > 0).map(|rate| {
            let cells = u32::try_from(rate.div_ceil(CELL)).unwrap_or(u32::MAX);
            let per_second = NonZeroU32::new(cells).unwrap_or(NonZeroU32::MIN);
            (DefaultDirectRateLimiter::direct(Quota::per_second(per_second)), per_second.get())
        });
        Throttle { limiter }
    }

    /// Waits until `bytes` may go (at once without a limit). A transfer larger than a second's
    /// worth waits for it piece by piece.
    pub async fn acquire(&self, bytes: u64) {
        let Some((limiter, burst)) = &self.limiter else { return };
        let mut cells = bytes.div_ceil(CELL);
        while cells > 0 {
            let now = cells.min(u64::from(*burst)) as u32;
            let n = NonZeroU32::new(now).expect("cells > 0");
            // A request within the burst always fits the quota.
            let _ = limiter.until_n_ready(n).await;
            cells -= u64::from(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[tokio::test]
    async fn holds_the_rate_and_lets_unlimited_traffic_go() {
        let unlimited = Throttle::new(None);
        let started = Instant::now();
        unlimited.acquire(1 << 40).await;
        // (Generous upper bounds: a loaded machine is slow, never fast.)
        assert!(started.elapsed() < Duration::from_secs(5));

        // 1 MiB/s: the first second's burst goes at once, then 1 MiB more takes about a second.
        let throttle = Throttle::new(Some(1 << 20));
        let started = Instant::now();
        throttle.acquire(1 << 20).await;
        throttle.acquire(512 << 10).await;
        throttle.acquire(512 << 10).await;
        let total = started.elapsed();
        assert!(total >= Duration::from_millis(900), "{total:?}");
        assert!(total < Duration::from_secs(30), "{total:?}");

        // Larger than a second's worth: waits for it piece by piece (2.5 s of rate after the
        // burst is spent).
        let throttle = Throttle::new(Some(1 << 20));
        let started = Instant::now();
        throttle.acquire(3 << 20).await;
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(1800), "{elapsed:?}");
    }
}
