//! Incremental balanced placement: balance from per-device prices carried in the map,
//! updated from the previous state when the map changes.
//!
//! The history-free method ([`crate::engine::balanced::balance`]) computes a balanced placement from
//! the map alone, and so cannot know which devices gave copies to a new device: rebalancing
//! after a single-device change moves 1.2–3.2 times the minimum. This method keeps a small
//! state with the pool — for every device and failure domain [`CLASSES`] integer prices, and
//! a snapshot of each device's domain and weight — O(devices), never per placement group:
//!
//! * **Placement** ([`place`], `engine.rs`) is a pure function of the map and the state:
//!   every device ranks the placement units by a hash, and a unit takes the devices of least
//!   `rank × device price × domain price`, one per failure domain. Every client computes
//!   it; there are no exception tables.
//! * **Rebalancing** ([`rebalance`], `search.rs`) computes the next state from the previous
//!   one and the changed map: it recomputes the previous placement from the snapshot, then
//!   changes single prices — each change moves exactly one copy (`layout.rs`) — choosing,
//!   among the many single-copy moves the prices offer, short paths that bring every
//!   device within `round(t) ± 1` of its target `t` while moving few copies and evening out
//!   domains. A state that already matches the map is kept, so rebalancing is idempotent.
//!
//! The placement depends on the stored state, not on the map alone: two maps with the same
//! devices but different histories place PGs differently (each balanced). Without a state
//! the pool is balanced from scratch; changing its `pg_num` or `size` does that too.
//!
//! Determinism: integers only, explicit tie-breaks (ranking hash, device id, unit, device
//! index), no hash-map iteration. Complexity: computing a placement hashes every (device,
//! unit) pair once and sorts each unit's few candidates; a rebalance takes a few steps per
//! moved copy, each scanning one device's (or domain's) units of one class.
//!
//! ```
//! use optio_placement::{ClusterMapBuilder, DeviceSpec, Placement, PoolSpec};
//!
//! let mut builder = ClusterMapBuilder::new();
//! for id in 0..12u32 {
//!     let host = format!("host{}", id / 3);
//!     builder = builder.device(DeviceSpec::new(id).at(&[("host", &host)]));
//! }
//! let mut pool = PoolSpec::crush(1, "rbd", 256, 3);
//! pool.balance.balanced = optio_placement::BalanceMethod::Incremental; // `balanced = "incremental"`
//! let map = builder.replicated_rule(0, "r", "default", "host").pool(pool).build().expect("valid");
//!
//! // The builder computed the state and stored it with the pool.
//! let state = map.pools()[0].balance_state().expect("computed");
//! assert_eq!(state.devices.len(), 12);
//! // Every device holds 64 copies (256 × 3 / 12), within one.
//! let placed = optio_placement::engine::balanced::incremental::place(&map, &map.pools()[0]).expect("places");
//! assert!(placed.devices.iter().all(|d| d.load.abs_diff(64) <= 1));
//!
//! // A thirteenth device: the next state comes from the previous one.
//! let mut next = map.to_builder();
//! next.devices.push(DeviceSpec::new(12).at(&[("host", "host0")]));
//! let next = next.build().expect("valid");
//! let (_, report) = optio_placement::engine::balanced::incremental::rebalance(
//!     &next, &next.pools()[0], Some(state)).expect("rebalances");
//! // 768 / 13 ≈ 59 copies must move to the new device; about that many do.
//! assert!(report.moved >= 50 && report.moved <= 80, "{report:?}");
//! assert_eq!(Placement::new(&next).expect("compiles").pool_by_name("rbd").expect("pool")
//!     .locate("obj").devices.len(), 3);
//! ```

mod engine;
mod layout;
mod rankings;
mod rebalance;
mod search;
mod state;

pub use rebalance::{RebalanceReport, place, prepare_rebalance, rebalance};
pub use search::{ITERATIONS_EXTRA, ITERATIONS_PER_COPY, PATH_DEPTH};
pub use state::{
    BalanceState, BalanceStateError, CLASSES, DOMAIN_PRICE_MAX, DOMAIN_PRICE_ONE, DeviceState,
    DomainState, PRICE_MAX, STATE_VERSION,
};
