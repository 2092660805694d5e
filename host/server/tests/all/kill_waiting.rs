//! A task killed while it waits for room gives its pool back, end to end:
//! the real job manager, resource manager, placement engine (Wasm
//! policies) and host manager over simulated hosts. CI's spark-e2e saw the
//! opposite: a task killed after admission, before any host took it, kept
//! its pool charged for as long as the server ran, and the pool's
//! entitlement stayed short by as much (decision 0045).

use crate::support;

use paceline_model::job::JobKind;
use paceline_model::task::TaskState;
use paceline_model::{Constraint, Resources};
use support::*;

/// The test pool's cpu allocation and live tasks, as the resource manager holds them.
fn held(c: &SimCluster) -> (u64, u64) {
    let rm = c.cluster.resmgr.lock().expect("resmgr");
    let s = rm.pool_status(POOL).expect("pool");
    (s.allocation.cpu_millis, s.live_tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_killed_while_waiting_for_room_gives_its_pool_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), two_zones()).await;
    let zone_b = vec![Constraint::AttributeEquals { key: "zone".into(), value: "b".into() }];
    let mut filler = job(JobKind::Stateless, 1);
    filler.default_task.resources = Resources::new(4_000, 256, 10, 0);
    filler.default_task.constraints = zone_b.clone();
    c.cluster.jobs.create("filler", filler).await.expect("filler");
    let filler = "filler";
    let up =
        c.run_until(250, 80, async |c| c.cluster.jobs.get(filler).await.expect("job").tasks[0].host.is_some()).await;
    assert!(up, "the filler holds the one zone b host");

    // Admitted (its pool may use the whole cluster), but no zone b host has
    // room: it goes round placement and backoff, charged to the pool.
    let mut waiter = job(JobKind::Batch, 3);
    waiter.default_task.resources = Resources::new(1_000, 256, 10, 0);
    waiter.default_task.constraints = zone_b;
    c.cluster.jobs.create("waiter", waiter).await.expect("waiter");
    let waiter = "waiter";
    for _ in 0..8 {
        c.step(250).await;
    }
    assert_eq!(held(&c), (7_000, 4), "the filler and the three admitted waiters");
    let info = c.cluster.jobs.get(waiter).await.expect("job");
    assert!(info.tasks.iter().all(|t| t.state == TaskState::Pending && t.host.is_none()), "{:?}", info.tasks);

    c.cluster.jobs.kill(waiter, Some(vec![0])).await.expect("kill one");
    assert_eq!(held(&c), (6_000, 3), "the killed task's share is back at once");
    c.cluster.jobs.kill(waiter, None).await.expect("kill the rest");
    for _ in 0..8 {
        c.step(250).await;
    }
    assert_eq!(held(&c), (4_000, 1), "only the filler holds the pool, rounds later too");
    assert_eq!(c.job_state(waiter).await, paceline_model::job::JobState::Killed);
}
