//! The admin API under `/api/v1/` (docs/console-openapi.yaml): JSON in the shapes the CLI's
//! `--json` prints — one definition each, in the CLI's modules — and the map edits as a
//! compare-and-swap on the epoch, judged by the code of `optio map … --dry-run`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use optio_cluster::{ClusterError, MapEdit};
use optio_placement::analysis::{PlacedMap, PlacedPool, cluster_load_of};
use optio_placement::{
    ChangeReport, ClusterMap, DeviceId, MapChange, MovementSample, Placement, PoolId,
};
use optio_proto::auth::Cap;
use serde_json::{Value, json};

use super::session::{CSRF_HEADER, Login, Refusal, Session, cookie_token};
use crate::commands::edit::{OBJECT_BYTES, SAMPLE_OBJECTS, copies_json, find_device, moves_json};
use crate::commands::status::{
    Health, ServerRow, Space, all_done, health_with, pg_states, pg_states_placed, servers,
    servers_json, space,
};

/// How long the servers' answers are kept (the page polls every second; several pages, or
/// several endpoints of one, ask the servers once).
pub const SERVERS_CACHE_TTL: Duration = Duration::from_millis(900);
/// How long a refused login waits before it answers.
pub const LOGIN_REFUSAL_DELAY: Duration = Duration::from_millis(250);
/// Most bytes of a request body.
pub const BODY_BYTES_MAX: usize = 64 * 1024;

/// The servers' answers, when they were asked and for which epoch.
type ServersAnswer = (Instant, u64, Arc<Servers>);

/// The servers' request rates ([`super::rates::Rates`]), when they were scraped.
type RatesAnswer = (Instant, Arc<super::rates::Rates>);

/// The last scrape of each server's `/metrics` and when it was made.
type Scrapes = std::collections::HashMap<String, (Instant, super::rates::Scrape)>;

/// The placement groups' states, for an epoch and the devices serving.
type PgStatesAnswer = (u64, std::collections::BTreeSet<u32>, crate::commands::status::PgStates);

/// How often the console looks at a map file for a new map to place before anyone asks
/// ([`Console::keep_warm`]): a `stat` when nothing changed.
const WARM_INTERVAL: Duration = Duration::from_millis(100);

/// What the handlers share (here, with the handlers, so that the routes in the parent module
/// depend on this one and not the other way round).
pub struct Console {
    source: optio_cluster::source::MapSource,
    /// The map file last parsed and its stamp (a file source: parsed again only when the
    /// file changed; a 1,000-device map takes tens of milliseconds to parse and check).
    map_cache: std::sync::Mutex<Option<(optio_cluster::file::FileStamp, ClusterMap)>>,
    pub(super) transport: optio_net::HttpTransport,
    sessions: super::session::Sessions,
    servers_cache: tokio::sync::Mutex<Option<ServersAnswer>>,
    balance_cache: std::sync::Mutex<Option<Arc<Balance>>>,
    /// Held while a balance is computed (one at a time).
    balance_computing: std::sync::Mutex<()>,
    /// The changes judged lately and what they move ([`Console::judge`]).
    judged: super::judged::Judged<Balance>,
    /// The epoch whose incremental pools the warmer prepared a rebalance for.
    prepared_epoch: std::sync::atomic::AtomicU64,
    /// Engine comparisons of a pool ([`compare`]), for one epoch.
    pub(super) compare_cache:
        std::sync::Mutex<(u64, std::collections::HashMap<PoolId, Arc<Value>>)>,
    /// The placement groups' states for an epoch and the devices serving then.
    pg_states_cache: std::sync::Mutex<Option<PgStatesAnswer>>,
    /// The servers' rates as last computed, and each server's last scrape.
    pub(super) rates_cache: tokio::sync::Mutex<(Option<RatesAnswer>, Scrapes)>,
    /// How volumes and S3 reach the cluster (its directory), and the client once connected.
    cluster: Option<crate::commands::client::ClusterConn>,
    client: tokio::sync::Mutex<Option<optio_client::Client>>,
    /// The pool of the S3 gateway's users and bucket records.
    pub(super) s3_meta_pool: String,
    /// The bounds on logins.
    pub(super) gate: super::throttle::LoginGate,
    started: Instant,
}

impl Console {
    /// A console reading the map from `source`, asking the servers through `transport`,
    /// checking logins with `sessions`.
    pub fn new(
        source: optio_cluster::source::MapSource,
        transport: optio_net::HttpTransport,
        sessions: super::session::Sessions,
    ) -> Console {
        Console {
            source,
            map_cache: std::sync::Mutex::new(None),
            transport,
            sessions,
            servers_cache: tokio::sync::Mutex::new(None),
            balance_cache: std::sync::Mutex::new(None),
            balance_computing: std::sync::Mutex::new(()),
            compare_cache: std::sync::Mutex::new((0, Default::default())),
            judged: Default::default(),
            prepared_epoch: std::sync::atomic::AtomicU64::new(u64::MAX),
            pg_states_cache: std::sync::Mutex::new(None),
            rates_cache: tokio::sync::Mutex::new((None, Default::default())),
            cluster: None,
            client: tokio::sync::Mutex::new(None),
            s3_meta_pool: "data".into(),
            gate: super::throttle::LoginGate::new(
                super::throttle::REFUSAL_WINDOW,
                super::throttle::REFUSALS_MAX,
            ),
            started: Instant::now(),
        }
    }

