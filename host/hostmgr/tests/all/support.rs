//! Shared helpers: specs, launch requests, a manager over simulated hosts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use paceline_hostmgr::{
    HostEvent, HostEvents, HostManager, HostShape, LeaseRequest, ManagerConfig, SimConfig, SimProvider,
};
use paceline_model::Resources;
use paceline_model::run::{LaunchRequest, RunUpdate};
use paceline_model::task::TaskSpec;

pub const HOST: Resources = Resources::new(4000, 8192, 10_000, 0);
pub const SMALL: Resources = Resources::new(1000, 1024, 0, 0);

pub fn spec(resources: Resources, env: &[(&str, &str)]) -> TaskSpec {
    TaskSpec {
        command: "sleep".into(),
        resources,
        env: env.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
        ..TaskSpec::default()
    }
}

pub fn req(run_id: &str, resources: Resources, env: &[(&str, &str)]) -> LaunchRequest {
    let task_id = paceline_model::RunId::task_part(run_id).unwrap_or(run_id).to_string();
    LaunchRequest {
        gang: None,
        user: None,
        run_id: run_id.into(),
        task_id,
        spec: spec(resources, env),
        env: BTreeMap::new(),
        secrets: Vec::new(),
        gpu: Default::default(),
    }
}

pub fn config() -> ManagerConfig {
    ManagerConfig {
        tick_interval: None,
        heartbeat_timeout_ms: 15_000,
        redeliver_after_ms: 30_000,
        ..ManagerConfig::default()
    }
}

pub fn sim_config(hosts: usize) -> SimConfig {
    SimConfig { shapes: vec![HostShape::new(hosts, "h", HOST).attribute("zone", "a")], ..SimConfig::default() }
}

pub async fn sim_manager(hosts: usize, config: ManagerConfig) -> (SimProvider, HostManager, HostEvents) {
    let sim = SimProvider::new(sim_config(hosts));
    let manager =
        HostManager::builder(Arc::new(sim.clone())).clock(Arc::new(sim.clock())).config(config).start().await.unwrap();
    manager.sync().await.unwrap();
    manager.expect_runs(Vec::new()).await;
    let events = manager.subscribe();
    (sim, manager, events)
}

/// The next run update, skipping host events; panics after a second.
pub async fn next_run(events: &mut HostEvents) -> RunUpdate {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), events.recv()).await {
            Ok(Some(HostEvent::Run(u))) => return u,
            Ok(Some(_)) => continue,
            Ok(None) => panic!("event stream ended"),
            Err(_) => panic!("no run update within 5 s"),
        }
    }
}

/// Asserts no run update is waiting (after `manager.sync()`).
pub fn no_run_update(events: &mut HostEvents) {
    while let Some(ev) = events.try_recv() {
        if let HostEvent::Run(u) = ev {
            panic!("unexpected update {u:?}");
        }
    }
}

/// Leases `host` alone, giving back a lease an earlier step left on it
/// (a launch keeps its host leased until the lease is released).
pub async fn lease_host(manager: &HostManager, host: &str) -> paceline_hostmgr::LeaseId {
    if let Some(old) = manager.host(host).and_then(|h| h.lease) {
        manager.release(old).unwrap();
    }
    let mut request = LeaseRequest::new(Resources::ZERO, 1, 60_000);
    request.only_hosts = vec![host.to_string()];
    let lease = manager.lease(&request).unwrap();
    assert!(lease.hosts.iter().any(|o| o.name == host), "{host} not offered");
    lease.id
}
