//! A clone's flatten, carried out by its lock holder ([`crate::flatten`] asks for it): every
//! data object it still reads from its parent copied in ([`Volume::copy_up`]), at the job's
//! rate, the progress recorded in the header every second; then the clone forgets its parent.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use super::Volume;
use super::header::{FlattenProgress, VolumeError, forget_child, holder_name, now_ms};
use crate::pace::Pacer;

/// Objects copied per second by default: 64 MiB/s of 4 MiB objects (times the replicas
/// written), leaving the disks room for foreground I/O.
pub const FLATTEN_RATE_DEFAULT: u32 = 16;
/// Copies in flight at once.
const IN_FLIGHT: usize = 4;
/// How often the progress is recorded.
const RECORD_EVERY: Duration = Duration::from_secs(1);

impl Volume {
    /// In a lock holder whose header asks for a flatten: runs it in the background, once.
    pub(crate) fn start_flatten_as_holder(self: &Arc<Self>) {
        if self.flattening.swap(true, Ordering::AcqRel) {
            return;
        }
        // close() aborts the task: once the lock is released it may not write. (A volume
        // dropped without close() stays alive, its lock renewed, until the flatten ends.)
        let volume = self.clone();
        let task = tokio::spawn(async move {
            match volume.flatten_here(&mut |_| {}).await {
                Ok(copied) => tracing::info!(volume = %volume.name(), copied, "flattened"),
                Err(error) => {
                    tracing::warn!(volume = %volume.name(), "flatten stopped: {error}; trying again in 5 s");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    volume.flattening.store(false, Ordering::Release);
                }
            }
        });
        *self.flattener.lock().expect("flattener lock") = Some(task);
    }

    /// Runs the flatten of this open clone from where its header says it stopped.
    pub(crate) async fn flatten_here(
        &self,
        progress: &mut impl FnMut(&FlattenProgress),
    ) -> Result<u64, VolumeError> {
        let volume = self;
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
}
