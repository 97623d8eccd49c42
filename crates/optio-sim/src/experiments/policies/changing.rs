//! `optio sim policies` with *changing* metrics: what a policy decides on is what a probe saw
//! a moment ago, and what the object gets is what the devices are like when its block lands
//! and, later, when it is read — as in a real cluster. The static snapshot of
//! [`super`] is the most favourable case for every policy; this one can show the
//! paper's negative results (seed 000 §5.1: cpu, latency and journal did not help).
//!
//! The model, in simulated time (one object written every `interval`):
//!
//! * **Transient per-disk load** (what `latency` and `journal` see): other tenants' unflushed
//!   bytes, an Ornstein–Uhlenbeck process around the disk's mean (8 MiB, 32 MiB on slow disks;
//!   standard deviation equal to the mean) with correlation time `transient`, plus the
//!   policy's own writes queued on the disk, drained at the disk's bandwidth. A disk's latency
//!   metric is its base latency plus its queue over its bandwidth; its journal metric is its
//!   queue.
//! * **Host CPU** (correlation time `cpu`) and **memory** (`memory`, slow: co-located
//!   applications stay long) around each host's drawn mean, hot hosts staying hot.
//! * **A decision** uses the metrics as they were `staleness` earlier (the probe's answer);
//!   the block **lands** `effect_delay` after the decision (a 4 MiB block on 10 GbE) and waits
//!   behind the replica's queue: the object's *write latency* is its slowest replica's wait
//!   plus its own transfer. **Reads** come `read_after` later, served by the primary: from
//!   the page cache with probability 1 − memory utilisation (10 GbE speed), from the disk
//!   otherwise (behind its queue); CPU utilisation slows a read by `cpu_sensitivity` × cpu
//!   (Ceph, and Optio, are not CPU-bound: small).
//!
//! Events (decisions, landings, reads) run in time order; each disk's and host's process is
//! advanced exactly (the OU transition over the elapsed time), so the result does not depend
//! on a step size. Deterministic for a seed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;

use optio_placement::choice::{
    Candidates, ChoiceRequest, Location, MetricsSource, MetricsTable, fraction_to_ppm, used_to_ppm,
};
use optio_placement::stats::Summary;
use optio_placement::{ClusterMap, DeviceId, Placement, PolicySpec, ReplicaSet};

use super::args::Args;
use crate::SimError;
use crate::rng::Rng;

/// A disk's bandwidth (HDD), bytes per second: drains queues, reads what the cache misses.
const DISK_BYTES_PER_SEC: f64 = 150e6;
/// The network a cached read crosses (10 GbE), bytes per second.
const NETWORK_BYTES_PER_SEC: f64 = 1.25e9;
/// Transient background load per disk: mean unflushed bytes of a normal and a slow disk.
const BACKGROUND_BYTES: f64 = 8.0 * 1048576.0;
const SLOW_BACKGROUND_BYTES: f64 = 32.0 * 1048576.0;

/// An Ornstein–Uhlenbeck process, advanced exactly.
#[derive(Clone, Copy, Debug)]
struct Process {
    value: f64,
    mean: f64,
    sd: f64,
    tau: f64,
    at: f64,
}

impl Process {
    fn new(mean: f64, sd: f64, tau: f64) -> Process {
        Process { value: mean, mean, sd, tau, at: 0.0 }
    }

    /// The value at time `t` (not before the last).
    fn at(&mut self, t: f64, rng: &mut Rng, min: f64, max: f64) -> f64 {
        let dt = t - self.at;
        if dt > 0.0 {
            let decay = (-dt / self.tau.max(1e-9)).exp();
            let spread = self.sd * (1.0 - decay * decay).max(0.0).sqrt();
            self.value =
                (self.mean + (self.value - self.mean) * decay + spread * rng.normal(0.0, 1.0))
                    .clamp(min, max);
            self.at = t;
        }
        self.value
    }
}

/// A disk's state.
struct Disk {
    background: Process,
    /// The policy's own bytes queued, as of `queued_at`.
    queued: f64,
    queued_at: f64,
    base_latency_s: f64,
    host: usize,
}

