//! A pool's parameters as plain data: what the map stores for each pool's engine
//! ([`EngineParams`], one module per engine), its Optio balance extensions ([`PoolBalance`])
//! and its choices ([`choice`]), with their names in map files; and the few of them that the
//! engines check as given to the builder, before the builder resolves them ([`RuleRef`](crush::RuleRef),
//! [`LinearParamSpec`], [`PoolBalanceSpec`]; the builder re-exports them).
//!
//! This module sits below the map and everything that interprets these values: [`map`](crate::map)
//! holds them in each [`Pool`](crate::map::Pool), the engines ([`engine`](crate::engine)) compile
//! from them and check them, [`choice`](crate::choice) decides by them, and the builder resolves
//! them. It depends on nothing of the crate but [`ids`](crate::ids). Each engine module (and
//! [`choice`](crate::choice), and the map) re-exports its parameters, so
//! `engine::ring::RingParams`, `map::RingParams` and `params::ring::RingParams` are one type.

pub mod attributed;
pub mod balanced;
pub mod choice;
pub mod crush;
pub mod elastic;
pub mod erasure;
pub mod ring;

use crate::ids::{RuleId, Weight};
use attributed::AttributedParams;
use balanced::{BalanceMethod, BalanceState};
use crush::{LINEAR_PARAM_ONE, LinearParamSpec, PpsGenerator};
use elastic::ElasticParams;
use ring::RingParams;

/// The placement engine of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineSpec {
    /// CRUSH with one of the map's rules (Ceph-compatible).
    Crush {
        /// The rule.
        rule: RuleId,
    },
    /// Consistent hashing with capacity-weighted virtual nodes.
    Ring(RingParams),
    /// Attributed consistent hashing: sectors of virtual nodes, capacity, bandwidth and
    /// location strategies. The pool's [`sector_base`](crate::map::Pool::sector_base) pins the sectors.
    Attributed(AttributedParams),
    /// Elastic consistent hashing: primary servers, equal-work layout, membership versions.
    Elastic(ElasticParams),
}

impl EngineSpec {
    /// The engine's name as written in map files.
    pub fn name(&self) -> &'static str {
        match self {
            EngineSpec::Crush { .. } => "crush",
            EngineSpec::Ring(_) => "ring",
            EngineSpec::Attributed(_) => "attributed",
            EngineSpec::Elastic(_) => "elastic",
        }
    }
}

/// What a pool carries for its engine: the engine and everything it places by — its
/// parameters, and for `attributed` the sector base, for balanced pools the method and state.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineParams {
    /// CRUSH with one of the map's rules (Ceph-compatible unless seed 002's extensions are on).
    Crush(crush::CrushParams),
    /// Optio's balanced placement over a crush rule (not Ceph-compatible).
    Balanced(balanced::BalancedParams),
    /// Consistent hashing with capacity-weighted virtual nodes.
    Ring(ring::RingParams),
    /// Attributed consistent hashing, with the sector base that pins its sectors.
    Attributed(attributed::AttributedPool),
    /// Elastic consistent hashing.
    Elastic(elastic::ElasticParams),
}

impl EngineParams {
    /// The engine and its core parameters, as [`EngineSpec`] summarises them (a balanced pool
    /// is a `crush` pool with its rule).
    pub fn spec(&self) -> EngineSpec {
        match self {
            EngineParams::Crush(crush) => EngineSpec::Crush { rule: crush.rule },
            EngineParams::Balanced(balanced) => EngineSpec::Crush { rule: balanced.rule },
            EngineParams::Ring(params) => EngineSpec::Ring(*params),
            EngineParams::Attributed(attributed) => EngineSpec::Attributed(attributed.params),
            EngineParams::Elastic(params) => EngineSpec::Elastic(*params),
        }
    }

    /// The engine's name as written in map files (`crush` for balanced pools).
    pub fn name(&self) -> &'static str {
        self.spec().name()
    }
}

/// Optio's balance settings of a pool. **None of them is Ceph-compatible**; the defaults
/// are Ceph's behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolBalance {
    /// How PGs become CRUSH inputs.
    pub pps: PpsGenerator,
    /// The balance parameter of `linear` buckets (seed 002), 16.16 fixed point, at least 1.0
    /// ([`LINEAR_PARAM_ONE`]): a linear bucket divides the pps by it.
    pub linear_param: u32,
    /// Optio's balanced placement (no exception tables; [`crate::engine::balanced`]) instead of
    /// CRUSH's own choice, and which one.
    pub balanced: BalanceMethod,
}

impl Default for PoolBalance {
    fn default() -> PoolBalance {
        PoolBalance {
            pps: PpsGenerator::Ceph,
            linear_param: LINEAR_PARAM_ONE,
            balanced: BalanceMethod::Off,
        }
    }
}

impl PoolBalance {
    /// Whether these are Ceph's defaults (no Optio extension in use).
    pub fn is_ceph(&self) -> bool {
        *self == PoolBalance::default()
    }

    /// The extensions in use, for people (`None` for Ceph's defaults).
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        match self.balanced {
            BalanceMethod::Off => {}
            BalanceMethod::HistoryFree => parts.push("Optio balanced placement".to_string()),
            BalanceMethod::Incremental => {
                parts.push("Optio incremental balanced placement".to_string())
            }
        }
        if self.pps == PpsGenerator::Congruential {
            parts.push("congruential pps (seed 002)".to_string());
        }
        if self.linear_param != LINEAR_PARAM_ONE {
            let param = Weight(self.linear_param);
            parts.push(format!("linear balance parameter {param} (seed 002)"));
        }
        (!parts.is_empty()).then(|| format!("{}; not Ceph-compatible", parts.join(", ")))
    }
}

/// Optio's balance extensions of a pool to add (see [`PoolBalance`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolBalanceSpec {
    /// How PGs become CRUSH inputs.
    pub pps: PpsGenerator,
    /// The balance parameter of `linear` buckets.
    pub linear_param: LinearParamSpec,
    /// Optio's balanced placement, and which one.
    pub balanced: BalanceMethod,
    /// For an incremental pool: the state to rebalance from (the previous map's); the
    /// builder computes the pool's state from it and the map (from scratch without one).
    pub state: Option<BalanceState>,
}

impl Default for PoolBalanceSpec {
    fn default() -> PoolBalanceSpec {
        PoolBalanceSpec::from(PoolBalance::default())
    }
}

impl From<PoolBalance> for PoolBalanceSpec {
    fn from(balance: PoolBalance) -> PoolBalanceSpec {
        PoolBalanceSpec {
            pps: balance.pps,
            linear_param: LinearParamSpec::Fixed(balance.linear_param),
            balanced: balance.balanced,
            state: None,
        }
    }
}
