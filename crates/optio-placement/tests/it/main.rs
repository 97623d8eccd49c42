//! Integration tests of optio-placement: properties of the engines (crush, ring, attributed,
//! elastic, balanced and incremental balanced), golden placements, the builder's refusals, and
//! the CRUSH mapper's robustness.

mod balance;
mod balanced;
mod builder_errors;
mod choice;
mod cluster_load;
mod crush_scratch;
mod engines;
mod golden;
mod incremental;
mod movement;
mod placed_after;
mod properties;
mod robustness;
mod seed002;
mod stats_props;
mod strategies;
