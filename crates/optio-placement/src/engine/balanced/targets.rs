//! How many copies each device should hold: its weight's share of all copies, failure
//! domains capped at one copy per placement unit (water-filling), as exact rationals.

/// A device's exact target, `numerator / denominator` copies (denominator > 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// Numerator.
    pub numerator: u128,
    /// Denominator (> 0).
    pub denominator: u128,
}

impl Target {
    /// `⌊t⌋`.
    pub fn floor(&self) -> i64 {
        i64::try_from(self.numerator / self.denominator).unwrap_or(i64::MAX)
    }

    /// `⌈t⌉`.
    pub fn ceil(&self) -> i64 {
        i64::try_from(self.numerator.div_ceil(self.denominator)).unwrap_or(i64::MAX)
    }

    /// The target as a float (statistics only).
    pub fn as_f64(&self) -> f64 {
        self.numerator as f64 / self.denominator as f64
    }
}

/// Targets for `units × size` copies over devices of `weights` (> 0) in failure domains
/// `domain` (indices below `domain_count`): domains whose weight share would exceed one copy
/// per unit hold exactly one copy per unit, the others share the rest by weight; each device
/// gets its weight's share of its domain's. Needs at least `size` domains for the total to be
/// reachable; with fewer, every domain is capped.
pub(crate) fn targets(
    weights: &[u64],
    domain: &[u32],
    domain_count: usize,
    units: u64,
    size: u64,
) -> Vec<Target> {
    let mut domain_weight = vec![0u128; domain_count];
    for (w, d) in weights.iter().zip(domain) {
        domain_weight[*d as usize] += u128::from(*w);
    }
    let total = u128::from(units) * u128::from(size);
    let cap = u128::from(units);
    let mut capped = vec![false; domain_count];
    // Each pass caps at least one more domain or stops: at most `domain_count + 1` passes.
    loop {
        let capped_count = capped.iter().filter(|c| **c).count() as u128;
        let rest = total.saturating_sub(capped_count * cap);
        let free_weight: u128 =
            domain_weight.iter().zip(&capped).filter(|(_, c)| !**c).map(|(w, _)| *w).sum();
        let mut changed = false;
        for (h, w) in domain_weight.iter().enumerate() {
            // This domain's share rest·w/free exceeds the cap.
            if !capped[h] && rest * w > cap * free_weight {
                capped[h] = true;
                changed = true;
            }
        }
        if !changed {
            return weights
                .iter()
                .zip(domain)
                .map(|(w, d)| {
                    let w = u128::from(*w);
                    if capped[*d as usize] {
                        Target {
                            numerator: cap * w,
                            denominator: domain_weight[*d as usize].max(1),
                        }
                    } else {
                        Target { numerator: rest * w, denominator: free_weight.max(1) }
                    }
                })
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_devices_share_equally() {
        let t = targets(&[1, 1, 1, 1], &[0, 1, 2, 3], 4, 10, 2);
        for target in &t {
            assert_eq!((target.floor(), target.ceil()), (5, 5), "{target:?}");
        }
        let t = targets(&[1, 1, 1], &[0, 1, 2], 3, 10, 2);
        assert_eq!((t[0].floor(), t[0].ceil()), (6, 7)); // 6.67
        let sum: f64 = t.iter().map(Target::as_f64).sum();
        assert!((sum - 20.0).abs() < 1e-9);
    }

    #[test]
    fn a_heavy_domain_is_capped_at_one_copy_per_unit() {
        // Domain 0 weighs as much as the three others together; with 3 copies per unit it
        // would get 1.5 per unit: it gets 1, the rest share 2.
        let t = targets(&[3, 1, 1, 1], &[0, 1, 2, 3], 4, 100, 3);
        assert_eq!(t[0].as_f64(), 100.0);
        for target in &t[1..] {
            assert!((target.as_f64() - 200.0 / 3.0).abs() < 1e-9);
        }
        // Devices inside a capped domain split the cap by weight.
        let t = targets(&[2, 1, 1, 1], &[0, 0, 1, 2], 3, 30, 3);
        assert_eq!(t[0].as_f64(), 20.0);
        assert_eq!(t[1].as_f64(), 10.0);
        // Fewer domains than copies: every domain capped, the total is what fits.
        let t = targets(&[1, 1], &[0, 1], 2, 10, 3);
        assert_eq!((t[0].as_f64(), t[1].as_f64()), (10.0, 10.0));
    }

    #[test]
    fn weights_are_exact() {
        // 3 devices of weights 1, 2, 4 in distinct domains, 70 units × 1 copy: 10, 20, 40.
        let t = targets(&[1, 2, 4], &[0, 1, 2], 3, 70, 1);
        assert_eq!(t.iter().map(Target::floor).collect::<Vec<_>>(), vec![10, 20, 40]);
        assert_eq!(t.iter().map(Target::ceil).collect::<Vec<_>>(), vec![10, 20, 40]);
    }
}
