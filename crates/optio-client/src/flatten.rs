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

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use crate::Client;
use crate::trim::Pacer;
use crate::volume::{
    FlattenProgress, HOLDER_POLL, HOLDER_WAIT, OpenOptions, Volume, VolumeError, find_header,
    forget_child, holder_is_gone, holder_name, now_ms, update,
};

/// Objects copied per second by default: 64 MiB/s of 4 MiB objects (times the replicas
/// written), leaving the disks room for foreground I/O.
pub const RATE_DEFAULT: u32 = 16;
/// Copies in flight at once.
const IN_FLIGHT: usize = 4;
/// How often the progress is recorded.
const RECORD_EVERY: Duration = Duration::from_secs(1);

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
    let holder = asked
        .lock
        .as_ref()
        .filter(|lock| lock.expires_unix_ms > now_ms() && !holder_is_gone(lock))
        .map(|lock| lock.holder.clone());
    let Some(holder) = holder else {
        let volume = Volume::open(client, name, OpenOptions::default()).await?;
        volume.flattening.store(true, Ordering::Release);
        let result = run(&volume, &mut progress).await;
        let closed = volume.close().await;
        let copied = result?;
        closed?;
        return Ok(copied);
    };
    // The holder carries it out: follow its progress until the parent is gone.
    let taken_by = tokio::time::Instant::now() + HOLDER_WAIT;
    loop {
        tokio::time::sleep(HOLDER_POLL * 10).await;
        let (header, _) = find_header(client, name).await?;
        let Some(job) = header.flatten else {
            if header.parent.is_none() {
                return Ok(0);
            }
            return Err(VolumeError::Snapshot(format!(
                "the flatten of volume '{name}' was dropped (the clone changed under it): run it again"
            )));
        };
        progress(&job);
        if job.by.is_none() && tokio::time::Instant::now() >= taken_by {
            return Err(VolumeError::Snapshot(format!(
                "volume '{name}' is open read-write by {holder}, which did not take up the flatten within {} s: the job stays recorded (a writer opening the clone takes it up); stop that process or try again",
                HOLDER_WAIT.as_secs()
            )));
        }
    }
}

/// In a lock holder whose header asks for a flatten: runs it in the background, once.
pub(crate) fn start_as_holder(volume: &Arc<Volume>) {
    if volume.flattening.swap(true, Ordering::AcqRel) {
        return;
    }
    let volume = volume.clone();
    tokio::spawn(async move {
        match run(&volume, &mut |_| {}).await {
            Ok(copied) => tracing::info!(volume = %volume.name(), copied, "flattened"),
            Err(error) => {
                tracing::warn!(volume = %volume.name(), "flatten stopped: {error}; trying again in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
                volume.flattening.store(false, Ordering::Release);
            }
        }
    });
}

/// Runs the flatten of the open clone `volume` from where its header says it stopped.
async fn run(
    volume: &Volume,
    progress: &mut impl FnMut(&FlattenProgress),
) -> Result<u64, VolumeError> {
    let me = holder_name();
    volume
        .update_header(|header| {
            if header.parent.is_none() {
                return Err(VolumeError::Snapshot(format!(
                    "volume '{}' is not a clone: nothing to flatten",
                    header.name
                )));
            }
            let objects = header.objects();
            let job = header.flatten.get_or_insert_with(|| FlattenProgress {
                started_unix_s: now_ms() / 1000,
                objects,
                ..FlattenProgress::default()
            });
            job.by = Some(me.clone());
            Ok(())
        })
        .await?;
    let header = volume.header();
    let job = header.flatten.clone().unwrap_or_default();
    let parent = header.parent.clone().expect("checked when claimed");
    progress(&job);
    let pacer = Pacer::new(job.rate);
    let pacer = &pacer;
    let mut copies = futures_util::stream::iter(job.next..header.objects())
        .map(|index| async move {
            pacer.wait().await;
            volume.copy_up(index).await.map(|copied| (index, copied))
        })
        .buffered(IN_FLIGHT);
    let (mut copied, mut unrecorded, mut recorded_at) = (0u64, 0u64, Instant::now());
    while let Some(result) = copies.next().await {
        let (index, was_copied) = result?;
        if was_copied {
            copied += 1;
            unrecorded += 1;
        }
        if recorded_at.elapsed() >= RECORD_EVERY {
            let add = std::mem::take(&mut unrecorded);
            volume
                .update_header(|header| {
                    if let Some(job) = header.flatten.as_mut() {
                        job.next = index;
                        job.copied += add;
                    }
                    Ok(())
                })
                .await?;
            if let Some(job) = volume.header().flatten {
                progress(&job);
            }
            recorded_at = Instant::now();
        }
    }
    drop(copies);
    volume.flush().await?;
    volume
        .update_header(|header| {
            if let Some(job) = header.flatten.as_mut() {
                job.next = job.objects;
                job.copied += unrecorded;
                progress(job);
            }
            header.parent = None;
            header.flatten = None;
            Ok(())
        })
        .await?;
    forget_child(volume.client(), &parent.volume, &parent.snapshot, &header.name).await?;
    Ok(copied)
}
