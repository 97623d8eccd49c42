//! What CHOICE adds to a placement lookup, on a crush pool and on a ring pool.
//!
//! Run: `cargo bench -p optio-placement --bench choice`. Each group times, per object name:
//! * `lookup` — the plain lookup: name → PG/key → devices (`object_key` + `place`);
//! * `object_key` — the first half of the lookup: name → PG → engine key (hashing only);
//! * `keys_k2` — generating the 2 candidate keys (hashing only; candidate 0's is
//!   `object_key`'s);
//! * `decide_k2` — the policy decision over 2 already-placed candidates (metrics aggregated,
//!   down/full filtered, policy `space`);
//! * `cached_k2` — a lookup of an object whose choice (candidate 1) is cached: its key, then
//!   `place`;
//! * `first_write_k2` — everything a first write computes: 2 candidates with their devices,
//!   then the decision.
//!
//! What choices add to a lookup: candidate generation `keys_k2 − object_key`, plus the decision
//! `decide_k2`; a first write (`first_write_k2 − lookup`) adds the second candidate's engine
//! lookup on top. Numbers in `docs/benchmarks.md`.

use std::hint::black_box;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use optio_placement::choice::{
    CandidateKeys, Candidates, ChoiceRequest, DeviceMetrics, Location, MetricsTable,
};
use optio_placement::{
    ChoiceSettings, ClusterMap, ClusterMapBuilder, DeviceSpec, EngineRef, Placement, PolicySpec,
    PoolSpec, ReplicaSet, RingSpec,
};

const NAMES: usize = 4096;

/// The calling thread's CPU time, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    #[allow(unsafe_code)]
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "CLOCK_THREAD_CPUTIME_ID is available on Linux");
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Criterion measurement: thread CPU time in nanoseconds.
struct ThreadCpu;

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &Nanoseconds
    }
}

/// Formats CPU nanoseconds (ns, µs, ms) and elements per second.
struct Nanoseconds;

impl ValueFormatter for Nanoseconds {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical < 1e3 {
            (1.0, "ns")
        } else if typical < 1e6 {
            (1e-3, "µs")
        } else {
            (1e-6, "ms")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }
    fn scale_throughputs(
        &self,
        typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per = match throughput {
            Throughput::Elements(n)
            | Throughput::Bytes(n)
            | Throughput::BytesDecimal(n)
            | Throughput::Bits(n) => *n as f64,
            _ => 1.0,
        };
        let _ = typical;
        values.iter_mut().for_each(|v| *v = per * 1e9 / *v);
        "elem/s (cpu)"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

/// 10 racks × 10 hosts × 10 devices; a crush pool of 32,768 PGs and an object-level ring pool
/// (160 vnodes per device), both 3 replicas across hosts and 2 choices by space.
fn map() -> ClusterMap {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..1000u32 {
        let (rack, host) = (format!("rack{}", id / 100), format!("host{}", id / 10));
        builder = builder.device(
            DeviceSpec::new(id).capacity(160 << 33).at(&[("rack", &rack), ("host", &host)]),
        );
    }
    let choice = ChoiceSettings::new(2, PolicySpec::Space);
    let mut crush = PoolSpec::crush(1, "crush", 32768, 3);
    crush.choice = choice;
    let mut ring = PoolSpec::crush(2, "ring", 0, 3);
    ring.engine = EngineRef::Ring(RingSpec {
        vnode_bytes: Some(8 << 30),
        failure_domain: Some("host".into()),
    });
    ring.choice = choice;
    builder
        .replicated_rule(0, "replicated_rule", "default", "host")
        .pool(crush)
        .pool(ring)
        .build()
        .expect("valid map")
}

fn choice(c: &mut Criterion<ThreadCpu>) {
    let map = map();
    let placement = Placement::new(&map).expect("compiles");
    let names: Vec<String> = (0..NAMES).map(|i| format!("rbd_data.10ab.{i:016x}")).collect();
    let mut metrics = MetricsTable::new(map.max_devices());
    for device in map.devices() {
        let d = device.id.0;
        let m = DeviceMetrics {
            space_ppm: (d * 7919) % 900_000,
            cpu_ppm: (d * 104_729) % 1_000_000,
            location: Location::of_device(&map, device.id),
            ..DeviceMetrics::default()
        };
        metrics.set(device.id, m).expect("in range");
    }
    for pool_name in ["crush", "ring"] {
        let pool = placement.pool_by_name(pool_name).expect("pool");
        let mut group = c.benchmark_group(format!("choice_{pool_name}_1000_devices"));
        group.throughput(Throughput::Elements(1));
        let mut scratch = placement.scratch();
        let mut set = ReplicaSet::new();
        let mut i = 0usize;
        group.bench_function("lookup", |b| {
            b.iter(|| {
                i = (i + 1) % NAMES;
                let (_, key) = pool.object_key(black_box(&names[i]));
                pool.place(key, &mut scratch, &mut set);
                black_box(set.len())
            })
        });
        group.bench_function("object_key", |b| {
            b.iter(|| {
                i = (i + 1) % NAMES;
                black_box(pool.object_key(black_box(&names[i])))
            })
        });
        let mut keys = CandidateKeys::new();
        group.bench_function("keys_k2", |b| {
            b.iter(|| {
                i = (i + 1) % NAMES;
                pool.candidate_keys(black_box(&names[i]), &mut keys);
                black_box(keys.len())
            })
        });
        let prepared: Vec<Candidates> = names
            .iter()
            .take(256)
            .map(|name| {
                let mut candidates = Candidates::new();
                pool.candidates(name, &mut scratch, &mut candidates);
                candidates
            })
            .collect();
        let request = ChoiceRequest::default();
        group.bench_function("decide_k2", |b| {
            b.iter(|| {
                i = (i + 1) % prepared.len();
                black_box(pool.choose(black_box(&prepared[i]), &metrics, &request).is_ok())
            })
        });
        group.bench_function("cached_k2", |b| {
            b.iter(|| {
                i = (i + 1) % NAMES;
                let key = pool.candidate_key(black_box(&names[i]), 1).expect("two candidates");
                pool.place(key.key, &mut scratch, &mut set);
                black_box(set.len())
            })
        });
        let mut candidates = Candidates::new();
        group.bench_function("first_write_k2", |b| {
            b.iter(|| {
                i = (i + 1) % NAMES;
                pool.candidates(black_box(&names[i]), &mut scratch, &mut candidates);
                black_box(pool.choose(&candidates, &metrics, &request).is_ok())
            })
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = choice
}
criterion_main!(benches);
