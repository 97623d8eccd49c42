//! Machine metrics, honouring the process's cgroup limits (v1 or v2): CPU utilisation against
//! the cgroup's CPU quota when it has one, memory utilisation against its memory limit when it
//! has one, the whole machine's otherwise. `/proc` is read with the `procfs` crate (`stat`,
//! `meminfo`, and `self/cgroup` + `self/mountinfo` to find the cgroup's directories); the
//! cgroup files are one number or one line each. Sampled by a background task; reading a
//! sample is two atomic loads.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Instant;

use procfs::{Current, CurrentSI};

/// The latest CPU and memory utilisation, per mille.
#[derive(Debug, Default)]
pub struct SystemMetrics {
    cpu_permille: AtomicU16,
    memory_permille: AtomicU16,
}

impl SystemMetrics {
    /// CPU utilisation, per mille.
    pub fn cpu_permille(&self) -> u16 {
        self.cpu_permille.load(Ordering::Relaxed)
    }
    /// Memory utilisation, per mille.
    pub fn memory_permille(&self) -> u16 {
        self.memory_permille.load(Ordering::Relaxed)
    }
}

/// The CPU time this process has used (every thread, user and system), in seconds, to the
/// nanosecond (`CLOCK_PROCESS_CPUTIME_ID`; `/proc`'s ticks are 10 ms, too coarse for the
/// cost of a few hundred small operations).
pub fn process_cpu_seconds() -> Option<f64> {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Some(now.tv_sec as f64 + now.tv_nsec as f64 / 1e9)
}

/// Where this process's cgroup keeps its CPU and memory accounting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cgroup {
    /// cgroup v2: the one directory (`cpu.max`, `cpu.stat`, `memory.max`, `memory.current`).
    unified: Option<PathBuf>,
    /// cgroup v1: the `cpu` controller's directory (`cpu.cfs_quota_us`, `cpu.cfs_period_us`).
    cpu: Option<PathBuf>,
    /// cgroup v1: the `cpuacct` controller's (`cpuacct.usage`, nanoseconds).
    cpuacct: Option<PathBuf>,
    /// cgroup v1: the `memory` controller's (`memory.limit_in_bytes`, `memory.usage_in_bytes`).
    memory: Option<PathBuf>,
}

/// A cgroup mount: its type (`cgroup` or `cgroup2`), the hierarchy path it shows, where it
/// is mounted, and (v1) its controllers.
#[derive(Clone, Debug)]
pub struct CgroupMount {
    /// `cgroup` (v1) or `cgroup2`.
    pub fs_type: String,
    /// The path within the hierarchy the mount shows (`/` unless a namespace hides more).
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// v1: the controllers of the hierarchy (`cpu`, `memory`, …).
    pub controllers: Vec<String>,
}

impl Cgroup {
    /// This process's, from `/proc/self/cgroup` and `/proc/self/mountinfo`; empty when they
    /// cannot be read.
    pub fn of_this_process() -> Cgroup {
        let Ok(me) = procfs::process::Process::myself() else { return Cgroup::default() };
        let (Ok(groups), Ok(mounts)) = (me.cgroups(), me.mountinfo()) else {
            return Cgroup::default();
        };
        let groups: Vec<(u32, Vec<String>, String)> =
            groups.0.into_iter().map(|g| (g.hierarchy, g.controllers, g.pathname)).collect();
        let mounts: Vec<CgroupMount> = mounts
            .0
            .into_iter()
            .filter(|m| m.fs_type == "cgroup" || m.fs_type == "cgroup2")
            .map(|m| CgroupMount {
                controllers: m.super_options.keys().cloned().collect(),
                fs_type: m.fs_type,
                root: m.root,
                mount_point: m.mount_point,
            })
            .collect();
        Cgroup::locate(&groups, &mounts)
    }

    /// The directories of the cgroups `groups` names (`/proc/self/cgroup`'s lines: hierarchy,
    /// controllers, path), under the mounts that show them.
    pub fn locate(groups: &[(u32, Vec<String>, String)], mounts: &[CgroupMount]) -> Cgroup {
        let under = |mount: &CgroupMount, path: &str| -> Option<PathBuf> {
            let relative = if mount.root == "/" {
                path
            } else {
                // A mount that shows part of the hierarchy (a namespace): the path must be in it.
                let rest = path.strip_prefix(mount.root.as_str())?;
                if !(rest.is_empty() || rest.starts_with('/')) {
                    return None;
                }
                rest
            };
            let dir = mount.mount_point.join(relative.trim_start_matches('/'));
            dir.is_dir().then_some(dir)
        };
        let mut found = Cgroup::default();
        for (hierarchy, controllers, path) in groups {
            if *hierarchy == 0 && controllers.is_empty() {
                found.unified =
                    mounts.iter().filter(|m| m.fs_type == "cgroup2").find_map(|m| under(m, path));
                continue;
            }
            let v1 = |name: &str| {
                if !controllers.iter().any(|c| c == name) {
                    return None;
                }
                mounts
                    .iter()
                    .filter(|m| m.fs_type == "cgroup" && m.controllers.iter().any(|c| c == name))
                    .find_map(|m| under(m, path))
            };
            found.cpu = found.cpu.take().or_else(|| v1("cpu"));
            found.cpuacct = found.cpuacct.take().or_else(|| v1("cpuacct"));
            found.memory = found.memory.take().or_else(|| v1("memory"));
        }
        found
    }

