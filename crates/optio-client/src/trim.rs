//! Trimming in the background (docs/volumes.md, "Removing a snapshot"): the copies kept for
//! removed snapshots, and everything of a volume removed with its snapshots, are deleted by
//! a job whose progress lives in the volume's header ([`TrimProgress`]) — so it is resumable
//! after any crash, visible to `optio status`, and run by whoever gets to it first: `snap rm
//! --wait`, `optio volume snap trim`, or the [`Worker`] that `optio up` and `optio manager`
//! run, at a rate limit that leaves the disks to foreground I/O.
//!
//! A job is correct to run at any time, by any number of runners at once: it reads the
//! header's remaining snapshots afresh, removes only clones none of them sees, and deletes
//! nothing a later snapshot could see — a clone listed now has been superseded by a write
//! already acknowledged, so any later snapshot's mark is above that write.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use optio_placement::Epoch;
use optio_proto::ObjectVersion;
use optio_proto::snap::visible_at;

use crate::pace::Pacer;
use crate::snapshot::stored_objects_missing;
use crate::volume::{
    HEADER_PREFIX, HolderProcess, Lock, TrimProgress, VolumeError, VolumeHeader, find_header,
    holder_is_gone, holder_name, now_ms, unique, update,
};
use crate::{Client, ClientError, CloneToTrim};

/// Copies removed per second by default: a 10,000-object snapshot goes in 25 s (25.7 s
/// measured, docs/benchmarks.md); each copy costs a probe of its head and a delete on each
/// replica.
pub const RATE_DEFAULT: u32 = 400;
/// The most clones removed by one group of requests (one per device holding some: each
/// device's directories are synced once per group). A group holds at most a second's worth
/// at the rate asked (400 by default), so that the rate holds at any scale.
const GROUP_MAX: usize = 1024;
/// Groups in flight at once.
const GROUPS_IN_FLIGHT: usize = 2;
/// How often a running trim records its progress in the header (and renews its claim).
const RECORD_EVERY: Duration = Duration::from_secs(1);
/// How long a runner's claim on a job lasts unless renewed: a runner that stops (killed, its
/// machine gone) leaves the job to others after it, or at once if it ran on this machine.
const CLAIM_LEASE: Duration = Duration::from_secs(10);

/// How a run of a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing (left) to do: the volume has no job, or no longer exists.
    Idle,
    /// The job is done.
    Done {
        /// Copies removed by this run.
        removed: u64,
        /// Whether the volume itself was removed (a removal with snapshots).
        volume_removed: bool,
    },
    /// The job cannot run yet: why (a snapshot being taken, a writer that has not followed
    /// the removal yet).
    Waiting(String),
    /// Another runner carries the job out (its claim is live): who, and the progress as it
    /// last recorded it.
    Elsewhere {
        /// The runner, for people (`host pid N`).
        by: String,
        /// The job's progress.
        progress: TrimProgress,
    },
}

/// Another runner's live claim on `job`, if it has one that is not `token`'s.
fn claimed_elsewhere(job: &TrimProgress, token: u64) -> Option<&Lock> {
    job.runner.as_ref().filter(|runner| {
        runner.token != token && runner.expires_unix_ms > now_ms() && !holder_is_gone(runner)
    })
}

/// This runner's claim, valid for [`CLAIM_LEASE`] from now.
fn claim(token: u64) -> Lock {
    let now = now_ms();
    Lock {
        holder: holder_name(),
        token,
        expires_unix_ms: now + CLAIM_LEASE.as_millis() as u64,
        process: HolderProcess::current(),
        taken_unix_ms: now,
        generation_seen: 0,
    }
}

/// Why the job of `header` cannot run now, if it cannot.
fn not_ready(header: &VolumeHeader, job: &TrimProgress) -> Option<String> {
    if header.snapshots.iter().any(|s| s.mark.is_none()) {
        return Some("a snapshot is being taken".into());
    }
    let lock = header.lock.as_ref()?;
    if lock.expires_unix_ms <= now_ms() || holder_is_gone(lock) {
        return None;
    }
    (lock.generation_seen < job.generation).then(|| {
        format!(
            "{}, which holds the volume open, has not followed the snapshot removal yet",
            lock.holder
        )
    })
}

