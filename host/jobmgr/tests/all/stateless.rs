use paceline_jobmgr::UpdateRequest;
use paceline_model::job::{JobKind, JobState, UpdateSpec, UpdateState};
use paceline_model::task::{TaskGoal, TaskState};

use crate::common::*;

fn service(n: u32) -> paceline_model::job::JobConfig {
    let mut c = config(JobKind::Stateless, n);
    c.default_task.health_check = Some(health());
    c.update = UpdateSpec { batch_size: 2, max_failed_instances: 1, rollback_on_failure: true, start_paused: false };
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_update_stops_after_max_failures_and_rolls_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2", "h3"]);
    h.jm.create("web", service(10)).await.expect("create");
    h.pump(&healthy, 20).await;
    assert_eq!(h.jm.get("web").await.expect("get").runtime.task_counts.get(&TaskState::Running), Some(&10));
    let mut bad = service(10);
    bad.default_task.args = vec!["bad".into()];
    let uid = h.jm.update("web", bad, UpdateRequest::default()).await.expect("update");
    h.pump(&healthy, 40).await;
    let job = h.jm.get("web").await.expect("get");
    let u = job.update.expect("update");
    assert_eq!(u.id, uid);
    assert_eq!(u.state, UpdateState::RolledBack, "{}", u.message);
    // Only the first batch was touched: two launches of the bad version, then two rollbacks.
    let counts = h.launch_counts("web");
    assert_eq!(counts.get(&0), Some(&3));
    assert_eq!(counts.get(&1), Some(&3));
    assert!((2..10).all(|i| counts.get(&i) == Some(&1)), "{counts:?}");
    assert!(job.tasks.iter().all(|t| t.config_version == 1 && t.state == TaskState::Running));
    assert_eq!(job.runtime.config_version, 1);
    assert!(wasm_calls(&h, "lifecycle/stateless") > 0, "the Wasm plugin served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_update_can_be_paused_and_resumed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    h.jm.create("api", service(6)).await.expect("create");
    h.pump(&healthy, 20).await;
    let mut v2 = service(6);
    v2.default_task.args = vec!["v2".into()];
    h.jm.update("api", v2, UpdateRequest::default()).await.expect("update");
    // The first batch is under way; pause, let it finish, and nothing more moves.
    h.jm.pause_update("api").await.expect("pause");
    h.pump(&healthy, 20).await;
    let counts = h.launch_counts("api");
    assert_eq!((counts[&0], counts[&1]), (2, 2));
    assert!((2..6).all(|i| counts[&i] == 1), "{counts:?}");
    assert_eq!(h.jm.get("api").await.expect("get").update.expect("u").state, UpdateState::Paused);
    h.jm.resume_update("api").await.expect("resume");
    h.pump(&healthy, 40).await;
    let job = h.jm.get("api").await.expect("get");
    assert_eq!(job.update.expect("u").state, UpdateState::Succeeded);
    assert!(job.tasks.iter().all(|t| t.config_version == 2 && t.state == TaskState::Running));
    assert!(h.launch_counts("api").values().all(|&n| n == 2));
    assert_eq!(job.runtime.state, JobState::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_down_and_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    h.jm.create("svc", service(10)).await.expect("create");
    h.pump(&healthy, 20).await;
    let mut c = service(4);
    c.update.batch_size = 2;
    h.jm.update("svc", c, UpdateRequest::default()).await.expect("scale down");
    h.pump(&healthy, 20).await;
    let job = h.jm.get("svc").await.expect("get");
    assert_eq!(job.runtime.task_counts.get(&TaskState::Running), Some(&4));
    assert!(
        job.tasks[4..].iter().all(|t| t.state == TaskState::Killed),
        "{:?}",
        job.tasks.iter().map(|t| t.state).collect::<Vec<_>>()
    );
    assert_eq!(h.launcher.kills().len(), 6);
    h.jm.update("svc", service(8), UpdateRequest::default()).await.expect("scale up");
    h.pump(&healthy, 20).await;
    let job = h.jm.get("svc").await.expect("get");
    assert_eq!(job.runtime.task_counts.get(&TaskState::Running), Some(&8));
    assert!(job.tasks[..8].iter().all(|t| t.state == TaskState::Running));
    // Instances that kept running were never restarted.
    let counts = h.launch_counts("svc");
    assert!((0..4).all(|i| counts[&i] == 1), "{counts:?}");
    assert!((4..8).all(|i| counts[&i] == 2), "{counts:?}");
    assert_eq!(job.update.expect("u").state, UpdateState::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_instance_restarts_with_backoff() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.create("s2", config(JobKind::Stateless, 1)).await.expect("create");
    h.pump(&no_health, 10).await;
    h.report("s2-0-1", paceline_model::run::RunState::Failed, None).await;
    assert_eq!(h.place().await, 0);
    h.advance(999).await;
    assert_eq!(h.place().await, 0);
    h.advance(1).await;
    h.pump(&no_health, 10).await;
    assert_eq!(h.jm.task("s2", 0).expect("task").run, 2);
    assert_eq!(h.jm.task("s2", 0).expect("task").state, TaskState::Running);
}

/// A cluster of 1,000 of each kind: job `fill` runs 10 preemptible tasks in
/// pool /a, using it all; then job `late` (5 tasks) asks for half in /b, which
/// is owed it, so half of `fill` is to be preempted.
async fn fill_then_claim(dir: &std::path::Path) -> paceline_jobmgr::scenario::Harness {
    fill_then_claim_with(dir, false).await
}

/// [`fill_then_claim`], `fill` saying `sla.kill_on_preempt` as given.
async fn fill_then_claim_with(dir: &std::path::Path, kill_on_preempt: bool) -> paceline_jobmgr::scenario::Harness {
    use paceline_model::Resources;
    let h = harness(dir, &["h1", "h2"]);
    {
        let mut rm = h.resmgr.lock().expect("rm");
        rm.set_capacity(Resources::new(1_000, 1_000, 1_000, 0));
        rm.create_pool("/a", Default::default()).expect("pool");
        rm.create_pool("/b", Default::default()).expect("pool");
    }
    let mut a = config(JobKind::Stateless, 10);
    a.pool = "/a".into();
    a.sla.preemptible = true;
    a.sla.kill_on_preempt = kill_on_preempt;
    h.jm.create("fill", a).await.expect("create");
    h.pump(&no_health, 10).await;
    assert_eq!(h.jm.get("fill").await.expect("get").runtime.task_counts.get(&TaskState::Running), Some(&10));
    let mut b = config(JobKind::Batch, 5);
    b.pool = "/b".into();
    b.sla.preemptible = true;
    h.jm.create("late", b).await.expect("create");
    h
}

/// Runs [`fill_then_claim`]'s cluster until `late` runs its 5 and `fill`
/// keeps 5 running; returns `fill`.
async fn half_of_fill_preempted(h: &paceline_jobmgr::scenario::Harness) -> paceline_jobmgr::JobInfo {
    for _ in 0..10 {
        h.advance(1_000).await;
        h.pump(&no_health, 5).await;
    }
    let late = h.jm.get("late").await.expect("get");
    let fill = h.jm.get("fill").await.expect("get");
    let running = |j: &paceline_jobmgr::JobInfo| j.tasks.iter().filter(|t| t.state == TaskState::Running).count();
    assert_eq!(running(&late), 5, "{:?}", late.tasks.iter().map(|t| t.state).collect::<Vec<_>>());
    assert_eq!(running(&fill), 5);
    fill
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempted_instances_are_requeued_once_and_come_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = fill_then_claim(dir.path()).await;
    let fill = half_of_fill_preempted(&h).await;
    let preempted: Vec<_> = fill.tasks.iter().filter(|t| t.state == TaskState::Pending).collect();
    assert_eq!(preempted.len(), 5);
    assert!(preempted.iter().all(|t| t.run == 2 && t.reason == "PREEMPTED_REQUEUED"));
    // Requeued by the resource manager alone: one gang each, not two.
    assert_eq!(h.resmgr.lock().expect("rm").pool_status("/a").expect("pool").queued_gangs, 5);
}

/// `sla.kill_on_preempt`: a preempted run ends its task for good (the pod
/// scheduler's jobs, whose evicted pod its owner replaces): KILLED with the
/// goal Kill, no second run, no gang left queued, and a recovery that
/// starts nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_says_kill_on_preempt_ends_its_preempted_tasks_for_good() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let h = fill_then_claim_with(dir.path(), true).await;
        let fill = half_of_fill_preempted(&h).await;
        let ended: Vec<_> = fill.tasks.iter().filter(|t| t.state != TaskState::Running).collect();
        assert_eq!(ended.len(), 5, "{:?}", fill.tasks.iter().map(|t| t.state).collect::<Vec<_>>());
        for t in &ended {
            assert_eq!(
                (t.state, t.goal, t.run, t.reason.as_str()),
                (TaskState::Killed, TaskGoal::Kill, 1, "PREEMPTED")
            );
        }
        assert!(h.launch_counts("fill").values().all(|&n| n == 1), "nothing launched twice");
        assert_eq!(h.resmgr.lock().expect("rm").pool_status("/a").expect("pool").queued_gangs, 0);
    }
    // A new manager over the same file: the ended tasks stay ended.
    let h = harness(dir.path(), &["h1", "h2"]);
    {
        let mut rm = h.resmgr.lock().expect("rm");
        rm.set_capacity(paceline_model::Resources::new(1_000, 1_000, 1_000, 0));
        rm.create_pool("/a", Default::default()).expect("pool");
        rm.create_pool("/b", Default::default()).expect("pool");
    }
    h.jm.recover().await.expect("recover");
    h.pump(&no_health, 5).await;
    let fill = h.jm.get("fill").await.expect("get");
    let killed = fill.tasks.iter().filter(|t| (t.state, t.run) == (TaskState::Killed, 1)).count();
    assert_eq!(killed, 5, "{:?}", fill.tasks.iter().map(|t| (t.state, t.run)).collect::<Vec<_>>());
}

/// Spark removes an executor's instance as soon as it sees it preempted:
/// the removal must win over the resource manager's requeue, or the
/// instance would come back under the same executor id (and hold a queued
/// gang nobody wants).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_removed_while_being_preempted_is_not_requeued() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = fill_then_claim(dir.path()).await;
    let mut victims = Vec::new();
    for _ in 0..10 {
        h.advance(1_000).await;
        h.place().await;
        let fill = h.jm.get("fill").await.expect("get");
        victims =
            (0..fill.tasks.len() as u32).filter(|&i| fill.tasks[i as usize].state == TaskState::Killing).collect();
        if !victims.is_empty() {
            break;
        }
    }
    assert!(!victims.is_empty(), "preemption chose victims");
    // Removed before the hosts confirm the kills.
    h.jm.remove_instances("fill", &victims).await.expect("remove");
    for _ in 0..10 {
        h.advance(1_000).await;
        h.pump(&no_health, 5).await;
    }
    let fill = h.jm.get("fill").await.expect("get");
    let launches = h.launch_counts("fill");
    for &i in &victims {
        let t = &fill.tasks[i as usize];
        assert_eq!((t.state, t.run), (TaskState::Killed, 1), "instance {i} stays removed: {t:?}");
        assert_eq!(launches.get(&i), Some(&1), "instance {i} never launched again");
    }
    // What /a still queues is exactly the victims that are still wanted.
    let waiting = fill.tasks.iter().filter(|t| t.state == TaskState::Pending).count();
    assert_eq!(
        h.resmgr.lock().expect("rm").pool_status("/a").expect("pool").queued_gangs as usize,
        waiting,
        "no gang queued for a removed instance ({} removed)",
        victims.len()
    );
}

