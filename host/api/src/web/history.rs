//! The pools' CPU and memory entitlement and allocation over the last hour,
//! for the pool page's chart: one sample of every pool (the first
//! [`MAX_POOLS`]) every [`INTERVAL`], the newest [`KEEP`] kept in memory
//! (a restarted server starts a new hour). Read through `PoolService`, as
//! the page's own list is.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use paceline_proto::v1 as pb;
use paceline_proto::v1::pool_service_server::PoolService;
use tonic::Request;

use crate::pools::PoolApi;

/// Time between samples.
pub(super) const INTERVAL: Duration = Duration::from_secs(30);
/// Samples kept: an hour of them.
const KEEP: usize = 120;
/// Pools sampled, in the tree's order; a larger tree's others have no chart
/// (an hour of 1,000 pools is about 4 MB).
const MAX_POOLS: usize = 1_000;

/// Entitlement and allocation of one pool at one time: CPU millicores and
/// memory MiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Point {
    entitlement_cpu: u64,
    entitlement_memory: u64,
    allocation_cpu: u64,
    allocation_memory: u64,
}

/// The samples, oldest first.
#[derive(Debug, Default)]
pub(super) struct PoolHistory {
    samples: Mutex<VecDeque<(u64, HashMap<String, Point>)>>,
}

impl PoolHistory {
    fn record(&self, at_ms: u64, pools: &[pb::Pool]) {
        let point = |p: &pb::Pool| {
            let (e, a) = (p.entitlement.unwrap_or_default(), p.allocation.unwrap_or_default());
            Point {
                entitlement_cpu: e.cpu,
                entitlement_memory: e.memory,
                allocation_cpu: a.cpu,
                allocation_memory: a.memory,
            }
        };
        let sample = pools.iter().take(MAX_POOLS).map(|p| (p.path.clone(), point(p))).collect();
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.push_back((at_ms, sample));
        while samples.len() > KEEP {
            samples.pop_front();
        }
    }

    /// `path`'s samples as the page reads them, oldest first.
    pub(super) fn of(&self, path: &str) -> serde_json::Value {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let points: Vec<serde_json::Value> = samples
            .iter()
            .filter_map(|(at, pools)| {
                pools.get(path).map(|p| {
                    serde_json::json!({
                        "at_ms": at,
                        "entitlement": {"cpu": p.entitlement_cpu, "memory": p.entitlement_memory},
                        "allocation": {"cpu": p.allocation_cpu, "memory": p.allocation_memory},
                    })
                })
            })
            .collect();
        serde_json::json!({ "interval_ms": INTERVAL.as_millis() as u64, "samples": points })
    }
}

/// Samples now and every [`INTERVAL`] while `history` is alive (the web
/// routes hold it); without a tokio runtime there is nothing to run on and
/// no history.
pub(super) fn start(history: Weak<PoolHistory>, pools: PoolApi) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(INTERVAL);
        loop {
            tick.tick().await;
            let Some(history) = history.upgrade() else { return };
            match pools.list_pools(Request::new(pb::ListPoolsRequest {})).await {
                Ok(list) => history.record(crate::audit::now_ms(), &list.into_inner().pools),
                Err(e) => tracing::debug!(error = %e, "pool history: no sample"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(path: &str, alloc_cpu: u64) -> pb::Pool {
        pb::Pool {
            path: path.into(),
            entitlement: Some(pb::PerKind { cpu: 4000, memory: 8192, disk: 0, gpu: 0 }),
            allocation: Some(pb::PerKind { cpu: alloc_cpu, memory: 64, disk: 0, gpu: 0 }),
            ..Default::default()
        }
    }

    #[test]
    fn an_hour_of_samples_is_kept_per_pool_oldest_first() {
        let h = PoolHistory::default();
        for i in 0..(KEEP as u64 + 5) {
            h.record(i * 30_000, &[pool("/a", i), pool("/b", 1)]);
        }
        let a = h.of("/a");
        let samples = a["samples"].as_array().expect("samples");
        assert_eq!(samples.len(), KEEP, "the oldest went");
        assert_eq!(samples[0]["allocation"]["cpu"], 5);
        assert_eq!(samples[KEEP - 1]["at_ms"], (KEEP as u64 + 4) * 30_000);
        assert_eq!(samples[0]["entitlement"]["memory"], 8192);
        assert!(h.of("/nope")["samples"].as_array().is_some_and(Vec::is_empty));
    }
}