/// Runs volume `name`'s job (if it has one) to its end, removing at most `rate` copies a
/// second; `progress` is called with the header's progress each time it is recorded.
pub async fn run(
    client: &Client,
    name: &str,
    rate: u32,
    mut progress: impl FnMut(&TrimProgress),
) -> Result<Outcome, VolumeError> {
    let pacer = Pacer::new(rate);
    let token = unique(name) | 1;
    let mut removed_here = 0;
    'job: loop {
        let header = match find_header(client, name).await {
            Ok((header, _)) => header,
            Err(VolumeError::NotFound(_)) => return Ok(Outcome::Idle),
            Err(error) => return Err(error),
        };
        let Some(job) = header.trim.clone() else {
            return Ok(if removed_here > 0 {
                Outcome::Done { removed: removed_here, volume_removed: false }
            } else {
                Outcome::Idle
            });
        };
        if let Some(why) = not_ready(&header, &job) {
            return Ok(Outcome::Waiting(why));
        }
        if let Some(runner) = claimed_elsewhere(&job, token) {
            return Ok(Outcome::Elsewhere { by: runner.holder.clone(), progress: job });
        }
        // Claimed before listing: a runner that comes meanwhile leaves the job to this one.
        match record(client, name, job.generation, token, None).await? {
            Recorded::Mine(_) => {}
            Recorded::Superseded => continue 'job,
            Recorded::Elsewhere(by, progress) => return Ok(Outcome::Elsewhere { by, progress }),
        }
        let marks: Vec<ObjectVersion> =
            header.snapshots.iter().filter_map(|s| s.mark).map(ObjectVersion).collect();
        // The map the listing starts from: a device marked down after it (its server
        // stopped during this run) may have been gone around by deletions ([`gone_around`]).
        let listed_at = client.map().epoch();
        let (objects, not_listed) =
            stored_objects_missing(client, &header.pool, &header.data_prefix()).await?;
        // A device the listing or a deletion did not reach (its server down) keeps the
        // copies it holds: purged clones leave no tombstone, so nothing else removes them.
        // The job is done only by a run that reached every device; until then it stays,
        // recorded from no further than the first object not finished everywhere.
        let mut missed: std::collections::BTreeSet<u32> = not_listed.into_iter().collect();
        let mut unfinished_from = (!missed.is_empty()).then_some(job.next);
        let with_clones: Vec<u64> =
            objects.iter().filter(|(_, s)| !s.clones.is_empty()).map(|(i, _)| *i).collect();
        let total = with_clones.len() as u64;
        let done_before = with_clones.iter().filter(|i| **i < job.next).count() as u64;
        // The clones to remove, object by object in index order, from where it stopped.
        let mut doomed: Vec<(u64, CloneToTrim)> = Vec::new();
        for (index, stored) in objects.range(job.next..) {
            if stored.clones.is_empty() {
                continue;
            }
            let head_key = header.data_key(*index);
            let seen: Vec<usize> = match (header.removing, stored.head) {
                (true, _) => Vec::new(),
                (false, Some((head, _))) => {
                    let mut contents = vec![(head, false)];
                    contents.extend(stored.clones.iter().map(|(v, _)| (*v, false)));
                    marks.iter().filter_map(|m| visible_at(&contents, *m)).collect()
                }
                // A head deleted since (listings leave tombstones out): its clones are read
                // by snapshots through the servers; keep them for a volume that stays.
                (false, None) => continue,
            };
            for (i, (version, _)) in stored.clones.iter().enumerate() {
                if !seen.contains(&(i + 1)) {
                    let key = optio_proto::snap::clone_key(&head_key, *version);
                    let seed = stored.seed;
                    doomed.push((*index, CloneToTrim { key, version: *version, seed }));
                }
            }
        }
        let generation = job.generation;
        let recorded = Progress { objects: total, next: job.next, done: done_before, removed: 0 };
        match record(client, name, generation, token, Some(recorded)).await? {
            Recorded::Mine(trim) => progress(&trim),
            Recorded::Superseded => continue 'job,
            Recorded::Elsewhere(by, progress) => return Ok(Outcome::Elsewhere { by, progress }),
        }
        let pool = header.pool.as_str();
        let pacer = &pacer;
        let groups: Vec<Vec<(u64, CloneToTrim)>> =
            doomed.chunks(group_size(rate)).map(<[_]>::to_vec).collect();
        let mut deletions = futures_util::stream::iter(groups)
            .map(move |group| delete_group(client, pacer, pool, group))
            .buffered(GROUPS_IN_FLIGHT);
        let (mut unrecorded, mut recorded_at) = (0u64, Instant::now());
        while let Some(result) = deletions.next().await {
            let (first, index, count, not_reached) = match result {
                Ok(done) => done,
                Err(error) => {
                    drop(deletions);
                    release(client, name, generation, token).await;
                    return Err(error.into());
                }
            };
            if !not_reached.is_empty() {
                missed.extend(not_reached);
                unfinished_from.get_or_insert(first);
            }
            unrecorded += count;
            removed_here += count;
            if recorded_at.elapsed() >= RECORD_EVERY {
                let around = gone_around(client, listed_at);
                if !around.is_empty() {
                    // Which deletions went around it is not known: from where this run began.
                    missed.extend(around);
                    unfinished_from = Some(job.next);
                }
                let next = unfinished_from.map_or(index, |from| from.min(index));
                let done = with_clones.iter().filter(|i| **i < next).count() as u64;
                let recorded = Progress { objects: total, next, done, removed: unrecorded };
                match record(client, name, generation, token, Some(recorded)).await? {
                    Recorded::Mine(trim) => progress(&trim),
                    Recorded::Superseded => continue 'job,
                    Recorded::Elsewhere(by, progress) => {
                        // This runner's claim lapsed (it was slowed past its lease) and
                        // another took the job over: it goes on from there.
                        return Ok(Outcome::Elsewhere { by, progress });
                    }
                }
                (unrecorded, recorded_at) = (0, Instant::now());
            }
        }
        drop(deletions);
        let around = gone_around(client, listed_at);
        if !around.is_empty() {
            missed.extend(around);
            unfinished_from = Some(job.next);
        }
        if let Some(next) = unfinished_from {
            let done = with_clones.iter().filter(|i| **i < next).count() as u64;
            let recorded = Progress { objects: total, next, done, removed: unrecorded };
            match record(client, name, generation, token, Some(recorded)).await? {
                Recorded::Mine(trim) => progress(&trim),
                Recorded::Superseded => continue 'job,
                Recorded::Elsewhere(by, progress) => {
                    return Ok(Outcome::Elsewhere { by, progress });
                }
            }
            // The next run (this command's, or a trimmer's round) tries again at once.
            release(client, name, generation, token).await;
            return Ok(Outcome::Waiting(format!(
                "device(s) {missed:?} could not be reached (server down or not answering): the copies they hold are trimmed once they answer"
            )));
        }
        if header.removing {
            crate::volume::finish_removal(client, &header).await?;
            return Ok(Outcome::Done { removed: removed_here, volume_removed: true });
        }
        let mut superseded = false;
        let last = update(client, name, |header| {
            match &mut header.trim {
                Some(trim) if trim.generation == generation => {
                    trim.objects = total;
                    trim.done = total;
                    trim.next = u64::MAX;
                    trim.removed += unrecorded;
                    progress(trim);
                    header.trim = None;
                }
                _ => superseded = true,
            }
            Ok(())
        })
        .await?;
        if superseded || last.trim.is_some() {
            continue 'job;
        }
        return Ok(Outcome::Done { removed: removed_here, volume_removed: false });
    }
}

