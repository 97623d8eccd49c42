//! The balancing state an incremental balanced pool carries in its map: per device and per
//! failure domain, [`CLASSES`] integer prices, and a snapshot of what the balancer saw (each
//! device's failure domain and effective weight) so that the next rebalance can recompute the
//! previous placement exactly. O(devices), never per placement group.
//!
//! The state is data the map holds, so its types are defined with the pool's other parameters
//! in [`params::balanced`](crate::params::balanced) and re-exported here; its checks
//! ([`BalanceState::check`]) are the engine's, here.

pub use crate::params::balanced::{
    BalanceState, CLASSES, DOMAIN_PRICE_MAX, DOMAIN_PRICE_ONE, DeviceState, DomainState, PRICE_MAX,
    STATE_VERSION,
};

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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::DeviceId;

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
