//! Owner leases: a job whose owner stops renewing it is killed, a renewed
//! one keeps running, and a new job manager starts every lease afresh.

use paceline_jobmgr::JobError;
use paceline_jobmgr::UpdateRequest;
use paceline_jobmgr::scenario::Harness;
use paceline_model::job::{JobGoal, JobKind, JobState};
use paceline_model::task::TaskState;

use crate::common::*;

fn leased(secs: u32, instances: u32) -> paceline_model::job::JobConfig {
    let mut c = config(JobKind::Stateless, instances);
    c.owner_lease_secs = Some(secs);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_owner_stops_renewing_is_killed_and_a_renewed_one_keeps_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    h.jm.create("renewed", leased(10, 2)).await.expect("create");
    h.jm.create("abandoned", leased(10, 2)).await.expect("create");
    h.jm.create("plain", config(JobKind::Stateless, 1)).await.expect("create");
    h.pump(&no_health, 10).await;
    // 30 s in 3 s steps: `renewed` is renewed at every step, `abandoned` never.
    for _ in 0..10 {
        assert_eq!(h.jm.renew_owner_lease("renewed").await.expect("renew"), 10);
        h.advance(3_000).await;
        h.pump(&no_health, 5).await;
    }
    let renewed = h.jm.get("renewed").await.expect("get");
    assert_eq!(renewed.runtime.state, JobState::Running);
    assert!(renewed.tasks.iter().all(|t| t.state == TaskState::Running));
    let abandoned = h.jm.get("abandoned").await.expect("get");
    assert_eq!(abandoned.runtime.goal, JobGoal::Kill);
    assert_eq!(abandoned.runtime.state, JobState::Killed, "{:?}", abandoned.tasks);
    assert!(abandoned.runtime.message.contains("owner lease expired"), "{}", abandoned.runtime.message);
    assert_eq!(h.jm.get("plain").await.expect("get").runtime.state, JobState::Running, "no lease, no kill");
    // Its owner learns that it is over, rather than renewing for ever.
    let err = h.jm.renew_owner_lease("abandoned").await.expect_err("ended");
    assert!(matches!(err, JobError::State(_)), "{err}");
    let err = h.jm.renew_owner_lease("plain").await.expect_err("no lease");
    assert!(err.to_string().contains("no owner lease"), "{err}");
    assert!(matches!(h.jm.renew_owner_lease("nope").await, Err(JobError::NotFound(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_runs_out_after_its_length_and_not_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.create("job", leased(10, 2)).await.expect("create");
    h.pump(&no_health, 10).await;
    h.advance(9_999).await;
    assert_eq!(h.jm.get("job").await.expect("get").runtime.goal, JobGoal::Run, "one ms short of the lease");
    h.advance(1).await;
    assert_eq!(h.jm.get("job").await.expect("get").runtime.goal, JobGoal::Kill);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_can_add_a_lease_and_take_it_away() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    let plain = config(JobKind::Stateless, 1);
    h.jm.create("job", plain.clone()).await.expect("create");
    h.pump(&no_health, 10).await;
    h.jm.update("job", leased(5, 1), UpdateRequest::default()).await.expect("add a lease");
    h.pump(&no_health, 10).await;
    assert_eq!(h.jm.renew_owner_lease("job").await.expect("renew"), 5);
    h.jm.update("job", plain, UpdateRequest::default()).await.expect("drop the lease");
    h.pump(&no_health, 10).await;
    h.advance(60_000).await;
    assert_eq!(h.jm.get("job").await.expect("get").runtime.goal, JobGoal::Run, "lease gone: never killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_job_manager_starts_the_lease_afresh() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jobs.sqlite");
    {
        let h = Harness::new(Harness::sqlite(&path), registry(), &["h1"], 1_000_000);
        h.jm.create("job", leased(10, 2)).await.expect("create");
        h.pump(&no_health, 10).await;
    }
    // The next manager starts a minute later: the owner could not have
    // renewed meanwhile, so nothing is charged for that minute.
    let h = Harness::new(Harness::sqlite(&path), registry(), &["h1"], 1_060_000);
    assert_eq!(h.jm.recover().await.expect("recover"), 1);
    h.advance(5_000).await;
    assert_eq!(h.jm.get("job").await.expect("get").runtime.goal, JobGoal::Run);
    h.advance(5_000).await;
    let job = h.jm.get("job").await.expect("get");
    assert_eq!(job.runtime.goal, JobGoal::Kill, "then the lease counts as before");
}
