//! Changes to a live map, as `optio map add-device | remove-device | reweight | set-state |
//! set-attr | activate | deactivate` and `optio resize` make them: a change is applied to the
//! map of an expected epoch and gives the next map (epoch + 1), validated by the builder, or
//! an error that says what is wrong; [`ChangeReport`] says what it moves per pool against the
//! minimum, or what membership it changes. Pure: storing the result (with a compare-and-swap
//! on the epoch) is the map store's job.

pub mod copies;
pub mod linear;
mod report;
mod states;
mod tune;

pub use copies::{COPIES_SAMPLE_MAX, ShortOfCopies};
pub use report::{ChangeEffect, ChangeReport, MembershipChange, MovementSample, PoolMovement};

use crate::builder::{ActiveSpec, ClusterMapBuilder, DeviceSpec, ItemRef, VersionSpec};
use crate::error::{MapError, MapErrorKind, Subject};
use crate::ids::{DeviceId, Epoch, ItemId, Weight};
use crate::map::ClusterMap;
use crate::narrow::index32;

/// One change to a map.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapChange {
    /// Add a device (its `location` creates missing buckets under the root `default`; an
    /// elastic map ranks it last).
    AddDevice(DeviceSpec),
    /// Remove a device from the map and the hierarchy (and from the elastic ranks).
    RemoveDevice(DeviceId),
    /// Set a device's CRUSH weight (in its bucket too).
    SetWeight {
        /// The device.
        device: DeviceId,
        /// The weight.
        weight: Weight,
    },
    /// Set a device's reweight (0 to 1: the share of its weight CRUSH honours).
    SetReweight {
        /// The device.
        device: DeviceId,
        /// The reweight.
        reweight: Weight,
    },
    /// Mark a device up/down and in/out.
    SetState {
        /// The device.
        device: DeviceId,
        /// Up (`None`: unchanged).
        up: Option<bool>,
        /// In (`None`: unchanged).
        is_in: Option<bool>,
    },
    /// Change a device's attributes.
    SetAttr {
        /// The device.
        device: DeviceId,
        /// Capacity in bytes.
        capacity_bytes: Option<u64>,
        /// Bandwidth, MB/s.
        bandwidth_mb_per_s: Option<u32>,
        /// Device class (`Some(None)` removes it).
        class: Option<Option<String>>,
        /// Server address.
        addr: Option<String>,
    },
    /// A new membership version with these servers active (elastic pools): the first `n`
    /// ranks, or exactly the given devices.
    SetActive(ActiveSpec),
    /// A new membership version: the current one with these devices made active.
    Activate(Vec<DeviceId>),
    /// A new membership version: the current one with these devices made inactive.
    Deactivate(Vec<DeviceId>),
    /// Keep only the current membership version (once re-integration has moved everything
    /// written in older versions; renumbers nothing).
    PruneVersions,
}

impl ClusterMap {
    /// Applies `change` to this map, which must be at epoch `expected`; returns the next map
    /// (epoch + 1), its devices' [`up_from`](crate::Device::up_from) and
    /// [`down_at`](crate::Device::down_at) recorded ([`ClusterMap::with_state_epochs`]).
    ///
    /// Incremental balanced pools (`balanced = "incremental"`) carry their state forward:
    /// the builder is given each pool's previous [`crate::engine::balanced::incremental::BalanceState`]
    /// and computes the next one with
    /// [`rebalance`](crate::engine::balanced::incremental::rebalance)`(next map, pool, Some(previous))`,
    /// so that a single-device change moves close to the least any placement must move (a
    /// change that leaves the pool's devices, domains and weights alone keeps the state).
    pub fn apply(&self, change: &MapChange, expected: Epoch) -> Result<ClusterMap, MapError> {
        if self.epoch() != expected {
            return Err(MapError::new(
                Subject::Map,
                MapErrorKind::EpochMismatch { expected: expected.0, actual: self.epoch().0 },
            ));
        }
        let mut builder = self.to_builder();
        builder.epoch = Epoch(self.epoch().0 + 1);
        for pool in &builder.pools {
            // `to_builder` hands every incremental pool's state to the builder, which
            // rebalances from it; without it the pool would be balanced from scratch.
            debug_assert_eq!(
                pool.balance.state.is_some(),
                self.pool(pool.id).is_some_and(|p| p.balance_state().is_some()),
                "the previous balance state is carried to the next map"
            );
        }
        match change {
            MapChange::AddDevice(spec) => add_device(self, &mut builder, spec)?,
            MapChange::RemoveDevice(device) => remove_device(self, &mut builder, *device)?,
            MapChange::SetWeight { device, weight } => {
                set_weight(self, &mut builder, *device, *weight)?
            }
            MapChange::SetReweight { device, reweight } => {
                device_spec(self, &mut builder, *device)?.reweight = *reweight;
            }
            MapChange::SetState { device, up, is_in } => {
                let spec = device_spec(self, &mut builder, *device)?;
                if let Some(up) = up {
                    spec.up = *up;
                }
                if let Some(is_in) = is_in {
                    spec.is_in = *is_in;
                }
            }
            MapChange::SetAttr { device, capacity_bytes, bandwidth_mb_per_s, class, addr } => {
                let spec = device_spec(self, &mut builder, *device)?;
                if let Some(capacity) = capacity_bytes {
                    spec.capacity_bytes = Some(*capacity);
                }
                if let Some(bandwidth) = bandwidth_mb_per_s {
                    spec.bandwidth_mb_per_s = *bandwidth;
                }
                if let Some(class) = class {
                    spec.class = class.clone();
                }
                if let Some(addr) = addr {
                    spec.addr = Some(addr.clone());
                }
            }
            MapChange::SetActive(active) => push_version(self, &mut builder, active.clone())?,
            MapChange::Activate(devices) => set_active(self, &mut builder, devices, true)?,
            MapChange::Deactivate(devices) => set_active(self, &mut builder, devices, false)?,
            MapChange::PruneVersions => {
                let spec = builder.membership.as_mut().ok_or_else(|| no_membership(self))?;
                let last = spec.versions.pop();
                spec.versions = last.into_iter().collect();
            }
        }
        // The epochs that marked devices down and up go with the map (see `states`).
        builder.build().map(|next| next.with_state_epochs(Some(self)))
    }
}

