//! A pool's choice settings — how many candidates an object has, which policy picks one, when a
//! device counts as full — and their validation. [`choice`](crate::choice), which decides by
//! them, re-exports them (also as `choice::settings`).

use std::fmt;
use std::str::FromStr;

/// Most candidates an object may have (`choices`). Each candidate costs a probe on an object's
/// first access, and the paper found 2–3 enough; 8 leaves room for experiments.
pub const CHOICES_MAX: u32 = 8;

/// Parts per million: the scale of every utilisation (`cpu_ppm`, `space_ppm`, …) and of the
/// full threshold. 1,000,000 is 100 %.
pub const PPM: u32 = 1_000_000;

/// The default full threshold: a device at or above 95 % space utilisation takes no new
/// object (Ceph's default `mon_osd_full_ratio`).
pub const FULL_PPM_DEFAULT: u32 = 950_000;

/// Largest weight of one metric in a composite policy (weights are small integers: relative
/// importance, not scales).
pub const COMPOSITE_WEIGHT_MAX: u32 = 1000;

/// Every policy name a pool may use, in the order the docs list them.
pub const POLICY_NAMES: [&str; 9] =
    ["first", "random", "local", "memory", "cpu", "space", "latency", "journal", "composite"];

/// Which built-in policy picks a candidate (CHOICE's Table 1, plus `first`, `random` and a
/// weighted `composite`). Users add their own by implementing
/// [`Policy`](crate::choice::Policy); a pool names a built-in one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PolicySpec {
    /// No choice: the first candidate that is available (the object's home, candidate 0,
    /// whenever it is). The default; with `choices = 1` it is plain hashing.
    #[default]
    First,
    /// A hashed pick among the available candidates: the same object always gets the same
    /// pick for the same set of available candidates.
    Random,
    /// The candidate whose primary shares the most location levels with the client.
    Local,
    /// The candidate whose primary has the lowest memory utilisation.
    Memory,
    /// The candidate with the lowest mean cpu utilisation over its devices.
    Cpu,
    /// The candidate whose fullest device is the least full.
    Space,
    /// The candidate with the lowest mean recent latency over its devices.
    Latency,
    /// The candidate with the least mean unflushed journal bytes over its devices.
    Journal,
    /// The candidate with the lowest weighted sum of normalised metrics.
    Composite(CompositeWeights),
}

/// Weights of a composite policy: the score of a candidate is Σ weight × normalised metric
/// (each metric scaled to 0..=1,000,000, see `docs/choice.md`); the lowest score wins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CompositeWeights {
    /// Weight of the mean cpu utilisation.
    #[cfg_attr(feature = "serde", serde(default))]
    pub cpu: u32,
    /// Weight of the primary's memory utilisation.
    #[cfg_attr(feature = "serde", serde(default))]
    pub memory: u32,
    /// Weight of the highest space utilisation.
    #[cfg_attr(feature = "serde", serde(default))]
    pub space: u32,
    /// Weight of the mean latency (relative to the highest among the candidates).
    #[cfg_attr(feature = "serde", serde(default))]
    pub latency: u32,
    /// Weight of the mean unflushed journal bytes (relative to the highest).
    #[cfg_attr(feature = "serde", serde(default))]
    pub journal: u32,
    /// Weight of the distance between the client and the primary (levels not shared).
    #[cfg_attr(feature = "serde", serde(default))]
    pub local: u32,
}

/// Metric names a composite policy weighs, in the order they are written.
pub const COMPOSITE_METRICS: [&str; 6] = ["cpu", "memory", "space", "latency", "journal", "local"];

impl CompositeWeights {
    /// The weights in [`COMPOSITE_METRICS`] order.
    pub fn as_array(&self) -> [u32; 6] {
        [self.cpu, self.memory, self.space, self.latency, self.journal, self.local]
    }

    /// The weight of a metric by name.
    pub fn get_mut(&mut self, metric: &str) -> Option<&mut u32> {
        Some(match metric {
            "cpu" => &mut self.cpu,
            "memory" => &mut self.memory,
            "space" => &mut self.space,
            "latency" => &mut self.latency,
            "journal" => &mut self.journal,
            "local" => &mut self.local,
            _ => return None,
        })
    }

