//! Integration tests of optio-placement: properties of the engines (crush, ring, attributed,
//! elastic), golden placements, the
//! builder's refusals, and the CRUSH mapper's robustness.

mod balance;
mod builder_errors;
mod crush_scratch;
mod engines;
mod golden;
mod movement;
mod properties;
mod robustness;
mod stats_props;
mod strategies;