    /// Volumes and S3 through a client of the cluster `conn` names, the gateway's records in
    /// `s3_meta_pool`.
    pub fn with_cluster(
        mut self,
        conn: Option<crate::commands::client::ClusterConn>,
        s3_meta_pool: String,
    ) -> Console {
        self.cluster = conn;
        self.s3_meta_pool = s3_meta_pool;
        self
    }

    /// Logins refused per client address beyond `max_refused` in `window` answer 429.
    pub fn with_login_limits(mut self, window: Duration, max_refused: usize) -> Console {
        self.gate = super::throttle::LoginGate::new(window, max_refused);
        self
    }

    /// Where the map is read from.
    pub fn source(&self) -> &optio_cluster::source::MapSource {
        &self.source
    }
}

/// An API error: its status and a message saying what to do.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    pub(super) extra: Value,
    /// Seconds to wait (`Retry-After`), for a 429.
    retry_after_s: Option<u64>,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), extra: Value::Null, retry_after_s: None }
    }

    pub(super) fn bad(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message.to_string())
    }

    pub(super) fn internal(error: impl std::fmt::Display) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> ApiError {
        match refusal {
            Refusal::Unauthenticated(m) => ApiError::new(StatusCode::UNAUTHORIZED, m),
            Refusal::Forbidden(m) => ApiError::new(StatusCode::FORBIDDEN, m),
            Refusal::Busy(m) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m),
        }
    }
}

impl From<super::throttle::Throttled> for ApiError {
    fn from(throttled: super::throttle::Throttled) -> ApiError {
        let mut error = ApiError::new(StatusCode::TOO_MANY_REQUESTS, throttled.message);
        error.retry_after_s = Some(throttled.retry_after_s);
        error.extra = json!({ "retry_after_s": throttled.retry_after_s });
        error
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.message });
        if let Value::Object(extra) = self.extra {
            for (k, v) in extra {
                body[k] = v;
            }
        }
        let mut response = json_response(self.status, &body);
        if let Some(seconds) = self.retry_after_s {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

pub(super) fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

pub(super) fn ok(body: Value) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &body))
}

pub(super) type Answer = Result<Response, ApiError>;

impl Console {
    /// The session of a request that needs `need` (and, for a mutation, its CSRF token).
    pub(super) fn authorize(
        &self,
        headers: &HeaderMap,
        need: Cap,
        mutation: bool,
    ) -> Result<Session, ApiError> {
        let cookie = headers.get(header::COOKIE).and_then(|v| v.to_str().ok());
        let csrf = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        Ok(self.sessions.check(cookie_token(cookie), csrf, need, mutation)?.1)
    }