/// A new membership version: the current one with `devices` made active (or inactive).
fn set_active(
    map: &ClusterMap,
    builder: &mut ClusterMapBuilder,
    devices: &[DeviceId],
    activate: bool,
) -> Result<(), MapError> {
    let membership = membership(map)?;
    let current = membership.current();
    let mut active = membership.active_devices(current);
    for device in devices {
        if !membership.order.contains(device) {
            return Err(unknown_server(map, *device));
        }
        if activate && !active.contains(device) {
            active.push(*device);
        }
        if !activate {
            active.retain(|d| d != device);
        }
    }
    let spec = if active.len() == membership.order.len() {
        ActiveSpec::All
    } else {
        ActiveSpec::Devices(active.iter().map(|d| ItemRef::Id(ItemId::from(*d))).collect())
    };
    push_version(map, builder, spec)
}

/// A device's CRUSH weight, in its bucket too.
fn set_weight(
    map: &ClusterMap,
    builder: &mut ClusterMapBuilder,
    device: DeviceId,
    weight: Weight,
) -> Result<(), MapError> {
    let item = ItemId::from(device);
    device_spec(map, builder, device)?.weight = Some(weight);
    for bucket in &mut builder.buckets {
        for (child, child_weight) in &mut bucket.items {
            if *child == ItemRef::Id(item) {
                *child_weight = Some(weight);
            }
        }
    }
    Ok(())
}

fn device_spec<'a>(
    map: &ClusterMap,
    builder: &'a mut ClusterMapBuilder,
    device: DeviceId,
) -> Result<&'a mut DeviceSpec, MapError> {
    builder.devices.iter_mut().find(|d| d.id == device).ok_or_else(|| unknown_device(map, device))
}

fn unknown_device(map: &ClusterMap, device: DeviceId) -> MapError {
    let known: Vec<String> = map.devices().iter().take(12).map(|d| d.id.0.to_string()).collect();
    MapError::new(
        Subject::Device(format!("{}", device.0)),
        MapErrorKind::OutOfRange {
            field: "device",
            value: device.0.to_string(),
            reason: format!(
                "no such device in the map (it has {}{}); see `optio map show`",
                known.join(", "),
                if map.devices().len() > 12 { ", …" } else { "" }
            ),
        },
    )
}

fn unknown_server(map: &ClusterMap, device: DeviceId) -> MapError {
    MapError::new(
        Subject::Membership,
        MapErrorKind::OutOfRange {
            field: "device",
            value: device.0.to_string(),
            reason: format!(
                "device {} is not a ranked server of the elastic membership; see `optio map show`",
                map.device(device).map_or_else(|| device.0.to_string(), |d| d.name.clone())
            ),
        },
    )
}

fn no_membership(_map: &ClusterMap) -> MapError {
    MapError::new(
        Subject::Membership,
        MapErrorKind::Unsupported {
            feature: "membership versions".into(),
            hint: "this map has no elastic pool, so it has no membership to resize; add a pool with engine = \"elastic\"",
        },
    )
}

fn membership(map: &ClusterMap) -> Result<&crate::map::Membership, MapError> {
    map.membership().ok_or_else(|| no_membership(map))
}

