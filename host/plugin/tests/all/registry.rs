//! Registry behaviour: persistence across restarts, the compile cache,
//! rollback, shadow runs with decision diffs, metrics, lifecycle slots.

use std::sync::Arc;

use paceline_plugin::{DeployOptions, DirStore, PluginError, Registry, RuntimeConfig, ServedBy, VersionState};
use paceline_plugin_artifacts as artifacts;
use paceline_plugin_sdk::types::*;

use crate::support::{registry, runtime, runtime_with, workload};

#[test]
fn versions_and_active_survive_a_restart_and_compiles_are_cached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = || RuntimeConfig { cache_dir: Some(dir.path().join("cache")), ..RuntimeConfig::default() };
    {
        let reg =
            Registry::open(runtime_with(config()), Arc::new(DirStore::open(dir.path().join("store")).expect("store")))
                .expect("opens");
        let d = reg
            .deploy("placement/batch", "binpack", "1", artifacts::BINPACK, DeployOptions::default())
            .expect("deploys");
        assert!(!d.from_cache);
        reg.deploy("placement/batch", "spread", "2", artifacts::SPREAD, DeployOptions::default()).expect("deploys");
        reg.activate("placement/batch", "binpack@1").expect("activates");
        reg.activate("placement/batch", "spread@2").expect("activates");
    }
    // A new process: same store, same cache, a fresh engine.
    let reg =
        Registry::open(runtime_with(config()), Arc::new(DirStore::open(dir.path().join("store")).expect("store")))
            .expect("reopens");
    assert_eq!(reg.active("placement/batch").expect("slot").as_deref(), Some("spread@2"));
    let d =
        reg.deploy("placement/batch", "binpack", "3", artifacts::BINPACK, DeployOptions::default()).expect("deploys");
    assert!(d.from_cache, "same bytes and engine settings come from the cache");
    // Rollback goes to the version active before, recorded before the restart.
    assert_eq!(reg.rollback("placement/batch").expect("rolls back").as_deref(), Some("binpack@1"));
    let listed = reg.list();
    let state = |id: &str| listed[0].versions.iter().find(|v| v.record.id() == id).map(|v| v.record.state);
    assert_eq!(state("binpack@1"), Some(VersionState::Active));
    assert_eq!(state("spread@2"), Some(VersionState::Retired));
    assert!(matches!(reg.activate("placement/batch", "nope@1"), Err(PluginError::UnknownVersion { .. })));
}

/// Issue 43: a second rollback used to retire the only version left,
/// leaving the slot with no active version and its native policy serving
/// unannounced. It is refused, naming the slot and what it holds, and the
/// slot keeps serving the version it had.
#[test]
fn a_rollback_with_nothing_to_go_back_to_is_refused_and_keeps_the_active_version() {
    let reg = registry(runtime());
    reg.deploy("placement/batch", "binpack", "1", artifacts::BINPACK, DeployOptions::default()).expect("deploys");
    reg.deploy("placement/batch", "spread", "2", artifacts::SPREAD, DeployOptions::default()).expect("deploys");
    reg.activate("placement/batch", "binpack@1").expect("activates");
    reg.activate("placement/batch", "spread@2").expect("activates");
    assert_eq!(reg.rollback("placement/batch").expect("rolls back").as_deref(), Some("binpack@1"));

    let e = reg.rollback("placement/batch").expect_err("nothing before binpack@1");
    assert!(matches!(e, PluginError::NothingToRollBack { ref slot, .. } if slot == "placement/batch"), "{e:?}");
    let msg = e.to_string();
    for part in ["placement/batch", "binpack@1 is active", "binpack@1 active", "spread@2 retired", "plugin activate"] {
        assert!(msg.contains(part), "{part:?} not in: {msg}");
    }
    assert_eq!(reg.active("placement/batch").expect("slot").as_deref(), Some("binpack@1"), "still served");
    let listed = reg.list();
    let state = |id: &str| listed[0].versions.iter().find(|v| v.record.id() == id).map(|v| v.record.state);
    assert_eq!(state("binpack@1"), Some(VersionState::Active));
    assert_eq!(state("spread@2"), Some(VersionState::Retired));
    let answer = reg.place("placement/batch", &workload(10, 10, 1)).expect("answers");
    assert_eq!(answer.served_by, ServedBy::Version("binpack@1".into()), "not the native fallback");

    // A slot that never had a version active says so too.
    let e = reg.rollback("placement/stateless").expect_err("nothing active");
    assert!(e.to_string().contains("no version is active"), "{e}");
}

