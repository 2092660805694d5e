//! Jobs marked `controller` are held to their pool's controller limit;
//! other jobs in the pool are not.

use paceline_model::job::JobKind;
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::task::TaskState;

use crate::common::*;

fn count(job: &paceline_jobmgr::JobInfo, state: TaskState) -> usize {
    job.tasks.iter().filter(|t| t.state == state).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_jobs_get_their_share_of_the_pool_and_the_rest_is_left_to_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    // Room for six tasks of 100 cpu; controllers: half, three.
    let six = PerKind { cpu: 600, memory: 384, disk: 60, gpu: 0 };
    let spec = PoolSpec { reservation: six, limit: six, controller_limit_percent: Some(50), ..PoolSpec::default() };
    h.resmgr.lock().expect("rm").create_pool("/spark", spec).expect("pool");
    let mut drivers = config(JobKind::Stateless, 5);
    drivers.pool = "/spark".into();
    drivers.controller = true;
    h.jm.create("drivers", drivers).await.expect("create drivers");
    let mut executors = config(JobKind::Stateless, 3);
    executors.pool = "/spark".into();
    h.jm.create("executors", executors).await.expect("create executors");
    for _ in 0..3 {
        h.advance(1_000).await;
        h.pump(&no_health, 5).await;
    }
    let d = h.jm.get("drivers").await.expect("drivers");
    let e = h.jm.get("executors").await.expect("executors");
    assert_eq!(count(&d, TaskState::Running), 3, "controllers stop at 50%");
    assert_eq!(count(&d, TaskState::Pending), 2);
    assert_eq!(count(&e, TaskState::Running), 3, "the rest of the pool is left to other work");
    let why = h.jm.admission_reason("drivers", 4).expect("a waiting driver says why");
    assert!(why.contains("controller_limit_percent"), "{why}");
    let summary = h.jm.why_pending("drivers", None, Vec::new).summary();
    assert_eq!(summary, "2 pending: 2 held by their pool (controller limit of /spark)");
}
