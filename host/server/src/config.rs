//! The server's configuration file (`paceline server --config`), every
//! field documented for the operator, and the checks on it that need no
//! other part of the server: whether the API may be served as configured,
//! and where a token comes from.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use paceline_membership::MembershipConfig;
use paceline_model::Resources;
use paceline_model::secret::Secret;
use paceline_storage::config::StorageConfig;
use serde::{Deserialize, Serialize};

use crate::ServerError;

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
        /// This Paceline cluster's id, the `paceline.io/cluster` label of
        /// its pods (only those are its own); default: the id recorded in
        /// the store, else one generated at the first start and recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cluster_id: Option<String>,
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
        /// Also schedule pods Paceline did not create, those with
        /// `spec.schedulerName` this names (decision 0055); absent: off.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pod_scheduler: Option<PodSchedulerSettings>,
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

/// The pod scheduler's settings (`hosts.pod_scheduler`, provider kubernetes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodSchedulerSettings {
    /// `spec.schedulerName` of the pods Paceline schedules.
    #[serde(default = "pod_scheduler_name")]
    pub scheduler_name: String,
    /// Namespaces whose pods it schedules; empty: every namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// The pool of pods whose namespace and own `paceline.io/pool`
    /// annotations name none; absent: such pods are refused, saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_pool: Option<String>,
}

impl PodSchedulerSettings {
    /// The provider crate's settings.
    pub fn config(&self) -> paceline_kubernetes::PodSchedulerConfig {
        paceline_kubernetes::PodSchedulerConfig {
            scheduler_name: self.scheduler_name.clone(),
            namespaces: self.namespaces.clone(),
            default_pool: self.default_pool.clone(),
            ..paceline_kubernetes::PodSchedulerConfig::default()
        }
    }
}

fn pod_scheduler_name() -> String {
    paceline_kubernetes::PodSchedulerConfig::default().scheduler_name
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
    pub retention: paceline_jobmgr::retention::RetentionConfig,
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
            retention: paceline_jobmgr::retention::RetentionConfig::default(),
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

/// The host of an `advertise_api` value (`host:port`, `[v6]:port`, a URL).
pub(crate) fn advertised_host(advertised: &str) -> Option<&str> {
    let rest = advertised.split_once("://").map_or(advertised, |(_, r)| r);
    let authority = rest.split('/').next()?;
    if authority.starts_with('[') {
        return None; // An IP literal: always allowed.
    }
    Some(authority.rsplit_once(':').map_or(authority, |(h, _)| h))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_config_section_parses_and_refuses_typos() {
        let c: ServerConfig =
            serde_yaml::from_str("retention: {max_age_days: 7, max_finished_jobs: 10}").expect("parses");
        assert_eq!(
            c.retention,
            paceline_jobmgr::retention::RetentionConfig {
                max_age_days: 7,
                max_finished_jobs: 10,
                ..paceline_jobmgr::retention::RetentionConfig::default()
            }
        );
        assert_eq!(ServerConfig::default().retention, paceline_jobmgr::retention::RetentionConfig::default());
        assert!(serde_yaml::from_str::<ServerConfig>("retention: {max_days: 7}").is_err());
    }

    #[test]
    fn the_pod_scheduler_is_off_unless_configured_and_refuses_typos() {
        let on = "hosts: {provider: kubernetes, pod_scheduler: {namespaces: [team-a], default_pool: /shared}}";
        let c: ServerConfig = serde_yaml::from_str(on).expect("parses");
        let HostsConfig::Kubernetes { pod_scheduler: Some(p), .. } = &c.hosts else { panic!("{:?}", c.hosts) };
        let config = p.config();
        assert_eq!(config.scheduler_name, "paceline");
        assert_eq!((config.namespaces, config.default_pool), (vec!["team-a".to_string()], Some("/shared".into())));
        let off: ServerConfig = serde_yaml::from_str("hosts: {provider: kubernetes}").expect("parses");
        assert!(matches!(off.hosts, HostsConfig::Kubernetes { pod_scheduler: None, .. }));
        let typo = "hosts: {provider: kubernetes, pod_scheduler: {namespace: [a]}}";
        assert!(serde_yaml::from_str::<ServerConfig>(typo).is_err(), "a misspelt key is refused");
    }
}
