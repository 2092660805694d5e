//! A run killed before it reached a host gives its pool back at once,
//! wherever it was between submission and launch: queued, admitted
//! (READY, charged to its pool) or being placed. Before this, a run killed
//! after admission kept its pool charged for as long as the server ran
//! (its resource-manager task went round READY → PLACING → READY),
//! starving the pool's neighbours and preempting their work (spark-e2e's
//! decommission scenario saw it in CI).

use paceline_jobmgr::scenario::Harness;
use paceline_model::UnplacedReason;
use paceline_model::job::JobKind;
use paceline_model::task::TaskState;

use crate::common::*;

/// The test pool's (cpu millicores held, live tasks, queued gangs).
fn held(h: &Harness) -> (u64, u64, u64) {
    let rm = h.resmgr.lock().expect("resmgr");
    let s = rm.pool_status("/test").expect("pool");
    (s.allocation.cpu_millis, s.live_tasks, s.queued_gangs)
}

/// Admits what is queued, as the server's resource-manager tick does.
fn admit(h: &Harness) {
    let now = 1_000_000;
    h.resmgr.lock().expect("resmgr").tick(now);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_killed_leaves_nothing_queued() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.create("b", config(JobKind::Batch, 3)).await.expect("create");
    assert_eq!(held(&h), (0, 0, 3), "three gangs queued, nothing admitted yet");
    h.jm.kill("b", None).await.expect("kill");
    assert_eq!(held(&h), (0, 0, 0));
    assert!((0..3).all(|i| h.jm.task("b", i).expect("task").state == TaskState::Killed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_run_killed_gives_its_pool_back_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.create("b", config(JobKind::Batch, 3)).await.expect("create");
    admit(&h);
    assert_eq!(held(&h), (300, 3, 0), "admitted: READY and charged to the pool");
    h.jm.kill("b", Some(vec![1])).await.expect("kill one");
    assert_eq!(held(&h), (200, 2, 0), "the killed run's 100 millicores are free before any round");
    h.jm.kill("b", None).await.expect("kill the rest");
    assert_eq!(held(&h), (0, 0, 0));
    assert_eq!(h.place().await, 0, "nothing is left to place");
    assert!(h.launcher.launches().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_while_being_placed_is_not_launched_and_frees_its_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.create("b", config(JobKind::Batch, 2)).await.expect("create");
    admit(&h);
    // The engine took both (PLACING), then the job was killed mid-round.
    use paceline_joints::ReadyQueue;
    let taken = h.jm.take_ready(JobKind::Batch, 10, 1_000_000).await.expect("take");
    assert_eq!(taken.ready.len(), 2);
    h.jm.kill("b", None).await.expect("kill");
    assert_eq!(held(&h), (0, 0, 0), "released though the engine holds them");
    // The engine's answer comes back: one placed, one not.
    let (first, second) = (&taken.ready[0].0, &taken.ready[1].0);
    let placement = paceline_joints::Placement { task: *first, host: "h1".into(), gpu: Default::default() };
    let c = h.jm.commit(paceline_joints::LeaseId(1), vec![placement], 1_000_000).await.expect("commit");
    assert_eq!((c.launched, c.dropped), (0, 1));
    let back = h.jm.unplaced(&[(second.id, UnplacedReason::InsufficientResources)], 1_000_000).await.expect("back");
    assert_eq!(back, 0, "a released task does not go back to the queue");
    assert_eq!(held(&h), (0, 0, 0));
    assert!(h.launcher.launches().is_empty());
}

/// A gang of two whose member is killed while the gang still waits: the
/// gang stays queued for the member that still wants to run, and the
/// killed member's task is released when the engine first takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_of_a_queued_gang_is_released_when_taken() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    let mut c = config(JobKind::Batch, 2);
    c.sla.min_running_instances = Some(2);
    h.jm.create("g", c).await.expect("create");
    assert_eq!(held(&h), (0, 0, 1), "one gang of two");
    h.jm.kill("g", Some(vec![0])).await.expect("kill one member");
    assert_eq!(held(&h), (0, 0, 1), "the gang waits for its other member");
    admit(&h);
    assert_eq!(held(&h), (200, 2, 0));
    assert_eq!(h.place().await, 1, "only the member that wants to run is launched");
    assert_eq!(held(&h), (100, 1, 0), "the killed member's task was released, not sent back");
    let launched: Vec<String> = h.launcher.launches().iter().map(|l| l.run.task_id.clone()).collect();
    assert_eq!(launched.len(), 1);
    assert!(launched[0].ends_with("-1"), "{launched:?}");
}

/// An admitted gang of two, one member killed: its task is released at once,
/// the other is placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_of_an_admitted_gang_is_released_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    let mut c = config(JobKind::Batch, 2);
    c.sla.min_running_instances = Some(2);
    h.jm.create("g", c).await.expect("create");
    admit(&h);
    assert_eq!(held(&h), (200, 2, 0));
    h.jm.kill("g", Some(vec![1])).await.expect("kill one member");
    assert_eq!(held(&h), (100, 1, 0));
    assert_eq!(h.place().await, 1);
    assert_eq!(h.jm.task("g", 0).expect("task").state, TaskState::Launched);
}
