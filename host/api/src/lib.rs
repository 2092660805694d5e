//! # paceline-api
//!
//! The public gRPC API (`paceline.v1`): conversions between wire messages
//! and the domain model, with validation at the edge, and the tonic
//! services over the managers ([`Roles`]).
//!
//! It owns the wire shape only. It must not hold scheduling state or reach
//! into storage tables other than through the managers' public methods and
//! the `Store` trait (pools are persisted as the resource manager's specs).
//!
//! It receives requests from the CLI and other clients; it hands validated
//! model values to the managers in [`Roles`] and their answers back.
//!
//! # Layout
//!
//! - [`auth`]: bearer tokens, roles and per-pool grants; a layer in front
//!   of every service.
//! - [`browser`]: what a browser page of another site may not do (Host,
//!   Origin and a custom header on UI changes), checked in that layer.
//! - [`convert`]: wire ↔ model, with errors that name the offending field.
//! - [`status`]: each manager's errors → gRPC codes.
//! - [`jobs`], [`tasks`], [`pools`], [`hosts`], [`plugins`], [`watch`], [`secrets`]: one
//!   module per service of `proto/paceline/v1/`.
//! - [`jobfile`]: job files (YAML) from callers, bounded in size and depth
//!   before they are parsed.
//! - [`quota`]: limits on live jobs and tasks per principal and per pool,
//!   checked where jobs are created and grown.
//! - [`operator`]: `OperatorService`: cluster snapshots for backup (admin only).
//! - [`audit`]: the audit log: records made in the auth layer, a batching
//!   writer, and `AuditService` to read them.
//! - [`web`]: the web UI (a page and its JSON routes) on the same port.
//! - [`serve`] / [`router`]: every service plus `grpc.health.v1` and server
//!   reflection (v1), with message size limits and a per-request timeout.
//!
//! At start the server restores pools with [`restore_pools`] (and
//! [`apply_pools`]) before the job manager recovers, then calls [`serve`].

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paceline_proto::v1 as pb;
use pb::audit_service_server::AuditServiceServer;
use pb::host_service_server::HostServiceServer;
use pb::job_service_server::JobServiceServer;
use pb::operator_service_server::OperatorServiceServer;
use pb::plugin_service_server::PluginServiceServer;
use pb::pool_service_server::PoolServiceServer;
use pb::secret_service_server::SecretServiceServer;
use pb::task_service_server::TaskServiceServer;
use pb::watch_service_server::WatchServiceServer;

pub mod audit;
pub mod auth;
pub mod browser;
pub mod convert;
pub mod events;
pub mod hosts;
pub mod jobfile;
pub mod jobs;
pub mod operator;
mod pending;
pub mod plugins;
pub mod pools;
pub mod quota;
pub mod rate;
pub mod secrets;
pub mod standby;
pub mod status;
pub mod tasks;
pub mod watch;
pub mod web;

pub use paceline_jobmgr::pools::{RestoreError, apply_pools, restore_pools};
/// Re-exported so clients (and tests) can check health without their own dependency.
pub use tonic_health;

/// The roles the services call. In one process (`paceline server`, `dev`)
/// they are the cluster's own; cheap to clone.
#[derive(Clone)]
pub struct Roles {
    /// Jobs and tasks.
    pub jobs: Arc<paceline_jobmgr::JobManager>,
    /// Hosts and runs: the host manager in this process, or one in a
    /// process of its own (`--roles hostmgr`).
    pub hosts: Arc<dyn paceline_hostmgr::HostAccess>,
    /// Pools, entitlement, admission.
    pub resmgr: Arc<Mutex<paceline_resmgr::ResourceManager>>,
    /// Pool changes (one per cluster: the gRPC and web surfaces share it).
    pub pools: Arc<paceline_jobmgr::PoolManager>,
    /// Plugin slots.
    pub registry: Arc<paceline_plugin::Registry>,
    /// The cluster's store (pool specs live here).
    pub store: Arc<dyn paceline_storage::Store>,
}

impl std::fmt::Debug for Roles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Roles").field("hosts", &self.hosts).finish_non_exhaustive()
    }
}