impl Disk {
    /// Its unflushed bytes at `t`.
    fn queue(&mut self, t: f64, rng: &mut Rng) -> f64 {
        if t > self.queued_at {
            self.queued = (self.queued - DISK_BYTES_PER_SEC * (t - self.queued_at)).max(0.0);
            self.queued_at = t;
        }
        self.background.at(t, rng, 0.0, f64::MAX) + self.queued
    }
}

/// A host's state.
struct Host {
    cpu: Process,
    memory: Process,
}

/// What happens when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Decide,
    Land,
    Read,
}

/// Per policy: the metrics at decision and at effect, and what its objects got.
#[derive(Clone, Debug, Default)]
pub struct Changing {
    /// Means over objects at decision: cpu %, memory %, latency ms, journal MiB.
    pub decided: [f64; 4],
    /// The same, when the block landed (memory: when read).
    pub effect: [f64; 4],
    /// Mean write latency of an object (its slowest replica), ms.
    pub write_ms: f64,
    /// Mean read latency, ms.
    pub read_ms: f64,
    /// Copies on the fullest disk over the mean.
    pub copies_max_over_mean: f64,
    /// Objects written.
    pub objects: u64,
}

/// The dynamics' parameters, from the arguments.
pub struct Dynamics {
    interval_s: f64,
    staleness_s: f64,
    delay_s: f64,
    read_after_s: f64,
    transient_s: f64,
    cpu_s: f64,
    memory_s: f64,
    cpu_sensitivity: f64,
    objects: u64,
}

impl Dynamics {
    /// From `args`.
    pub fn of(args: &Args) -> Dynamics {
        Dynamics {
            interval_s: args.interval_ms / 1e3,
            staleness_s: args.staleness_ms / 1e3,
            delay_s: args.effect_delay_ms / 1e3,
            read_after_s: args.read_after_ms / 1e3,
            transient_s: args.transient_ms / 1e3,
            cpu_s: args.cpu_ms / 1e3,
            memory_s: args.memory_ms / 1e3,
            cpu_sensitivity: args.cpu_sensitivity,
            objects: args.changing_objects,
        }
    }

    /// The parameters in a sentence.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "an object every {} ms; metrics {} ms old at a decision; blocks land {} ms after it; reads {} s after; correlation times: disk load {} ms, cpu {} s, memory {} s; cpu slows a read by {} × utilisation",
            self.interval_s * 1e3,
            self.staleness_s * 1e3,
            self.delay_s * 1e3,
            self.read_after_s,
            self.transient_s * 1e3,
            self.cpu_s,
            self.memory_s,
            self.cpu_sensitivity
        );
        out
    }
}

