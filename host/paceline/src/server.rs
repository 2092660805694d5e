//! `paceline server`: every role in one process, configured from a file.
//!
//! Starts the store, the plugin registry (versions kept in the store), the
//! host manager with its provider (our agents on `agent_listen`, or
//! simulated hosts), the pools, the job manager (recovering every live job),
//! the placement engine, the loops that join them (`crate::cluster`), and
//! the public gRPC API on `api_listen`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use paceline_hostmgr::{
    AgentConfig, AgentProvider, HostAccess, HostManager, HostShape, ManagerConfig, MesosConfig, MesosProvider,
    SimConfig, SimProvider,
};
use paceline_membership::MembershipConfig;
use paceline_model::Resources;
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::secret::Secret;
use paceline_plugin::{PluginRuntime, Registry, RuntimeConfig};
use paceline_storage::config::{SqliteConfig, StorageConfig};
use serde::{Deserialize, Serialize};
use tracing::info;

use crate::cluster::{AssembleConfig, Cluster};
use crate::wiring::StoreVersions;

/// Where the hosts come from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "provider", rename_all = "snake_case", deny_unknown_fields)]
#[derive(Default)]
pub enum HostsConfig {
    /// `paceline agent` daemons dial `agent_listen`.
    #[default]
    Agent,
    /// Simulated hosts on a virtual clock that follows the wall clock
    /// (what-if runs, demos without processes).
    Sim {
        /// How many hosts.
        hosts: usize,
        /// Each host's capacity.
        resources: Resources,
        /// Hosts are spread over this many zones (`zone` attribute `z0`, `z1`, …).
        zones: usize,
    },
    /// Paceline runs as a Mesos framework (v1 scheduler HTTP API; see docs/mesos.md).
    Mesos {
        /// Master URLs (`http://host:5050`), tried in turn; redirects lead to the leader.
        masters: Vec<String>,
        /// `FrameworkInfo.name`.
        #[serde(default = "mesos_framework_name")]
        framework_name: String,
        /// The role offers are taken in.
        #[serde(default = "mesos_role")]
        role: String,
        /// How long the master keeps our tasks while we are away, seconds.
        #[serde(default = "mesos_failover_timeout_secs")]
        failover_timeout_secs: u64,
    },
    /// Kubernetes nodes are the hosts and runs are pods bound to them (see
    /// docs/kubernetes.md).
    Kubernetes {
        /// The kubeconfig; default `PACELINE_KUBECONFIG`, else the pod's
        /// ServiceAccount (Paceline running in the cluster).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kubeconfig: Option<PathBuf>,
        /// Its context; default its current context.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<String>,
        /// The namespace task pods are created in.
        #[serde(default = "kubernetes_namespace")]
        namespace: String,
        /// The image of tasks whose spec names none.
        #[serde(default = "kubernetes_default_image")]
        default_image: String,
        /// Only nodes matching this label selector are hosts (default: every node).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node_selector: Option<String>,
        /// Taint keys task pods tolerate; nodes with other NoSchedule or NoExecute taints offer nothing.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tolerate_taints: Vec<String>,
        /// A finished pod is deleted this many seconds after its end was recorded.
        #[serde(default = "kubernetes_keep_finished_pods_secs")]
        keep_finished_pods_secs: u64,
        /// Most API calls one launch makes at once.
        #[serde(default = "kubernetes_max_concurrent_calls")]
        max_concurrent_calls: usize,
    },
    /// A host manager in a process of its own (`paceline server --roles
    /// hostmgr`, which has the agent port and a provider of its own); this
    /// server runs the job and resource managers (`--roles jobmgr,resmgr`,
    /// with or without `placement`) and reaches it on its API port.
    Hostmgr {
        /// The host manager's API addresses: several for a highly available
        /// host manager (the leader is found and followed).
        servers: Vec<String>,
        /// An admin token, when the host manager has a tokens file. Prefer
        /// `token_file`: a config file is read by more people than a secret.
        #[serde(default)]
        token: Option<Secret>,
        /// Read that token from this file instead (mode 0600).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_file: Option<PathBuf>,
        /// The authority that signed an `https://` host manager's certificate.
        #[serde(default)]
        ca_cert: Option<PathBuf>,
    },
}

fn mesos_framework_name() -> String {
    "paceline".into()
}

fn mesos_role() -> String {
    "*".into()
}

fn mesos_failover_timeout_secs() -> u64 {
    7 * 24 * 3600
}

fn kubernetes_namespace() -> String {
    paceline_kubernetes::KubernetesConfig::default().namespace
}

fn kubernetes_default_image() -> String {
    paceline_kubernetes::KubernetesConfig::default().default_image
}