fn push_version(
    map: &ClusterMap,
    builder: &mut ClusterMapBuilder,
    active: ActiveSpec,
) -> Result<(), MapError> {
    let membership = membership(map)?;
    let n = index32(membership.order.len());
    if let ActiveSpec::FirstRanks(k) = active
        && (k == 0 || k > n)
    {
        return Err(MapError::new(
            Subject::Membership,
            MapErrorKind::OutOfRange {
                field: "active",
                value: k.to_string(),
                reason: format!("the map ranks {n} servers: choose 1 to {n}"),
            },
        ));
    }
    let next = membership.current().version + 1;
    let spec = builder.membership.as_mut().ok_or_else(|| no_membership(map))?;
    let active = match active {
        ActiveSpec::FirstRanks(k) if k == n => ActiveSpec::All,
        other => other,
    };
    spec.versions.push(VersionSpec { version: Some(next), active });
    Ok(())
}

fn add_device(
    map: &ClusterMap,
    builder: &mut ClusterMapBuilder,
    spec: &DeviceSpec,
) -> Result<(), MapError> {
    if map.device(spec.id).is_some() {
        return Err(MapError::new(
            Subject::Device(spec.name.clone()),
            MapErrorKind::DuplicateId {
                id: i64::from(spec.id.0),
                other: format!("device {}", spec.id.0),
            },
        ));
    }
    builder.devices.push(spec.clone());
    if let Some(membership) = builder.membership.as_mut() {
        // Ranked last: the newest server is the last to hold data (equal-work).
        membership.order.push(ItemRef::Id(ItemId::from(spec.id)));
        // A version that names devices leaves the new one inactive; "all" and "first n"
        // keep their meaning.
    }
    Ok(())
}

