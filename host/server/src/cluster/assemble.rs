//! Putting the roles of one process together: the job manager, the
//! resource manager with its preemption slot, the placement engine and the
//! metrics, over a store, a plugin registry and a host manager.

use std::sync::{Arc, Mutex};

use paceline_hostmgr::HostAccess;
use paceline_jobmgr::JobManager;
use paceline_placement::Engine;
use paceline_resmgr::ResourceManager;

use super::Cluster;

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
    /// wrapped in a [`paceline_storage::metered::MeteredStore`] that records them).
    pub store_metrics: Option<paceline_storage::metered::StoreMetrics>,
    /// Serve this audit writer's counts with the cluster's metrics.
    pub audit: Option<paceline_api::audit::Auditor>,
    /// Also serve per-host figures (`metrics_per_host` in the server config).
    pub metrics_per_host: bool,
    /// Seal and open task secrets with this key; none: jobs that name
    /// secrets are refused (decision 0032).
    pub secret_key: Option<Arc<paceline_storage::secrets::SecretKey>>,
}

/// The metrics of a cluster over its roles, with `extra` collectors.
pub(super) fn cluster_metrics(
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
    extra.insert(2, Box::new(crate::metrics::UsageCollector::new(hosts.clone(), jobs.clone(), per_host)));
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
        clock: Arc<dyn paceline_joints::Clock>,
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
        // Preemption asks the job manager's count of unavailable instances
        // before it takes a stateless job's instance down (decision 0046).
        jobs.install_availability_gate();
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
