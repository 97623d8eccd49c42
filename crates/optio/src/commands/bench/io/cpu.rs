//! The machine's CPU utilisation over an interval, from `/proc/stat` (every core, every
//! process: the servers, the clients, fio — and whatever else runs on the machine).

use serde::Serialize;

/// `/proc/stat`'s first line: busy and total ticks.
fn ticks() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let values: Vec<u64> = line.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// A reading to measure from.
#[derive(Clone, Copy, Debug)]
pub struct Meter {
    start: Option<(u64, u64)>,
}

/// The utilisation measured.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Utilisation {
    /// Busy share of all cores over the interval, percent.
    pub busy_percent: f64,
    /// Cores.
    pub cores: usize,
}

impl Meter {
    /// Starts measuring.
    pub fn start() -> Meter {
        Meter { start: ticks() }
    }

    /// The utilisation since [`start`](Self::start).
    pub fn stop(&self) -> Utilisation {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        match (self.start, ticks()) {
            (Some((busy0, total0)), Some((busy1, total1))) if total1 > total0 => Utilisation {
                busy_percent: (busy1 - busy0) as f64 * 100.0 / (total1 - total0) as f64,
                cores,
            },
            _ => Utilisation { busy_percent: 0.0, cores },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilisation_is_a_percentage() {
        let meter = Meter::start();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        let used = meter.stop();
        assert!((0.0..=100.0).contains(&used.busy_percent), "{used:?}");
        assert!(used.cores >= 1);
    }
}
