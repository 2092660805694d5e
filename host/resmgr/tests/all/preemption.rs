//! Preemption: inter-pool (restore entitlement after K periods) and
//! intra-pool (priority), through the policy trait with validation and the
//! native fallback.

use paceline_model::job::JobKind;
use paceline_plugin_sdk::types::{PreemptionRequest, Victim, VictimReason};
use paceline_resmgr::{
    Config, GangSpec, KillReason, KillRequest, PendingReason, PolicyError, PreemptionPolicy, ResourceManager,
    TaskState, Transition,
};

use crate::common::{cpu, gang};

/// Places, launches and starts every READY task.
fn run_all(rm: &mut ResourceManager, now: u64) {
    let mut out = Vec::new();
    rm.take_ready(JobKind::Batch, usize::MAX, now, &mut out);
    for t in out {
        for e in [Transition::Placed, Transition::StartLaunch, Transition::Running] {
            rm.transition(t.id, e, now).expect("lifecycle");
        }
    }
}

/// Pool A (reservation 50 cores) borrows the whole 100-core cluster with 20
/// non-preemptible and 80 preemptible one-core tasks; then B (reservation 50)
/// submits a 30-core gang.
fn borrowed_cluster(k: u32) -> (ResourceManager, paceline_resmgr::GangId) {
    let mut rm = ResourceManager::new(Config { preempt_after_periods: k, ..Config::default() });
    rm.set_capacity(paceline_model::Resources::new(100_000, 1 << 30, 1 << 30, 0));
    rm.create_pool("/a", cpu(50_000, None, 1)).expect("a");
    rm.create_pool("/b", cpu(50_000, None, 1)).expect("b");
    for i in 0..100 {
        let g = GangSpec { preemptible: i >= 20, ..gang(i, 1, 1_000) };
        rm.submit("/a", g, 0).expect("a job");
    }
    let r = rm.tick(1);
    assert_eq!(r.admitted_gangs, 100, "A borrows all idle capacity");
    run_all(&mut rm, 1);
    let b = rm.submit("/b", gang(1_000, 30, 1_000), 2).expect("b gang");
    (rm, b)
}

#[test]
fn borrowed_capacity_is_returned_within_k_periods_exactly() {
    let k = 3;
    let (mut rm, b) = borrowed_cluster(k);
    let mut kills: Vec<KillRequest> = Vec::new();
    let mut period = 0;
    for now in 2..2 + u64::from(k) {
        period += 1;
        let r = rm.tick(now);
        if period < k {
            assert!(r.kills.is_empty(), "no preemption before K periods (period {period})");
            assert!(matches!(rm.why_pending(b).expect("waits").reason, PendingReason::ClusterFull { .. }));
        } else {
            kills = r.kills;
        }
    }
    assert_eq!(rm.pool_status("/a").expect("a").entitlement.cpu_millis, 70_000);
    assert_eq!(kills.len(), 30, "exactly enough one-core tasks for B's 30 cores, and no more");
    for kill in &kills {
        let t = rm.task(kill.task).expect("victim");
        assert_eq!(t.state, TaskState::Preempting);
        assert!(t.preemptible, "non-preemptible tasks are never chosen");
        assert_eq!(rm.tree().path(t.pool), Some("/a"));
        assert_eq!(kill.reason, KillReason::Preempted(VictimReason::OverEntitlement));
    }
    // Victims still being killed count: no second round of victims meanwhile.
    assert!(rm.tick(10).kills.is_empty());
    for kill in &kills {
        rm.transition(kill.task, Transition::KillConfirmed, 11).expect("killed");
    }
    let r = rm.tick(12);
    assert_eq!(r.admitted_gangs, 1, "B's gang is admitted once the victims are gone");
    assert!(r.kills.is_empty());
    let a = rm.pool_status("/a").expect("a");
    assert_eq!(a.allocation.cpu_millis, 70_000);
    assert_eq!(a.queued_gangs, 30, "victims went back to A's queue");
    assert_eq!(rm.pool_status("/b").expect("b").allocation.cpu_millis, 30_000);
}

