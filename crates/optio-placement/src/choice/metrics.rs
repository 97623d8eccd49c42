//! Device metrics as a server reports them (piggybacked on probes, as CHOICE does), and their
//! aggregation over a candidate's devices as the paper does it.
//!
//! Everything a decision reads is an integer — utilisations in parts per million, latency in
//! microseconds, journal in bytes — so that two clients with the same snapshot decide the
//! same, on any machine.

use crate::choice::location::Location;
use crate::choice::settings::PPM;
use crate::ids::DeviceId;
use crate::replica::ReplicaSet;

/// What one device reports about itself.
///
/// `repr(C)` keeps the fields a decision reads for every device (up to `journal_bytes`) in
/// the first 32 bytes, one cache line, ahead of the location that only `local` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[repr(C)]
pub struct DeviceMetrics {
    /// Whether the device is serving. A client that cannot reach a device records it as
    /// down (or leaves it out of the snapshot, see [`MetricsSource`]).
    pub up: bool,
    /// Whether the device refuses new data (its server answered 507, or its operator marked
    /// it full), whatever `space_ppm` says.
    pub full: bool,
    /// Cpu utilisation, 0 to 1,000,000 (higher values are read as 100 %).
    pub cpu_ppm: u32,
    /// Memory utilisation, 0 to 1,000,000.
    pub memory_ppm: u32,
    /// Disk-space utilisation against the device's capacity, 0 to 1,000,000.
    pub space_ppm: u32,
    /// Recent service latency (an EWMA), microseconds.
    pub latency_us: u32,
    /// Bytes written but not yet flushed (journal or write-back cache).
    pub journal_bytes: u64,
    /// Where the device is (its server's location path).
    pub location: Location,
}

impl Default for DeviceMetrics {
    /// An idle, empty, up device with no known location.
    fn default() -> DeviceMetrics {
        DeviceMetrics {
            up: true,
            full: false,
            cpu_ppm: 0,
            memory_ppm: 0,
            space_ppm: 0,
            latency_us: 0,
            journal_bytes: 0,
            location: Location::UNKNOWN,
        }
    }
}

/// A fraction (0.0 to 1.0) as parts per million, rounded, clamped to 0..=1,000,000; NaN is 0.
/// For servers that measure in floating point.
#[allow(
    clippy::cast_possible_truncation,
    reason = "the value converted is rounded and within 0..=1,000,000: the conversion is exact"
)]
pub fn fraction_to_ppm(fraction: f64) -> u32 {
    if fraction.is_nan() || fraction <= 0.0 {
        return 0;
    }
    (fraction * f64::from(PPM)).round().min(f64::from(PPM)) as u32
}

/// `used / capacity` in parts per million (a zero capacity is full), clamped to 1,000,000.
pub fn used_to_ppm(used: u64, capacity: u64) -> u32 {
    if capacity == 0 {
        return PPM;
    }
    let ppm = u128::from(used) * u128::from(PPM) / u128::from(capacity);
    u32::try_from(ppm).unwrap_or(PPM).min(PPM)
}

/// A snapshot of device metrics. A device with no entry is unknown: the candidates' primaries
/// must have one (they are the devices a client probes); other devices without one are left
/// out of the aggregates.
pub trait MetricsSource {
    /// The metrics of `device`, if known.
    fn metrics(&self, device: DeviceId) -> Option<&DeviceMetrics>;
}

impl MetricsSource for [(DeviceId, DeviceMetrics)] {
    fn metrics(&self, device: DeviceId) -> Option<&DeviceMetrics> {
        self.iter().find(|(id, _)| *id == device).map(|(_, m)| m)
    }
}

impl MetricsSource for Vec<(DeviceId, DeviceMetrics)> {
    fn metrics(&self, device: DeviceId) -> Option<&DeviceMetrics> {
        self.as_slice().metrics(device)
    }
}

impl<T: MetricsSource + ?Sized> MetricsSource for &T {
    fn metrics(&self, device: DeviceId) -> Option<&DeviceMetrics> {
        (**self).metrics(device)
    }
}

/// Metrics of many devices, indexed by device id (for whole-cluster snapshots and simulations).
#[derive(Clone, Debug, Default)]
pub struct MetricsTable {
    slots: Vec<Option<DeviceMetrics>>,
}

