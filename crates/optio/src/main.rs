//! `optio`: the one binary users run.
//!
//! Argument parsing is in two stages (what the user typed → resolved configuration); the
//! logic lives in the libraries, this crate only loads, calls and prints.

mod commands;
mod load;
mod output;
mod rt;

use clap::{Parser, Subcommand};

/// mimalloc rather than glibc's malloc: the HTTP stacks allocate and free small buffers for
/// every request, and glibc's free-list upkeep (`malloc_consolidate`, `unlink_chunk`) was a
/// sixth of `optio nbd`'s CPU under 4 KiB random reads (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Validate, show and convert cluster maps (Optio TOML, Ceph text, Ceph JSON), and edit
    /// a live cluster's map (add-device, remove-device, reweight, set-state, set-attr,
    /// activate, deactivate).
    #[command(subcommand)]
    Map(commands::map::Command),
    /// Every server's epoch and rebalancing progress: moved, remaining, rate, ETA; the
    /// cluster's health (exit 0 OK, 2 WARN, 3 ERR).
    Status(commands::status::Args),
    /// Scrub now: compare versions across replicas (--deep: verify every replica's
    /// checksums too) and repair from good replicas.
    Scrub(commands::scrub::Args),
    /// Elastic resizing: a new membership version with ranks 1 to N active.
    Resize(commands::edit::ResizeArgs),
    /// Run re-integration of elastic pools (what `optio up` starts): move what was offloaded
    /// while servers were inactive back where it belongs.
    Reintegrate(commands::reintegrate::Args),
    /// Experiments: the seed papers' evaluations and engine comparisons (tables, --json,
    /// --plot FILE).
    Sim(commands::sim::Args),
    /// Start a local cluster: one server process per host on loopback, the map under DIR;
    /// runs until Ctrl-C.
    Up(commands::up::Args),
    /// The cluster keyring: who may do what (init, add, ls, rm, rotate).
    #[command(subcommand)]
    Auth(commands::auth::Command),
    /// Run one storage server (what `optio up` starts for each host).
    Server(commands::server::Args),
    /// Watch the servers of a cluster started one by one: mark devices down, out, up and in
    /// in the map (what `optio up` does for its own cluster).
    Manager(commands::manager::Args),
    /// The web console and its admin API (health, devices, pools, what a change would move,
    /// map edits): log in with an entity of the cluster keyring; runs until Ctrl-C.
    Console(commands::console::Args),
    /// Block volumes: create, ls, info, resize, rm, import, export (serve them with
    /// `optio nbd`).
    #[command(subcommand)]
    Volume(commands::volume::Command),
    /// Serve block volumes over NBD (for fio, qemu, qemu-img, nbdcopy, nbdfuse); runs until
    /// Ctrl-C.
    Nbd(commands::nbd::Args),
    /// The S3 gateway (runs until Ctrl-C), and its users and buckets (`optio s3 user create
    /// NAME`, `optio s3 bucket create NAME --pool P`).
    #[cfg(feature = "s3")]
    S3(commands::s3::Args),
    /// Store an object (from a file or standard input).
    Put(commands::client::PutArgs),
    /// Read an object (to standard output or a file).
    Get(commands::client::GetArgs),
    /// Remove an object.
    Rm(commands::client::KeyArgs),
    /// List objects.
    Ls(commands::client::LsArgs),
    /// Where an object lives (candidate, PG, devices); --verify checks every replica.
    Stat(commands::client::StatArgs),
    /// Which candidate holds a key, and each candidate's metrics.
    Probe(commands::client::KeyArgs),
    /// Measure the store: write/read throughput and latency, probe round trips, the cost of
    /// probing on first writes.
    Bench(commands::bench::Args),
    /// The tour: a local cluster, data written and read under two policies, what happened.
    Demo(commands::demo::Args),
    /// Shell completions: `optio completions bash > /etc/bash_completion.d/optio` (or
    /// `source <(optio completions bash)`); zsh, fish, elvish and powershell too.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Removes an emulated cluster after its supervisor died (started by `optio up
    /// --emulate` and `optio bench io`; not for people).
    #[command(name = "emulate-watchdog", hide = true)]
    EmulateWatchdog(commands::emulate::WatchdogArgs),
    /// Manual pages (roff): `optio man | man -l -` shows optio(1); `--dir DIR` writes one page
    /// per command (optio.1, optio-put.1, optio-map-convert.1, …).
    Man {
        /// Write every command's page into this directory instead of printing optio(1).
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

impl Command {
    /// Commands whose output is often piped into `head`, `less` or `grep`: when the reader
    /// goes away they should end quietly, as Unix tools do, rather than fail on a write.
    /// (Not the servers and `optio up`, which write to sockets and children's pipes.)
    fn prints_for_pipes(&self) -> bool {
        matches!(
            self,
            Command::Place(_)
                | Command::Analyze(_)
                | Command::Diff(_)
                | Command::Map(_)
                | Command::Status(_)
                | Command::Scrub(_)
                | Command::Resize(_)
                | Command::Sim(_)
                | Command::Get(_)
                | Command::Ls(_)
                | Command::Stat(_)
                | Command::Probe(_)
                | Command::Volume(_)
                | Command::Auth(_)
                | Command::Completions { .. }
                | Command::Man { .. }
        )
    }
}

fn main() -> std::process::ExitCode {
    // `optio server --config FILE`: the file's settings become flags first.
    let args = {
        let command = <Cli as clap::CommandFactory>::command();
        let flags: Vec<(String, bool)> = command
            .find_subcommand("server")
            .map(|server| {
                server
                    .get_arguments()
                    .filter_map(|a| {
                        let takes_value = !matches!(
                            a.get_action(),
                            clap::ArgAction::SetTrue
                                | clap::ArgAction::Help
                                | clap::ArgAction::Version
                        );
                        a.get_long().map(|long| (long.to_string(), takes_value))
                    })
                    .collect()
            })
            .unwrap_or_default();
        match commands::server::expand_config(std::env::args_os().collect(), &flags) {
            Ok(args) => args,
            Err(error) => {
                eprintln!("error: {error:#}");
                return std::process::ExitCode::from(1);
            }
        }
    };
    let cli = Cli::parse_from(args);
    // Every HTTP client needs a TLS crypto provider, TLS or not.
    optio_tls::install_crypto_provider();
    if cli.command.prints_for_pipes() {
        output::die_quietly_on_closed_pipe();
    }
    let result = match cli.command {
        Command::Place(args) => commands::place::run(args),
        Command::Analyze(args) => commands::analyze::run(args),
        Command::Diff(args) => commands::diff::run(args),
        Command::Map(command) => commands::map::run(command),
        Command::Status(args) => match commands::status::run(args) {
            // The health's exit code (0 OK, 2 WARN, 3 ERR) once the status printed.
            Ok(code) => return std::process::ExitCode::from(code),
            Err(error) => Err(error),
        },
        Command::Scrub(args) => match commands::scrub::run(args) {
            Ok(code) => return std::process::ExitCode::from(code),
            Err(error) => Err(error),
        },
        Command::Resize(args) => commands::edit::resize(args),
        Command::Reintegrate(args) => commands::reintegrate::run(args),
        Command::Sim(args) => commands::sim::run(args),
        Command::Up(args) => commands::up::run(args),
        Command::Server(args) => commands::server::run(args),
        Command::Manager(args) => commands::manager::run(args),
        Command::Console(args) => commands::console::run(args),
        Command::Auth(command) => commands::auth::run(command),
        Command::Volume(command) => commands::volume::run(command),
        Command::Nbd(args) => commands::nbd::run(args),
        #[cfg(feature = "s3")]
        Command::S3(args) => commands::s3::run(args),
        Command::Put(args) => commands::client::put(args),
        Command::Get(args) => commands::client::get(args),
        Command::Rm(args) => commands::client::rm(args),
        Command::Ls(args) => commands::client::ls(args),
        Command::Stat(args) => commands::client::stat(args),
        Command::Probe(args) => commands::client::probe(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Demo(args) => commands::demo::run(args),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "optio", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script).map_err(anyhow::Error::from)
        }
        Command::EmulateWatchdog(args) => commands::emulate::watchdog(args),
        Command::Man { dir } => commands::man::run(<Cli as clap::CommandFactory>::command(), dir),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            output::print_error(&error);
            std::process::ExitCode::FAILURE
        }
    }
}
