//! `optio`: the one binary users run.
//!
//! Argument parsing is in two stages (what the user typed → resolved configuration); the
//! logic lives in the libraries, this crate only loads, calls and prints.

mod commands;
mod load;
mod output;

use clap::{Parser, Subcommand};

/// Optio: a hash-based distributed object store whose placement is computed, not looked up.
#[derive(Parser, Debug)]
#[command(name = "optio", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Where objects, PGs or CRUSH inputs go (`--format crushtool` prints what
    /// `crushtool --test --show-mappings` prints).
    Place(commands::place::Args),
    /// Balance of a map: PGs, objects and bytes per device and per failure domain.
    Analyze(commands::analyze::Args),
    /// What moves between two maps, against the minimum any placement must move.
    Diff(commands::diff::Args),
    /// Validate, show and convert cluster maps (Optio TOML, Ceph text, Ceph JSON).
    #[command(subcommand)]
    Map(commands::map::Command),
    /// Experiments: the seed papers' evaluations and engine comparisons (tables, --json,
    /// --plot FILE).
    Sim(commands::sim::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Place(args) => commands::place::run(args),
        Command::Analyze(args) => commands::analyze::run(args),
        Command::Diff(args) => commands::diff::run(args),
        Command::Map(command) => commands::map::run(command),
        Command::Sim(args) => commands::sim::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            output::print_error(&error);
            std::process::ExitCode::FAILURE
        }
    }
}
