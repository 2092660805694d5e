use paceline_model::job::JobKind;
use paceline_model::run::RunState;
use paceline_model::task::{TaskState, VolumeSpec};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_keep_the_host_and_the_volume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2", "h3"]);
    let mut c = config(JobKind::Stateful, 2);
    c.default_task.volume = Some(VolumeSpec { name: "data".into(), size_mib: 10 });
    h.jm.create("db", c).await.expect("create");
    h.pump(&no_health, 10).await;
    let host0 = h.jm.task("db", 0).expect("task").host.expect("host");
    let host1 = h.jm.task("db", 1).expect("task").host.expect("host");
    // A failure restarts in place.
    h.report("db-0-1", RunState::Failed, None).await;
    assert_eq!(h.jm.need_of(h.jm.job_key("db").expect("key"), 0), None, "waits for the backoff");
    h.advance(1_000).await;
    let need = h.jm.need_of(h.jm.job_key("db").expect("key"), 0).expect("needs placement");
    assert_eq!(need.preferred_host.as_deref(), Some(host0.as_str()));
    assert!(!need.host_required, "a stateful instance prefers its host; a daemon's requires it");
    h.pump(&no_health, 10).await;
    let l = h.launcher.launches();
    let relaunch = l.iter().find(|l| l.run.run_id == "db-0-2").expect("relaunched");
    assert_eq!(relaunch.host, host0);
    assert_eq!(relaunch.run.task_id, "db-0", "volumes are kept per task id");
    assert_eq!(relaunch.run.spec.volume.as_ref().map(|v| v.name.as_str()), Some("data"));
    // An operator restart too.
    h.jm.restart("db", Some(vec![1]), 1).await.expect("restart");
    h.pump(&no_health, 10).await;
    let t1 = h.jm.task("db", 1).expect("task");
    assert_eq!((t1.run, t1.state, t1.host.as_deref()), (2, TaskState::Running, Some(host1.as_str())));
    // Stateful gangs are not preemptible in the resource manager.
    let rm = h.resmgr.lock().expect("rm");
    let st = rm.pool_status("/test").expect("pool");
    assert_eq!(st.non_preemptible_allocation, st.allocation);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_move_one_instance_at_a_time_in_order() {
    use paceline_jobmgr::UpdateRequest;
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2", "h3"]);
    let mut c = config(JobKind::Stateful, 3);
    c.update.batch_size = 3;
    h.jm.create("zk", c.clone()).await.expect("create");
    h.pump(&no_health, 10).await;
    let hosts: Vec<String> = (0..3).map(|i| h.jm.task("zk", i).expect("t").host.expect("host")).collect();
    c.default_task.args = vec!["v2".into()];
    h.jm.update("zk", c, UpdateRequest::default()).await.expect("update");
    assert_eq!(h.launcher.kills().len(), 1, "one at a time despite batch 3");
    h.pump(&no_health, 30).await;
    let order: Vec<String> = h.launcher.kills().into_iter().map(|(_, run)| run).collect();
    assert_eq!(order, vec!["zk-0-1", "zk-1-1", "zk-2-1"]);
    for i in 0..3 {
        let t = h.jm.task("zk", i).expect("t");
        assert_eq!(
            (t.config_version, t.state, t.host.as_deref()),
            (2, TaskState::Running, Some(hosts[i as usize].as_str()))
        );
    }
}
