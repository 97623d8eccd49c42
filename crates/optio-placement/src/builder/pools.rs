//! Pools: sizes, choice settings, and each engine's spec resolved by the engine itself.

use super::*;
use crate::engine::crush::PoolShape;
use std::collections::BTreeSet;

/// The incremental balanced pools, each with the state it was given.
pub(crate) type IncrementalPools =
    Vec<(PoolId, Option<crate::engine::balanced::incremental::BalanceState>)>;

/// The pools, the ids of those whose `linear` balance parameter is to be searched for, and the
/// incremental balanced pools (whose state is computed once the map is built).
pub(super) fn build_pools(
    map: &PartialMap<'_>,
    rules: &[Rule],
    specs: &[PoolSpec],
    servers: usize,
) -> Result<(Vec<Pool>, Vec<PoolId>, IncrementalPools), MapError> {
    let mut auto = Vec::new();
    let mut incremental = Vec::new();
    if specs.len() > POOLS_MAX {
        return Err(err(Subject::Map, Kind::TooMany { what: "pools", limit: POOLS_MAX }));
    }
    let mut pools: Vec<Pool> = Vec::with_capacity(specs.len());
    for spec in specs {
        let subject = Subject::Pool(spec.name.clone());
        check_name(&subject, &spec.name)?;
        if let Some(other) = pools.iter().find(|p| p.id == spec.id) {
            return Err(err(
                subject,
                Kind::DuplicateId { id: spec.id.0.into(), other: format!("pool '{}'", other.name) },
            ));
        }
        if pools.iter().any(|p| p.name == spec.name) {
            return Err(err(subject, Kind::DuplicateName));
        }
        let (min_size, pgp_num) = check_pool_sizes(&subject, spec)?;
        let shape = PoolShape { name: &spec.name, size: spec.size, pgp_num };
        let (engine, sector_base) = resolve_engine(map, rules, spec, &subject, &shape, servers)
            .map_err(|error| erasure_rule_error(spec, error))?;
        spec.choice.validate(spec.pg_num).map_err(|error| {
            err(
                subject.clone(),
                Kind::OutOfRange {
                    field: error.field(),
                    value: choice_value(&spec.choice, &error),
                    reason: error.to_string(),
                },
            )
        })?;
        let balance =
            crate::engine::crush::check_pool_balance(map, rules, &shape, &spec.balance, &engine)?;
        if spec.balance.linear_param == LinearParamSpec::Auto {
            auto.push(spec.id);
        }
        if balance.balanced == crate::map::BalanceMethod::Incremental {
            incremental.push((spec.id, spec.balance.state.clone()));
        }
        pools.push(Pool {
            id: spec.id,
            name: spec.name.clone(),
            pg_num: spec.pg_num,
            pgp_num,
            size: spec.size,
            min_size,
            engine: engine_params(engine, balance, sector_base),
            hashpspool: spec.hashpspool,
            choice: spec.choice,
            erasure: spec.erasure,
        });
    }
    pools.sort_by_key(|p| p.id);
    Ok((pools, auto, incremental))
}

/// What a pool carries for its engine, from its resolved engine, balance settings and sector
/// base (the incremental state is computed once the map is valid: `change::optimise`).
fn engine_params(
    engine: EngineSpec,
    balance: PoolBalance,
    sector_base: Vec<(DeviceId, u32)>,
) -> crate::engine::EngineParams {
    use crate::engine::EngineParams;
    match engine {
        EngineSpec::Crush { rule } if balance.balanced.is_on() => {
            EngineParams::Balanced(crate::engine::balanced::BalancedParams {
                rule,
                pps: balance.pps,
                method: balance.balanced,
                state: None,
            })
        }
        EngineSpec::Crush { rule } => EngineParams::Crush(crate::engine::crush::CrushParams {
            rule,
            pps: balance.pps,
            linear_param: balance.linear_param,
        }),
        EngineSpec::Ring(params) => EngineParams::Ring(params),
        EngineSpec::Attributed(params) => {
            EngineParams::Attributed(crate::engine::attributed::AttributedPool {
                params,
                sector_base,
            })
        }
        EngineSpec::Elastic(params) => EngineParams::Elastic(params),
    }
}

