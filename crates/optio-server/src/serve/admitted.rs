//! Writes in flight, by the epoch they were admitted under, so that a listing at a newer
//! epoch shows every write of an older one.
//!
//! **Why.** A server checks a request's epoch when the request arrives, then stores it,
//! which takes a while (the body still arriving, the disk). A device that comes back — marked
//! up in epoch `e`, after writes of epoch `e - 1` went around it — catches up by listing its
//! peers at epoch `e`. A write of epoch `e - 1` that a peer admitted before it learned epoch
//! `e`, and that it is still storing when the listing runs, is missing from the listing; the
//! peer then acknowledges it, and the device that came back serves reads without it: a
//! stale read of an acknowledged write.
//!
//! **The rule.** Object writes and deletes carrying an epoch are counted here under that
//! epoch before their epoch is checked; a listing carrying epoch `e` (once the server holds
//! it) waits until no write admitted under an epoch below `e` is in flight. The set can only
//! drain: a write of an older epoch that arrives after the server holds `e` is refused as
//! stale, because it was counted before its check and the check comes after the epoch moved.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

/// How long a listing waits for older writes before it is refused (the caller retries): the
/// longest a write's body may stall, plus a margin.
pub(crate) const SETTLE_WAIT_MAX: Duration = Duration::from_secs(40);

/// The object writes in flight, by epoch.
#[derive(Debug, Default)]
pub(crate) struct WritesInFlight {
    by_epoch: Mutex<BTreeMap<u64, usize>>,
    drained: Notify,
}

/// One admitted write: counted until dropped.
pub(crate) struct Admitted<'a> {
    writes: &'a WritesInFlight,
    epoch: u64,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut by_epoch = self.writes.by_epoch.lock().expect("writes lock");
        if let Some(count) = by_epoch.get_mut(&self.epoch) {
            *count -= 1;
            if *count == 0 {
                by_epoch.remove(&self.epoch);
            }
        }
        drop(by_epoch);
        self.writes.drained.notify_waiters();
    }
}

impl WritesInFlight {
    /// Counts a write of `epoch` until the guard is dropped. Call it before the epoch is
    /// checked (see the module).
    pub(crate) fn admit(&self, epoch: u64) -> Admitted<'_> {
        *self.by_epoch.lock().expect("writes lock").entry(epoch).or_default() += 1;
        Admitted { writes: self, epoch }
    }

    /// Writes in flight admitted under an epoch below `epoch`.
    fn older_than(&self, epoch: u64) -> usize {
        self.by_epoch.lock().expect("writes lock").range(..epoch).map(|(_, n)| n).sum()
    }

    /// Waits until no write admitted under an epoch below `epoch` is in flight, for at most
    /// `bound`. `Err(n)`: `n` such writes were still in flight.
    pub(crate) async fn settle_before(&self, epoch: u64, bound: Duration) -> Result<(), usize> {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            // Created before the check: a write finishing in between still wakes it.
            let drained = self.drained.notified();
            let older = self.older_than(epoch);
            if older == 0 {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                let older = self.older_than(epoch);
                return if older == 0 { Ok(()) } else { Err(older) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_listing_waits_for_older_writes_only() {
        let writes = Arc::new(WritesInFlight::default());
        let older = writes.admit(4);
        let same = writes.admit(5);
        // Writes of the listing's own epoch or later are not waited for.
        assert_eq!(writes.settle_before(4, Duration::ZERO).await, Ok(()));
        assert_eq!(writes.settle_before(5, Duration::from_millis(20)).await, Err(1));
        let waiting = {
            let writes = writes.clone();
            tokio::spawn(async move { writes.settle_before(5, Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "waits while the epoch-4 write is in flight");
        drop(older);
        assert_eq!(waiting.await.unwrap(), Ok(()));
        drop(same);
        assert_eq!(writes.older_than(u64::MAX), 0, "every guard uncounts itself");
    }
}
