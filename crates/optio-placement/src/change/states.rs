//! Which epochs marked each device down and up (Ceph's `osd_info`: `up_from`, `down_at`).
//!
//! A server may never look at some maps (a map file rewritten twice between two polls, an etcd
//! watch that reconnects): it goes from epoch `P` to epoch `N > P + 1`. Writes went around
//! any of its devices that a map in between marked down, so such a device must catch up
//! before it serves reads again — and only such a device. Each map therefore records, per
//! device, the epoch of the map that last marked it up ([`Device::up_from`]) and down
//! ([`Device::down_at`]); [`Device::may_have_been_down_since`]`(P)` answers from the newest
//! map alone.
//!
//! The records are kept by the one who makes the next map: [`ClusterMap::apply`] stamps its
//! result, and the map stores stamp every map they store against the one it replaces, so
//! that a map made any other way (a builder, a file written by hand) is recorded too.
//!
//! **Invariant.** In a stamped map every device that is up has `up_from`, and every device
//! that is down has `down_at`; both are at most the map's epoch. A device up in the maps of
//! epochs `P` and `N` was marked down in between if and only if `up_from > P` (it had to be
//! marked up again) — or `down_at > P`, which a hand-written map could say without the
//! other.
//!
//! **Older maps.** A map that does not record a device's state epochs tells nothing about
//! it: the device may have been marked down in any map (`may_have_been_down_since` is
//! `true`). Stamping such a map against its predecessor records the state it finds as
//! changed by the new map — the conservative answer, after which the records are exact.

use crate::ids::Epoch;
use crate::map::{ClusterMap, Device};

impl ClusterMap {
    /// This map with every device's [`up_from`](Device::up_from) and
    /// [`down_at`](Device::down_at) brought in line with `previous`, the map it replaces:
    /// a device marked down since `previous` gets this map's epoch as its `down_at`, one
    /// marked up (or new, or whose state `previous` did not record) gets it as its `up_from`,
    /// and the others keep `previous`'s records. Without `previous` (the first map) the
    /// records this map has are kept and the missing ones are this map's epoch.
    ///
    /// Pure and idempotent: stamping a stamped map against the same predecessor changes
    /// nothing. A `previous` that is not older than this map is ignored, as a store ignores
    /// it for watchers.
    pub fn with_state_epochs(mut self, previous: Option<&ClusterMap>) -> ClusterMap {
        let epoch = self.epoch;
        let previous = previous.filter(|p| p.epoch < epoch);
        for device in &mut self.devices {
            let before = previous.and_then(|p| p.device(device.id));
            stamp(device, before, epoch);
        }
        self
    }
}