    /// The CPU quota, in thousandths of a CPU, and the CPU time used, in microseconds, when
    /// there is a quota — both from the same hierarchy. (A hybrid machine has both; v2's
    /// `cpu.stat` is in every v2 group, its root included, even where the `cpu` controller is
    /// on v1: read with a v1 quota it is the whole machine's CPU time against one group's
    /// quota. So v2 counts only where its `cpu.max` is.)
    fn cpu_quota_and_usage(&self) -> Option<(u64, u64)> {
        let v2 = self
            .unified
            .as_ref()
            .and_then(|dir| Some((dir, fs::read_to_string(dir.join("cpu.max")).ok()?)));
        if let Some((dir, text)) = v2 {
            let mut parts = text.split_whitespace();
            let quota: u64 = parts.next()?.parse().ok()?; // "max": no quota
            let period: u64 = parts.next()?.parse().ok()?;
            let stat = fs::read_to_string(dir.join("cpu.stat")).ok()?;
            let usage =
                stat.lines().find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse().ok())?;
            return (period > 0).then(|| (quota.saturating_mul(1000) / period, usage));
        }
        let dir = self.cpu.as_ref()?;
        let quota: i64 = number(&dir.join("cpu.cfs_quota_us"))?; // -1: no quota
        let period: u64 = number(&dir.join("cpu.cfs_period_us"))?;
        let quota = u64::try_from(quota).ok()?;
        let nanos: u64 = number(&self.cpuacct.as_ref()?.join("cpuacct.usage"))?;
        (period > 0).then(|| (quota.saturating_mul(1000) / period, nanos / 1000))
    }

    /// The CPU quota, in thousandths of a CPU, when there is one.
    #[cfg(test)]
    fn cpus_milli(&self) -> Option<u64> {
        self.cpu_quota_and_usage().map(|(quota, _)| quota)
    }

    /// CPU time the cgroup used, in microseconds, when it has a quota.
    #[cfg(test)]
    fn usage_us(&self) -> Option<u64> {
        self.cpu_quota_and_usage().map(|(_, usage)| usage)
    }

    /// Memory used and the limit, when there is a limit (v1 writes "no limit" as a number
    /// near 2^63: anything above the machine's memory is taken as none).
    fn memory(&self, machine_bytes: u64) -> Option<(u64, u64)> {
        let v2 = self.unified.as_ref().filter(|dir| dir.join("memory.max").exists());
        let (used, limit) = match (v2, &self.memory) {
            (Some(dir), _) => {
                (number(&dir.join("memory.current"))?, number(&dir.join("memory.max"))?)
            }
            (None, Some(dir)) => (
                number(&dir.join("memory.usage_in_bytes"))?,
                number(&dir.join("memory.limit_in_bytes"))?,
            ),
            (None, None) => return None,
        };
        (limit > 0 && (machine_bytes == 0 || limit < machine_bytes)).then_some((used, limit))
    }
}

/// A file holding one number (`None` for anything else, such as cgroup v2's "max").
fn number<T: std::str::FromStr>(path: &Path) -> Option<T> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The process's cgroup and successive CPU readings, to compute utilisation over the interval
/// between two.
#[derive(Debug, Default)]
pub struct Sampler {
    cgroup: Cgroup,
    last: Option<CpuReading>,
}

#[derive(Clone, Copy, Debug)]
enum CpuReading {
    /// Busy and total ticks from `/proc/stat`.
    Proc { busy: u64, total: u64 },
    /// The cgroup's CPU time and the wall clock, with the quota in CPUs (×1000).
    Cgroup { usage_us: u64, at: Instant, cpus_milli: u64 },
}

fn proc_stat() -> Option<(u64, u64)> {
    let cpu = procfs::KernelStats::current().ok()?.total;
    let idle = cpu.idle + cpu.iowait.unwrap_or(0);
    let total = cpu.user
        + cpu.nice
        + cpu.system
        + idle
        + cpu.irq.unwrap_or(0)
        + cpu.softirq.unwrap_or(0)
        + cpu.steal.unwrap_or(0);
    Some((total - idle, total))
}

