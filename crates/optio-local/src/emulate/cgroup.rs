//! Host conditions as cgroup v1 groups (what these machines have): a memory limit, a CPU
//! quota, a read throttle on the device under the cluster directory. Each emulated host that
//! needs one gets a group per controller, made under this process's own group in that
//! hierarchy (so the machine's accounting of this process's work is unchanged), named with
//! the emulation's prefix.

use std::fs;
use std::path::{Path, PathBuf};

use super::error::EmulateError;
use super::spec::Conditions;

/// Where cgroup v1 hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The CPU quota period, microseconds (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

/// A v1 controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {
    /// `memory`.
    Memory,
    /// `cpu` (quota).
    Cpu,
    /// `cpuacct` (usage, which a server reads to report its CPU utilisation).
    Cpuacct,
    /// `blkio` (throttles).
    Blkio,
}

impl Controller {
    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Cpuacct => "cpuacct",
            Controller::Blkio => "blkio",
        }
    }
}

/// This process's group in `controller`'s v1 hierarchy, if the hierarchy is mounted.
fn own_group(controller: Controller) -> Option<PathBuf> {
    let mount = Path::new(CGROUP_ROOT).join(controller.name());
    if !mount.join("cgroup.procs").exists() {
        return None;
    }
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == controller.name()).then(|| path.to_string())
    })?;
    let dir = mount.join(path.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

/// The controllers `conditions` need.
fn needed(conditions: &Conditions) -> Vec<Controller> {
    let mut controllers = Vec::new();
    if conditions.memory_limit_bytes.is_some() {
        controllers.push(Controller::Memory);
    }
    if conditions.cpus_milli.is_some() {
        controllers.extend([Controller::Cpu, Controller::Cpuacct]);
    }
    if conditions.device_read_bytes_per_sec.is_some() {
        controllers.push(Controller::Blkio);
    }
    controllers
}

/// Checks that every controller `conditions` need is there.
pub fn check(conditions: &Conditions, host: &str) -> Result<(), EmulateError> {
    for controller in needed(conditions) {
        if own_group(controller).is_none() {
            return Err(EmulateError::Unsupported(format!(
                "host {host} needs cgroup v1's {} controller, which is not mounted at {CGROUP_ROOT}/{}: remove the condition from the emulation file, or run where cgroup v1 is mounted",
                controller.name(),
                controller.name()
            )));
        }
    }
    Ok(())
}

/// The whole disk (`MAJOR:MINOR`) holding `dir`: blkio throttles apply to disks, and a
/// partition's reads are accounted to its disk.
pub fn disk_of(dir: &Path) -> Result<String, EmulateError> {
    let stat = rustix::fs::stat(dir).map_err(|e| EmulateError::Io {
        what: format!("cannot stat {}", dir.display()),
        source: e.into(),
    })?;
    let (major, minor) = (rustix::fs::major(stat.st_dev), rustix::fs::minor(stat.st_dev));
    if major == 0 {
        return Err(EmulateError::Unsupported(format!(
            "{} is on a file system with no block device (major 0: tmpfs, overlay…), so device_read_rate cannot throttle it: put the cluster directory on a disk",
            dir.display()
        )));
    }
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    if sys.join("partition").exists()
        && let Ok(parent) = fs::read_to_string(sys.join("../dev"))
    {
        return Ok(parent.trim().to_string());
    }
    Ok(format!("{major}:{minor}"))
}

/// Makes `name`'s groups for `conditions`, recording each before it is made (`record`), and
/// sets their limits; returns the directories (whose `cgroup.procs` a process joins).
pub fn create(
    name: &str,
    conditions: &Conditions,
    disk: Option<&str>,
    mut record: impl FnMut(&Path) -> Result<(), EmulateError>,
) -> Result<Vec<PathBuf>, EmulateError> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for controller in needed(conditions) {
        let parent = own_group(controller).ok_or_else(|| {
            EmulateError::Unsupported(format!("cgroup v1 {} is not mounted", controller.name()))
        })?;
        let dir = parent.join(name);
        // cpu and cpuacct may be one hierarchy (a `cpu,cpuacct` mount): one group then.
        let canonical = fs::canonicalize(&parent).unwrap_or(parent.clone()).join(name);
        if dirs.iter().any(|d| fs::canonicalize(d).ok().as_deref() == Some(canonical.as_path())) {
            continue;
        }
        record(&dir)?;
        fs::create_dir(&dir).map_err(|source| EmulateError::Io {
            what: format!("cannot create the cgroup {}", dir.display()),
            source,
        })?;
        let set = |file: &str, value: String| {
            let path = dir.join(file);
            fs::write(&path, &value).map_err(|source| EmulateError::Io {
                what: format!("cannot write {value} to {}", path.display()),
                source,
            })
        };
        match controller {
            Controller::Memory => {
                let limit = conditions.memory_limit_bytes.expect("needed");
                set("memory.limit_in_bytes", limit.to_string())?;
            }
            Controller::Cpu => {
                let milli = u64::from(conditions.cpus_milli.expect("needed"));
                set("cpu.cfs_period_us", CPU_PERIOD_US.to_string())?;
                set("cpu.cfs_quota_us", (milli * CPU_PERIOD_US / 1000).to_string())?;
            }
            Controller::Cpuacct => {}
            Controller::Blkio => {
                let rate = conditions.device_read_bytes_per_sec.expect("needed");
                let disk = disk
                    .ok_or_else(|| EmulateError::Unsupported("no disk to throttle".to_string()))?;
                set("blkio.throttle.read_bps_device", format!("{disk} {rate}"))?;
            }
        }
        dirs.push(dir);
    }
    Ok(dirs)
}

/// Moves process `pid` (all its threads) into each group of `dirs`.
pub fn join(pid: u32, dirs: &[PathBuf]) -> Result<(), EmulateError> {
    for dir in dirs {
        let path = dir.join("cgroup.procs");
        fs::write(&path, pid.to_string()).map_err(|source| EmulateError::Io {
            what: format!("cannot move process {pid} into {}", dir.display()),
            source,
        })?;
    }
    Ok(())
}

/// Empties what a memory group holds of the page cache (`memory.force_empty`: the kernel
/// reclaims the group's pages; its processes' own memory stays), as a program that took the
/// host's memory would; a directory of another controller is left alone.
pub fn drop_page_cache(dir: &Path) -> Result<(), EmulateError> {
    let path = dir.join("memory.force_empty");
    if !path.exists() {
        return Ok(());
    }
    fs::write(&path, "0").map_err(|source| EmulateError::Io {
        what: format!("cannot empty the page cache of {}", dir.display()),
        source,
    })
}

/// Bytes read from disks by the processes of a blkio group (`blkio.throttle.io_service_bytes`,
/// its `Read` lines summed).
pub fn read_bytes(dir: &Path) -> Option<u64> {
    let text = fs::read_to_string(dir.join("blkio.throttle.io_service_bytes")).ok()?;
    Some(
        text.lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                let (_, op, value) = (parts.next()?, parts.next()?, parts.next()?);
                (op == "Read").then(|| value.parse::<u64>().ok()).flatten()
            })
            .sum(),
    )
}
