//! Task states inside the manager: the ready queue drained per kind,
//! placement backoff, timeouts falling back to READY, kills and release.

use paceline_model::Resources;
use paceline_model::UnplacedReason;
use paceline_model::job::JobKind;
use paceline_resmgr::{Config, GangSpec, KillReason, ResourceManager, TaskState, Timeouts, Transition};

use crate::common::{cpu, gang};

fn world() -> ResourceManager {
    world_with(Timeouts {
        placing_ms: 100,
        launching_ms: 200,
        preempting_ms: 300,
        backoff_base_ms: 10,
        backoff_max_ms: 40,
        unreachable_retry_ms: 3,
    })
}

/// One pool `/a` with room for 100 cores, under `timeouts`.
pub fn world_with(timeouts: Timeouts) -> ResourceManager {
    let mut rm = ResourceManager::new(Config { timeouts, ..Config::default() });
    rm.set_capacity(paceline_model::Resources::new(100_000, 1 << 30, 1 << 30, 0));
    rm.create_pool("/a", cpu(0, None, 1)).expect("a");
    rm
}

/// Submits a one-task job and takes it from the ready queue: the task is
/// PLACING. Returns it and the buffer it was taken into.
fn one_placing_task(rm: &mut ResourceManager) -> (paceline_resmgr::TaskHandle, Vec<paceline_resmgr::ReadyTask>) {
    rm.submit("/a", gang(1, 1, 100), 0).expect("job");
    rm.tick(0);
    let mut out = Vec::new();
    rm.take_ready(JobKind::Batch, 10, 0, &mut out);
    (out[0].id, out)
}

#[test]
fn ready_queue_is_drained_per_kind_in_batches() {
    let mut rm = world();
    rm.submit("/a", GangSpec { kind: JobKind::Stateless, ..gang(1, 3, 100) }, 0).expect("svc");
    rm.submit("/a", gang(2, 2, 100), 0).expect("batch");
    rm.tick(0);
    let mut out = Vec::new();
    assert_eq!(rm.take_ready(JobKind::Batch, 10, 0, &mut out), 2);
    assert!(out.iter().all(|t| t.job == 2));
    out.clear();
    assert_eq!(rm.take_ready(JobKind::Stateless, 1, 0, &mut out), 3, "the gang is finished even past max");
    assert!(out.iter().all(|t| rm.task(t.id).map(|i| i.state) == Some(TaskState::Placing)));
    out.clear();
    assert_eq!(rm.take_ready(JobKind::Stateless, 10, 0, &mut out), 0);
}

#[test]
fn placement_failure_backs_off_then_returns() {
    let mut rm = world();
    let (id, mut out) = one_placing_task(&mut rm);
    rm.placement_failed(id, UnplacedReason::ConstraintsUnsatisfiable, 0).expect("failed");
    let info = rm.task(id).expect("task");
    assert_eq!(
        (info.state, info.attempts, info.last_unplaced),
        (TaskState::Ready, 1, Some(UnplacedReason::ConstraintsUnsatisfiable))
    );
    out.clear();
    rm.tick(5);
    assert_eq!(rm.take_ready(JobKind::Batch, 10, 5, &mut out), 0, "still backing off");
    rm.tick(10);
    assert_eq!(rm.take_ready(JobKind::Batch, 10, 10, &mut out), 1, "back after 10 ms");
    // Second failure: 20 ms.
    rm.placement_failed(id, UnplacedReason::InsufficientResources, 10).expect("failed");
    out.clear();
    rm.tick(29);
    assert_eq!(rm.take_ready(JobKind::Batch, 10, 29, &mut out), 0);
    rm.tick(30);
    assert_eq!(rm.take_ready(JobKind::Batch, 10, 30, &mut out), 1);
}

/// Room for anything `world` submits.
fn any_host() -> Resources {
    Resources::new(100_000, 1 << 30, 1 << 30, 0)
}