/// Limits of the API server.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// Largest request message accepted (a plugin upload arrives in chunks,
    /// so this bounds one chunk, not the component).
    pub max_decoding_message_size: usize,
    /// Largest response message sent.
    pub max_encoding_message_size: usize,
    /// Deadline of one request; streams (logs, watch) are exempt once open.
    pub request_timeout: Duration,
    /// Who may call what ([`auth`]); open unless a tokens file is given.
    pub auth: Arc<auth::Auth>,
    /// Serve TLS with this certificate and key (PEM); plain HTTP/2 without.
    pub tls: Option<TlsFiles>,
    /// Internal services served beside the public API on the same port (the
    /// placement protocol for engines in other processes). They pass the
    /// same authentication layer; unknown to its table, they need `admin`.
    pub internal: Option<tonic::service::Routes>,
    /// Told of every call and its answer (the server's metrics).
    pub observer: Option<Arc<dyn CallObserver>>,
    /// Records every mutating and every refused call ([`audit`]); none
    /// without one.
    pub audit: Option<audit::Auditor>,
    /// Where `paceline sim` reports are kept for the web UI's Simulations
    /// page ([`web::sim_reports`]); none listed without one.
    pub sim_reports_dir: Option<std::path::PathBuf>,
    /// Where the pool page's hour of samples is kept across restarts
    /// (`web/history.rs`); in memory only without one.
    pub pool_history_file: Option<std::path::PathBuf>,
    /// Names besides IP literals, `localhost` and the machine's hostname
    /// that plain HTTP requests (the web UI, `/metrics`) may give as their
    /// `Host` (`api_allowed_hosts`; `*.example.com` for a whole domain).
    /// Others are refused, so a page of another site that resolves its
    /// name to this server (DNS rebinding) cannot use it ([`browser`]).
    pub allowed_hosts: Vec<String>,
    /// Live jobs and tasks per principal and per pool ([`quota`]; the
    /// server's `quotas:`). One value shared by the gRPC and web UI paths,
    /// so its lock orders their checks.
    pub quotas: Arc<quota::Quotas>,
}

/// Told of every API call once the head of its answer is ready: the
/// method ([`auth::method_label`], a bounded set), the answer's code and
/// the time taken. Called on the request's task, so it must be cheap.
pub trait CallObserver: std::fmt::Debug + Send + Sync + 'static {
    /// One call.
    fn observe(&self, method: &str, code: &str, took: Duration);
}

/// A server certificate chain and its private key, both PEM.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert_pem: Vec<u8>,
    /// The leaf's private key.
    pub key_pem: Vec<u8>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            max_decoding_message_size: 16 << 20,
            max_encoding_message_size: 64 << 20,
            request_timeout: Duration::from_secs(30),
            auth: Arc::new(auth::Auth::open()),
            tls: None,
            internal: None,
            observer: None,
            audit: None,
            sim_reports_dir: None,
            pool_history_file: None,
            allowed_hosts: Vec::new(),
            quotas: Arc::default(),
        }
    }
}

/// Why the API server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The reflection service could not read the descriptors.
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The transport failed.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

macro_rules! limited {
    ($server:ident, $svc:expr, $config:expr) => {
        $server::new($svc)
            .max_decoding_message_size($config.max_decoding_message_size)
            .max_encoding_message_size($config.max_encoding_message_size)
    };
}

/// The router [`router`] builds: every request passes [`auth::AuthLayer`] first.
pub type ApiRouter =
    tonic::transport::server::Router<tower::layer::util::Stack<auth::AuthLayer, tower::layer::util::Identity>>;

/// A tonic server with the API's TLS identity, when it has one.
fn server_builder(config: &ApiConfig) -> Result<tonic::transport::Server, ApiError> {
    let server = tonic::transport::Server::builder();
    Ok(match &config.tls {
        Some(tls) => {
            let identity = tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem);
            server.tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))?
        }
        None => server,
    })
}

