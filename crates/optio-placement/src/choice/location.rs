//! Where a device or a client is: its path of `type=name` levels (`zone=z1/rack=r2/host=h7`),
//! kept as fixed-size hashes so that comparing two locations allocates nothing.
//!
//! Closeness is the number of levels two locations share. Bucket names are unique in a map and
//! the hierarchy is a tree, so sharing a host implies sharing its rack and zone: the count is
//! larger the closer two places are, and it does not matter whether both paths name the root.

use std::fmt;
use std::str::FromStr;

use crate::ids::{DeviceId, ItemId};
use crate::map::ClusterMap;
use crate::narrow::small8;

/// Most levels a location keeps. Ceph's default hierarchy has 11 bucket types; a device's path
/// deeper than this keeps its nearest levels (the ones that tell places apart).
pub const LOCATION_LEVELS_MAX: usize = 12;

/// Longest location text [`Location::from_str`] reads, in bytes.
pub const LOCATION_TEXT_BYTES_MAX: usize = 4096;

/// A location path: up to [`LOCATION_LEVELS_MAX`] hashed `type=name` levels, outermost first.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Location {
    len: u8,
    levels: [u64; LOCATION_LEVELS_MAX],
}

impl Default for Location {
    fn default() -> Location {
        Location::UNKNOWN
    }
}

impl fmt::Debug for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.levels().iter().map(|l| format!("{l:016x}"))).finish()
    }
}

/// FNV-1a, 64 bits, over `type`, `=`, `name`: stable across processes, machines and releases.
fn level_hash(type_name: &str, name: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in type_name.as_bytes().iter().chain(b"=").chain(name.as_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

impl Location {
    /// No known location: shares no level with anything.
    pub const UNKNOWN: Location = Location { len: 0, levels: [0; LOCATION_LEVELS_MAX] };

    /// A location from `(type, name)` levels, outermost first (as [`ClusterMap::location`]
    /// returns them). Beyond [`LOCATION_LEVELS_MAX`] levels, the innermost are kept.
    pub fn from_levels<'a>(levels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Location {
        let mut location = Location::UNKNOWN;
        for (type_name, name) in levels {
            location.push(level_hash(type_name, name));
        }
        location
    }

    fn push(&mut self, level: u64) {
        if usize::from(self.len) == LOCATION_LEVELS_MAX {
            self.levels.copy_within(1.., 0);
            self.levels[LOCATION_LEVELS_MAX - 1] = level;
        } else {
            self.levels[usize::from(self.len)] = level;
            self.len += 1;
        }
    }

    /// Where a device sits in a map's hierarchy (its ancestors, root first).
    pub fn of_device(map: &ClusterMap, device: DeviceId) -> Location {
        let mut ancestors = [0u64; LOCATION_LEVELS_MAX];
        let mut count = 0;
        // Ancestors come nearest first; keep the nearest LOCATION_LEVELS_MAX.
        for bucket in map.ancestors(ItemId::from(device)).take(LOCATION_LEVELS_MAX) {
            ancestors[count] =
                level_hash(map.type_name(bucket.type_id).unwrap_or("?"), &bucket.name);
            count += 1;
        }
        let mut location = Location::UNKNOWN;
        for &level in ancestors[..count].iter().rev() {
            location.push(level);
        }
        location
    }

    /// The hashed levels, outermost first.
    pub fn levels(&self) -> &[u64] {
        &self.levels[..usize::from(self.len)]
    }

    /// Number of levels.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether the location is unknown (no levels).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many of this location's levels `other` also has: 0 for different top-level
    /// domains (or an unknown location), more the closer they are.
    pub fn shared_levels(&self, other: &Location) -> u8 {
        let theirs = other.levels();
        small8(self.levels().iter().filter(|level| theirs.contains(level)).count())
    }

    /// The location from hashed levels (as [`levels`](Self::levels) returns them), e.g. from
    /// the wire. `None` when there are more than [`LOCATION_LEVELS_MAX`].
    pub fn from_hashed_levels(levels: &[u64]) -> Option<Location> {
        if levels.len() > LOCATION_LEVELS_MAX {
            return None;
        }
        let mut location = Location::UNKNOWN;
        location.levels[..levels.len()].copy_from_slice(levels);
        location.len = small8(levels.len());
        Some(location)
    }
}

/// Why a location text is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LocationError {
    /// A level that is not `type=name`.
    #[error(
        "'{level}' is not a location level; write type=name levels separated by '/' or ',', e.g. zone=z1/host=h7"
    )]
    BadLevel {
        /// The level as written.
        level: String,
    },
    /// More levels than [`LOCATION_LEVELS_MAX`].
    #[error("a location has at most {LOCATION_LEVELS_MAX} levels; this one has {levels}")]
    TooDeep {
        /// Levels given.
        levels: usize,
    },
    /// Text longer than [`LOCATION_TEXT_BYTES_MAX`].
    #[error("a location is at most {LOCATION_TEXT_BYTES_MAX} bytes long; this one has {bytes}")]
    TooLong {
        /// Bytes given.
        bytes: usize,
    },
}

