//! The round loop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paceline_model::view::{TaskView, build_placement_request};
use paceline_plugin::Registry;
use paceline_plugin_sdk::types::JobKind;
use paceline_plugin_sdk::types::{PlacementResult, UnplacedReason};
use paceline_resmgr::{ReadyTask, ResourceManager};
use tracing::warn;

use crate::group::{self, Group};
use crate::{LocalQueue, Need, NeedSource, OfferSource, Placement, PlacementSink, ReadyQueue, lease_request_for};

/// Tuning of the engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Most tasks taken per job kind per round (gangs are never split, so a
    /// round may run past this to finish one).
    pub batch_size: usize,
    /// Most hosts leased for one group.
    pub max_hosts_per_lease: usize,
    /// Pause between rounds that found nothing to do.
    pub idle_interval: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { batch_size: 1_000, max_hosts_per_lease: 5_000, idle_interval: Duration::from_millis(50) }
    }
}

/// What one round did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Tasks taken from the ready queues.
    pub taken: usize,
    /// Tasks placed and handed to the job manager.
    pub placed: usize,
    /// Tasks sent back to the resource manager with a reason.
    pub unplaced: usize,
    /// Plugin calls made (one per group).
    pub plugin_calls: usize,
    /// Leases that failed (their tasks went back to the queue).
    pub lease_errors: usize,
}

/// The placement engine. Stateless between rounds; see the crate docs.
pub struct Engine {
    queue: Arc<dyn ReadyQueue>,
    registry: Arc<Registry>,
    offers: Arc<dyn OfferSource>,
    sink: Arc<dyn PlacementSink>,
    config: EngineConfig,
    round: AtomicU64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("config", &self.config).field("round", &self.round).finish_non_exhaustive()
    }
}

const KINDS: [JobKind; 4] = [JobKind::Stateful, JobKind::Daemon, JobKind::Stateless, JobKind::Batch];

