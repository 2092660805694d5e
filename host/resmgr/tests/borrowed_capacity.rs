//! An under-served pool's non-preemptible work takes back capacity another
//! pool borrowed (the shape of the end-to-end pools test).

use paceline_model::Resources;
use paceline_model::job::JobKind;
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_resmgr::{Config, GangSpec, ResourceManager, Transition};

#[test]
fn a_reserved_pool_preempts_what_another_pool_borrowed() {
    let mut rm = ResourceManager::new(Config::default());
    rm.set_capacity(Resources::new(2_000, 3_584, 106_954, 0));
    let spec = PoolSpec {
        reservation: PerKind { cpu: 1_000, memory: 1_024, disk: 1_000, gpu: 0 },
        share: PerKind { cpu: 1, memory: 1, disk: 1, gpu: 1 },
        ..PoolSpec::default()
    };
    rm.create_pool("/a", spec.clone()).expect("a");
    rm.create_pool("/b", spec).expect("b");
    let task = Resources::new(500, 64, 10, 0);
    for i in 0..4 {
        let g = GangSpec {
            job: 1,
            first_instance: i,
            kind: JobKind::Batch,
            priority: 1,
            preemptible: true,
            tasks: 1,
            per_task: task,
            ..GangSpec::default()
        };
        rm.submit("/a", g, 0).expect("borrower");
    }
    let mut now = 1;
    rm.tick(now);
    let mut ready = Vec::new();
    rm.take_ready(JobKind::Batch, 100, now, &mut ready);
    assert_eq!(ready.len(), 4, "the borrower is admitted on both cores");
    for t in &ready {
        for e in [Transition::Placed, Transition::StartLaunch, Transition::Running] {
            rm.transition(t.id, e, now).expect("runs");
        }
    }
    let mut owner = Vec::new();
    for i in 0..2 {
        let g = GangSpec {
            job: 2,
            first_instance: i,
            kind: JobKind::Batch,
            priority: 100,
            preemptible: false,
            tasks: 1,
            per_task: task,
            ..GangSpec::default()
        };
        owner.push(rm.submit("/b", g, now).expect("owner"));
    }
    // The runtime's part: confirm kills, start what gets admitted.
    let mut kills = Vec::new();
    let mut owner_running = 0;
    for _ in 0..20 {
        now += 20;
        let report = rm.tick(now);
        for k in &report.kills {
            rm.transition(k.task, Transition::KillConfirmed, now).expect("kill confirmed");
        }
        kills.extend(report.kills);
        let mut ready = Vec::new();
        rm.take_ready(JobKind::Batch, 100, now, &mut ready);
        for t in &ready {
            if t.job == 2 {
                for e in [Transition::Placed, Transition::StartLaunch, Transition::Running] {
                    rm.transition(t.id, e, now).expect("runs");
                }
                owner_running += 1;
            }
        }
    }
    let why: Vec<String> =
        owner.iter().map(|g| rm.why_pending(*g).map(|p| p.to_string()).unwrap_or_default()).collect();
    assert_eq!(kills.len(), 2, "exactly the borrowed core comes back: {kills:?} {why:?}");
    assert!(kills.iter().all(|k| k.job == 1), "only the borrower is preempted");
    assert_eq!(owner_running, 2, "the owner's work runs: {why:?}");
    let a = rm.pool_status("/a").expect("a");
    assert_eq!(a.allocation.cpu_millis, 1_000, "/a keeps its reservation");
}
