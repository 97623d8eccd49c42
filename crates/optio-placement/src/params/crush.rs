//! The `crush` engine's parameters ([`engine::crush`](crate::engine::crush)): the rule and
//! seed 002's extensions, the pps generator and the `linear` buckets' balance parameter; and,
//! as given to the builder, the rule reference and the balance parameter ([`RuleRef`],
//! [`LinearParamSpec`]), which the engine checks.

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

/// A rule referenced by id or name, as a crush pool's spec gives it
/// ([`CrushSpec`](crate::engine::crush::CrushSpec)); the builder resolves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleRef {
    /// By id.
    Id(RuleId),
    /// By name.
    Name(String),
}

/// The balance parameter of a pool's `linear` buckets, as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinearParamSpec {
    /// This value (16.16 fixed point, at least 1.0 = [`LINEAR_PARAM_ONE`]).
    Fixed(u32),
    /// Chosen when the map is built by seed 002's adaptive search
    /// ([`crate::change::linear::tune_linear_param`]) and stored with the pool.
    Auto,
}
