//! Placement engines in a process of their own (`paceline server --roles
//! placement`), against a core (`--roles all` or `jobmgr,resmgr,hostmgr`)
//! reached through the internal placement protocol on the core's API port
//! (`paceline_placement::remote`). Stateless: run as many as you like; the
//! core's host manager leases each host to one engine at a time.
//!
//! The process reads plugin versions from the cluster's store (it never
//! writes there) and rebuilds its registry when a slot's history changes,
//! so an activation or rollback on the core reaches it within a few seconds.
//! It follows the core's leader when the core is highly available.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline_model::secret::Secret;
use paceline_placement::remote::RemoteCore;
use paceline_placement::{Engine, EngineConfig};
use tracing::{info, warn};

use crate::ServerError;
use crate::config::ServerConfig;
use crate::metrics::{Metrics, PluginsCollector};

/// How often the engine checks that the core still serves and that no
/// plugin slot changed.
const CHECK_EVERY: Duration = Duration::from_secs(2);

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or_default()
}

/// What the placement-only process needs besides the configuration file.
#[derive(Debug, Clone, Default)]
pub struct PlacementOptions {
    /// The core's API addresses (comma-separated, a highly available core's
    /// servers); `None` with a zookeeper membership: the leader of `jobmgr`
    /// is looked up there each time a connection is needed.
    pub core: Option<String>,
    /// The bearer token every call to the core carries.
    pub token: Option<Secret>,
    /// PEM certificate of the authority that signed an `https://` core's certificate.
    pub ca_cert: Option<PathBuf>,
}

/// The placement-only process, started: its store opened, its scrape
/// listener (if configured) bound. [`PlacementProcess::run`] runs the engine.
pub struct PlacementProcess {
    config: ServerConfig,
    options: PlacementOptions,
    discovery: Option<Arc<dyn paceline_membership::Membership>>,
    store: Arc<dyn paceline_storage::Store>,
    metrics: Arc<Metrics>,
    registry_now: Arc<std::sync::Mutex<Option<Arc<paceline_plugin::Registry>>>>,
    metrics_addr: Option<SocketAddr>,
}

impl std::fmt::Debug for PlacementProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacementProcess")
            .field("core", &self.options.core)
            .field("metrics_addr", &self.metrics_addr)
            .finish_non_exhaustive()
    }
}

impl PlacementProcess {
    /// Joins the membership (when the core is found through ZooKeeper),
    /// opens the cluster's store for plugin versions and binds the scrape
    /// listener if `metrics_listen` is set.
    pub async fn start(config: ServerConfig, options: PlacementOptions) -> Result<PlacementProcess, ServerError> {
        let discovery = match &options.core {
            Some(_) => None,
            None => Some(crate::startup::watching_member(&config, "placement")?),
        };
        let store = crate::open_store(&config)
            .await
            .map_err(|e| ServerError::Other(format!("opening the cluster's store (for plugin versions): {e}")))?;
        // Its figures (rounds, plugins, the process) on a scrape listener of
        // its own, if asked: an engine serves no API (decision 0022).
        let registry_now = Arc::new(std::sync::Mutex::new(None));
        let metrics = Arc::new(Metrics::new(vec![Box::new(PluginsCollector(registry_now.clone()))]));
        metrics.leading(&["placement"], None);
        let mut metrics_addr = None;
        if let Some(addr) = config.metrics_listen {
            crate::metrics::check_scrape_address(addr, config.metrics_listen_public).map_err(ServerError::Other)?;
            let (bound, _task) = crate::metrics::spawn_scrape_listener(addr, metrics.clone(), std::future::pending())
                .await
                .map_err(|e| ServerError::Other(format!("listening on {addr} for metrics: {e}")))?;
            metrics_addr = Some(bound);
        }
        Ok(PlacementProcess { config, options, discovery, store, metrics, registry_now, metrics_addr })
    }

    /// Where the scrape listener listens (no token), when `metrics_listen` is set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The core's addresses as given; `None` when the core is whichever
    /// server leads `jobmgr` in ZooKeeper.
    pub fn core(&self) -> Option<&str> {
        self.options.core.as_deref()
    }

