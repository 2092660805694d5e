//! The controller limit (Peloton's `controller_limit`): controller tasks,
//! such as Spark drivers, may hold at most a share of their pool, so they
//! cannot fill it and leave no room for the executors they start.

use paceline_model::job::JobKind;
use paceline_resmgr::{GangSpec, PendingReason, PoolSpec, ResourceKind, Transition};

use crate::common::{cpu, gang, manager};

fn controller(job: u64, cpu: u64) -> GangSpec {
    GangSpec { controller: true, ..gang(job, 1, cpu) }
}

#[test]
fn controllers_stop_at_their_share_while_other_work_fills_the_pool() {
    let mut rm = manager(100_000);
    // Reservation 10 cores, controllers at most 30% of it: 3 cores.
    let spec = PoolSpec { controller_limit_percent: Some(30), ..cpu(10_000, Some(10_000), 1) };
    rm.create_pool("/spark", spec).expect("pool");
    let drivers: Vec<_> = (0..4).map(|i| rm.submit("/spark", controller(i, 1_000), 0).expect("driver")).collect();
    let executors = rm.submit("/spark", gang(10, 6, 1_000), 0).expect("executors");
    rm.tick(1);
    // Three drivers fit the cap; the fourth waits, the executors behind it do not.
    assert_eq!(rm.pool_status("/spark").expect("pool").allocation.cpu_millis, 9_000);
    assert!(rm.why_pending(executors).is_none(), "executors were admitted past the waiting driver");
    let why = rm.why_pending(drivers[3]).expect("the fourth driver waits");
    assert_eq!(why.reason, PendingReason::OverControllerLimit { kind: ResourceKind::Cpu, by: 1_000 });
    assert!(why.to_string().contains("controller_limit_percent"), "{why}");

    // A driver ends: the waiting one gets its place.
    let mut ready = Vec::new();
    rm.take_ready(JobKind::Batch, 100, 2, &mut ready);
    let first_driver = ready.iter().find(|t| t.job == 0).expect("driver 0 ready").id;
    rm.kill(first_driver, 3).expect("kill");
    rm.transition(first_driver, Transition::KillConfirmed, 3).expect("confirmed");
    rm.tick(4);
    assert!(rm.why_pending(drivers[3]).is_none(), "admitted once a controller ended");
}

#[test]
fn without_a_limit_controllers_are_ordinary_work_and_the_cap_follows_pool_updates() {
    let mut rm = manager(100_000);
    rm.create_pool("/p", cpu(4_000, Some(4_000), 1)).expect("pool");
    for i in 0..4 {
        rm.submit("/p", controller(i, 1_000), 0).expect("driver");
    }
    rm.tick(1);
    assert_eq!(rm.pool_status("/p").expect("pool").allocation.cpu_millis, 4_000, "no cap: all four run");

    // With no reservation the cap is a share of the limit.
    let mut rm = manager(100_000);
    let spec = PoolSpec { controller_limit_percent: Some(50), ..cpu(0, Some(4_000), 1) };
    rm.create_pool("/q", spec).expect("pool");
    for i in 0..4 {
        rm.submit("/q", GangSpec { preemptible: true, ..controller(i, 1_000) }, 0).expect("driver");
    }
    rm.tick(1);
    assert_eq!(rm.pool_status("/q").expect("pool").allocation.cpu_millis, 2_000, "half of the 4-core limit");
    rm.update_pool("/q", PoolSpec { controller_limit_percent: Some(100), ..cpu(0, Some(4_000), 1) }).expect("update");
    rm.tick(2);
    assert_eq!(rm.pool_status("/q").expect("pool").allocation.cpu_millis, 4_000, "raised to all of it");
}