    pub(super) async fn map(&self) -> Result<ClusterMap, ApiError> {
        // A file's stamp (time, length, inode) is taken before it is read: a change made
        // while it is read gives another stamp, and the next request reads it again.
        let stamp = match &self.source {
            optio_cluster::source::MapSource::File(store) => store.stamp(),
            _ => None,
        };
        if let Some(stamp) = stamp {
            let cache = self.map_cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((seen, map)) = &*cache
                && *seen == stamp
            {
                return Ok(map.clone());
            }
        }
        let map = self.source.load().await.map_err(|e| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                format!("cannot read the map at {}: {}", self.source.describe(), e.report()),
            )
        })?;
        if let Some(stamp) = stamp {
            *self.map_cache.lock().unwrap_or_else(|e| e.into_inner()) = Some((stamp, map.clone()));
        }
        Ok(map)
    }

    /// The servers' answers for `map` and the health they give, asked and judged at most
    /// once per [`SERVERS_CACHE_TTL`].
    async fn servers(&self, map: &ClusterMap) -> Arc<Servers> {
        let mut cache = self.servers_cache.lock().await;
        if let Some((at, epoch, answer)) = &*cache
            && at.elapsed() < SERVERS_CACHE_TTL
            && *epoch == map.epoch().0
        {
            return answer.clone();
        }
        let rows = servers(map, &self.transport).await;
        // The PGs' sets from the map placed once per epoch (the balance's); without it (a map
        // that does not compile), placed here.
        let placed = self.balance(map).ok().map(|b| b.placed.clone());
        // Placing every PG of every pool: CPU work, off the async workers' hands.
        let (health, settled) = tokio::task::block_in_place(|| {
            let pgs = |map: &ClusterMap, serving: &BTreeSet<u32>| {
                let mut cache = self.pg_states_cache.lock().unwrap_or_else(|e| e.into_inner());
                match &*cache {
                    Some((epoch, known, states)) if *epoch == map.epoch().0 && known == serving => {
                        *states
                    }
                    _ => {
                        let states = match &placed {
                            Some(placed) => pg_states_placed(map, placed, serving),
                            None => pg_states(map, serving),
                        };
                        *cache = Some((map.epoch().0, serving.clone(), states));
                        states
                    }
                }
            };
            (health_with(map, &rows, pgs), all_done(map, &rows))
        });
        let answer = Arc::new(Servers { rows, health, settled });
        *cache = Some((Instant::now(), map.epoch().0, answer.clone()));
        answer
    }

    /// A client of the cluster (connected at the first use), for volumes and S3.
    pub(super) async fn client(&self) -> Result<optio_client::Client, ApiError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = &*slot {
            return Ok(client.clone());
        }
        let Some(conn) = &self.cluster else {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "volumes and S3 need the cluster directory (its client settings): start the console with --cluster DIR",
            ));
        };
        let client = conn.connect().await.map_err(|e| {
            ApiError::new(StatusCode::BAD_GATEWAY, format!("cannot reach the cluster: {e:#}"))
        })?;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// The S3 gateway's users and buckets (a fresh gateway: nothing cached across requests).
    pub(super) async fn gateway(&self) -> Result<optio_s3::Gateway, ApiError> {
        let client = self.client().await?;
        optio_s3::Gateway::new(client, &self.s3_meta_pool).map_err(s3_error)
    }

    /// PG copies per device and every pool's balance (as `optio analyze --json` reports it),
    /// computed once per epoch.
    fn balance(&self, map: &ClusterMap) -> Result<Arc<Balance>, ApiError> {
        let cached = |cache: &Option<Arc<Balance>>| {
            cache.as_ref().filter(|b| b.epoch == map.epoch().0).cloned()
        };
        if let Some(balance) = cached(&self.balance_cache.lock().unwrap_or_else(|e| e.into_inner()))
        {
            return Ok(balance);
        }
        // Placing every PG and the sample's objects: CPU work, off the async workers' hands,
        // and without the cache's lock; one computation at a time (a request arriving while
        // the warmer computes the same epoch waits for it instead of doing it again).
        tokio::task::block_in_place(|| {
            let _one = self.balance_computing.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(balance) =
                cached(&self.balance_cache.lock().unwrap_or_else(|e| e.into_inner()))
            {
                return Ok(balance);
            }
            // A map a change judged lately leads to (the console committed it, say) was
            // placed then.
            let balance = match self.judged.balance_of(map) {
                Some(balance) => balance,
                None => Arc::new(balance_of(map)?),
            };
            *self.balance_cache.lock().unwrap_or_else(|e| e.into_inner()) = Some(balance.clone());
            Ok(balance)
        })
    }

    /// `change` judged on `map` ([`judge`]), or found judged lately.
    async fn judge(
        &self,
        map: ClusterMap,
        change: MapChange,
    ) -> Result<Arc<super::judged::Judgement<Balance>>, ApiError> {
        if let Some(judged) = self.judged.of_change(&map, &change) {
            return Ok(judged);
        }
        let before = self.balance(&map)?;
        let judged = tokio::task::spawn_blocking(move || judge(map, &before, &change))
            .await
            .map_err(ApiError::internal)??;
        let judged = Arc::new(judged);
        self.judged.remember(judged.clone());
        Ok(judged)
    }

    /// Follows the map and computes what the first request at a new epoch needs (the map
    /// parsed, every pool placed, the balance, each incremental pool's rebalance prepared),
    /// so that a page loaded or a what-if asked a moment after a map change — made by the
    /// console or by anyone — finds it done or under way instead of starting it. A map file
    /// is looked at every [`WARM_INTERVAL`] (a `stat`; parsed once per change, shared with
    /// the requests); an etcd map is watched (a change arrives as it is stored).
    pub async fn keep_warm(self: Arc<Self>) {
        match &self.source {
            optio_cluster::source::MapSource::File(_) => {
                let mut interval = tokio::time::interval(WARM_INTERVAL);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    interval.tick().await;
                    if let Ok(map) = self.map().await {
                        self.warm(map).await;
                    }
                }
            }
            _ => {
                let mut watcher = self.source.watch_after(None);
                loop {
                    match watcher.next().await {
                        Ok(map) => self.warm(map).await,
                        // A map that does not parse: the requests say so; wait for the next.
                        Err(error) => tracing::warn!(%error, "the console's warmer skips a map"),
                    }
                }
            }
        }
    }

    /// Places `map` and prepares its incremental pools' rebalances (once per epoch).
    async fn warm(self: &Arc<Self>, map: ClusterMap) {
        let epoch = map.epoch().0;
        if self.prepared_epoch.load(Ordering::Relaxed) == epoch {
            return;
        }
        let _ = self.balance(&map);
        // A what-if at this epoch rebalances each incremental pool from its state: the
        // pool's placement under that state, computed now (after the balance, so that no
        // page waits for it), is remembered for those.
        if self.prepared_epoch.swap(epoch, Ordering::Relaxed) != epoch {
            let _ = tokio::task::spawn_blocking(move || {
                for pool in map.pools() {
                    let _ = optio_placement::engine::balanced::incremental::prepare_rebalance(
                        &map, pool,
                    );
                }
            })
            .await;
        }
    }
}

/// The servers' answers for one epoch, and the health they give.
pub struct Servers {
    rows: Vec<ServerRow>,
    health: Health,
    settled: bool,
}

/// What the placement of one map gives each device and pool.
pub struct Balance {
    epoch: u64,
    /// PG copies per device id.
    pgs: Vec<u64>,
    /// Every pool's balance report, by pool id.
    pools: Vec<(PoolId, Value)>,
    /// The map's pools placed (what a what-if's movement is counted against).
    placed: Arc<PlacedMap>,
    /// Every pool's units per device against the ideal ([`placement_json`]), by pool id.
    placement: Vec<(PoolId, Value)>,
}

/// What a map is placed after: the map before a change, the change, and that map placed (a
/// pool that a change leaves mostly alone is placed from its placement before).
type PlacedBefore<'a> = (&'a ClusterMap, &'a MapChange, &'a PlacedMap);

