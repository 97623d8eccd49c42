//! The `crush` engine's parameters ([`engine::crush`](crate::engine::crush)): the rule and
//! seed 002's extensions, the pps generator and the `linear` buckets' balance parameter.

use crate::ids::RuleId;

/// A crush pool's parameters: its rule and seed 002's extensions (Ceph's behaviour with pps
/// [`PpsGenerator::Ceph`] and a linear parameter of [`LINEAR_PARAM_ONE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrushParams {
    /// The rule.
    pub rule: RuleId,
    /// How PGs become CRUSH inputs.
    pub pps: PpsGenerator,
    /// The balance parameter of `linear` buckets, 16.16 fixed point, at least 1.0.
    pub linear_param: u32,
}

/// A pool's [`PoolBalance::linear_param`](super::PoolBalance::linear_param) of 1.0 (16.16 fixed
/// point): the least allowed.
pub const LINEAR_PARAM_ONE: u32 = 0x10000;

/// How a crush pool turns a placement group into its CRUSH input (pps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PpsGenerator {
    /// Ceph's `raw_pg_to_pps`: `hash32_2(stable_mod(seed), pool)` (`+ pool` without
    /// HASHPSPOOL).
    #[default]
    Ceph,
    /// **Optio extension, not Ceph-compatible** (seed 002): the folded seed `k` maps to the
    /// `k`-th term of a full-period linear congruential sequence modulo `2^n`
    /// (`2^n ≥ pgp_num > 2^(n−1)`) whose start and increment come from the pool id — a
    /// bijection of `{0 … 2^n − 1}`, so a pool's pps values are a permutation of that range
    /// (see [`crate::pg::congruential_pps`]).
    Congruential,
}

impl PpsGenerator {
    /// The name used in map files.
    pub fn name(self) -> &'static str {
        match self {
            PpsGenerator::Ceph => "ceph",
            PpsGenerator::Congruential => "congruential",
        }
    }

    /// Parses a name used in map files.
    pub fn from_name(name: &str) -> Option<PpsGenerator> {
        match name {
            "ceph" => Some(PpsGenerator::Ceph),
            "congruential" => Some(PpsGenerator::Congruential),
            _ => None,
        }
    }
}
