//! What a map computes once it is valid: seed 002's tuned `linear` parameter for the pools that
//! ask for `auto`, and the incremental balanced pools' states (rebalanced from the previous
//! map's). The builder validates; [`ClusterMapBuilder::build`] (defined here) then computes
//! these for the valid map.

use crate::builder::{ClusterMapBuilder, IncrementalPools, Validated};
use crate::engine::EngineParams;
use crate::error::{MapError, MapErrorKind as Kind, Subject};
use crate::ids::PoolId;
use crate::map::ClusterMap;

impl ClusterMapBuilder {
    /// Validates everything and returns the map: the builder validates, then the valid map
    /// gets what is computed from it — `auto` linear parameters and incremental balance
    /// states.
    pub fn build(self) -> Result<ClusterMap, MapError> {
        let Validated { mut map, auto_linear, incremental } = self.validate()?;
        optimise(&mut map, &auto_linear, incremental)?;
        Ok(map)
    }
}

/// Tunes the `linear` parameter of the pools `auto_linear` and computes the state of each
/// incremental pool from the one given (the previous map's, or none: from scratch).
fn optimise(
    map: &mut ClusterMap,
    auto_linear: &[PoolId],
    incremental: IncrementalPools,
) -> Result<(), MapError> {
    // Seed 002's adaptive search, for pools that asked for it; the result is stored with
    // the pool, so that later maps keep it.
    for id in auto_linear {
        let index = map.pools.iter().position(|p| p.id == *id).expect("built above");
        let tuning = super::linear::tune_linear_param(map, &map.pools[index]);
        if let EngineParams::Crush(crush) = &mut map.pools[index].engine {
            crush.linear_param = tuning.param;
        }
    }
    // Incremental balanced pools: the state, from the one given (the previous map's) and
    // this map.
    for (id, previous) in incremental {
        let index = map.pools.iter().position(|p| p.id == id).expect("built above");
        let (state, _) = crate::engine::balanced::incremental::rebalance(
            map,
            &map.pools[index],
            previous.as_ref(),
        )
        .map_err(|error| {
            MapError::new(
                Subject::Pool(map.pools[index].name.clone()),
                Kind::OutOfRange {
                    field: "balanced",
                    value: "\"incremental\"".into(),
                    reason: error.to_string(),
                },
            )
        })?;
        if let EngineParams::Balanced(balanced) = &mut map.pools[index].engine {
            balanced.state = Some(state);
        }
    }
    Ok(())
}