/// Stamps `device` of the map of `epoch` against its state `before` (`None`: new, or no
/// predecessor).
fn stamp(device: &mut Device, before: Option<&Device>, epoch: Epoch) {
    match before {
        Some(before) => {
            device.up_from = before.up_from;
            device.down_at = before.down_at;
            if device.up && (!before.up || before.up_from.is_none()) {
                device.up_from = Some(epoch);
            }
            if !device.up && (before.up || before.down_at.is_none()) {
                device.down_at = Some(epoch);
            }
        }
        None => {
            if device.up && device.up_from.is_none() {
                device.up_from = Some(epoch);
            }
            if !device.up && device.down_at.is_none() {
                device.down_at = Some(epoch);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::builder::{ClusterMapBuilder, DeviceSpec};
    use crate::change::MapChange;
    use crate::ids::{DeviceId, Epoch, Weight};
    use crate::map::ClusterMap;

    fn map(devices: u32) -> ClusterMap {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..devices {
            builder = builder.device(DeviceSpec::new(id).at(&[("host", &format!("h{id}"))]));
        }
        builder.epoch = Epoch(1);
        builder.build().expect("a valid map")
    }

    fn set_up(map: &ClusterMap, device: u32, up: bool) -> ClusterMap {
        let change = MapChange::SetState { device: DeviceId(device), up: Some(up), is_in: None };
        map.apply(&change, map.epoch()).expect("applies")
    }

    fn epochs(map: &ClusterMap, device: u32) -> (Option<u64>, Option<u64>) {
        let device = map.device(DeviceId(device)).expect("in the map");
        (device.up_from.map(|e| e.0), device.down_at.map(|e| e.0))
    }

    #[test]
    fn changes_record_the_epochs_that_marked_devices_down_and_up() {
        let first = map(3).with_state_epochs(None);
        assert_eq!(epochs(&first, 1), (Some(1), None), "the first map: up from its epoch");
        let down = set_up(&first, 1, false);
        assert_eq!(down.epoch(), Epoch(2));
        assert_eq!(epochs(&down, 1), (Some(1), Some(2)));
        assert_eq!(epochs(&down, 0), (Some(1), None), "the others keep their records");
        let change = MapChange::SetWeight { device: DeviceId(0), weight: Weight(0x8000) };
        let reweighted = down.apply(&change, down.epoch()).expect("applies");
        assert_eq!(epochs(&reweighted, 1), (Some(1), Some(2)), "a reweight keeps them");
        let up = set_up(&reweighted, 1, true);
        assert_eq!(epochs(&up, 1), (Some(4), Some(2)));
        // A server that looked at epoch 1 and next at 4 knows that device 1 went down in
        // between and device 0 did not; one that looked at 4 and next at 5 knows neither did.
        assert!(up.device(DeviceId(1)).unwrap().may_have_been_down_since(Epoch(1)));
        assert!(up.device(DeviceId(1)).unwrap().may_have_been_down_since(Epoch(3)));
        assert!(!up.device(DeviceId(0)).unwrap().may_have_been_down_since(Epoch(1)));
        let later = set_up(&up, 2, true);
        assert!(!later.device(DeviceId(1)).unwrap().may_have_been_down_since(Epoch(4)));
        assert!(later.device(DeviceId(2)).unwrap().up && epochs(&later, 2) == (Some(1), None));
        // Stamping again against the same predecessor changes nothing.
        assert_eq!(up.clone().with_state_epochs(Some(&reweighted)), up);
    }

    #[test]
    fn a_map_that_records_nothing_is_taken_as_any_device_may_have_been_down() {
        let old = map(2);
        assert_eq!(epochs(&old, 0), (None, None));
        assert!(old.device(DeviceId(0)).unwrap().may_have_been_down_since(Epoch(1)));
        // The first stamped successor records every state as changed by itself: one more
        // catch-up for a server that skipped maps, then exact records.
        let next = set_up(&old, 1, false);
        assert_eq!(epochs(&next, 0), (Some(2), None));
        assert_eq!(epochs(&next, 1), (None, Some(2)));
        assert!(next.device(DeviceId(0)).unwrap().may_have_been_down_since(Epoch(1)));
        let after = set_up(&next, 1, true);
        assert!(!after.device(DeviceId(0)).unwrap().may_have_been_down_since(Epoch(2)));
        assert!(after.device(DeviceId(1)).unwrap().may_have_been_down_since(Epoch(2)));
    }

    #[test]
    fn a_device_down_now_or_marked_down_after_the_epoch_may_have_missed_writes() {
        let first = map(2).with_state_epochs(None);
        let down = set_up(&first, 1, false);
        assert!(down.device(DeviceId(1)).unwrap().may_have_been_down_since(Epoch(2)));
        // A hand-written map that says down_at without a later up_from still counts.
        let mut builder = first.to_builder();
        builder.epoch = Epoch(5);
        builder.devices[0].down_at = Some(Epoch(4));
        let odd = builder.build().expect("valid");
        assert!(odd.device(DeviceId(0)).unwrap().may_have_been_down_since(Epoch(3)));
        assert!(!odd.device(DeviceId(0)).unwrap().may_have_been_down_since(Epoch(4)));
    }

    #[test]
    fn new_devices_are_up_from_the_map_that_adds_them_and_no_record_is_after_its_map() {
        let first = map(2).with_state_epochs(None);
        let spec = DeviceSpec::new(7).at(&[("host", "h7")]);
        let added = first.apply(&MapChange::AddDevice(spec), first.epoch()).expect("adds");
        assert_eq!(epochs(&added, 7), (Some(2), None));
        let mut builder = added.to_builder();
        builder.devices[0].up_from = Some(Epoch(3));
        let error = builder.build().expect_err("up_from after the map's epoch");
        let text = error.to_string();
        assert!(text.contains("up_from = 3") && text.contains("epoch 2"), "{text}");
    }
}
