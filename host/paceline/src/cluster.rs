//! All roles in one process: job manager → resource manager → placement
//! engine → host manager, and the events that flow back.
//!
//! [`Cluster`] owns the roles and the joints between them:
//! - the placement engine leases offers from the host manager
//!   ([`HostOffers`]) and hands placements to the job manager
//!   ([`JobSink`]), which launches through the host manager
//!   ([`HostLauncher`]);
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

use async_trait::async_trait;
use paceline_hostmgr::{HostAccess, HostEvent, HostEvents, LeaseId};
use paceline_jobmgr::{JobManager, TaskLauncher};
use paceline_model::Resources;
use paceline_placement::{
    Engine, Lease, LeaseRequest, Need, NeedSource, OfferError, OfferSource, Placement, PlacementSink,
};
use paceline_resmgr::ResourceManager;
use tokio::sync::Mutex as AsyncMutex;
use tracing::{debug, warn};

/// How long an engine may hold a lease before the host manager takes the hosts back.
const LEASE_TTL_MS: u64 = 30_000;

/// The host manager as the placement engine's offer source.
#[derive(Debug, Clone)]
pub struct HostOffers(pub Arc<dyn HostAccess>);

#[async_trait]
impl OfferSource for HostOffers {
    async fn lease(&self, request: &LeaseRequest) -> Result<Lease, OfferError> {
        let mut req = paceline_hostmgr::LeaseRequest::new(request.min_free, request.max_hosts.max(1), LEASE_TTL_MS);
        req.constraints = request.constraints.clone();
        req.only_hosts = request.only_hosts.clone();
        req.prefer_hosts = request.include_hosts.clone();
        let lease = self.0.lease(&req).await.map_err(|e| OfferError(e.to_string()))?;
        Ok(Lease { id: lease.id.0.to_string(), hosts: lease.offers })
    }

    async fn release(&self, lease_id: &str) {
        let Ok(id) = lease_id.parse::<u64>() else { return };
        if let Err(e) = self.0.release(LeaseId(id)).await {
            debug!(lease_id, error = %e, "lease already gone");
        }
    }
}

/// The host manager as the job manager's launcher.
#[derive(Debug, Clone)]
pub struct HostLauncher(pub Arc<dyn HostAccess>);

#[async_trait]
impl TaskLauncher for HostLauncher {
    async fn launch(
        &self,
        lease_id: &str,
        host: &str,
        runs: Vec<paceline_model::run::LaunchRequest>,
    ) -> Result<(), String> {
        let id = lease_id.parse::<u64>().map_err(|_| format!("lease id `{lease_id}` is not one of ours"))?;
        self.0.launch(LeaseId(id), host, runs).await.map_err(|e| e.to_string())
    }

    async fn kill(&self, _host: &str, run_id: &str, grace_secs: Option<u32>) -> Result<(), String> {
        self.0
            .kill_with_grace(run_id, grace_secs.map(|s| Duration::from_secs(u64::from(s))))
            .await
            .map_err(|e| e.to_string())
    }
}

/// The job manager as the placement engine's sink.
#[derive(Debug, Clone)]
pub struct JobSink(pub Arc<JobManager>);

impl NeedSource for JobSink {
    fn need(&self, job_key: u64, instance: u32) -> Option<Need> {
        let n = self.0.placement_need(job_key, instance)?;
        Some(Need {
            job_id: n.job_id,
            spec: n.spec,
            preferred_host: n.preferred_host,
            host_required: n.host_required,
            slot: n.placement_slot,
            avoid_host: n.avoid_host,
        })
    }
}

#[async_trait]
impl PlacementSink for JobSink {
    async fn placed(&self, lease_id: &str, placements: Vec<Placement>) {
        let placements = placements
            .into_iter()
            .map(|p| paceline_jobmgr::Placement {
                job_key: p.task.job,
                instance: p.task.instance,
                resmgr_task: p.task.id,
                host: p.host,
            })
            .collect();
        self.0.on_placed(lease_id, placements).await;
    }
}

