//! Where an object is: its candidates, the choice cache, probes of the candidates' primaries
//! (and their piggybacked metrics), and the policy's choice over those metrics.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use optio_placement::PoolId;
use optio_proto::{ChoiceRecord, DeviceMetrics, ErrorKind, ObjectInfo, validate_key};

use crate::candidates::{Candidate, candidates};
use crate::error::ClientError;
use crate::policy::{self, Policy};
use crate::transport::{Answer, Endpoint, Failure, Op};

use super::{Client, RETRIES_MAX, View, policy_override};

/// Where an object lives, as [`Client::stat`] reports it.
#[derive(Clone, Debug)]
pub struct ObjectLocation {
    /// The candidate holding it.
    pub candidate: Candidate,
    /// What its primary (or the first replica that answered) stores.
    pub info: ObjectInfo,
}

/// One candidate in a probe report.
#[derive(Clone, Debug)]
pub struct CandidateProbe {
    /// The candidate.
    pub candidate: Candidate,
    /// What its primary stores, if anything.
    pub info: Option<ObjectInfo>,
    /// The primary's metrics (`None`: unreachable).
    pub metrics: Option<DeviceMetrics>,
    /// Why the primary could not be probed.
    pub error: Option<String>,
}

/// What [`Client::probe`] found.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    /// Each candidate.
    pub candidates: Vec<CandidateProbe>,
    /// The choice record at the home, if any.
    pub record: Option<ChoiceRecord>,
    /// The candidate holding the object, if any.
    pub holder: Option<u8>,
}

/// The engine input a candidate stands for, as stored in object headers (`x-optio-pg`): its
/// PG seed, or its placement key for pools without PGs.
pub(super) fn placement_seed(candidate: &Candidate) -> u32 {
    candidate.pg.map(|pg| pg.seed).unwrap_or(candidate.placement_key)
}

/// The candidates whose primary did not answer its probe.
pub(super) fn unanswered(candidates: &[Candidate], probes: &[Probed]) -> Vec<u8> {
    candidates.iter().zip(probes).filter(|(_, p)| p.answer.is_err()).map(|(c, _)| c.index).collect()
}

/// A refusal of the request's signature or capability, as an error (anything else: `Ok`).
pub(super) fn denied(key: &str, device: u32, failure: &Failure) -> Result<(), ClientError> {
    match failure {
        Failure::Refused {
            kind: ErrorKind::Unauthorized | ErrorKind::Forbidden, reason, ..
        } => Err(ClientError::Denied { key: key.to_string(), device, reason: reason.clone() }),
        _ => Ok(()),
    }
}

/// Among the candidates found holding the object — `(index probed, what it stores)` — the one
/// holding the newest version. Copies of a key can sit on more than one candidate: a copy a
/// write sent ahead of its record and could not undo (its server died in between), or data
/// followed by a record that was lost; the newest is the one acknowledged last.
pub(super) fn newest_holder<'a>(
    candidates: &[Candidate],
    found: impl IntoIterator<Item = (u8, Option<&'a ObjectInfo>)>,
) -> Option<u8> {
    found
        .into_iter()
        .max_by_key(|(_, info)| info.map(|i| i.version))
        .map(|(i, info)| holder_of(candidates, info).unwrap_or(i))
}

/// The candidate a stored object belongs to, from the seed in its header.
pub(super) fn holder_of(candidates: &[Candidate], info: Option<&ObjectInfo>) -> Option<u8> {
    let seed = info?.pg_seed?;
    candidates.iter().find(|c| placement_seed(c) == seed).map(|c| c.index)
}

/// How long metrics heard from a device stay fresh enough to choose on without probing.
pub const METRICS_FRESH: Duration = Duration::from_secs(2);

/// How one candidate's primary answered a probe.
pub(super) struct Probed {
    pub(super) answer: Result<Answer, Failure>,
}

/// A key on one view of the map: the view, the pool, the key and its candidates — what the
/// choice of a candidate works on.
#[derive(Clone, Copy)]
pub(super) struct Keyed<'a> {
    pub(super) view: &'a View,
    pub(super) pool: PoolId,
    pub(super) key: &'a str,
    pub(super) candidates: &'a [Candidate],
}

