//! A host manager in a process of its own (`paceline server --roles hostmgr`).

use std::net::SocketAddr;
use std::sync::Arc;

use paceline_hostmgr::{HostAccess, HostManager};
use tracing::info;

use crate::ServerError;
use crate::config::{HostsConfig, ServerConfig};
use crate::hosts::start_local_hosts;
use crate::listen::{ApiSocket, api_incoming, scrape_listener};
use crate::shutdown::{futures_shared, stop_all};
use crate::startup::prepare;

/// A host manager in a process of its own (`paceline server --roles
/// hostmgr`): the configured provider (agents on `agent_listen`, simulated
/// hosts or Mesos), host records in the store, and on the API port the
/// public `HostService` plus `paceline.hostmgr.v1` for the job manager.
pub struct HostServer {
    /// The host manager.
    pub hosts: HostManager,
    /// Where the API listens.
    pub api_addr: SocketAddr,
    /// Where agents dial.
    pub agent_addr: SocketAddr,
    /// Where the unauthenticated scrape listener listens, when `metrics_listen` is set.
    pub metrics_addr: Option<SocketAddr>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl std::fmt::Debug for HostServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostServer")
            .field("api_addr", &self.api_addr)
            .field("agent_addr", &self.agent_addr)
            .finish_non_exhaustive()
    }
}

impl HostServer {
    /// Starts the host manager, the agent listener and its API on `api`.
    /// `leader_epoch`: when this process won the host manager's election,
    /// its epoch (shown in the metrics).
    pub async fn start_with(
        config: ServerConfig,
        api: ApiSocket,
        leader_epoch: Option<u64>,
    ) -> Result<HostServer, ServerError> {
        if matches!(config.hosts, HostsConfig::Hostmgr { .. }) {
            return Err(ServerError::Other(
                "--roles hostmgr runs the host manager: its `hosts` provider must be agent, sim, mesos or kubernetes, not another hostmgr".into(),
            ));
        }
        // Host records (maintenance states) only; no leadership claim: the
        // store's fence belongs to the job manager's writes.
        let (api_config, store) = prepare(&config).await?;
        let store_metrics = paceline_storage::metered::StoreMetrics::default();
        let store: Arc<dyn paceline_storage::Store> =
            Arc::new(paceline_storage::metered::MeteredStore::new(store, store_metrics.clone()));
        let mut tasks = Vec::new();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let stopped = futures_shared(stopped);
        let (hosts, _clock, agent_addr, _) = start_local_hosts(&config, &store, &stopped, &mut tasks).await?;
        hosts.sync().await?;
        let mut api_config = api_config;
        // Drains and downs here are audited into the same store.
        let audit = paceline_api::audit::spawn(store.clone(), config.audit.settings());
        api_config.audit = Some(audit.clone());
        let access: Arc<dyn HostAccess> = Arc::new(hosts.clone());
        // Its own figures: hosts, API calls, store, audit, the process
        // (decision 0022); placement and job figures live where those run.
        let metrics = Arc::new(crate::metrics::Metrics::new(vec![
            Box::new(crate::metrics::HostsCollector(access.clone(), config.metrics_per_host)),
            Box::new(store_metrics),
            Box::new(crate::metrics::AuditCollector(audit)),
        ]));
        metrics.leading(&["hostmgr"], leader_epoch);
        api_config.observer = Some(metrics.clone());
        let internal =
            tonic::service::Routes::new(paceline_hostmgr::peer::HostPeerService::new(hosts.clone()).into_server())
                .into_axum_router()
                .merge(crate::metrics::routes(metrics.clone()));
        api_config.internal = Some(tonic::service::Routes::from(internal));
        let metrics_addr = scrape_listener(config.metrics_listen, &metrics, &stopped, &mut tasks).await?;
        let (incoming, api_addr) = api_incoming(api, config.api_listen).await?;
        let stop_api = stopped.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) =
                paceline_api::serve_hosts_incoming(access, incoming, api_config, async move { stop_api.wait().await })
                    .await
            {
                tracing::error!(error = %e, "host manager API stopped");
            }
        }));
        info!(%api_addr, %agent_addr, provider = hosts.provider_name(), "paceline host manager up");
        Ok(HostServer { hosts, api_addr, agent_addr, metrics_addr, tasks, stop: Some(stop) })
    }

    /// Stops the listeners (tasks on hosts keep running).
    pub async fn shutdown(mut self) {
        stop_all(self.stop.take(), &mut self.tasks).await;
    }
}
