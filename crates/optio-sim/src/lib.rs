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

pub mod experiments;
pub mod report;
pub mod rng;

pub use experiments::Experiment;
pub use report::{Plot, PlotKind, Report, Series, Table};

/// Why an experiment could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A parameter is out of range or inconsistent.
    #[error("{parameter}: {reason}")]
    Parameter {
        /// The parameter (as spelt on the command line).
        parameter: &'static str,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A map built for the experiment was refused.
    #[error("building the experiment's map: {0}")]
    Map(#[from] optio_placement::MapError),
    /// Input data (a trace, a map) could not be read.
    #[error("{0}")]
    Input(String),
    /// A plot could not be drawn.
    #[error("drawing {path}: {reason}")]
    Plot {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Progress of a long experiment: `total` steps announced once, then `advance`.
pub trait Progress {
    /// Announces the number of steps (may be called again for a new phase).
    fn start(&mut self, phase: &str, total: u64);
    /// Reports `steps` more steps done.
    fn advance(&mut self, steps: u64);
}

/// Progress that goes nowhere (tests, JSON output).
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&mut self, _phase: &str, _total: u64) {}
    fn advance(&mut self, _steps: u64) {}
}
