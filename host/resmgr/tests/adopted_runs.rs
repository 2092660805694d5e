//! Runs handed over by a recovering job manager (`ResourceManager::adopt`):
//! they hold their pool's resources at once, admission counts them, and
//! their end releases them.

use paceline_model::Resources;
use paceline_model::job::JobKind;
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_resmgr::{Config, GangSpec, ResourceManager, TaskState, Transition};

fn manager() -> ResourceManager {
    let mut rm = ResourceManager::new(Config::default());
    rm.set_capacity(Resources::new(4_000, 8_192, 100_000, 0));
    // /team may use at most two cores, whatever the cluster has free.
    let spec = PoolSpec {
        reservation: PerKind { cpu: 2_000, memory: 4_096, disk: 10_000, gpu: 0 },
        limit: PerKind { cpu: 2_000, memory: 4_096, disk: 10_000, gpu: 0 },
        ..PoolSpec::default()
    };
    rm.create_pool("/team", spec).expect("pool");
    rm
}

fn one(job: u64, instance: u32, cpu: u64) -> GangSpec {
    GangSpec {
        job,
        first_instance: instance,
        kind: JobKind::Batch,
        priority: 1,
        tasks: 1,
        per_task: Resources::new(cpu, 64, 10, 0),
        ..GangSpec::default()
    }
}

#[test]
fn adopted_runs_hold_their_pool_and_admission_counts_them() {
    let mut rm = manager();
    let a = rm.adopt("/team", one(1, 0, 1_000), TaskState::Running, 0).expect("adopt");
    let b = rm.adopt("/team", one(1, 1, 500), TaskState::Launching, 0).expect("adopt");
    let status = rm.pool_status("/team").expect("status");
    assert_eq!(status.allocation.cpu_millis, 1_500, "{status:?}");
    assert_eq!(status.live_tasks, 2);
    assert_eq!(rm.task(a[0]).expect("known").state, TaskState::Running);
    assert_eq!(rm.task(b[0]).expect("known").state, TaskState::Launching);

    // A new gang of one core would pass the limit (1.5 + 1 > 2): it waits.
    let waiting = rm.submit("/team", one(2, 0, 1_000), 1).expect("queued");
    rm.tick(10);
    let mut ready = Vec::new();
    rm.take_ready(JobKind::Batch, 10, 10, &mut ready);
    assert!(ready.is_empty(), "admitted past the limit: {ready:?}");
    assert!(rm.why_pending(waiting).is_some());

    // The adopted run ends: its core comes back and the gang is admitted.
    rm.transition(a[0], Transition::Succeeded, 20).expect("ends");
    assert_eq!(rm.pool_status("/team").expect("status").allocation.cpu_millis, 500);
    rm.tick(30);
    rm.take_ready(JobKind::Batch, 10, 30, &mut ready);
    assert_eq!(ready.len(), 1, "admitted once the adopted run ended");
    // The launching one reaches RUNNING as a placed task's launch does.
    assert_eq!(rm.transition(b[0], Transition::Running, 40).expect("runs"), TaskState::Running);
}

#[test]
fn adopting_into_a_missing_or_inner_pool_is_refused_and_changes_nothing() {
    let mut rm = manager();
    rm.create_pool("/org", PoolSpec::default()).expect("org");
    rm.create_pool("/org/leaf", PoolSpec::default()).expect("leaf");
    assert!(rm.adopt("/nowhere", one(1, 0, 100), TaskState::Running, 0).is_err());
    assert!(rm.adopt("/org", one(1, 0, 100), TaskState::Running, 0).is_err(), "not a leaf");
    assert!(rm.adopt("/team", GangSpec { tasks: 0, ..one(1, 0, 100) }, TaskState::Running, 0).is_err(), "no tasks");
    assert_eq!(rm.pool_status("/team").expect("status").allocation, Resources::default());
}

#[test]
fn pending_gangs_are_counted_by_pool_and_the_reason_each_one_gives() {
    let mut rm = manager();
    rm.adopt("/team", one(1, 0, 2_000), TaskState::Running, 0).expect("adopt");
    let first = rm.submit("/team", GangSpec { tasks: 2, ..one(2, 0, 500) }, 1).expect("queued");
    let second = rm.submit("/team", one(3, 0, 500), 2).expect("queued");
    assert_eq!(
        rm.pending_counts(),
        vec![paceline_resmgr::PendingCount { pool: "/team".into(), reason: "not_evaluated", gangs: 2, tasks: 3 }],
        "nothing has looked at them yet"
    );
    rm.tick(10);
    let counts = rm.pending_counts();
    // The counts say what `why_pending` says of each gang, one by one.
    let mut expected: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for (gang, tasks) in [(first, 2), (second, 1)] {
        let reason = rm.why_pending(gang).expect("still queued").reason.name();
        assert_ne!(reason, "not_evaluated");
        let e = expected.entry(reason).or_default();
        e.0 += 1;
        e.1 += tasks;
    }
    let got: std::collections::BTreeMap<&str, (u64, u64)> =
        counts.iter().inspect(|c| assert_eq!(c.pool, "/team")).map(|c| (c.reason, (c.gangs, c.tasks))).collect();
    assert_eq!(got, expected);
}