fn kubernetes_keep_finished_pods_secs() -> u64 {
    paceline_kubernetes::KubernetesConfig::default().keep_finished_pods.as_secs()
}

fn kubernetes_max_concurrent_calls() -> usize {
    paceline_kubernetes::KubernetesConfig::default().max_concurrent_calls
}

/// The server's configuration file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Holds the SQLite file (unless `storage` says otherwise) and the plugin compile cache.
    pub data_dir: PathBuf,
    /// Where the gRPC API listens.
    pub api_listen: SocketAddr,
    /// Where agents dial in (the `agent` provider).
    pub agent_listen: SocketAddr,
    /// The store; default SQLite at `<data_dir>/paceline.db`.
    pub storage: Option<StorageConfig>,
    /// The host provider.
    pub hosts: HostsConfig,
    /// A host silent this long is lost (its runs LOST).
    pub heartbeat_timeout_ms: u64,
    /// Heartbeat period told to agents.
    pub agent_heartbeat_ms: u64,
    /// Period of the scheduling loops (host events, deadlines, admission, placement).
    pub loop_interval_ms: u64,
    /// Create the leaf pool `/default` (reserving everything) when the store has no pools.
    pub default_pool: bool,
    /// Leader election and discovery: `embedded` (default; this process leads every role) or
    /// `zookeeper` (several servers, one leads; see docs/operations.md, "High availability").
    pub membership: MembershipConfig,
    /// This server's id among the members (default `<hostname>-<pid>`).
    pub member_id: Option<String>,
    /// The API address other servers and clients are told (`host:port`; default the bound
    /// `api_listen`). Set it when `api_listen` is `0.0.0.0` or behind NAT.
    pub advertise_api: Option<String>,
    /// The agent address published to the membership (`host:port`; default the bound
    /// `agent_listen`).
    pub advertise_agent: Option<String>,
    /// Principals and their token hashes (see docs/operations.md, "Authentication").
    /// Without it the API is open: every caller acts as an admin, so the server
    /// then refuses an `api_listen` that is not loopback unless
    /// `insecure_no_auth` says to serve it anyway.
    pub tokens_file: Option<PathBuf>,
    /// Serve an API without a tokens file on an address that is not loopback,
    /// where anyone who reaches it is an admin. Default false: such a
    /// configuration stops the start. For a network that is itself the
    /// boundary (a test rig), never for a shared one.
    pub insecure_no_auth: bool,
    /// Serve the API over TLS with this certificate and key (see docs/operations.md, "TLS").
    pub tls: Option<TlsConfig>,
    /// Run a placement engine in this process (default). `false` when engines run in
    /// processes of their own (`--roles jobmgr,resmgr,hostmgr` here, `--roles placement`
    /// there); they reach this server through its API port.
    pub placement_engine: bool,
    /// Also serve `GET /metrics` here, without authentication, for a Prometheus that
    /// holds no token (see docs/operations.md, "Metrics"). Default none: the metrics
    /// are on the API port only, behind its tokens. Keep it on loopback
    /// (`127.0.0.1:9464`) or a network only the scraper reaches.
    pub metrics_listen: Option<SocketAddr>,
    /// Serve `metrics_listen` even on an address that is not loopback (it has no
    /// authentication). Default false: such an address stops the start.
    pub metrics_listen_public: bool,
    /// Also serve each host's capacity and allocation, labelled by host
    /// (`host_capacity`, `host_allocated`). For small clusters: the series
    /// grow with the hosts. Default false.
    pub metrics_per_host: bool,
    /// How long, and how many, audit records are kept (see docs/operations.md, "Audit log").
    pub audit: AuditConfig,
    /// How long, and how many, finished jobs are kept (see docs/operations.md, "Retention").
    pub retention: crate::retention::RetentionConfig,
    /// The agent port's CA, join tokens and issued certificates (default
    /// `<data_dir>/pki`; see docs/operations.md, "Joining agents"). Highly
    /// available servers must all name the same directory's contents.
    pub agent_pki_dir: Option<PathBuf>,
    /// The key task secrets are sealed with (decision 0032): one line of 64
    /// hex digits, mode 0600. Default `<data_dir>/secrets.key`, created on
    /// first start. Highly available servers must all name the same key.
    pub secrets_key_file: Option<PathBuf>,
    /// Where `paceline sim run|compare --report-dir` reports are kept for
    /// the web UI's Simulations page (docs/web-ui.md). Default
    /// `<data_dir>/sim-reports`; it need not exist until a report is put there.
    pub sim_reports_dir: Option<PathBuf>,
    /// Names, besides IP addresses, `localhost` and this machine's hostname,
    /// by which browsers and other plain HTTP clients (the web UI,
    /// `/metrics`) may reach the API (`paceline.example.com`, or
    /// `*.example.com` for a domain). Requests naming any other `Host` are
    /// refused, so a web page cannot reach the API by rebinding its own name
    /// to this server's address (docs/security.md). gRPC clients need none.
    /// The host of `advertise_api` is allowed too.
    pub api_allowed_hosts: Vec<String>,
    /// Most live (not yet finished) jobs and tasks per principal (the jobs'
    /// owner) and per pool; 0 turns one off (see docs/operations.md,
    /// "Quotas"). The defaults stop one principal from filling the server's
    /// memory with jobs and are far above what a normal user holds.
    pub quotas: paceline_api::quota::QuotaLimits,
}

