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

/// What is wrong with a stored [`BalanceState`] (the map builder puts it in its message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BalanceStateError {
    /// `units` or `size` is 0.
    #[error("units and size must be at least 1")]
    Empty,
    /// The devices are not in increasing id order, or one is listed twice.
    #[error("devices must be sorted by id and listed once (device {device} after {after})")]
    DevicesUnsorted {
        /// The device out of order.
        device: u32,
        /// The device listed before it.
        after: u32,
    },
    /// The domains are not in increasing name order, or one is listed twice.
    #[error("domains must be sorted by name and listed once ('{domain}' after '{after}')")]
    DomainsUnsorted {
        /// The domain out of order.
        domain: String,
        /// The domain listed before it.
        after: String,
    },
    /// A device has weight 0.
    #[error("device {device} has weight 0")]
    ZeroWeight {
        /// The device.
        device: u32,
    },
    /// A device price is 0 or above [`PRICE_MAX`].
    #[error("device {device} has price {price}; prices are 1 to {PRICE_MAX}")]
    DevicePrice {
        /// The device.
        device: u32,
        /// The price out of range.
        price: u64,
    },
    /// A domain price is 0 or above [`DOMAIN_PRICE_MAX`].
    #[error("domain '{domain}' has price {price}; domain prices are 1 to {DOMAIN_PRICE_MAX}")]
    DomainPrice {
        /// The domain.
        domain: String,
        /// The price out of range.
        price: u64,
    },
}

impl BalanceState {
    /// Checks the invariants a stored state must keep; `Err` says what is wrong (for the
    /// map builder's message).
    pub fn check(&self) -> Result<(), BalanceStateError> {
        if self.units == 0 || self.size == 0 {
            return Err(BalanceStateError::Empty);
        }
        for pair in self.devices.windows(2) {
            if pair[0].id >= pair[1].id {
                return Err(BalanceStateError::DevicesUnsorted {
                    device: pair[1].id.0,
                    after: pair[0].id.0,
                });
            }
        }
        for pair in self.domains.windows(2) {
            if pair[0].name >= pair[1].name {
                return Err(BalanceStateError::DomainsUnsorted {
                    domain: pair[1].name.clone(),
                    after: pair[0].name.clone(),
                });
            }
        }
        for device in &self.devices {
            if device.weight == 0 {
                return Err(BalanceStateError::ZeroWeight { device: device.id.0 });
            }
            if let Some(&price) = device.prices.iter().find(|p| **p == 0 || **p > PRICE_MAX) {
                return Err(BalanceStateError::DevicePrice { device: device.id.0, price });
            }
        }
        for domain in &self.domains {
            if let Some(&price) = domain.prices.iter().find(|p| **p == 0 || **p > DOMAIN_PRICE_MAX)
            {
                return Err(BalanceStateError::DomainPrice { domain: domain.name.clone(), price });
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
        assert!(s.check().expect_err("unsorted").to_string().contains("sorted by id"));
        let mut s = state();
        s.devices[1].prices[3] = 0;
        assert!(s.check().expect_err("zero price").to_string().contains("price 0"));
        let mut s = state();
        s.domains[1].name = "a".into();
        assert!(s.check().expect_err("duplicate").to_string().contains("listed once"));
        let mut s = state();
        s.devices[0].weight = 0;
        assert!(s.check().expect_err("weight").to_string().contains("weight 0"));
        let mut s = state();
        s.units = 0;
        assert!(s.check().is_err());
    }
}
