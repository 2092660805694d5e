//! The round loop: take, feasible, select, commit (see the crate docs).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use paceline_joints::{EventSink, LeaseId, OfferSource, PortError, PortErrorKind, ReadyQueue, ReadyTask};
use paceline_model::UnplacedReason;
use paceline_model::job::JobKind;
use paceline_plugin::Registry;
use tracing::{debug, warn};

use crate::take::{self, Group};
use crate::{commit, feasible, select};

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
    /// How long the host manager keeps a lease before taking its hosts back
    /// (an engine that dies mid-round holds them no longer than this).
    pub lease_ttl: Duration,
    /// Tasks whose shapes make the workload mix handed to GPU-aware
    /// policies (`gpu-request.workload`): the last this many taken.
    pub workload_window: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            batch_size: 1_000,
            max_hosts_per_lease: 5_000,
            idle_interval: Duration::from_millis(50),
            lease_ttl: Duration::from_secs(30),
            workload_window: crate::workload::WINDOW,
        }
    }
}

/// What one round did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Tasks taken from the ready queues.
    pub taken: usize,
    /// Tasks committed and launched.
    pub placed: usize,
    /// Tasks sent back to the ready queue with a reason.
    pub unplaced: usize,
    /// Tasks committed whose host refused the launch (back to READY under a new run).
    pub refused: usize,
    /// Tasks placed that no longer waited at the commit (killed or preempted meanwhile).
    pub dropped: usize,
    /// Plugin calls made (one per group).
    pub plugin_calls: usize,
    /// Calls to the queue or the host side that failed (their tasks return
    /// to READY now, or after the PLACING timeout if even that failed).
    pub port_errors: usize,
    /// Hosts feasible for some task, summed over the round's plugin calls.
    pub hosts_feasible: usize,
    /// Hosts offered to the plugin, summed over the round's plugin calls
    /// (fewer than `hosts_feasible` where candidates were narrowed,
    /// decision 0054).
    pub hosts_offered: usize,
}

/// The placement engine. Stateless between rounds but for the workload
/// mix it hands GPU-aware policies (soft state: a restart starts it empty).
pub struct Engine {
    queue: Arc<dyn ReadyQueue>,
    offers: Arc<dyn OfferSource>,
    registry: Arc<Registry>,
    config: EngineConfig,
    round: AtomicU64,
    /// Where plugin fallbacks are noted as job events, if anywhere.
    events: Option<Arc<dyn EventSink>>,
    /// The shapes of the last tasks taken, for GPU-aware policies.
    workload: std::sync::Mutex<crate::workload::WorkloadMix>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("config", &self.config).field("round", &self.round).finish_non_exhaustive()
    }
}

/// The order kinds are served in each round: the stickiest first.
const KINDS: [JobKind; 4] = [JobKind::Stateful, JobKind::Daemon, JobKind::Stateless, JobKind::Batch];

impl Engine {
    /// An engine over a ready queue and an offer source, in this process or
    /// another, placing through `registry`'s slots.
    pub fn new(
        queue: Arc<dyn ReadyQueue>,
        offers: Arc<dyn OfferSource>,
        registry: Arc<Registry>,
        config: EngineConfig,
    ) -> Engine {
        let workload = std::sync::Mutex::new(crate::workload::WorkloadMix::with_window(config.workload_window));
        Engine { queue, offers, registry, config, round: AtomicU64::new(0), events: None, workload }
    }