/// The job manager's clock reading a simulator's virtual clock, so that
/// deadlines, backoffs and run times follow simulated time.
#[derive(Debug, Clone)]
pub struct SimTime(pub paceline_hostmgr::ManualClock);

impl paceline_jobmgr::Clock for SimTime {
    fn now_ms(&self) -> u64 {
        paceline_hostmgr::Clock::now_ms(&self.0)
    }
}

/// The roles of one process and the joints between them.
pub struct Cluster {
    /// Host inventory and runs: the host manager in this process, or a
    /// client of one in its own process (`--roles hostmgr`).
    pub hosts: Arc<dyn HostAccess>,
    /// Jobs and tasks.
    pub jobs: Arc<JobManager>,
    /// Pools, admission, preemption.
    pub resmgr: Arc<Mutex<ResourceManager>>,
    /// Placement rounds.
    pub engine: Arc<Engine>,
    /// Plugin slots.
    pub registry: Arc<paceline_plugin::Registry>,
    /// The store every role writes to.
    pub store: Arc<dyn paceline_storage::Store>,
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
        Cluster { hosts, jobs, resmgr, engine, registry, store, events: AsyncMutex::new(events), place_here: true }
    }

    /// The roles the API serves.
    pub fn roles(&self) -> paceline_api::Roles {
        paceline_api::Roles {
            jobs: self.jobs.clone(),
            hosts: self.hosts.clone(),
            resmgr: self.resmgr.clone(),
            registry: self.registry.clone(),
            store: self.store.clone(),
        }
    }

    /// Handles every host event waiting now; returns how many. Inventory
    /// changes are applied once per call, not once per event: a cluster
    /// starting with thousands of hosts registers them in one burst, and
    /// recomputing per event would be quadratic.
    pub async fn pump_host_events(&self) -> usize {
        let mut events = self.events.lock().await;
        let mut n = 0;
        let mut inventory_changed = false;
        let mut draining = Vec::new();
        let mut runs = Vec::new();
        while let Some(ev) = events.try_recv() {
            n += 1;
            match ev {
                HostEvent::Run(update) => runs.push(update),
                HostEvent::HostJoined { .. } | HostEvent::HostLeft { .. } => inventory_changed = true,
                HostEvent::HostStateChanged { host, to, .. } => {
                    inventory_changed = true;
                    if to == paceline_model::host::MaintenanceState::Draining {
                        draining.push(host);
                    }
                }
            }
        }
        // One call for the whole burst: the job manager writes each job's
        // updates together. Each is acknowledged only once it is written.
        if !runs.is_empty() {
            let results = self.jobs.on_run_updates(&runs).await;
            let mut written = Vec::with_capacity(runs.len());
            for (update, result) in runs.into_iter().zip(results) {
                match result {
                    Ok(()) => written.push((update.run_id, update.seq)),
                    Err(e) => {
                        warn!(run = update.run_id, seq = update.seq, error = %e, "run update not handled; it will come again")
                    }
                }
            }
            // One call for the burst (one round trip to a host manager in its own process).
            self.hosts.acknowledge_all(&written).await;
        }
        if inventory_changed {
            self.hosts_changed().await;
        }
        for host in draining {
            self.jobs.on_host_draining(&host).await;
        }
        n
    }

    /// Recomputes capacity from the inventory and tells the job manager which hosts take tasks.
    async fn hosts_changed(&self) {
        let infos = self.hosts.hosts();
        let mut total = Resources::default();
        let mut view = Vec::with_capacity(infos.len());
        for h in &infos {
            let accepts = h.reachable && h.state.accepts_tasks();
            if accepts {
                total = total.saturating_add(&h.view.total);
            }
            view.push((h.view.name.clone(), h.view.attributes.clone(), accepts));
        }
        if let Ok(mut rm) = self.resmgr.lock() {
            rm.set_capacity(total);
        }
        self.jobs.on_hosts_changed(view).await;
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
            report.placed = self.engine.run_round(now_ms).await.placed;
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
                cluster.step(now).await;
            }
        })
    }
}