impl MetricsTable {
    /// An empty table for device ids below `max_devices`
    /// ([`ClusterMap::max_devices`](crate::ClusterMap::max_devices)).
    pub fn new(max_devices: u32) -> MetricsTable {
        MetricsTable { slots: vec![None; max_devices as usize] }
    }

    /// Sets a device's metrics; refuses (returning the id) a device id not below the table's
    /// `max_devices`.
    pub fn set(&mut self, device: DeviceId, metrics: DeviceMetrics) -> Result<(), DeviceId> {
        let slot = self.slots.get_mut(device.0 as usize).ok_or(device)?;
        *slot = Some(metrics);
        Ok(())
    }

    /// A device's metrics, to update in place.
    pub fn get_mut(&mut self, device: DeviceId) -> Option<&mut DeviceMetrics> {
        self.slots.get_mut(device.0 as usize)?.as_mut()
    }

    /// Forgets a device's metrics.
    pub fn remove(&mut self, device: DeviceId) {
        if let Some(slot) = self.slots.get_mut(device.0 as usize) {
            *slot = None;
        }
    }

    /// Every device with metrics, by increasing id.
    pub fn iter(&self) -> impl Iterator<Item = (DeviceId, &DeviceMetrics)> {
        self.slots.iter().enumerate().filter_map(|(id, slot)| {
            let id = u32::try_from(id).expect("slots are indexed by a u32 device id");
            slot.as_ref().map(|m| (DeviceId(id), m))
        })
    }
}

impl MetricsSource for MetricsTable {
    #[inline]
    fn metrics(&self, device: DeviceId) -> Option<&DeviceMetrics> {
        self.slots.get(device.0 as usize)?.as_ref()
    }
}

/// A candidate's metrics, aggregated over its devices as CHOICE does: the mean for cpu,
/// latency and journal (work every replica does), the primary's for memory and location
/// (reads go to the primary), the maximum for space (the fullest replica fills first).
/// Means are over the devices that reported, rounded down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CandidateMetrics {
    /// Mean cpu utilisation, ppm.
    pub cpu_ppm: u32,
    /// The primary's memory utilisation, ppm.
    pub memory_ppm: u32,
    /// The highest space utilisation, ppm.
    pub space_ppm: u32,
    /// Mean latency, µs.
    pub latency_us: u32,
    /// Mean unflushed bytes.
    pub journal_bytes: u64,
    /// Location levels the primary shares with the client (0 without a client location).
    pub shared_levels: u8,
    /// Devices in the candidate's set.
    pub devices: u8,
    /// Devices that reported metrics (the primary always has).
    pub reporting: u8,
}

impl CandidateMetrics {
    /// Aggregates the metrics of `devices` (the primary's must be `primary`); devices without
    /// metrics in `source` are left out. `client` is the requester's location, if known.
    pub fn aggregate(
        devices: &ReplicaSet,
        primary: &DeviceMetrics,
        source: &(impl MetricsSource + ?Sized),
        client: Option<&Location>,
    ) -> CandidateMetrics {
        let mut sums = Sums::default();
        for device in devices.devices() {
            sums.devices += 1;
            if let Some(m) = source.metrics(device) {
                sums.add(m);
            }
        }
        sums.finish(primary, client)
    }
}

/// Running sums of a candidate's device metrics (one pass, shared with the decision).
#[derive(Clone, Copy, Default)]
pub(crate) struct Sums {
    /// At most REPLICAS_MAX × 1,000,000: fits.
    cpu: u32,
    latency: u64,
    journal: u128,
    space: u32,
    pub(crate) devices: u32,
    reporting: u32,
}

impl Sums {
    /// Adds a device that reported.
    #[inline]
    pub(crate) fn add(&mut self, m: &DeviceMetrics) {
        self.reporting += 1;
        self.cpu += m.cpu_ppm.min(PPM);
        self.latency += u64::from(m.latency_us);
        self.journal += u128::from(m.journal_bytes);
        self.space = self.space.max(m.space_ppm);
    }

