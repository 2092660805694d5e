//! Where a server's hosts come from: a host manager in this process over
//! the configured provider (our agents on `agent_listen`, simulated hosts,
//! Mesos or Kubernetes), or one in another process reached on its API port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use paceline_hostmgr::{
    AgentConfig, AgentProvider, HostManager, HostShape, ManagerConfig, MesosConfig, MesosProvider, SimConfig,
    SimProvider,
};
use paceline_model::secret::Secret;
use tracing::info;

use crate::ServerError;
use crate::config::{HostsConfig, ServerConfig, resolve_token};
use crate::shutdown::{Stopped, hold_until_shutdown};

/// How long a job manager waits at start for a host manager in another process.
const HOSTMGR_WAIT: Duration = Duration::from_secs(30);

/// Starts a host manager in this process over the configured provider (our
/// agents on `agent_listen`, simulated hosts, or Mesos); its background
/// tasks go to `tasks` and stop with `stopped`.
pub(crate) async fn start_local_hosts(
    config: &ServerConfig,
    store: &Arc<dyn paceline_storage::Store>,
    stopped: &Stopped,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<LocalHosts, ServerError> {
    let manager_config =
        ManagerConfig { heartbeat_timeout_ms: config.heartbeat_timeout_ms, ..ManagerConfig::default() };
    // The kubernetes provider, for the pod scheduler (started once the job manager is).
    let mut kubernetes = None;
    let (hosts, clock, addr): (HostManager, Arc<dyn paceline_joints::Clock>, SocketAddr) = match &config.hosts {
        HostsConfig::Agent => {
            let pki_dir = config.agent_pki_dir();
            let pki = tokio::task::spawn_blocking(move || paceline_hostmgr::pki::AgentPki::open(pki_dir))
                .await
                .map_err(|e| ServerError::Other(format!("opening the agent CA: {e}")))?
                .map_err(|e| ServerError::Other(format!("the agent CA: {e}")))?;
            // Names agents may dial the port by, besides localhost and the bound address.
            let mut names = Vec::new();
            if let Some(a) = &config.advertise_agent {
                let host = a.rsplit_once(':').map_or(a.as_str(), |(h, _)| h);
                names.push(host.trim_start_matches('[').trim_end_matches(']').to_owned());
            }
            if let Some(h) = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()) {
                names.push(h);
            }
            names.retain(|n| !n.is_empty());
            let provider = AgentProvider::with_identity(
                AgentConfig { heartbeat_interval_ms: config.agent_heartbeat_ms, ..AgentConfig::default() },
                Arc::new(pki),
                names,
            );
            let hosts = HostManager::builder(Arc::new(provider.clone()))
                .store(store.clone())
                .config(manager_config)
                .start()
                .await?;
            let listener = tokio::net::TcpListener::bind(config.agent_listen)
                .await
                .map_err(|source| ServerError::Listen { addr: config.agent_listen, source })?;
            let addr =
                listener.local_addr().map_err(|source| ServerError::Listen { addr: config.agent_listen, source })?;
            let stop_agents = stopped.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = provider.serve_with_listener(listener, async move { stop_agents.wait().await }).await {
                    tracing::error!(error = %e, "agent listener stopped");
                }
            }));
            (hosts, Arc::new(paceline_joints::SystemClock), addr)
        }
        HostsConfig::Sim { hosts: n, resources, zones } => {
            let zones = (*zones).max(1);
            let per_zone = n.div_ceil(zones);
            let shapes = (0..zones)
                .map(|z| {
                    HostShape::new(per_zone.min(n.saturating_sub(z * per_zone)), format!("sim-z{z}-"), *resources)
                        .attribute("zone", format!("z{z}"))
                })
                .filter(|s| s.count > 0)
                .collect();
            let now = paceline_joints::Clock::now_ms(&paceline_joints::SystemClock);
            let sim = Arc::new(SimProvider::new(SimConfig { shapes, start_ms: now, ..SimConfig::default() }));
            let clock = sim.clock();
            let hosts = HostManager::builder(sim.clone())
                .store(store.clone())
                .clock(Arc::new(clock.clone()))
                .config(manager_config)
                .start()
                .await?;
            tasks.push(sim.spawn_realtime(Duration::from_millis(config.loop_interval_ms.max(1))));
            (hosts, Arc::new(clock), config.agent_listen)
        }
        HostsConfig::Mesos { masters, framework_name, role, failover_timeout_secs } => {
            let mesos = MesosConfig {
                masters: masters.clone(),
                framework_name: framework_name.clone(),
                role: role.clone(),
                failover_timeout: Duration::from_secs(*failover_timeout_secs),
                ..MesosConfig::default()
            };
            let provider = MesosProvider::new(mesos, Some(store.clone()));
            let hosts = HostManager::builder(Arc::new(provider.clone()))
                .store(store.clone())
                .config(manager_config)
                .start()
                .await?;
            // The subscription ends with the server (the task is aborted at shutdown).
            hold_until_shutdown(tasks, provider.stop_on_drop());
            (hosts, Arc::new(paceline_joints::SystemClock), config.agent_listen)
        }
        HostsConfig::Kubernetes {
            kubeconfig,
            context,
            namespace,
            cluster_id,
            default_image,
            node_selector,
            tolerate_taints,
            keep_finished_pods_secs,
            max_concurrent_calls,
            ..
        } => {
            let cluster_id = kubernetes_cluster_id(cluster_id.as_deref(), store.as_ref()).await?;
            let kube = paceline_kubernetes::KubernetesConfig {
                kubeconfig: kubeconfig.clone(),
                context: context.clone(),
                namespace: namespace.clone(),
                cluster_id,
                default_image: default_image.clone(),
                node_selector: node_selector.clone(),
                tolerate_taints: tolerate_taints.clone(),
                keep_finished_pods: Duration::from_secs(*keep_finished_pods_secs),
                max_concurrent_calls: (*max_concurrent_calls).max(1),
                ..paceline_kubernetes::KubernetesConfig::default()
            };
            let provider = paceline_kubernetes::KubernetesProvider::connect(kube)
                .await
                .map_err(|e| ServerError::Other(format!("hosts provider kubernetes: {e}")))?;
            let hosts = HostManager::builder(Arc::new(provider.clone()))
                .store(store.clone())
                .config(manager_config)
                .start()
                .await?;
            // The watches end with the server (the task is aborted at shutdown).
            hold_until_shutdown(tasks, provider.stop_on_drop());
            kubernetes = Some(provider.clone());
            (hosts, Arc::new(paceline_joints::SystemClock), config.agent_listen)
        }
        HostsConfig::Hostmgr { .. } => {
            return Err(ServerError::Other("a host manager in another process is not started here".into()));
        }
    };
    Ok((hosts, clock, addr, kubernetes))
}

