//! The experiments, one module each.

pub mod balance;
pub mod engines;

use crate::{Progress, Report, SimError};

/// Every experiment `optio sim` can run.
#[derive(clap::Subcommand, Debug, Clone)]
#[non_exhaustive]
pub enum Experiment {
    /// Balance and data movement of every engine on one generated cluster.
    Engines(engines::Args),
    /// PGs per OSD and movement: stock CRUSH, seed 002's optimised CRUSH, Optio's balanced
    /// placement.
    Balance(balance::Args),
}

impl Experiment {
    /// Runs the experiment.
    pub fn run(&self, progress: &mut dyn Progress) -> Result<Report, SimError> {
        match self {
            Experiment::Engines(args) => engines::run(args, progress),
            Experiment::Balance(args) => balance::run(args, progress),
        }
    }
}
