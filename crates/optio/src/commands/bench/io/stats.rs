//! Medians and spreads of repeated runs.

/// The median of `values` (the mean of the middle two for an even count); 0 for none.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return 0.0;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 }
}

/// The smallest and largest of `values`.
pub fn range(values: &[f64]) -> (f64, f64) {
    values.iter().fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)))
}

/// `value` against `baseline`, percent (+10: 10 % more).
pub fn change_percent(value: f64, baseline: f64) -> f64 {
    if baseline == 0.0 { 0.0 } else { (value / baseline - 1.0) * 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_changes() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(range(&[2.0, 5.0, 1.0]), (1.0, 5.0));
        assert!((change_percent(123.1, 100.0) - 23.1).abs() < 1e-9);
        assert_eq!(change_percent(1.0, 0.0), 0.0);
    }
}