    /// The aggregate: means rounded down, the primary's memory and location, the highest space.
    #[inline]
    pub(crate) fn finish(
        &self,
        primary: &DeviceMetrics,
        client: Option<&Location>,
    ) -> CandidateMetrics {
        let n = self.reporting.max(1);
        // A 128-bit division is a slow library call; the journal sum fits 64 bits unless
        // devices report exabytes.
        let journal_bytes = match u64::try_from(self.journal) {
            Ok(sum) => sum / u64::from(n),
            Err(_) => u64::try_from(self.journal / u128::from(n))
                .expect("the mean of n u64 values fits u64"),
        };
        CandidateMetrics {
            cpu_ppm: self.cpu / n,
            memory_ppm: primary.memory_ppm.min(PPM),
            space_ppm: self.space,
            latency_us: u32::try_from(self.latency / u64::from(n))
                .expect("the mean of n u32 values fits u32"),
            journal_bytes,
            shared_levels: client.map_or(0, |c| c.shared_levels(&primary.location)),
            devices: u8::try_from(self.devices).unwrap_or(u8::MAX),
            reporting: u8::try_from(self.reporting).unwrap_or(u8::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregates_as_the_paper() {
        let mut set = ReplicaSet::new();
        for d in [1, 2, 3] {
            set.push(d);
        }
        let at = |host: &str| Location::from_levels([("host", host)]);
        let metrics = vec![
            (
                DeviceId(1),
                DeviceMetrics {
                    cpu_ppm: 100,
                    memory_ppm: 700,
                    space_ppm: 10,
                    latency_us: 10,
                    journal_bytes: 3,
                    location: at("a"),
                    ..DeviceMetrics::default()
                },
            ),
            (
                DeviceId(2),
                DeviceMetrics {
                    cpu_ppm: 200,
                    memory_ppm: 100,
                    space_ppm: 900,
                    latency_us: 20,
                    journal_bytes: 4,
                    location: at("b"),
                    ..DeviceMetrics::default()
                },
            ),
            // Device 3 did not report: left out of the means.
        ];
        let client = at("a");
        let aggregate = CandidateMetrics::aggregate(&set, &metrics[0].1, &metrics, Some(&client));
        assert_eq!(aggregate.cpu_ppm, 150);
        assert_eq!(aggregate.memory_ppm, 700, "the primary's");
        assert_eq!(aggregate.space_ppm, 900, "the highest");
        assert_eq!(aggregate.latency_us, 15);
        assert_eq!(aggregate.journal_bytes, 3, "3.5 rounded down");
        assert_eq!(aggregate.shared_levels, 1);
        assert_eq!((aggregate.devices, aggregate.reporting), (3, 2));
    }

    #[test]
    fn conversions_clamp() {
        assert_eq!(fraction_to_ppm(0.5), 500_000);
        assert_eq!(fraction_to_ppm(2.0), PPM);
        assert_eq!(fraction_to_ppm(-1.0), 0);
        assert_eq!(fraction_to_ppm(f64::NAN), 0);
        assert_eq!(used_to_ppm(1, 3), 333_333);
        assert_eq!(used_to_ppm(5, 0), PPM);
        assert_eq!(used_to_ppm(u64::MAX, 1), PPM);
    }

    #[cfg(feature = "serde")]
    #[test]
    fn metrics_and_policies_round_trip_through_json() {
        use crate::choice::PolicySpec;
        let metrics = DeviceMetrics {
            space_ppm: 420_000,
            journal_bytes: 1 << 40,
            location: "zone=z1/host=h2".parse().expect("valid"),
            ..DeviceMetrics::default()
        };
        let text = serde_json::to_string(&metrics).expect("serializes");
        assert!(text.contains("\"space_ppm\":420000"), "{text}");
        assert_eq!(serde_json::from_str::<DeviceMetrics>(&text).expect("parses"), metrics);
        let policy: PolicySpec = "composite:space=2,local=1".parse().expect("valid");
        let text = serde_json::to_string(&policy).expect("serializes");
        assert_eq!(text, "\"composite:space=2,local=1\"");
        assert_eq!(serde_json::from_str::<PolicySpec>(&text).expect("parses"), policy);
        assert!(serde_json::from_str::<PolicySpec>("\"fastest\"").is_err());
        assert!(
            serde_json::from_str::<crate::choice::Location>(&format!("{:?}", [1u64; 13])).is_err()
        );
    }

    #[test]
    fn table_refuses_ids_beyond_its_size() {
        let mut table = MetricsTable::new(4);
        assert!(table.set(DeviceId(3), DeviceMetrics::default()).is_ok());
        assert!(table.set(DeviceId(4), DeviceMetrics::default()).is_err());
        assert!(table.metrics(DeviceId(3)).is_some());
        assert!(table.metrics(DeviceId(99)).is_none());
        table.remove(DeviceId(3));
        assert_eq!(table.iter().count(), 0);
    }
}
