//! Integration tests of optio-placement: properties of the engines, golden placements, the
//! builder's refusals, and the CRUSH mapper's robustness.

mod crush_scratch;
