//! Submit→running latency (issue 22): once per task, when its first run
//! first reaches RUNNING, the time since its job was created. Kept as
//! fixed buckets of atomic counts, with no metrics library (decision 0022):
//! the `paceline` binary reads a [`LatencySnapshot`] at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets, milliseconds: 100 ms to 1 h (and +Inf).
pub const SUBMIT_TO_RUNNING_BOUNDS_MS: [u64; 14] =
    [100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000, 600_000, 1_800_000, 3_600_000];

/// A histogram of milliseconds over [`SUBMIT_TO_RUNNING_BOUNDS_MS`].
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Per bucket (not cumulative); the last is +Inf.
    counts: [AtomicU64; SUBMIT_TO_RUNNING_BOUNDS_MS.len() + 1],
    sum_ms: AtomicU64,
}

/// A histogram as read: cumulative counts per upper bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatencySnapshot {
    /// (upper bound in ms, observations at or below it), ascending; the
    /// last bound is `u64::MAX` (+Inf) and its count is the total.
    pub buckets: Vec<(u64, u64)>,
    /// Sum of the observations, ms.
    pub sum_ms: u64,
    /// Number of observations.
    pub count: u64,
}

impl LatencyHistogram {
    /// One observation.
    pub fn observe(&self, ms: u64) {
        let i = SUBMIT_TO_RUNNING_BOUNDS_MS.iter().position(|b| ms <= *b).unwrap_or(SUBMIT_TO_RUNNING_BOUNDS_MS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// The figures now.
    pub fn snapshot(&self) -> LatencySnapshot {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(self.counts.len());
        for (i, c) in self.counts.iter().enumerate() {
            total += c.load(Ordering::Relaxed);
            buckets.push((SUBMIT_TO_RUNNING_BOUNDS_MS.get(i).copied().unwrap_or(u64::MAX), total));
        }
        LatencySnapshot { buckets, sum_ms: self.sum_ms.load(Ordering::Relaxed), count: total }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_cumulative_buckets() {
        let h = LatencyHistogram::default();
        for ms in [50, 100, 101, 4_000_000] {
            h.observe(ms);
        }
        let s = h.snapshot();
        assert_eq!((s.count, s.sum_ms), (4, 4_000_251));
        assert_eq!(s.buckets[0], (100, 2), "50 and 100 are at or below 100 ms");
        assert_eq!(s.buckets[1], (250, 3));
        assert_eq!(s.buckets[SUBMIT_TO_RUNNING_BOUNDS_MS.len() - 1], (3_600_000, 3));
        assert_eq!(*s.buckets.last().expect("+Inf"), (u64::MAX, 4));
    }
}