/// Compiles `map` and places its pools with [`SAMPLE_OBJECTS`] simulated objects, the pools
/// shared out over two threads (the heaviest first, each to the less loaded thread). With
/// `after`, a pool the change confines to a few PGs (a device marked out, for crush pools:
/// [`PlacedPool::place_after`]) is placed from its placement before.
fn place_map(map: &ClusterMap, after: Option<PlacedBefore<'_>>) -> Result<PlacedMap, ApiError> {
    let placement = Placement::new(map).map_err(ApiError::internal)?;
    let mut pools: Vec<_> = map.pools().iter().filter_map(|p| placement.pool(p.id)).collect();
    let cost = |p: &optio_placement::PoolPlacement<'_>| u64::from(p.pool().pg_num) + SAMPLE_OBJECTS;
    pools.sort_by_key(|p| std::cmp::Reverse(cost(p)));
    let mut shares: [(u64, Vec<_>); 2] = [(0, Vec::new()), (0, Vec::new())];
    for pool in pools {
        let lighter = usize::from(shares[1].0 < shares[0].0);
        shares[lighter].0 += cost(&pool);
        shares[lighter].1.push(pool);
    }
    let place = |pools: Vec<optio_placement::PoolPlacement<'_>>| -> Vec<PlacedPool> {
        pools
            .into_iter()
            .map(|pool| {
                let id = pool.pool().id;
                after
                    .and_then(|(old, change, before)| {
                        let MapChange::SetState { device, up: None, is_in: Some(false) } = change
                        else {
                            return None;
                        };
                        let previous = before.pools.iter().find(|p| p.pool == id)?;
                        PlacedPool::place_after(
                            &placement,
                            pool,
                            SAMPLE_OBJECTS,
                            old,
                            *device,
                            previous,
                        )
                    })
                    .unwrap_or_else(|| {
                        PlacedPool::place(&placement, pool, SAMPLE_OBJECTS, &mut |_| {})
                    })
            })
            .collect()
    };
    let [(_, first), (_, second)] = shares;
    let mut placed = std::thread::scope(|scope| {
        let other = scope.spawn(|| place(second));
        let mut placed = place(first);
        placed.extend(other.join().expect("placing pools does not panic"));
        placed
    });
    // The map's order, as `PlacedMap::new` gives.
    let order = |id: PoolId| map.pools().iter().position(|p| p.id == id);
    placed.sort_by_key(|p| order(p.pool));
    Ok(PlacedMap { placement, pools: placed })
}

/// The balance of `map`'s pools, from [`SAMPLE_OBJECTS`] simulated objects.
fn balance_of(map: &ClusterMap) -> Result<Balance, ApiError> {
    balance_from(map, Arc::new(place_map(map, None)?))
}

/// The balance of `map`'s pools as `placed`.
fn balance_from(map: &ClusterMap, placed: Arc<PlacedMap>) -> Result<Balance, ApiError> {
    let load = cluster_load_of(map, &placed.pools, OBJECT_BYTES);
    let pools = load
        .pools
        .iter()
        .map(|(id, pool, shares)| {
            (*id, crate::commands::analyze::pool_report(map, *id, pool, shares))
        })
        .collect();
    let placement = load
        .pools
        .iter()
        .map(|(id, pool, shares)| {
            let uses_pgs = map.pool(*id).is_some_and(|p| p.pg_num > 0);
            (*id, placement_json(uses_pgs, pool, shares))
        })
        .collect();
    Ok(Balance { epoch: map.epoch().0, pgs: load.total.pg_copies, pools, placement, placed })
}

/// A pool's placement, device by device, for the page's plot: the devices placement may use
/// (a share of the pool, or something placed on them), what each holds — PG copies for a PG
/// pool, simulated object copies ([`SAMPLE_OBJECTS`]) for the others — and its ideal (its
/// share of the total: its weight's share; the mean when the weights are equal). Columns,
/// not one object per device: a 1,000-device map's six pools stay small.
pub(super) fn placement_json(
    uses_pgs: bool,
    load: &optio_placement::analysis::PoolLoad,
    shares: &[f64],
) -> Value {
    let counts = if uses_pgs { &load.pg_copies } else { &load.objects };
    let eligible: Vec<usize> = (0..shares.len())
        .filter(|&i| {
            shares[i] > 0.0 || load.pg_copies.get(i) > Some(&0) || load.objects.get(i) > Some(&0)
        })
        .collect();
    let total: u64 = counts.iter().sum();
    let ideal: Vec<f64> =
        eligible.iter().map(|&i| (shares[i] * total as f64 * 100.0).round() / 100.0).collect();
    json!({
        "unit": if uses_pgs { "pg_copies" } else { "objects" },
        "devices": eligible,
        "counts": eligible.iter().map(|&i| counts.get(i).copied().unwrap_or(0)).collect::<Vec<u64>>(),
        "ideal": ideal,
        "mean": if eligible.is_empty() { 0.0 } else { total as f64 / eligible.len() as f64 },
    })
}

/// The name of the bucket of type `kind` holding a device (`zone`, `host`), if any.
fn located(map: &ClusterMap, device: DeviceId, kind: &str) -> Option<String> {
    map.location(device).iter().find(|(t, _)| *t == kind).map(|(_, n)| n.to_string())
}

// ---- the session ----

