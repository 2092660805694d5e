//! The live counts quotas read (security issue 44): after every path that
//! changes what a job holds, the counts kept as the mirror changes equal a
//! full recount over the live jobs and tasks, and hold the expected figures.

use std::collections::HashMap;

use paceline_jobmgr::UpdateRequest;
use paceline_jobmgr::live_counts::Held;
use paceline_jobmgr::scenario::Harness;
use paceline_model::job::{JobKind, JobState};
use paceline_model::run::RunState;

use crate::common::*;

/// The kept counts equal a recount; returns what `team` and `/test` hold.
fn checked(h: &Harness, when: &str) -> (Held, Held) {
    let kept = h.jm.live_counts();
    let recounted = h.jm.recount_live();
    assert_eq!(kept, recounted, "kept counts differ from a recount {when}");
    let (owner, pool) = h.jm.live_held("team", "/test");
    let get = |m: &HashMap<String, Held>, k: &str| m.get(k).copied().unwrap_or_default();
    assert_eq!(owner, get(&kept.0, "team"));
    assert_eq!(pool, get(&kept.1, "/test"));
    (owner, pool)
}

fn held(jobs: u64, tasks: u64) -> Held {
    Held { jobs, tasks }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_follow_create_scale_kill_and_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    assert_eq!(checked(&h, "at start"), (held(0, 0), held(0, 0)));
    h.jm.create("web", config(JobKind::Stateless, 3)).await.expect("create");
    h.jm.create("api", config(JobKind::Stateless, 2)).await.expect("create");
    assert_eq!(checked(&h, "after two creates").0, held(2, 5));
    h.pump(&no_health, 10).await;
    assert_eq!(checked(&h, "once running").0, held(2, 5));
    let live = h.jm.live_job("web").expect("web is live");
    assert_eq!((live.owner.as_str(), live.pool.as_str(), live.tasks), ("team", "/test", 3));

    // Scale up: AddInstances, then an update to more instances.
    h.jm.add_instances("web", 2).await.expect("add");
    assert_eq!(checked(&h, "after add_instances").0, held(2, 7));
    h.pump(&no_health, 10).await;
    h.jm.update("web", config(JobKind::Stateless, 8), UpdateRequest::default()).await.expect("update up");
    assert_eq!(checked(&h, "after an update to 8").0, held(2, 10));
    h.pump(&no_health, 20).await;
    assert_eq!(checked(&h, "after the update ran").0, held(2, 10));

    // Scale down: the removed instances stop counting once they are killed.
    h.jm.update("web", config(JobKind::Stateless, 2), UpdateRequest::default()).await.expect("update down");
    h.pump(&no_health, 20).await;
    assert_eq!(checked(&h, "after an update to 2").0, held(2, 4));

    // An owner or pool change moves the job's whole count.
    let mut moved = config(JobKind::Stateless, 2);
    moved.owner = "other".into();
    h.jm.update("api", moved, UpdateRequest::default()).await.expect("owner change");
    assert_eq!(checked(&h, "after an owner change").0, held(1, 2));
    assert_eq!(h.jm.live_held("other", "/test").0, held(1, 2));
    assert_eq!(h.jm.live_held("other", "/test").1, held(2, 4), "the pool holds both");

    // A killed job stops counting when it is KILLED; a delete keeps it so.
    h.jm.kill("web", None).await.expect("kill");
    h.pump(&no_health, 10).await;
    assert_eq!(h.jm.get("web").await.expect("get").runtime.state, JobState::Killed);
    assert_eq!(checked(&h, "after the kill").0, held(0, 0));
    assert!(h.jm.live_job("web").is_none());
    h.jm.delete("web").await.expect("delete");
    assert_eq!(checked(&h, "after the delete").1, held(1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_job_counts_less_as_tasks_finish_and_nothing_once_it_succeeded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    h.jm.create("b", config(JobKind::Batch, 3)).await.expect("create");
    h.pump(&no_health, 10).await;
    assert_eq!(checked(&h, "running").0, held(1, 3));
    h.report("b-0-1", RunState::Succeeded, None).await;
    assert_eq!(checked(&h, "one task done").0, held(1, 2));
    for i in 1..3 {
        h.report(&format!("b-{i}-1"), RunState::Succeeded, None).await;
    }
    assert_eq!(h.jm.get("b").await.expect("get").runtime.state, JobState::Succeeded);
    assert_eq!(checked(&h, "after the job succeeded by itself"), (held(0, 0), held(0, 0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_manager_rebuilds_the_counts_from_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jobs.sqlite");
    {
        let h = Harness::new(Harness::sqlite(&path), registry(), &["h1", "h2"], 1_000_000);
        h.jm.create("web", config(JobKind::Stateless, 4)).await.expect("create");
        h.jm.create("b", config(JobKind::Batch, 2)).await.expect("create");
        h.jm.create("gone", config(JobKind::Stateless, 5)).await.expect("create");
        h.pump(&no_health, 10).await;
        h.report("b-0-1", RunState::Succeeded, None).await;
        h.jm.kill("gone", None).await.expect("kill");
        h.pump(&no_health, 10).await;
        assert_eq!(checked(&h, "before the restart").0, held(2, 5));
    }
    let h = Harness::new(Harness::sqlite(&path), registry(), &["h1", "h2"], 2_000_000);
    assert_eq!(checked(&h, "before recovery").0, held(0, 0));
    h.jm.recover().await.expect("recover");
    assert_eq!(checked(&h, "after recovery").0, held(2, 5));
    h.pump(&no_health, 10).await;
    assert_eq!(checked(&h, "after recovery settled").0, held(2, 5));
}
