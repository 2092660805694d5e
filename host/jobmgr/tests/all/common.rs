use std::path::Path;
use std::sync::Arc;

use paceline_jobmgr::scenario::Harness;
use paceline_model::Resources;
use paceline_model::job::{JobConfig, JobKind};
use paceline_model::run::LaunchRequest;
use paceline_model::task::{HealthCheck, TaskSpec};
use paceline_plugin::{DeployOptions, MemoryStore, PluginRuntime, Registry, RuntimeConfig};

/// A registry with the four default lifecycle plugins deployed as Wasm and active.
pub fn registry() -> Arc<Registry> {
    let rt = Arc::new(PluginRuntime::new(RuntimeConfig::default()).expect("runtime"));
    let reg = Registry::open(rt, Arc::new(MemoryStore::default())).expect("registry");
    for (kind, bytes) in [
        ("batch", paceline_plugin_artifacts::BATCH),
        ("stateless", paceline_plugin_artifacts::STATELESS),
        ("stateful", paceline_plugin_artifacts::STATEFUL),
        ("daemon", paceline_plugin_artifacts::DAEMON),
    ] {
        let slot = format!("lifecycle/{kind}");
        reg.deploy(&slot, kind, "1", bytes, DeployOptions::default()).expect("deploy");
        reg.activate(&slot, &format!("{kind}@1")).expect("activate");
    }
    Arc::new(reg)
}

pub fn harness(dir: &Path, hosts: &[&str]) -> Harness {
    Harness::new(Harness::sqlite(&dir.join("jobs.sqlite")), registry(), hosts, 1_000_000)
}

/// Calls the Wasm version of `slot` served (proof the plugin ran as Wasm).
pub fn wasm_calls(h: &Harness, slot: &str) -> u64 {
    h.jm.registry()
        .list()
        .into_iter()
        .filter(|s| s.slot == slot)
        .flat_map(|s| s.versions)
        .map(|v| v.metrics.calls)
        .sum()
}

pub fn config(kind: JobKind, n: u32) -> JobConfig {
    JobConfig {
        name: "job".into(),
        owner: "team".into(),
        pool: "/test".into(),
        kind,
        instance_count: n,
        default_task: TaskSpec {
            command: "serve".into(),
            resources: Resources::new(100, 64, 10, 0),
            ..TaskSpec::default()
        },
        ..JobConfig::default()
    }
}

pub fn health() -> HealthCheck {
    HealthCheck {
        command: "check".into(),
        args: vec![],
        http: None,
        tcp: None,
        initial_delay_secs: 0,
        interval_secs: 1,
        timeout_secs: 1,
        max_consecutive_failures: 1,
    }
}

/// Healthy unless the run's args say `bad`; `None` without a health check.
pub fn healthy(run: &LaunchRequest) -> Option<bool> {
    run.spec.health_check.as_ref().map(|_| !run.spec.args.iter().any(|a| a == "bad"))
}

pub fn no_health(_: &LaunchRequest) -> Option<bool> {
    None
}
