//! The pod scheduler (decision 0055) against the real control plane: pods
//! with `schedulerName: paceline` that Paceline did not create (a
//! Deployment's, bare pods, a gang) admitted in their namespace's pool,
//! bound through the Binding API, refused or kept waiting with a clear
//! `PodScheduled=False` condition and an Event, and never bound twice
//! across a restart. Each test has its nodes, its namespace (the pod
//! scheduler watches only that one) and its Paceline cluster id.

use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline_hostmgr::HostManager;
use paceline_kubernetes::{PodScheduler, PodSchedulerConfig};
use paceline_model::Resources;
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::task::TaskState;
use paceline_plugin::{MemoryStore, PluginRuntime, Registry, RuntimeConfig};
use paceline_server::cluster::{AssembleConfig, Cluster};
use paceline_server::kubernetes_pods::ClusterPodJobs;
use paceline_storage::Store;
use paceline_storage::sqlite::SqliteStore;

use super::{KubeCluster, kubectl, kubectl_stdin, nodes, unique};

/// A namespace of this test's, annotated with `pool` (none: no annotation).
fn namespace(test: &str, pool: Option<&str>) -> String {
    let ns = unique(&format!("kp-{test}-"));
    kubectl(&["create", "namespace", &ns]);
    if let Some(p) = pool {
        kubectl(&["annotate", "namespace", &ns, &format!("paceline.io/pool={p}")]);
    }
    ns
}

/// Deletes the namespace when the test ends (kwok removes its pods at once).
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = std::process::Command::new(&super::plane().kubectl)
                .arg("--kubeconfig")
                .arg(&super::plane().admin)
                .args(["delete", "namespace", ns, "--wait=false"])
                .output();
        }
    }
}

/// The cluster (as [`super::start`], with pools `/pods-a` and `/pods-b`
/// (reserving more than any test uses), `/fair-1` and `/fair-3` (no
/// reservation, shares 1 and 3), `/borrow` (no reservation) and `/reserved`
/// (4 CPU reserved) besides `/team`, made at assembly so that a restart
/// recovers jobs in them) and the pod scheduler watching `namespaces` only.
async fn start_pods(
    dir: &std::path::Path,
    test: &str,
    names: Vec<String>,
    namespaces: &[&str],
) -> (KubeCluster, PodScheduler) {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.join("paceline.sqlite")).expect("sqlite"));
    let provider = super::connect(test, &format!("kt-{test}")).await;
    let hosts = HostManager::builder(Arc::new(provider.clone()))
        .store(store.clone())
        .config(super::manager_config())
        .start()
        .await;
    let runtime = Arc::new(PluginRuntime::new(RuntimeConfig::default()).expect("runtime"));
    let registry = Arc::new(Registry::open(runtime, Arc::new(MemoryStore::default())).expect("registry"));
    let cluster = Cluster::assemble(
        store,
        registry,
        hosts.expect("hosts"),
        Arc::new(paceline_joints::SystemClock),
        AssembleConfig { install_default_plugins: true, ..AssembleConfig::default() },
        |rm| {
            rm.set_capacity(Resources::new(1_000_000, 1 << 30, 1 << 30, 0));
            let big = PerKind { cpu: 1_000_000, memory: 1 << 30, disk: 1 << 30, gpu: 0 };
            for p in ["/team", "/pods-a", "/pods-b"] {
                rm.create_pool(p, PoolSpec { reservation: big, ..PoolSpec::default() }).expect("pool");
            }
            // No reservation, shares 1 and 3: what is there is divided 1:3.
            for (p, share) in [("/fair-1", 1), ("/fair-3", 3)] {
                rm.create_pool(p, PoolSpec { share: PerKind::splat(share), ..PoolSpec::default() }).expect("pool");
            }
            // Preemption between pools: /borrow reserves nothing and may use
            // the whole cluster while no one else asks; /reserved reserves 4 CPU.
            rm.create_pool("/borrow", PoolSpec { share: PerKind::splat(1), ..PoolSpec::default() }).expect("pool");
            let four = PerKind { cpu: 4_000, memory: 8 << 10, disk: 0, gpu: 0 };
            let reserved = PoolSpec { reservation: four, share: PerKind::splat(1), ..PoolSpec::default() };
            rm.create_pool("/reserved", reserved).expect("pool");
        },
    )
    .await
    .expect("cluster");
    let loops = cluster.spawn(Duration::from_millis(50));
    let c = KubeCluster::registered(cluster, provider, loops, names).await;
    let config = PodSchedulerConfig {
        namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        report_after: Duration::from_millis(500),
        ..PodSchedulerConfig::default()
    };
    let sched = PodScheduler::start(&c.provider, config, Arc::new(ClusterPodJobs::new(&c.cluster)));
    (c, sched)
}