impl Sampler {
    /// A sampler for this process's cgroup.
    pub fn new() -> Sampler {
        Sampler { cgroup: Cgroup::of_this_process(), last: None }
    }

    fn read(&self) -> Option<CpuReading> {
        if let Some((cpus_milli, usage_us)) = self.cgroup.cpu_quota_and_usage() {
            return Some(CpuReading::Cgroup { usage_us, at: Instant::now(), cpus_milli });
        }
        let (busy, total) = proc_stat()?;
        Some(CpuReading::Proc { busy, total })
    }

    /// Follows this process into the cgroup it is in now: a supervisor (the emulation,
    /// systemd, an operator) may move it after it started — the emulation does so right after
    /// spawning it, and a server that looked once could have found its new `cpu` group and
    /// its old `cpuacct` one, so it compared the whole machine's CPU time with its host's
    /// quota and reported 1,000 ‰ however idle it was. A change restarts the interval.
    fn follow(&mut self, now: Cgroup) {
        if now != self.cgroup {
            self.cgroup = now;
            self.last = None;
        }
    }

    /// Utilisation since the previous call, per mille (`None` on the first call, and on the
    /// first after the process moved to another cgroup).
    pub fn sample(&mut self) -> Option<u16> {
        self.follow(Cgroup::of_this_process());
        let now = self.read()?;
        let previous = self.last.replace(now)?;
        let permille = match (previous, now) {
            (
                CpuReading::Proc { busy: b0, total: t0 },
                CpuReading::Proc { busy: b1, total: t1 },
            ) => {
                let total = t1.saturating_sub(t0);
                if total == 0 {
                    return None;
                }
                b1.saturating_sub(b0) * 1000 / total
            }
            (
                CpuReading::Cgroup { usage_us: u0, at: a0, .. },
                CpuReading::Cgroup { usage_us: u1, at: a1, cpus_milli },
            ) => {
                let wall_us = a1.duration_since(a0).as_micros() as u64;
                if wall_us == 0 || cpus_milli == 0 {
                    return None;
                }
                u1.saturating_sub(u0) * 1000 * 1000 / (wall_us * cpus_milli)
            }
            _ => return None,
        };
        Some(permille.min(1000) as u16)
    }

    /// Memory utilisation, per mille: the cgroup's use over its limit when it has one, else
    /// the machine's `(MemTotal - MemAvailable) / MemTotal`.
    pub fn memory_permille(&self) -> Option<u16> {
        let info = procfs::Meminfo::current().ok();
        let total = info.as_ref().map_or(0, |i| i.mem_total);
        if let Some((used, limit)) = self.cgroup.memory(total) {
            return Some((used.saturating_mul(1000) / limit).min(1000) as u16);
        }
        let info = info?;
        let available = info.mem_available.unwrap_or(info.mem_free);
        (total > 0).then(|| ((total - available.min(total)) * 1000 / total) as u16)
    }
}

