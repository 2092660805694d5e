//! The cluster's invariants against hostile guests whose answers are
//! well-formed but wrong (docs/invariants.md): one class per test. Each
//! answer must be refused where it is validated, counted as a fault of the
//! version, served by the fallback instead, and refused already at deploy
//! by the generated self-test. A refusal reported downstream counts the same.

use paceline_plugin::{DeployOptions, FaultKind, PluginError, Registry, RuntimeConfig, ServedBy, VersionState};
use paceline_plugin_artifacts as artifacts;
use paceline_plugin_sdk::types::*;

use crate::support::{registry, runtime, runtime_with};

const NO_SELF_TEST: DeployOptions = DeployOptions { self_test: false };

/// `good` active, then `bad` (deployed without its self-test) active on top.
fn bad_on_top(reg: &Registry, slot: &str, good: &[u8], bad: &[u8]) {
    reg.deploy(slot, "good", "1", good, DeployOptions::default()).expect("the good version deploys");
    reg.activate(slot, "good@1").expect("activates");
    reg.deploy(slot, "bad", "1", bad, NO_SELF_TEST).expect("the bad version deploys without its self-test");
    reg.activate(slot, "bad@1").expect("activates");
}

fn errors(reg: &Registry, slot: &str, id: &str, kind: FaultKind) -> u64 {
    let listed = reg.list();
    let s = listed.iter().find(|s| s.slot == slot).expect("slot listed");
    let v = s.versions.iter().find(|v| v.record.id() == id).expect("version listed");
    v.metrics.errors.get(kind.as_str()).copied().unwrap_or(0)
}

fn self_test_refuses(slot: &str, bad: &[u8], expected: &str) {
    let reg = registry(runtime());
    match reg.deploy(slot, "bad", "1", bad, DeployOptions::default()) {
        Err(PluginError::SelfTest(e)) => {
            assert_eq!(e.kind, FaultKind::InvalidAnswer, "{e}");
            assert!(e.message.contains("generated corpus"), "names the case: {e}");
            assert!(e.message.contains("input: {") || e.message.contains("input: ["), "carries the input: {e}");
            assert!(e.message.contains(expected), "{e}");
        }
        other => panic!("expected a self-test refusal, got {other:?}"),
    }
    assert!(reg.list().iter().all(|s| s.versions.is_empty()), "nothing was stored");
}

fn gang_request(max_per_host: u32) -> PlacementRequest {
    let host = HostOffer { free: Resources::new(8000, 8192, 0, 0), total: Resources::new(8000, 8192, 0, 0) };
    let task = |instance, gang| Task { instance, gang, demand: Resources::new(100, 100, 0, 0), ..Task::default() };
    PlacementRequest {
        hosts: vec![host, host],
        jobs: vec![JobInfo { max_per_host, ..JobInfo::default() }],
        constraints: vec![ConstraintSet::default()],
        tasks: vec![task(0, 0), task(1, 0), task(2, 1)],
        ..PlacementRequest::default()
    }
}

#[test]
fn placement_gang_whole_or_nothing_and_max_per_host() {
    let reg = registry(runtime_with(RuntimeConfig { auto_rollback_after: 100, ..RuntimeConfig::default() }));
    bad_on_top(&reg, "placement/batch", artifacts::BINPACK, artifacts::GUEST_GARBAGE);
    // Round 4: a gang in part. Round 5: two tasks of a job allowed one per host.
    for (round, max_per_host, expected) in [(4, 0, "placed only in part"), (5, 1, "per-host maximum")] {
        let mut req = gang_request(max_per_host);
        req.round = round;
        let answer = reg.place("placement/batch", &req).expect("the slot answers");
        assert_eq!(answer.served_by, ServedBy::Version("good@1".into()));
        assert_eq!(answer.faults.len(), 1);
        assert!(answer.faults[0].message.contains(expected), "round {round}: {}", answer.faults[0]);
        paceline_plugin_sdk::validate::check_placement(&req, &answer.value).expect("what is served holds");
    }
    assert_eq!(errors(&reg, "placement/batch", "bad@1", FaultKind::InvalidAnswer), 2);
    self_test_refuses("placement/batch", artifacts::GUEST_GARBAGE, "hard constraints");
}

