//! Balance and movement statistics over placements.

/// Summary of a distribution of counts (PGs or objects per device).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Number of values.
    pub count: usize,
    /// Mean.
    pub mean: f64,
    /// Population standard deviation.
    pub stdev: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// max / mean (1.0 is perfect balance; 0 when the mean is 0).
    pub max_over_mean: f64,
}

impl Summary {
    /// Summarises `values`.
    pub fn of(values: &[f64]) -> Summary {
        if values.is_empty() {
            return Summary::default();
        }
        let count = values.len();
        let mean = values.iter().sum::<f64>() / count as f64;
        let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / count as f64;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Summary {
            count,
            mean,
            stdev: variance.sqrt(),
            min,
            max,
            max_over_mean: if mean > 0.0 { max / mean } else { 0.0 },
        }
    }
}

/// A histogram with equal-width bins over `[min, max]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// Lower edge of each bin.
    pub lower: Vec<f64>,
    /// Width of every bin.
    pub width: f64,
    /// Values per bin.
    pub counts: Vec<usize>,
}

impl Histogram {
    /// Bins `values` into at most `bins` bins (fewer when the values are integers in a
    /// narrower range).
    #[allow(
        clippy::cast_possible_truncation,
        reason = "bin numbers are non-negative floats floored into 0..=bins; `as` saturates"
    )]
    pub fn of(values: &[f64], bins: usize) -> Histogram {
        let bins = bins.max(1);
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if values.is_empty() || !min.is_finite() {
            return Histogram { lower: Vec::new(), width: 0.0, counts: Vec::new() };
        }
        let integral = values.iter().all(|v| v.fract() == 0.0);
        let span = max - min;
        let (bins, width) = if integral && span + 1.0 <= bins as f64 {
            ((span as usize) + 1, 1.0)
        } else if span == 0.0 {
            (1, 1.0)
        } else {
            let raw = span / bins as f64;
            (bins, if integral { raw.ceil() } else { raw })
        };
        let mut counts = vec![0usize; bins];
        for v in values {
            let bin = (((v - min) / width) as usize).min(bins - 1);
            counts[bin] += 1;
        }
        let lower = (0..bins).map(|i| min + i as f64 * width).collect();
        Histogram { lower, width, counts }
    }
}

/// The least share of data that any placement must move when per-device target shares change
/// from `before` to `after` (both normalised to sum 1): Σ max(0, after − before).
pub fn minimum_movement_share(before: &[f64], after: &[f64]) -> f64 {
    let total_before: f64 = before.iter().sum();
    let total_after: f64 = after.iter().sum();
    if total_before <= 0.0 || total_after <= 0.0 {
        return if total_after > 0.0 { 1.0 } else { 0.0 };
    }
    let n = before.len().max(after.len());
    (0..n)
        .map(|i| {
            let b = before.get(i).copied().unwrap_or(0.0) / total_before;
            let a = after.get(i).copied().unwrap_or(0.0) / total_after;
            (a - b).max(0.0)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_values() {
        let s = Summary::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(s.mean, 5.0);
        assert_eq!(s.stdev, 2.0);
        assert_eq!(s.min, 2.0);
        assert_eq!(s.max, 9.0);
        assert_eq!(s.max_over_mean, 1.8);
    }

    #[test]
    fn minimum_movement_of_adding_one_of_five() {
        let before = [1.0, 1.0, 1.0, 1.0, 0.0];
        let after = [1.0, 1.0, 1.0, 1.0, 1.0];
        assert!((minimum_movement_share(&before, &after) - 0.2).abs() < 1e-12);
    }

    #[test]
    fn histogram_of_integers_uses_unit_bins() {
        let h = Histogram::of(&[3.0, 4.0, 4.0, 6.0], 10);
        assert_eq!(h.counts, vec![1, 2, 0, 1]);
        assert_eq!(h.lower[0], 3.0);
    }
}