/// Simulates `policy` with changing metrics; `initial` is the static snapshot (means,
/// latencies, space) the processes start from.
pub fn simulate(
    args: &Args,
    dynamics: &Dynamics,
    map: &ClusterMap,
    initial: &MetricsTable,
    policy: PolicySpec,
) -> Result<Changing, SimError> {
    let placement = Placement::new(map)?;
    let pool = placement.pool_by_name("mixed").expect("built with this pool");
    let mut scratch = placement.scratch();
    let pg_devices: Vec<ReplicaSet> = (0..args.pg_num)
        .map(|seed| {
            let mut set = ReplicaSet::new();
            pool.place(pool.pg_key(seed), &mut scratch, &mut set);
            set
        })
        .collect();
    let mut rng = Rng::new(args.seed ^ 0xc4a1_61e5);
    let disks_per_host = args.disks_per_host as usize;
    let hosts_count = (args.racks * args.hosts_per_rack) as usize;
    let mut metrics = MetricsTable::new(map.max_devices());
    let mut disks: Vec<Disk> = Vec::new();
    let mut hosts: Vec<Host> = Vec::new();
    for (index, device) in map.devices().iter().enumerate() {
        let m = *initial.metrics(device.id).expect("every device has metrics");
        let slow = m.latency_us >= 4000;
        let background = if slow { SLOW_BACKGROUND_BYTES } else { BACKGROUND_BYTES };
        let host = index / disks_per_host;
        if hosts.len() <= host {
            let (cpu, memory) = (f64::from(m.cpu_ppm) / 1e6, f64::from(m.memory_ppm) / 1e6);
            let hot = cpu >= 0.95;
            hosts.push(Host {
                cpu: Process::new(cpu, if hot { 0.0 } else { 0.15 }, dynamics.cpu_s),
                memory: Process::new(memory, if hot { 0.0 } else { 0.05 }, dynamics.memory_s),
            });
        }
        disks.push(Disk {
            background: Process::new(background, background, dynamics.transient_s),
            queued: 0.0,
            queued_at: 0.0,
            base_latency_s: if slow { 4e-3 } else { 1e-3 },
            host,
        });
        metrics.set(device.id, m).expect("within the table");
    }
    debug_assert_eq!(hosts.len(), hosts_count);
    let initial_space: Vec<u32> =
        map.devices().iter().map(|d| initial.metrics(d.id).map_or(0, |m| m.space_ppm)).collect();
    let mut used_bytes = vec![0u64; disks.len()];
    let clients: Vec<Location> = (0..hosts_count as u32)
        .map(|host| {
            let rack = host / args.hosts_per_rack;
            let name = format!("rack{rack}-host{}", host % args.hosts_per_rack);
            Location::from_levels([
                ("rack", format!("rack{rack}").as_str()),
                ("host", name.as_str()),
            ])
        })
        .collect();
    let size = args.object_bytes as f64;
    let mut events: BinaryHeap<Reverse<(u64, Event, u64)>> = BinaryHeap::new();
    let nanos = |t: f64| (t.max(0.0) * 1e9) as u64;
    for n in 0..dynamics.objects {
        let t = dynamics.staleness_s + n as f64 * dynamics.interval_s;
        events.push(Reverse((nanos(t - dynamics.staleness_s), Event::Decide, n)));
    }
    let mut chosen: Vec<Option<ReplicaSet>> = vec![None; dynamics.objects as usize];
    let mut outcome = Changing::default();
    let mut copies = vec![0f64; disks.len()];
    let (mut candidates, mut name) = (Candidates::new(), String::new());
    let (mut written, mut read) = (0u64, 0u64);
    while let Some(Reverse((when, event, n))) = events.pop() {
        let t = when as f64 / 1e9;
        match event {
            Event::Decide => {
                name.clear();
                let _ = write!(name, "obj.{n:012x}");
                pool.candidates_with(&name, &mut candidates, |key, devices| {
                    *devices = pg_devices[key.pg.map_or(0, |pg| pg.seed as usize)];
                });
                // What the probes saw: each candidate device as it is now (`staleness`
                // before the decision is made, the block sent).
                for (_, devices) in candidates.iter() {
                    for device in devices.devices() {
                        let d = device.0 as usize;
                        let queue = disks[d].queue(t, &mut rng);
                        let host = disks[d].host;
                        let cpu = hosts[host].cpu.at(t, &mut rng, 0.0, 1.0);
                        let memory = hosts[host].memory.at(t, &mut rng, 0.0, 1.0);
                        let base = disks[d].base_latency_s;
                        if let Some(m) = metrics.get_mut(DeviceId(device.0)) {
                            m.latency_us = ((base + queue / DISK_BYTES_PER_SEC) * 1e6) as u32;
                            m.journal_bytes = queue as u64;
                            m.cpu_ppm = fraction_to_ppm(cpu);
                            m.memory_ppm = fraction_to_ppm(memory);
                        }
                    }
                }
                let client = &clients[(n % hosts_count as u64) as usize];
                let request = ChoiceRequest { policy: Some(&policy), client: Some(client) };
                let Ok(choice) = pool.choose(&candidates, &metrics, &request) else { continue };
                let (_, devices) =
                    candidates.get(usize::from(choice.key.index)).expect("chosen from the set");
                let m = choice.metrics;
                outcome.decided[0] += f64::from(m.cpu_ppm) / 1e4;
                outcome.decided[1] += f64::from(m.memory_ppm) / 1e4;
                outcome.decided[2] += f64::from(m.latency_us) / 1e3;
                outcome.decided[3] += m.journal_bytes as f64 / 1048576.0;
                for device in devices.devices() {
                    let d = device.0 as usize;
                    copies[d] += 1.0;
                    used_bytes[d] += args.object_bytes;
                    if let Some(m) = metrics.get_mut(DeviceId(device.0)) {
                        m.space_ppm = initial_space[d]
                            .saturating_add(used_to_ppm(used_bytes[d], args.disk_bytes));
                    }
                }
                chosen[n as usize] = Some(*devices);
                written += 1;
                let decided = t + dynamics.staleness_s;
                events.push(Reverse((nanos(decided + dynamics.delay_s), Event::Land, n)));
                events.push(Reverse((nanos(decided + dynamics.read_after_s), Event::Read, n)));
            }
            Event::Land => {
                let devices = chosen[n as usize].expect("decided before it lands");
                let (mut slowest, mut cpu, mut latency, mut journal, mut count) =
                    (0f64, 0f64, 0f64, 0f64, 0f64);
                for device in devices.devices() {
                    let d = device.0 as usize;
                    let queue = disks[d].queue(t, &mut rng);
                    let host = disks[d].host;
                    cpu += hosts[host].cpu.at(t, &mut rng, 0.0, 1.0);
                    let waiting = disks[d].base_latency_s + queue / DISK_BYTES_PER_SEC;
                    latency += waiting;
                    journal += queue;
                    count += 1.0;
                    slowest = slowest.max(waiting + size / DISK_BYTES_PER_SEC);
                    disks[d].queued += size;
                }
                let count = count.max(1.0);
                outcome.effect[0] += cpu / count * 100.0;
                outcome.effect[2] += latency / count * 1e3;
                outcome.effect[3] += journal / count / 1048576.0;
                outcome.write_ms += slowest * 1e3;
            }
            Event::Read => {
                let devices = chosen[n as usize].expect("decided before it is read");
                let Some(primary) = devices.primary() else { continue };
                let d = primary.0 as usize;
                let host = disks[d].host;
                let memory = hosts[host].memory.at(t, &mut rng, 0.0, 1.0);
                let cpu = hosts[host].cpu.at(t, &mut rng, 0.0, 1.0);
                let queue = disks[d].queue(t, &mut rng);
                let miss = (queue + size) / DISK_BYTES_PER_SEC;
                let hit = size / NETWORK_BYTES_PER_SEC;
                let served = memory * miss + (1.0 - memory) * hit;
                outcome.effect[1] += memory * 100.0;
                outcome.read_ms += served * (1.0 + dynamics.cpu_sensitivity * cpu) * 1e3;
                read += 1;
            }
        }
    }
    let w = written.max(1) as f64;
    for value in outcome.decided.iter_mut() {
        *value /= w;
    }
    for (i, value) in outcome.effect.iter_mut().enumerate() {
        *value /= if i == 1 { read.max(1) as f64 } else { w };
    }
    outcome.write_ms /= w;
    outcome.read_ms /= read.max(1) as f64;
    outcome.copies_max_over_mean = Summary::of(&copies).max_over_mean;
    outcome.objects = written;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ou_process_forgets_its_start_and_stays_in_bounds() {
        let mut rng = Rng::new(1);
        let mut p = Process::new(10.0, 2.0, 0.01);
        p.value = 100.0;
        let later = p.at(1.0, &mut rng, 0.0, f64::MAX);
        assert!(later < 30.0, "100 seconds of correlation times later: {later}");
        let mut q = Process::new(0.5, 5.0, 0.01);
        for step in 1..100 {
            let v = q.at(step as f64 * 0.001, &mut rng, 0.0, 1.0);
            assert!((0.0..=1.0).contains(&v));
        }
        // Not advanced backwards.
        let v = q.at(0.0, &mut rng, 0.0, 1.0);
        assert_eq!(v, q.value);
    }
}
