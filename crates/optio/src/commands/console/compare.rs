//! `GET /api/v1/pools/compare`: a pool's placement beside seed 002's and the incremental
//! engine's for the same devices and PGs.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use optio_placement::analysis::PlacedPool;
use optio_placement::{ClusterMap, Placement, PoolId};
use optio_proto::auth::Cap;
use serde_json::{Value, json};

use super::api::{Answer, ApiError, Console, json_response, ok, placement_json};

/// `GET /api/v1/pools/compare?pool=NAME`: a crush pool's PG copies per device as the map
/// places them, beside what seed 002's optimised CRUSH (linear hosts, the congruential pps,
/// the searched balance parameter) and Optio's incremental balanced placement (from scratch)
/// would give the same devices and PGs — each in the `placement` columns the plots draw, with
/// its spread. Computed once per epoch and pool.
pub async fn compare(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Answer {
    console.authorize(&headers, Cap::Read, false)?;
    let name = uri
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("pool="))
        .ok_or_else(|| ApiError::bad("name the pool: /api/v1/pools/compare?pool=NAME"))?
        .to_string();
    let map = console.map().await?;
    let pool = map.pool_by_name(&name).ok_or_else(|| {
        ApiError::new(StatusCode::NOT_FOUND, format!("the map has no pool {name:?}"))
    })?;
    let (id, epoch) = (pool.id, map.epoch().0);
    {
        let cache = console.compare_cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.0 == epoch
            && let Some(value) = cache.1.get(&id)
        {
            return ok(value.as_ref().clone());
        }
    }
    let value = tokio::task::spawn_blocking(move || compare_pool(&map, id))
        .await
        .map_err(ApiError::internal)??;
    let value = Arc::new(value);
    let mut cache = console.compare_cache.lock().unwrap_or_else(|e| e.into_inner());
    if cache.0 != epoch {
        *cache = (epoch, Default::default());
    }
    cache.1.insert(id, value.clone());
    Ok(json_response(StatusCode::OK, value.as_ref()))
}

/// The engines [`compare`] sets side by side.
#[derive(Clone, Copy)]
enum Variant {
    AsMapped,
    Seed002,
    Incremental,
}

/// What [`compare`] answers for pool `id` of `map`.
fn compare_pool(map: &ClusterMap, id: PoolId) -> Result<Value, ApiError> {
    let pool = map.pool(id).ok_or_else(|| ApiError::bad("no such pool"))?;
    if pool.pg_num == 0 || !matches!(pool.engine_spec(), optio_placement::EngineSpec::Crush { .. })
    {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "pool {} is not a crush pool with PGs: seed 002's and the incremental placement are for those",
                pool.name
            ),
        ));
    }
    let mut engines = Vec::new();
    for (variant, label) in [
        (Variant::AsMapped, "as the map places it"),
        (Variant::Seed002, "seed 002: linear hosts, congruential pps, searched balance parameter"),
        (Variant::Incremental, "Optio's incremental balanced placement (computed from scratch)"),
    ] {
        let started = Instant::now();
        let varied = variant_map(map, id, variant).map_err(|e| {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, format!("{label}: {e}"))
        })?;
        let placement = Placement::new(&varied).map_err(ApiError::internal)?;
        let Some(compiled) = placement.pool(id) else { continue };
        let placed = PlacedPool::place(&placement, compiled, 0, &mut |_| {});
        let load = placed.load(varied.max_devices(), 1);
        let Some(varied_pool) = varied.pool(id) else { continue };
        let shares = optio_placement::analysis::target_shares(&varied, varied_pool);
        let columns = placement_json(true, &load, &shares);
        let counts: Vec<f64> = columns["counts"]
            .as_array()
            .map(|c| c.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        let ideal: Vec<f64> = columns["ideal"]
            .as_array()
            .map(|c| c.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        let n = counts.len().max(1) as f64;
        let deviation =
            (counts.iter().zip(&ideal).map(|(c, i)| (c - i).powi(2)).sum::<f64>() / n).sqrt();
        let excess = counts
            .iter()
            .zip(&ideal)
            .filter(|(_, i)| **i > 0.0)
            .map(|(c, i)| c / i)
            .fold(0.0f64, f64::max);
        engines.push(json!({
            "engine": match variant {
                Variant::AsMapped => "as_mapped",
                Variant::Seed002 => "seed002",
                Variant::Incremental => "incremental",
            },
            "label": label,
            "placement": columns,
            "stdev_from_ideal": (deviation * 1000.0).round() / 1000.0,
            "max_over_ideal": (excess * 1000.0).round() / 1000.0,
            "seconds": (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        }));
    }
    Ok(
        json!({ "epoch": map.epoch().0, "pool": pool.name, "pg_num": pool.pg_num, "engines": engines }),
    )
}

/// `map` with only pool `id`, placed by `variant`'s engine.
fn variant_map(
    map: &ClusterMap,
    id: PoolId,
    variant: Variant,
) -> Result<ClusterMap, optio_placement::MapError> {
    let mut builder = map.to_builder();
    builder.pools.retain(|p| p.id == id);
    for pool in &mut builder.pools {
        match variant {
            Variant::AsMapped => {}
            Variant::Seed002 => {
                pool.balance.balanced = optio_placement::BalanceMethod::Off;
                pool.balance.state = None;
                pool.balance.pps = optio_placement::PpsGenerator::Congruential;
                pool.balance.linear_param = optio_placement::LinearParamSpec::Auto;
            }
            Variant::Incremental => {
                pool.balance.balanced = optio_placement::BalanceMethod::Incremental;
                pool.balance.state = None;
            }
        }
    }
    if let Variant::Seed002 = variant {
        for bucket in &mut builder.buckets {
            if bucket.type_name == "host" {
                bucket.alg = optio_placement::BucketAlg::Linear;
            }
        }
    }
    builder.build()
}