/// The runs the job manager's records place on hosts, as the host manager's
/// expectations (reconciliation after a restart or a failover).
pub fn expected_runs(jobs: &JobManager) -> Vec<paceline_hostmgr::ExpectedRun> {
    jobs.expected_runs()
        .into_iter()
        .map(|(host, run_id, resources, last_seq)| paceline_hostmgr::ExpectedRun {
            task_id: run_id.rsplit_once('-').map(|(t, _)| t.to_string()).unwrap_or_default(),
            host,
            run_id,
            resources,
            last_seq,
        })
        .collect()
}

/// A wiring step that failed.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    /// The plugin registry refused something.
    #[error("plugins: {0}")]
    Plugin(#[from] paceline_plugin::PluginError),
    /// The job manager could not recover its jobs.
    #[error("job manager recovery: {0}")]
    Jobs(#[from] paceline_jobmgr::JobError),
    /// A background step panicked.
    #[error("{0}")]
    Join(String),
}

/// Settings of [`Cluster::assemble`].
#[derive(Clone, Debug, Default)]
pub struct AssembleConfig {
    /// Resource manager settings.
    pub resmgr: paceline_resmgr::Config,
    /// Placement engine settings.
    pub engine: paceline_placement::EngineConfig,
    /// Job manager settings.
    pub jobs: paceline_jobmgr::JobManagerConfig,
    /// Deploy the built-in Wasm policies into empty slots.
    pub install_default_plugins: bool,
    /// Run no placement round in [`Cluster::step`]: placement engines run in
    /// other processes (`--roles jobmgr,resmgr,hostmgr`) and reach this
    /// cluster through [`crate::placement_peer`].
    pub no_placement: bool,
}

impl Cluster {
    /// Builds the job manager, resource manager and placement engine over a
    /// started host manager, a store and a plugin registry; recovers every
    /// live job from the store and tells the host manager which runs to
    /// expect (for reconciliation), then takes the host manager's event
    /// subscription. Pools must be created on [`Cluster::resmgr`] before
    /// jobs that use them (recovered jobs need theirs first: see
    /// `pools_before_recovery`).
    pub async fn assemble(
        store: Arc<dyn paceline_storage::Store>,
        registry: Arc<paceline_plugin::Registry>,
        hosts: impl Into<Arc<dyn HostAccess>>,
        clock: Arc<dyn paceline_jobmgr::Clock>,
        config: AssembleConfig,
        pools_before_recovery: impl FnOnce(&mut ResourceManager),
    ) -> Result<Arc<Cluster>, AssembleError> {
        let hosts: Arc<dyn HostAccess> = hosts.into();
        paceline_jobmgr::plugins::register_native_lifecycles(&registry)?;
        if config.install_default_plugins {
            let r = registry.clone();
            tokio::task::spawn_blocking(move || crate::wiring::install_default_plugins(&r))
                .await
                .map_err(|e| AssembleError::Join(e.to_string()))??;
        }
        let mut rm = ResourceManager::new(config.resmgr);
        rm.set_policy(Box::new(crate::wiring::SlotPreemption::new(registry.clone())));
        pools_before_recovery(&mut rm);
        let resmgr = Arc::new(Mutex::new(rm));
        let jobs = Arc::new(paceline_jobmgr::JobManager::new(
            store.clone(),
            resmgr.clone(),
            registry.clone(),
            Arc::new(HostLauncher(hosts.clone())),
            clock,
            config.jobs,
        ));
        jobs.recover().await?;
        hosts.expect_runs(expected_runs(&jobs)).await;
        let engine = Arc::new(Engine::new(
            resmgr.clone(),
            registry.clone(),
            Arc::new(HostOffers(hosts.clone())),
            Arc::new(JobSink(jobs.clone())),
            config.engine,
        ));
        let mut cluster = Cluster::new(hosts, jobs, resmgr, engine, registry, store);
        cluster.place_here = !config.no_placement;
        let cluster = Arc::new(cluster);
        cluster.hosts_changed().await;
        Ok(cluster)
    }
}