pub async fn login(
    State(console): State<Arc<Console>>,
    extensions: Extensions,
    body: Bytes,
) -> Answer {
    let ip = extensions.get::<ConnectInfo<std::net::SocketAddr>>().map(|c| c.0.ip());
    let mut admitted = console.gate.admit(ip)?;
    let login: Login = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad(format!(
            "a login is JSON {{\"entity\": \"client.NAME\", \"key\": \"BASE64\"}} (or \"signature\" instead of \"key\"): {e}"
        ))
    })?;
    // The check (a keyring read, a signature verified) runs off the async workers, at most
    // LOGIN_CHECKS_MAX at once: a flood of logins queues for a turn, then gets 429.
    let checked = {
        let _turn = console.gate.turn().await?;
        let checker = console.clone();
        tokio::task::spawn_blocking(move || checker.sessions.login(&login))
            .await
            .map_err(ApiError::internal)?
    };
    let (token, session) = match checked {
        Ok(answer) => answer,
        Err(refusal) => {
            if matches!(refusal, super::session::Refusal::Unauthenticated(_)) {
                admitted.refused();
            }
            drop(admitted);
            // A refused login answers late: guessing costs the guesser time, not us CPU.
            tokio::time::sleep(LOGIN_REFUSAL_DELAY).await;
            return Err(refusal.into());
        }
    };
    let mut response = json_response(StatusCode::OK, &session_json(&session));
    let cookie =
        HeaderValue::from_str(&console.sessions.cookie(&token)).map_err(ApiError::internal)?;
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    Ok(response)
}

fn session_json(session: &Session) -> Value {
    json!({
        "entity": session.entity, "cap": session.cap, "csrf_token": session.csrf,
        "expires_in_s": session.expires.saturating_duration_since(Instant::now()).as_secs(),
        "may_change": session.cap.allows(Cap::Admin),
    })
}

pub async fn logout(State(console): State<Arc<Console>>, headers: HeaderMap) -> Answer {
    let cookie = headers.get(header::COOKIE).and_then(|v| v.to_str().ok());
    let csrf = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    let (token, _) = console.sessions.check(cookie_token(cookie), csrf, Cap::Read, true)?;
    console.sessions.logout(&token);
    let mut response = json_response(StatusCode::OK, &json!({ "logged_out": true }));
    let cleared =
        HeaderValue::from_str(&console.sessions.cookie_cleared()).map_err(ApiError::internal)?;
    response.headers_mut().insert(header::SET_COOKIE, cleared);
    Ok(response)
}

pub async fn session(State(console): State<Arc<Console>>, headers: HeaderMap) -> Answer {
    ok(session_json(&console.authorize(&headers, Cap::Read, false)?))
}

/// The console's own counters: logins refused (wrong key), accepted, requests refused,
/// sessions open.
pub async fn console_stats(State(console): State<Arc<Console>>, headers: HeaderMap) -> Answer {
    console.authorize(&headers, Cap::Read, false)?;
    let s = &console.sessions;
    ok(json!({
        "login_failures": s.login_failures.load(Ordering::Relaxed),
        "logins": s.logins.load(Ordering::Relaxed),
        "requests_refused": s.refused.load(Ordering::Relaxed),
        "logins_throttled": console.gate.throttled.load(Ordering::Relaxed),
        "sessions": s.open(),
        "uptime_s": console.started.elapsed().as_secs(),
        "map": console.source.describe(),
    }))
}

// ---- reading ----

pub async fn health_endpoint(State(console): State<Arc<Console>>, headers: HeaderMap) -> Answer {
    console.authorize(&headers, Cap::Read, false)?;
    let map = console.map().await?;
    let servers = console.servers(&map).await;
    ok(json!({
        "epoch": map.epoch().0, "settled": servers.settled,
        "health": serde_json::to_value(&servers.health).map_err(ApiError::internal)?,
    }))
}

pub async fn map_summary(State(console): State<Arc<Console>>, headers: HeaderMap) -> Answer {
    console.authorize(&headers, Cap::Read, false)?;
    let map = console.map().await?;
    let servers = console.servers(&map).await;
    let rows = &servers.rows;
    let devices = map.devices();
    let used: u64 = rows
        .iter()
        .filter_map(|r| r.status.as_ref().ok())
        .flat_map(|s| &s.devices)
        .map(|d| d.metrics.used_bytes)
        .sum();
    let count = |kind: &str| {
        let mut names: Vec<String> =
            devices.iter().filter_map(|d| located(&map, d.id, kind)).collect();
        names.sort();
        names.dedup();
        names.len()
    };
    ok(json!({
        "source": console.source.describe(), "epoch": map.epoch().0,
        "devices": devices.len(),
        "devices_up": devices.iter().filter(|d| d.up).count(),
        "devices_in": devices.iter().filter(|d| d.is_in).count(),
        "hosts": count("host"), "zones": count("zone"),
        "pools": map.pools().len(),
        "capacity_bytes": devices.iter().filter(|d| d.is_in).map(|d| d.capacity_bytes).sum::<u64>(),
        "used_bytes": used,
        "capacity": capacity_json(&space(&map, rows)),
        "tunables": map.tunables().profile().map_or("custom", |p| p.name()),
        // The elastic membership in force (`optio map show --json`'s last version): what
        // the what-if form's resize starts from.
        "membership": map.membership().map(|m| {
            let current = m.current();
            json!({
                "version": current.version, "active": m.active_count(current),
                "servers": m.order.len(), "full_power": m.is_full_power(current),
            })
        }),
    }))
}

/// The overview's capacity: raw and logical space used (`optio status`'s totals).
fn capacity_json(space: &Space) -> Value {
    json!({
        "raw_used_bytes": space.raw_bytes, "logical_used_bytes": space.logical_bytes,
        "raw_objects": space.raw_objects, "objects": space.objects,
        "devices_missing": space.devices_missing, "estimate": space.estimate,
    })
}

