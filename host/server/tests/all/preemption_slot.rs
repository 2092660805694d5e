//! The resource manager preempting through the Wasm `preemption` slot.

use std::sync::Arc;

use paceline_model::job::JobKind;
use paceline_model::pool::PoolSpec;
use paceline_plugin::{DeployOptions, MemoryStore, PluginRuntime, Registry, RuntimeConfig};
use paceline_plugin_sdk::types::VictimReason;
use paceline_resmgr::{Config, GangSpec, KillReason, ResourceManager, Transition};
use paceline_server::wiring::SlotPreemption;

fn pool(reservation_cpu: u64) -> PoolSpec {
    let mut spec = PoolSpec::default();
    spec.reservation.cpu = reservation_cpu;
    spec.share.cpu = 1;
    spec
}

#[test]
fn borrowed_capacity_comes_back_through_the_wasm_policy() {
    let runtime = Arc::new(PluginRuntime::new(RuntimeConfig::default()).expect("runtime"));
    let registry = Arc::new(Registry::open(runtime, Arc::new(MemoryStore::default())).expect("registry"));
    registry
        .deploy(
            "preemption",
            "priority-preempt",
            "1",
            paceline_plugin_artifacts::PRIORITY_PREEMPT,
            DeployOptions::default(),
        )
        .expect("deploys");
    registry.activate("preemption", "priority-preempt@1").expect("activates");

    let mut rm = ResourceManager::new(Config { preempt_after_periods: 1, ..Config::default() });
    rm.set_policy(Box::new(SlotPreemption::new(registry.clone())));
    rm.set_capacity(paceline_model::Resources::new(10_000, 1 << 30, 1 << 30, 0));
    rm.create_pool("/a", pool(5_000)).expect("a");
    rm.create_pool("/b", pool(5_000)).expect("b");
    for i in 0..10 {
        let g = GangSpec {
            job: i,
            tasks: 1,
            preemptible: i >= 2,
            per_task: paceline_model::Resources::new(1_000, 0, 0, 0),
            ..GangSpec::default()
        };
        rm.submit("/a", g, 0).expect("a job");
    }
    assert_eq!(rm.tick(1).admitted_gangs, 10);
    let mut ready = Vec::new();
    rm.take_ready(JobKind::Batch, usize::MAX, 1, &mut ready);
    for t in &ready {
        for e in [Transition::Placed, Transition::StartLaunch, Transition::Running] {
            rm.transition(t.id, e, 1).expect("runs");
        }
    }
    let b = GangSpec {
        job: 100,
        tasks: 3,
        per_task: paceline_model::Resources::new(1_000, 0, 0, 0),
        ..GangSpec::default()
    };
    rm.submit("/b", b, 2).expect("b");
    let mut kills = Vec::new();
    for now in 2..6 {
        kills.extend(rm.tick(now).kills);
    }
    assert_eq!(kills.len(), 3, "exactly B's three cores: {kills:?}");
    assert!(kills.iter().all(|k| k.reason == KillReason::Preempted(VictimReason::OverEntitlement)));
    let slot = registry.list().into_iter().find(|s| s.slot == "preemption").expect("slot listed");
    let calls: u64 = slot.versions.iter().map(|v| v.metrics.calls).sum();
    assert!(calls >= 1, "the Wasm policy was called");
}