/// Two shares of 600 and a whole GPU on a host of two wholly free devices.
fn gpu_request() -> PlacementRequest {
    let host = HostOffer { free: Resources::new(8000, 8192, 0, 2), total: Resources::new(8000, 8192, 0, 2) };
    let task = |instance, gpus| Task {
        instance,
        gang: instance,
        demand: Resources::new(100, 100, 0, gpus),
        ..Task::default()
    };
    let device = GpuDevice { free_milli: 1000, model: NO_VALUE };
    PlacementRequest {
        hosts: vec![host],
        jobs: vec![JobInfo::default()],
        constraints: vec![ConstraintSet::default()],
        tasks: vec![task(0, 0), task(1, 0), task(2, 1)],
        gpu_hosts: vec![GpuHost { devices: vec![device, device] }],
        gpu_tasks: [600, 600, 1000].map(|milli| GpuTask { milli, models: Vec::new() }).to_vec(),
        ..PlacementRequest::default()
    }
}

#[test]
fn placement_never_overcommits_a_gpu_device() {
    let reg = registry(runtime_with(RuntimeConfig { auto_rollback_after: 100, ..RuntimeConfig::default() }));
    bad_on_top(&reg, "placement/batch", artifacts::GPU_FGD, artifacts::GUEST_GPU_GREEDY);
    let req = gpu_request();
    let answer = reg.place("placement/batch", &req).expect("the slot answers");
    assert_eq!(answer.served_by, ServedBy::Version("good@1".into()));
    assert_eq!(answer.faults.len(), 1);
    assert!(answer.faults[0].message.contains("GPU devices"), "{}", answer.faults[0]);
    paceline_plugin_sdk::validate::check_placement(&req, &answer.value).expect("what is served holds");
    // What gpu-fgd served: the shares on different devices (600 + 600 > 1000)
    // and the whole GPU left waiting, with no device wholly free.
    let devices: Vec<&[u32]> = answer.value.grants.iter().map(|g| g.devices.as_slice()).collect();
    assert_eq!(devices.len(), 2, "{:?}", answer.value);
    assert_ne!(devices[0], devices[1]);
    assert!(answer.value.unplaced.iter().any(|u| u.task == 2), "{:?}", answer.value);
    assert_eq!(errors(&reg, "placement/batch", "bad@1", FaultKind::InvalidAnswer), 1);
    self_test_refuses("placement/batch", artifacts::GUEST_GPU_GREEDY, "placement case");
}

fn preemption_request(non_preemptible: bool, need_cpu: u64) -> PreemptionRequest {
    let task = |preemptible| RunningTask {
        pool: 0,
        preemptible,
        resources: Resources::new(1000, 1000, 0, 0),
        ..RunningTask::default()
    };
    PreemptionRequest {
        pools: vec![PoolView { path: "/a".into(), ..PoolView::default() }, PoolView::default()],
        running: vec![task(!non_preemptible), task(true), task(true)],
        needs: vec![Need { pool: 1, priority: 1, resources: Resources::new(need_cpu, 0, 0, 0), from_pools: vec![0] }],
        ..PreemptionRequest::default()
    }
}

/// GPU shares (WIT 0.1.3): candidates holding `held` milli-GPUs (each one
/// device in whole units, rounded up), a need of `need` milli-GPUs.
fn gpu_preemption_request(held: &[u64], need: u64) -> PreemptionRequest {
    let whole = |m: u64| m.div_ceil(1000);
    let running: Vec<RunningTask> = held
        .iter()
        .enumerate()
        .map(|(i, &m)| RunningTask {
            pool: 0,
            priority: 1,
            preemptible: true,
            started_at_ms: i as u64,
            resources: Resources::new(0, 0, 0, whole(m)),
            ..RunningTask::default()
        })
        .collect();
    let alloc: u64 = held.iter().sum();
    PreemptionRequest {
        pools: vec![
            PoolView { path: "/a".into(), allocation: Resources::new(0, 0, 0, whole(alloc)), ..PoolView::default() },
            PoolView { path: "/b".into(), entitlement: Resources::new(0, 0, 0, whole(need)), ..PoolView::default() },
        ],
        running,
        needs: vec![Need {
            pool: 1,
            priority: 9,
            resources: Resources::new(0, 0, 0, whole(need)),
            from_pools: vec![0],
        }],
        gpu_pools: vec![
            GpuPool { allocation_milli: alloc, ..GpuPool::default() },
            GpuPool { entitlement_milli: need, ..GpuPool::default() },
        ],
        gpu_running: held.to_vec(),
        gpu_needs: vec![need],
    }
}