#[test]
fn a_host_joining_ends_the_placement_backoff_of_what_fits_but_keeps_the_attempts() {
    let mut rm = world();
    rm.submit("/a", gang(1, 2, 100), 0).expect("job");
    rm.tick(0);
    let mut out = Vec::new();
    rm.take_ready(JobKind::Batch, 10, 0, &mut out);
    let (a, b) = (out[0].id, out[1].id);
    rm.placement_failed(a, UnplacedReason::Deferred, 0).expect("failed");
    rm.placement_failed(b, UnplacedReason::InsufficientResources, 0).expect("failed");
    // b is killed while it backs off: it must not come back.
    rm.kill(b, 1).expect("kill");
    out.clear();
    rm.tick(1);
    assert_eq!(rm.take_ready(JobKind::Batch, 10, 1, &mut out), 0, "still backing off");
    assert_eq!(rm.retry_backed_off(&any_host()), 1, "a returns, the killed b does not");
    rm.tick(1);
    assert_eq!(rm.take_ready(JobKind::Batch, 10, 1, &mut out), 1);
    assert_eq!(out[0].id, a);
    assert_eq!(rm.task(a).expect("a").attempts, 1, "the attempt still counts");
    // Nothing waits any more: a second call finds nothing, and the backoff timer is gone.
    assert_eq!(rm.retry_backed_off(&any_host()), 0);
}

#[test]
fn a_small_host_joining_re_offers_only_the_tasks_it_could_take() {
    let mut rm = world();
    rm.submit("/a", gang(1, 1, 100), 0).expect("small");
    rm.submit("/a", gang(2, 1, 4_000), 0).expect("big");
    rm.submit("/a", GangSpec { per_task: Resources::new(100, 2_048, 0, 0), ..gang(3, 1, 100) }, 0).expect("memory");
    rm.tick(0);
    let mut out = Vec::new();
    rm.take_ready(JobKind::Batch, 10, 0, &mut out);
    let id = |job: u64| out.iter().find(|t| t.job == job).expect("taken").id;
    let (small, big, memory) = (id(1), id(2), id(3));
    for t in [small, big, memory] {
        rm.placement_failed(t, UnplacedReason::InsufficientResources, 0).expect("failed");
    }
    // A host with 1 cpu and 1 GiB free: only the small task fits it (the
    // memory-hungry one fits in cpu, not in memory).
    assert_eq!(rm.retry_backed_off(&Resources::new(1_000, 1_024, 0, 0)), 1);
    let mut again = Vec::new();
    rm.take_ready(JobKind::Batch, 10, 1, &mut again);
    assert_eq!(again.iter().map(|t| t.id).collect::<Vec<_>>(), vec![small]);
    // The others kept their backoff: still waiting before it ends, back when it does.
    assert_eq!(rm.next_wake_ms(), Some(10), "the kept backoffs still wake the manager");
    rm.tick(9);
    again.clear();
    assert_eq!(rm.take_ready(JobKind::Batch, 10, 9, &mut again), 0, "no host that joined could take them");
    rm.tick(10);
    assert_eq!(rm.take_ready(JobKind::Batch, 10, 10, &mut again), 2);
    for t in [big, memory] {
        assert_eq!(rm.task(t).expect("task").attempts, 1);
    }
}

#[test]
fn an_unreachable_host_manager_is_no_placement_attempt() {
    let mut rm = world();
    let (id, mut out) = one_placing_task(&mut rm);
    // One real failure first: attempts 1, backoff 10 ms.
    rm.placement_failed(id, UnplacedReason::InsufficientResources, 0).expect("failed");
    rm.tick(10);
    out.clear();
    assert_eq!(rm.take_ready(JobKind::Batch, 10, 10, &mut out), 1);
    // The lease fails twice in a row: each time back after the fixed 3 ms,
    // the attempts unchanged, nothing doubled.
    for at in [10, 13] {
        rm.placement_failed(id, UnplacedReason::HostManagerUnreachable, at).expect("unreachable");
        let info = rm.task(id).expect("task");
        assert_eq!(
            (info.state, info.attempts, info.last_unplaced),
            (TaskState::Ready, 1, Some(UnplacedReason::HostManagerUnreachable))
        );
        assert_eq!(rm.next_wake_ms(), Some(at + 3));
        rm.tick(at + 2);
        out.clear();
        assert_eq!(rm.take_ready(JobKind::Batch, 10, at + 2, &mut out), 0, "not before the retry delay");
        rm.tick(at + 3);
        assert_eq!(rm.take_ready(JobKind::Batch, 10, at + 3, &mut out), 1, "due after the fixed delay");
    }
    // The next real failure is the second attempt: 20 ms, not 80.
    rm.placement_failed(id, UnplacedReason::InsufficientResources, 16).expect("failed");
    assert_eq!(rm.task(id).expect("task").attempts, 2);
    assert_eq!(rm.next_wake_ms(), Some(36));
    // Only a PLACING task can be sent back, for either reason; a refusal changes nothing.
    assert!(rm.placement_failed(id, UnplacedReason::HostManagerUnreachable, 17).is_err());
    assert_eq!(rm.task(id).expect("task").last_unplaced, Some(UnplacedReason::InsufficientResources));
    assert!(rm.transition(id, Transition::HostManagerUnreachable, 17).is_err(), "the manager's own event");
}

