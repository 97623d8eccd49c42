//! Choices (CHOICE, Li & Xu, "Optimizing Hash-based Distributed Storage Using Client
//! Choices"): every object has k hashed candidate placements; a client probes the candidates'
//! primaries, which piggyback their metrics, and a policy picks one for a new object.
//!
//! * [`candidates`] — the k candidates of an object (the paper's Algorithm 1): candidate 0 is
//!   the ordinary placement, candidate i the placement of `name + string(j)`; distinct PGs
//!   (pools with PGs) or distinct ring positions (object-level pools), fixed for the life of
//!   the pool whatever happens to the cluster.
//! * [`metrics`] — what a device reports (cpu, memory, space, latency, unflushed bytes,
//!   location, up/full) and its aggregation per candidate, as the paper does.
//! * [`policy`] — the [`Policy`] trait and the built-in policies ([`PolicySpec`]): `first`,
//!   `random`, `local`, `memory`, `cpu`, `space`, `latency`, `journal`, `composite`.
//! * [`decide`] — [`choose`]: never a candidate with a down or full device; a clear
//!   [`ChoiceError::NoCandidate`] when none can take the object.
//! * [`settings`] — a pool's `choices`, `policy` and `full_ratio`, with their limits (data the
//!   map holds, so defined in [`params::choice`](crate::params::choice) and re-exported).
//!
//! Decisions are pure and use integers only, so every client with the same snapshot picks the
//! same candidate. The full story, with the simulations, is `docs/choice.md`.
//!
//! ```
//! use optio_placement::choice::{Candidates, ChoiceRequest, DeviceMetrics, MetricsTable};
//! use optio_placement::{ChoiceSettings, ClusterMapBuilder, DeviceSpec, Placement, PolicySpec, PoolSpec};
//!
//! let mut builder = ClusterMapBuilder::new();
//! for id in 0..12u32 {
//!     let host = format!("host{}", id / 3);
//!     builder = builder.device(DeviceSpec::new(id).at(&[("host", &host)]));
//! }
//! let mut pool = PoolSpec::crush(1, "rbd", 128, 3);
//! pool.choice = ChoiceSettings::new(2, PolicySpec::Space);
//! let map = builder.replicated_rule(0, "replicated_rule", "default", "host").pool(pool).build()?;
//! let placement = Placement::new(&map)?;
//! let pool = placement.pool_by_name("rbd").expect("exists");
//!
//! // The object's two candidates, each a PG with its devices (a client probes their primaries).
//! let (mut scratch, mut candidates) = (placement.scratch(), Candidates::new());
//! pool.candidates("disk.img.0042", &mut scratch, &mut candidates);
//! assert_eq!(candidates.len(), 2);
//!
//! // The probed metrics; here every device is 50 % full but device 3, which is 99 % full.
//! let mut metrics = MetricsTable::new(map.max_devices());
//! for device in map.devices() {
//!     let space_ppm = if device.id.0 == 3 { 990_000 } else { 500_000 };
//!     metrics.set(device.id, DeviceMetrics { space_ppm, ..DeviceMetrics::default() }).unwrap();
//! }
//! let chosen = pool.choose(&candidates, &metrics, &ChoiceRequest::default())?;
//! let (_, devices) = candidates.get(usize::from(chosen.key.index)).expect("chosen from the set");
//! assert!(!devices.contains(optio_placement::DeviceId(3)), "device 3 is full");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod candidates;
pub mod decide;
pub mod hash;
pub mod location;
pub mod metrics;
pub mod policy;
pub mod settings;

pub use candidates::{CandidateKey, CandidateKeys, Candidates, SUFFIX_ATTEMPTS_MAX};
pub use decide::{ChoiceError, ChoiceRequest, Chosen, Exclusion, choose};
pub use hash::{NameHasher, suffixed_name_hash};
pub use location::{LOCATION_LEVELS_MAX, Location, LocationError};
pub use metrics::{
    CandidateMetrics, DeviceMetrics, MetricsSource, MetricsTable, fraction_to_ppm, used_to_ppm,
};
pub use policy::{Eligible, Policy, PolicyContext, composite_score};
pub use settings::{
    CHOICES_MAX, COMPOSITE_METRICS, COMPOSITE_WEIGHT_MAX, ChoiceSettings, CompositeWeights,
    FULL_PPM_DEFAULT, POLICY_NAMES, PPM, PolicySpec, SettingsError,
};
