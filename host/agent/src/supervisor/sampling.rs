//! Measured use of the running runs ([`crate::usage`]): one sampling pass
//! over all of them, and the latest figures for the heartbeat.

use std::time::Duration;

use paceline_proto::agent::v1 as pb;

use super::{Supervisor, lock, now_ms};
use crate::record::Phase;
use crate::usage::Target;

impl Supervisor {
    /// Samples every running run once (blocking file reads: call it off
    /// the async workers, e.g. in `spawn_blocking`).
    pub fn sample_usage(&self) {
        let targets: Vec<Target> = lock(&self.inner.state)
            .runs
            .values()
            .filter(|e| e.record.phase == Phase::Running)
            .filter_map(|e| {
                Some(Target {
                    run_id: e.record.spec.run_id.clone(),
                    pgid: e.record.pid?,
                    cgroup: e.record.cgroup.clone(),
                })
            })
            .collect();
        let mono_us = self.inner.started.elapsed().as_micros() as u64;
        lock(&self.inner.usage).sample(&targets, mono_us, now_ms());
    }

    /// The latest measured use of each running run sampled at least twice,
    /// by run id.
    pub fn usage(&self) -> Vec<pb::RunUsage> {
        let mut out: Vec<pb::RunUsage> = lock(&self.inner.usage)
            .latest()
            .map(|(run_id, u)| pb::RunUsage {
                run_id: run_id.clone(),
                cpu_millis: u.cpu_millis,
                memory_mib: u.memory_mib,
                sampled_at_ms: u.sampled_at_ms,
            })
            .collect();
        out.sort_by(|a, b| a.run_id.cmp(&b.run_id));
        out
    }

    /// Samples every `interval` until aborted (the session's `serve` owns it).
    pub async fn sample_usage_every(self, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let sup = self.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || sup.sample_usage()).await {
                tracing::warn!(error = %e, "sampling the runs' use");
            }
        }
    }
}