/// The audit log's retention (`audit:` in the config file).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// Records older than this many days are removed (default 90).
    pub max_age_days: u64,
    /// At most this many records are kept, the oldest removed first (default 1,000,000).
    pub max_rows: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        let d = paceline_api::audit::AuditSettings::default();
        AuditConfig { max_age_days: d.max_age.as_secs() / 86_400, max_rows: d.max_rows }
    }
}

impl AuditConfig {
    /// The writer's settings: these bounds, the other settings at their defaults.
    pub fn settings(&self) -> paceline_api::audit::AuditSettings {
        paceline_api::audit::AuditSettings {
            max_age: Duration::from_secs(self.max_age_days.max(1).saturating_mul(86_400)),
            max_rows: self.max_rows.max(1),
            ..paceline_api::audit::AuditSettings::default()
        }
    }
}

/// The API's TLS certificate and key files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, the server's own certificate first.
    pub cert_file: PathBuf,
    /// PEM private key of that certificate.
    pub key_file: PathBuf,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            data_dir: PathBuf::from("paceline-data"),
            api_listen: SocketAddr::from(([127, 0, 0, 1], 7400)),
            agent_listen: SocketAddr::from(([127, 0, 0, 1], 7401)),
            storage: None,
            hosts: HostsConfig::Agent,
            heartbeat_timeout_ms: 15_000,
            agent_heartbeat_ms: 2_000,
            loop_interval_ms: 20,
            default_pool: true,
            membership: MembershipConfig::Embedded,
            member_id: None,
            advertise_api: None,
            advertise_agent: None,
            tokens_file: None,
            insecure_no_auth: false,
            tls: None,
            placement_engine: true,
            metrics_listen: None,
            metrics_listen_public: false,
            metrics_per_host: false,
            audit: AuditConfig::default(),
            retention: crate::retention::RetentionConfig::default(),
            agent_pki_dir: None,
            secrets_key_file: None,
            sim_reports_dir: None,
            api_allowed_hosts: Vec::new(),
            quotas: paceline_api::quota::QuotaLimits::default(),
        }
    }
}

impl ServerConfig {
    /// Where the agent port's CA and join tokens are kept.
    pub fn agent_pki_dir(&self) -> PathBuf {
        self.agent_pki_dir.clone().unwrap_or_else(|| self.data_dir.join("pki"))
    }

    /// The task secrets key: the named file (which must exist), or
    /// `<data_dir>/secrets.key`, created when missing.
    pub fn secret_key(&self) -> Result<Arc<paceline_storage::secrets::SecretKey>, ServerError> {
        use paceline_storage::secrets::SecretKey;
        let key = match &self.secrets_key_file {
            Some(path) => {
                if Secret::file_is_exposed(path) {
                    tracing::warn!(path = %path.display(), "the secrets key file can be read by others: chmod 600");
                }
                SecretKey::from_file(path)
            }
            None => SecretKey::load_or_create(&self.data_dir.join("secrets.key")),
        };
        key.map(Arc::new).map_err(|e| ServerError::Other(format!("secrets_key_file: {e}")))
    }
}