    /// Runs placement rounds against the core until `shutdown` resolves:
    /// connects to its leader (retried every second), loads the plugins
    /// from the store, and starts again from the connection when the core
    /// stops serving or a plugin slot changes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        let PlacementProcess { config, options, discovery, store, metrics, registry_now, .. } = self;
        let mut server = options.core.clone().unwrap_or_default();
        tokio::pin!(shutdown);
        loop {
            let channel = tokio::select! {
                () = &mut shutdown => return Ok(()),
                c = connect(&mut server, options.ca_cert.as_deref(), discovery.as_deref()) => c,
            };
            let bearer = paceline_proto::bearer::Bearer::new(options.token.as_ref().map(|t| t.expose()))
                .map_err(|e| ServerError::Other(e.to_string()))?;
            let remote = Arc::new(RemoteCore::new(channel.clone(), bearer));
            let histories =
                store.slot_histories().await.map_err(|e| ServerError::Other(format!("reading plugin slots: {e}")))?;
            let registry = crate::open_registry(&config, store.clone())
                .await
                .map_err(|e| ServerError::Other(format!("loading plugins: {e}")))?;
            if let Ok(mut now) = registry_now.lock() {
                *now = Some(registry.clone());
            }
            info!(core = %server, "placement engine connected");
            let engine = Engine::new(remote.clone(), remote, registry, EngineConfig::default());
            let mut checked = Instant::now();
            loop {
                let started = Instant::now();
                let report = tokio::select! {
                    () = &mut shutdown => return Ok(()),
                    r = engine.run_round(now_ms()) => r,
                };
                metrics.round(&report, started.elapsed());
                if report.placed > 0 || report.unplaced > 0 {
                    info!(
                        placed = report.placed,
                        unplaced = report.unplaced,
                        plugin_calls = report.plugin_calls,
                        "placement round"
                    );
                }
                if report.taken == 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                if checked.elapsed() >= CHECK_EVERY {
                    checked = Instant::now();
                    if !core_serves(channel.clone()).await {
                        warn!("the core no longer leads or does not answer; finding its leader");
                        break;
                    }
                    match store.slot_histories().await {
                        Ok(now) if now != histories => {
                            info!("a plugin slot changed; reloading plugins");
                            break;
                        }
                        Ok(_) => {}
                        Err(e) => warn!(error = %e, "cannot read plugin slots; keeping the loaded ones"),
                    }
                }
            }
        }
    }
}

/// The core answers its health check with SERVING (a standby answers
/// NOT_SERVING; a dead or unreachable one not at all).
async fn core_serves(channel: tonic::transport::Channel) -> bool {
    use paceline_api::tonic_health::pb::health_client::HealthClient;
    use paceline_api::tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
    let mut health = HealthClient::new(channel);
    let check = health.check(HealthCheckRequest { service: String::new() });
    matches!(tokio::time::timeout(Duration::from_secs(2), check).await, Ok(Ok(r)) if r.get_ref().status == ServingStatus::Serving as i32)
}

/// The core's leading server, retried every second until one answers. With
/// `discovery`, `server` becomes the addresses of the `jobmgr` leader
/// ZooKeeper names.
async fn connect(
    server: &mut String,
    ca_cert: Option<&std::path::Path>,
    discovery: Option<&dyn paceline_membership::Membership>,
) -> tonic::transport::Channel {
    let mut logged = false;
    loop {
        if let Some(membership) = discovery {
            match membership.leader_of(paceline_membership::Role::Jobmgr).await {
                Ok(Some(leader)) => *server = leader.api_addr,
                Ok(None) | Err(_) => {
                    if !logged {
                        warn!("no core leads in ZooKeeper right now; asking every second");
                        logged = true;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            }
        }
        match crate::leader::leading_channel(server, ca_cert).await {
            Ok(c) => return c,
            Err(e) => {
                if !logged {
                    warn!(error = %e, "cannot reach the core; retrying every second");
                    logged = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