/// A pool's size, min_size, pg_num and pgp_num in range; returns (min_size, pgp_num) with
/// their defaults.
fn check_pool_sizes(subject: &Subject, spec: &PoolSpec) -> Result<(u32, u32), MapError> {
    let range = |field: &'static str, value: u32, reason: String| {
        err(subject.clone(), Kind::OutOfRange { field, value: value.to_string(), reason })
    };
    if let Some(erasure) = &spec.erasure {
        check_erasure(subject, spec.size, erasure)?;
    }
    if spec.size == 0 || spec.size as usize > REPLICAS_MAX {
        return Err(range("size", spec.size, format!("between 1 and {REPLICAS_MAX}")));
    }
    let min_size = spec.min_size.unwrap_or(match &spec.erasure {
        Some(erasure) => erasure.default_min_size(),
        None => crate::map::default_min_size(spec.size),
    });
    if let Some(erasure) = &spec.erasure
        && (min_size < erasure.k || min_size > spec.size)
    {
        return Err(range(
            "min_size",
            min_size,
            format!(
                "between K ({}) and K+M ({}) for an erasure-coded {erasure} pool (fewer than K \
                 chunks cannot be decoded); the default is K+1",
                erasure.k,
                erasure.chunks()
            ),
        ));
    }
    if min_size == 0 || min_size > spec.size {
        return Err(range("min_size", min_size, format!("between 1 and size ({})", spec.size)));
    }
    if spec.pg_num > PG_NUM_MAX {
        return Err(range("pg_num", spec.pg_num, format!("at most {PG_NUM_MAX}")));
    }
    let pgp_num = spec.pgp_num.unwrap_or(spec.pg_num);
    if pgp_num > spec.pg_num || (spec.pg_num > 0 && pgp_num == 0) {
        return Err(range("pgp_num", pgp_num, format!("between 1 and pg_num ({})", spec.pg_num)));
    }
    Ok((min_size, pgp_num))
}

/// An erasure-coded pool's profile in range, and its width as the pool's size.
fn check_erasure(
    subject: &Subject,
    size: u32,
    erasure: &crate::params::erasure::ErasureParams,
) -> Result<(), MapError> {
    erasure.check().map_err(|(field, reason)| {
        let value = match field {
            "stripe_unit" => erasure.stripe_unit_bytes.to_string(),
            _ => format!("\"{erasure}\""),
        };
        err(subject.clone(), Kind::OutOfRange { field, value, reason })
    })?;
    if size != erasure.chunks() {
        return Err(err(
            subject.clone(),
            Kind::OutOfRange {
                field: "size",
                value: size.to_string(),
                reason: format!(
                    "an erasure-coded {erasure} pool places K+M = {} chunks, so its size is {}; \
                     give erasure or size, not both",
                    erasure.chunks(),
                    erasure.chunks()
                ),
            },
        ));
    }
    Ok(())
}

/// A crush rule that cannot place an erasure-coded pool's chunks, said in the pool's terms.
fn erasure_rule_error(spec: &PoolSpec, error: MapError) -> MapError {
    match (&spec.erasure, error.kind) {
        (Some(erasure), Kind::RuleCannotSatisfy { rule, available, .. }) => MapError {
            subject: error.subject,
            kind: Kind::ErasureCannotPlace {
                k: erasure.k,
                m: erasure.m,
                domains: available,
                counted: format!("what crush rule '{rule}' can choose, at most"),
            },
        },
        (_, kind) => MapError { subject: error.subject, kind },
    }
}

/// Refuses erasure-coded pools of the engines without rules (ring, attributed, elastic)
/// whose maps have fewer failure domains than the pool has chunks (crush pools are checked
/// through their rule's capacity). Counted from the map's structure, not device states: a
/// degraded cluster still has a valid map.
pub(super) fn check_erasure_width(map: &ClusterMap) -> Result<(), MapError> {
    use crate::params::EngineParams;
    for pool in map.pools() {
        let Some(erasure) = &pool.erasure else { continue };
        let weighted = || map.devices().iter().filter(|d| d.weight.0 > 0);
        let (domains, what) = match &pool.engine {
            EngineParams::Ring(params) => {
                let devices = weighted().filter(|d| d.capacity_bytes > 0);
                distinct_domains(map, devices, params.failure_domain, "devices with capacity")
            }
            EngineParams::Attributed(attributed) => {
                let zone = attributed.params.distinct_zones.then_some(attributed.params.zone_type);
                distinct_domains(map, weighted(), zone, "weighted devices")
            }
            EngineParams::Elastic(_) => {
                let ranked = map.membership().map_or(0, |m| m.order.len());
                (ranked, "ranked servers".to_string())
            }
            _ => continue, // crush and balanced: their rule's capacity was checked
        };
        let domains = u32::try_from(domains).unwrap_or(u32::MAX);
        if domains < erasure.chunks() {
            return Err(err(
                Subject::Pool(pool.name.clone()),
                Kind::ErasureCannotPlace {
                    k: erasure.k,
                    m: erasure.m,
                    domains,
                    counted: format!("its {} engine's {what}", pool.engine.name()),
                },
            ));
        }
    }
    Ok(())
}

