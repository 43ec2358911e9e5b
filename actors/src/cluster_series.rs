//! The `cluster` label of metric series, bounded: at a thousand members
//! times their types, a series per member and type makes `/metrics` tens of
//! thousands of lines that every scrape must read. The first
//! `metricsClusterSeries` members to record a series (100 by default) keep
//! series of their own; the members after them share the label
//! `cluster="_other"` (their counters summed; at scrape time their object
//! counts summed, their sync state 1 only when all are synced, their lag the
//! largest). 0 puts every member under `_other`. A member keeps its own
//! series for the life of the process, also after it is removed.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// Members with series of their own unless configured otherwise.
pub const DEFAULT_CLUSTER_SERIES: usize = 100;

/// The label of the members past the bound.
pub const OTHER: &str = "_other";

/// Which members have series of their own, up to a bound.
#[derive(Debug)]
pub struct ClusterSeries {
    limit: usize,
    own: Mutex<HashSet<String>>,
}

impl ClusterSeries {
    /// At most `limit` members with series of their own.
    pub fn new(limit: usize) -> ClusterSeries {
        ClusterSeries { limit, own: Mutex::new(HashSet::new()) }
    }

    /// The label of `cluster`'s series: its name while the bound allows, else [`OTHER`].
    pub fn label(&self, cluster: &str) -> String {
        let mut own = self.own.lock().unwrap_or_else(|e| e.into_inner());
        if own.contains(cluster) {
            return cluster.to_string();
        }
        if own.len() < self.limit {
            own.insert(cluster.to_string());
            return cluster.to_string();
        }
        OTHER.to_string()
    }
}

static GLOBAL: OnceLock<ClusterSeries> = OnceLock::new();

/// Sets the process-wide bound; only the first call (before any series) counts.
pub fn configure(limit: usize) -> bool {
    GLOBAL.set(ClusterSeries::new(limit)).is_ok()
}

/// The label of `cluster`'s series in this process.
pub fn label(cluster: &str) -> String {
    GLOBAL.get_or_init(|| ClusterSeries::new(DEFAULT_CLUSTER_SERIES)).label(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_past_the_bound_share_one_label_and_the_first_keep_theirs() {
        let series = ClusterSeries::new(2);
        assert_eq!(series.label("a"), "a");
        assert_eq!(series.label("b"), "b");
        assert_eq!(series.label("c"), OTHER);
        assert_eq!(series.label("a"), "a", "a member keeps its own series");
        assert_eq!(series.label("d"), OTHER);
        assert_eq!(ClusterSeries::new(0).label("a"), OTHER);
    }
}
