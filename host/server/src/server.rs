//! `paceline server`: every role in one process, configured from a file.
//!
//! [`Server::start_with`] reads as its steps: prepare (tokens, TLS, data
//! dir, store), claim leadership, open the plugin registry, reach the hosts
//! (a host manager here or in another process), restore the pools, assemble
//! the roles ([`crate::cluster`]), start their loops and retention, and
//! serve the public gRPC API on `api_listen` with the internal placement
//! protocol and the metrics beside it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use paceline_hostmgr::HostAccess;
use paceline_hostmgr::peer::RemoteHosts;
use paceline_storage::Store;
use tracing::info;

use crate::ServerError;
use crate::cluster::{AssembleConfig, Cluster};
use crate::config::{HostsConfig, ServerConfig};
use crate::hosts::{connect_remote_hosts, start_local_hosts};
use crate::listen::{ApiSocket, api_incoming, scrape_listener};
use crate::shutdown::{Stopped, futures_shared, stop_all};
use crate::startup::{check_secret_key, open_registry, prepare, restore_pools};
use paceline_storage::metered::{MeteredStore, StoreMetrics};

/// A started server.
pub struct Server {
    /// The roles.
    pub cluster: Arc<Cluster>,
    /// Where the API listens (the real port when the config said 0).
    pub api_addr: SocketAddr,
    /// Where agents dial (the real port when the config said 0).
    pub agent_addr: SocketAddr,
    /// Where the unauthenticated scrape listener listens, when `metrics_listen` is set.
    pub metrics_addr: Option<SocketAddr>,
    /// The store's figures (what `/metrics` serves as `store_*`): the
    /// benchmarks read the records written from it.
    pub store_metrics: StoreMetrics,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    remote_hosts: Option<RemoteHosts>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("api_addr", &self.api_addr)
            .field("agent_addr", &self.agent_addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts every role and both listeners.
    pub async fn start(config: ServerConfig) -> Result<Server, ServerError> {
        Server::start_with(config, ApiSocket::Bind, None).await
    }

    /// Starts every role, the agent listener and the API on `api`.
    ///
    /// `leader_epoch`: when this server won an election, its epoch; it is
    /// claimed in the store before anything is recovered or written, so a
    /// server that led before it can no longer write ([`Store::claim_leadership`]).
    pub async fn start_with(
        config: ServerConfig,
        api: ApiSocket,
        leader_epoch: Option<u64>,
    ) -> Result<Server, ServerError> {
        let (api_config, store) = prepare(&config).await?;
        let store_metrics = StoreMetrics::default();
        let store: Arc<dyn Store> = Arc::new(MeteredStore::new(store, store_metrics.clone()));
        if let Some(epoch) = leader_epoch {
            store.claim_leadership(epoch).await?;
        }
        // The audit writer shares the (metered, fenced) store handle.
        let audit = paceline_api::audit::spawn(store.clone(), config.audit.settings());
        let registry = open_registry(&config, store.clone()).await?;

        let mut tasks = Vec::new();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let stopped = futures_shared(stopped);
        let (hosts, clock, agent_addr, remote_hosts, kubernetes) =
            reach_hosts(&config, &store, leader_epoch, &stopped, &mut tasks).await?;

        let pools = restore_pools(&*store, &config).await?;
        let secret_key = config.secret_key()?;
        check_secret_key(&*store, &secret_key, &config).await;
        let cluster = Cluster::assemble(
            store,
            registry,
            hosts,
            clock.clone(),
            AssembleConfig {
                install_default_plugins: true,
                no_placement: !config.placement_engine,
                store_metrics: Some(store_metrics.clone()),
                audit: Some(audit.clone()),
                metrics_per_host: config.metrics_per_host,
                secret_key: Some(secret_key),
                ..AssembleConfig::default()
            },
            |rm| {
                for (path, spec) in &pools {
                    if let Err(e) = rm.create_pool(path, spec.clone()) {
                        tracing::error!(pool = path, error = %e, "stored pool not loaded");
                    }
                }
            },
        )
        .await?;
        if let Some(remote) = &remote_hosts {
            // A new host manager leader reconciles against the job manager's
            // live runs, not the list it had at start. Weak: the job manager
            // holds the host manager client, not the other way round.
            let jobs = Arc::downgrade(&cluster.jobs);
            remote.set_expectations(Arc::new(move || jobs.upgrade().map(|j| j.expected_runs())));
        }
        tasks.push(cluster.spawn(Duration::from_millis(config.loop_interval_ms.max(1))));
        if let (Some(provider), HostsConfig::Kubernetes { pod_scheduler: Some(settings), .. }) =
            (&kubernetes, &config.hosts)
        {
            // Pods Paceline did not create (decision 0055); stops with the server.
            let jobs = Arc::new(crate::kubernetes_pods::ClusterPodJobs::new(&cluster));
            let sched = paceline_kubernetes::PodScheduler::start(provider, settings.config(), jobs);
            crate::shutdown::hold_until_shutdown(&mut tasks, sched);
        }
        // Only the leader runs this function, so only the leader removes finished jobs.
        tasks.push(tokio::spawn(paceline_jobmgr::retention::run(
            cluster.store.clone(),
            cluster.jobs.clone(),
            clock.clone(),
            config.retention.clone(),
        )));

        let mut api_config = api_config;
        api_config.audit = Some(audit);
        let roles_here = RolesHere { local_hosts: remote_hosts.is_none(), placement: config.placement_engine };
        let metrics_addr =
            internal_routes(&mut api_config, &cluster, clock, roles_here, leader_epoch, &config, &stopped, &mut tasks)
                .await?;
        let api_addr = serve_api(&cluster, api, config.api_listen, api_config, &stopped, &mut tasks).await?;
        info!(%api_addr, %agent_addr, "paceline server up");
        Ok(Server { cluster, api_addr, agent_addr, metrics_addr, store_metrics, tasks, stop: Some(stop), remote_hosts })
    }

    /// Stops the listeners and loops (tasks on hosts keep running).
    pub async fn shutdown(mut self) {
        if let Some(remote) = self.remote_hosts.take() {
            remote.stop().await;
        }
        stop_all(self.stop.take(), &mut self.tasks).await;
    }
}

/// The hosts, the clock the roles share, where agents dial, and the client
/// of a host manager in another process when that is where they are.
type ReachedHosts = (
    Arc<dyn HostAccess>,
    Arc<dyn paceline_joints::Clock>,
    SocketAddr,
    Option<RemoteHosts>,
    Option<paceline_kubernetes::KubernetesProvider>,
);

/// A host manager in this process over the configured provider, or the one
/// `hosts: {provider: hostmgr}` names (found through the membership when it
/// names no address).
async fn reach_hosts(
    config: &ServerConfig,
    store: &Arc<dyn Store>,
    leader_epoch: Option<u64>,
    stopped: &Stopped,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<ReachedHosts, ServerError> {
    if let HostsConfig::Hostmgr { servers, token, token_file, ca_cert } = &config.hosts {
        let remote =
            connect_remote_hosts(config, servers, token.as_ref(), token_file.as_deref(), ca_cert, leader_epoch).await?;
        return Ok((
            Arc::new(remote.clone()),
            Arc::new(paceline_joints::SystemClock),
            config.agent_listen,
            Some(remote),
            None,
        ));
    }
    let (hosts, clock, addr, kubernetes) = start_local_hosts(config, store, stopped, tasks).await?;
    hosts.sync().await?;
    Ok((Arc::new(hosts), clock, addr, None, kubernetes))
}

/// Which roles run in this process besides the job and resource managers
/// (shown in the metrics).
#[derive(Clone, Copy)]
struct RolesHere {
    local_hosts: bool,
    placement: bool,
}

/// What the API port serves besides the public API: the placement
/// protocol for engines in other processes and, behind the same
/// authentication, `/metrics`; and the unauthenticated scrape listener when
/// configured (its address is returned).
#[allow(clippy::too_many_arguments)]
async fn internal_routes(
    api_config: &mut paceline_api::ApiConfig,
    cluster: &Arc<Cluster>,
    clock: Arc<dyn paceline_joints::Clock>,
    roles_here: RolesHere,
    leader_epoch: Option<u64>,
    config: &ServerConfig,
    stopped: &Stopped,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<Option<SocketAddr>, ServerError> {
    let core = paceline_placement::remote::CoreService::new(cluster.jobs.clone(), cluster.hosts.clone(), clock);
    let mut internal = tonic::service::Routes::new(core.into_server()).into_axum_router();
    let mut metrics_addr = None;
    if let Some(metrics) = &cluster.metrics {
        let mut roles = vec!["jobmgr", "resmgr"];
        if roles_here.local_hosts {
            roles.push("hostmgr");
        }
        if roles_here.placement {
            roles.push("placement");
        }
        metrics.leading(&roles, leader_epoch);
        api_config.observer = Some(metrics.clone());
        internal = internal.merge(crate::metrics::routes(metrics.clone()));
        metrics_addr = scrape_listener(config.metrics_listen, metrics, stopped, tasks).await?;
    }
    api_config.internal = Some(tonic::service::Routes::from(internal));
    Ok(metrics_addr)
}

/// Serves the public API over the roles on `api` until the server stops;
/// returns the address it is reached on.
async fn serve_api(
    cluster: &Arc<Cluster>,
    api: ApiSocket,
    listen: SocketAddr,
    api_config: paceline_api::ApiConfig,
    stopped: &Stopped,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<SocketAddr, ServerError> {
    let roles = cluster.roles();
    let stop_api = stopped.clone();
    let (incoming, api_addr) = api_incoming(api, listen).await?;
    tasks.push(tokio::spawn(async move {
        if let Err(e) =
            paceline_api::serve_incoming(roles, incoming, api_config, async move { stop_api.wait().await }).await
        {
            tracing::error!(error = %e, "API stopped");
        }
    }));
    Ok(api_addr)
}
