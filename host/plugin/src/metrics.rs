//! Per-version call metrics: calls, errors by kind, a latency histogram.
//! Lock-free counters, so recording costs a few atomic adds per call.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::FaultKind;

/// Upper bounds of the latency buckets, in microseconds (the last is open).
pub const LATENCY_BOUNDS_US: [u64; 16] =
    [2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 1_000_000];

/// Counters of one version.
#[derive(Debug, Default)]
pub struct VersionMetrics {
    calls: AtomicU64,
    errors: [AtomicU64; FaultKind::ALL.len()],
    buckets: [AtomicU64; LATENCY_BOUNDS_US.len() + 1],
    total_us: AtomicU64,
}

/// A copy of a version's metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MetricsSnapshot {
    /// Calls made.
    pub calls: u64,
    /// Failed calls by fault kind.
    pub errors: BTreeMap<String, u64>,
    /// (upper bound in µs, calls) per bucket; `u64::MAX` is the open bucket.
    pub latency_us: Vec<(u64, u64)>,
    /// Mean latency in µs.
    pub mean_us: u64,
    /// Bucket bound under which half the calls finished.
    pub p50_us: u64,
    /// Bucket bound under which 99% of the calls finished.
    pub p99_us: u64,
}

impl VersionMetrics {
    /// Records one call.
    pub fn record(&self, took: Duration, fault: Option<FaultKind>) {
        let us = took.as_micros().min(u128::from(u64::MAX)) as u64;
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.total_us.fetch_add(us, Ordering::Relaxed);
        let bucket = LATENCY_BOUNDS_US.iter().position(|&b| us <= b).unwrap_or(LATENCY_BOUNDS_US.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        if let Some(kind) = fault {
            let i = FaultKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records a fault found after the call had been counted (an answer
    /// refused downstream): an error of `kind`, no second call.
    pub fn record_fault(&self, kind: FaultKind) {
        let i = FaultKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.errors[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Errors of one kind so far.
    pub fn errors(&self, kind: FaultKind) -> u64 {
        let i = FaultKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        self.errors[i].load(Ordering::Relaxed)
    }

    /// Copies the counters.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let calls = self.calls.load(Ordering::Relaxed);
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let bound = |i: usize| LATENCY_BOUNDS_US.get(i).copied().unwrap_or(u64::MAX);
        let quantile = |q_per_mille: u64| {
            let target = (calls * q_per_mille).div_ceil(1000);
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= target && target > 0 {
                    return bound(i);
                }
            }
            0
        };
        MetricsSnapshot {
            calls,
            errors: FaultKind::ALL
                .iter()
                .zip(&self.errors)
                .map(|(k, c)| (k.as_str().to_string(), c.load(Ordering::Relaxed)))
                .filter(|(_, c)| *c > 0)
                .collect(),
            latency_us: counts.iter().enumerate().map(|(i, c)| (bound(i), *c)).collect(),
            mean_us: self.total_us.load(Ordering::Relaxed).checked_div(calls).unwrap_or(0),
            p50_us: quantile(500),
            p99_us: quantile(990),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_and_quantiles() {
        let m = VersionMetrics::default();
        for _ in 0..98 {
            m.record(Duration::from_micros(3), None);
        }
        m.record(Duration::from_millis(3), Some(FaultKind::Deadline));
        m.record(Duration::from_millis(3), Some(FaultKind::Panic));
        let s = m.snapshot();
        assert_eq!(s.calls, 100);
        assert_eq!(s.p50_us, 5);
        assert_eq!(s.p99_us, 5_000);
        assert_eq!(s.errors.get("deadline"), Some(&1));
        assert_eq!(s.errors.get("panic"), Some(&1));
        assert_eq!(m.errors(FaultKind::Trap), 0);
    }
}