    /// Checks that the weights mean something: at least one above zero, none above
    /// [`COMPOSITE_WEIGHT_MAX`].
    pub fn validate(&self) -> Result<(), SettingsError> {
        for (name, weight) in COMPOSITE_METRICS.iter().zip(self.as_array()) {
            if weight > COMPOSITE_WEIGHT_MAX {
                return Err(SettingsError::CompositeWeightTooLarge { metric: name, weight });
            }
        }
        if self.as_array().iter().all(|&w| w == 0) {
            return Err(SettingsError::CompositeWithoutWeights);
        }
        Ok(())
    }
}

impl fmt::Display for CompositeWeights {
    /// `space=2,memory=1`: the non-zero weights in [`COMPOSITE_METRICS`] order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, weight) in COMPOSITE_METRICS.iter().zip(self.as_array()) {
            if weight == 0 {
                continue;
            }
            if !first {
                f.write_str(",")?;
            }
            write!(f, "{name}={weight}")?;
            first = false;
        }
        Ok(())
    }
}

impl PolicySpec {
    /// The policy's name as written in maps (`composite` for every composite).
    pub fn name(&self) -> &'static str {
        match self {
            PolicySpec::First => "first",
            PolicySpec::Random => "random",
            PolicySpec::Local => "local",
            PolicySpec::Memory => "memory",
            PolicySpec::Cpu => "cpu",
            PolicySpec::Space => "space",
            PolicySpec::Latency => "latency",
            PolicySpec::Journal => "journal",
            PolicySpec::Composite(_) => "composite",
        }
    }

    /// The policy named `name`; `composite` comes with all weights zero (set them, or
    /// validation refuses it).
    pub fn from_name(name: &str) -> Option<PolicySpec> {
        Some(match name {
            "first" => PolicySpec::First,
            "random" => PolicySpec::Random,
            "local" => PolicySpec::Local,
            "memory" => PolicySpec::Memory,
            "cpu" => PolicySpec::Cpu,
            "space" => PolicySpec::Space,
            "latency" => PolicySpec::Latency,
            "journal" => PolicySpec::Journal,
            "composite" => PolicySpec::Composite(CompositeWeights::default()),
            _ => return None,
        })
    }

    /// Checks a composite's weights (the other policies are always valid).
    pub fn validate(&self) -> Result<(), SettingsError> {
        match self {
            PolicySpec::Composite(weights) => weights.validate(),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for PolicySpec {
    /// The name, or `composite:space=2,memory=1` — what [`FromStr`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicySpec::Composite(weights) => write!(f, "composite:{weights}"),
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for PolicySpec {
    type Err = SettingsError;

    /// A policy name (`space`), or a composite with its weights (`composite:space=2,memory=1`).
    /// A composite is validated here: it needs a non-zero weight.
    fn from_str(text: &str) -> Result<PolicySpec, SettingsError> {
        let text = text.trim();
        let (name, weights) = match text.split_once(':') {
            Some((name, weights)) => (name.trim(), Some(weights)),
            None => (text, None),
        };
        let spec = PolicySpec::from_name(name)
            .ok_or_else(|| SettingsError::UnknownPolicy { name: name.to_string() })?;
        match (spec, weights) {
            (PolicySpec::Composite(mut parsed), Some(list)) => {
                for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let (metric, value) = pair.split_once('=').ok_or_else(|| {
                        SettingsError::BadCompositeWeight { text: pair.to_string() }
                    })?;
                    let slot = parsed.get_mut(metric.trim()).ok_or_else(|| {
                        SettingsError::UnknownCompositeMetric { name: metric.trim().to_string() }
                    })?;
                    *slot = value.trim().parse().map_err(|_| {
                        SettingsError::BadCompositeWeight { text: pair.to_string() }
                    })?;
                }
                let spec = PolicySpec::Composite(parsed);
                spec.validate()?;
                Ok(spec)
            }
            (PolicySpec::Composite(_), None) => Err(SettingsError::CompositeWithoutWeights),
            (_, Some(_)) => Err(SettingsError::WeightsOnSimplePolicy { name: name.to_string() }),
            (spec, None) => Ok(spec),
        }
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for PolicySpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for PolicySpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<PolicySpec, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A pool's choice settings (the `choices`, `policy`, `policy_weights` and `full_ratio` keys
/// of a pool in Optio TOML).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ChoiceSettings {
    /// k: candidates per object, 1 (no choice, the default) to [`CHOICES_MAX`]. Part of the
    /// placement: changing it changes which candidates exist, so only raise it on a pool
    /// whose objects record their choice (candidate 0 never changes).
    pub choices: u32,
    /// The pool's policy; a request may override it.
    pub policy: PolicySpec,
    /// A device whose space utilisation is at or above this (in ppm) is full: no candidate
    /// with it is chosen. 1 to [`PPM`]; default [`FULL_PPM_DEFAULT`].
    pub full_ppm: u32,
}

impl Default for ChoiceSettings {
    fn default() -> ChoiceSettings {
        ChoiceSettings { choices: 1, policy: PolicySpec::First, full_ppm: FULL_PPM_DEFAULT }
    }
}

impl ChoiceSettings {
    /// `choices` candidates picked by `policy`, default full threshold.
    pub fn new(choices: u32, policy: PolicySpec) -> ChoiceSettings {
        ChoiceSettings { choices, policy, ..ChoiceSettings::default() }
    }

    /// Whether these are the defaults (no choice), which map files omit.
    pub fn is_default(&self) -> bool {
        *self == ChoiceSettings::default()
    }

    /// Checks the settings for a pool with `pg_num` PGs (0: object-level placement).
    pub fn validate(&self, pg_num: u32) -> Result<(), SettingsError> {
        if self.choices == 0 {
            return Err(SettingsError::ZeroChoices);
        }
        if self.choices > CHOICES_MAX {
            return Err(SettingsError::TooManyChoices { choices: self.choices });
        }
        if pg_num > 0 && self.choices > pg_num {
            return Err(SettingsError::MoreChoicesThanPgs { choices: self.choices, pg_num });
        }
        if self.full_ppm == 0 || self.full_ppm > PPM {
            return Err(SettingsError::FullThreshold { full_ppm: self.full_ppm });
        }
        self.policy.validate()
    }
}

/// Why choice settings are refused. The builder reports these for the pool they belong to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// `choices = 0`.
    #[error("an object needs at least one candidate; use choices = 1 to turn choices off")]
    ZeroChoices,
    /// `choices` above [`CHOICES_MAX`].
    #[error(
        "{choices} candidates is above the maximum of {CHOICES_MAX} (each candidate costs a probe on first access); use 1 to {CHOICES_MAX}"
    )]
    TooManyChoices {
        /// The value given.
        choices: u32,
    },
    /// More candidates than PGs: they could not be distinct.
    #[error(
        "the pool has only {pg_num} placement groups, so {choices} candidates could not be distinct PGs; lower choices or raise pg_num"
    )]
    MoreChoicesThanPgs {
        /// The value given.
        choices: u32,
        /// The pool's PGs.
        pg_num: u32,
    },
    /// A full threshold of 0 or above 100 %.
    #[error("full_ratio ({full_ppm} ppm) must be above 0 and at most 1.0 (default 0.95)")]
    FullThreshold {
        /// The value given, in ppm.
        full_ppm: u32,
    },
    /// A policy name nobody knows.
    #[error(
        "unknown policy '{name}'; use one of first, random, local, memory, cpu, space, latency, journal, composite"
    )]
    UnknownPolicy {
        /// The name given.
        name: String,
    },
    /// A composite whose weights are all zero (or that has none).
    #[error(
        "a composite policy needs at least one non-zero weight, e.g. policy_weights = {{ space = 2, memory = 1 }} (in a request: composite:space=2,memory=1)"
    )]
    CompositeWithoutWeights,
    /// A composite weight above [`COMPOSITE_WEIGHT_MAX`].
    #[error(
        "composite weight {metric} = {weight} is above {COMPOSITE_WEIGHT_MAX}; weights are relative importances, use small integers"
    )]
    CompositeWeightTooLarge {
        /// The metric.
        metric: &'static str,
        /// The weight given.
        weight: u32,
    },
    /// A composite weight for a metric that does not exist.
    #[error(
        "unknown metric '{name}' in composite weights; use cpu, memory, space, latency, journal or local"
    )]
    UnknownCompositeMetric {
        /// The name given.
        name: String,
    },
    /// A composite weight that is not `metric=integer`.
    #[error("'{text}' is not a composite weight; write metric=integer, e.g. space=2")]
    BadCompositeWeight {
        /// The text given.
        text: String,
    },
    /// Weights given to a policy other than composite.
    #[error("policy '{name}' takes no weights; only composite does")]
    WeightsOnSimplePolicy {
        /// The policy.
        name: String,
    },
}

