//! Order statistics of latency samples: the benchmark's tables and the app-latency test's
//! printout summarize with the same rule.

use serde::{Deserialize, Serialize};

/// Median, p90, p99 and spread of a set of samples, in milliseconds.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Summary {
    pub n: usize,
    pub median_ms: f64,
    /// The 90th percentile (nearest rank).
    pub p90_ms: f64,
    /// The 99th percentile (nearest rank: with fewer than 100 samples it is the maximum).
    pub p99_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
}

/// The summary of `samples`, or None when there are none.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|s| s.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let (first, last) = (*sorted.first()?, *sorted.last()?);
    Some(Summary {
        n: sorted.len(),
        median_ms: quantile(&sorted, 0.5),
        p90_ms: quantile(&sorted, 0.9),
        p99_ms: quantile(&sorted, 0.99),
        min_ms: first,
        max_ms: last,
    })
}

/// Nearest-rank quantile of sorted, non-empty samples (the median of an even count is the mean of
/// the two middle samples).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if q == 0.5 && n.is_multiple_of(2) && n >= 2 {
        return (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
    }
    // Nearest rank: the smallest sample with at least q of the samples at or below it.
    let rank = (q * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

impl Summary {
    /// The median of `summary`, NaN without samples.
    pub fn median(summary: Option<&Summary>) -> f64 {
        summary.map_or(f64::NAN, |s| s.median_ms)
    }

    /// "median 1.2 ms, p99 3.4 ms, min 0.9, max 3.4, n 50", for a test's printout.
    pub fn describe(samples: &[f64]) -> String {
        summarize(samples).map_or_else(
            || "no samples".into(),
            |s| {
                format!(
                    "median {:.1} ms, p99 {:.1} ms, min {:.1}, max {:.1}, n {}",
                    s.median_ms, s.p99_ms, s.min_ms, s.max_ms, s.n
                )
            },
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn median_p90_p99_and_spread() {
        let samples: Vec<f64> = (1..=200).map(f64::from).collect();
        let s = summarize(&samples).unwrap();
        assert_eq!(s.n, 200);
        assert_eq!(s.median_ms, 100.5);
        assert_eq!(s.p90_ms, 180.0);
        assert_eq!(s.p99_ms, 198.0);
        assert_eq!((s.min_ms, s.max_ms), (1.0, 200.0));
        let odd = summarize(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((odd.median_ms, odd.p99_ms), (3.0, 5.0));
        assert!(summarize(&[]).is_none());
    }
}