/// Where one attempt of an operation found its object: the map it used, the pool, the key's
/// candidates and the one holding the object.
pub(super) struct Located {
    pub(super) view: Arc<View>,
    pub(super) pool: PoolId,
    pub(super) candidates: Vec<Candidate>,
    pub(super) chosen: u8,
}

impl Located {
    /// The candidate holding the object.
    pub(super) fn candidate(&self) -> &Candidate {
        &self.candidates[usize::from(self.chosen)]
    }
}

impl Client {
    /// The retry → locate → not-found step of the operations on an existing object: takes
    /// the current view and locates `key` on it, counting the attempt in `attempts`. An epoch
    /// refusal while locating tries again; an object found nowhere is
    /// [`ClientError::NotFound`]; after [`RETRIES_MAX`] attempts (the caller's retries
    /// included) it is [`ClientError::EpochRetries`]. The caller loops: an attempt that must
    /// start over (an epoch change, a stale cache entry) calls it again.
    pub(super) async fn retry_located(
        &self,
        pool_name: &str,
        key: &str,
        attempts: &mut usize,
    ) -> Result<Located, ClientError> {
        while *attempts < RETRIES_MAX {
            *attempts += 1;
            let view = self.view();
            self.learn_settling(&view).await;
            let pool = view.pool(pool_name)?;
            let candidates = self.candidates_in(&view, pool, key);
            let chosen = match self.locate(&view, pool, key, &candidates).await {
                Err(ClientError::EpochRetries { .. }) => continue,
                other => other?,
            };
            let Some(chosen) = chosen else {
                return Err(ClientError::NotFound {
                    pool: pool_name.to_string(),
                    key: key.to_string(),
                });
            };
            return Ok(Located { view, pool, candidates, chosen });
        }
        Err(ClientError::EpochRetries { attempts: RETRIES_MAX })
    }

    /// The candidates of `key` in `pool`.
    pub fn candidates(&self, pool: &str, key: &str) -> Result<Vec<Candidate>, ClientError> {
        let view = self.view();
        let pool = view.pool(pool)?;
        Ok(self.candidates_in(&view, pool, key))
    }

    pub(super) fn candidates_in(&self, view: &View, pool: PoolId, key: &str) -> Vec<Candidate> {
        let memo = &view.candidates;
        if let Some(known) =
            memo.lock().expect("candidates lock").get(&pool).and_then(|keys| keys.get(key))
        {
            return known.clone();
        }
        let placement = view.placement.pool(pool).expect("pool ids come from this map");
        let computed = candidates(&view.placement, &placement, key).1;
        let mut memo = memo.lock().expect("candidates lock");
        let keys = memo.entry(pool).or_default();
        if keys.len() >= super::CANDIDATES_KEPT {
            keys.clear();
        }
        keys.insert(key.to_string(), computed.clone());
        computed
    }

    /// Probes the primaries of `candidates` in parallel (the home asked for its record too).
    pub(super) async fn probe_primaries(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
    ) -> Result<Vec<Probed>, ClientError> {
        let mut endpoints = Vec::with_capacity(candidates.len());
        for candidate in candidates {
            let primary = candidate
                .primary()
                .ok_or_else(|| ClientError::NoDevices { key: key.to_string() })?;
            endpoints.push(view.endpoint(primary)?);
        }
        let calls = endpoints.iter().enumerate().map(|(i, endpoint)| {
            let probe = Op::Probe { key, want_choice: i == 0 };
            self.call(self.object_call(view, endpoint, pool, probe))
        });
        Ok(join_all(calls).await.into_iter().map(|answer| Probed { answer }).collect())
    }