/// A preempted run requeued by the resource manager (a gang of its own,
/// whose id the job manager never learns) and then killed while it waits:
/// its gang is cancelled, so /a neither queues nor is owed anything for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_preempted_instance_killed_while_waiting_leaves_no_gang() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = fill_then_claim(dir.path()).await;
    for _ in 0..10 {
        h.advance(1_000).await;
        h.pump(&no_health, 5).await;
    }
    let fill = h.jm.get("fill").await.expect("get");
    let requeued: Vec<u32> =
        (0..fill.tasks.len() as u32).filter(|&i| fill.tasks[i as usize].state == TaskState::Pending).collect();
    assert_eq!(requeued.len(), 5, "five runs preempted and requeued");
    let status = |h: &paceline_jobmgr::scenario::Harness| {
        let s = h.resmgr.lock().expect("rm").pool_status("/a").expect("pool");
        (s.queued_gangs, s.demand.cpu_millis)
    };
    assert_eq!(status(&h), (5, 1_000), "five running, five queued");
    h.jm.kill("fill", Some(requeued[..2].to_vec())).await.expect("kill two waiting");
    assert_eq!(status(&h), (3, 800), "the two killed runs' gangs are gone, and their demand");
    h.jm.kill("fill", None).await.expect("kill the job");
    h.pump(&no_health, 5).await;
    assert_eq!(status(&h), (0, 0));
}