/// The devices that deletions sent since the client's map of `epoch` may have gone around:
/// those in the map now that are down (or have no address), or that a later map marked down
/// (and perhaps up again since). A deletion relocated on a map where a device is down no
/// longer addresses it, so its server never hears of it, and a purged clone leaves no
/// tombstone for anything else to bring there: such a device's copies are trimmed by a run
/// that starts once it is back.
fn gone_around(client: &Client, epoch: Epoch) -> Vec<u32> {
    client
        .map()
        .devices()
        .iter()
        .filter(|d| {
            d.is_in && (!d.up || d.addr.is_none() || d.down_at.is_some_and(|at| at > epoch))
        })
        .map(|d| d.id.0)
        .collect()
}

/// How many clones a group removes at `rate` copies a second (0: no limit).
fn group_size(rate: u32) -> usize {
    match rate {
        0 => GROUP_MAX,
        rate => usize::try_from(rate).unwrap_or(GROUP_MAX).clamp(1, GROUP_MAX),
    }
}

/// Deletes a group of clones (in index order) at the pacer's pace, with one request per
/// device ([`Client::delete_clones`]); the index of its first and last objects, how many
/// clones it held, and the devices not reached (their server down, or not answering within
/// 10 s (`CLONE_DELETE_TIMEOUT`): the copies stay there).
async fn delete_group(
    client: &Client,
    pacer: &Pacer,
    pool: &str,
    group: Vec<(u64, CloneToTrim)>,
) -> Result<(u64, u64, u64, Vec<u32>), ClientError> {
    let (first, last) = (group[0].0, group[group.len() - 1].0);
    pacer.wait_for(group.len() as u32).await;
    let clones: Vec<CloneToTrim> = group.into_iter().map(|(_, clone)| clone).collect();
    let not_reached = client.delete_clones(pool, &clones).await?;
    Ok((first, last, clones.len() as u64, not_reached))
}

