//! # optio-placement
//!
//! Optio's placement library: where data goes, computed from a cluster map and nothing else.
//!
//! It is pure — no I/O, no async, no logging, no clocks, no randomness, no global state — so
//! that every client, server and simulation computes the same placement from the same map, on
//! any machine, in any release. Behaviour changes ship as named versions (tunables, engine
//! parameters), never silently; golden tests pin every engine's output.
//!
//! * [`ClusterMap`] ([`map`]), built only by [`ClusterMapBuilder`] ([`builder`]), which
//!   validates everything; each [`Pool`] carries its engine's parameters
//!   ([`engine::EngineParams`]) and its choice settings, plain data defined in [`params`].
//! * Engines ([`engine`], one module each, owning its spec, checks, compiled form and lookup,
//!   and re-exporting its parameters from [`params`]): `crush` ([`engine::crush`] over Ceph's mapper in [`crush`], bit-compatible
//!   with Ceph), [`ring`](engine::ring) (consistent hashing with capacity-weighted virtual
//!   nodes), [`attributed`](engine::attributed) (attributed consistent hashing: sectors,
//!   capacity/bandwidth/location strategies for heterogeneous devices),
//!   [`elastic`](engine::elastic) (elastic consistent hashing: primary servers, equal-work
//!   layout, membership versions) and [`balanced`](engine::balanced) (Optio's balanced
//!   placement, computed from the map alone, no exception tables).
//! * [`Placement`] ([`placement`]): a map compiled for fast lookups, object name → PG →
//!   devices ([`ReplicaSet`]); it compiles every pool's engine and dispatches in one place.
//! * [`change`]: a [`MapChange`] applied to a map gives the next map, and a [`ChangeReport`]
//!   says what it moves; what a valid map computes (seed 002's tuned
//!   [`linear`](change::linear) parameter, incremental balance states) lives there too.
//! * [`analysis`] and [`stats`]: balance and movement statistics.
//! * [`choice`]: CHOICE's k candidate placements per object, device metrics, and the policies
//!   that pick a candidate.
//!
//! Balanced placement and seed 002's `linear` parameter and congruential pps are Optio
//! extensions, **not Ceph-compatible**, off unless a pool asks for them.
//!
//! ```
//! use optio_placement::{ClusterMapBuilder, DeviceSpec, PoolSpec, Placement};
//!
//! let mut builder = ClusterMapBuilder::new();
//! for id in 0..12u32 {
//!     let host = format!("host{}", id / 3);
//!     builder = builder.device(DeviceSpec::new(id).at(&[("host", &host)]));
//! }
//! let map = builder
//!     .replicated_rule(0, "replicated_rule", "default", "host")
//!     .pool(PoolSpec::crush(1, "rbd", 128, 3))
//!     .build()
//!     .expect("a valid map");
//! let placement = Placement::new(&map).expect("compiles");
//! let pool = placement.pool_by_name("rbd").expect("pool exists");
//! let devices = pool.locate("my-object").devices;
//! assert_eq!(devices.len(), 3);
//! ```

// Unsafe code is denied everywhere but in `crush::straw2`, which calls functions compiled for
// AVX2/AVX-512 after checking that the CPU has them (a measured 1.3–2x on straw2 maps).
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod analysis;
pub mod builder;
pub mod change;
pub mod choice;
pub mod crush;
pub mod engine;
pub mod error;
pub mod ids;
pub mod map;
mod narrow;
pub mod params;
pub mod pg;
pub mod placement;
pub mod replica;
pub mod stats;
pub mod tunables;

pub use builder::{
    ActiveSpec, AttributedSpec, BucketSpec, ChooseArgSpec, ClusterMapBuilder, CrushSpec,
    DeviceSpec, ElasticSpec, EngineRef, ItemRef, LinearParamSpec, MembershipSpec, PoolBalanceSpec,
    PoolSpec, RingSpec, RuleRef, RuleSpec, StepSpec, VersionSpec,
};
pub use change::{ChangeReport, MapChange, MovementSample};
pub use choice::{ChoiceSettings, PolicySpec};
pub use error::{MapError, MapErrorKind, Subject};
pub use ids::{BucketId, DeviceId, Epoch, ITEM_NONE, ItemId, PoolId, RuleId, TypeId, Weight};
pub use map::{
    ActiveSet, AttributedParams, BalanceMethod, Bucket, BucketAlg, BucketType, ChooseArg,
    ChooseArgs, ClusterMap, Device, ElasticParams, EngineSpec, ErasureParams, LINEAR_PARAM_ONE,
    Membership, MembershipVersion, Pool, PoolBalance, PpsGenerator, RingParams, Rule, RuleKind,
    SectorSelection, Step,
};
pub use placement::{Placement, PoolPlacement};
pub use replica::ReplicaSet;
pub use tunables::{Tunables, TunablesProfile};
