//! The experiments, one module each.

pub mod balance;
pub mod engines;
pub mod local;
pub mod policies;
pub mod space;

use crate::{Progress, Report, SimError};

/// Every experiment `optio sim` can run.
#[derive(clap::Subcommand, Debug, Clone)]
#[non_exhaustive]
pub enum Experiment {
    /// Balance and data movement of every engine on one generated cluster.
    Engines(engines::Args),
    /// CHOICE's space policy: how full disks get before the first is full, k = 1..4, at
    /// object and PG granularity (the paper: 73 % → 96 % with 2 choices).
    Space(space::Args),
    /// CHOICE's local policy: reads served in the client's rack under `local` versus `first`.
    Local(local::Args),
    /// Every policy on a heterogeneous, loaded cluster: what it does to its metric and what
    /// it costs the others.
    Policies(policies::Args),
    /// PGs per OSD and movement: stock CRUSH, seed 002's optimised CRUSH, Optio's balanced
    /// placement.
    Balance(balance::Args),
}

impl Experiment {
    /// Runs the experiment.
    pub fn run(&self, progress: &mut dyn Progress) -> Result<Report, SimError> {
        match self {
            Experiment::Engines(args) => engines::run(args, progress),
            Experiment::Space(args) => space::run(args, progress),
            Experiment::Local(args) => local::run(args, progress),
            Experiment::Policies(args) => policies::run(args, progress),
            Experiment::Balance(args) => balance::run(args, progress),
        }
    }
}