impl Engine {
    /// An engine over the roles of this process (`jobs` both answers needs
    /// and launches).
    pub fn new<J: NeedSource + PlacementSink + 'static>(
        resmgr: Arc<Mutex<ResourceManager>>,
        registry: Arc<Registry>,
        offers: Arc<dyn OfferSource>,
        jobs: Arc<J>,
        config: EngineConfig,
    ) -> Engine {
        let queue = Arc::new(LocalQueue::new(resmgr, jobs.clone()));
        let sink: Arc<dyn PlacementSink> = jobs;
        Engine::with_queue(queue, registry, offers, sink, config)
    }

    /// An engine over any queue, host side and job side (in-process or remote).
    pub fn with_queue(
        queue: Arc<dyn ReadyQueue>,
        registry: Arc<Registry>,
        offers: Arc<dyn OfferSource>,
        sink: Arc<dyn PlacementSink>,
        config: EngineConfig,
    ) -> Engine {
        Engine { queue, registry, offers, sink, config, round: AtomicU64::new(0) }
    }

    /// Runs rounds until `shutdown` resolves; `now_ms` gives the clock.
    pub async fn run(
        self: Arc<Self>,
        now_ms: impl Fn() -> u64 + Send + Sync,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        loop {
            let report = self.run_round(now_ms()).await;
            let pause = if report.taken == 0 { self.config.idle_interval } else { Duration::ZERO };
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One round over every job kind.
    pub async fn run_round(&self, now_ms: u64) -> RoundReport {
        let mut report = RoundReport::default();
        for kind in KINDS {
            let taken = self.queue.take_ready(kind, self.config.batch_size, now_ms).await;
            if taken.ready.is_empty() && taken.orphans.is_empty() {
                continue;
            }
            report.taken += taken.ready.len() + taken.orphans.len();
            // A task whose job is gone cannot be placed; deferring it lets the
            // job manager's cleanup (or a recreated job) decide its fate.
            self.send_back(taken.orphans.iter().map(|t| (t, UnplacedReason::Deferred)), now_ms, &mut report).await;
            let batch = taken.ready;
            for group in group::by_slot(batch) {
                self.place_group(group, now_ms, &mut report).await;
            }
        }
        report
    }

    async fn place_group(&self, group: Group, now_ms: u64, report: &mut RoundReport) {
        let mut request =
            lease_request_for(group.tasks.iter().map(|(t, n)| (&t.resources, n)), self.config.max_hosts_per_lease);
        if let Some(host) = &group.pinned_to {
            request.only_hosts = vec![host.clone()];
        }
        let lease = match self.offers.lease(&request).await {
            Ok(lease) => lease,
            Err(e) => {
                warn!(slot = %group.slot, error = %e, "lease failed; tasks go back to the queue");
                report.lease_errors += 1;
                self.send_back(group.tasks.iter().map(|(t, _)| (t, UnplacedReason::Deferred)), now_ms, report).await;
                return;
            }
        };
        if lease.hosts.is_empty() {
            self.offers.release(&lease.id).await;
            let reason = if request.constraints.is_empty() {
                UnplacedReason::InsufficientResources
            } else {
                UnplacedReason::ConstraintsUnsatisfiable
            };
            self.send_back(group.tasks.iter().map(|(t, _)| (t, reason)), now_ms, report).await;
            return;
        }

        let views = task_views(&group.tasks);
        let round = self.round.fetch_add(1, Ordering::Relaxed);
        let plugin_request = build_placement_request(round, &lease.hosts, &views);
        let registry = self.registry.clone();
        let slot = group.slot.clone();
        // Wasm calls are synchronous and bounded by the runtime's deadline.
        let answer = tokio::task::spawn_blocking(move || registry.place(&slot, &plugin_request)).await;
        report.plugin_calls += 1;
        let result: PlacementResult = match answer {
            Ok(Ok(a)) => {
                if !a.faults.is_empty() {
                    warn!(slot = %group.slot, served_by = ?a.served_by, faults = a.faults.len(), "placement fell back");
                }
                a.value
            }
            Ok(Err(e)) => {
                warn!(slot = %group.slot, error = %e, "placement slot failed");
                self.offers.release(&lease.id).await;
                self.send_back(group.tasks.iter().map(|(t, _)| (t, UnplacedReason::Deferred)), now_ms, report).await;
                return;
            }
            Err(e) => {
                warn!(slot = %group.slot, error = %e, "placement call panicked");
                self.offers.release(&lease.id).await;
                self.send_back(group.tasks.iter().map(|(t, _)| (t, UnplacedReason::Deferred)), now_ms, report).await;
                return;
            }
        };

        // Indices were validated by the registry against this request.
        let chosen: Vec<(&ReadyTask, &str)> = result
            .assignments
            .iter()
            .filter_map(|a| {
                Some((&group.tasks.get(a.task as usize)?.0, lease.hosts.get(a.host as usize)?.name.as_str()))
            })
            .collect();
        let ids: Vec<_> = chosen.iter().map(|(t, _)| t.id).collect();
        let still = self.queue.placed(&ids, now_ms).await;
        // A task killed or preempted while we decided is skipped.
        let placements: Vec<Placement> = chosen
            .into_iter()
            .zip(still)
            .filter(|(_, ok)| *ok)
            .map(|((task, host), _)| Placement { task: *task, host: host.to_string() })
            .collect();
        let unplaced: Vec<_> =
            result.unplaced.iter().filter_map(|u| Some((group.tasks.get(u.task as usize)?.0.id, u.reason))).collect();
        if !unplaced.is_empty() {
            self.queue.unplaced(&unplaced, now_ms).await;
            report.unplaced += unplaced.len();
        }
        report.placed += placements.len();
        if !placements.is_empty() {
            self.sink.placed(&lease.id, placements).await;
        }
        self.offers.release(&lease.id).await;
    }

    async fn send_back<'a>(
        &self,
        tasks: impl Iterator<Item = (&'a ReadyTask, UnplacedReason)>,
        now_ms: u64,
        report: &mut RoundReport,
    ) {
        let back: Vec<_> = tasks.map(|(t, reason)| (t.id, reason)).collect();
        if !back.is_empty() {
            report.unplaced += self.queue.unplaced(&back, now_ms).await;
        }
    }
}

/// The plugin's view of a group's tasks; gang ids renumbered densely.
fn task_views(tasks: &[(ReadyTask, Need)]) -> Vec<TaskView> {
    let mut gangs: HashMap<u64, u32> = HashMap::new();
    tasks
        .iter()
        .map(|(t, need)| {
            let next = gangs.len() as u32;
            let gang = *gangs.entry(t.gang).or_insert(next);
            TaskView {
                job: need.job_id.clone(),
                instance: t.instance,
                gang,
                priority: t.priority,
                demand: t.resources,
                constraints: need.spec.constraints.clone(),
                preferences: need.spec.preferences.clone(),
                preferred_host: need.preferred_host.clone(),
                avoid_host: need.avoid_host.clone(),
            }
        })
        .collect()
}
