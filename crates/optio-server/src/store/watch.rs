//! Reads waiting for an object to change ([`optio_proto::wire::WAIT_NEWER`]): a volume's lock
//! holder watches its header this way instead of reading it every few milliseconds. A write
//! that changes an object's index entry wakes the reads waiting on that key; with none
//! waiting, a write pays one atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use optio_placement::PoolId;
use tokio::sync::Notify;

/// The keys reads wait on, per pool.
#[derive(Default)]
pub(crate) struct Watchers {
    /// Watches alive ([`Watch`]es not dropped): none, and [`Watchers::changed`] returns at once.
    alive: AtomicUsize,
    keys: Mutex<HashMap<PoolId, HashMap<String, Weak<Notify>>>>,
}

/// A read's watch of one key: [`Watch::notify`] is notified when the key changes.
pub(crate) struct Watch {
    /// Notified (`notify_waiters`) at each change of the key.
    pub(crate) notify: Arc<Notify>,
    home: Arc<Watchers>,
    pool: PoolId,
    key: String,
}

impl Watchers {
    /// Watches `key` of `pool` until the watch is dropped.
    pub(crate) fn watch(home: &Arc<Watchers>, pool: PoolId, key: &str) -> Watch {
        let mut keys = home.keys.lock().expect("watchers lock");
        let of_pool = keys.entry(pool).or_default();
        let notify = match of_pool.get(key).and_then(Weak::upgrade) {
            Some(notify) => notify,
            None => {
                let notify = Arc::new(Notify::new());
                of_pool.insert(key.to_string(), Arc::downgrade(&notify));
                notify
            }
        };
        home.alive.fetch_add(1, Ordering::AcqRel);
        Watch { notify, home: home.clone(), pool, key: key.to_string() }
    }

    /// `key` of `pool` changed: wakes the reads waiting on it.
    pub(crate) fn changed(&self, pool: PoolId, key: &str) {
        if self.alive.load(Ordering::Acquire) == 0 {
            return;
        }
        let keys = self.keys.lock().expect("watchers lock");
        if let Some(notify) = keys.get(&pool).and_then(|of_pool| of_pool.get(key)?.upgrade()) {
            notify.notify_waiters();
        }
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.keys.lock().unwrap().values().map(HashMap::len).sum()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut keys = self.home.keys.lock().expect("watchers lock");
        self.home.alive.fetch_sub(1, Ordering::AcqRel);
        // The last watch of the key forgets it (this one still holds the Notify: count 1).
        if Arc::strong_count(&self.notify) == 1
            && let Some(of_pool) = keys.get_mut(&self.pool)
        {
            of_pool.remove(&self.key);
            if of_pool.is_empty() {
                keys.remove(&self.pool);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_change_wakes_the_watches_of_its_key_only_and_the_last_watch_forgets_it() {
        let home = Arc::new(Watchers::default());
        let (a1, a2) =
            (Watchers::watch(&home, PoolId(1), "a"), Watchers::watch(&home, PoolId(1), "a"));
        let b = Watchers::watch(&home, PoolId(1), "b");
        assert_eq!(home.keys(), 2);
        {
            let (na1, na2, nb) = (a1.notify.notified(), a2.notify.notified(), b.notify.notified());
            tokio::pin!(na1, na2, nb);
            for notified in [na1.as_mut(), na2.as_mut(), nb.as_mut()] {
                notified.enable();
            }
            home.changed(PoolId(2), "a");
            home.changed(PoolId(1), "a");
            let soon = Duration::from_millis(200);
            assert!(tokio::time::timeout(soon, na1).await.is_ok());
            assert!(tokio::time::timeout(soon, na2).await.is_ok());
            let brief = Duration::from_millis(20);
            assert!(tokio::time::timeout(brief, nb).await.is_err(), "b did not change");
        }
        drop(a1);
        assert_eq!(home.keys(), 2, "a2 still watches a");
        drop(a2);
        drop(b);
        assert_eq!(home.keys(), 0);
        assert_eq!(home.alive.load(Ordering::Acquire), 0);
        home.changed(PoolId(1), "a");
    }
}