/// A host manager started here, the roles' clock, where agents dial, and the
/// kubernetes provider when it is the one.
pub(crate) type LocalHosts =
    (HostManager, Arc<dyn paceline_joints::Clock>, SocketAddr, Option<paceline_kubernetes::KubernetesProvider>);

/// The kubernetes provider's cluster id: the config's, else the one
/// recorded in the store, else a new one, recorded before any pod carries it
/// (a restart must find its pods by it).
async fn kubernetes_cluster_id(
    configured: Option<&str>,
    store: &dyn paceline_storage::Store,
) -> Result<String, ServerError> {
    use paceline_kubernetes::CLUSTER_ID_KEY;
    let stored = store
        .get_provider_id(CLUSTER_ID_KEY)
        .await
        .map_err(|e| ServerError::Other(format!("hosts provider kubernetes: reading the cluster id: {e}")))?;
    if let Some(id) = configured {
        if stored.as_deref().is_some_and(|s| s != id) {
            tracing::warn!(
                configured = id,
                stored = stored.as_deref().unwrap_or(""),
                "kubernetes: cluster_id differs from the one this store's pods were labelled with; pods labelled with the old one are another cluster's now"
            );
        }
        return Ok(id.to_string());
    }
    if let Some(id) = stored {
        return Ok(id);
    }
    let id = paceline_kubernetes::generate_cluster_id();
    store
        .put_provider_id(CLUSTER_ID_KEY, &id)
        .await
        .map_err(|e| ServerError::Other(format!("hosts provider kubernetes: recording the cluster id: {e}")))?;
    tracing::info!(cluster_id = id, "kubernetes: this cluster's pods are labelled paceline.io/cluster={id}");
    Ok(id)
}

/// A host manager in another process: the addresses `servers` names, or
/// with none the leader of `hostmgr` in the membership; waits up to
/// [`HOSTMGR_WAIT`] for it to answer.
pub(crate) async fn connect_remote_hosts(
    config: &ServerConfig,
    servers: &[String],
    token: Option<&Secret>,
    token_file: Option<&std::path::Path>,
    ca_cert: &Option<std::path::PathBuf>,
    leader_epoch: Option<u64>,
) -> Result<paceline_hostmgr::peer::RemoteHosts, ServerError> {
    let token = resolve_token(token, token_file)?;
    // No addresses: ask the membership who leads hostmgr.
    let discovery = if servers.is_empty() {
        if config.membership == paceline_membership::MembershipConfig::Embedded {
            return Err(ServerError::Other(
                "hosts: provider hostmgr needs `servers` (or --hostmgr), or a zookeeper membership to find the host manager's leader in".into(),
            ));
        }
        Some(crate::startup::watching_member(config, "discovery")?)
    } else {
        None
    };
    let locate =
        Arc::new(crate::leader::HostmgrLocator { servers: servers.join(","), discovery, ca_cert: ca_cert.clone() });
    let remote = paceline_hostmgr::peer::RemoteHosts::connect(
        locate,
        token.as_ref().map(Secret::expose),
        leader_epoch.unwrap_or(0),
        HOSTMGR_WAIT,
    )
    .await
    .map_err(ServerError::Other)?;
    info!(servers = %servers.join(","), discovered = servers.is_empty(), "host manager reached");
    Ok(remote)
}
