//! Flattening a clone (docs/volumes.md, "Clones"): every data object it still reads from its
//! parent snapshot is copied into it, at a rate limit, then the clone forgets its parent.
//!
//! The job lives in the clone's header ([`FlattenProgress`]): how far it came, its rate, who
//! carries it out. Whoever holds the clone's lock does the copying, because a copy-up must
//! be ordered with the writes to the same object ([`Volume::copy_up`] runs under the
//! object's lock, as a write does): `optio nbd` serving the clone takes the job up within
//! its header poll and flattens while it serves; with no holder, `optio volume flatten` opens
//! the clone itself. Either way the progress is recorded every second, so a flatten that
//! stops (a holder killed, a command interrupted) resumes at the recorded object when asked
//! again (or when the clone is next opened by a writer).

use crate::Client;
use crate::volume::{
    FlattenProgress, HOLDER_POLL, HOLDER_WAIT, OpenOptions, Volume, VolumeError, find_header,
    holder_is_gone, now_ms, update,
};
use std::sync::atomic::Ordering;

pub use crate::volume::FLATTEN_RATE_DEFAULT as RATE_DEFAULT;

/// Flattens clone `name` at most `rate` objects a second (0: no limit): by the lock holder if
/// the clone is open read-write elsewhere (this waits for it), else here. `progress` sees the
/// progress as recorded. The objects copied.
pub async fn flatten(
    client: &Client,
    name: &str,
    rate: u32,
    mut progress: impl FnMut(&FlattenProgress),
) -> Result<u64, VolumeError> {
    let asked = update(client, name, |header| {
        if header.parent.is_none() {
            return Err(VolumeError::Snapshot(format!(
                "volume '{name}' is not a clone: nothing to flatten"
            )));
        }
        let objects = header.objects();
        let job = header.flatten.get_or_insert_with(|| FlattenProgress {
            started_unix_s: now_ms() / 1000,
            objects,
            ..FlattenProgress::default()
        });
        job.rate = rate;
        Ok(())
    })
    .await?;
    let mut lock = asked.lock;
    loop {
        let Some(holder) = live_holder(lock.as_ref()) else {
            let volume = Volume::open(client, name, OpenOptions::default()).await?;
            let result = if volume.flattening.swap(true, Ordering::AcqRel) {
                // This process's own header watcher took the job up first: follow it.
                match follow(client, name, &crate::volume::holder_name(), &mut progress).await {
                    Ok(Followed::Detached(copied)) => Ok(copied),
                    // The lock is this process's own while the volume is open.
                    Ok(Followed::HolderChanged(_)) => Err(VolumeError::Snapshot(format!(
                        "volume '{name}' lost its lock while it flattened: run it again"
                    ))),
                    Err(error) => Err(error),
                }
            } else {
                volume.flatten_here(&mut progress).await
            };
            let closed = volume.close().await;
            let copied = result?;
            closed?;
            return Ok(copied);
        };
        match follow(client, name, &holder, &mut progress).await? {
            Followed::Detached(copied) => return Ok(copied),
            // The holder died (or let the lock go, or another took it): carried out here, or
            // by the new holder.
            Followed::HolderChanged(now) => lock = now,
        }
    }
}

/// The holder of `lock` if it is live: its lease not expired, and not a process on this
/// machine known to be gone.
fn live_holder(lock: Option<&crate::volume::Lock>) -> Option<String> {
    lock.filter(|lock| lock.expires_unix_ms > now_ms() && !holder_is_gone(lock))
        .map(|lock| lock.holder.clone())
}

/// How following a holder's flatten ended.
enum Followed {
    /// The clone was detached; the objects copied as recorded.
    Detached(u64),
    /// The clone's lock is no longer `holder`'s live one (killed, released, taken over): the
    /// lock now.
    HolderChanged(Option<crate::volume::Lock>),
}

/// Follows the flatten of clone `name` that lock holder `holder` carries out, until the clone
/// is detached or `holder` no longer holds its lock (a holder killed with SIGKILL records
/// nothing more: following it would wait forever).
async fn follow(
    client: &Client,
    name: &str,
    holder: &str,
    progress: &mut impl FnMut(&FlattenProgress),
) -> Result<Followed, VolumeError> {
    let taken_by = tokio::time::Instant::now() + HOLDER_WAIT;
    let mut copied = 0;
    loop {
        tokio::time::sleep(HOLDER_POLL * 10).await;
        let (header, _) = find_header(client, name).await?;
        let Some(job) = header.flatten else {
            if header.parent.is_none() {
                return Ok(Followed::Detached(copied));
            }
            return Err(VolumeError::Snapshot(format!(
                "the flatten of volume '{name}' was dropped (the clone changed under it): run it again"
            )));
        };
        progress(&job);
        copied = job.copied;
        if live_holder(header.lock.as_ref()).as_deref() != Some(holder) {
            return Ok(Followed::HolderChanged(header.lock));
        }
        if job.by.as_deref() != Some(holder) && tokio::time::Instant::now() >= taken_by {
            return Err(VolumeError::Snapshot(format!(
                "volume '{name}' is open read-write by {holder}, which did not take up the flatten within {} s: the job stays recorded (a writer opening the clone takes it up); stop that process or try again",
                HOLDER_WAIT.as_secs()
            )));
        }
    }
}
