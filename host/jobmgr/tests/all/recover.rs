use std::collections::BTreeMap;
use std::sync::Arc;

use paceline_jobmgr::UpdateRequest;
use paceline_jobmgr::scenario::Harness;
use paceline_model::job::{JobGoal, JobKind, JobState, UpdateSpec, UpdateState};
use paceline_model::task::{TaskGoal, TaskState};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_manager_resumes_an_update_without_launching_anything_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jobs.sqlite");
    let mut c = config(JobKind::Stateless, 10);
    c.default_task.health_check = Some(health());
    c.update = UpdateSpec { batch_size: 2, max_failed_instances: 0, rollback_on_failure: true, start_paused: false };
    let mut v2 = c.clone();
    v2.default_task.args = vec!["v2".into()];
    let mut runs: Vec<String>;
    {
        let h = Harness::new(Harness::sqlite(&path), registry(), &["h1", "h2"], 1_000_000);
        h.jm.create("web", c).await.expect("create");
        h.pump(&healthy, 20).await;
        h.jm.update("web", v2, UpdateRequest::default()).await.expect("update");
        // Two rounds: the first batch comes up on v2, the second is under way.
        for _ in 0..2 {
            h.settle_hosts(&healthy).await;
            h.place().await;
        }
        h.settle_hosts(&healthy).await;
        runs = h.launcher.launches().iter().map(|l| l.run.run_id.clone()).collect();
        let u = h.jm.get("web").await.expect("get").update.expect("update");
        assert_eq!(u.state, UpdateState::RollingForward);
    }
    // A new manager, resource manager and host side over the same file.
    let h = Harness::new(Harness::sqlite(&path), registry(), &["h1", "h2"], 2_000_000);
    assert_eq!(h.jm.recover().await.expect("recover"), 1);
    let expected = h.jm.expected_runs();
    assert!(!expected.is_empty());
    h.pump(&healthy, 40).await;
    let job = h.jm.get("web").await.expect("get");
    assert_eq!(job.update.as_ref().expect("u").state, UpdateState::Succeeded);
    assert!(job.tasks.iter().all(|t| t.config_version == 2 && t.state == TaskState::Running), "{:?}", job.tasks);
    runs.extend(h.launcher.launches().iter().map(|l| l.run.run_id.clone()));
    let mut per_instance: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for r in &runs {
        assert!(seen.insert(r.clone()), "run {r} launched twice");
        let instance = paceline_model::RunId::split(r).expect("run id").1.to_string();
        *per_instance.entry(instance).or_insert(0) += 1;
    }
    assert!(per_instance.values().all(|&n| n == 2), "each instance: one v1 run, one v2 run: {per_instance:?}");
    let _ = Arc::strong_count(&h.jm);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_manager_charges_the_pool_for_the_runs_already_on_hosts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jobs.sqlite");
    let allocation = |h: &Harness| {
        let rm = h.resmgr.lock().expect("resmgr");
        let s = rm.pool_status("/test").expect("pool");
        (s.allocation.cpu_millis, s.live_tasks)
    };
    {
        let h = Harness::new(Harness::sqlite(&path), registry(), &["h1", "h2"], 1_000_000);
        h.jm.create("svc", config(JobKind::Stateless, 3)).await.expect("create");
        h.pump(&no_health, 20).await;
        assert!((0..3).all(|i| h.jm.task("svc", i).expect("task").state == TaskState::Running));
        assert_eq!(allocation(&h), (300, 3));
    }
    // A new job manager and a fresh resource manager over the same store.
    let h = Harness::new(Harness::sqlite(&path), registry(), &["h1", "h2"], 1_000_000);
    assert_eq!(allocation(&h), (0, 0), "a fresh resource manager knows nothing");
    assert_eq!(h.jm.recover().await.expect("recover"), 1);
    assert_eq!(allocation(&h), (300, 3), "the three runs on hosts hold their pool again");
    // Their end releases it, as for runs placed by this manager.
    h.jm.kill("svc", None).await.expect("kill");
    h.pump(&no_health, 20).await;
    assert_eq!(allocation(&h), (0, 0));
}

/// A crash between writing a job and writing its tasks (scripts/torture
/// found jobs left INITIALIZED for ever): recovery removes the job nobody
/// was told about, and recovers the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_create_was_cut_short_is_removed_at_recovery() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jobs.sqlite");
    {
        let h = Harness::new(Harness::sqlite(&path), registry(), &["h1"], 1_000_000);
        h.jm.create("whole", config(JobKind::Batch, 2)).await.expect("create");
        // What `create` writes first, and nothing after it: the crash.
        let store = Harness::sqlite(&path);
        let runtime = paceline_model::job::JobRuntime::initial(1, 1_000_000);
        store.create_job("cut", &config(JobKind::Batch, 3), &runtime).await.expect("the job's row");
    }
    let h = Harness::new(Harness::sqlite(&path), registry(), &["h1"], 2_000_000);
    assert_eq!(h.jm.recover().await.expect("recovery goes on"), 1, "only the whole job is recovered");
    assert!(h.jm.get("cut").await.is_err(), "the cut job is gone");
    let store = Harness::sqlite(&path);
    assert!(store.get_job_runtime("cut").await.is_err_and(|e| e.is_not_found()), "and gone from the store");
    assert_eq!(h.jm.get("whole").await.expect("get").tasks.len(), 2);
}

/// A job whose goal KILL is stored while its tasks still say RUNNING with
/// the goal RUN (what a whole job's kill leaves until the hosts report,
/// decision 0064, and what a crash cut short left before it): the job's goal
/// decides at recovery, so the job is killed whole and none of its tasks is
/// restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_cut_short_after_the_jobs_goal_was_written_is_finished_at_recovery() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jobs.sqlite");
    let runs: Vec<String>;
    {
        let h = Harness::new(Harness::sqlite(&path), registry(), &["h1", "h2"], 1_000_000);
        h.jm.create("svc", config(JobKind::Stateless, 3)).await.expect("create");
        h.pump(&no_health, 20).await;
        assert!((0..3).all(|i| h.jm.task("svc", i).expect("task").state == TaskState::Running));
        runs = h.launcher.launches().iter().map(|l| l.run.run_id.clone()).collect();
        // What `kill` writes first, and nothing after it: the crash.
        let store = Harness::sqlite(&path);
        let mut rt = store.get_job_runtime("svc").await.expect("runtime");
        rt.goal = JobGoal::Kill;
        store.cas_job_runtime("svc", rt.version, &rt).await.expect("the job's goal");
    }
    let h = Harness::new(Harness::sqlite(&path), registry(), &["h1", "h2"], 2_000_000);
    assert_eq!(h.jm.recover().await.expect("recover"), 1);
    h.pump(&no_health, 20).await;
    let job = h.jm.get("svc").await.expect("get");
    let seen: Vec<(TaskState, TaskGoal)> = job.tasks.iter().map(|t| (t.state, t.goal)).collect();
    assert_eq!(seen, vec![(TaskState::Killed, TaskGoal::Kill); 3], "every task killed, none restarted");
    assert_eq!(job.runtime.state, JobState::Killed);
    assert!(h.launcher.launches().is_empty(), "nothing launched again: {:?}", h.launcher.launches().len());
    let mut killed: Vec<String> = h.launcher.kills().into_iter().map(|(_, run)| run).collect();
    killed.sort();
    let mut want = runs.clone();
    want.sort();
    assert_eq!(killed, want, "the first manager's runs are the ones killed");
}