pub async fn devices(State(console): State<Arc<Console>>, headers: HeaderMap) -> Answer {
    console.authorize(&headers, Cap::Read, false)?;
    let map = console.map().await?;
    // (Asked together: a server that does not answer costs one timeout, not two.)
    let (servers, rates) = tokio::join!(console.servers(&map), console.rates(&map));
    let rows = &servers.rows;
    let balance = console.balance(&map)?;
    let list: Vec<Value> = map
        .devices()
        .iter()
        .map(|d| {
            let mut value = crate::commands::map::device_json(&map, d);
            value["zone"] = json!(located(&map, d.id, "zone"));
            value["host"] = json!(located(&map, d.id, "host"));
            value["pgs"] = json!(balance.pgs.get(d.id.0 as usize).copied().unwrap_or(0));
            let row = rows.iter().find(|r| r.devices.contains(&d.id.0));
            value["status"] = match row.map(|r| &r.status) {
                Some(Ok(status)) => status
                    .devices
                    .iter()
                    .find(|s| s.metrics.device == d.id.0)
                    .map_or(Value::Null, |s| json!(s)),
                _ => Value::Null,
            };
            value["unreachable"] = match row.map(|r| &r.status) {
                Some(Err(error)) => json!(error),
                _ => Value::Null,
            };
            // The device's own rates, and its server's totals (the overview adds those up).
            let server_rates = d.addr.as_ref().and_then(|a| rates.get(a));
            value["rates"] = server_rates.map_or(Value::Null, |r| r.device(d.id.0));
            value["server_rates"] = server_rates.map_or(Value::Null, |r| r.server.clone());
            value
        })
        .collect();
    ok(json!({ "epoch": map.epoch().0, "devices": list }))
}

pub async fn servers_endpoint(State(console): State<Arc<Console>>, headers: HeaderMap) -> Answer {
    console.authorize(&headers, Cap::Read, false)?;
    let map = console.map().await?;
    let servers = console.servers(&map).await;
    let rows = &servers.rows;
    ok(json!({ "epoch": map.epoch().0, "servers": servers_json(&map, rows) }))
}

pub async fn pools(State(console): State<Arc<Console>>, headers: HeaderMap) -> Answer {
    console.authorize(&headers, Cap::Read, false)?;
    let map = console.map().await?;
    let balance = console.balance(&map)?;
    let servers = console.servers(&map).await;
    let space = space(&map, &servers.rows);
    ok(json!({ "epoch": map.epoch().0, "pools": pools_json(&map, &balance, Some(&space)) }))
}

/// The pools of `map` with their balance and, given the servers' answers, their space.
fn pools_json(map: &ClusterMap, balance: &Balance, space: Option<&Space>) -> Vec<Value> {
    map.pools()
        .iter()
        .map(|p| {
            let mut value = crate::commands::map::pool_json(map, p);
            value["balance"] = balance
                .pools
                .iter()
                .find(|(id, _)| *id == p.id)
                .map_or(Value::Null, |(_, report)| report.clone());
            value["placement"] = balance
                .placement
                .iter()
                .find(|(id, _)| *id == p.id)
                .map_or(Value::Null, |(_, columns)| columns.clone());
            // `optio status --json`'s figures of the pool (its `space.pools` entry).
            if let Some(space) = space {
                value["usage"] =
                    space.pools.iter().find(|u| u.id == p.id.0).map_or(Value::Null, |u| json!(u));
            }
            value
        })
        .collect()
}

// ---- changes ----

/// A change, as the API takes it.
#[derive(Debug, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChangeRequest {
    /// `optio map set-state`.
    SetState {
        /// Device id or name.
        device: Value,
        /// Up (true) or down (false); absent: unchanged.
        #[serde(default)]
        up: Option<bool>,
        /// In (true) or out (false); absent: unchanged.
        #[serde(default, rename = "in")]
        is_in: Option<bool>,
    },
    /// `optio map reweight`.
    Reweight {
        /// Device id or name.
        device: Value,
        /// The CRUSH weight, or with `override` the reweight (0 to 1).
        weight: f64,
        /// Set the reweight instead of the CRUSH weight.
        #[serde(default, rename = "override")]
        reweight: bool,
    },
    /// `optio map add-device`.
    AddDevice {
        /// Its id.
        id: u32,
        /// Its name (default osd.ID).
        #[serde(default)]
        name: Option<String>,
        /// Its location, `zone=z2,host=z2-h4`.
        at: String,
        /// Its capacity.
        capacity_bytes: u64,
        /// Its CRUSH weight (default: the capacity in TiB).
        #[serde(default)]
        weight: Option<f64>,
        /// Its class.
        #[serde(default)]
        class: Option<String>,
        /// Its server's address.
        #[serde(default)]
        addr: Option<String>,
        /// Store it even if nothing at `addr` serves it yet.
        #[serde(default)]
        allow_unreachable: bool,
    },
    /// `optio map remove-device`.
    RemoveDevice {
        /// Device id or name.
        device: Value,
        /// Remove it even if it holds the last copy of something.
        #[serde(default)]
        force: bool,
    },
    /// `optio map set-attr`.
    SetAttr {
        /// Device id or name.
        device: Value,
        /// Its capacity.
        #[serde(default)]
        capacity_bytes: Option<u64>,
        /// Its bandwidth, MB/s.
        #[serde(default)]
        bandwidth_mb_per_s: Option<u32>,
        /// Its class (`"none"` removes it).
        #[serde(default)]
        class: Option<String>,
        /// Its server's address.
        #[serde(default)]
        addr: Option<String>,
    },
    /// `optio resize --active N`: ranks 1 to N of the elastic membership active.
    Resize {
        /// Servers to keep active.
        active: u32,
    },
    /// `optio map activate DEVICES`.
    Activate {
        /// Devices (ids or names).
        devices: Vec<Value>,
    },
    /// `optio map deactivate DEVICES`.
    Deactivate {
        /// Devices (ids or names).
        devices: Vec<Value>,
    },
}

