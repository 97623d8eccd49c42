//! `optio up --emulate FILE`'s emulation, and the watchdog that removes it after a supervisor
//! that died (`optio emulate-watchdog`, hidden).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use optio_local::cluster::LocalClusterSpec;
use optio_local::emulate::{Emulation, EmulationSpec};

/// Reads an emulation file.
pub fn read_spec(file: &Path) -> Result<EmulationSpec> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the emulation file {}", file.display()))?;
    Ok(EmulationSpec::parse(&file.display().to_string(), &text)?)
}

/// Builds the emulation of `file` for a cluster in `dir`, prints what it is, and moves this
/// thread into its router's namespace (from which the supervisor reaches every server).
pub fn start(file: &Path, dir: &Path) -> Result<Emulation> {
    let spec = read_spec(file)?;
    start_spec(&spec, dir)
}

/// [`start`] from a spec.
pub fn start_spec(spec: &EmulationSpec, dir: &Path) -> Result<Emulation> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dir = std::fs::canonicalize(dir)?;
    let binary = std::env::current_exe().context("cannot find the optio binary")?;
    let emulation =
        Emulation::start(spec, &binary, &dir).context("cannot start the emulated cluster")?;
    emulation.enter_router()?;
    Ok(emulation)
}

/// Places a local cluster's servers as `emulation` says.
pub fn place(emulation: &Emulation, spec: &mut LocalClusterSpec) {
    let racks = emulation.spec().racks.len() as u32;
    let hosts = emulation.spec().racks.iter().map(|r| r.hosts.len() as u32).max().unwrap_or(1);
    spec.zones = racks;
    spec.hosts_per_zone = hosts;
    if let Some((_, _, first)) = emulation.spec().servers().next() {
        spec.devices_per_host = first.devices;
        spec.capacity_bytes = first.capacity_bytes;
    }
    spec.placements = Some(emulation.placements());
}

/// How to reach the emulated cluster from a shell.
pub fn print_usage(emulation: &Emulation, dir: &Path) {
    println!();
    for line in emulation.describe() {
        println!("{line}");
    }
    let client =
        emulation.hosts().iter().find(|h| h.server.is_none()).or_else(|| emulation.hosts().first());
    if let Some(client) = client {
        let optio = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("optio"));
        println!(
            "\nThe servers listen in their hosts' namespaces (/run/netns/{}-…): run clients in one,\n  nsenter --net=/run/netns/{} -- {} ls --cluster {}\n(`optio nbd` there with --no-local-reads, or --local-reads-host of its own host; --location {} for the local policy).",
            emulation.prefix(),
            client.netns,
            optio.display(),
            dir.display(),
            client.location()
        );
    }
}

/// `optio emulate-watchdog --record FILE`.
#[derive(clap::Args, Debug)]
pub struct WatchdogArgs {
    /// The emulation's cleanup record.
    #[arg(long)]
    pub record: PathBuf,
}

/// Waits for the supervisor's pipe to close; cleans up after it unless it said it did.
pub fn watchdog(args: WatchdogArgs) -> Result<()> {
    // Interrupts and hang-ups are for the supervisor: the watchdog outlives it to clean up.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let _ignored = runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        (signal(SignalKind::interrupt()), signal(SignalKind::hangup()))
    });
    if optio_local::emulate::watchdog(&args.record)? {
        eprintln!("emulation watchdog: the supervisor died; removed what its emulation created");
    }
    Ok(())
}