/// A pod of `schedulerName: paceline` asking `cpu`, with `meta` (labels,
/// annotations) and `spec` merged in.
fn pod(ns: &str, name: &str, cpu: &str, meta: serde_json::Value, spec: serde_json::Value) -> String {
    let mut m = serde_json::json!({"name": name, "namespace": ns});
    let mut s = serde_json::json!({
        "schedulerName": "paceline",
        "automountServiceAccountToken": false,
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "500Mi"}}}],
    });
    merge(&mut m, meta);
    merge(&mut s, spec);
    serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": s}).to_string()
}

/// A Deployment of `replicas` pods of `schedulerName: paceline` labelled
/// `app: <name>`, each asking `cpu` and `memory`, with `spec` merged into
/// its pod template's spec.
fn deployment(ns: &str, name: &str, replicas: u32, cpu: &str, memory: &str, spec: serde_json::Value) -> String {
    let mut s = serde_json::json!({
        "schedulerName": "paceline", "automountServiceAccountToken": false,
        "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    });
    merge(&mut s, spec);
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": s}}
    })
    .to_string()
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(a), serde_json::Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

fn apply(manifest: &str) {
    kubectl_stdin(&["apply", "-f", "-"], Some(manifest));
}

/// `spec.nodeName` of a pod ("" while pending).
fn node_of(ns: &str, name: &str) -> String {
    kubectl(&["get", "pod", "-n", ns, name, "-o", "jsonpath={.spec.nodeName}"])
}

/// Every pod of `ns`: name → (node, uid, run-id annotation).
fn pods_of(ns: &str) -> std::collections::BTreeMap<String, (String, String, String)> {
    let out = kubectl(&[
        "get",
        "pods",
        "-n",
        ns,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.spec.nodeName} \
         {.metadata.annotations.paceline\\.io/run-id}{\"\\n\"}{end}",
    ]);
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some((f.first()?.to_string(), (f.get(2)?.to_string(), f.get(1)?.to_string(), f.get(3)?.to_string())))
        })
        .collect()
}