/// Every service over `roles`, with health (each service SERVING) and
/// reflection, behind the authentication layer, ready to serve on any
/// incoming stream.
pub async fn router(roles: Roles, config: &ApiConfig) -> Result<ApiRouter, ApiError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<JobServiceServer<jobs::JobApi>>().await;
    reporter.set_serving::<TaskServiceServer<tasks::TaskApi>>().await;
    reporter.set_serving::<PoolServiceServer<pools::PoolApi>>().await;
    reporter.set_serving::<HostServiceServer<hosts::HostApi>>().await;
    reporter.set_serving::<PluginServiceServer<plugins::PluginApi>>().await;
    reporter.set_serving::<WatchServiceServer<watch::WatchApi>>().await;
    reporter.set_serving::<AuditServiceServer<audit::service::AuditApi>>().await;
    reporter.set_serving::<OperatorServiceServer<operator::OperatorApi>>().await;
    reporter.set_serving::<SecretServiceServer<secrets::SecretApi>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let server = server_builder(config)?;
    // Browsers speak HTTP/1.1 to the web UI; gRPC clients HTTP/2 as before.
    let mut server = server.accept_http1(true).timeout(config.request_timeout).layer(auth::AuthLayer(
        config.auth.clone(),
        config.observer.clone(),
        config.audit.clone(),
        Arc::new(browser::BrowserPolicy::new(&config.allowed_hosts)),
    ));
    // One watch service (and so one pool poller) for gRPC and the page's live stream.
    let watch = watch::WatchApi::new(roles.jobs.clone(), roles.resmgr.clone(), roles.hosts.clone());
    let mut http = web::routes(roles.clone(), watch.clone(), config);
    if let Some(internal) = &config.internal {
        http = http.merge(internal.clone().into_axum_router());
    }
    Ok(server
        .add_routes(tonic::service::Routes::from(http))
        .add_service(health)
        .add_service(reflection)
        .add_service(limited!(
            JobServiceServer,
            jobs::JobApi::new(roles.jobs.clone(), roles.hosts.clone()).with_quotas(config.quotas.clone()),
            config
        ))
        .add_service(limited!(TaskServiceServer, tasks::TaskApi::new(roles.jobs.clone(), roles.hosts.clone()), config))
        .add_service(limited!(
            PoolServiceServer,
            pools::PoolApi::new(roles.resmgr.clone(), roles.pools.clone()),
            config
        ))
        .add_service(limited!(HostServiceServer, hosts::HostApi::new(roles.hosts.clone()), config))
        .add_service(limited!(PluginServiceServer, plugins::PluginApi::new(roles.registry.clone()), config))
        .add_service(limited!(AuditServiceServer, audit::service::AuditApi::new(roles.store.clone()), config))
        .add_service(limited!(OperatorServiceServer, operator::OperatorApi::new(roles.store.clone()), config))
        .add_service(limited!(
            SecretServiceServer,
            secrets::SecretApi::new(roles.jobs.clone(), roles.store.clone(), roles.resmgr.clone()),
            config
        ))
        .add_service(limited!(WatchServiceServer, watch, config)))
}

/// The API of a host manager in a process of its own (`paceline server
/// --roles hostmgr`): `HostService` over `hosts`, health (it SERVING) and
/// reflection, plus `config.internal` (the host manager protocol the job
/// manager speaks), behind the same authentication layer. The job, task,
/// pool, plugin and watch services are the job manager's: callers reach them
/// there.
pub async fn serve_hosts_incoming<I, IO, IE>(
    hosts: Arc<dyn paceline_hostmgr::HostAccess>,
    incoming: I,
    config: ApiConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ApiError>
where
    I: futures::Stream<Item = Result<IO, IE>>,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + tonic::transport::server::Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<HostServiceServer<hosts::HostApi>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let server = server_builder(&config)?;
    // Prometheus scrapes `/metrics` (in `config.internal`) over HTTP/1.1.
    let mut server = server.accept_http1(true).timeout(config.request_timeout).layer(auth::AuthLayer(
        config.auth.clone(),
        config.observer.clone(),
        config.audit.clone(),
        Arc::new(browser::BrowserPolicy::new(&config.allowed_hosts)),
    ));
    let router = server
        .add_routes(config.internal.clone().unwrap_or_default())
        .add_service(health)
        .add_service(reflection)
        .add_service(limited!(HostServiceServer, hosts::HostApi::new(hosts), config));
    tracing::info!("host manager API serving");
    router.serve_with_incoming_shutdown(incoming, shutdown).await?;
    Ok(())
}

/// Serves the API on `listener` until `shutdown` completes (then in-flight
/// calls finish and the function returns).
pub async fn serve(
    roles: Roles,
    listener: tokio::net::TcpListener,
    config: ApiConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ApiError> {
    tracing::info!(addr = ?listener.local_addr().ok(), "API listening");
    serve_incoming(roles, paceline_proto::incoming::tcp(listener), config, shutdown).await
}

/// Like [`serve`], on connections accepted elsewhere (a highly available
/// server hands the connections of its one API port first to the standby
/// API, see [`standby`], then to this one once it leads).
pub async fn serve_incoming<I, IO, IE>(
    roles: Roles,
    incoming: I,
    config: ApiConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ApiError>
where
    I: futures::Stream<Item = Result<IO, IE>>,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + tonic::transport::server::Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let router = router(roles, &config).await?;
    tracing::info!("API serving");
    router.serve_with_incoming_shutdown(incoming, shutdown).await?;
    Ok(())
}
