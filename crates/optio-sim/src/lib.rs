//! # optio-sim
//!
//! Optio's experiments: each seed paper's evaluation reproduced on Optio's placement engines,
//! and comparisons of engines on balance, movement, speed and memory.
//!
//! An experiment is a pure function from its parameters to a [`Report`]: tables for people,
//! a JSON value for scripts and plots (PNG or SVG). Experiments never re-implement an
//! algorithm: they call `optio-placement`. Randomness, where an experiment needs it (synthetic
//! loads, metric distributions), comes from a seeded generator, so every run is repeatable.
//!
//! Add an experiment: a module under `experiments/` with an `Args` (clap) and a
//! `run(&Args, &mut dyn Progress) -> Result<Report, SimError>`, plus one variant in
//! [`experiments::Experiment`].

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod error;
pub mod experiments;
mod progress;
pub mod report;
pub mod rng;

pub use error::SimError;
pub use experiments::Experiment;
pub use progress::{NoProgress, Progress};
pub use report::{Plot, PlotKind, Report, Series, Table};
