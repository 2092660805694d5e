//! All roles in one process: job manager → resource manager → placement
//! engine → host manager, and the events that flow back.
//!
//! [`Cluster`] only wires: each role is handed the others as the joints'
//! ports (`paceline-joints`), implemented by the roles themselves, so a
//! placement round never passes through here:
//! - the placement engine takes ready tasks from the job manager and commits
//!   placements to it (`ReadyQueue`), and leases offers from the host manager
//!   (`OfferSource`); the job manager launches through the host manager
//!   (`Launcher`);
//! - host events go to the job manager (run updates, acknowledged to the host
//!   manager only after the job manager has written them), and host joins,
//!   losses and maintenance changes update the resource manager's capacity
//!   and the job manager's view of hosts (daemon jobs, draining);
//! - the resource manager's ticks (admission, preemption) go to the job
//!   manager as kills.
//!
//! Two ways to drive it: [`Cluster::step`] runs one pass of every loop at a
//! given time (tests and simulations on a virtual clock), and
//! [`Cluster::spawn`] runs the loops in the background on the wall clock.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use paceline_hostmgr::{HostAccess, HostEvents};
use paceline_jobmgr::JobManager;
use paceline_placement::Engine;
use paceline_resmgr::ResourceManager;
use tokio::sync::Mutex as AsyncMutex;
use tracing::{debug, warn};

mod assemble;
use assemble::cluster_metrics;
mod host_events;

pub use assemble::{AssembleConfig, AssembleError};

/// The roles of one process and the joints between them.
pub struct Cluster {
    /// Host inventory and runs: the host manager in this process, or a
    /// client of one in its own process (`--roles hostmgr`).
    pub hosts: Arc<dyn HostAccess>,
    /// Jobs and tasks.
    pub jobs: Arc<JobManager>,
    /// Pools, admission, preemption.
    pub resmgr: Arc<Mutex<ResourceManager>>,
    /// Pool changes made durable: the one path every surface changes pools by.
    pub pools: Arc<paceline_jobmgr::PoolManager>,
    /// Placement rounds.
    pub engine: Arc<Engine>,
    /// Plugin slots.
    pub registry: Arc<paceline_plugin::Registry>,
    /// The store every role writes to.
    pub store: Arc<dyn paceline_storage::Store>,
    /// The process's Prometheus metrics over these roles; `None` when
    /// assembled with `no_metrics` (benchmarks comparing the cost).
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    events: AsyncMutex<HostEvents>,
    place_here: bool,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("hosts", &self.hosts).field("engine", &self.engine).finish_non_exhaustive()
    }
}

/// What one [`Cluster::step`] did, and where its time went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Host events handled.
    pub host_events: usize,
    /// Tasks placed.
    pub placed: usize,
    /// Kills the resource manager asked for.
    pub kills: usize,
    /// Wall time spent handling host events (run updates written, the
    /// lifecycle asked, inventory changes), both passes of the step.
    pub host_events_time: Duration,
    /// Wall time of the job manager's deadlines and the resource manager's
    /// tick (admission, preemption) and the kills it asked for.
    pub ticks_time: Duration,
    /// Wall time of the placement round, launches included (the job
    /// manager writes and launches placements inside the round).
    pub placement_time: Duration,
}

/// A step of the loops this long is logged at debug with where its time
/// went: one step is host events, ticks and a placement round in turn, so a
/// long one holds back everything queued behind it.
const SLOW_STEP: Duration = Duration::from_millis(250);

impl Cluster {
    /// Joins started roles. The host manager must already be subscribed to
    /// nothing else; the cluster takes its one subscription.
    pub fn new(
        hosts: Arc<dyn HostAccess>,
        jobs: Arc<JobManager>,
        resmgr: Arc<Mutex<ResourceManager>>,
        engine: Arc<Engine>,
        registry: Arc<paceline_plugin::Registry>,
        store: Arc<dyn paceline_storage::Store>,
    ) -> Cluster {
        let events = hosts.subscribe();
        let metrics = Some(Arc::new(cluster_metrics(&resmgr, &hosts, &registry, &jobs, false, Vec::new())));
        let pools = Arc::new(paceline_jobmgr::PoolManager::new(resmgr.clone(), store.clone()));
        Cluster {
            hosts,
            jobs,
            pools,
            resmgr,
            engine,
            registry,
            store,
            metrics,
            events: AsyncMutex::new(events),
            place_here: true,
        }
    }

    /// The roles the API serves.
    pub fn roles(&self) -> paceline_api::Roles {
        paceline_api::Roles {
            jobs: self.jobs.clone(),
            hosts: self.hosts.clone(),
            resmgr: self.resmgr.clone(),
            pools: self.pools.clone(),
            registry: self.registry.clone(),
            store: self.store.clone(),
        }
    }

    /// One pass of every loop at `now_ms`: host events, the job manager's
    /// deadlines, the resource manager's tick (admission, preemption), a
    /// placement round, and the host events that produced.
    pub async fn step(&self, now_ms: u64) -> StepReport {
        let started = Instant::now();
        let mut report = StepReport { host_events: self.pump_host_events().await, ..StepReport::default() };
        report.host_events_time = started.elapsed();
        let started = Instant::now();
        if let Err(e) = self.jobs.tick(now_ms).await {
            warn!(error = %e, "job manager tick failed");
        }
        let kills = match self.resmgr.lock() {
            Ok(mut rm) => rm.tick(now_ms).kills,
            Err(_) => Vec::new(),
        };
        report.kills = kills.len();
        if !kills.is_empty()
            && let Err(e) = self.jobs.on_resmgr_kills(kills).await
        {
            warn!(error = %e, "kills from the resource manager not handled");
        }
        report.ticks_time = started.elapsed();
        let started = Instant::now();
        if self.place_here {
            let round = self.engine.run_round(now_ms).await;
            if let Some(m) = &self.metrics {
                m.round(&round, started.elapsed());
            }
            report.placed = round.placed;
        }
        report.placement_time = started.elapsed();
        let started = Instant::now();
        report.host_events += self.pump_host_events().await;
        report.host_events_time += started.elapsed();
        report
    }

    /// Runs the loops in the background on the wall clock until the
    /// returned handle is aborted (or the process ends).
    pub fn spawn(self: &Arc<Self>, period: Duration) -> tokio::task::JoinHandle<()> {
        let cluster = self.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or_default();
                let step = cluster.step(now).await;
                let took = step.host_events_time + step.ticks_time + step.placement_time;
                if took >= SLOW_STEP {
                    debug!(
                        took_ms = took.as_millis() as u64,
                        host_events = step.host_events,
                        host_events_ms = step.host_events_time.as_millis() as u64,
                        ticks_ms = step.ticks_time.as_millis() as u64,
                        placed = step.placed,
                        placement_ms = step.placement_time.as_millis() as u64,
                        "slow step of the loops"
                    );
                }
            }
        })
    }
}
