//! The experiments, one module each.

pub mod attributed_cost;
pub mod engines;
pub mod hetero;

use crate::{Progress, Report, SimError};

/// Every experiment `optio sim` can run.
#[derive(clap::Subcommand, Debug, Clone)]
#[non_exhaustive]
pub enum Experiment {
    /// Balance and data movement of every engine on one generated cluster.
    Engines(engines::Args),
    /// The attributed-CH paper's Tables 1 and 2: placement time and memory.
    AttributedCost(attributed_cost::Args),
}

impl Experiment {
    /// Runs the experiment.
    pub fn run(&self, progress: &mut dyn Progress) -> Result<Report, SimError> {
        match self {
            Experiment::Engines(args) => engines::run(args, progress),
            Experiment::AttributedCost(args) => attributed_cost::run(args, progress),
        }
    }
}