    /// Notes a `PluginFellBack` event on each job of a group whose placement
    /// call was answered by a fallback (decision 0025).
    pub fn with_events(mut self, sink: Arc<dyn EventSink>) -> Engine {
        self.events = Some(sink);
        self
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
            let taken = match self.queue.take_ready(kind, self.config.batch_size, now_ms).await {
                Ok(taken) => taken,
                Err(e) => {
                    warn!(kind = kind.as_str(), error = %e, "taking ready tasks failed; nothing taken");
                    report.port_errors += 1;
                    continue;
                }
            };
            report.taken += taken.ready.len() + taken.orphans.len();
            if let Ok(mut mix) = self.workload.lock() {
                for (t, _) in &taken.ready {
                    mix.observe(t.id.0, &t.resources);
                }
            }
            // A task whose job is gone cannot be placed; deferring it lets the
            // job manager's cleanup (or a recreated job) decide its fate.
            self.send_back(taken.orphans.iter().map(|t| (t, UnplacedReason::Deferred)), now_ms, &mut report).await;
            for group in take::by_slot(taken.ready) {
                self.place_group(group, now_ms, &mut report).await;
            }
        }
        report
    }

    /// Feasible → select → commit for one group, under one lease.
    async fn place_group(&self, group: Group, now_ms: u64, report: &mut RoundReport) {
        let ttl_ms = u64::try_from(self.config.lease_ttl.as_millis()).unwrap_or(u64::MAX);
        let mut request = feasible::lease_request_for(
            group.tasks.iter().map(|(t, n)| (&t.resources, n)),
            self.config.max_hosts_per_lease,
            ttl_ms,
        );
        if let Some(host) = &group.pinned_to {
            request.only_hosts = vec![host.clone()];
        }
        let all = |reason: UnplacedReason| group.tasks.iter().map(move |(t, _)| (t, reason));
        let lease = match self.offers.lease(&request).await {
            Ok(lease) => lease,
            Err(e) => {
                warn!(slot = %group.slot, error = %e, "lease failed; tasks go back to the queue");
                report.port_errors += 1;
                self.send_back(all(lease_failure_reason(&e)), now_ms, report).await;
                return;
            }
        };
        if lease.hosts.is_empty() {
            self.release(lease.id).await;
            let reason = if request.constraints.is_empty() {
                UnplacedReason::InsufficientResources
            } else {
                UnplacedReason::ConstraintsUnsatisfiable
            };
            self.send_back(all(reason), now_ms, report).await;
            return;
        }

        let round = self.round.fetch_add(1, Ordering::Relaxed);
        // The workload mix goes with the round's GPU side (see feasible.rs).
        let gpu_side = group.tasks.iter().any(|(t, _)| t.resources.gpu_milli > 0)
            || lease.hosts.iter().any(|h| !h.gpus.is_empty());
        let workload =
            if gpu_side { self.workload.lock().map(|m| m.classes()).unwrap_or_default() } else { Vec::new() };
        let answer = select::place(&self.registry, &group.slot, &group.tasks, &lease, round, workload).await;
        report.plugin_calls += 1;
        let Some(select::Selected { result, fell_back, feasible, offered }) = answer else {
            self.release(lease.id).await;
            self.send_back(all(UnplacedReason::Deferred), now_ms, report).await;
            return;
        };
        report.hosts_feasible += feasible;
        report.hosts_offered += offered;
        if let (Some(f), Some(sink)) = (&fell_back, &self.events) {
            note_fallback(sink.as_ref(), &group, f, now_ms);
        }

        let outcome = commit::outcome(&group.tasks, &lease.hosts, &result);
        if !outcome.placements.is_empty() {
            match self.queue.commit(lease.id, outcome.placements, now_ms).await {
                Ok(c) => {
                    report.placed += c.launched as usize;
                    report.refused += c.refused as usize;
                    report.dropped += c.dropped as usize;
                }
                Err(e) => {
                    warn!(lease = %lease.id, error = %e, "commit failed; the tasks return to READY after the PLACING timeout");
                    report.port_errors += 1;
                }
            }
        }
        if !outcome.unplaced.is_empty() {
            match self.queue.unplaced(&outcome.unplaced, now_ms).await {
                Ok(n) => report.unplaced += n,
                Err(e) => {
                    warn!(error = %e, "sending tasks back failed; they return to READY after the PLACING timeout");
                    report.port_errors += 1;
                }
            }
        }
        self.release(lease.id).await;
    }

    async fn release(&self, lease: LeaseId) {
        if let Err(e) = self.offers.release(lease).await {
            debug!(%lease, error = %e, "lease already gone; it expires on its own");
        }
    }

    async fn send_back<'a>(
        &self,
        tasks: impl Iterator<Item = (&'a ReadyTask, UnplacedReason)>,
        now_ms: u64,
        report: &mut RoundReport,
    ) {
        let back: Vec<_> = tasks.map(|(t, reason)| (t.id, reason)).collect();
        if back.is_empty() {
            return;
        }
        match self.queue.unplaced(&back, now_ms).await {
            Ok(n) => report.unplaced += n,
            Err(e) => {
                warn!(error = %e, "sending tasks back failed; they return to READY after the PLACING timeout");
                report.port_errors += 1;
            }
        }
    }
}

/// Why a group goes back when its lease failed. Unreachable (down, failing
/// over, not leading): nothing about the tasks was tried, so it is no
/// placement attempt and the resource manager retries them shortly without
/// backing off (decision 0040). Refused: the same request would fail again,
/// so the tasks back off as after any attempt.
fn lease_failure_reason(e: &PortError) -> UnplacedReason {
    match e.kind {
        PortErrorKind::Unavailable => UnplacedReason::HostManagerUnreachable,
        PortErrorKind::Refused => UnplacedReason::Deferred,
    }
}

/// One `PluginFellBack` event per job of the group. A job's tasks are
/// mostly adjacent in a group (admission order), so comparing with the
/// previous task's job notes most jobs once; a job noted twice only has its
/// event's count raised.
fn note_fallback(sink: &dyn EventSink, group: &Group, f: &select::FellBack, now_ms: u64) {
    let mut last: Option<&str> = None;
    for (_, need) in &group.tasks {
        if last == Some(need.job_id.as_str()) {
            continue;
        }
        last = Some(&need.job_id);
        sink.record(
            &need.job_id,
            None,
            paceline_model::event::EventReason::PluginFellBack,
            format_args!(
                "placement plugin {} failed ({}) on slot {}; answered by {}",
                f.failed, f.fault, group.slot, f.served_by
            ),
            now_ms,
        );
    }
}
