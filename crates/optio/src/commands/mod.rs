//! One module per subcommand.

pub mod analyze;
pub mod auth;
pub mod bench;
pub mod client;
pub mod console;
pub mod demo;
pub mod diff;
pub mod edit;
pub mod emulate;
pub mod identity;
pub mod live;
pub mod man;
pub mod manager;
pub mod map;
pub mod nbd;
pub mod place;
pub mod reintegrate;
#[cfg(feature = "s3")]
pub mod s3;
pub mod scrub;
pub mod server;
pub mod sim;
pub mod status;
pub mod trim_worker;
pub mod up;
pub mod volume;
pub mod volume_diff;

use anyhow::{Context, Result, anyhow, bail};
use optio_placement::{ClusterMap, CrushSpec, EngineRef, PoolId, PoolSpec, RuleId, RuleRef};

/// Options that pick a pool, or describe one to analyse a map that has none (a Ceph CRUSH map
/// has rules but no pools).
#[derive(clap::Args, Debug, Clone)]
pub struct PoolArgs {
    /// Pool to use, by name or id (default: every pool of the map, or the only one).
    #[arg(long)]
    pub pool: Option<String>,
    /// Without pools in the map: the rule of the pool to simulate (name or id; default the
    /// first rule).
    #[arg(long = "sim-rule", value_name = "RULE")]
    pub sim_rule: Option<String>,
    /// Without pools in the map: PGs of the simulated pool.
    #[arg(long = "pg-num", default_value_t = 2048)]
    pub pg_num: u32,
    /// Without pools in the map: replicas of the simulated pool.
    #[arg(long = "size", default_value_t = 3)]
    pub size: u32,
    /// Without pools in the map: id of the simulated pool (hashed into placement).
    #[arg(long = "sim-pool-id", default_value_t = 1, value_name = "ID")]
    pub sim_pool_id: u32,
}

impl PoolArgs {
    /// The map to work on (with a simulated pool added when the map has none) and the ids of
    /// the pools selected.
    pub fn resolve(&self, map: ClusterMap) -> Result<(ClusterMap, Vec<PoolId>)> {
        let map = if map.pools().is_empty() { self.simulated_pool(map)? } else { map };
        let pools = match &self.pool {
            None => map.pools().iter().map(|p| p.id).collect(),
            Some(name) => vec![find_pool(&map, name)?],
        };
        Ok((map, pools))
    }

    fn simulated_pool(&self, map: ClusterMap) -> Result<ClusterMap> {
        if map.rules().is_empty() {
            bail!(
                "the map has no pools and no rules, so there is nothing to place; add a [[pools]] entry (see docs/map-format.md)"
            );
        }
        let rule = match &self.sim_rule {
            None => RuleRef::Id(map.rules()[0].id),
            Some(text) => match text.parse::<u32>() {
                Ok(id) => RuleRef::Id(RuleId(id)),
                Err(_) => RuleRef::Name(text.clone()),
            },
        };
        let mut builder = map.to_builder();
        builder.pools.push(PoolSpec {
            engine: EngineRef::Crush(CrushSpec { rule: Some(rule) }),
            ..PoolSpec::crush(self.sim_pool_id, "simulated", self.pg_num, self.size)
        });
        builder
            .build()
            .context("cannot simulate a pool on this map (adjust --sim-rule, --pg-num, --size)")
    }
}

/// A pool by name or id.
pub fn find_pool(map: &ClusterMap, name: &str) -> Result<PoolId> {
    if let Some(pool) = map.pool_by_name(name) {
        return Ok(pool.id);
    }
    if let Ok(id) = name.parse::<u32>()
        && let Some(pool) = map.pool(PoolId(id))
    {
        return Ok(pool.id);
    }
    let known: Vec<String> =
        map.pools().iter().map(|p| format!("{} (id {})", p.name, p.id)).collect();
    Err(anyhow!(
        "no pool '{name}' in the map; pools are: {}",
        if known.is_empty() { "none".to_string() } else { known.join(", ") }
    ))
}

/// Which of Optio's balanced placements a pool uses, for JSON reports: `"incremental"`,
/// `"history-free"` or `null`.
pub fn balanced_method(pool: &optio_placement::Pool) -> serde_json::Value {
    pool.balance().balanced.name().map_or(serde_json::Value::Null, serde_json::Value::from)
}

/// How a pool's engine is set up, in a few words (`analyze`, `map show`).
pub fn engine_text(map: &optio_placement::ClusterMap, pool: &optio_placement::Pool) -> String {
    use optio_placement::EngineSpec;
    let bytes = |b: u64| crate::output::bytes(b as f64);
    match pool.engine_spec() {
        EngineSpec::Crush { rule } => {
            format!("crush rule '{}'", map.rule(rule).map_or("?", |r| r.name.as_str()))
        }
        EngineSpec::Ring(params) => format!(
            "ring ({} per vnode{})",
            bytes(params.vnode_bytes),
            params
                .failure_domain
                .and_then(|t| map.type_name(t))
                .map(|t| format!(", distinct {t}s"))
                .unwrap_or_default()
        ),
        EngineSpec::Attributed(params) => {
            let zones = match map.type_name(params.zone_type) {
                Some(name) if params.zone_type.0 != 0 => name.to_string(),
                _ => "device".to_string(),
            };
            format!(
                "attributed (c_throttle {}, s = {}, zones by {zones}{}, bandwidth tolerance {}%, sectors formed by {} devices)",
                bytes(params.throttle_bytes),
                params.sector_size,
                if params.distinct_zones { ", distinct zones" } else { "" },
                params.bandwidth_tolerance_percent,
                pool.sector_base().len()
            )
        }
        EngineSpec::Elastic(params) => {
            let servers = map.membership().map_or(map.devices().len(), |m| m.order.len());
            let version = map
                .membership()
                .map(|m| {
                    let v = m.current();
                    format!(", version {}: {} active", v.version, m.active_count(v))
                })
                .unwrap_or_default();
            format!(
                "elastic (p = {} primaries of {servers} servers, B = {}{version})",
                params.primaries, params.scale
            )
        }
        _ => pool.engine.name().to_string(),
    }
}

