//! Growing a live job by N instances and removing chosen ones for good
//! (`AddInstances` / `RemoveInstances`, which Spark's dynamic allocation
//! drives), with the pool's limit holding the extra instances back.

use paceline_model::job::{JobKind, JobState};
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::task::{TaskGoal, TaskState};

use crate::common::*;

fn states(job: &paceline_jobmgr::JobInfo) -> Vec<TaskState> {
    job.tasks.iter().map(|t| t.state).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_instances_run_and_removed_ones_stay_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    h.jm.create("ex", config(JobKind::Stateless, 2)).await.expect("create");
    h.pump(&no_health, 10).await;
    let (added, _update) = h.jm.add_instances("ex", 3).await.expect("grow");
    assert_eq!(added, vec![2, 3, 4]);
    h.pump(&no_health, 10).await;
    let job = h.jm.get("ex").await.expect("get");
    assert_eq!(job.config.instance_count, 5);
    assert_eq!(states(&job), vec![TaskState::Running; 5]);
    // Growing never restarted what ran.
    assert_eq!(h.launch_counts("ex").get(&0), Some(&1));

    let removed = h.jm.remove_instances("ex", &[1, 3]).await.expect("remove");
    assert_eq!(removed, vec![1, 3]);
    // Let the lifecycle and its restart backoff have every chance to revive them.
    for _ in 0..5 {
        h.advance(60_000).await;
        h.pump(&no_health, 5).await;
    }
    let job = h.jm.get("ex").await.expect("get");
    let s = states(&job);
    assert_eq!((s[1], s[3]), (TaskState::Killed, TaskState::Killed), "{s:?}");
    assert_eq!((s[0], s[2], s[4]), (TaskState::Running, TaskState::Running, TaskState::Running), "{s:?}");
    assert_eq!(job.tasks[1].goal, TaskGoal::Kill);
    assert_eq!(h.launch_counts("ex").get(&1), Some(&1), "a removed instance is not restarted");
    assert_eq!(job.runtime.state, JobState::Running, "the job stays live with fewer instances");
    assert_eq!(job.config.instance_count, 5, "ids are not reused");

    // Removing again reports nothing new; the next growth numbers after the highest.
    assert_eq!(h.jm.remove_instances("ex", &[1]).await.expect("again"), Vec::<u32>::new());
    assert_eq!(h.jm.add_instances("ex", 1).await.expect("grow").0, vec![5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_shrunk_to_nothing_can_grow_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.create("ex", config(JobKind::Stateless, 1)).await.expect("create");
    h.pump(&no_health, 10).await;
    h.jm.remove_instances("ex", &[0]).await.expect("remove");
    h.pump(&no_health, 10).await;
    assert_eq!(h.jm.get("ex").await.expect("get").runtime.state, JobState::Running);
    assert_eq!(h.jm.add_instances("ex", 2).await.expect("grow").0, vec![1, 2]);
    h.pump(&no_health, 10).await;
    let job = h.jm.get("ex").await.expect("get");
    assert_eq!(states(&job), vec![TaskState::Killed, TaskState::Running, TaskState::Running]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_beyond_the_pools_limit_wait_until_room_frees() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    // Room for exactly three instances of 100 cpu / 64 memory / 10 disk.
    let three = PerKind { cpu: 300, memory: 192, disk: 30, gpu: 0 };
    h.resmgr
        .lock()
        .expect("rm")
        .create_pool("/small", PoolSpec { reservation: three, limit: three, ..PoolSpec::default() })
        .expect("pool");
    let mut c = config(JobKind::Stateless, 2);
    c.pool = "/small".into();
    h.jm.create("ex", c).await.expect("create");
    h.pump(&no_health, 10).await;
    h.jm.add_instances("ex", 3).await.expect("grow past the limit is accepted");
    for _ in 0..3 {
        h.advance(1_000).await;
        h.pump(&no_health, 5).await;
    }
    let running = |j: &paceline_jobmgr::JobInfo| j.tasks.iter().filter(|t| t.state == TaskState::Running).count();
    let job = h.jm.get("ex").await.expect("get");
    assert_eq!(running(&job), 3, "{:?}", states(&job));
    assert_eq!(job.tasks.iter().filter(|t| t.state == TaskState::Pending).count(), 2, "{:?}", states(&job));
    // Removing a running one lets a waiting one in.
    h.jm.remove_instances("ex", &[0]).await.expect("remove");
    for _ in 0..3 {
        h.advance(1_000).await;
        h.pump(&no_health, 5).await;
    }
    let job = h.jm.get("ex").await.expect("get");
    assert_eq!(running(&job), 3, "{:?}", states(&job));
    assert_eq!(job.tasks[0].state, TaskState::Killed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_grow_and_remove_requests_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.create("ex", config(JobKind::Stateless, 2)).await.expect("create");
    let invalid = |e: paceline_jobmgr::JobError| matches!(e, paceline_jobmgr::JobError::Invalid { .. });
    assert!(invalid(h.jm.add_instances("ex", 0).await.expect_err("zero")));
    assert!(invalid(h.jm.add_instances("ex", u32::MAX).await.expect_err("too many")));
    assert!(invalid(h.jm.remove_instances("ex", &[]).await.expect_err("empty")));
    assert!(matches!(
        h.jm.remove_instances("ex", &[7]).await.expect_err("no such instance"),
        paceline_jobmgr::JobError::NotFound(_)
    ));
    assert!(matches!(
        h.jm.add_instances("nope", 1).await.expect_err("no such job"),
        paceline_jobmgr::JobError::NotFound(_)
    ));
    let job = h.jm.get("ex").await.expect("get");
    assert_eq!(job.config.instance_count, 2);
    assert!(job.tasks.iter().all(|t| t.goal == TaskGoal::Run));
    h.jm.kill("ex", None).await.expect("kill");
    assert!(matches!(h.jm.add_instances("ex", 1).await.expect_err("killed"), paceline_jobmgr::JobError::State(_)));
}
