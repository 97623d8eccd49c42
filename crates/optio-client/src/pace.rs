//! Pacing background work (trims, flattens) to a rate.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Paces work to `rate` items per second (0: no limit).
pub(crate) struct Pacer {
    interval: Option<Duration>,
    next: Mutex<Instant>,
}

impl Pacer {
    pub(crate) fn new(rate: u32) -> Pacer {
        Pacer {
            interval: (rate > 0).then(|| Duration::from_secs(1) / rate),
            next: Mutex::new(Instant::now()),
        }
    }

    pub(crate) async fn wait(&self) {
        self.wait_for(1).await;
    }

    /// Waits for the turn of `items` at once: the next turn comes `items` intervals later.
    pub(crate) async fn wait_for(&self, items: u32) {
        let Some(interval) = self.interval else { return };
        let slot = {
            let mut next = self.next.lock().expect("pacer lock");
            let slot = (*next).max(Instant::now());
            *next = slot + interval * items;
            slot
        };
        tokio::time::sleep_until(slot.into()).await;
    }
}