pub use crate::rt::{SchedulingArgs, runtime, runtime_with_workers, schedule_daemon};

/// One crate's log events in the current second: how many were let through and how many left
/// out ([`init_logging_capped`]'s `limited`).
struct LogWindow(std::sync::Mutex<(std::time::Instant, u32, u64)>);

impl LogWindow {
    fn new() -> LogWindow {
        LogWindow(std::sync::Mutex::new((std::time::Instant::now(), 0, 0)))
    }

    /// Whether one more event of `krate` may be logged, at most `per_second` a second; when a
    /// second that left events out is over, says how many (on stderr, where the log goes).
    fn admit(&self, krate: &str, per_second: u32) -> bool {
        let mut window = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (started, _, left_out) = &mut *window;
        if started.elapsed() >= std::time::Duration::from_secs(1) {
            if *left_out > 0 {
                use tracing_subscriber::fmt::time::FormatTime as _;
                let mut now = String::new();
                let _ = tracing_subscriber::fmt::time::SystemTime
                    .format_time(&mut tracing_subscriber::fmt::format::Writer::new(&mut now));
                // (Not through tracing: this runs while it decides on an event.)
                eprintln!(
                    "{now}  WARN optio: {left_out} log events of {krate} left out in {:.1} s (at most {per_second} a second are logged)",
                    started.elapsed().as_secs_f64()
                );
            }
            *window = (std::time::Instant::now(), 0, 0);
        }
        let (_, passed, left_out) = &mut *window;
        if *passed < per_second {
            *passed += 1;
            true
        } else {
            *left_out += 1;
            false
        }
    }
}

/// Logs to stderr what `OPTIO_LOG` selects — a level (`error`, `warn`, `info`, `debug`,
/// `trace`) or tracing's filter directives, per crate and module
/// (`OPTIO_LOG=warn,optio_server=debug,optio_server::rebalance=trace`) — else `default`. A
/// filter that does not parse is reported and `default` used.
pub fn init_logging(default: &str) {
    init_logging_capped(default, &[], &[]);
}

/// [`init_logging`], with some crates' logs capped whatever `OPTIO_LOG` says: events and spans
/// whose target is `CRATE` or begins `CRATE::`, for each `(CRATE, LEVEL)` of `caps`, are
/// dropped when more verbose than `LEVEL` (a second filter, applied after `OPTIO_LOG`'s, so
/// that no directive of it, however specific, lets them through). And for each
/// `(CRATE, PER_SECOND)` of `limited`, at most that many of its events a second are logged: a
/// crate that logs every refused request (s3s logs each at ERROR) cannot fill the disk; the
/// crate's first event after a second that left some out is preceded by one line counting them.
pub fn init_logging_capped(
    default: &str,
    caps: &'static [(&'static str, tracing::Level)],
    limited: &'static [(&'static str, u32)],
) {
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::filter::FilterExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let (filter, problem) = match std::env::var("OPTIO_LOG") {
        Err(_) => (EnvFilter::new(default), None),
        Ok(spec) => match EnvFilter::try_new(&spec) {
            Ok(filter) => (filter, None),
            Err(error) => (EnvFilter::new(default), Some(format!("OPTIO_LOG={spec:?}: {error}"))),
        },
    };
    let capped = tracing_subscriber::filter::filter_fn(move |metadata| {
        let target = metadata.target();
        !caps.iter().any(|(krate, level)| {
            let ours = target
                .strip_prefix(krate)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"));
            ours && metadata.level() > level
        })
    });
    let limits: Vec<(&'static str, u32, LogWindow)> =
        limited.iter().map(|(krate, per_second)| (*krate, *per_second, LogWindow::new())).collect();
    let limited = tracing_subscriber::filter::dynamic_filter_fn(move |metadata, _| {
        let target = metadata.target();
        limits.iter().all(|(krate, per_second, window)| {
            let ours = target
                .strip_prefix(krate)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"));
            !ours || window.admit(krate, *per_second)
        })
    });
    // Colours on a terminal only: log files (`optio up`'s DIR/HOST.log, a service manager's
    // journal) get plain text.
    use std::io::IsTerminal;
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter.and(capped).and(limited));
    let _ = tracing_subscriber::registry().with(layer).try_init();
    if let Some(problem) = problem {
        tracing::warn!("ignoring an unusable log filter ({problem}); logging at {default}");
    }
}