/// How many distinct failure domains of type `domain` the devices are in (a device without
/// an ancestor of that type, or with no type given, is its own), and what they are.
fn distinct_domains<'a>(
    map: &'a ClusterMap,
    devices: impl Iterator<Item = &'a Device>,
    domain: Option<TypeId>,
    devices_what: &str,
) -> (usize, String) {
    let domain = domain.filter(|type_id| type_id.0 != 0);
    let mut seen: BTreeSet<i64> = BTreeSet::new();
    for device in devices {
        let item = ItemId::from(device.id);
        let key = match domain.and_then(|type_id| map.ancestor_of_type(item, type_id)) {
            Some(bucket) => i64::from(bucket.id.0),
            None => i64::from(item.0),
        };
        seen.insert(key);
    }
    let what = match domain.and_then(|type_id| map.type_name(type_id)) {
        Some(name) => format!("{name}s holding {devices_what}"),
        None => devices_what.to_string(),
    };
    (seen.len(), what)
}

/// A pool's engine, resolved by its engine's checks (and, for `attributed`, its sector
/// base).
fn resolve_engine(
    map: &PartialMap<'_>,
    rules: &[Rule],
    spec: &PoolSpec,
    subject: &Subject,
    shape: &PoolShape<'_>,
    servers: usize,
) -> Result<(EngineSpec, Vec<(DeviceId, u32)>), MapError> {
    let range = |field: &'static str, value: u32, reason: String| {
        err(subject.clone(), Kind::OutOfRange { field, value: value.to_string(), reason })
    };
    let mut sector_base = Vec::new();
    let engine = match &spec.engine {
        EngineRef::Crush(CrushSpec { rule }) => {
            if spec.pg_num == 0 {
                return Err(range(
                    "pg_num",
                    0,
                    "a crush pool needs at least one placement group".to_string(),
                ));
            }
            let rule = match rule {
                Some(RuleRef::Id(id)) => rules.iter().find(|r| r.id == *id),
                Some(RuleRef::Name(name)) => rules.iter().find(|r| &r.name == name),
                None => rules.first(),
            }
            .ok_or_else(|| {
                let name = match rule {
                    Some(RuleRef::Id(id)) => id.to_string(),
                    Some(RuleRef::Name(name)) => name.clone(),
                    None => "(none: the map has no rules; add one)".to_string(),
                };
                err(subject.clone(), Kind::UnknownReference { what: "rule", name })
            })?;
            crate::engine::crush::check_rule_capacity(map, rule, shape)?;
            if let Some(erasure) = &spec.erasure
                && rule.kind != RuleKind::Erasure
            {
                // The crush engine keeps positions (a down device leaves a hole, the other
                // chunks stay put) only for erasure rules; chunk i must stay on device i.
                return Err(err(
                    subject.clone(),
                    Kind::OutOfRange {
                        field: "rule",
                        value: format!("'{}'", rule.name),
                        reason: format!(
                            "an erasure-coded {erasure} pool needs a rule of type \"erasure\" \
                             (with choose indep steps, so that a failed device's chunk moves \
                             alone and the others keep their positions); this rule is of type \
                             {}",
                            match rule.kind {
                                RuleKind::Replicated => "\"replicated\"".to_string(),
                                other => other.code().to_string(),
                            }
                        ),
                    },
                ));
            }
            EngineSpec::Crush { rule: rule.id }
        }
        EngineRef::Ring(RingSpec { vnode_bytes, failure_domain }) => {
            EngineSpec::Ring(crate::engine::ring::resolve_params(
                map,
                subject,
                *vnode_bytes,
                failure_domain.as_deref(),
            )?)
        }
        EngineRef::Attributed(attributed) => {
            let (params, base) =
                crate::engine::attributed::spec::resolve(map, subject, attributed)?;
            sector_base = base;
            EngineSpec::Attributed(params)
        }
        EngineRef::Elastic(ElasticSpec { primaries, scale }) => EngineSpec::Elastic(
            crate::engine::elastic::resolve_params(subject, *primaries, *scale, servers)?,
        ),
    };
    Ok((engine, sector_base))
}

/// The value of the choice setting an error is about, as a map file writes it.
fn choice_value(
    settings: &crate::choice::ChoiceSettings,
    error: &crate::choice::SettingsError,
) -> String {
    match (error.field(), settings.policy) {
        ("choices", _) => settings.choices.to_string(),
        ("full_ratio", _) => format!("{}", f64::from(settings.full_ppm) / 1e6),
        ("policy_weights", crate::choice::PolicySpec::Composite(weights)) => {
            let pairs: Vec<String> = crate::choice::COMPOSITE_METRICS
                .iter()
                .zip(weights.as_array())
                .filter(|(_, weight)| *weight > 0)
                .map(|(metric, weight)| format!("{metric} = {weight}"))
                .collect();
            if pairs.is_empty() { "{}".to_string() } else { format!("{{ {} }}", pairs.join(", ")) }
        }
        _ => settings.policy.to_string(),
    }
}