/// The message of the pod's `PodScheduled` condition when it is False.
fn condition(ns: &str, name: &str) -> String {
    kubectl(&[
        "get",
        "pod",
        "-n",
        ns,
        name,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].status} \
         {.status.conditions[?(@.type==\"PodScheduled\")].reason}: \
         {.status.conditions[?(@.type==\"PodScheduled\")].message}",
    ])
}

async fn until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_podsched_a_deployments_pods_are_bound_in_their_namespaces_pool() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("kpdeploy", 2, 4);
    let ns = namespace("deploy", Some("/pods-a"));
    let _cleanup = Cleanup(vec![ns.clone()]);
    let (c, _sched) = start_pods(dir.path(), "kpdeploy", names.clone(), &[&ns]).await;
    apply(&deployment(
        &ns,
        "web",
        3,
        "500m",
        "500Mi",
        serde_json::json!({"nodeSelector": {"paceline-test": "kpdeploy"}}),
    ));
    // A bare pod whose own annotation overrides its namespace's pool.
    apply(&pod(&ns, "own-pool", "500m", serde_json::json!({"annotations": {"paceline.io/pool": "/pods-b"}}), {
        serde_json::json!({})
    }));
    until("the 4 pods bound", 90, || {
        let p = pods_of(&ns);
        p.len() == 4 && p.values().all(|(node, _, _)| !node.is_empty())
    })
    .await;
    let pods = pods_of(&ns);
    for (name, (node, uid, run)) in &pods {
        assert!(names.contains(node), "{name} on {node}");
        assert!(run.starts_with(&format!("k8spod-{uid}-")), "{name}: run id {run}");
        let job = c.cluster.jobs.get(&format!("k8spod-{uid}")).await.expect("its job");
        let pool = if name == "own-pool" { "/pods-b" } else { "/pods-a" };
        assert_eq!(job.config.pool, pool, "{name}");
    }
    c.wait("the tasks running", 30, async |c| {
        let mut all = true;
        for (_, uid, _) in pods_of(&ns).values() {
            let job = c.cluster.jobs.get(&format!("k8spod-{uid}")).await.expect("job");
            all &= job.tasks.iter().all(|t| t.state == TaskState::Running);
        }
        all
    })
    .await;
    // Accounted for once: as the host manager's runs, not as others' pods.
    for n in &names {
        assert_eq!(c.provider.foreign_usage(n).cpu_millis, 0, "{n}");
    }
    let held: u64 = names.iter().map(|n| c.cluster.hosts.host(n).expect("host").view.total.cpu_millis).sum();
    assert_eq!(held, 8000, "the nodes offer their whole allocatable; Paceline's runs hold 2 CPU of it");
    // A pod deleted by its owner (scale down) ends its run; nothing is recreated by Paceline.
    kubectl(&["scale", "deployment", "web", "-n", &ns, "--replicas=1"]);
    until("2 pods left", 60, || pods_of(&ns).len() == 2).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(pods_of(&ns).len(), 2, "Paceline recreates nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_podsched_a_gang_of_4_is_bound_all_or_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    // 2 nodes of 2 CPU: a gang of four 1-CPU pods fills them.
    let names = nodes("kpgang", 2, 2);
    let ns = namespace("gang", Some("/pods-a"));
    let _cleanup = Cleanup(vec![ns.clone()]);
    let (c, _sched) = start_pods(dir.path(), "kpgang", names.clone(), &[&ns]).await;
    let member = |name: &str, group: &str, cpu: &str, pool: &str| {
        pod(
            &ns,
            name,
            cpu,
            serde_json::json!({"labels": {"scheduling.x-k8s.io/pod-group": group},
                "annotations": {"paceline.io/min-member": "4", "paceline.io/pool": pool}}),
            serde_json::json!({}),
        )
    };
    for i in 0..3 {
        apply(&member(&format!("g-{i}"), "g", "1", "/pods-a"));
    }
    until("the incomplete gang says it waits", 30, || condition(&ns, "g-0").contains("waiting for its gang: 3 of 4"))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(pods_of(&ns).values().all(|(node, _, _)| node.is_empty()), "none bound: {:?}", pods_of(&ns));
    apply(&member("g-3", "g", "1", "/pods-a"));
    until("the whole gang bound", 60, || (0..4).all(|i| !node_of(&ns, &format!("g-{i}")).is_empty())).await;
    let mut per_node = std::collections::BTreeMap::new();
    for (n, (node, _, _)) in pods_of(&ns) {
        if n.starts_with("g-") {
            *per_node.entry(node).or_insert(0) += 1;
        }
    }
    assert_eq!(per_node.values().copied().collect::<Vec<_>>(), vec![2, 2], "{per_node:?}");
    // A second gang (another pool) while the nodes are full: not one of it is bound.
    for i in 0..4 {
        apply(&member(&format!("h-{i}"), "h", "500m", "/pods-b"));
    }
    until("the second gang says why it waits", 60, || {
        condition(&ns, "h-0").starts_with("False Unschedulable: paceline:")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bound: Vec<String> = pods_of(&ns)
        .into_iter()
        .filter(|(n, (node, _, _))| n.starts_with("h-") && !node.is_empty())
        .map(|p| p.0)
        .collect();
    assert!(bound.is_empty(), "no member of a gang that does not fit is bound: {bound:?}");
    // One member of the first gang goes: the second gang still does not fit in what it leaves (1 CPU for 2).
    kubectl(&["delete", "pod", "-n", &ns, "g-0"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let bound: Vec<String> = pods_of(&ns)
        .into_iter()
        .filter(|(n, (node, _, _))| n.starts_with("h-") && !node.is_empty())
        .map(|p| p.0)
        .collect();
    assert!(bound.is_empty(), "still none: {bound:?}");
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_podsched_bad_input_and_unfit_pods_get_a_clear_condition() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("kpbad", 1, 4);
    let ns = namespace("bad", Some("/pods-a"));
    let bare = namespace("bare", None);
    let _cleanup = Cleanup(vec![ns.clone(), bare.clone()]);
    let (c, _sched) = start_pods(dir.path(), "kpbad", names.clone(), &[&ns, &bare]).await;
    let none = serde_json::json!({});
    apply(&pod(
        &ns,
        "unknown-pool",
        "100m",
        serde_json::json!({"annotations": {"paceline.io/pool": "/nope"}}),
        none.clone(),
    ));
    apply(&pod(
        &ns,
        "bad-gang",
        "100m",
        serde_json::json!({"labels": {"scheduling.x-k8s.io/pod-group": "g"}, "annotations": {"paceline.io/min-member": "four"}}),
        none.clone(),
    ));
    apply(&pod(
        &ns,
        "anti",
        "100m",
        none.clone(),
        serde_json::json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}}),
    ));
    // In a pool of its own: a pod bigger than the whole cluster blocks its
    // pool's queue (the resource manager's head-of-line rule), saying so.
    apply(&pod(
        &ns,
        "too-big",
        "64",
        serde_json::json!({"annotations": {"paceline.io/pool": "/pods-b"}}),
        none.clone(),
    ));
    apply(&pod(&ns, "fine", "100m", none.clone(), none.clone()));
    apply(&pod(&bare, "no-pool", "100m", none.clone(), none.clone()));
    until("the good pod bound", 60, || names.contains(&node_of(&ns, "fine"))).await;
    until("the conditions", 60, || {
        condition(&ns, "unknown-pool").contains("/nope")
            && condition(&ns, "bad-gang").contains("malformed gang")
            && condition(&ns, "anti").contains("inter-pod affinity")
            && condition(&ns, "too-big").starts_with("False Unschedulable: paceline:")
            && condition(&bare, "no-pool").contains("no pool")
    })
    .await;
    for p in ["unknown-pool", "bad-gang", "anti"] {
        assert!(condition(&ns, p).starts_with("False SchedulerError: paceline:"), "{p}: {}", condition(&ns, p));
        assert_eq!(node_of(&ns, p), "", "{p} is not bound");
    }
    let why = condition(&ns, "too-big");
    assert!(why.contains("cpu"), "the why-pending names what is short: {why}");
    let events = kubectl(&[
        "get",
        "events",
        "-n",
        &ns,
        "--field-selector",
        "involvedObject.name=too-big,reason=FailedScheduling",
        "-o",
        "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
    ]);
    assert_eq!(events.lines().count(), 1, "one Event (rate-limited): {events}");
    assert!(events.contains("paceline:"), "{events}");
    // A namespace without a pool annotation, and no default pool: refused, saying how to name one.
    let why = condition(&bare, "no-pool");
    assert!(why.starts_with("False SchedulerError: paceline: no pool") && why.contains("paceline.io/pool"), "{why}");
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_podsched_a_restarted_paceline_binds_nothing_twice() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("kprestart", 2, 4);
    let ns = namespace("restart", Some("/pods-a"));
    let _cleanup = Cleanup(vec![ns.clone()]);
    let none = serde_json::json!({});
    let before = {
        let (c, sched) = start_pods(dir.path(), "kprestart", names.clone(), &[&ns]).await;
        for i in 0..3 {
            apply(&pod(&ns, &format!("a-{i}"), "500m", none.clone(), none.clone()));
        }
        until("3 bound", 60, || pods_of(&ns).values().filter(|p| !p.0.is_empty()).count() == 3).await;
        drop(sched);
        c.keep_pods.store(true, std::sync::atomic::Ordering::Relaxed);
        drop(c);
        pods_of(&ns)
    };
    // Pods that come while Paceline is away wait for it.
    for i in 0..2 {
        apply(&pod(&ns, &format!("b-{i}"), "500m", none.clone(), none.clone()));
    }
    let (c, _sched) = start_pods(dir.path(), "kprestart", names.clone(), &[&ns]).await;
    until("5 bound", 60, || pods_of(&ns).values().filter(|p| !p.0.is_empty()).count() == 5).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = pods_of(&ns);
    for (name, bound) in &before {
        assert_eq!(after.get(name), Some(bound), "{name}: same node, same run (bound once)");
    }
    for (name, (_, uid, run)) in &after {
        assert_eq!(run, &format!("k8spod-{uid}-0-1"), "{name}: its first job's first run bound it");
        assert!(c.cluster.jobs.get(&format!("k8spod-{uid}-r1")).await.is_err(), "{name}: no second job");
    }
    // Each job's one task runs in its first run (recovered, not lost and run again).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut states = Vec::new();
        for (name, (_, uid, _)) in &after {
            let job = c.cluster.jobs.get(&format!("k8spod-{uid}")).await.expect("job");
            states.extend(job.tasks.iter().map(|t| (name.clone(), t.state, t.run, t.reason.clone())));
        }
        if states.iter().all(|(_, state, run, _)| *state == TaskState::Running && *run == 1) {
            break;
        }
        assert!(Instant::now() < deadline, "every pod's task running in its first run: {states:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_podsched_a_kill_evicts_through_the_eviction_api_and_a_pdb_stops_it() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("kpevict", 1, 4);
    let ns = namespace("evict", Some("/pods-a"));
    let _cleanup = Cleanup(vec![ns.clone()]);
    let (c, _sched) = start_pods(dir.path(), "kpevict", names.clone(), &[&ns]).await;
    for app in ["guarded", "free"] {
        apply(&pod(&ns, app, "500m", serde_json::json!({"labels": {"app": app}}), serde_json::json!({})));
    }
    let pdb = serde_json::json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-one", "namespace": ns},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}});
    apply(&pdb.to_string());
    until("both bound", 60, || pods_of(&ns).values().filter(|p| !p.0.is_empty()).count() == 2).await;
    // The disruption controller counts the guarded pod healthy: no disruption allowed.
    until("the budget observed", 60, || {
        kubectl(&["get", "pdb", "-n", &ns, "keep-one", "-o", "jsonpath={.status.currentHealthy}"]) == "1"
    })
    .await;
    let pods = pods_of(&ns);
    let job = |name: &str| format!("k8spod-{}", pods[name].1);
    c.wait("both running", 30, async |c| {
        let mut all = true;
        for p in ["guarded", "free"] {
            all &= c.cluster.jobs.get(&job(p)).await.expect("job").tasks.iter().all(|t| t.state == TaskState::Running);
        }
        all
    })
    .await;
    c.cluster.jobs.kill(&job("free"), None).await.expect("kill");
    until("the free pod evicted", 60, || !pods_of(&ns).contains_key("free")).await;
    c.wait("its task killed", 30, async |c| {
        c.cluster.jobs.get(&job("free")).await.expect("job").tasks.iter().all(|t| t.state == TaskState::Killed)
    })
    .await;
    c.cluster.jobs.kill(&job("guarded"), None).await.expect("kill");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(pods_of(&ns).get("guarded").map(|p| p.0.clone()), Some(names[0].clone()), "the budget kept it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_podsched_two_namespaces_share_the_cluster_by_their_pools_shares() {
    let dir = tempfile::tempdir().expect("dir");
    // 8 CPU. Pools /fair-1 and /fair-3: no reservation, shares 1 and 3,
    // each asked for 8 pods of 1 CPU. Max-min by share: 8 × 1/4 = 2 and
    // 8 × 3/4 = 6, both asking more than that, so 2 and 6 (memory: 2 and 6
    // pods of 500 MiB, within 1/4 and 3/4 of 16 GiB).
    let names = nodes("kpfair", 2, 4);
    let one = namespace("fair1", Some("/fair-1"));
    let three = namespace("fair3", Some("/fair-3"));
    let _cleanup = Cleanup(vec![one.clone(), three.clone()]);
    for ns in [&one, &three] {
        apply(&deployment(ns, "work", 8, "1", "500Mi", serde_json::json!({})));
    }
    until("16 pods pending", 60, || pods_of(&one).len() == 8 && pods_of(&three).len() == 8).await;
    // Both namespaces' pods are there before Paceline looks: neither gets a head start.
    let (_c, _sched) = start_pods(dir.path(), "kpfair", names.clone(), &[&one, &three]).await;
    let bound = |ns: &str| pods_of(ns).values().filter(|p| !p.0.is_empty()).count();
    until("2 and 6 bound", 90, || bound(&one) == 2 && bound(&three) == 6).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!((bound(&one), bound(&three)), (2, 6), "still 1:3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_podsched_a_placement_hot_swap_while_pods_are_bound_fails_none() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("kpswap", 4, 4);
    let ns = namespace("swap", Some("/pods-a"));
    let _cleanup = Cleanup(vec![ns.clone()]);
    let (c, _sched) = start_pods(dir.path(), "kpswap", names.clone(), &[&ns]).await;
    // Pods are batch jobs: the slot is placement/batch (binpack by default).
    let slot = "placement/batch";
    let registry = c.cluster.registry.clone();
    tokio::task::spawn_blocking(move || {
        let spread = paceline_plugin::builtins::by_name("spread").expect("the built-in spread policy");
        registry.deploy(slot, "spread", "1", spread.bytes, paceline_plugin::DeployOptions::default())
    })
    .await
    .expect("join")
    .expect("deploys");
    apply(&deployment(&ns, "many", 300, "50m", "100Mi", serde_json::json!({})));
    let bound = || pods_of(&ns).values().filter(|p| !p.0.is_empty()).count();
    until("the first pods bound", 60, || bound() >= 1).await;
    c.cluster.registry.activate(slot, "spread@1").expect("activates");
    let swapped_at = bound();
    until("all 300 bound", 120, || bound() == 300).await;
    assert!(swapped_at < 300, "the swap happened while pods were being bound ({swapped_at} of 300 then)");
    assert_eq!(c.cluster.registry.active(slot).expect("slot").as_deref(), Some("spread@1"));
    for (name, (_, uid, run)) in pods_of(&ns) {
        assert_eq!(run, format!("k8spod-{uid}-0-1"), "{name}: bound by its first run, none refused");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_podsched_a_preemption_between_pools_evicts_through_the_eviction_api_and_a_pdb_holds_it() {
    let dir = tempfile::tempdir().expect("dir");
    // 8 CPU. /borrow (no reservation) takes all of it with a Deployment of
    // 8 pods of 1 CPU while no one else asks. Then /reserved (4 CPU
    // reserved) asks for 2: it is entitled to them and /borrow to the other
    // 6, so 2 of /borrow's pods are preempted, by eviction. While a
    // PodDisruptionBudget allows no disruption, none goes and /reserved's
    // pods wait, saying so; once it is deleted, 2 are evicted, their
    // ReplicaSet replaces them with pods that wait (over /borrow's share
    // now), and /reserved's 2 are bound.
    let names = nodes("kppreempt", 2, 4);
    let borrow = namespace("preb", Some("/borrow"));
    let reserved = namespace("prer", Some("/reserved"));
    let _cleanup = Cleanup(vec![borrow.clone(), reserved.clone()]);
    let (c, _sched) = start_pods(dir.path(), "kppreempt", names.clone(), &[&borrow, &reserved]).await;
    apply(&deployment(&borrow, "elastic", 8, "1", "500Mi", serde_json::json!({})));
    let pdb = serde_json::json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "no-disruption", "namespace": borrow},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "elastic"}}}});
    apply(&pdb.to_string());
    let bound = |ns: &str| pods_of(ns).into_iter().filter(|p| !p.1.0.is_empty()).collect::<Vec<_>>();
    until("the 8 pods of /borrow bound", 90, || bound(&borrow).len() == 8).await;
    until("the budget observed", 60, || {
        kubectl(&["get", "pdb", "-n", &borrow, "no-disruption", "-o", "jsonpath={.status.currentHealthy}"]) == "8"
    })
    .await;
    let first: std::collections::BTreeMap<String, String> =
        bound(&borrow).into_iter().map(|(name, (_, uid, _))| (uid, name)).collect();
    c.wait("the 8 running", 30, async |c| {
        let mut all = true;
        for uid in first.keys() {
            all &=
                c.cluster.jobs.get(&format!("k8spod-{uid}")).await.expect("job").tasks[0].state == TaskState::Running;
        }
        all
    })
    .await;

    let none = serde_json::json!({});
    for i in 0..2 {
        apply(&pod(&reserved, &format!("r-{i}"), "1", none.clone(), none.clone()));
    }
    // Many preemption periods (3 periods above entitlement start one): the
    // budget refuses every eviction.
    until("/reserved's pods say they wait for preemption", 60, || {
        condition(&reserved, "r-0").contains("waiting for preemption")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let held: Vec<String> = bound(&borrow).into_iter().map(|(_, (_, uid, _))| uid).collect();
    assert_eq!(held.len(), 8, "the budget holds every pod of /borrow");
    assert!(held.iter().all(|u| first.contains_key(u)), "the same 8 pods");
    assert!(bound(&reserved).is_empty(), "/reserved waits while nothing can be evicted");

    kubectl(&["delete", "pdb", "-n", &borrow, "no-disruption"]);
    until("/reserved's 2 pods bound", 90, || bound(&reserved).len() == 2).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let now = bound(&borrow);
    assert_eq!(now.len(), 6, "/borrow keeps its entitlement of 6: {now:?}");
    assert_eq!(bound(&reserved).len(), 2);
    let evicted: Vec<&String> = first.keys().filter(|u| !now.iter().any(|(_, (_, uid, _))| uid == *u)).collect();
    assert_eq!(evicted.len(), 2, "exactly the 2 preempted pods went: {evicted:?}");
    assert_eq!(pods_of(&borrow).len(), 8, "their ReplicaSet replaced them; the replacements wait");
    for uid in evicted {
        // The pod is gone and its owner replaced it: its job ends there,
        // with no second run that would try to bind a pod that is gone.
        let job = c.cluster.jobs.get(&format!("k8spod-{uid}")).await.expect("the preempted pod's job");
        let t = &job.tasks[0];
        assert_eq!(
            (t.state, t.goal, t.run, t.reason.as_str()),
            (TaskState::Killed, paceline_model::task::TaskGoal::Kill, 1, "PREEMPTED"),
            "{uid}: {t:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_podsched_a_shadow_version_compares_on_live_pod_traffic_and_lists_where_it_differs() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("kpshadow", 4, 4);
    let ns = namespace("shadow", Some("/pods-a"));
    let _cleanup = Cleanup(vec![ns.clone()]);
    let (c, _sched) = start_pods(dir.path(), "kpshadow", names.clone(), &[&ns]).await;
    // The active version is the built-in binpack; spread shadows it.
    let slot = "placement/batch";
    let active = c.cluster.registry.active(slot).expect("slot").expect("an active version");
    let registry = c.cluster.registry.clone();
    tokio::task::spawn_blocking(move || {
        let spread = paceline_plugin::builtins::by_name("spread").expect("the built-in spread policy");
        registry.deploy(slot, "spread", "1", spread.bytes, paceline_plugin::DeployOptions::default())
    })
    .await
    .expect("join")
    .expect("deploys");
    c.cluster.registry.shadow(slot, "spread@1").expect("shadows");
    let none = serde_json::json!({});
    for i in 0..12 {
        apply(&pod(&ns, &format!("s-{i}"), "100m", none.clone(), none.clone()));
    }
    until("the 12 pods bound", 90, || pods_of(&ns).values().filter(|p| !p.0.is_empty()).count() == 12).await;
    let pods = pods_of(&ns);
    // The candidate answers on a thread of its own, maybe after the binds.
    until("the shadow's rows", 60, || {
        c.cluster.registry.shadow_report(slot).ok().flatten().is_some_and(|r| !r.disagreements.is_empty())
    })
    .await;
    let report = c.cluster.registry.stop_shadow(slot).expect("slot").expect("a report");
    assert_eq!(report.candidate, "spread@1");
    assert!(report.compared >= 1 && report.candidate_faults == 0, "{report:?}");
    assert!(!report.disagreements.is_empty(), "binpack and spread differ on 4 empty nodes: {report:?}");
    for d in &report.disagreements {
        // Each row names the pod's job and instance, what the active
        // version chose (where the pod was bound) and what spread would have.
        let uid = d.task.strip_prefix("k8spod-").and_then(|t| t.strip_suffix("/0")).expect("a pod's task");
        let (name, (node, _, _)) = pods.iter().find(|(_, p)| p.1 == uid).expect("a pod of this test");
        assert_eq!(&d.active, node, "{name}: the active version's choice is where it was bound");
        assert!(names.contains(&d.shadow) && d.shadow != d.active, "{name}: {d:?}");
    }
    // The candidate's answers were never used.
    assert_eq!(c.cluster.registry.active(slot).expect("slot"), Some(active));
    for (name, (_, uid, run)) in &pods {
        assert_eq!(run, &format!("k8spod-{uid}-0-1"), "{name}: bound by its first run");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_podsched_a_pod_reported_unschedulable_that_then_only_waits_its_turn_says_so() {
    let dir = tempfile::tempdir().expect("dir");
    // One node of 4 CPU. `hog` (3 CPU) is bound; `low` (2 CPU) cannot fit
    // and is reported Unschedulable; then `high` (2 CPU, a higher priority
    // than `low`'s) comes and waits at the head of the pool's queue, so
    // `low` only waits its turn behind it: its condition stops saying
    // Unschedulable.
    let names = nodes("kpturn", 1, 4);
    let ns = namespace("turn", Some("/pods-a"));
    let _cleanup = Cleanup(vec![ns.clone()]);
    let class = serde_json::json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "paceline-test-high"}, "value": 1000});
    apply(&class.to_string());
    let (_c, _sched) = start_pods(dir.path(), "kpturn", names.clone(), &[&ns]).await;
    let none = serde_json::json!({});
    // `hog` has `high`'s priority, so that `high` does not preempt it
    // (equal priorities never preempt).
    let high = serde_json::json!({"priorityClassName": "paceline-test-high"});
    apply(&pod(&ns, "hog", "3", none.clone(), high.clone()));
    until("hog bound", 60, || !node_of(&ns, "hog").is_empty()).await;
    apply(&pod(&ns, "low", "2", none.clone(), none.clone()));
    until("low reported unschedulable", 60, || condition(&ns, "low").starts_with("False Unschedulable: paceline:"))
        .await;
    apply(&pod(&ns, "high", "2", none.clone(), high));
    let high_uid = kubectl(&["get", "pod", "-n", &ns, "high", "-o", "jsonpath={.metadata.uid}"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let last = condition(&ns, "low");
        if last.starts_with("False WaitingForTurn: paceline: queued in pool /pods-a behind job k8spod-")
            && last.contains(&high_uid)
        {
            break;
        }
        assert!(Instant::now() < deadline, "low waiting its turn behind high; its condition: {last}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // `high` itself waits for room (reported on its own schedule, maybe
    // after `low`'s rewrite).
    until("high reported unschedulable", 60, || condition(&ns, "high").starts_with("False Unschedulable: paceline:"))
        .await;
    kubectl(&["delete", "pod", "-n", &ns, "hog", "--wait=false"]);
    until("high and low bound", 60, || !node_of(&ns, "high").is_empty() && !node_of(&ns, "low").is_empty()).await;
}
