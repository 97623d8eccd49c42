//! Optio's balanced placement's parameters ([`engine::balanced`](crate::engine::balanced)):
//! the method, and the state an incremental balanced pool carries in its map — per device and
//! per failure domain, [`CLASSES`] integer prices, and a snapshot of what the balancer saw
//! (each device's failure domain and effective weight) so that the next rebalance can
//! recompute the previous placement exactly. O(devices), never per placement group. The
//! state's checks ([`BalanceState::check`]) and everything computed from it live with the
//! engine, in [`engine::balanced::incremental`](crate::engine::balanced::incremental).

use super::crush::PpsGenerator;
use crate::ids::{DeviceId, RuleId};

/// A balanced pool's parameters: the crush rule it balances over, how PGs become its keys,
/// the method, and (incremental method) the balancer's state, computed when the map is built
/// from the previous map's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BalancedParams {
    /// The rule.
    pub rule: RuleId,
    /// How PGs become placement keys.
    pub pps: PpsGenerator,
    /// The method (never [`BalanceMethod::Off`]).
    pub method: BalanceMethod,
    /// The incremental method's state (`None` for the history-free method).
    pub state: Option<BalanceState>,
}

/// Which of Optio's balanced placements a crush pool uses (`balanced` in Optio TOML).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BalanceMethod {
    /// None: CRUSH's own choice (`balanced = false`).
    #[default]
    Off,
    /// The history-free method ([`crate::engine::balanced::balance`], `balanced = true`): computed
    /// from the map alone.
    HistoryFree,
    /// The incremental method ([`crate::engine::balanced::incremental`], `balanced = "incremental"`):
    /// balanced by per-device prices kept in the pool's [`Pool::balance_state`](crate::map::Pool::balance_state) and updated
    /// from the previous state when the map changes.
    Incremental,
}

impl BalanceMethod {
    /// Whether a balanced placement replaces CRUSH's choice.
    pub fn is_on(self) -> bool {
        self != BalanceMethod::Off
    }

    /// Its name in reports: `"history-free"`, `"incremental"` (`None` when off).
    pub fn name(self) -> Option<&'static str> {
        match self {
            BalanceMethod::Off => None,
            BalanceMethod::HistoryFree => Some("history-free"),
            BalanceMethod::Incremental => Some("incremental"),
        }
    }
}

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

/// The state of an incremental balanced pool: computed by
/// [`rebalance`](crate::engine::balanced::incremental::rebalance) from the
/// previous state and the map, stored with the pool, and turned into placements by
/// [`place`](crate::engine::balanced::incremental::place).
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
    /// The device's state, if listed.
    pub fn device(&self, id: DeviceId) -> Option<&DeviceState> {
        self.devices.binary_search_by_key(&id, |d| d.id).ok().map(|i| &self.devices[i])
    }

    /// The domain's state, if listed.
    pub fn domain(&self, name: &str) -> Option<&DomainState> {
        self.domains.binary_search_by(|d| d.name.as_str().cmp(name)).ok().map(|i| &self.domains[i])
    }
}
