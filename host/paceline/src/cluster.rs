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

use paceline_hostmgr::{HostAccess, HostEvent, HostEvents};
use paceline_jobmgr::JobManager;
use paceline_model::Resources;
use paceline_placement::Engine;
use paceline_resmgr::ResourceManager;
use tokio::sync::Mutex as AsyncMutex;
use tracing::warn;

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
        Cluster {
            hosts,
            jobs,
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
        let mut joined = Vec::new();
        let mut draining = Vec::new();
        let mut runs = Vec::new();
        while let Some(ev) = events.try_recv() {
            n += 1;
            match ev {
                HostEvent::Run(update) => runs.push(update),
                HostEvent::HostJoined { host, total, .. } => {
                    inventory_changed = true;
                    joined.push((host, total));
                }
                HostEvent::HostLeft { .. } => inventory_changed = true,
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
        let run_updates = runs.len();
        let mut failed = 0;
        if !runs.is_empty() {
            let results = self.jobs.on_run_updates(&runs).await;
            let mut written = Vec::with_capacity(runs.len());
            for (update, result) in runs.into_iter().zip(results) {
                match result {
                    Ok(()) => written.push((update.run_id, update.seq)),
                    Err(e) => {
                        failed += 1;
                        warn!(run = update.run_id, seq = update.seq, error = %e, "run update not handled; it will come again")
                    }
                }
            }
            // One call for the burst (one round trip to a host manager in its own process).
            self.hosts.acknowledge_all(&written).await;
        }
        if inventory_changed {
            let room = self.hosts_changed(&joined).await;
            // Hosts (re)joined: tasks backing off that one of them could take
            // go back to READY now, the rest keep their backoff (after a host
            // manager's failover every host joins again).
            if !joined.is_empty()
                && let Ok(mut rm) = self.resmgr.lock()
            {
                let back = rm.retry_backed_off(&room);
                tracing::debug!(joined = joined.len(), back, "backed-off tasks re-offered after hosts joined");
            }
        }
        for host in draining {
            self.jobs.on_host_draining(&host).await;
        }
        if let Some(m) = &self.metrics
            && n > 0
        {
            m.host_events(n, run_updates, failed);
        }
        n
    }

    /// Recomputes capacity from the inventory and tells the job manager which
    /// hosts take tasks. Returns the most any one of the `joined` hosts (name,
    /// capacity) could take, kind by kind: the component-wise maximum of
    /// their free resources, so a task that fits none of them does not fit
    /// it either. A joined host that does not take tasks (draining, gone
    /// again) adds nothing; one the inventory does not list yet adds its
    /// whole capacity, erring towards a retry.
    async fn hosts_changed(&self, joined: &[(String, Resources)]) -> Resources {
        let infos = self.hosts.hosts();
        let mut unseen: std::collections::HashMap<&str, Resources> =
            joined.iter().map(|(name, total)| (name.as_str(), *total)).collect();
        let mut total = Resources::default();
        let mut room = Resources::default();
        let mut view = Vec::with_capacity(infos.len());
        for h in &infos {
            let accepts = h.reachable && h.state.accepts_tasks();
            let was_joined = !unseen.is_empty() && unseen.remove(h.view.name.as_str()).is_some();
            if accepts {
                total = total.saturating_add(&h.view.total);
                if was_joined {
                    room = room.max(&h.view.free());
                }
            }
            view.push((h.view.name.clone(), h.view.attributes.clone(), accepts));
        }
        for capacity in unseen.values() {
            room = room.max(capacity);
        }
        if let Ok(mut rm) = self.resmgr.lock() {
            rm.set_capacity(total);
        }
        self.jobs.on_hosts_changed(view).await;
        // A drain that was under way when this job manager started (after a
        // restart or a failover): the host manager restored DRAINING, and
        // the job manager must go on moving the host's instances (decision 0046).
        for h in &infos {
            if h.state == paceline_model::host::MaintenanceState::Draining && !self.jobs.is_draining(&h.view.name) {
                self.jobs.on_host_draining(&h.view.name).await;
            }
        }
        room
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
                cluster.step(now).await;
            }
        })
    }
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
    /// cluster through `paceline_placement::remote`.
    pub no_placement: bool,
    /// Keep no metrics (`bench pipeline` compares the cost with and without).
    pub no_metrics: bool,
    /// Serve these store figures with the cluster's metrics (the store was
    /// wrapped in a [`crate::store_metrics::MeteredStore`] that records them).
    pub store_metrics: Option<crate::store_metrics::StoreMetrics>,
    /// Serve this audit writer's counts with the cluster's metrics.
    pub audit: Option<paceline_api::audit::Auditor>,
    /// Also serve per-host figures (`metrics_per_host` in the server config).
    pub metrics_per_host: bool,
    /// Seal and open task secrets with this key; none: jobs that name
    /// secrets are refused (decision 0032).
    pub secret_key: Option<Arc<paceline_storage::secrets::SecretKey>>,
}

/// The metrics of a cluster over its roles, with `extra` collectors.
fn cluster_metrics(
    resmgr: &Arc<Mutex<ResourceManager>>,
    hosts: &Arc<dyn HostAccess>,
    registry: &Arc<paceline_plugin::Registry>,
    jobs: &Arc<JobManager>,
    per_host: bool,
    mut extra: Vec<Box<dyn prometheus_client::collector::Collector>>,
) -> crate::metrics::Metrics {
    let collector =
        crate::metrics::ClusterCollector::new(resmgr.clone(), hosts.clone(), registry.clone()).per_host(per_host);
    extra.insert(0, Box::new(collector));
    extra.insert(1, Box::new(crate::metrics::SubmitLatencyCollector::new(jobs.clone())));
    extra.insert(2, Box::new(crate::metrics_usage::UsageCollector::new(hosts.clone(), jobs.clone(), per_host)));
    crate::metrics::Metrics::new(extra)
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
        let mut jobs = paceline_jobmgr::JobManager::new(
            store.clone(),
            resmgr.clone(),
            registry.clone(),
            hosts.clone(),
            clock,
            config.jobs,
        );
        if let Some(key) = config.secret_key {
            jobs = jobs.with_secret_key(key);
        }
        let jobs = Arc::new(jobs);
        jobs.recover().await?;
        hosts.expect_runs(jobs.expected_runs()).await;
        // The engine notes plugin fallbacks as job events through the job
        // manager's recorder (decision 0025).
        let engine = Arc::new(
            Engine::new(jobs.clone(), hosts.clone(), registry.clone(), config.engine)
                .with_events(jobs.event_recorder()),
        );
        let mut cluster = Cluster::new(hosts, jobs, resmgr, engine, registry, store);
        cluster.place_here = !config.no_placement;
        if config.no_metrics {
            cluster.metrics = None;
        } else if let Some(store) = config.store_metrics {
            let mut extra: Vec<Box<dyn prometheus_client::collector::Collector>> = vec![Box::new(store)];
            if let Some(audit) = config.audit {
                extra.push(Box::new(crate::metrics::AuditCollector(audit)));
            }
            let metrics = cluster_metrics(
                &cluster.resmgr,
                &cluster.hosts,
                &cluster.registry,
                &cluster.jobs,
                config.metrics_per_host,
                extra,
            );
            cluster.metrics = Some(Arc::new(metrics));
        }
        let cluster = Arc::new(cluster);
        cluster.hosts_changed(&[]).await;
        Ok(cluster)
    }
}
