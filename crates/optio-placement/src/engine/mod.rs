//! The placement engines, one module each: [`crush`](crate::crush) (Ceph's CRUSH, at the
//! crate root), [`ring`], [`attributed`], [`elastic`] and [`balanced`], and the virtual-node
//! index the consistent-hashing engines share ([`vnode`]).

pub mod attributed;
pub mod balanced;
pub mod crush;
pub mod elastic;
pub mod ring;
pub mod vnode;

use crate::map::EngineSpec;

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
