//! Proves: the statistics never panic and mean what they say — the minimum movement share
//! lies in [0, 1], is symmetric, is 0 exactly when the shares do not change, and equals the
//! share of a device that joins; histograms count every value once in at most the bins
//! asked for; summaries order min ≤ mean ≤ max.

use optio_placement::stats::{Histogram, Summary, minimum_movement_share};
use proptest::prelude::*;

fn loads() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(
        prop_oneof![Just(0.0), 0.0f64..1000.0, (0u32..50).prop_map(f64::from)],
        0..20,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn minimum_movement_share_is_a_share(before in loads(), after in loads(), scale in 0.1f64..10.0) {
        let share = minimum_movement_share(&before, &after);
        prop_assert!((0.0..=1.0 + 1e-9).contains(&share), "{}", share);
        let before_total: f64 = before.iter().sum();
        let after_total: f64 = after.iter().sum();
        if before_total > 0.0 && after_total > 0.0 {
            let back = minimum_movement_share(&after, &before);
            prop_assert!((share - back).abs() < 1e-9, "{} vs {}", share, back);
            let scaled: Vec<f64> = before.iter().map(|v| v * scale).collect();
            prop_assert!(minimum_movement_share(&before, &scaled) < 1e-9);
            // A device joining with load w takes exactly w / (total + w).
            let mut joined = before.clone();
            joined.push(scale * 10.0);
            let expected = scale * 10.0 / (before_total + scale * 10.0);
            prop_assert!((minimum_movement_share(&before, &joined) - expected).abs() < 1e-9);
        }
    }

    #[test]
    fn histograms_count_every_value(values in loads(), bins in 0usize..12) {
        let histogram = Histogram::of(&values, bins);
        prop_assert_eq!(histogram.counts.iter().sum::<usize>(), values.len());
        prop_assert!(histogram.counts.len() <= bins.max(1));
        prop_assert_eq!(histogram.lower.len(), histogram.counts.len());
        for v in &values {
            let first = histogram.lower[0];
            let last = histogram.lower[histogram.lower.len() - 1] + histogram.width;
            // Bin edges are computed in floating point: allow a rounding error at the top.
            prop_assert!(*v >= first && *v <= last * (1.0 + 1e-12), "{} outside [{}, {}]", v, first, last);
        }
    }

    #[test]
    fn summaries_are_ordered(values in loads()) {
        let summary = Summary::of(&values);
        prop_assert_eq!(summary.count, values.len());
        if !values.is_empty() {
            prop_assert!(summary.min <= summary.mean + 1e-9 && summary.mean <= summary.max + 1e-9);
            prop_assert!(summary.stdev >= 0.0);
        }
    }
}