impl SettingsError {
    /// The map-file key the error is about (`choices`, `policy`, `policy_weights`,
    /// `full_ratio`).
    pub fn field(&self) -> &'static str {
        match self {
            SettingsError::ZeroChoices
            | SettingsError::TooManyChoices { .. }
            | SettingsError::MoreChoicesThanPgs { .. } => "choices",
            SettingsError::FullThreshold { .. } => "full_ratio",
            SettingsError::UnknownPolicy { .. } | SettingsError::WeightsOnSimplePolicy { .. } => {
                "policy"
            }
            SettingsError::CompositeWithoutWeights
            | SettingsError::CompositeWeightTooLarge { .. }
            | SettingsError::UnknownCompositeMetric { .. }
            | SettingsError::BadCompositeWeight { .. } => "policy_weights",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print_back() {
        for name in POLICY_NAMES.iter().filter(|n| **n != "composite") {
            let spec: PolicySpec = name.parse().expect("a known name");
            assert_eq!(spec.to_string(), *name);
        }
        let spec: PolicySpec = "composite: space=2, memory=1".parse().expect("valid");
        assert_eq!(spec.to_string(), "composite:memory=1,space=2");
        assert_eq!(spec.to_string().parse::<PolicySpec>(), Ok(spec));
    }

    #[test]
    fn bad_policies_are_refused_with_the_reason() {
        let error = |text: &str| text.parse::<PolicySpec>().expect_err(text);
        assert!(matches!(error("fastest"), SettingsError::UnknownPolicy { .. }));
        assert_eq!(error("composite"), SettingsError::CompositeWithoutWeights);
        assert_eq!(error("composite:space=0"), SettingsError::CompositeWithoutWeights);
        assert!(matches!(error("composite:speed=1"), SettingsError::UnknownCompositeMetric { .. }));
        assert!(matches!(error("composite:space"), SettingsError::BadCompositeWeight { .. }));
        assert!(matches!(error("composite:space=-1"), SettingsError::BadCompositeWeight { .. }));
        assert!(matches!(
            error("composite:space=1001"),
            SettingsError::CompositeWeightTooLarge { metric: "space", weight: 1001 }
        ));
        assert!(matches!(error("space:cpu=1"), SettingsError::WeightsOnSimplePolicy { .. }));
        assert!(error("fastest").to_string().contains("first, random, local"));
    }

    #[test]
    fn settings_limits() {
        let ok = ChoiceSettings::new(2, PolicySpec::Space);
        assert_eq!(ok.validate(0), Ok(()));
        assert_eq!(ok.validate(2), Ok(()));
        assert_eq!(
            ChoiceSettings::new(0, PolicySpec::First).validate(0),
            Err(SettingsError::ZeroChoices)
        );
        assert_eq!(
            ChoiceSettings::new(CHOICES_MAX + 1, PolicySpec::First).validate(0),
            Err(SettingsError::TooManyChoices { choices: CHOICES_MAX + 1 })
        );
        assert_eq!(
            ChoiceSettings::new(4, PolicySpec::First).validate(2),
            Err(SettingsError::MoreChoicesThanPgs { choices: 4, pg_num: 2 })
        );
        for full_ppm in [0, PPM + 1] {
            let settings = ChoiceSettings { full_ppm, ..ok };
            assert_eq!(settings.validate(0), Err(SettingsError::FullThreshold { full_ppm }));
        }
        let composite = ChoiceSettings::new(2, PolicySpec::Composite(CompositeWeights::default()));
        assert_eq!(composite.validate(0), Err(SettingsError::CompositeWithoutWeights));
        assert_eq!(SettingsError::CompositeWithoutWeights.field(), "policy_weights");
    }
}
