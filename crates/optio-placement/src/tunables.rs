//! CRUSH tunables and Ceph's named profiles (`CrushWrapper::set_tunables_*`).

/// The CRUSH tunables. Every behaviour change in Ceph's CRUSH shipped as one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunables {
    /// Collision retries inside one bucket before re-descending (legacy 2).
    pub choose_local_tries: u32,
    /// Retries with a permutation before re-descending (legacy 5).
    pub choose_local_fallback_tries: u32,
    /// Total descents before giving up (legacy 19, optimal 50; Ceph tries one more).
    pub choose_total_tries: u32,
    /// chooseleaf retries the leaf only once inside a failure domain (bobtail+).
    pub chooseleaf_descend_once: u32,
    /// chooseleaf varies `r` by the parent's attempt (firefly+; 1 passes `r` itself).
    pub chooseleaf_vary_r: u8,
    /// chooseleaf firstn results are stable across sizes (jewel+).
    pub chooseleaf_stable: u8,
    /// How straw (v1) buckets compute their straws (0 legacy, 1 fixed).
    pub straw_calc_version: u8,
    /// Bitmask of bucket algorithms new buckets may use (informational, kept for round trips).
    pub allowed_bucket_algs: u32,
}

/// A named set of tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunablesProfile {
    /// Ceph's original values (argonaut).
    Legacy,
    /// bobtail.
    Bobtail,
    /// firefly.
    Firefly,
    /// hammer.
    Hammer,
    /// jewel — the values Ceph calls optimal since Luminous.
    Jewel,
}

impl TunablesProfile {
    /// Every profile, oldest first.
    pub const ALL: [TunablesProfile; 5] = [
        TunablesProfile::Legacy,
        TunablesProfile::Bobtail,
        TunablesProfile::Firefly,
        TunablesProfile::Hammer,
        TunablesProfile::Jewel,
    ];

    /// The profile's name (`optimal` and `default` name jewel, `argonaut` legacy).
    pub fn name(self) -> &'static str {
        match self {
            TunablesProfile::Legacy => "legacy",
            TunablesProfile::Bobtail => "bobtail",
            TunablesProfile::Firefly => "firefly",
            TunablesProfile::Hammer => "hammer",
            TunablesProfile::Jewel => "jewel",
        }
    }

    /// Looks a profile up by name.
    pub fn from_name(name: &str) -> Option<TunablesProfile> {
        Some(match name {
            "legacy" | "argonaut" => TunablesProfile::Legacy,
            "bobtail" => TunablesProfile::Bobtail,
            "firefly" => TunablesProfile::Firefly,
            "hammer" => TunablesProfile::Hammer,
            "jewel" | "optimal" | "default" => TunablesProfile::Jewel,
            _ => return None,
        })
    }

    /// The tunables of this profile.
    pub fn tunables(self) -> Tunables {
        let legacy = Tunables::legacy();
        let bobtail = Tunables {
            choose_local_tries: 0,
            choose_local_fallback_tries: 0,
            choose_total_tries: 50,
            chooseleaf_descend_once: 1,
            ..legacy
        };
        let firefly = Tunables { chooseleaf_vary_r: 1, ..bobtail };
        match self {
            TunablesProfile::Legacy => legacy,
            TunablesProfile::Bobtail => bobtail,
            TunablesProfile::Firefly => firefly,
            TunablesProfile::Hammer => Tunables { allowed_bucket_algs: 54, ..firefly },
            TunablesProfile::Jewel => Tunables {
                chooseleaf_stable: 1,
                straw_calc_version: 1,
                allowed_bucket_algs: 54,
                ..firefly
            },
        }
    }
}

impl Tunables {
    /// Ceph's legacy (argonaut) values: what a text map without `tunable` lines means.
    pub fn legacy() -> Tunables {
        Tunables {
            choose_local_tries: 2,
            choose_local_fallback_tries: 5,
            choose_total_tries: 19,
            chooseleaf_descend_once: 0,
            chooseleaf_vary_r: 0,
            chooseleaf_stable: 0,
            straw_calc_version: 0,
            allowed_bucket_algs: 22,
        }
    }

    /// Ceph's optimal (jewel) values: the default for new maps.
    pub fn optimal() -> Tunables {
        TunablesProfile::Jewel.tunables()
    }

    /// The profile whose placement-relevant values these are, if any (Ceph's `profile`).
    pub fn profile(&self) -> Option<TunablesProfile> {
        let placement = |t: &Tunables| {
            (
                t.choose_local_tries,
                t.choose_local_fallback_tries,
                t.choose_total_tries,
                t.chooseleaf_descend_once,
                t.chooseleaf_vary_r,
                t.chooseleaf_stable,
            )
        };
        // Newest first: hammer and firefly differ only in allowed algorithms.
        TunablesProfile::ALL.iter().rev().copied().find(|profile| {
            let candidate = profile.tunables();
            placement(&candidate) == placement(self)
                && (*profile != TunablesProfile::Hammer
                    || candidate.allowed_bucket_algs == self.allowed_bucket_algs)
        })
    }
}

impl Default for Tunables {
    fn default() -> Tunables {
        Tunables::optimal()
    }
}
