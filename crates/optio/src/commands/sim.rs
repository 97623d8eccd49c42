//! `optio sim`: the experiments of `optio-sim`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use optio_sim::{Experiment, Progress};

use crate::output::progress;

/// Arguments of `optio sim`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  optio sim engines
  optio sim engines --hosts 20 --json
  optio sim engines --plot movement.png
  optio sim space --blocks-per-disk 100000
  optio sim local --json
  optio sim policies --plot policies.svg")]
pub struct Args {
    #[command(subcommand)]
    experiment: Experiment,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Draw the experiment's plots to FILE (.png or .svg; further plots to FILE-2, FILE-3, …).
    #[arg(long, global = true, value_name = "FILE")]
    plot: Option<PathBuf>,
}

/// A progress bar per phase, on stderr when it is a terminal.
struct Bars {
    bar: Option<ProgressBar>,
    visible: bool,
}

impl Progress for Bars {
    fn start(&mut self, phase: &str, total: u64) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        self.bar = Some(progress(total, phase, self.visible));
    }
    fn advance(&mut self, steps: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(steps);
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    let mut bars = Bars { bar: None, visible: !args.json };
    let report = args.experiment.run(&mut bars)?;
    if let Some(bar) = bars.bar.take() {
        bar.finish_and_clear();
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json)?);
    } else {
        print!("{}", report.render_text());
    }
    if let Some(path) = &args.plot {
        let written = report.draw(path).context("cannot draw the plots")?;
        for file in written {
            eprintln!("wrote {}", file.display());
        }
    }
    Ok(())
}