fn remove_device(
    map: &ClusterMap,
    builder: &mut ClusterMapBuilder,
    device: DeviceId,
) -> Result<(), MapError> {
    if map.device(device).is_none() {
        return Err(unknown_device(map, device));
    }
    let item = ItemRef::Id(ItemId::from(device));
    builder.devices.retain(|d| d.id != device);
    for bucket in &mut builder.buckets {
        bucket.items.retain(|(child, _)| *child != item);
    }
    if let Some(membership) = builder.membership.as_mut() {
        membership.order.retain(|d| *d != item);
        let n = index32(membership.order.len());
        for version in &mut membership.versions {
            match &mut version.active {
                ActiveSpec::Devices(devices) => devices.retain(|d| *d != item),
                ActiveSpec::FirstRanks(k) => *k = (*k).min(n),
                ActiveSpec::All => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{EngineRef, PoolSpec};
    use crate::map::ActiveSet;

    /// Ten servers in two zones, a crush-less elastic pool (p = 2).
    fn map() -> ClusterMap {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..10u32 {
            let zone = if id < 5 { "z1" } else { "z2" };
            let host = format!("h{id}");
            builder = builder.device(
                DeviceSpec::new(id).capacity(1 << 40).at(&[("zone", zone), ("host", &host)]),
            );
        }
        builder
            .pool(PoolSpec { engine: EngineRef::elastic(), ..PoolSpec::crush(1, "e", 0, 2) })
            .build()
            .expect("a valid map")
    }

    #[test]
    fn a_change_needs_the_epoch_it_was_made_against() {
        let map = map();
        let change = MapChange::SetState { device: DeviceId(1), up: None, is_in: Some(false) };
        let next = map.apply(&change, map.epoch()).expect("applies");
        assert_eq!(next.epoch().0, map.epoch().0 + 1);
        assert!(!next.device(DeviceId(1)).unwrap().is_in);
        let error = next.apply(&change, map.epoch()).unwrap_err();
        assert!(error.to_string().contains("changed underneath you"), "{error}");
    }

    #[test]
    fn devices_come_and_go_with_their_ranks() {
        let map = map();
        let mut spec = DeviceSpec::new(10).capacity(1 << 40);
        spec.location = vec![("zone".into(), "z2".into()), ("host".into(), "h10".into())];
        let added = map.apply(&MapChange::AddDevice(spec.clone()), map.epoch()).expect("adds");
        assert_eq!(added.membership().unwrap().order.last(), Some(&DeviceId(10)), "ranked last");
        assert!(added.parent(crate::ids::ItemId(10)).is_some(), "in the hierarchy");
        let again = added.apply(&MapChange::AddDevice(spec), added.epoch()).unwrap_err();
        assert!(again.to_string().contains("used twice"), "{again}");
        let removed = added.apply(&MapChange::RemoveDevice(DeviceId(10)), added.epoch()).unwrap();
        assert!(removed.device(DeviceId(10)).is_none());
        assert_eq!(removed.membership().unwrap().order.len(), 10);
        let unknown = map.apply(&MapChange::RemoveDevice(DeviceId(77)), map.epoch()).unwrap_err();
        assert!(unknown.to_string().contains("no such device"), "{unknown}");
    }

    /// 40 devices in 4 hosts and an incremental balanced pool of 2,048 PGs × 3.
    fn incremental_map() -> ClusterMap {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..40u32 {
            let host = format!("host{}", id / 10);
            builder = builder.device(DeviceSpec::new(id).at(&[("host", &host)]));
        }
        let mut pool = PoolSpec::crush(1, "rbd", 2048, 3);
        pool.balance.balanced = crate::BalanceMethod::Incremental;
        builder
            .replicated_rule(0, "replicated_rule", "default", "host")
            .pool(pool)
            .build()
            .expect("a valid map")
    }

    /// Moved copies and the least any placement must move, from `before` to `after`.
    fn moved(before: &ClusterMap, after: &ClusterMap) -> (u64, f64) {
        let (a, b) = (
            crate::Placement::new(before).expect("compiles"),
            crate::Placement::new(after).expect("compiles"),
        );
        let pool = crate::PoolId(1);
        let m = crate::analysis::movement(
            before,
            &a,
            after,
            &b,
            a.pool(pool).expect("pool"),
            b.pool(pool).expect("pool"),
            0,
            1,
            &mut |_| {},
        );
        (m.moved, m.minimum_copies())
    }

    #[test]
    fn changes_to_an_incremental_pool_move_within_one_and_a_half_times_the_minimum() {
        let map = incremental_map();
        let state = map.pools()[0].balance_state().cloned().expect("computed");
        let changes = [
            MapChange::AddDevice(DeviceSpec::new(40).at(&[("host", "host1")])),
            MapChange::RemoveDevice(DeviceId(17)),
            MapChange::SetReweight { device: DeviceId(23), reweight: Weight(0x8000) },
            MapChange::SetState { device: DeviceId(5), up: None, is_in: Some(false) },
        ];
        for change in &changes {
            let next = map.apply(change, map.epoch()).expect("applies");
            let next_state = next.pools()[0].balance_state().expect("carried forward");
            assert_ne!(next_state, &state, "{change:?}: the state follows the map");
            let (moved, minimum) = moved(&map, &next);
            assert!(minimum > 40.0, "{change:?}: minimum {minimum}");
            assert!(
                moved as f64 <= 1.5 * minimum,
                "{change:?}: moved {moved}, minimum {minimum:.1}"
            );
        }
        // A change that leaves the pool's devices, domains and weights alone keeps the state.
        let change = MapChange::SetAttr {
            device: DeviceId(3),
            capacity_bytes: None,
            bandwidth_mb_per_s: None,
            class: None,
            addr: Some("127.0.0.1:7000".into()),
        };
        let next = map.apply(&change, map.epoch()).expect("applies");
        assert_eq!(next.pools()[0].balance_state(), Some(&state));
        assert_eq!(moved(&map, &next).0, 0);
    }

    #[test]
    fn membership_versions_grow_and_are_pruned() {
        let map = map();
        let small =
            map.apply(&MapChange::SetActive(ActiveSpec::FirstRanks(6)), map.epoch()).unwrap();
        let m = small.membership().unwrap();
        assert_eq!(m.versions.len(), 2);
        assert_eq!(m.active_count(m.current()), 6);
        let smaller =
            small.apply(&MapChange::Deactivate(vec![DeviceId(5)]), small.epoch()).unwrap();
        let m = smaller.membership().unwrap();
        assert_eq!(m.active_devices(m.current()).len(), 5);
        assert!(!m.active_devices(m.current()).contains(&DeviceId(5)));
        let back = smaller
            .apply(&MapChange::Activate((0..10).map(DeviceId).collect()), smaller.epoch())
            .unwrap();
        let m = back.membership().unwrap();
        assert!(m.is_full_power(m.current()));
        assert_eq!(m.current().active, ActiveSet::All);
        let pruned = back.apply(&MapChange::PruneVersions, back.epoch()).unwrap();
        let m = pruned.membership().unwrap();
        assert_eq!(m.versions.len(), 1);
        assert_eq!(m.current().version, 4, "the version in force keeps its number");
        // Below the primaries, above the servers: refused.
        let low = map.apply(&MapChange::SetActive(ActiveSpec::FirstRanks(1)), map.epoch());
        assert!(low.unwrap_err().to_string().contains("primaries"));
        let high = map.apply(&MapChange::SetActive(ActiveSpec::FirstRanks(11)), map.epoch());
        assert!(high.unwrap_err().to_string().contains("ranks 10 servers"));
    }
}