    /// Which candidate holds `key`, without writing: the cache, else the home's record or
    /// object, else the other candidates (probed in parallel). `None`: nowhere.
    pub(super) async fn locate(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
    ) -> Result<Option<u8>, ClientError> {
        if candidates.len() == 1 {
            return Ok(Some(0));
        }
        if let Some(c) = self.inner.cache.get(pool.0, key)
            && usize::from(c) < candidates.len()
        {
            self.inner.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(c));
        }
        self.inner.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
        if self.in_transition(view, pool) {
            return self.locate_careful(view, pool, key, candidates).await;
        }
        let home = self.probe_primaries(view, pool, key, &candidates[..1]).await?;
        let mut failures = Vec::new();
        match &home[0].answer {
            Ok(answer) => {
                if let Some(record) = answer.record
                    && usize::from(record.candidate) < candidates.len()
                {
                    self.inner.cache.insert(pool.0, key, record.candidate);
                    return Ok(Some(record.candidate));
                }
            }
            Err(failure) => failures.push(failure.clone()),
        }
        // No record at the home (or the home is unreachable): ask the others, and follow the
        // newest copy found.
        let home_unreachable = !failures.is_empty();
        let others = self.probe_primaries(view, pool, key, &candidates[1..]).await?;
        let mut found = Vec::new();
        if let Ok(answer) = &home[0].answer
            && answer.status == 200
        {
            found.push((0, answer.info.as_ref()));
        }
        for (i, probed) in others.iter().enumerate() {
            match &probed.answer {
                Ok(answer) if answer.status == 200 => {
                    found.push((i as u8 + 1, answer.info.as_ref()));
                }
                Ok(_) => {}
                Err(failure) => failures.push(failure.clone()),
            }
        }
        if let Some(c) = newest_holder(candidates, found) {
            self.inner.cache.insert(pool.0, key, c);
            return Ok(Some(c));
        }
        let refs: Vec<&Failure> = failures.iter().collect();
        if self.epoch_retry(&refs).await? {
            return Err(ClientError::EpochRetries { attempts: 0 });
        }
        // With the home down, candidate 0's other replicas may still have it: read them.
        Ok(home_unreachable.then_some(0))
    }

    /// For the candidates (indices) whose primary could not be probed: which one holds the
    /// object, asking their other replicas. A candidate none of whose replicas answers may
    /// hold it, so creating the object elsewhere is refused.
    pub(super) async fn probe_secondaries(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        unreachable: &[usize],
    ) -> Result<Option<u8>, ClientError> {
        for &i in unreachable {
            let candidate = &candidates[i];
            let endpoints: Vec<Endpoint> = candidate
                .devices
                .iter()
                .skip(1)
                .map(|d| view.endpoint(*d))
                .collect::<Result<_, _>>()?;
            let answers = join_all(endpoints.iter().map(|e| {
                self.call(self.object_call(view, e, pool, Op::Probe { key, want_choice: false }))
            }))
            .await;
            for (endpoint, answer) in endpoints.iter().zip(&answers) {
                if let Err(failure) = answer {
                    denied(key, endpoint.device, failure)?;
                }
            }
            if let Some(answer) = answers.iter().flatten().find(|a| a.status == 200) {
                return Ok(Some(holder_of(candidates, answer.info.as_ref()).unwrap_or(i as u8)));
            }
            if answers.iter().all(|a| a.is_err()) {
                return Err(ClientError::CandidateUnreachable {
                    key: key.to_string(),
                    candidate: i as u8,
                    devices: candidate.devices.iter().map(|d| d.0).collect(),
                });
            }
        }
        Ok(None)
    }

    /// Metrics heard within [`METRICS_FRESH`], by device.
    pub(super) fn recent_metrics(&self) -> HashMap<u32, DeviceMetrics> {
        let table = self.inner.device_metrics.lock().expect("metrics lock");
        table
            .iter()
            .filter(|(_, (_, at))| at.elapsed() <= METRICS_FRESH)
            .map(|(d, (m, _))| (*d, m.clone()))
            .collect()
    }

    /// The policy's choice over recently heard metrics, when every candidate's primary was
    /// heard from within [`METRICS_FRESH`] (every answer carries its device's metrics).
    pub(super) fn choice_from_recent_metrics(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        candidates: &[Candidate],
        size_bytes: u64,
        policy: Option<&optio_placement::PolicySpec>,
    ) -> Option<u8> {
        let metrics = self.recent_metrics();
        let fresh =
            candidates.iter().all(|c| c.primary().is_some_and(|p| metrics.contains_key(&p.0)));
        if !fresh {
            return None;
        }
        let at = Keyed { view, pool, key, candidates };
        self.policy_choice(at, size_bytes, &[], &[], policy).ok()
    }

    /// The pool's policy (or `policy_override`, else this client's) over the metrics heard
    /// from the candidates' devices: the primaries of the `down` candidates did not answer,
    /// the `full` devices refused the object for lack of room. Err: why none can take it.
    pub(super) fn policy_choice(
        &self,
        Keyed { view, pool, key, candidates }: Keyed<'_>,
        size_bytes: u64,
        down: &[u8],
        full: &[optio_placement::DeviceId],
        policy_override: Option<&optio_placement::PolicySpec>,
    ) -> Result<u8, optio_placement::choice::ChoiceError> {
        let metrics = self.recent_metrics();
        let mut known: Vec<(optio_placement::DeviceId, policy::Known)> = Vec::new();
        for candidate in candidates {
            for (position, device) in candidate.devices.iter().enumerate() {
                let answered = !(position == 0 && down.contains(&candidate.index));
                match known.iter_mut().find(|(d, _)| d == device) {
                    Some((_, k)) => k.reachable &= answered,
                    None => known.push((
                        *device,
                        policy::Known {
                            metrics: metrics.get(&device.0).cloned(),
                            reachable: answered,
                            refused_full: full.contains(device),
                        },
                    )),
                }
            }
        }
        let table = policy::table(&view.map, known, size_bytes);
        let placement = view.placement.pool(pool).expect("pool ids come from this map");
        let (set, _) = crate::candidates::candidates(&view.placement, &placement, key);
        let request = optio_placement::choice::ChoiceRequest {
            policy: policy_override.or(self.inner.policy.as_ref()).map(|p| p as &dyn Policy),
            client: self.inner.location.as_ref(),
        };
        placement.choose(&set, &table, &request).map(|c| c.key.index)
    }

    pub(super) fn home(
        &self,
        view: &View,
        key: &str,
        candidates: &[Candidate],
    ) -> Result<Endpoint, ClientError> {
        let device = candidates[0]
            .primary()
            .ok_or_else(|| ClientError::NoDevices { key: key.to_string() })?;
        view.endpoint(device)
    }

    /// Where an object lives and what is stored.
    pub async fn stat(&self, pool_name: &str, key: &str) -> Result<ObjectLocation, ClientError> {
        validate_key(key)?;
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, key);
        let not_found =
            || ClientError::NotFound { pool: pool_name.to_string(), key: key.to_string() };
        let chosen = self.locate(&view, pool, key, &candidates).await?.ok_or_else(not_found)?;
        let candidate = candidates[usize::from(chosen)].clone();
        for device in &candidate.devices {
            let endpoint = view.endpoint(*device)?;
            if let Ok(answer) = self
                .call(self.object_call(
                    &view,
                    &endpoint,
                    pool,
                    Op::Probe { key, want_choice: false },
                ))
                .await
                && let Some(info) = answer.info
            {
                return Ok(ObjectLocation { candidate, info });
            }
        }
        Err(not_found())
    }

    /// Probes every candidate's primary (and the home's record): which candidate holds the
    /// object and each candidate's metrics.
    pub async fn probe(&self, pool_name: &str, key: &str) -> Result<ProbeReport, ClientError> {
        validate_key(key)?;
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, key);
        let probes = self.probe_primaries(&view, pool, key, &candidates).await?;
        let mut record = None;
        let mut holder = None;
        let mut out = Vec::new();
        for (candidate, probed) in candidates.into_iter().zip(probes) {
            let (info, metrics, error) = match probed.answer {
                Ok(answer) => {
                    if candidate.index == 0 {
                        record = answer.record;
                    }
                    let info = (answer.status == 200).then_some(answer.info).flatten();
                    (info, answer.metrics, None)
                }
                Err(failure) => (None, None, Some(failure.to_string())),
            };
            if info.is_some() && holder.is_none() {
                holder = Some(candidate.index);
            }
            out.push(CandidateProbe { candidate, info, metrics, error });
        }
        // A record naming no candidate of the pool is reported, not followed.
        if let Some(record) = record
            && usize::from(record.candidate) < out.len()
        {
            holder = Some(record.candidate);
        }
        Ok(ProbeReport { candidates: out, record, holder })
    }

    /// Which candidate `policy` (default: this client's, else the pool's) would choose for a
    /// new object `key` of `size_bytes`, on metrics fresh from probing the candidates.
    pub async fn policy_pick(
        &self,
        pool_name: &str,
        key: &str,
        size_bytes: u64,
        policy: Option<&str>,
    ) -> Result<u8, ClientError> {
        let spec = policy.map(policy_override).transpose()?;
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, key);
        let probes = self.probe_primaries(&view, pool, key, &candidates).await?;
        let down = unanswered(&candidates, &probes);
        let at = Keyed { view: &view, pool, key, candidates: &candidates };
        self.policy_choice(at, size_bytes, &down, &[], spec.as_ref())
            .map_err(|error| ClientError::no_choice(key, size_bytes, error))
    }

    /// Probes the primary of candidate 0 once (a probe round trip), returning whether the
    /// object exists there.
    pub async fn probe_once(&self, pool_name: &str, key: &str) -> Result<bool, ClientError> {
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let candidates = self.candidates_in(&view, pool, key);
        let probes = self.probe_primaries(&view, pool, key, &candidates[..1]).await?;
        match &probes[0].answer {
            Ok(answer) => Ok(answer.status == 200),
            Err(failure) => Err(ClientError::Refused {
                device: candidates[0].primary().map_or(0, |d| d.0),
                kind: failure.kind().unwrap_or(ErrorKind::Io),
                reason: failure.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use optio_placement::DeviceId;

    use super::*;
    use std::path::Path;
    use std::time::Instant;

    use crate::client::ClientConfig;

    /// A client of a map of 6 devices on 6 hosts whose pools `data` (crush) and `blobs` (ring)
    /// have the given k and policy, and `plain` has none. No server listens: nothing here
    /// sends a request.
    async fn client(dir: &Path, choices: u32, policy: &str, own: Option<&str>) -> Client {
        let mut text = String::from("format_version = 1\nepoch = 1\n\n");
        for id in 0..6 {
            text.push_str(&format!(
                "[[devices]]\nid = {id}\ncapacity = 1073741824\nweight = 1.0\naddr = \"127.0.0.1:9\"\nlocation = {{ zone = \"z1\", host = \"h{id}\" }}\n\n"
            ));
        }
        text.push_str(&format!(
            "[[rules]]\nid = 0\nname = \"by_host\"\nsteps = [\"take default\", \"chooseleaf firstn 0 type host\", \"emit\"]\n\n\
             [[pools]]\nid = 1\nname = \"data\"\nengine = \"crush\"\nrule = \"by_host\"\npg_num = 64\nsize = 3\nchoices = {choices}\npolicy = \"{policy}\"\n\n\
             [[pools]]\nid = 2\nname = \"blobs\"\nengine = \"ring\"\nsize = 3\nvnode_bytes = 16777216\nfailure_domain = \"host\"\nchoices = {choices}\npolicy = \"{policy}\"\n\n\
             [[pools]]\nid = 3\nname = \"plain\"\nengine = \"crush\"\nrule = \"by_host\"\npg_num = 64\nsize = 3\n"
        ));
        let path = dir.join("map.toml");
        std::fs::write(&path, text).expect("write the map");
        let config = ClientConfig { policy: own.map(str::to_string), ..ClientConfig::default() };
        Client::connect(&path, config).await.expect("connect")
    }

    /// Metrics from every device, `space_permille` of device d being `space(d)`.
    fn hear(client: &Client, space: impl Fn(u32) -> u16) {
        let mut table = client.inner.device_metrics.lock().unwrap();
        for device in 0..6 {
            let metrics = DeviceMetrics {
                device,
                space_permille: space(device),
                capacity_bytes: 1 << 30,
                ..DeviceMetrics::default()
            };
            table.insert(device, (metrics, Instant::now()));
        }
    }

    fn choose(client: &Client, pool: &str, key: &str, down: &[u8], full: &[u32]) -> Option<u8> {
        let view = client.view();
        let pool = view.pool(pool).unwrap();
        let candidates = client.candidates_in(&view, pool, key);
        let full: Vec<DeviceId> = full.iter().map(|&d| DeviceId(d)).collect();
        let at = Keyed { view: &view, pool, key, candidates: &candidates };
        client.policy_choice(at, 1, down, &full, None).ok()
    }

    #[tokio::test]
    async fn k_and_the_policy_are_the_pools_unless_overridden() {
        let dir = tempfile::tempdir().unwrap();
        let pooled = client(dir.path(), 3, "space", None).await;
        let first = client(dir.path(), 3, "space", Some("first")).await;
        for pool in ["data", "blobs"] {
            let mut moved = 0;
            for i in 0..50 {
                let key = format!("object-{i}");
                let candidates = pooled.candidates(pool, &key).unwrap();
                assert_eq!(candidates.len(), 3, "k = 3, from the map");
                assert_eq!(
                    first.candidates(pool, &key).unwrap(),
                    candidates,
                    "an override keeps k"
                );
                // Candidate 0's devices fuller than the others: `space` moves the object
                // whenever another candidate avoids them, `first` never does.
                let home: Vec<u32> = candidates[0].devices.iter().map(|d| d.0).collect();
                let space = |d: u32| if home.contains(&d) { 700 } else { 100 };
                hear(&pooled, space);
                hear(&first, space);
                let spare = candidates[1..]
                    .iter()
                    .position(|c| c.devices.iter().all(|d| !home.contains(&d.0)))
                    .map(|p| p as u8 + 1);
                assert_eq!(
                    choose(&pooled, pool, &key, &[], &[]),
                    Some(spare.unwrap_or(0)),
                    "{key}"
                );
                assert_eq!(choose(&first, pool, &key, &[], &[]), Some(0), "{key}");
                moved += usize::from(spare.is_some());
            }
            assert!(moved > 0, "{pool}: some object had a candidate away from its home's devices");
        }
        assert_eq!(pooled.candidates("plain", "object-0").unwrap().len(), 1, "k = 1 by default");
    }

    #[tokio::test]
    async fn a_refused_write_excludes_only_the_candidates_on_the_full_device() {
        let dir = tempfile::tempdir().unwrap();
        let client = client(dir.path(), 2, "first", None).await;
        hear(&client, |_| 100);
        // A key whose home's primary is also in candidate 1, while another of the home's
        // devices is not: that one refusing the object must not exclude candidate 1.
        let (key, refusing) = (0..1000)
            .find_map(|i| {
                let key = format!("object-{i}");
                let c = client.candidates("data", &key).unwrap();
                let (home, other) = (&c[0].devices, &c[1].devices);
                let refusing = home.iter().find(|d| !other.contains(d))?;
                other[1..].contains(&home[0]).then_some((key, refusing.0))
            })
            .expect("such a key");
        assert_eq!(choose(&client, "data", &key, &[], &[]), Some(0), "first: the home");
        assert_eq!(choose(&client, "data", &key, &[], &[refusing]), Some(1));
        let shared = client.candidates("data", &key).unwrap()[0].devices[0].0;
        assert_eq!(choose(&client, "data", &key, &[], &[shared]), None, "both are on it");
        // The home's primary did not answer: candidate 1 has it as a replica, so it is down
        // for both.
        assert_eq!(choose(&client, "data", &key, &[0], &[]), None);
        // A device too full for the object excludes its candidates as a refusal does.
        hear(&client, |d| if d == refusing { 999 } else { 100 });
        assert_eq!(choose(&client, "data", &key, &[], &[]), Some(1));
    }

    #[tokio::test]
    async fn a_client_cannot_override_with_an_unknown_or_weightless_policy() {
        let dir = tempfile::tempdir().unwrap();
        client(dir.path(), 2, "first", None).await;
        let path = dir.path().join("map.toml");
        for (name, says) in [("fastest", "unknown policy 'fastest'"), ("composite", "weights")] {
            let config = ClientConfig { policy: Some(name.into()), ..ClientConfig::default() };
            let error = Client::connect(&path, config).await.err().expect("refused");
            assert!(error.to_string().contains(says), "{error}");
        }
    }
}