/// The built-in `priority-preempt` component counts shares exactly: two
/// half-device victims for a need of one device (in whole devices one of
/// them would have looked enough), and for a need of half a device one
/// victim, never the half beside the whole.
#[test]
fn preemption_counts_gpu_shares_in_milli() {
    let reg = registry(runtime());
    reg.deploy("preemption", "pp", "1", artifacts::PRIORITY_PREEMPT, DeployOptions::default()).expect("deploys");
    reg.activate("preemption", "pp@1").expect("activates");
    let victims = |req: &PreemptionRequest| -> Vec<u32> {
        let answer = reg.select_victims(req).expect("the slot answers");
        assert_eq!(answer.served_by, ServedBy::Version("pp@1".into()));
        assert!(answer.faults.is_empty(), "{:?}", answer.faults);
        assert_eq!(answer.gpu_unit, paceline_plugin::GpuUnit::Milli);
        let mut v: Vec<u32> = answer.value.iter().map(|v| v.task).collect();
        v.sort_unstable();
        v
    };
    assert_eq!(victims(&gpu_preemption_request(&[500, 500], 1000)), vec![0, 1]);
    // Equal priority: the most recently started first (task 1, the whole
    // device) covers the half alone.
    assert_eq!(victims(&gpu_preemption_request(&[500, 1000], 500)), vec![1]);
    assert_eq!(victims(&gpu_preemption_request(&[1000, 500], 500)), vec![1]);
    // A need of 700: the two halves (started last, taken first) and not
    // the whole device after them; in whole devices one half would do.
    assert_eq!(victims(&gpu_preemption_request(&[1000, 500, 500], 700)), vec![1, 2]);
}

/// An answer that preempts more than needed in milli-GPUs is refused, counted
/// as a fault, and the fallback serves.
#[test]
fn preemption_over_preempting_gpu_shares_is_a_fault() {
    let reg = registry(runtime_with(RuntimeConfig { auto_rollback_after: 100, ..RuntimeConfig::default() }));
    bad_on_top(&reg, "preemption", artifacts::PRIORITY_PREEMPT, artifacts::GUEST_GREEDY);
    // The greedy guest names both: half a device is needed, the whole one
    // alone would do, and so would the half alone.
    let req = gpu_preemption_request(&[500, 1000], 500);
    let answer = reg.select_victims(&req).expect("the slot answers");
    assert_eq!(answer.served_by, ServedBy::Version("good@1".into()));
    assert_eq!(answer.faults.len(), 1);
    assert!(answer.faults[0].message.contains("not needed"), "{}", answer.faults[0]);
    assert_eq!(answer.value.len(), 1, "{:?}", answer.value);
    paceline_plugin_sdk::validate::check_victims(&req, &answer.value).expect("what is served holds");
    assert_eq!(errors(&reg, "preemption", "bad@1", FaultKind::InvalidAnswer), 1);
}

#[test]
fn preemption_only_preemptible_victims_and_no_more_than_needed() {
    let reg = registry(runtime_with(RuntimeConfig { auto_rollback_after: 100, ..RuntimeConfig::default() }));
    bad_on_top(&reg, "preemption", artifacts::PRIORITY_PREEMPT, artifacts::GUEST_GREEDY);
    let cases = [
        (preemption_request(true, 1000), "not preemptible"),
        (preemption_request(false, 1000), "not needed"),
        (preemption_request(false, 9000), "do not free"),
    ];
    for (req, expected) in &cases {
        let answer = reg.select_victims(req).expect("the slot answers");
        assert_eq!(answer.served_by, ServedBy::Version("good@1".into()));
        assert_eq!(answer.faults.len(), 1, "{expected}");
        assert!(answer.faults[0].message.contains(expected), "{}", answer.faults[0]);
        paceline_plugin_sdk::validate::check_victims(req, &answer.value).expect("what is served holds");
    }
    assert_eq!(errors(&reg, "preemption", "bad@1", FaultKind::InvalidAnswer), 3);
    self_test_refuses("preemption", artifacts::GUEST_GREEDY, "preemption case");
}