fn device_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl ChangeRequest {
    /// The [`MapChange`] on `map`.
    fn change(&self, map: &ClusterMap) -> Result<MapChange, ApiError> {
        let device = |v: &Value| find_device(map, &device_text(v)).map_err(ApiError::bad);
        Ok(match self {
            ChangeRequest::SetState { device: d, up, is_in } => {
                if up.is_none() && is_in.is_none() {
                    return Err(ApiError::bad("say what to set: \"up\" and/or \"in\""));
                }
                MapChange::SetState { device: device(d)?, up: *up, is_in: *is_in }
            }
            ChangeRequest::Reweight { device: d, weight, reweight } => {
                let value =
                    crate::commands::edit::weight(*weight, "the weight").map_err(ApiError::bad)?;
                if *reweight {
                    if !(0.0..=1.0).contains(weight) {
                        return Err(ApiError::bad(format!("a reweight is 0 to 1, not {weight}")));
                    }
                    MapChange::SetReweight { device: device(d)?, reweight: value }
                } else {
                    MapChange::SetWeight { device: device(d)?, weight: value }
                }
            }
            ChangeRequest::AddDevice {
                id, name, at, capacity_bytes, weight, class, addr, ..
            } => MapChange::AddDevice(
                crate::commands::edit::device_spec(
                    *id,
                    name.clone(),
                    at,
                    *capacity_bytes,
                    *weight,
                    0,
                    class.clone(),
                    addr.clone(),
                )
                .map_err(ApiError::bad)?,
            ),
            ChangeRequest::RemoveDevice { device: d, .. } => MapChange::RemoveDevice(device(d)?),
            ChangeRequest::SetAttr {
                device: d,
                capacity_bytes,
                bandwidth_mb_per_s,
                class,
                addr,
            } => {
                if capacity_bytes.is_none()
                    && bandwidth_mb_per_s.is_none()
                    && class.is_none()
                    && addr.is_none()
                {
                    return Err(ApiError::bad(
                        "say what to set: \"capacity_bytes\", \"bandwidth_mb_per_s\", \"class\" or \"addr\"",
                    ));
                }
                MapChange::SetAttr {
                    device: device(d)?,
                    capacity_bytes: *capacity_bytes,
                    bandwidth_mb_per_s: *bandwidth_mb_per_s,
                    class: class.clone().map(|c| (c != "none").then_some(c)),
                    addr: addr.clone(),
                }
            }
            ChangeRequest::Resize { active } => {
                crate::commands::edit::resize_change(map, *active).map_err(ApiError::bad)?
            }
            ChangeRequest::Activate { devices } | ChangeRequest::Deactivate { devices } => {
                let names: Vec<String> = devices.iter().map(device_text).collect();
                let activate = matches!(self, ChangeRequest::Activate { .. });
                crate::commands::edit::membership_change(map, &names, activate)
                    .map_err(ApiError::bad)?
            }
        })
    }
}

/// `change` judged on `old` as `optio map … --dry-run` judges it: the edit, and what it moves
/// (the CLI's JSON shapes), the copies each device gains, and every pool's balance after.
fn judge(
    old: ClusterMap,
    before: &Balance,
    change: &MapChange,
) -> Result<super::judged::Judgement<Balance>, ApiError> {
    let sample = MovementSample { objects: SAMPLE_OBJECTS, object_bytes: OBJECT_BYTES };
    let new = old.apply(change, old.epoch()).map_err(|e| {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, format!("the change was refused: {e}"))
    })?;
    // The old map is placed once per epoch (`before`), the new one once here: its movement,
    // the copies it leaves short and its balance are all counted from that.
    let placed_new = Arc::new(place_map(&new, Some((&old, change, &before.placed)))?);
    let judged = ChangeReport::of_placed(&old, &before.placed, &new, &placed_new, change, sample);
    let after = Arc::new(balance_from(&new, placed_new)?);
    let edit = MapEdit { old, new, report: Some(judged), attempts: 1 };
    let report = edit.report.as_ref().expect("a judged edit has a report");
    let mut gained = vec![0i64; edit.old.max_devices().max(edit.new.max_devices()) as usize];
    if let optio_placement::change::ChangeEffect::Moves(pools) = &report.effect {
        for pool in pools {
            for (i, g) in pool.movement.gained.iter().enumerate() {
                gained[i] += g;
            }
        }
    }
    let ids: std::collections::BTreeSet<u32> =
        edit.old.devices().iter().chain(edit.new.devices()).map(|d| d.id.0).collect();
    let devices: Vec<Value> = ids
        .into_iter()
        .map(|id| {
            let i = id as usize;
            let name = edit.new.device(DeviceId(id)).or(edit.old.device(DeviceId(id)));
            json!({
                "id": id, "name": name.map(|d| d.name.clone()),
                "pgs_before": before.pgs.get(i).copied().unwrap_or(0),
                "pgs_after": after.pgs.get(i).copied().unwrap_or(0),
                "gained": gained.get(i).copied().unwrap_or(0),
            })
        })
        .collect();
    let value = json!({
        "epoch_before": edit.old.epoch().0,
        "moves": moves_json(report, SAMPLE_OBJECTS),
        "short_of_copies": copies_json(report),
        "below_min_size": report.below_min_size(),
        "devices": devices,
        "pools_after": pools_json(&edit.new, &after, None),
    });
    Ok(super::judged::Judgement { edit, change: change.clone(), value, after })
}

