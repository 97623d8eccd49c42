//! A pool's choice settings — how many candidates an object has, which policy picks one, when a
//! device counts as full — and their validation. The map holds them in each pool, so they are
//! defined with the pool's other parameters, in [`params::choice`](crate::params::choice), and
//! re-exported here.

pub use crate::params::choice::{
    CHOICES_MAX, COMPOSITE_METRICS, COMPOSITE_WEIGHT_MAX, ChoiceSettings, CompositeWeights,
    FULL_PPM_DEFAULT, POLICY_NAMES, PPM, PolicySpec, SettingsError,
};
