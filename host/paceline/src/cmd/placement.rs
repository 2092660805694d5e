//! `paceline server --roles placement`: placement engines in a process of
//! their own, against a core (`--roles all` or `jobmgr,resmgr,hostmgr`)
//! reached through the internal placement protocol on the core's API port
//! (`paceline_placement::remote`). Stateless: run as many as you like; the
//! core's host manager leases each host to one engine at a time.
//!
//! The process reads plugin versions from the cluster's store (it never
//! writes there) and rebuilds its registry when a slot's history changes,
//! so an activation or rollback on the core reaches it within a few seconds.
//! It follows the core's leader when the core is highly available.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use paceline_placement::remote::RemoteCore;
use paceline_placement::{Engine, EngineConfig};
use paceline_server::ServerConfig;
use tracing::{info, warn};

use super::client::{ClientOpts, Output, leading_channel};
use super::process::{runtime, until_signal};

/// How often the engine checks that the core still serves and that no
/// plugin slot changed.
const CHECK_EVERY: Duration = Duration::from_secs(2);

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or_default()
}

/// `core`: the core's API addresses; `None` with a zookeeper membership:
/// the leader of `jobmgr` is looked up there each time a connection is needed.
pub fn run(
    config: ServerConfig,
    core: Option<String>,
    token: Option<paceline_model::secret::Secret>,
    ca_cert: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let discovery = match &core {
            Some(_) => None,
            None => {
                let me = paceline_membership::MemberInfo {
                    id: format!(
                        "{}-placement",
                        config.member_id.clone().unwrap_or_else(paceline_server::default_member_id)
                    ),
                    api_addr: String::new(),
                    agent_addr: String::new(),
                    roles: Vec::new(),
                };
                Some(paceline_membership::from_config(&config.membership, me, Vec::new()).context("membership")?)
            }
        };
        let core = core.unwrap_or_default();
        let store =
            paceline_server::open_store(&config).await.context("opening the cluster's store (for plugin versions)")?;
        let mut opts =
            ClientOpts { server: core.clone(), output: Output::Table, token: None, token_file: None, ca_cert };
        // Its figures (rounds, plugins, the process) on a scrape listener of
        // its own, if asked: an engine serves no API (decision 0022).
        let registry_now = Arc::new(std::sync::Mutex::new(None));
        let metrics = Arc::new(paceline_server::metrics::Metrics::new(vec![Box::new(
            paceline_server::metrics::PluginsCollector(registry_now.clone()),
        )]));
        metrics.leading(&["placement"], None);
        if let Some(addr) = config.metrics_listen {
            paceline_server::metrics::check_scrape_address(addr, config.metrics_listen_public)
                .map_err(anyhow::Error::msg)?;
            let (bound, _task) =
                paceline_server::metrics::spawn_scrape_listener(addr, metrics.clone(), std::future::pending())
                    .await
                    .with_context(|| format!("listening on {addr} for metrics"))?;
            println!("paceline server: placement engine metrics on http://{bound}/metrics (no token)");
        }
        match &discovery {
            Some(_) => println!("paceline server: placement engine for the core leading in ZooKeeper"),
            None => println!("paceline server: placement engine for the core at {core}"),
        }
        let shutdown = until_signal();
        tokio::pin!(shutdown);
        loop {
            let channel = tokio::select! {
                () = &mut shutdown => return anyhow::Ok(()),
                c = connect(&mut opts, discovery.as_deref()) => c,
            };
            let bearer = paceline_proto::bearer::Bearer::new(token.as_ref().map(|t| t.expose()))?;
            let remote = Arc::new(RemoteCore::new(channel.clone(), bearer));
            let histories = store.slot_histories().await.context("reading plugin slots")?;
            let registry = paceline_server::open_registry(&config, store.clone()).await.context("loading plugins")?;
            if let Ok(mut now) = registry_now.lock() {
                *now = Some(registry.clone());
            }
            info!(core = %opts.server, "placement engine connected");
            let engine = Engine::new(remote.clone(), remote, registry, EngineConfig::default());
            let mut checked = Instant::now();
            loop {
                let started = Instant::now();
                let report = tokio::select! {
                    () = &mut shutdown => return anyhow::Ok(()),
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
    })?;
    Ok(ExitCode::SUCCESS)
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
/// `discovery`, the addresses are those of the `jobmgr` leader ZooKeeper names.
async fn connect(
    opts: &mut ClientOpts,
    discovery: Option<&dyn paceline_membership::Membership>,
) -> tonic::transport::Channel {
    let mut logged = false;
    loop {
        if let Some(membership) = discovery {
            match membership.leader_of(paceline_membership::Role::Jobmgr).await {
                Ok(Some(leader)) => opts.server = leader.api_addr,
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
        match leading_channel(opts).await {
            Ok(c) => return c,
            Err(e) => {
                if !logged {
                    warn!(error = %format!("{e:#}"), "cannot reach the core; retrying every second");
                    logged = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
