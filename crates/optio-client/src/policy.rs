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
    /// Whether the device refused a write of this object for lack of room.
    pub refused_full: bool,
}

/// The library's metrics table for a decision about an object of `size_bytes`: per mille →
/// ppm, unflushed bytes as the journal, the location from the map; a device that did not
/// answer is down; one without room for the object, or that refused it for lack of room, is
/// full.
pub fn table(
    map: &ClusterMap,
    devices: impl IntoIterator<Item = (DeviceId, Known)>,
    size_bytes: u64,
) -> MetricsTable {
    let mut table = MetricsTable::new(map.max_devices());
    for (device, known) in devices {
        let Some(m) = known.metrics else {
            if !known.reachable || known.refused_full {
                let metrics = PlacementMetrics {
                    up: known.reachable,
                    full: known.refused_full,
                    ..PlacementMetrics::default()
                };
                let _ = table.set(device, metrics);
            }
            continue;
        };
        let metrics = PlacementMetrics {
            up: known.reachable,
            full: known.refused_full || m.is_full_for(size_bytes),
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

#[cfg(test)]
mod tests {
    use optio_placement::choice::MetricsSource;
    use optio_placement::{ClusterMapBuilder, DeviceSpec, PoolSpec};

    use super::*;

    fn map() -> ClusterMap {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..6u32 {
            let host = format!("h{id}");
            builder = builder.device(DeviceSpec::new(id).at(&[("zone", "z"), ("host", &host)]));
        }
        let mut pool = PoolSpec::crush(1, "data", 32, 3);
        pool.choice.choices = 2;
        builder.replicated_rule(0, "r", "default", "host").pool(pool).build().expect("valid map")
    }

    fn heard(device: u32, space_permille: u16, used_bytes: u64) -> Known {
        Known {
            metrics: Some(DeviceMetrics {
                device,
                cpu_permille: 100,
                memory_permille: 200,
                space_permille,
                used_bytes,
                capacity_bytes: 1000,
                latency_us: 42,
                unflushed_bytes: 7,
                location: String::new(),
            }),
            reachable: true,
            refused_full: false,
        }
    }

    #[test]
    fn the_table_converts_what_servers_report() {
        let map = map();
        let silent = Known { metrics: None, reachable: true, refused_full: false };
        let unreachable = Known { metrics: None, reachable: false, refused_full: false };
        let refused = Known { refused_full: true, ..heard(4, 10, 0) };
        let table = table(
            &map,
            [
                (DeviceId(0), heard(0, 300, 100)),
                (DeviceId(1), heard(1, 300, 950)),
                (DeviceId(2), silent),
                (DeviceId(3), unreachable),
                (DeviceId(4), refused),
            ],
            100,
        );
        let m = table.metrics(DeviceId(0)).expect("heard");
        assert!(m.up && !m.full);
        assert_eq!((m.cpu_ppm, m.memory_ppm, m.space_ppm), (100_000, 200_000, 300_000));
        assert_eq!((m.latency_us, m.journal_bytes), (42, 7));
        assert_eq!(m.location, Location::of_device(&map, DeviceId(0)));
        assert!(table.metrics(DeviceId(1)).expect("heard").full, "no room for 100 more bytes");
        assert!(table.metrics(DeviceId(2)).is_none(), "never heard: unknown, not down");
        assert!(!table.metrics(DeviceId(3)).expect("down").up);
        assert!(table.metrics(DeviceId(4)).expect("refused").full);
        assert!(table.metrics(DeviceId(5)).is_none());
    }
}