impl FromStr for Location {
    type Err = LocationError;

    /// `zone=z1/rack=r2/host=h7` (or with commas), outermost first; the empty string is
    /// [`Location::UNKNOWN`].
    fn from_str(text: &str) -> Result<Location, LocationError> {
        if text.len() > LOCATION_TEXT_BYTES_MAX {
            return Err(LocationError::TooLong { bytes: text.len() });
        }
        let levels: Vec<&str> =
            text.split(['/', ',']).map(str::trim).filter(|l| !l.is_empty()).collect();
        if levels.len() > LOCATION_LEVELS_MAX {
            return Err(LocationError::TooDeep { levels: levels.len() });
        }
        let mut location = Location::UNKNOWN;
        for level in levels {
            match level.split_once('=') {
                Some((type_name, name))
                    if !type_name.trim().is_empty() && !name.trim().is_empty() =>
                {
                    location.push(level_hash(type_name.trim(), name.trim()));
                }
                _ => return Err(LocationError::BadLevel { level: level.to_string() }),
            }
        }
        Ok(location)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Location {
    /// A list of the hashed levels (numbers), outermost first.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.levels())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Location {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Location, D::Error> {
        let levels = <Vec<u64>>::deserialize(deserializer)?;
        Location::from_hashed_levels(&levels).ok_or_else(|| {
            serde::de::Error::custom(LocationError::TooDeep { levels: levels.len() })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closeness_counts_shared_levels() {
        let client: Location = "zone=z1/rack=r2/host=h7".parse().expect("valid");
        let same_host: Location = "root=default/zone=z1/rack=r2/host=h7".parse().expect("valid");
        let same_rack: Location = "root=default,zone=z1,rack=r2,host=h8".parse().expect("valid");
        let other_zone: Location = "root=default/zone=z2/rack=r5/host=h9".parse().expect("valid");
        assert_eq!(client.shared_levels(&same_host), 3);
        assert_eq!(client.shared_levels(&same_rack), 2);
        assert_eq!(client.shared_levels(&other_zone), 0);
        assert_eq!(Location::UNKNOWN.shared_levels(&same_host), 0);
        assert_eq!(client.shared_levels(&Location::UNKNOWN), 0);
    }

    #[test]
    fn text_and_levels_agree() {
        let parsed: Location = "zone = z1 / host = h2".parse().expect("valid");
        assert_eq!(parsed, Location::from_levels([("zone", "z1"), ("host", "h2")]));
        assert_eq!("".parse::<Location>(), Ok(Location::UNKNOWN));
        assert_eq!(Location::from_hashed_levels(parsed.levels()), Some(parsed));
    }

    #[test]
    fn bad_text_is_refused() {
        assert!(matches!("zone".parse::<Location>(), Err(LocationError::BadLevel { .. })));
        assert!(matches!("=z1".parse::<Location>(), Err(LocationError::BadLevel { .. })));
        let deep: Vec<String> = (0..13).map(|i| format!("t{i}=n{i}")).collect();
        assert!(matches!(
            deep.join("/").parse::<Location>(),
            Err(LocationError::TooDeep { levels: 13 })
        ));
        assert!(matches!(
            "a=b/".repeat(2000).parse::<Location>(),
            Err(LocationError::TooLong { .. })
        ));
    }

    #[test]
    fn deep_paths_keep_their_innermost_levels() {
        let levels: Vec<(String, String)> =
            (0..20).map(|i| (format!("t{i}"), format!("n{i}"))).collect();
        let location = Location::from_levels(levels.iter().map(|(t, n)| (t.as_str(), n.as_str())));
        assert_eq!(location.len(), LOCATION_LEVELS_MAX);
        let innermost = Location::from_levels([("t19", "n19")]);
        assert_eq!(innermost.shared_levels(&location), 1);
        let outermost = Location::from_levels([("t0", "n0")]);
        assert_eq!(outermost.shared_levels(&location), 0);
    }
}