fn change_request(body: &[u8], field: &str) -> Result<(Value, ChangeRequest), ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad(format!("the body is not JSON: {e}")))?;
    let change = value.get(field).cloned().ok_or_else(|| {
        ApiError::bad(format!("the body has no \"{field}\": {{\"kind\": \"set_state\" | \"reweight\" | \"add_device\" | \"remove_device\" | \"set_attr\" | \"resize\" | \"activate\" | \"deactivate\", …}}"))
    })?;
    let change: ChangeRequest =
        serde_json::from_value(change).map_err(|e| ApiError::bad(format!("\"{field}\": {e}")))?;
    Ok((value, change))
}

/// What a change would move, on the map as it is: nothing is stored (a `read` session may
/// ask).
pub async fn what_if(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    console.authorize(&headers, Cap::Read, true)?;
    let (_, request) = change_request(&body, "change")?;
    let map = console.map().await?;
    let change = request.change(&map)?;
    let judged = console.judge(map, change).await?;
    ok(judged.value.clone())
}

/// A map edit: a compare-and-swap on `expected_epoch` (a stale epoch: 409, nothing stored),
/// with `dry_run` answering what it would move and storing nothing.
pub async fn edit(State(console): State<Arc<Console>>, headers: HeaderMap, body: Bytes) -> Answer {
    let session = console.authorize(&headers, Cap::Admin, true)?;
    let (value, request) = change_request(&body, "change")?;
    let expected = value.get("expected_epoch").and_then(Value::as_u64).ok_or_else(|| {
        ApiError::bad("the body has no \"expected_epoch\": the epoch the change was judged on (GET /api/v1/map)")
    })?;
    let dry_run = value.get("dry_run").and_then(Value::as_bool).unwrap_or(false);
    let allow_below = value.get("allow_below_min_size").and_then(Value::as_bool).unwrap_or(false);
    let map = console.map().await?;
    if map.epoch().0 != expected {
        return Err(stale(expected, map.epoch().0));
    }
    let change = request.change(&map)?;
    let judged = console.judge(map, change.clone()).await?;
    let (edit, mut report) = (&judged.edit, judged.value.clone());
    report["dry_run"] = json!(dry_run);
    report["stored"] = json!(false);
    let below = edit.report.as_ref().is_some_and(|r| r.below_min_size());
    if below && !allow_below {
        let mut error = ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "this change leaves data with fewer copies than its pool's min_size: writes to it would fail until devices return; nothing was stored — send \"allow_below_min_size\": true to make it anyway",
        );
        error.extra = report;
        return Err(error);
    }
    if dry_run {
        return ok(report);
    }
    match (&request, &change) {
        (ChangeRequest::RemoveDevice { force: false, .. }, MapChange::RemoveDevice(device)) => {
            // (Its future is not `Send`: it runs on a blocking thread of its own.)
            let (transport, old, device) = (console.transport.clone(), edit.old.clone(), *device);
            let handle = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || {
                handle
                    .block_on(optio_client::removal::check_not_last_copy(&transport, &old, device))
            })
            .await
            .map_err(ApiError::internal)?
            .map_err(|e| {
                ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("{e}; send \"force\": true to remove it anyway (that data is lost)"),
                )
            })?;
        }
        (
            ChangeRequest::AddDevice {
                id,
                capacity_bytes,
                addr: Some(addr),
                allow_unreachable: false,
                ..
            },
            _,
        ) => {
            crate::commands::edit::serves_device(
                &console.transport,
                addr,
                *id,
                *capacity_bytes,
                Some(&console.source.describe()),
            )
            .await
            .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, format!("{e:#}")))?;
        }
        _ => {}
    }
    match console.source.compare_and_swap(edit.old.epoch(), &edit.new).await {
        Ok(()) => {}
        Err(ClusterError::Conflict { .. }) => {
            let now = console.source.load().await.map(|m| m.epoch().0).unwrap_or(0);
            return Err(stale(expected, now));
        }
        Err(error) => return Err(ApiError::new(StatusCode::BAD_GATEWAY, error.report())),
    }
    tracing::info!(entity = %session.entity, epoch = edit.new.epoch().0, "the console stored a map edit");
    eprintln!(
        "optio console: {} stored epoch {} ({:?})",
        session.entity,
        edit.new.epoch().0,
        request
    );
    report["stored"] = json!(true);
    report["epoch"] = json!(edit.new.epoch().0);
    ok(report)
}

fn stale(expected: u64, now: u64) -> ApiError {
    let mut error = ApiError::new(
        StatusCode::CONFLICT,
        format!(
            "the map is at epoch {now}, not {expected}: it changed since the change was judged; nothing was stored — look again and resend with \"expected_epoch\": {now}"
        ),
    );
    error.extra = json!({ "epoch": now });
    error
}

/// An S3 gateway error's status.
pub(super) fn s3_error(error: optio_s3::GatewayError) -> ApiError {
    use optio_s3::GatewayError as E;
    let status = match &error {
        E::NoSuchUser(_) | E::NoSuchBucket(_) => StatusCode::NOT_FOUND,
        E::UserExists(_) | E::BucketExists(_) => StatusCode::CONFLICT,
        E::InvalidArgument(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::BAD_GATEWAY,
    };
    ApiError::new(status, error.to_string())
}