impl SystemMetrics {
    /// Takes one sample.
    pub fn update(&self, cpu: &mut Sampler) {
        if let Some(permille) = cpu.sample() {
            self.cpu_permille.store(permille, Ordering::Relaxed);
        }
        if let Some(permille) = cpu.memory_permille() {
            self.memory_permille.store(permille, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_per_mille() {
        let metrics = SystemMetrics::default();
        let mut cpu = Sampler::new();
        metrics.update(&mut cpu);
        // Burn a little CPU so the second sample has an interval.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert_ne!(x, 1);
        metrics.update(&mut cpu);
        assert!(metrics.cpu_permille() <= 1000);
        let memory = metrics.memory_permille();
        assert!(memory > 0 && memory <= 1000, "memory {memory}");
    }

    fn mount(fs_type: &str, root: &str, at: &Path, controllers: &[&str]) -> CgroupMount {
        CgroupMount {
            fs_type: fs_type.into(),
            root: root.into(),
            mount_point: at.to_path_buf(),
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn cgroup_v1_limits_are_found_under_their_controllers_mounts() {
        let tmp = tempfile::tempdir().unwrap();
        let (cpu, acct, memory) =
            (tmp.path().join("cpu"), tmp.path().join("cpuacct"), tmp.path().join("memory"));
        write(&cpu.join("optio/cpu.cfs_quota_us"), "50000\n");
        write(&cpu.join("optio/cpu.cfs_period_us"), "100000\n");
        write(&acct.join("optio/cpuacct.usage"), "2500000000\n");
        write(&memory.join("optio/memory.limit_in_bytes"), "536870912\n");
        write(&memory.join("optio/memory.usage_in_bytes"), "134217728\n");
        // A hybrid machine: v2 mounted too (at "unified"), with no controller on it, yet a
        // `cpu.stat` at its root with the whole machine's CPU time (as Linux keeps it).
        write(&tmp.path().join("unified/cpu.stat"), "usage_usec 999999999\n");
        let mounts = [
            mount("cgroup2", "/", &tmp.path().join("unified"), &[]),
            mount("cgroup", "/", &cpu, &["rw", "cpu"]),
            mount("cgroup", "/", &acct, &["rw", "cpuacct"]),
            mount("cgroup", "/", &memory, &["rw", "memory"]),
        ];
        let groups = [
            (4, vec!["cpu".to_string()], "/optio".to_string()),
            (3, vec!["cpuacct".to_string()], "/optio".to_string()),
            (9, vec!["memory".to_string()], "/optio".to_string()),
            (1, vec!["pids".to_string()], "/".to_string()),
            (0, vec![], "/".to_string()),
        ];
        let cgroup = Cgroup::locate(&groups, &mounts);
        assert_eq!(cgroup.cpus_milli(), Some(500), "half a CPU");
        assert_eq!(cgroup.usage_us(), Some(2_500_000));
        assert_eq!(cgroup.memory(8 << 30), Some((128 << 20, 512 << 20)));
        // v1's "no limit" is a number near 2^63: the machine's memory then.
        write(&memory.join("optio/memory.limit_in_bytes"), "9223372036854771712\n");
        assert_eq!(cgroup.memory(8 << 30), None);
        // No quota (-1): the machine's CPUs.
        write(&cpu.join("optio/cpu.cfs_quota_us"), "-1\n");
        assert_eq!(cgroup.cpus_milli(), None);
    }

    #[test]
    fn a_sampler_follows_its_process_into_another_cgroup_and_restarts_the_interval() {
        let moved = Cgroup { cpu: Some("/sys/fs/cgroup/cpu/host".into()), ..Cgroup::default() };
        let mut sampler = Sampler {
            cgroup: Cgroup::default(),
            last: Some(CpuReading::Proc { busy: 1, total: 2 }),
        };
        sampler.follow(Cgroup::default());
        assert!(sampler.last.is_some(), "the same group keeps the interval");
        sampler.follow(moved.clone());
        assert_eq!(sampler.cgroup, moved);
        assert!(sampler.last.is_none(), "a reading of the old group is not compared with the new");
    }

    #[test]
    fn cgroup_v2_limits_are_found_in_the_unified_directory_even_under_a_namespace() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("system.slice/optio.service");
        write(&dir.join("cpu.max"), "150000 100000\n");
        write(&dir.join("cpu.stat"), "usage_usec 777\nuser_usec 700\n");
        write(&dir.join("memory.max"), "max\n");
        write(&dir.join("memory.current"), "1000\n");
        let groups = [(0, vec![], "/system.slice/optio.service".to_string())];
        let cgroup = Cgroup::locate(&groups, &[mount("cgroup2", "/", tmp.path(), &[])]);
        assert_eq!(cgroup.cpus_milli(), Some(1500));
        assert_eq!(cgroup.usage_us(), Some(777));
        assert_eq!(cgroup.memory(8 << 30), None, "max: no limit");
        write(&dir.join("memory.max"), "4000\n");
        assert_eq!(cgroup.memory(8 << 30), Some((1000, 4000)));
        // A mount showing only /system.slice (a cgroup namespace or a bind mount).
        let inner = Cgroup::locate(
            &groups,
            &[mount("cgroup2", "/system.slice", &tmp.path().join("system.slice"), &[])],
        );
        assert_eq!(inner.cpus_milli(), Some(1500));
        // A path outside what the mount shows is not guessed.
        let outside = Cgroup::locate(
            &[(0, vec![], "/user.slice".to_string())],
            &[mount("cgroup2", "/system.slice", &tmp.path().join("system.slice"), &[])],
        );
        assert_eq!(outside, Cgroup::default());
    }

    #[test]
    fn this_process_cgroup_is_found_where_the_machine_has_one() {
        // (Whatever this machine has: v1 controllers, v2, or neither; what is found exists.)
        let cgroup = Cgroup::of_this_process();
        for dir in
            [&cgroup.unified, &cgroup.cpu, &cgroup.cpuacct, &cgroup.memory].into_iter().flatten()
        {
            assert!(dir.is_dir(), "{dir:?}");
        }
        if Path::new("/sys/fs/cgroup/memory/memory.usage_in_bytes").exists() {
            assert!(cgroup.memory.is_some(), "cgroup v1 memory controller not found: {cgroup:?}");
        }
    }
}
