//! Machine metrics from `/proc`, honouring cgroup (v2) limits: CPU utilisation against the
//! cgroup's quota when it has one, memory utilisation against the cgroup's limit when it has
//! one. Sampled by a background task; reading a sample is two atomic loads.

use std::fs;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Instant;

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

/// Successive CPU readings, to compute utilisation over the interval between two.
#[derive(Debug, Default)]
pub struct CpuSampler {
    last: Option<CpuReading>,
}

#[derive(Clone, Copy, Debug)]
enum CpuReading {
    /// Busy and total jiffies from `/proc/stat`.
    Proc { busy: u64, total: u64 },
    /// cgroup `usage_usec` and the wall clock, with the quota in CPUs (×1000).
    Cgroup { usage_us: u64, at: Instant, cpus_milli: u64 },
}

const CGROUP: &str = "/sys/fs/cgroup";

fn cgroup_cpus_milli() -> Option<u64> {
    let text = fs::read_to_string(format!("{CGROUP}/cpu.max")).ok()?;
    let mut parts = text.split_whitespace();
    let quota: u64 = parts.next()?.parse().ok()?; // "max" fails here: no quota
    let period: u64 = parts.next()?.parse().ok()?;
    (period > 0).then(|| quota * 1000 / period)
}

fn cgroup_usage_us() -> Option<u64> {
    let text = fs::read_to_string(format!("{CGROUP}/cpu.stat")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse().ok())
}

fn proc_stat() -> Option<(u64, u64)> {
    let text = fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let values: Vec<u64> = line.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3)? + values.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

impl CpuSampler {
    fn read() -> Option<CpuReading> {
        if let (Some(cpus_milli), Some(usage_us)) = (cgroup_cpus_milli(), cgroup_usage_us()) {
            return Some(CpuReading::Cgroup { usage_us, at: Instant::now(), cpus_milli });
        }
        let (busy, total) = proc_stat()?;
        Some(CpuReading::Proc { busy, total })
    }

    /// Utilisation since the previous call, per mille (`None` on the first call).
    pub fn sample(&mut self) -> Option<u16> {
        let now = CpuSampler::read()?;
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
}

/// Memory utilisation, per mille: the cgroup's `memory.current / memory.max` when it has a
/// limit, else `(MemTotal - MemAvailable) / MemTotal`.
pub fn memory_permille() -> Option<u16> {
    let limit = fs::read_to_string(format!("{CGROUP}/memory.max"))
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok());
    let current = fs::read_to_string(format!("{CGROUP}/memory.current"))
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok());
    if let (Some(limit), Some(current)) = (limit, current)
        && limit > 0
    {
        return Some((current.saturating_mul(1000) / limit).min(1000) as u16);
    }
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        text.lines().find_map(|l| l.strip_prefix(name))?.split_whitespace().next()?.parse().ok()
    };
    let total = field("MemTotal:")?;
    let available = field("MemAvailable:")?;
    (total > 0).then(|| ((total - available.min(total)) * 1000 / total) as u16)
}

impl SystemMetrics {
    /// Takes one sample.
    pub fn update(&self, cpu: &mut CpuSampler) {
        if let Some(permille) = cpu.sample() {
            self.cpu_permille.store(permille, Ordering::Relaxed);
        }
        if let Some(permille) = memory_permille() {
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
        let mut cpu = CpuSampler::default();
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
}
