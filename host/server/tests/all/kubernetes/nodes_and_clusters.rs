//! Two Paceline clusters on one namespace and the same nodes, a node
//! uncordoned, and a node's pod limit (`allocatable.pods`), against the
//! real control plane (see the parent module).

use std::time::Duration;

use paceline_model::Resources;
use paceline_model::host::MaintenanceState;
use paceline_model::job::JobKind;
use paceline_model::task::TaskState;

use super::{KubeCluster, job, kubectl, kubectl_stdin, nodes, nodes_with, start, start_as, unique};

/// The names of the job's pods that have not finished, sorted.
fn live_pods(job: &str) -> Vec<String> {
    let out = kubectl(&[
        "get",
        "pods",
        "-n",
        "paceline-tasks",
        "-l",
        &format!("paceline.io/job-id={job}"),
        "--field-selector",
        "status.phase!=Succeeded,status.phase!=Failed",
        "-o",
        "name",
    ]);
    let mut v: Vec<String> = out.lines().map(str::to_owned).filter(|l| !l.is_empty()).collect();
    v.sort();
    v
}

async fn running(c: &KubeCluster, job: &str) -> usize {
    c.running_by_host(job).await.values().sum()
}

async fn host_state(c: &KubeCluster, host: &str) -> Option<MaintenanceState> {
    c.cluster.hosts.host(host).map(|h| h.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_two_paceline_clusters_on_one_namespace_leave_each_others_pods_alone() {
    let (dir_a, dir_b) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let names = nodes("twins", 1, 4);
    let node = names[0].clone();
    let a = start_as(dir_a.path(), "twins", names.clone(), "kt-twins-a").await;
    let b = start_as(dir_b.path(), "twins", names.clone(), "kt-twins-b").await;
    let (ja, jb) = (unique("ktwa"), unique("ktwb"));
    a.cluster.jobs.create(&ja, job(JobKind::Stateless, 2, 1000, &[])).await.expect("create");
    a.wait("A's 2 running", 60, async |c| running(c, &ja).await == 2).await;
    b.cluster.jobs.create(&jb, job(JobKind::Stateless, 1, 1000, &[])).await.expect("create");
    b.wait("B's 1 running", 60, async |c| running(c, &jb).await == 1).await;
    // Each counts the other's pods as another scheduler's: never both on one CPU.
    a.wait("A counts B's pod", 30, async |c| c.provider.foreign_usage(&node).cpu_millis == 1000).await;
    b.wait("B counts A's pods", 30, async |c| c.provider.foreign_usage(&node).cpu_millis == 2000).await;
    b.wait("B's host offers what A's pods leave", 30, async |c| {
        c.cluster.hosts.host(&node).is_some_and(|h| h.view.total.cpu_millis == 2000)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (pods_a, pods_b) = (live_pods(&ja), live_pods(&jb));
    assert_eq!((pods_a.len(), pods_b.len()), (2, 1), "{pods_a:?} {pods_b:?}");
    assert_eq!((a.provider.run_count(), b.provider.run_count()), (2, 1), "each tracks its own runs only");

    // A goes away and comes back on its store: it adopts its pods, not B's
    // (a manager that adopted them would kill them as unexpected).
    a.keep_pods.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(a);
    let a = start_as(dir_a.path(), "twins", names.clone(), "kt-twins-a").await;
    a.wait("A's service runs again", 30, async |c| running(c, &ja).await == 2).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(a.provider.run_count(), 2);
    let ia = a.cluster.jobs.get(&ja).await.expect("job");
    assert!(ia.tasks.iter().all(|t| t.run == 1 && t.state == TaskState::Running), "{:?}", ia.tasks);
    let ib = b.cluster.jobs.get(&jb).await.expect("job");
    assert!(ib.tasks.iter().all(|t| t.run == 1 && t.state == TaskState::Running), "{:?}", ib.tasks);
    assert_eq!((live_pods(&ja), live_pods(&jb)), (pods_a, pods_b), "the same pods, none killed or made again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_an_uncordoned_node_comes_back_but_a_paceline_drain_stays() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("uncordon", 3, 1);
    let c = start(dir.path(), "uncordon", names.clone()).await;
    let svc = unique("kunc");
    c.cluster.jobs.create(&svc, job(JobKind::Stateless, 1, 1000, &[])).await.expect("create");
    c.wait("running", 60, async |c| running(c, &svc).await == 1).await;
    let on = c.running_by_host(&svc).await.keys().next().cloned().expect("host");
    kubectl(&["cordon", &on]);
    c.wait("drained by the cordon", 60, async |c| host_state(c, &on).await == Some(MaintenanceState::Drained)).await;
    kubectl(&["uncordon", &on]);
    c.wait("up again once uncordoned", 30, async |c| host_state(c, &on).await == Some(MaintenanceState::Up)).await;

    // Drained through Paceline (an operator's `paceline host drain`): a
    // cordon and an uncordon of its node do not undo it.
    let busy = c.running_by_host(&svc).await;
    let idle = names.iter().find(|n| **n != on && !busy.contains_key(*n)).cloned().expect("a node without the task");
    c.cluster.hosts.drain(&idle).await.expect("drain");
    c.wait("drained by the operator", 30, async |c| host_state(c, &idle).await == Some(MaintenanceState::Drained))
        .await;
    kubectl(&["cordon", &idle]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    kubectl(&["uncordon", &idle]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(host_state(&c, &idle).await, Some(MaintenanceState::Drained), "the operator's drain stays");
    c.cluster.hosts.up(&idle).await.expect("up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_a_node_with_as_many_pods_as_it_admits_takes_no_more() {
    let dir = tempfile::tempdir().expect("dir");
    // 3 pods, CPU for 8 tasks of 500m. (Placement counts no pods; a
    // launch past the limit is refused, and the job manager then avoids
    // the node, so this test fills it one job at a time: one node, no
    // race.)
    let names = nodes_with("podcap", 1, 4, &["--pods", "3"]);
    let node = names[0].clone();
    let other = "kt-podcap-other";
    kubectl(&["delete", "pod", other, "-n", "default", "--ignore-not-found"]);
    let c = start(dir.path(), "podcap", names.clone()).await;
    // Another scheduler's pod takes one of the three.
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {other}, namespace: default}}\nspec:\n  nodeName: {node}\n  \
         automountServiceAccountToken: false\n  containers:\n  - name: c\n    image: busybox\n    resources:\n      \
         requests: {{cpu: 100m}}\n"
    );
    kubectl_stdin(&["apply", "-f", "-"], Some(&manifest));
    c.wait("the other pod is counted", 30, async |c| c.provider.foreign_usage(&node).cpu_millis == 100).await;
    let svc = unique("kcap");
    c.cluster.jobs.create(&svc, job(JobKind::Stateless, 2, 500, &[])).await.expect("create");
    c.wait("2 running", 60, async |c| running(c, &svc).await == 2).await;
    c.wait("the full node offers nothing", 30, async |c| {
        c.cluster.hosts.host(&node).is_some_and(|h| h.view.total == Resources::ZERO)
    })
    .await;
    // One more task: CPU for it, no pod for it.
    let more = unique("kcap");
    c.cluster.jobs.create(&more, job(JobKind::Stateless, 1, 500, &[])).await.expect("create");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(running(&c, &more).await, 0, "3 pods of 3 on the node: no third task");
    assert_eq!(live_pods(&more).len(), 0, "{:?}", live_pods(&more));
    kubectl(&["delete", "pod", other, "-n", "default"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while running(&c, &more).await != 1 {
        if std::time::Instant::now() > deadline {
            let info = c.cluster.jobs.get(&more).await.expect("job");
            let events = c.cluster.jobs.task_events(&more, 0).await.expect("events");
            panic!(
                "the third task does not run once the other pod went: host {:?}, foreign {:?}, task {:?}, events \
                 {events:?}",
                c.cluster.hosts.host(&node).map(|h| (h.state, h.view.total)),
                c.provider.foreign_usage(&node),
                info.tasks.first().map(|t| (t.state, t.run, t.reason.clone(), t.message.clone()))
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(live_pods(&svc).len() + live_pods(&more).len(), 3);
}