#[test]
fn a_corrupt_cache_entry_is_recompiled_not_trusted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = runtime_with(RuntimeConfig { cache_dir: Some(dir.path().to_path_buf()), ..RuntimeConfig::default() });
    let (_, info) = rt.compile(artifacts::BINPACK).expect("compiles");
    assert!(!info.from_cache);
    for entry in std::fs::read_dir(dir.path()).expect("cache dir") {
        let p = entry.expect("entry").path();
        if p.extension().is_some_and(|e| e == "cwasm") {
            let mut bytes = std::fs::read(&p).expect("read");
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0xff;
            std::fs::write(&p, bytes).expect("write");
        }
    }
    let (_, info) = rt.compile(artifacts::BINPACK).expect("compiles again");
    assert!(!info.from_cache, "a tampered artifact must not be loaded");
}

#[test]
fn shadow_reports_decision_differences_without_acting() {
    let reg = registry(runtime());
    reg.deploy("placement/batch", "binpack", "1", artifacts::BINPACK, DeployOptions::default()).expect("deploys");
    reg.deploy("placement/batch", "spread", "1", artifacts::SPREAD, DeployOptions::default()).expect("deploys");
    reg.deploy("placement/batch", "binpack", "2", artifacts::BINPACK, DeployOptions::default()).expect("deploys");
    reg.activate("placement/batch", "binpack@1").expect("activates");

    for (candidate, expect_same) in [("spread@1", false), ("binpack@2", true)] {
        reg.shadow("placement/batch", candidate).expect("shadows");
        for seed in 0..5 {
            let a = reg.place("placement/batch", &workload(60, 40, seed)).expect("answers");
            assert_eq!(a.served_by, ServedBy::Version("binpack@1".into()), "the shadow never serves");
        }
        let report =
            wait_for(|| reg.shadow_report("placement/batch").expect("slot").filter(|r| r.compared + r.skipped >= 5));
        let report = reg.stop_shadow("placement/batch").expect("slot").unwrap_or(report);
        assert_eq!(report.candidate, candidate);
        assert!(report.compared > 0);
        assert_eq!(report.candidate_faults, 0);
        if expect_same {
            assert_eq!(report.identical, report.compared);
            assert_eq!(report.tasks_differing, 0);
            assert!(report.disagreements.is_empty(), "{:?}", report.disagreements);
        } else {
            assert!(report.tasks_differing > 0, "{report:?}");
            assert!(!report.samples.is_empty());
            // One row per differing task, the newest kept; unnamed tasks and hosts by their place.
            let rows = &report.disagreements;
            assert!(!rows.is_empty() && rows.len() <= paceline_plugin::MAX_DISAGREEMENTS, "{}", rows.len());
            assert_eq!(rows.len() as u64, report.tasks_differing.min(paceline_plugin::MAX_DISAGREEMENTS as u64));
            assert!(rows.iter().all(|d| d.kind == "placement" && d.active != d.shadow && d.task.starts_with("job #")));
        }
    }
    let info = &reg.list()[0];
    assert!(info.shadow.is_none());
    let active = info.versions.iter().find(|v| v.record.id() == "binpack@1").expect("listed");
    assert_eq!(active.metrics.calls, 10);
    assert!(active.metrics.p99_us > 0);
}

fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..500 {
        if let Some(v) = f() {
            return v;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("condition not reached in 5 s")
}

#[test]
fn preemption_slot_and_lifecycle_natives() {
    let reg = registry(runtime());
    let req = PreemptionRequest {
        pools: vec![
            PoolView { path: "/a".into(), allocation: Resources::new(3000, 0, 0, 0), ..PoolView::default() },
            PoolView { path: "/b".into(), ..PoolView::default() },
        ],
        running: (0..3)
            .map(|i| RunningTask {
                pool: 0,
                priority: i,
                preemptible: true,
                resources: Resources::new(1000, 0, 0, 0),
                ..RunningTask::default()
            })
            .collect(),
        needs: vec![Need { pool: 1, priority: 9, resources: Resources::new(1500, 0, 0, 0), from_pools: vec![0] }],
        ..PreemptionRequest::default()
    };
    let native = reg.select_victims(&req).expect("native answers");
    assert_eq!(native.served_by, ServedBy::Native("priority-preempt"));
    reg.deploy("preemption", "priority-preempt", "1", artifacts::PRIORITY_PREEMPT, DeployOptions::default())
        .expect("deploys");
    reg.activate("preemption", "priority-preempt@1").expect("activates");
    let wasm = reg.select_victims(&req).expect("answers");
    assert_eq!(wasm.served_by, ServedBy::Version("priority-preempt@1".into()));
    assert_eq!(wasm.value, native.value);
    assert_eq!(wasm.value.iter().map(|v| v.task).collect::<Vec<_>>(), vec![0, 1]);

    // Every lifecycle slot has its kind's default policy built in; one set
    // for the slot replaces it, and a native of another world is refused.
    let job = JobView { instance_count: 2, ..JobView::default() };
    let built_in = reg.on_event("lifecycle/batch", &job, &[], &Event::JobCreated).expect("answers");
    assert_eq!(built_in.served_by, ServedBy::Native("batch"));
    let launch_all: paceline_plugin::natives::NativeLifecycle =
        Arc::new(|j: &JobView, _: &[TaskView], _: &[Event]| (0..j.instance_count).rev().map(Action::Launch).collect());
    reg.set_native(
        "lifecycle/batch",
        paceline_plugin::NativePolicy { name: "reversed", policy: paceline_plugin::Native::Lifecycle(launch_all) },
    )
    .expect("registers");
    let a = reg.on_event("lifecycle/batch", &job, &[], &Event::JobCreated).expect("answers");
    assert_eq!(a.value, vec![Action::Launch(1), Action::Launch(0)]);
    assert_eq!(a.served_by, ServedBy::Native("reversed"));
    // A native answer is held to the same contract as a component's: one
    // that launches an instance the job does not have is refused, not applied.
    let out_of_range: paceline_plugin::natives::NativeLifecycle =
        Arc::new(|j: &JobView, _: &[TaskView], _: &[Event]| vec![Action::Launch(j.instance_count + 7)]);
    reg.set_native(
        "lifecycle/batch",
        paceline_plugin::NativePolicy { name: "broken", policy: paceline_plugin::Native::Lifecycle(out_of_range) },
    )
    .expect("registers");
    match reg.on_event("lifecycle/batch", &job, &[], &Event::JobCreated) {
        Err(PluginError::Call(e)) => {
            assert_eq!(e.kind, paceline_plugin::FaultKind::InvalidAnswer, "{e}");
            assert!(e.version.contains("native broken"), "{e}");
        }
        other => panic!("a broken native answer must be refused: {other:?}"),
    }
    let wrong = paceline_plugin::natives::builtin("preemption").expect("built in");
    assert!(reg.set_native("lifecycle/batch", wrong).is_err(), "a preemption native cannot serve a lifecycle slot");
    // A placement component cannot serve a lifecycle slot.
    assert!(matches!(
        reg.deploy("lifecycle/batch", "binpack", "1", artifacts::BINPACK, DeployOptions::default()),
        Err(PluginError::WrongWorld { world: "lifecycle", .. })
    ));
}

#[test]
fn only_the_active_version_keeps_warm_instances() {
    let reg = registry(runtime());
    for v in 1..=3 {
        reg.deploy("placement/batch", "binpack", &v.to_string(), artifacts::BINPACK, DeployOptions::default())
            .expect("deploys");
    }
    let warm = |reg: &Registry, id: &str| {
        reg.list()[0].versions.iter().find(|v| v.record.id() == id).map(|v| v.warm_instances).expect("listed")
    };
    assert_eq!(warm(&reg, "binpack@3"), 0, "a deployed, self-tested version holds no slot until it serves");
    let req = workload(10, 10, 1);
    for id in ["binpack@1", "binpack@2", "binpack@3"] {
        reg.activate("placement/batch", id).expect("activates");
        reg.place("placement/batch", &req).expect("answers");
        assert_eq!(warm(&reg, id), 1, "{id} serves from a warm instance");
    }
    assert_eq!(warm(&reg, "binpack@1"), 0, "retired versions give their slots back");
    assert_eq!(warm(&reg, "binpack@2"), 0);
    reg.rollback("placement/batch").expect("rolls back");
    assert_eq!(warm(&reg, "binpack@3"), 0, "a rolled-back version gives its slots back");
}

/// A lifecycle built with the 0.1.1 SDK answers a burst in one call; one
/// built against 0.1.0 (kept as a fixture: `tests/fixtures/batch-sdk-0.1.0.wasm`
/// is the `batch` plugin as built before `on-events` existed) still links
/// against this host and answers the same burst one event at a time, with
/// the same actions.
#[test]
fn lifecycles_of_both_wit_versions_answer_a_burst() {
    const BATCH_0_1_0: &[u8] = include_bytes!("../fixtures/batch-sdk-0.1.0.wasm");
    let reg = registry(runtime());
    reg.deploy("lifecycle/batch", "batch", "new", artifacts::BATCH, DeployOptions::default()).expect("0.1.1 deploys");
    reg.deploy("lifecycle/batch", "batch", "old", BATCH_0_1_0, DeployOptions::default()).expect("0.1.0 deploys");
    let batched = |id: &str| {
        reg.list()
            .into_iter()
            .flat_map(|s| s.versions)
            .find(|v| v.record.id() == id)
            .map(|v| (v.batched, v.metrics.calls))
            .expect("listed")
    };
    assert!(batched("batch@new").0, "built with the 0.1.1 SDK: on-events");
    assert!(!batched("batch@old").0, "built against 0.1.0: on-event only");

    // Ten instances: 0..=2 just succeeded, 3 failed, the rest run.
    let job = JobView {
        kind: JobKind::Batch,
        state: JobState::Running,
        instance_count: 10,
        max_failures_per_instance: 3,
        ..JobView::default()
    };
    let tasks: Vec<TaskView> = (0..10)
        .map(|i| TaskView {
            instance: i,
            state: match i {
                0..=2 => TaskState::Succeeded,
                3 => TaskState::Failed,
                _ => TaskState::Running,
            },
            failures: u32::from(i == 3),
            ..TaskView::default()
        })
        .collect();
    let events: Vec<Event> =
        (0..4).map(|i| Event::TaskChanged(TaskChange { instance: i, state: tasks[i as usize].state })).collect();
    let expected: Vec<Action> = events
        .iter()
        .flat_map(|e| <plugin_batch::Batch as paceline_plugin_sdk::LifecyclePolicy>::on_event(&job, &tasks, e))
        .collect();
    assert_eq!(expected, vec![Action::RestartAfter(Restart { instance: 3, delay_ms: 1_000 })]);

    for id in ["batch@new", "batch@old"] {
        reg.activate("lifecycle/batch", id).expect("activates");
        let before = batched(id).1;
        let a = reg.on_events("lifecycle/batch", &job, &tasks, &events).expect("answers");
        assert_eq!(a.served_by, ServedBy::Version(id.to_string()));
        assert_eq!(a.value, expected, "{id}");
        assert_eq!(batched(id).1, before + 1, "{id}: one call for the burst, whichever export served it");
    }

    // Every instance done: each of the ten events finds the job finished;
    // the 0.1.1 component says so once.
    let done: Vec<TaskView> =
        tasks.iter().map(|t| TaskView { state: TaskState::Succeeded, failures: 0, ..t.clone() }).collect();
    let all: Vec<Event> =
        (0..10).map(|i| Event::TaskChanged(TaskChange { instance: i, state: TaskState::Succeeded })).collect();
    reg.activate("lifecycle/batch", "batch@new").expect("activates");
    let a = reg.on_events("lifecycle/batch", &job, &done, &all).expect("answers");
    assert_eq!(a.value, vec![Action::MarkJob(JobState::Succeeded)]);
}
