use std::collections::BTreeMap;

use paceline_model::job::JobKind;
use paceline_model::task::TaskState;

use crate::common::*;

fn hosts(names: &[&str]) -> Vec<(String, paceline_model::Labels, bool)> {
    names.iter().map(|n| (n.to_string(), BTreeMap::from([("zone".to_string(), "a".to_string())]), true)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_per_host_following_joins_and_drains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2", "h3"]);
    h.jm.on_hosts_changed(hosts(&["h1", "h2"])).await;
    h.jm.create("logs", config(JobKind::Daemon, 0)).await.expect("create");
    h.pump(&no_health, 10).await;
    let on = |h: &paceline_jobmgr::scenario::Harness| {
        let mut v: Vec<String> = h.launcher.launches().iter().map(|l| l.host.clone()).collect();
        v.sort();
        v
    };
    assert_eq!(on(&h), vec!["h1", "h2"]);
    h.jm.on_hosts_changed(hosts(&["h1", "h2", "h3"])).await;
    h.pump(&no_health, 10).await;
    assert_eq!(on(&h), vec!["h1", "h2", "h3"]);
    h.jm.on_host_draining("h2").await;
    h.pump(&no_health, 10).await;
    let job = h.jm.get("logs").await.expect("get");
    let by_host: BTreeMap<String, TaskState> =
        job.tasks.iter().map(|t| (t.host.clone().unwrap_or_default(), t.state)).collect();
    assert_eq!(by_host.get("h2"), Some(&TaskState::Killed));
    assert_eq!(by_host.get("h1"), Some(&TaskState::Running));
    assert_eq!(by_host.get("h3"), Some(&TaskState::Running));
    assert_eq!(h.launcher.launches().len(), 3, "nothing replaces the drained daemon");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_host_moves_service_instances_within_max_unavailable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut h = harness(dir.path(), &["h1"]);
    h.jm.create("svc", config(JobKind::Stateless, 3)).await.expect("create");
    h.pump(&no_health, 10).await;
    h.hosts = vec!["h2".into()];
    h.jm.on_host_draining("h1").await;
    assert_eq!(h.launcher.kills().len(), 1, "one at a time (max unavailable 1)");
    h.pump(&no_health, 20).await;
    let job = h.jm.get("svc").await.expect("get");
    assert!(job.tasks.iter().all(|t| t.state == TaskState::Running && t.host.as_deref() == Some("h2")));
    assert_eq!(h.launcher.kills().len(), 3);
}
