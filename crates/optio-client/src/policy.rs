//! Policies: the placement library's (`first`, `random`, `local`, `memory`, `cpu`, `space`,
//! `latency`, `journal`, `composite`, or a user's [`Policy`]), fed with the metrics the
//! servers piggyback on their answers.

use optio_placement::choice::{DeviceMetrics as PlacementMetrics, Location, MetricsTable};
use optio_placement::{ClusterMap, DeviceId};
use optio_proto::DeviceMetrics;

pub use optio_placement::PolicySpec;
pub use optio_placement::choice::{POLICY_NAMES, Policy};

/// What the client knows of one device for a decision.
#[derive(Clone, Debug)]
pub struct Known {
    /// The metrics last heard (None: never heard).
    pub metrics: Option<DeviceMetrics>,
    /// Whether the device answered (false: its probe failed).
    pub reachable: bool,
}

/// The library's metrics table for a decision about an object of `size_bytes`: per mille →
/// ppm, unflushed bytes as the journal, the location from the map; a device that did not
/// answer is down; one without room for the object is full.
pub fn table(
    map: &ClusterMap,
    devices: impl IntoIterator<Item = (DeviceId, Known)>,
    size_bytes: u64,
) -> MetricsTable {
    let mut table = MetricsTable::new(map.max_devices());
    for (device, known) in devices {
        let Some(m) = known.metrics else {
            if !known.reachable {
                let _ = table
                    .set(device, PlacementMetrics { up: false, ..PlacementMetrics::default() });
            }
            continue;
        };
        let metrics = PlacementMetrics {
            up: known.reachable,
            full: m.is_full_for(size_bytes),
            cpu_ppm: u32::from(m.cpu_permille) * 1000,
            memory_ppm: u32::from(m.memory_permille) * 1000,
            space_ppm: u32::from(m.space_permille) * 1000,
            latency_us: u32::try_from(m.latency_us).unwrap_or(u32::MAX),
            journal_bytes: m.unflushed_bytes,
            location: Location::of_device(map, device),
        };
        let _ = table.set(device, metrics);
    }
    table
}