/// Says loudly, at start, when task secrets in the store were sealed with
/// another key than this server's (their runs would not launch): servers
/// that share a store must share `secrets_key_file`. A server in a
/// ZooKeeper membership without one is warned before any secret exists.
async fn check_secret_key(
    store: &dyn paceline_storage::Store,
    key: &paceline_storage::secrets::SecretKey,
    config: &ServerConfig,
) {
    if config.secrets_key_file.is_none() && config.membership != MembershipConfig::Embedded {
        tracing::warn!(
            "secrets_key_file is not set: this server sealed task secrets with a key of its own data dir; \
             servers that take over from each other must all name one key file (decision 0032)"
        );
    }
    let pools = match store.list_pools().await {
        Ok(p) => p,
        Err(e) => return tracing::warn!(error = %e, "could not check the task secrets' key"),
    };
    let mut other = std::collections::BTreeMap::<String, usize>::new();
    for (pool, _) in pools {
        if let Ok(secrets) = store.list_secrets(&pool).await {
            for s in secrets.iter().filter(|s| s.key_id != key.id()) {
                *other.entry(s.key_id.clone()).or_default() += 1;
            }
        }
    }
    for (sealed_with, count) in other {
        tracing::error!(
            count,
            sealed_with,
            ours = key.id(),
            "task secrets in the store were sealed with another key: runs that need them will not launch; \
             give every server the same secrets_key_file"
        );
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store.
    #[error("storage: {0}")]
    Storage(#[from] paceline_storage::StoreError),
    /// The plugin runtime or registry.
    #[error("plugins: {0}")]
    Plugin(#[from] paceline_plugin::PluginError),
    /// The host manager.
    #[error("hosts: {0}")]
    Hosts(#[from] paceline_hostmgr::HostError),
    /// Joining the roles.
    #[error("{0}")]
    Assemble(#[from] crate::cluster::AssembleError),
    /// A listen address.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Anything else, said plainly.
    #[error("{0}")]
    Other(String),
}

/// Whether an API at `api_listen` may be served as configured: without a
/// tokens file every caller is an admin, which is `paceline dev`'s loopback
/// default and nothing else's unless `insecure` acknowledges it.
pub fn check_api_exposure(api_listen: SocketAddr, has_tokens: bool, insecure: bool) -> Result<(), String> {
    if has_tokens || api_listen.ip().is_loopback() {
        return Ok(());
    }
    if insecure {
        tracing::warn!(
            addr = %api_listen,
            "INSECURE: --insecure-no-auth: the API is served on an address that is not loopback without a \
             tokens file; anyone who reaches it is an admin"
        );
        return Ok(());
    }
    Err(format!(
        "api_listen {api_listen} is not a loopback address and there is no tokens file: anyone who reaches it \
         would act as an admin. Give --tokens-file (`paceline auth token` makes a token and its hash; see \
         docs/operations.md, \"Authentication\"), listen on 127.0.0.1, or, knowing what it means, \
         --insecure-no-auth (`insecure_no_auth: true`)"
    ))
}

/// A token given inline or in a file (the file wins; it holds one line).
pub fn resolve_token(inline: Option<&Secret>, file: Option<&std::path::Path>) -> Result<Option<Secret>, ServerError> {
    match file {
        Some(path) => Secret::from_file(path).map(Some).map_err(|e| ServerError::Other(format!("token_file {e}"))),
        None => Ok(inline.cloned()),
    }
}

/// The API's principals: from the tokens file, or an open API without one.
fn load_auth(tokens_file: Option<&std::path::Path>) -> Result<paceline_api::auth::Auth, ServerError> {
    let Some(path) = tokens_file else {
        tracing::warn!("no tokens file: the API is open, every caller acts as an admin");
        return Ok(paceline_api::auth::Auth::open());
    };
    let auth = paceline_api::auth::Auth::load(path).map_err(|e| ServerError::Other(format!("authentication: {e}")))?;
    info!(tokens_file = %path.display(), "API calls need a bearer token");
    Ok(auth)
}

/// The API's certificate and key, read now so a missing file stops the start.
fn load_tls(tls: Option<&TlsConfig>) -> Result<Option<paceline_api::TlsFiles>, ServerError> {
    let Some(tls) = tls else { return Ok(None) };
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| ServerError::Other(format!("tls: reading {}: {e}", path.display())))
    };
    let files = paceline_api::TlsFiles { cert_pem: read(&tls.cert_file)?, key_pem: read(&tls.key_file)? };
    if !files.cert_pem.starts_with(b"-----BEGIN")
        || !String::from_utf8_lossy(&files.key_pem).contains("PRIVATE KEY-----")
    {
        return Err(ServerError::Other(format!(
            "tls: {} must be a PEM certificate and {} a PEM private key",
            tls.cert_file.display(),
            tls.key_file.display()
        )));
    }
    Ok(Some(files))
}

/// The host of an `advertise_api` value (`host:port`, `[v6]:port`, a URL).
fn advertised_host(advertised: &str) -> Option<&str> {
    let rest = advertised.split_once("://").map_or(advertised, |(_, r)| r);
    let authority = rest.split('/').next()?;
    if authority.starts_with('[') {
        return None; // An IP literal: always allowed.
    }
    Some(authority.rsplit_once(':').map_or(authority, |(h, _)| h))
}

/// What every kind of server does first: read the tokens file and the TLS
/// files (a broken one must stop the start before anything listens), create
/// the data directory and open the store (default SQLite in it).
async fn prepare(
    config: &ServerConfig,
) -> Result<(paceline_api::ApiConfig, Arc<dyn paceline_storage::Store>), ServerError> {
    check_api_exposure(config.api_listen, config.tokens_file.is_some(), config.insecure_no_auth)
        .map_err(ServerError::Other)?;
    if let Some(addr) = config.metrics_listen {
        crate::metrics::check_scrape_address(addr, config.metrics_listen_public).map_err(ServerError::Other)?;
    }
    let mut allowed_hosts = Vec::new();
    for name in &config.api_allowed_hosts {
        allowed_hosts.push(paceline_api::browser::normalize_allowed_host(name).map_err(ServerError::Other)?);
    }
    // The name other servers and clients are told is one of this server's.
    if let Some(name) = config.advertise_api.as_deref().and_then(advertised_host)
        && let Ok(name) = paceline_api::browser::normalize_allowed_host(name)
    {
        allowed_hosts.push(name);
    }
    let api_config = paceline_api::ApiConfig {
        auth: Arc::new(load_auth(config.tokens_file.as_deref())?),
        allowed_hosts,
        quotas: Arc::new(paceline_api::quota::Quotas::new(config.quotas.clone())),
        tls: load_tls(config.tls.as_ref())?,
        sim_reports_dir: Some(config.sim_reports_dir.clone().unwrap_or_else(|| config.data_dir.join("sim-reports"))),
        pool_history_file: Some(config.data_dir.join("pool-history.jsonl")),
        ..paceline_api::ApiConfig::default()
    };
    create_private_dir(&config.data_dir)?;
    let storage = config
        .storage
        .clone()
        .unwrap_or_else(|| StorageConfig::Sqlite(SqliteConfig { path: config.data_dir.join("paceline.db") }));
    let store = paceline_storage::config::open(&storage).await?;
    info!(?storage, "store open");
    Ok((api_config, store))
}

/// Creates the data dir owner-only (0700): it holds the store, the agent
/// CA's key and join tokens, sim reports naming jobs; a 0755 dir let every
/// local user list and read what its files' own modes did not hide. A dir
/// that already exists keeps its mode (an operator may have chosen it), with
/// a warning when others may read it.
fn create_private_dir(dir: &Path) -> Result<(), ServerError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true).mode(0o700);
    builder.create(dir).map_err(|e| ServerError::Other(format!("creating {}: {e}", dir.display())))?;
    if let Ok(meta) = std::fs::metadata(dir)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            dir = %dir.display(),
            mode = format!("{:o}", meta.permissions().mode() & 0o777),
            "the data dir is open to other users; `chmod 700` it unless they must read it"
        );
    }
    Ok(())
}