#[test]
fn kill_on_preempt_victims_do_not_return() {
    let mut rm = ResourceManager::new(Config { preempt_after_periods: 1, ..Config::default() });
    rm.set_capacity(paceline_model::Resources::new(4_000, 1 << 30, 1 << 30, 0));
    rm.create_pool("/a", cpu(2_000, None, 1)).expect("a");
    rm.create_pool("/b", cpu(2_000, None, 1)).expect("b");
    for i in 0..4 {
        rm.submit("/a", GangSpec { kill_on_preempt: true, ..gang(i, 1, 1_000) }, 0).expect("a");
    }
    rm.tick(1);
    run_all(&mut rm, 1);
    rm.submit("/b", gang(9, 1, 1_000), 2).expect("b");
    let kills = rm.tick(2).kills;
    assert_eq!(kills.len(), 1);
    rm.transition(kills[0].task, Transition::KillConfirmed, 3).expect("killed");
    assert_eq!(rm.pool_status("/a").expect("a").queued_gangs, 0);
}

#[test]
fn higher_priority_gang_displaces_lower_priority_tasks_in_its_pool() {
    let mut rm = ResourceManager::new(Config::default());
    rm.set_capacity(paceline_model::Resources::new(10_000, 1 << 30, 1 << 30, 0));
    // Reservation 2 cores: room for the two non-preemptible tasks.
    rm.create_pool("/p", cpu(2_000, None, 1)).expect("p");
    for i in 0..8 {
        rm.submit("/p", GangSpec { priority: 1, ..gang(i, 1, 1_000) }, 0).expect("low");
    }
    for i in 8..10 {
        rm.submit("/p", GangSpec { priority: 1, preemptible: false, ..gang(i, 1, 1_000) }, 0).expect("low np");
    }
    rm.tick(1);
    run_all(&mut rm, 1);
    let high = rm.submit("/p", GangSpec { priority: 100, ..gang(100, 4, 1_000) }, 2).expect("high");
    let kills = rm.tick(2).kills;
    assert_eq!(kills.len(), 4, "exactly the gang's 4 cores");
    for k in &kills {
        let t = rm.task(k.task).expect("victim");
        assert_eq!((t.priority, t.preemptible), (1, true));
        assert_eq!(k.reason, KillReason::Preempted(VictimReason::HigherPriority));
        rm.transition(k.task, Transition::KillConfirmed, 3).expect("killed");
    }
    let r = rm.tick(4);
    assert_eq!(r.admitted_gangs, 1, "the priority-100 gang is admitted ahead of the requeued tasks");
    assert!(rm.why_pending(high).is_none());
    assert_eq!(rm.pool_status("/p").expect("p").queued_gangs, 4);
}

#[test]
fn equal_priority_does_not_preempt_within_a_pool() {
    let mut rm = ResourceManager::new(Config::default());
    rm.set_capacity(paceline_model::Resources::new(2_000, 1 << 30, 1 << 30, 0));
    rm.create_pool("/p", cpu(0, None, 1)).expect("p");
    for i in 0..2 {
        rm.submit("/p", GangSpec { priority: 5, ..gang(i, 1, 1_000) }, 0).expect("t");
    }
    rm.tick(1);
    run_all(&mut rm, 1);
    rm.submit("/p", GangSpec { priority: 5, ..gang(9, 1, 1_000) }, 2).expect("same priority");
    for now in 2..8 {
        assert!(rm.tick(now).kills.is_empty());
    }
}

/// Answers with every running task, valid or not.
struct Greedy;
impl PreemptionPolicy for Greedy {
    fn name(&self) -> &str {
        "greedy"
    }
    fn select_victims(&self, req: &PreemptionRequest) -> Result<Vec<Victim>, PolicyError> {
        Ok((0..req.running.len() as u32)
            .map(|task| Victim { task, need: 0, reason: VictimReason::OverEntitlement })
            .collect())
    }
}

/// Always fails, like a trapping plugin.
struct Trapping;
impl PreemptionPolicy for Trapping {
    fn name(&self) -> &str {
        "trapping"
    }
    fn select_victims(&self, _: &PreemptionRequest) -> Result<Vec<Victim>, PolicyError> {
        Err(PolicyError { policy: "trapping".into(), message: "wasm trap".into() })
    }
}

