//! Each plugin version's calls, latency and faults over the last hour, for
//! the slot page's charts: one sample of every slot's versions (the first
//! [`MAX_VERSIONS`]) every [`INTERVAL`](super::history::INTERVAL), the
//! newest [`KEEP`] kept in memory (a restarted server starts a new hour).
//! The figures are the registry's own counters as `ListPlugins` reports
//! them (calls and faults since the server started, p50/p99 of the
//! version's recent calls), read through `PluginService` as the page's own
//! list is.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, Weak};

use paceline_proto::v1 as pb;
use paceline_proto::v1::plugin_service_server::PluginService;
use tonic::Request;

use crate::plugins::PluginApi;

/// Samples kept: an hour of them.
const KEEP: usize = 120;
/// Versions sampled, all slots together, in the list's order (slots by
/// name, versions oldest first); later ones have no chart.
const MAX_VERSIONS: usize = 200;

/// One version's figures at one time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Point {
    calls: u64,
    p50_us: u64,
    p99_us: u64,
    faults: u64,
}

/// One sample: per slot, per version id, its figures.
type Sample = BTreeMap<String, BTreeMap<String, Point>>;

/// The samples, oldest first.
#[derive(Debug, Default)]
pub(super) struct PluginHistory {
    samples: Mutex<VecDeque<(u64, Sample)>>,
}

impl PluginHistory {
    fn record(&self, at_ms: u64, slots: &[pb::PluginSlot]) {
        let mut sample = Sample::new();
        let mut left = MAX_VERSIONS;
        for slot in slots {
            let versions = slot.versions.iter().take(left).map(|v| {
                let point =
                    Point { calls: v.calls, p50_us: v.p50_us, p99_us: v.p99_us, faults: v.errors.values().sum() };
                (v.id.clone(), point)
            });
            let versions: BTreeMap<String, Point> = versions.collect();
            left -= versions.len();
            sample.insert(slot.slot.clone(), versions);
        }
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.push_back((at_ms, sample));
        while samples.len() > KEEP {
            samples.pop_front();
        }
    }

    /// `slot`'s versions, each with its samples oldest first, as the page
    /// reads them: `{"interval_ms", "versions": [{"id", "samples": [{"at_ms",
    /// "calls", "p50_us", "p99_us", "faults"}]}]}` (versions by id).
    pub(super) fn of(&self, slot: &str) -> serde_json::Value {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let mut series: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
        for (at, sample) in samples.iter() {
            for (id, p) in sample.get(slot).into_iter().flatten() {
                series.entry(id).or_default().push(serde_json::json!({
                    "at_ms": at, "calls": p.calls, "p50_us": p.p50_us, "p99_us": p.p99_us, "faults": p.faults,
                }));
            }
        }
        let versions: Vec<serde_json::Value> =
            series.into_iter().map(|(id, samples)| serde_json::json!({ "id": id, "samples": samples })).collect();
        serde_json::json!({ "interval_ms": super::history::INTERVAL.as_millis() as u64, "versions": versions })
    }
}

/// Samples now and every interval while `history` is alive (the web routes
/// hold it); without a tokio runtime there is nothing to run on and no
/// history.
pub(super) fn start(history: Weak<PluginHistory>, plugins: PluginApi) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(super::history::INTERVAL);
        loop {
            tick.tick().await;
            let Some(history) = history.upgrade() else { return };
            match plugins.list_plugins(Request::new(pb::ListPluginsRequest {})).await {
                Ok(list) => history.record(crate::audit::now_ms(), &list.into_inner().slots),
                Err(e) => tracing::debug!(error = %e, "plugin history: no sample"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(name: &str, versions: &[(&str, u64)]) -> pb::PluginSlot {
        pb::PluginSlot {
            slot: name.into(),
            versions: versions
                .iter()
                .map(|(id, calls)| pb::PluginVersion {
                    id: id.to_string(),
                    calls: *calls,
                    p50_us: 10 * calls,
                    p99_us: 20 * calls,
                    errors: [("trap".to_string(), 1), ("deadline".to_string(), 2)].into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn an_hour_of_samples_is_kept_per_version_oldest_first() {
        let h = PluginHistory::default();
        for i in 0..(KEEP as u64 + 3) {
            // A version deployed later has a shorter series.
            let mut versions = vec![("binpack@1", i)];
            if i >= 100 {
                versions.push(("spread@2", i - 100));
            }
            h.record(i * 30_000, &[slot("placement/batch", &versions), slot("preemption", &[("p@1", 7)])]);
        }
        let got = h.of("placement/batch");
        let versions = got["versions"].as_array().expect("versions");
        assert_eq!(versions.len(), 2, "{got}");
        assert_eq!(versions[0]["id"], "binpack@1");
        let binpack = versions[0]["samples"].as_array().expect("samples");
        assert_eq!(binpack.len(), KEEP, "the oldest went");
        assert_eq!(binpack[0]["calls"], 3);
        assert_eq!(binpack[KEEP - 1]["at_ms"], (KEEP as u64 + 2) * 30_000);
        assert_eq!(binpack[KEEP - 1]["p99_us"], 20 * (KEEP as u64 + 2));
        assert_eq!(binpack[0]["faults"], 3, "faults of every kind, summed");
        let spread = versions[1]["samples"].as_array().expect("samples");
        assert_eq!(spread.len(), KEEP + 3 - 100);
        assert_eq!(got["interval_ms"], 30_000);
        assert!(h.of("lifecycle/batch")["versions"].as_array().is_some_and(Vec::is_empty));
    }

    #[test]
    fn at_most_max_versions_are_sampled() {
        let h = PluginHistory::default();
        let ids: Vec<String> = (0..MAX_VERSIONS + 5).map(|i| format!("v@{i:03}")).collect();
        let many: Vec<(&str, u64)> = ids.iter().map(|id| (id.as_str(), 1)).collect();
        h.record(0, &[slot("placement/a", &many), slot("placement/b", &[("x@1", 1)])]);
        assert_eq!(h.of("placement/a")["versions"].as_array().map(Vec::len), Some(MAX_VERSIONS));
        assert!(h.of("placement/b")["versions"].as_array().is_some_and(Vec::is_empty), "over the bound");
    }
}