/// Progress to add to a job's record.
struct Progress {
    objects: u64,
    next: u64,
    done: u64,
    removed: u64,
}

/// What recording gave.
enum Recorded {
    /// Recorded, the claim renewed: the job's progress as recorded.
    Mine(TrimProgress),
    /// A later `snap rm` replaced the job (or it is done).
    Superseded,
    /// Another runner holds a live claim on it: who, and its progress.
    Elsewhere(String, TrimProgress),
}

/// Claims (or renews the claim of `token` on) the job of `generation` and records `progress`
/// in the header, if the job there is still that one and no other runner holds it.
async fn record(
    client: &Client,
    name: &str,
    generation: u64,
    token: u64,
    progress: Option<Progress>,
) -> Result<Recorded, VolumeError> {
    let mut elsewhere = None;
    let written = update(client, name, |header| match header.trim.as_mut() {
        Some(trim) if trim.generation == generation => {
            if let Some(runner) = claimed_elsewhere(trim, token) {
                elsewhere = Some((runner.holder.clone(), trim.clone()));
                return Err(VolumeError::Snapshot(CLAIMED.into()));
            }
            trim.runner = Some(claim(token));
            if let Some(p) = &progress {
                trim.objects = p.objects;
                trim.next = p.next;
                trim.done = p.done;
                trim.removed += p.removed;
            }
            Ok(())
        }
        _ => Err(VolumeError::Snapshot(SUPERSEDED.into())),
    })
    .await;
    match written {
        Ok(header) => Ok(header.trim.map_or(Recorded::Superseded, Recorded::Mine)),
        Err(VolumeError::Snapshot(why)) if why == SUPERSEDED => Ok(Recorded::Superseded),
        Err(VolumeError::Snapshot(why)) if why == CLAIMED => {
            let (by, progress) = elsewhere.expect("set with the refusal");
            Ok(Recorded::Elsewhere(by, progress))
        }
        Err(error) => Err(error),
    }
}

/// Gives up this runner's claim (best effort: the lease ends it anyway), so that another
/// runner resumes the job at once.
async fn release(client: &Client, name: &str, generation: u64, token: u64) {
    let released = update(client, name, |header| {
        if let Some(trim) = header.trim.as_mut()
            && trim.generation == generation
            && trim.runner.as_ref().is_some_and(|runner| runner.token == token)
        {
            trim.runner = None;
        }
        Ok(())
    })
    .await;
    if let Err(error) = released {
        tracing::debug!(volume = name, "the trim's claim is left to lapse: {error}");
    }
}

const CLAIMED: &str = "the trim is carried out by another runner";
const SUPERSEDED: &str = "the trim was superseded by a later one";

