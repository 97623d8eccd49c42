//! The experiments, one module each.

pub mod attributed_cost;
pub mod attributed_io;
pub mod attributed_movement;
pub mod balance;
pub mod elastic_layout;
pub mod elastic_trace;
pub mod engines;
pub mod hetero;
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
    /// placements (history-free and incremental).
    Balance(balance::Args),
    /// The attributed-CH paper's Tables 1 and 2: placement time and memory.
    AttributedCost(attributed_cost::Args),
    /// The attributed-CH paper's Figure 7: data moved by one node addition.
    AttributedMovement(attributed_movement::Args),
    /// Data and expected read bandwidth on the fast devices of a mixed HDD/SSD cluster.
    AttributedIo(attributed_io::Args),
    /// The elastic-CH paper's equal-work layout, primary copies and capacity tiers.
    ElasticLayout(elastic_layout::Args),
    /// The elastic-CH paper's Table II: machine-hours of resizing along a load trace.
    ElasticTrace(elastic_trace::Args),
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
            Experiment::AttributedCost(args) => attributed_cost::run(args, progress),
            Experiment::AttributedMovement(args) => attributed_movement::run(args, progress),
            Experiment::AttributedIo(args) => attributed_io::run(args, progress),
            Experiment::ElasticLayout(args) => elastic_layout::run(args, progress),
            Experiment::ElasticTrace(args) => elastic_trace::run(args, progress),
        }
    }
}
