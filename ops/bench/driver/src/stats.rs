//! Percentiles of samples.

use serde::Serialize;

/// Summary of latency samples, in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile (nearest rank: the maximum when n < 100).
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// A xorshift64 sequence from `seed` (not zero): the same picks in every
/// run, so two builds measured side by side get the same requests.
pub fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// Summarises `samples` (any order).
pub fn summary(mut samples: Vec<f64>) -> Summary {
    if samples.is_empty() {
        return Summary::default();
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = samples.len();
    let rank = |q: f64| samples[(((q * n as f64).ceil() as usize).max(1) - 1).min(n - 1)];
    Summary {
        n,
        p50: rank(0.50),
        p90: rank(0.90),
        p99: rank(0.99),
        max: samples[n - 1],
        mean: samples.iter().sum::<f64>() / n as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s = summary((1..=100).map(f64::from).collect());
        assert_eq!((s.p50, s.p90, s.p99, s.max), (50.0, 90.0, 99.0, 100.0));
        let s = summary(vec![3.0, 1.0, 2.0]);
        assert_eq!((s.p50, s.p99), (2.0, 3.0));
        assert_eq!(summary(Vec::new()).n, 0);
    }
}
