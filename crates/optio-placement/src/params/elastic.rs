//! The `elastic` engine's parameters ([`engine::elastic`](crate::engine::elastic)).

/// Parameters of the `elastic` engine (elastic consistent hashing, Xie & Chen; see
/// [`elastic`](crate::engine::elastic)). Ranks and membership versions are the map's
/// [`Membership`](crate::map::Membership).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElasticParams {
    /// p: the servers of ranks 1..=p are primaries (default ⌈n / e²⌉ when the pool is made).
    pub primaries: u32,
    /// B of the equal-work layout: each primary gets round(B / p) virtual nodes and the
    /// secondary of rank i round(B / i) (at least 1).
    pub scale: u32,
}
