//! What every kind of server does before it serves: read the tokens and
//! TLS files (a broken one stops the start before anything listens), create
//! the data dir, open the store, open the plugin registry, restore the
//! pools, and check the task secrets' key.

use std::path::Path;
use std::sync::Arc;

use paceline_membership::MembershipConfig;
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_plugin::{PluginRuntime, Registry, RuntimeConfig};
use paceline_storage::config::{SqliteConfig, StorageConfig};
use tracing::info;

use crate::ServerError;
use crate::config::{ServerConfig, TlsConfig, advertised_host, check_api_exposure};
use crate::wiring::StoreVersions;

/// Says loudly, at start, when task secrets in the store were sealed with
/// another key than this server's (their runs would not launch): servers
/// that share a store must share `secrets_key_file`. A server in a
/// ZooKeeper membership without one is warned before any secret exists.
pub(crate) async fn check_secret_key(
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

/// What every kind of server does first: read the tokens file and the TLS
/// files (a broken one must stop the start before anything listens), create
/// the data directory and open the store (default SQLite in it).
pub(crate) async fn prepare(
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
    let store = open_store(config).await?;
    Ok((api_config, store))
}

/// The configured store, default SQLite at `<data_dir>/paceline.db`.
pub async fn open_store(config: &ServerConfig) -> Result<Arc<dyn paceline_storage::Store>, ServerError> {
    let storage = config
        .storage
        .clone()
        .unwrap_or_else(|| StorageConfig::Sqlite(SqliteConfig { path: config.data_dir.join("paceline.db") }));
    let store = paceline_storage::config::open(&storage).await?;
    info!(?storage, "store open");
    Ok(store)
}

/// Every plugin version and slot history of `store`, compiled (from
/// `<data_dir>/plugin-cache`, or `PACELINE_PLUGIN_CACHE_DIR`, when this
/// machine compiled them before). The
/// all-in-one server and the placement-only process open it the same way.
pub async fn open_registry(
    config: &ServerConfig,
    store: Arc<dyn paceline_storage::Store>,
) -> Result<Arc<Registry>, ServerError> {
    let cache_dir = shared_plugin_cache().unwrap_or_else(|| config.data_dir.join("plugin-cache"));
    let runtime_config = RuntimeConfig { cache_dir: Some(cache_dir), ..RuntimeConfig::default() };
    let versions = Arc::new(StoreVersions::new(store, tokio::runtime::Handle::current()));
    let registry = tokio::task::spawn_blocking(move || -> Result<Registry, paceline_plugin::PluginError> {
        Registry::open(Arc::new(PluginRuntime::new(runtime_config)?), versions)
    })
    .await
    .map_err(|e| ServerError::Other(format!("loading plugins: {e}")))??;
    Ok(Arc::new(registry))
}

/// The directory `PACELINE_PLUGIN_CACHE_DIR` names, for compiled plugins
/// shared by every server of this user on the machine instead of one cache
/// per data dir (scripts/test sets it: the tests start hundreds of servers,
/// each in a fresh data dir, and each compiled the built-in policies again).
/// Compiled artifacts are loaded without being checked as Wasm is, so the
/// directory must be this user's and writable by nobody else; otherwise it
/// is not used (a warning says why) and the data dir's cache is.
fn shared_plugin_cache() -> Option<std::path::PathBuf> {
    let dir = std::path::PathBuf::from(std::env::var_os("PACELINE_PLUGIN_CACHE_DIR").filter(|v| !v.is_empty())?);
    match private_cache_dir(&dir) {
        Ok(()) => Some(dir),
        Err(why) => {
            tracing::warn!(dir = %dir.display(), "PACELINE_PLUGIN_CACHE_DIR not used: {why}; compiled plugins are cached in the data dir");
            None
        }
    }
}

/// Creates `dir` (mode 700) if missing and checks that it is a directory of
/// this process's user that nobody else may write to.
fn private_cache_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| format!("cannot create it: {e}"))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("not a directory".into());
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(format!("owned by uid {}, not this process's", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!("others may write to it (mode {:o})", meta.mode() & 0o777));
    }
    Ok(())
}

/// The pools kept in the store. A store without any gets `/default` when
/// `default_pool` says so; a `/default` written by an earlier version is
/// rewritten as the same pool is written today.
pub(crate) async fn restore_pools(
    store: &dyn paceline_storage::Store,
    config: &ServerConfig,
) -> Result<Vec<(String, PoolSpec)>, ServerError> {
    let mut pools =
        paceline_api::restore_pools(store).await.map_err(|e| ServerError::Other(format!("restoring pools: {e}")))?;
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
    Ok(pools)
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

/// A member that leads nothing and serves nothing, only reads who leads: a
/// process that finds another role's leader through the membership joins as
/// `<member id>-<suffix>`.
pub(crate) fn watching_member(
    config: &ServerConfig,
    suffix: &str,
) -> Result<Arc<dyn paceline_membership::Membership>, ServerError> {
    let me = paceline_membership::MemberInfo {
        id: format!("{}-{suffix}", config.member_id.clone().unwrap_or_else(default_member_id)),
        api_addr: String::new(),
        agent_addr: String::new(),
        roles: Vec::new(),
    };
    paceline_membership::from_config(&config.membership, me, Vec::new())
        .map_err(|e| ServerError::Other(format!("membership: {e}")))
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
    fn a_shared_plugin_cache_is_made_private_and_refused_when_others_may_write_to_it() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("cache");
        private_cache_dir(&dir).expect("made");
        let mode = std::fs::metadata(&dir).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "created for this user only");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let why = private_cache_dir(&dir).expect_err("a directory others may write to is refused");
        assert!(why.contains("others may write"), "{why}");
        let file = root.path().join("file");
        std::fs::write(&file, b"x").expect("file");
        assert!(private_cache_dir(&file).is_err(), "a file is refused");
    }
}
