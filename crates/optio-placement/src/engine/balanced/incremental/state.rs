//! The balancing state an incremental balanced pool carries in its map: per device and per
//! failure domain, [`CLASSES`] integer prices, and a snapshot of what the balancer saw (each
//! device's failure domain and effective weight) so that the next rebalance can recompute the
//! previous placement exactly. O(devices), never per placement group.

use crate::ids::DeviceId;

/// Version of the state's format (written to map files as `version`).
pub const STATE_VERSION: u32 = 1;
/// Price classes per device and per failure domain: a device's (or domain's) units are split
/// into this many classes by a hash, each with its own price, so that the balancer can choose
/// among this many single-copy moves of a device instead of one.
pub const CLASSES: usize = 16;
/// Largest device price (a device priced at this holds nothing it could lose).
pub const PRICE_MAX: u64 = 1 << 56;
/// A domain price that neither helps nor hinders its domain.
pub const DOMAIN_PRICE_ONE: u64 = 1 << 20;
/// Largest domain price.
pub const DOMAIN_PRICE_MAX: u64 = 1 << 40;

/// One device's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceState {
    /// The device.
    pub id: DeviceId,
    /// Its failure domain when the state was computed (the bucket's name, or the device's
    /// name when the failure domain is the device).
    pub domain: String,
    /// Its effective weight then (CRUSH weight × reweight, 16.16).
    pub weight: u32,
    /// Its price per class (lower wins more placement units), 1 to [`PRICE_MAX`].
    pub prices: [u64; CLASSES],
}

/// One failure domain's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DomainState {
    /// The domain's name.
    pub name: String,
    /// Its price per class, 1 to [`DOMAIN_PRICE_MAX`] ([`DOMAIN_PRICE_ONE`] is neutral).
    pub prices: [u64; CLASSES],
}

/// The state of an incremental balanced pool: computed by [`super::rebalance`] from the
/// previous state and the map, stored with the pool, and turned into placements by
/// [`super::place`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BalanceState {
    /// The placement units (the pool's `pgp_num`) it was computed for.
    pub units: u32,
    /// Copies per unit (the pool's `size`) it was computed for.
    pub size: u32,
    /// Every device the pool could use then, sorted by id.
    pub devices: Vec<DeviceState>,
    /// Every failure domain of those devices, sorted by name.
    pub domains: Vec<DomainState>,
}

impl BalanceState {
    /// Checks the invariants a stored state must keep; `Err` says what is wrong (for the
    /// map builder's message).
    pub fn check(&self) -> Result<(), String> {
        if self.units == 0 || self.size == 0 {
            return Err("units and size must be at least 1".into());
        }
        for pair in self.devices.windows(2) {
            if pair[0].id >= pair[1].id {
                return Err(format!(
                    "devices must be sorted by id and listed once (device {} after {})",
                    pair[1].id.0, pair[0].id.0
                ));
            }
        }
        for pair in self.domains.windows(2) {
            if pair[0].name >= pair[1].name {
                return Err(format!(
                    "domains must be sorted by name and listed once ('{}' after '{}')",
                    pair[1].name, pair[0].name
                ));
            }
        }
        for device in &self.devices {
            if device.weight == 0 {
                return Err(format!("device {} has weight 0", device.id.0));
            }
            if let Some(price) = device.prices.iter().find(|p| **p == 0 || **p > PRICE_MAX) {
                return Err(format!(
                    "device {} has price {price}; prices are 1 to {PRICE_MAX}",
                    device.id.0
                ));
            }
        }
        for domain in &self.domains {
            if let Some(price) = domain.prices.iter().find(|p| **p == 0 || **p > DOMAIN_PRICE_MAX) {
                return Err(format!(
                    "domain '{}' has price {price}; domain prices are 1 to {DOMAIN_PRICE_MAX}",
                    domain.name
                ));
            }
        }
        Ok(())
    }

    /// The device's state, if listed.
    pub fn device(&self, id: DeviceId) -> Option<&DeviceState> {
        self.devices.binary_search_by_key(&id, |d| d.id).ok().map(|i| &self.devices[i])
    }

    /// The domain's state, if listed.
    pub fn domain(&self, name: &str) -> Option<&DomainState> {
        self.domains.binary_search_by(|d| d.name.as_str().cmp(name)).ok().map(|i| &self.domains[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> BalanceState {
        BalanceState {
            units: 8,
            size: 2,
            devices: vec![
                DeviceState {
                    id: DeviceId(1),
                    domain: "a".into(),
                    weight: 0x10000,
                    prices: [7; CLASSES],
                },
                DeviceState {
                    id: DeviceId(4),
                    domain: "b".into(),
                    weight: 0x10000,
                    prices: [9; CLASSES],
                },
            ],
            domains: vec![
                DomainState { name: "a".into(), prices: [DOMAIN_PRICE_ONE; CLASSES] },
                DomainState { name: "b".into(), prices: [DOMAIN_PRICE_ONE; CLASSES] },
            ],
        }
    }

    #[test]
    fn a_valid_state_passes_and_looks_up() {
        let s = state();
        assert_eq!(s.check(), Ok(()));
        assert_eq!(s.device(DeviceId(4)).expect("listed").prices[0], 9);
        assert!(s.device(DeviceId(2)).is_none());
        assert!(s.domain("b").is_some());
        assert!(s.domain("c").is_none());
    }

    #[test]
    fn broken_states_say_what_is_wrong() {
        let mut s = state();
        s.devices.swap(0, 1);
        assert!(s.check().expect_err("unsorted").contains("sorted by id"));
        let mut s = state();
        s.devices[1].prices[3] = 0;
        assert!(s.check().expect_err("zero price").contains("price 0"));
        let mut s = state();
        s.domains[1].name = "a".into();
        assert!(s.check().expect_err("duplicate").contains("listed once"));
        let mut s = state();
        s.devices[0].weight = 0;
        assert!(s.check().expect_err("weight").contains("weight 0"));
        let mut s = state();
        s.units = 0;
        assert!(s.check().is_err());
    }
}
