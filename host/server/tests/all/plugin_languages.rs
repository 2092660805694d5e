//! Live swaps across languages in a running cluster (every role joined by
//! `paceline_server::cluster`, simulated hosts, SQLite): the `placement/batch` slot
//! goes from the Rust `binpack` to its Python port, to its TypeScript port and
//! back to Rust while jobs keep arriving and their tasks are placed; no
//! placement call fails. Then the Python port shadows the Rust one on the live
//! cluster and never disagrees.
//!
//! The Python and TypeScript components are built by
//! `plugins/examples/build.sh` (the toolchains install themselves); compiled
//! artifacts are cached in `target/plugin-cache/tests`, shared with the
//! plugin runtime's tests.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use paceline_model::job::JobKind;
use paceline_model::task::TaskState;
use paceline_plugin::{DeployOptions, MemoryStore, PluginRuntime, Registry, RuntimeConfig};
use support::*;

const SLOT: &str = "placement/batch";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn components() -> PathBuf {
    let out = std::process::Command::new(root().join("plugins/examples/build.sh"))
        .output()
        .expect("run plugins/examples/build.sh (needs python3 and node; it installs the rest)");
    assert!(out.status.success(), "plugins/examples/build.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn registry_with_cache() -> Arc<Registry> {
    // The default limits, the default 2 s deadline: what a server runs with.
    let config =
        RuntimeConfig { cache_dir: Some(root().join("target/plugin-cache/tests")), ..RuntimeConfig::default() };
    let runtime = Arc::new(PluginRuntime::new(config).expect("runtime"));
    Arc::new(Registry::open(runtime, Arc::new(MemoryStore::default())).expect("registry"))
}

/// Calls and errors of every version of the slot, by id.
fn metrics(registry: &Registry) -> Vec<(String, u64, u64)> {
    let slot = registry.list().into_iter().find(|s| s.slot == SLOT).expect("slot listed");
    slot.versions.iter().map(|v| (v.record.id(), v.metrics.calls, v.metrics.errors.values().sum())).collect()
}

fn calls_of(registry: &Registry, id: &str) -> u64 {
    metrics(registry).into_iter().find(|(v, _, _)| v == id).map(|(_, c, _)| c).unwrap_or(0)
}

async fn placed(c: &SimCluster, id: &str, n: usize) -> bool {
    let info = c.cluster.jobs.get(id).await.expect("job");
    info.tasks.iter().filter(|t| t.state == TaskState::Running).count() == n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_swaps_rust_python_js_rust_in_a_running_cluster_without_a_failed_round() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wasm = components();
    let registry = registry_with_cache();
    let c = SimCluster::start_with(
        Arc::new(paceline_hostmgr::SimProvider::new(paceline_hostmgr::SimConfig {
            shapes: shapes(24),
            ..paceline_hostmgr::SimConfig::default()
        })),
        Arc::new(paceline_storage::sqlite::SqliteStore::open(dir.path().join("paceline.sqlite")).expect("sqlite")),
        registry.clone(),
    )
    .await;
    let rust = registry.active(SLOT).expect("slot").expect("the built-in binpack serves");
    for name in ["binpack-py", "binpack-ts"] {
        let bytes = std::fs::read(wasm.join(format!("{name}.wasm"))).expect("component");
        let r = registry.clone();
        tokio::task::spawn_blocking(move || r.deploy(SLOT, name, "1", &bytes, DeployOptions::default()))
            .await
            .expect("join")
            .unwrap_or_else(|e| panic!("{name} deploys: {e}"));
    }

    // Each phase: activate a version, submit two jobs, and keep the cluster
    // stepping until every task of every job so far runs.
    let phases = [rust.clone(), "binpack-py@1".into(), "binpack-ts@1".into(), rust.clone()];
    let mut jobs = Vec::new();
    for (i, version) in phases.iter().enumerate() {
        let before = calls_of(&registry, version);
        registry.activate(SLOT, version).expect("activates");
        for j in 0..2 {
            let id = format!("swap-{i}-{j}");
            let mut spec = job(JobKind::Batch, 8);
            spec.default_task.env.insert("SIM_DURATION_MS".into(), "100000000".into());
            c.cluster.jobs.create(&id, spec).await.expect("create");
            jobs.push(id);
            // One step between the two jobs: the swap happens with work in flight.
            c.step(100).await;
        }
        let all = jobs.clone();
        let done = c
            .run_until(100, 200, async |c| {
                for id in &all {
                    if !placed(c, id, 8).await {
                        return false;
                    }
                }
                true
            })
            .await;
        assert!(done, "phase {i} ({version}): every task placed and running; metrics {:?}", metrics(&registry));
        assert!(calls_of(&registry, version) > before, "phase {i}: {version} placed this phase's tasks");
    }
    for (id, calls, errors) in metrics(&registry) {
        assert_eq!(errors, 0, "{id}: {calls} calls, {errors} failed");
    }
    // Binpack fills hosts one after another: the 64 tasks (500 mcpu each on
    // 4-core hosts) sit on 8 hosts whichever language placed them.
    let mut hosts = std::collections::BTreeSet::new();
    for id in &jobs {
        for t in c.cluster.jobs.get(id).await.expect("job").tasks {
            hosts.insert(t.host.clone().expect("placed on a host"));
        }
    }
    assert_eq!(hosts.len(), 8, "{hosts:?}");

    // Shadow: Python beside the active Rust binpack, on live rounds.
    registry.shadow(SLOT, "binpack-py@1").expect("shadows");
    for j in 0..3 {
        let id = format!("shadow-{j}");
        c.cluster.jobs.create(&id, job(JobKind::Batch, 6)).await.expect("create");
        let done = c.run_until(100, 200, async |c| placed(c, &id, 6).await).await;
        assert!(done, "{id} placed");
    }
    let mut report = registry.shadow_report(SLOT).expect("slot").expect("a report");
    for _ in 0..300 {
        if report.compared + report.skipped >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        report = registry.shadow_report(SLOT).expect("slot").expect("a report");
    }
    let report = registry.stop_shadow(SLOT).expect("slot").unwrap_or(report);
    assert!(report.compared >= 3, "{report:?}");
    assert_eq!(report.identical, report.compared, "{report:?}");
    assert_eq!((report.tasks_differing, report.candidate_faults), (0, 0), "{report:?}");
}