/// The pool every job may use on a fresh `dev` cluster.
pub const DEFAULT_POOL: &str = "/default";

fn default_pool_spec() -> PoolSpec {
    // Reserves everything (as the root does), so non-preemptible work is
    // admitted up to the cluster's real capacity; shown as `unlimited`.
    PoolSpec { reservation: PerKind::splat(paceline_model::pool::UNLIMITED), ..PoolSpec::default() }
}

/// `<hostname>-<pid>`.
pub fn default_member_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "paceline".to_owned());
    format!("{host}-{}", std::process::id())
}

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
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    remote_hosts: Option<paceline_hostmgr::peer::RemoteHosts>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("api_addr", &self.api_addr)
            .field("agent_addr", &self.agent_addr)
            .finish_non_exhaustive()
    }
}

/// Where the API's connections come from.
#[derive(Debug)]
pub enum ApiSocket {
    /// Bind `api_listen` once every role is up (the single-server default).
    Bind,
    /// Connections accepted elsewhere on `addr` (a highly available server accepts on its API
    /// port from the start and hands connections to the standby API, then to this one).
    Incoming {
        /// Accepted connections.
        connections: tokio::sync::mpsc::UnboundedReceiver<tokio::net::TcpStream>,
        /// The address they were accepted on.
        addr: SocketAddr,
    },
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
    ///
    /// [`Store::claim_leadership`]: paceline_storage::Store::claim_leadership
    pub async fn start_with(
        config: ServerConfig,
        api: ApiSocket,
        leader_epoch: Option<u64>,
    ) -> Result<Server, ServerError> {
        let (api_config, store) = prepare(&config).await?;
        let store_metrics = crate::store_metrics::StoreMetrics::default();
        let store: Arc<dyn paceline_storage::Store> =
            Arc::new(crate::store_metrics::MeteredStore::new(store, store_metrics.clone()));
        if let Some(epoch) = leader_epoch {
            store.claim_leadership(epoch).await?;
        }
        // The audit writer shares the (metered, fenced) store handle.
        let audit = paceline_api::audit::spawn(store.clone(), config.audit.settings());

        let runtime_config =
            RuntimeConfig { cache_dir: Some(config.data_dir.join("plugin-cache")), ..RuntimeConfig::default() };
        let versions = Arc::new(StoreVersions::new(store.clone(), tokio::runtime::Handle::current()));
        let registry = tokio::task::spawn_blocking(move || -> Result<Registry, paceline_plugin::PluginError> {
            let runtime = Arc::new(PluginRuntime::new(runtime_config)?);
            Registry::open(runtime, versions)
        })
        .await
        .map_err(|e| ServerError::Other(e.to_string()))??;
        let registry = Arc::new(registry);

        let mut tasks = Vec::new();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let stopped = futures_shared(stopped);
        let mut remote_hosts = None;
        let (hosts, clock, agent_addr): (Arc<dyn HostAccess>, Arc<dyn paceline_jobmgr::Clock>, SocketAddr) =
            match &config.hosts {
                HostsConfig::Hostmgr { servers, token, token_file, ca_cert } => {
                    let token = resolve_token(token.as_ref(), token_file.as_deref())?;
                    // No addresses: ask the membership who leads hostmgr.
                    let discovery = if servers.is_empty() {
                        if config.membership == paceline_membership::MembershipConfig::Embedded {
                            return Err(ServerError::Other(
                            "hosts: provider hostmgr needs `servers` (or --hostmgr), or a zookeeper membership to find the host manager's leader in".into(),
                        ));
                        }
                        let me = paceline_membership::MemberInfo {
                            id: format!("{}-discovery", config.member_id.clone().unwrap_or_else(default_member_id)),
                            api_addr: String::new(),
                            agent_addr: String::new(),
                            roles: Vec::new(),
                        };
                        Some(
                            paceline_membership::from_config(&config.membership, me, Vec::new())
                                .map_err(|e| ServerError::Other(format!("membership: {e}")))?,
                        )
                    } else {
                        None
                    };
                    let locate = Arc::new(crate::leader::HostmgrLocator {
                        servers: servers.join(","),
                        discovery,
                        ca_cert: ca_cert.clone(),
                    });
                    let remote = paceline_hostmgr::peer::RemoteHosts::connect(
                        locate,
                        token.as_ref().map(Secret::expose),
                        leader_epoch.unwrap_or(0),
                        HOSTMGR_WAIT,
                    )
                    .await
                    .map_err(ServerError::Other)?;
                    info!(servers = %servers.join(","), discovered = servers.is_empty(), "host manager reached");
                    remote_hosts = Some(remote.clone());
                    (Arc::new(remote), Arc::new(paceline_jobmgr::SystemClock), config.agent_listen)
                }
                _ => {
                    let (hosts, clock, addr) = start_local_hosts(&config, &store, &stopped, &mut tasks).await?;
                    hosts.sync().await?;
                    (Arc::new(hosts), clock, addr)
                }
            };

        let mut pools = paceline_api::restore_pools(&*store)
            .await
            .map_err(|e| ServerError::Other(format!("restoring pools: {e}")))?;
        if pools.is_empty() && config.default_pool {
            let spec = default_pool_spec();
            let bytes = serde_json::to_vec(&spec).map_err(|e| ServerError::Other(e.to_string()))?;
            store.put_pool(DEFAULT_POOL, &bytes).await?;
            pools.push((DEFAULT_POOL.to_string(), spec));
        }
        // `/default` as earlier versions made it (2^40 reserved; 2^20 whole
        // GPUs, read as milli-GPUs) reads as the same pool made today
        // (`unlimited`), so it is printed as such.
        let old_default = PoolSpec {
            reservation: PerKind { cpu: 1 << 40, memory: 1 << 40, disk: 1 << 40, gpu: (1 << 20) * 1000 },
            ..PoolSpec::default()
        };
        if let Some((_, spec)) = pools.iter_mut().find(|(p, s)| p == DEFAULT_POOL && *s == old_default) {
            *spec = default_pool_spec();
            let bytes = serde_json::to_vec(&*spec).map_err(|e| ServerError::Other(e.to_string()))?;
            store.put_pool(DEFAULT_POOL, &bytes).await?;
        }
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
                store_metrics: Some(store_metrics),
                audit: Some(audit.clone()),
                metrics_per_host: config.metrics_per_host,
                secret_key: Some(secret_key),
                ..AssembleConfig::default()
            },
            |rm| {
                for (path, spec) in &pools {
                    if let Err(e) = rm.create_pool(path, *spec) {
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
        // Only the leader runs this function, so only the leader removes finished jobs.
        tasks.push(tokio::spawn(crate::retention::run(
            cluster.store.clone(),
            cluster.jobs.clone(),
            clock.clone(),
            config.retention.clone(),
        )));

        // Placement engines in other processes reach the roles on the API port.
        let mut api_config = api_config;
        api_config.audit = Some(audit);
        let core = paceline_placement::remote::CoreService::new(cluster.jobs.clone(), cluster.hosts.clone(), clock);
        let mut internal = tonic::service::Routes::new(core.into_server()).into_axum_router();
        let mut metrics_addr = None;
        if let Some(metrics) = &cluster.metrics {
            let mut roles = vec!["jobmgr", "resmgr"];
            if remote_hosts.is_none() {
                roles.push("hostmgr");
            }
            if config.placement_engine {
                roles.push("placement");
            }
            metrics.leading(&roles, leader_epoch);
            api_config.observer = Some(metrics.clone());
            // On the API port, behind its authentication like every route there.
            internal = internal.merge(crate::metrics::routes(metrics.clone()));
            metrics_addr = scrape_listener(config.metrics_listen, metrics, &stopped, &mut tasks).await?;
        }
        api_config.internal = Some(tonic::service::Routes::from(internal));
        let roles = cluster.roles();
        let stop_api = stopped.clone();
        let (incoming, api_addr) = api_incoming(api, config.api_listen).await?;
        tasks.push(tokio::spawn(async move {
            if let Err(e) =
                paceline_api::serve_incoming(roles, incoming, api_config, async move { stop_api.wait().await }).await
            {
                tracing::error!(error = %e, "API stopped");
            }
        }));
        info!(%api_addr, %agent_addr, "paceline server up");
        Ok(Server { cluster, api_addr, agent_addr, metrics_addr, tasks, stop: Some(stop), remote_hosts })
    }

    /// Stops the listeners and loops (tasks on hosts keep running).
    pub async fn shutdown(mut self) {
        if let Some(remote) = self.remote_hosts.take() {
            remote.stop().await;
        }
        stop_all(self.stop.take(), &mut self.tasks).await;
    }
}

/// How long a job manager waits at start for a host manager in another process.
const HOSTMGR_WAIT: Duration = Duration::from_secs(30);

/// Starts a host manager in this process over the configured provider (our
/// agents on `agent_listen`, simulated hosts, or Mesos); its background
/// tasks go to `tasks` and stop with `stopped`.
async fn start_local_hosts(
    config: &ServerConfig,
    store: &Arc<dyn paceline_storage::Store>,
    stopped: &Stopped,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<(HostManager, Arc<dyn paceline_jobmgr::Clock>, SocketAddr), ServerError> {
    let manager_config =
        ManagerConfig { heartbeat_timeout_ms: config.heartbeat_timeout_ms, ..ManagerConfig::default() };
    Ok(match &config.hosts {
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
            (hosts, Arc::new(paceline_jobmgr::SystemClock), addr)
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
            let now = paceline_jobmgr::Clock::now_ms(&paceline_jobmgr::SystemClock);
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
            (hosts, Arc::new(paceline_jobmgr::SystemClock), config.agent_listen)
        }
        HostsConfig::Kubernetes {
            kubeconfig,
            context,
            namespace,
            default_image,
            node_selector,
            tolerate_taints,
            keep_finished_pods_secs,
            max_concurrent_calls,
        } => {
            let kube = paceline_kubernetes::KubernetesConfig {
                kubeconfig: kubeconfig.clone(),
                context: context.clone(),
                namespace: namespace.clone(),
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
            (hosts, Arc::new(paceline_jobmgr::SystemClock), config.agent_listen)
        }
        HostsConfig::Hostmgr { .. } => {
            return Err(ServerError::Other("a host manager in another process is not started here".into()));
        }
    })
}

/// Keeps `guard` alive in one of the server's tasks, which are aborted at
/// shutdown: what it stops when dropped (a provider's subscription or
/// watches) ends with the server.
fn hold_until_shutdown<G: Send + 'static>(tasks: &mut Vec<tokio::task::JoinHandle<()>>, guard: G) {
    tasks.push(tokio::spawn(async move {
        let _guard = guard;
        std::future::pending::<()>().await
    }));
}

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
        let store_metrics = crate::store_metrics::StoreMetrics::default();
        let store: Arc<dyn paceline_storage::Store> =
            Arc::new(crate::store_metrics::MeteredStore::new(store, store_metrics.clone()));
        let mut tasks = Vec::new();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let stopped = futures_shared(stopped);
        let (hosts, _clock, agent_addr) = start_local_hosts(&config, &store, &stopped, &mut tasks).await?;
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

type IncomingStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<tokio::net::TcpStream, std::io::Error>> + Send>>;

/// The API's connections: a listener bound on `listen` now, or those
/// accepted elsewhere; with the address they arrive on.
async fn api_incoming(api: ApiSocket, listen: SocketAddr) -> Result<(IncomingStream, SocketAddr), ServerError> {
    Ok(match api {
        ApiSocket::Bind => {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|source| ServerError::Listen { addr: listen, source })?;
            let addr = listener.local_addr().map_err(|source| ServerError::Listen { addr: listen, source })?;
            tracing::info!(%addr, "API listening");
            (Box::pin(paceline_proto::incoming::tcp(listener)), addr)
        }
        ApiSocket::Incoming { connections, addr } => {
            use futures::StreamExt as _;
            (
                Box::pin(
                    tokio_stream::wrappers::UnboundedReceiverStream::new(connections).map(Ok::<_, std::io::Error>),
                ),
                addr,
            )
        }
    })
}

/// Signals `stop` and ends every background task.
async fn stop_all(stop: Option<tokio::sync::oneshot::Sender<()>>, tasks: &mut Vec<tokio::task::JoinHandle<()>>) {
    if let Some(stop) = stop {
        let _ = stop.send(());
    }
    for t in tasks.drain(..) {
        t.abort();
        let _ = t.await;
    }
}

/// Serves `metrics` without authentication on `listen`, if set, until
/// `stopped`; returns the bound address.
async fn scrape_listener(
    listen: Option<SocketAddr>,
    metrics: &Arc<crate::metrics::Metrics>,
    stopped: &Stopped,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<Option<SocketAddr>, ServerError> {
    let Some(addr) = listen else { return Ok(None) };
    let stop = stopped.clone();
    let (bound, task) = crate::metrics::spawn_scrape_listener(addr, metrics.clone(), async move { stop.wait().await })
        .await
        .map_err(|source| ServerError::Listen { addr, source })?;
    tasks.push(task);
    Ok(Some(bound))
}

/// A one-shot stop signal many tasks can wait on.
#[derive(Clone)]
struct Stopped(tokio::sync::watch::Receiver<bool>);

impl Stopped {
    async fn wait(mut self) {
        let _ = self.0.wait_for(|stopped| *stopped).await;
    }
}

fn futures_shared(rx: tokio::sync::oneshot::Receiver<()>) -> Stopped {
    let (tx, watch) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _ = rx.await;
        let _ = tx.send(true);
    });
    Stopped(watch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_data_dir_is_private_and_an_existing_one_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("a").join("data");
        create_private_dir(&dir).expect("created");
        let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700, "only its owner lists the data dir");
        let chosen = tmp.path().join("shared");
        std::fs::create_dir(&chosen).expect("mkdir");
        std::fs::set_permissions(&chosen, std::fs::Permissions::from_mode(0o750)).expect("chmod");
        create_private_dir(&chosen).expect("existing");
        assert_eq!(mode(&chosen), 0o750, "an operator's choice is kept");
    }

    #[test]
    fn an_open_api_serves_loopback_only_unless_acknowledged() {
        let at = |s: &str| s.parse::<SocketAddr>().expect("address");
        assert!(check_api_exposure(at("127.0.0.1:7400"), false, false).is_ok());
        assert!(check_api_exposure(at("[::1]:7400"), false, false).is_ok());
        for public in ["0.0.0.0:7400", "10.1.2.3:7400", "[::]:7400"] {
            let e = check_api_exposure(at(public), false, false).expect_err(public);
            assert!(e.contains(public) && e.contains("--insecure-no-auth"), "{e}");
            assert!(check_api_exposure(at(public), true, false).is_ok(), "with tokens");
            assert!(check_api_exposure(at(public), false, true).is_ok(), "acknowledged");
        }
    }

    #[test]
    fn a_job_manager_config_names_its_host_managers() {
        let yaml = "data_dir: /var/lib/paceline/jobs\nhosts:\n  provider: hostmgr\n  servers: [\"hm1:7410\", \"hm2:7410\"]\n  token: t0k3n-v4lu3\n";
        let config: ServerConfig = serde_yaml::from_str(yaml).expect("parses");
        assert_eq!(
            config.hosts,
            HostsConfig::Hostmgr {
                servers: vec!["hm1:7410".into(), "hm2:7410".into()],
                token: Some(Secret::new("t0k3n-v4lu3")),
                token_file: None,
                ca_cert: None
            }
        );
        // The token never shows when the config is logged.
        let shown = format!("{config:?}");
        assert!(shown.contains("<redacted>") && !shown.contains("t0k3n-v4lu3"), "{shown}");
        let typo = "hosts: {provider: hostmgr, server: [\"hm1:7410\"]}\n";
        let err = serde_yaml::from_str::<ServerConfig>(typo).expect_err("a misspelt field is refused");
        assert!(err.to_string().contains("server"), "{err}");
    }
}
