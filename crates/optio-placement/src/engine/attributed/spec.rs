//! An `attributed` pool's spec, checked and resolved: its parameters with their defaults,
//! and the sector base (formed now when the spec gives none).

use super::{
    ATTRIBUTED_VNODES_MAX, AttributedParams, SectorSelection, TOLERANCE_PERCENT_MAX, vnode_count,
};
use crate::error::{MapError, MapErrorKind as Kind, Subject};
use crate::ids::{DeviceId, TypeId};
use crate::map::PartialMap;

/// An attributed pool's engine parameters as given (defaults unresolved).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttributedSpec {
    /// c_throttle: bytes per virtual node (default 1 GiB).
    pub throttle_bytes: Option<u64>,
    /// s: virtual nodes per sector (default 4).
    pub sector_size: Option<u32>,
    /// The type whose buckets are zones (default `zone` when the map has that type, else
    /// the device level: every device its own zone).
    pub zone_type: Option<String>,
    /// Replicas in distinct zones (default: distinct devices only).
    pub distinct_zones: bool,
    /// Bandwidths within this many percent are equal (default 10).
    pub bandwidth_tolerance_percent: Option<u32>,
    /// Devices (by id) and virtual-node counts that formed the sectors; default: every
    /// device of the map with capacity, with ⌈capacity / c_throttle⌉ (the sectors are
    /// formed now). Keep it when editing a map, or every sector re-forms.
    pub sector_base: Option<Vec<(DeviceId, u32)>>,
    /// How a device is picked within a sector (default: the paper's strategies).
    pub selection: Option<SectorSelection>,
}

/// Resolves an attributed pool's parameters and its sector base (formed now when not given).
pub(crate) fn resolve(
    map: &PartialMap<'_>,
    subject: &Subject,
    spec: &AttributedSpec,
) -> Result<(AttributedParams, Vec<(DeviceId, u32)>), MapError> {
    let AttributedSpec {
        throttle_bytes,
        sector_size,
        zone_type,
        distinct_zones,
        bandwidth_tolerance_percent,
        sector_base,
        selection,
    } = spec;
    let range = |field: &'static str, value: String, reason: &str| {
        MapError::new(
            subject.clone(),
            Kind::OutOfRange { field, value, reason: reason.to_string() },
        )
    };
    let defaults = AttributedParams::default();
    let throttle_bytes = throttle_bytes.unwrap_or(defaults.throttle_bytes);
    if throttle_bytes == 0 {
        return Err(range(
            "throttle (c_throttle)",
            "0".into(),
            "a virtual node must stand for at least one byte; use e.g. throttle = \"1GiB\" (the default)",
        ));
    }
    let sector_size = sector_size.unwrap_or(defaults.sector_size);
    if sector_size == 0 {
        return Err(range(
            "sector_size (s)",
            "0".into(),
            "a sector holds at least one virtual node; use sector_size = 4 (the default) or more",
        ));
    }
    if sector_size > crate::engine::attributed::SECTOR_SIZE_MAX {
        return Err(range(
            "sector_size (s)",
            sector_size.to_string(),
            &format!(
                "at most {}; the paper uses 4 to 10",
                crate::engine::attributed::SECTOR_SIZE_MAX
            ),
        ));
    }
    let tolerance = bandwidth_tolerance_percent.unwrap_or(defaults.bandwidth_tolerance_percent);
    if tolerance > TOLERANCE_PERCENT_MAX {
        return Err(range(
            "bandwidth_tolerance",
            tolerance.to_string(),
            &format!("at most {TOLERANCE_PERCENT_MAX} (percent)"),
        ));
    }
    let zone_type = match zone_type {
        Some(name) => map.type_id(subject, name)?,
        None => map.type_by_name("zone").unwrap_or(TypeId(0)),
    };
    let base = match sector_base {
        Some(base) => checked_sector_base(map, subject, base)?,
        None => map
            .devices()
            .iter()
            .filter(|d| d.capacity_bytes > 0)
            .map(|d| (d.id, vnode_count(d.capacity_bytes, throttle_bytes)))
            .collect(),
    };
    check_slot_count(map, subject, &base, throttle_bytes)?;
    let params = AttributedParams {
        throttle_bytes,
        sector_size,
        zone_type,
        distinct_zones: *distinct_zones,
        bandwidth_tolerance_percent: tolerance,
        selection: selection.unwrap_or_default(),
    };
    Ok((params, base))
}

/// A sector base as given, sorted by device, checked: each device once, 1 to 65,536 virtual
/// nodes each, and not empty while devices have capacity.
fn checked_sector_base(
    map: &PartialMap<'_>,
    subject: &Subject,
    base: &[(DeviceId, u32)],
) -> Result<Vec<(DeviceId, u32)>, MapError> {
    let range = |value: String, reason: &str| {
        MapError::new(
            subject.clone(),
            Kind::OutOfRange { field: "sector_base", value, reason: reason.to_string() },
        )
    };
    let mut base = base.to_vec();
    base.sort_unstable();
    for pair in base.windows(2) {
        if pair[0].0 == pair[1].0 {
            return Err(range(
                format!("device {}", pair[0].0),
                "lists a device twice; keep one entry per device",
            ));
        }
    }
    if let Some((device, count)) = base
        .iter()
        .find(|(_, c)| *c == 0 || u64::from(*c) > crate::engine::ring::RING_VNODES_PER_DEVICE_MAX)
    {
        return Err(range(
            format!("device {device}: {count} virtual nodes"),
            "each entry has 1 to 65536 virtual nodes",
        ));
    }
    let has_capacity = map.devices().iter().any(|d| d.capacity_bytes > 0);
    if base.is_empty() && has_capacity {
        return Err(range(
            "[]".into(),
            "is empty, so the ring would have no sector boundaries; remove the key to form the sectors from the current devices",
        ));
    }
    Ok(base)
}

/// Refuses a ring of more than [`ATTRIBUTED_VNODES_MAX`] slots: the union of the base's and the
/// current devices' virtual nodes.
fn check_slot_count(
    map: &PartialMap<'_>,
    subject: &Subject,
    base: &[(DeviceId, u32)],
    throttle_bytes: u64,
) -> Result<(), MapError> {
    let mut slots: u64 = 0;
    for device in map.devices() {
        let current = if device.capacity_bytes > 0 {
            vnode_count(device.capacity_bytes, throttle_bytes)
        } else {
            0
        };
        let based = base.binary_search_by_key(&device.id, |(d, _)| *d).map_or(0, |i| base[i].1);
        slots += u64::from(current.max(based));
    }
    for (device, count) in base {
        if !map.has_device(*device) {
            slots += u64::from(*count);
        }
    }
    if slots > ATTRIBUTED_VNODES_MAX {
        let capacity: u128 = map.devices().iter().map(|d| u128::from(d.capacity_bytes)).sum();
        let suggested = capacity.div_ceil(u128::from(ATTRIBUTED_VNODES_MAX / 2)).max(1);
        return Err(MapError::new(
            subject.clone(),
            Kind::OutOfRange {
                field: "throttle (c_throttle)",
                value: throttle_bytes.to_string(),
                reason: format!(
                    "the ring would have {slots} virtual nodes, more than {ATTRIBUTED_VNODES_MAX}; raise the throttle to {suggested} bytes or more"
                ),
            },
        ));
    }
    Ok(())
}