#[test]
fn lifecycle_only_own_instances_and_legal_transitions() {
    let reg = registry(runtime_with(RuntimeConfig { auto_rollback_after: 100, ..RuntimeConfig::default() }));
    bad_on_top(&reg, "lifecycle/batch", artifacts::BATCH, artifacts::GUEST_PREMATURE);
    let job = JobView { kind: JobKind::Batch, state: JobState::Running, instance_count: 2, ..JobView::default() };
    let tasks: Vec<TaskView> =
        (0..2).map(|i| TaskView { instance: i, state: TaskState::Running, ..TaskView::default() }).collect();
    let change = Event::TaskChanged(TaskChange { instance: 0, state: TaskState::Running });
    let cases = [
        (Event::JobCreated, "cannot succeed while instance 0 is Running"),
        (change, "outside the job"),
        (Event::KillRequested, "cannot be marked Pending"),
        (Event::Timer(0), "outside the job"),
    ];
    for (event, expected) in &cases {
        let answer = reg.on_event("lifecycle/batch", &job, &tasks, event).expect("the slot answers");
        assert_eq!(answer.served_by, ServedBy::Version("good@1".into()), "{event:?}");
        assert_eq!(answer.faults.len(), 1, "{event:?}");
        assert!(answer.faults[0].message.contains(expected), "{event:?}: {}", answer.faults[0]);
    }
    assert_eq!(errors(&reg, "lifecycle/batch", "bad@1", FaultKind::InvalidAnswer), 4);
    self_test_refuses("lifecycle/batch", artifacts::GUEST_PREMATURE, "lifecycle sequence 0, step 0");
}

#[test]
fn a_refusal_downstream_is_a_fault_and_rolls_back() {
    let reg = registry(runtime());
    reg.deploy("preemption", "first", "1", artifacts::PRIORITY_PREEMPT, DeployOptions::default()).expect("deploys");
    reg.activate("preemption", "first@1").expect("activates");
    reg.deploy("preemption", "second", "1", artifacts::PRIORITY_PREEMPT, DeployOptions::default()).expect("deploys");
    reg.activate("preemption", "second@1").expect("activates");
    let served = ServedBy::Version("second@1".into());
    let auto = RuntimeConfig::default().auto_rollback_after;
    for n in 1..auto {
        reg.report_refusal("preemption", &served, "resource manager", "victim gone");
        assert_eq!(errors(&reg, "preemption", "second@1", FaultKind::RefusedDownstream), u64::from(n));
        assert_eq!(errors(&reg, "preemption", "second@1", FaultKind::InvalidAnswer), 0, "a kind of its own");
        assert_eq!(reg.active("preemption").expect("slot").as_deref(), Some("second@1"));
    }
    reg.report_refusal("preemption", &served, "resource manager", "victim gone");
    assert_eq!(reg.active("preemption").expect("slot").as_deref(), Some("first@1"), "rolled back");
    let listed = reg.list();
    let second = listed[0].versions.iter().find(|v| v.record.name == "second").expect("listed");
    assert_eq!(second.record.state, VersionState::Failed);
    // A native answer refused is only logged; nothing changes.
    reg.report_refusal("preemption", &ServedBy::Native("priority-preempt"), "resource manager", "x");
    assert_eq!(reg.active("preemption").expect("slot").as_deref(), Some("first@1"));
}

#[test]
fn the_default_plugins_pass_the_generated_self_test() {
    let reg = registry(runtime());
    for (slot, bytes) in [
        ("placement/batch", artifacts::BINPACK),
        ("placement/stateless", artifacts::SPREAD),
        ("placement/gpu", artifacts::GANG_GPU),
        ("preemption", artifacts::PRIORITY_PREEMPT),
        ("lifecycle/batch", artifacts::BATCH),
        ("lifecycle/stateless", artifacts::STATELESS),
        ("lifecycle/stateful", artifacts::STATEFUL),
        ("lifecycle/daemon", artifacts::DAEMON),
    ] {
        reg.deploy(slot, "default", "1", bytes, DeployOptions::default()).unwrap_or_else(|e| panic!("{slot}: {e}"));
    }
}