#[test]
fn timeouts_fall_back_to_ready() {
    let mut rm = world();
    let (id, mut out) = one_placing_task(&mut rm);
    // PLACING times out at 100.
    assert_eq!(rm.tick(99).timeouts, 0);
    assert_eq!(rm.tick(100).timeouts, 1);
    assert_eq!(rm.task(id).expect("t").state, TaskState::Ready);
    // LAUNCHING times out 200 after it began; an event in between resets nothing it should not.
    out.clear();
    rm.take_ready(JobKind::Batch, 1, 100, &mut out);
    rm.transition(id, Transition::Placed, 150).expect("placed");
    rm.transition(id, Transition::StartLaunch, 160).expect("launch");
    assert_eq!(rm.tick(359).timeouts, 0, "the old PLACING timer is stale");
    assert_eq!(rm.tick(360).timeouts, 1);
    assert_eq!(rm.task(id).expect("t").state, TaskState::Ready);
    // The allocation was held throughout.
    assert_eq!(rm.pool_status("/a").expect("a").allocation.cpu_millis, 100);
}

#[test]
fn refused_events_and_release() {
    let mut rm = world();
    rm.submit("/a", gang(1, 2, 100), 0).expect("job");
    rm.tick(0);
    let mut out = Vec::new();
    rm.take_ready(JobKind::Batch, 10, 0, &mut out);
    let (a, b) = (out[0].id, out[1].id);
    assert!(rm.transition(a, Transition::Running, 1).is_err(), "PLACING cannot jump to RUNNING");
    assert!(rm.transition(a, Transition::Timeout, 1).is_err(), "the manager's own event");
    for e in [Transition::Placed, Transition::StartLaunch, Transition::Running, Transition::Succeeded] {
        rm.transition(a, e, 1).expect("lifecycle");
    }
    assert!(rm.task(a).is_none(), "ended tasks are released");
    rm.kill(b, 2).expect("kill");
    let kills = rm.tick(2).kills;
    assert_eq!(kills.len(), 1);
    assert_eq!(kills[0].reason, KillReason::Requested);
    rm.transition(b, Transition::KillConfirmed, 3).expect("confirmed");
    let s = rm.pool_status("/a").expect("a");
    assert_eq!((s.allocation.cpu_millis, s.live_tasks, s.queued_gangs), (0, 0, 0));
    rm.delete_pool("/a").expect("empty pool deletes");
}