/// A volume with a job under way, as `optio status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PendingJob {
    /// The volume.
    pub volume: String,
    /// Its pool.
    pub pool: String,
    /// `trim` (copies of removed snapshots), `remove` (the volume, removed with its
    /// snapshots) or `flatten` (a clone copying what it reads from its parent).
    pub kind: &'static str,
    /// Objects to go through (0: not listed yet): those with copies for a trim, those the
    /// clone spans for a flatten.
    pub objects: u64,
    /// Of them, those gone through.
    pub done: u64,
    /// Copies removed (trim, remove), or objects copied (flatten).
    pub count: u64,
    /// When it was asked for (Unix seconds).
    pub started_unix_s: u64,
    /// Who carries it out, when known (a flatten: the clone's lock holder; a trim: the
    /// runner whose claim is live).
    pub by: Option<String>,
}

/// Every volume with a job under way (one listing of the volume headers per pool).
pub async fn pending(client: &Client) -> Result<Vec<PendingJob>, VolumeError> {
    let mut out = Vec::new();
    for header in crate::volume::list(client).await? {
        if let Some(p) = &header.trim {
            out.push(PendingJob {
                volume: header.name.clone(),
                pool: header.pool.clone(),
                kind: if header.removing { "remove" } else { "trim" },
                objects: p.objects,
                done: p.done,
                count: p.removed,
                started_unix_s: p.started_unix_s,
                by: p
                    .runner
                    .as_ref()
                    .filter(|r| r.expires_unix_ms > now_ms() && !holder_is_gone(r))
                    .map(|r| r.holder.clone()),
            });
        }
        if let Some(p) = &header.flatten {
            out.push(PendingJob {
                volume: header.name.clone(),
                pool: header.pool.clone(),
                kind: "flatten",
                objects: p.objects,
                done: p.next.min(p.objects),
                count: p.copied,
                started_unix_s: p.started_unix_s,
                by: p.by.clone(),
            });
        }
    }
    Ok(out)
}

/// Runs the volumes' background jobs, round after round: each round lists the volume
/// headers of every pool and reads only those that changed since it last looked.
pub struct Worker {
    rate: u32,
    /// Header versions seen without a job, by pool and volume.
    idle: HashMap<(String, String), ObjectVersion>,
}

impl Worker {
    /// A worker removing at most `rate` copies a second (0: no limit).
    pub fn new(rate: u32) -> Worker {
        Worker { rate, idle: HashMap::new() }
    }

    /// One round: runs every job it finds to its end; what it did, one line each.
    pub async fn round(&mut self, client: &Client) -> Result<Vec<String>, VolumeError> {
        let mut events = Vec::new();
        let mut listed = std::collections::HashSet::new();
        for pool in client.map().pools() {
            if pool.erasure.is_some() {
                // Volume headers live in replicated pools only.
                continue;
            }
            for info in client.list(&pool.name, HEADER_PREFIX).await? {
                let name = info.key[HEADER_PREFIX.len()..].to_string();
                let id = (pool.name.clone(), name.clone());
                listed.insert(id.clone());
                if self.idle.get(&id) == Some(&info.version) {
                    continue;
                }
                let data = match client.get(&pool.name, &info.key).await {
                    Ok(data) => data,
                    Err(ClientError::NotFound { .. }) => continue,
                    Err(error) => return Err(error.into()),
                };
                let Ok(header) = VolumeHeader::decode(&name, &data) else { continue };
                if header.trim.is_none() {
                    self.idle.insert(id, info.version);
                    continue;
                }
                let started = Instant::now();
                match run(client, &name, self.rate, |_| {}).await? {
                    Outcome::Done { removed, volume_removed } => events.push(format!(
                        "volume '{name}': {removed} snapshot copies trimmed in {:.1} s{}",
                        started.elapsed().as_secs_f64(),
                        if volume_removed { ", volume removed" } else { "" }
                    )),
                    Outcome::Waiting(_) | Outcome::Idle | Outcome::Elsewhere { .. } => {}
                }
            }
        }
        self.idle.retain(|id, _| listed.contains(id));
        Ok(events)
    }
}