#[test]
fn bad_policies_fall_back_to_native_and_never_overkill() {
    for policy in [Box::new(Greedy) as Box<dyn PreemptionPolicy>, Box::new(Trapping)] {
        let name = policy.name().to_string();
        let (mut rm, _) = borrowed_cluster(1);
        rm.set_policy(policy);
        let kills = rm.tick(2).kills;
        assert_eq!(kills.len(), 30, "{name}: native fallback chose exactly enough");
        assert!(kills.iter().all(|k| rm.task(k.task).is_some_and(|t| t.preemptible)), "{name}");
    }
}

#[test]
fn revocable_work_is_revoked_at_once_for_non_revocable_work() {
    let mut rm = ResourceManager::new(Config { preempt_after_periods: 5, ..Config::default() });
    rm.set_capacity(paceline_model::Resources::new(4_000, 1 << 30, 1 << 30, 0));
    let mut a = cpu(0, None, 1);
    a.slack_limit.cpu = 4_000;
    rm.create_pool("/a", a).expect("a");
    rm.create_pool("/b", cpu(2_000, None, 1)).expect("b");
    for i in 0..4 {
        rm.submit("/a", GangSpec { revocable: true, ..gang(i, 1, 1_000) }, 0).expect("rev");
    }
    assert_eq!(rm.tick(1).admitted_gangs, 4, "slack is the whole idle cluster");
    run_all(&mut rm, 1);
    rm.submit("/b", gang(9, 2, 1_000), 2).expect("b");
    let kills = rm.tick(2).kills;
    assert_eq!(kills.len(), 2, "no K-period wait for revocable work, and only what B needs");
    assert!(kills.iter().all(|k| k.reason == KillReason::Preempted(VictimReason::Revoked)));
}

/// GPU shares are counted exactly (WIT 0.1.3, decision 0036): pool A
/// borrows both GPUs of the cluster with four tasks of half a GPU; pool B's
/// task of one whole GPU takes back exactly two of them. Rounded up to
/// whole devices, as the preemption contract counted before, one victim
/// looked like a device and half of what B needs would have been freed.
#[test]
fn gpu_shares_are_preempted_in_milli_gpus() {
    let mut rm = ResourceManager::new(Config { preempt_after_periods: 1, ..Config::default() });
    rm.set_capacity(paceline_model::Resources::new(100_000, 1 << 30, 1 << 30, 2_000));
    for pool in ["/a", "/b"] {
        let mut spec = cpu(50_000, None, 1);
        spec.reservation.gpu = 1_000;
        spec.share.gpu = 1;
        rm.create_pool(pool, spec).expect("pool");
    }
    let half = |job| GangSpec {
        preemptible: true,
        per_task: paceline_model::Resources::new(100, 0, 0, 500),
        ..gang(job, 1, 100)
    };
    for job in 0..4 {
        rm.submit("/a", half(job), 0).expect("a job");
    }
    assert_eq!(rm.tick(1).admitted_gangs, 4, "A borrows B's GPU");
    run_all(&mut rm, 1);
    let whole = GangSpec { per_task: paceline_model::Resources::new(100, 0, 0, 1_000), ..gang(100, 1, 100) };
    rm.submit("/b", whole, 2).expect("b gang");
    let mut kills = Vec::new();
    for now in 2..6 {
        kills.extend(rm.tick(now).kills);
        if !kills.is_empty() {
            break;
        }
    }
    assert_eq!(kills.len(), 2, "two halves free the one GPU B needs, and no more: {kills:?}");
    for kill in &kills {
        let t = rm.task(kill.task).expect("victim");
        assert_eq!(t.resources.gpu_milli, 500);
        assert_eq!(rm.tree().path(t.pool), Some("/a"));
    }
    for kill in &kills {
        rm.transition(kill.task, Transition::KillConfirmed, 7).expect("killed");
    }
    assert_eq!(rm.tick(8).admitted_gangs, 1, "B's whole GPU is admitted once they are gone");
}