/// A job's live tasks are read from a list kept per job: after tasks of
/// several jobs come and go (slots reused by other jobs), each job's list
/// holds exactly its live tasks.
#[test]
fn a_jobs_task_list_holds_exactly_its_live_tasks_as_slots_are_reused() {
    let mut rm = world();
    // job -> instance -> live handle
    let mut live: std::collections::BTreeMap<u64, std::collections::BTreeMap<u32, paceline_resmgr::TaskHandle>> =
        Default::default();
    let mut next_instance = [0u32; 5];
    let mut seed = 7u64;
    let mut rand = move |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    for step in 0..400u64 {
        let job = rand(5);
        let tasks = 1 + rand(3) as u32;
        let first = next_instance[job as usize];
        next_instance[job as usize] += tasks;
        rm.submit("/a", GangSpec { first_instance: first, ..gang(job, tasks, 10) }, step).expect("submit");
        rm.tick(step);
        let mut out = Vec::new();
        rm.take_ready(JobKind::Batch, 1_000, step, &mut out);
        for t in &out {
            live.entry(t.job).or_default().insert(t.instance, t.id);
        }
        // End about as many as started: kill random live tasks of a random job.
        for _ in 0..tasks {
            let job = rand(5);
            let Some(of_job) = live.get_mut(&job) else { continue };
            let Some(&instance) = of_job.keys().nth(rand(of_job.len().max(1) as u64) as usize) else { continue };
            let id = of_job.remove(&instance).expect("live");
            rm.kill(id, step).expect("kill");
            rm.transition(id, Transition::KillConfirmed, step).expect("confirmed");
        }
        for job in 0..5u64 {
            let mut got: Vec<u32> = rm.job_task_waits(job).iter().map(|w| w.instance).collect();
            got.sort_unstable();
            let want: Vec<u32> = live.get(&job).map(|m| m.keys().copied().collect()).unwrap_or_default();
            assert_eq!(got, want, "job {job} after step {step}");
        }
    }
}

/// What a job manager stopped before launch is released by (job, instance):
/// READY tasks (backing off or queued) and PLACING ones end, their pool is
/// free again, and no kill request is handed out for them (nothing runs).
/// Other instances and other jobs are left alone.
#[test]
fn release_unplaced_ends_ready_and_placing_tasks_of_the_instances_named() {
    let mut rm = world();
    rm.submit("/a", gang(1, 4, 100), 0).expect("job 1");
    rm.submit("/a", gang(2, 1, 100), 0).expect("job 2");
    rm.tick(0);
    let mut out = Vec::new();
    rm.take_ready(JobKind::Batch, 10, 0, &mut out);
    let of = |job: u64, instance: u32| out.iter().find(|t| t.job == job && t.instance == instance).expect("taken").id;
    // Instance 0 backs off (READY), 1 and 2 stay PLACING, 3 is placed.
    rm.placement_failed(of(1, 0), UnplacedReason::InsufficientResources, 0).expect("failed");
    rm.transition(of(1, 3), Transition::Placed, 0).expect("placed");
    assert_eq!(rm.pool_status("/a").expect("a").allocation.cpu_millis, 500);
    assert_eq!(rm.release_unplaced(1, &[0, 1, 3], 1), 2, "instances 0 and 1; 3 is placed, 2 not named");
    assert!(rm.task(of(1, 0)).is_none() && rm.task(of(1, 1)).is_none());
    assert_eq!(rm.task(of(1, 2)).map(|t| t.state), Some(TaskState::Placing));
    assert_eq!(rm.task(of(1, 3)).map(|t| t.state), Some(TaskState::Placed));
    assert_eq!(rm.task(of(2, 0)).map(|t| t.state), Some(TaskState::Placing));
    assert_eq!(rm.pool_status("/a").expect("a").allocation.cpu_millis, 300);
    assert!(rm.take_kills().is_empty(), "nothing on a host to kill");
    // The backoff of the released task (10 ms) ends without bringing it
    // back; the PLACING ones are not timed out yet (100 ms).
    rm.tick(50);
    out.clear();
    assert_eq!(rm.take_ready(JobKind::Batch, 10, 50, &mut out), 0);
}

/// A gang requeued for a preempted task is found by (job, instance).
#[test]
fn cancel_queued_of_finds_one_task_gangs_by_instance() {
    let mut rm = world();
    rm.submit("/a", GangSpec { first_instance: 3, ..gang(7, 1, 100) }, 0).expect("one");
    rm.submit("/a", GangSpec { first_instance: 4, ..gang(7, 2, 100) }, 0).expect("two");
    assert_eq!(rm.cancel_queued_of(7, &[3, 4, 5]), 1, "only the one-task gang of instance 3");
    assert_eq!(rm.cancel_queued_of(8, &[4]), 0, "another job's");
    assert_eq!(rm.pool_status("/a").expect("a").queued_gangs, 1);
}
