//! Integration tests of optio-placement: properties of the engines, golden placements, the
//! builder's refusals, and the CRUSH mapper's robustness.

mod balance;
mod balanced;
mod builder_errors;
mod choice;
mod crush_scratch;
mod golden;
mod movement;
mod properties;
mod robustness;
mod seed002;
mod stats_props;
mod strategies;
