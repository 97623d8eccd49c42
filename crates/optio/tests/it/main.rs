//! End-to-end tests of the `optio` binary: what a user types, what they see, and how it fails.

mod support;

mod analyze;
mod bad_input;
mod diff;
mod map;
mod place;
