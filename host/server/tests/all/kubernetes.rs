//! The whole pipeline over the `kubernetes` provider, against a real
//! control plane (etcd, kube-apiserver, kube-controller-manager, kwok from
//! `deploy/kubernetes/kubernetes.sh`): job manager, resource manager,
//! placement (Wasm policies) and host manager joined by `paceline_server::cluster`,
//! with Paceline acting as the ServiceAccount `paceline-system/paceline`
//! (`PACELINE_KUBECONFIG`, what `manifests/rbac.yaml` grants), never as an
//! admin. The admin kubeconfig plays everyone else: it makes kwok nodes,
//! deletes nodes and pods, and binds pods of another scheduler.
//!
//! The plane comes from `PACELINE_KUBECONFIG` / `PACELINE_KUBECONFIG_ADMIN`
//! (what `kubernetes.sh env` prints, as `scripts/test` exports them) or,
//! when they are unset, from `kubernetes.sh start` in `KUBERNETES_DIR`
//! (default /tmp/paceline-kubernetes), which builds the binaries on a
//! machine's first run (~15 min). kwok nodes "run" pods: a pod becomes
//! Running at once, and ends with the code its annotation
//! `paceline.io/kwok-exit-code` names (a task label: labels become pod
//! annotations) after `paceline.io/kwok-run-for`.
//!
//! Each test has nodes of its own (prefix `kt-<test>-`, label
//! `paceline-test=<test>`, the provider's node selector) and job ids of its
//! own, so tests run in parallel and again on the same plane.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use paceline_hostmgr::ManagerConfig;
use paceline_kubernetes::{KubernetesConfig, KubernetesProvider};
use paceline_model::Resources;
use paceline_model::job::{JobConfig, JobKind, JobState};
use paceline_model::task::{TaskSpec, TaskState};
use paceline_server::cluster::Cluster;
use paceline_storage::Store;
use paceline_storage::sqlite::SqliteStore;

use crate::provider_cluster;

/// Cluster ids, cordons and pod limits (issue 45's second round).
mod nodes_and_clusters;
/// The pod scheduler: pods Paceline did not create (issue 46, decision 0055).
mod pods;

struct Plane {
    dir: PathBuf,
    kubeconfig: PathBuf,
    admin: PathBuf,
    /// The kubectl the script uses (PATH's, or one it built when PATH has
    /// none recent enough).
    kubectl: PathBuf,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/kubernetes.sh")
}

/// The control plane: from the environment, or started here.
fn plane() -> &'static Plane {
    static PLANE: OnceLock<Plane> = OnceLock::new();
    PLANE.get_or_init(|| {
        let dir = PathBuf::from(std::env::var("KUBERNETES_DIR").unwrap_or_else(|_| "/tmp/paceline-kubernetes".into()));
        let (kubeconfig, admin, kubectl) =
            match (std::env::var_os("PACELINE_KUBECONFIG"), std::env::var_os("PACELINE_KUBECONFIG_ADMIN")) {
                (Some(k), Some(a)) => (
                    PathBuf::from(k),
                    PathBuf::from(a),
                    PathBuf::from(std::env::var_os("PACELINE_KUBECTL").unwrap_or_else(|| "kubectl".into())),
                ),
                _ => {
                    let status =
                        Command::new("bash").arg(script()).arg("start").arg(&dir).status().expect("kubernetes.sh");
                    assert!(status.success(), "deploy/kubernetes/kubernetes.sh start {} failed", dir.display());
                    let out =
                        Command::new("bash").arg(script()).arg("env").arg(&dir).output().expect("kubernetes.sh env");
                    let text = String::from_utf8_lossy(&out.stdout).into_owned();
                    let var = |name: &str| -> PathBuf {
                        paceline_kubernetes::plane::env_value(&text, name)
                            .map(PathBuf::from)
                            .unwrap_or_else(|| panic!("kubernetes.sh env printed no {name}: {text}"))
                    };
                    (var("PACELINE_KUBECONFIG"), var("PACELINE_KUBECONFIG_ADMIN"), var("PACELINE_KUBECTL"))
                }
            };
        // The plane's directory holds what `nodes` needs; with the variables
        // set, it is the admin kubeconfig's.
        let dir = if std::env::var_os("KUBERNETES_DIR").is_some() {
            dir
        } else {
            admin.parent().map_or(dir, Path::to_path_buf)
        };
        Plane { dir, kubeconfig, admin, kubectl }
    })
}

/// `kubectl` as the admin; stdout, or a panic naming what failed.
fn kubectl(args: &[&str]) -> String {
    kubectl_stdin(args, None)
}

fn kubectl_stdin(args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut cmd = Command::new(&plane().kubectl);
    cmd.arg("--kubeconfig").arg(&plane().admin).args(args);
    cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl (PACELINE_KUBECTL, or PATH's)");
    if let Some(mut pipe) = child.stdin.take()
        && let Some(s) = stdin
    {
        pipe.write_all(s.as_bytes()).expect("kubectl stdin");
    }
    let out = child.wait_with_output().expect("kubectl");
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Creates (or resets) `n` kwok nodes `kt-<test>-0…` labelled for this test.
fn nodes(test: &str, n: usize, cpu: u32) -> Vec<String> {
    nodes_with(test, n, cpu, &[])
}

/// [`nodes`], with more options of `kubernetes.sh nodes` (`--pods 2`).
fn nodes_with(test: &str, n: usize, cpu: u32, extra: &[&str]) -> Vec<String> {
    let prefix = format!("kt-{test}-");
    let status = Command::new("bash")
        .arg(script())
        .args(["nodes", &n.to_string()])
        .arg(&plane().dir)
        .args(["--prefix", &prefix, "--cpu", &cpu.to_string(), "--memory", "8Gi"])
        .args(extra)
        .arg("--labels")
        .arg(format!("paceline-test={test}"))
        .status()
        .expect("kubernetes.sh nodes");
    assert!(status.success(), "kubernetes.sh nodes failed");
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    // Pods an earlier run left there (Paceline's, or bound by its pod
    // scheduler in any namespace) would hold capacity until the manager kills them.
    for name in &names {
        kubectl(&["delete", "pods", "-A", "--field-selector", &format!("spec.nodeName={name}"), "--wait=false"]);
        // A node an earlier run cordoned.
        kubectl(&["uncordon", name]);
    }
    names
}

fn unique(name: &str) -> String {
    format!("{name}{:06x}", fastrand_u32() & 0xff_ffff)
}

fn fastrand_u32() -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    t ^ std::process::id().rotate_left(16)
}

struct KubeCluster {
    cluster: Arc<Cluster>,
    provider: KubernetesProvider,
    loops: tokio::task::JoinHandle<()>,
    nodes: Vec<String>,
    /// Leave the pods when dropped (Paceline "killed", Kubernetes carries on).
    keep_pods: std::sync::atomic::AtomicBool,
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        self.loops.abort();
        self.provider.shutdown();
        if self.keep_pods.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        // Best effort: what this test ran goes (kwok removes deleted pods at once).
        for n in &self.nodes {
            let _ = Command::new(&plane().kubectl)
                .arg("--kubeconfig")
                .arg(&plane().admin)
                .args(["delete", "pods", "-n", "paceline-tasks", "--wait=false", "--field-selector"])
                .arg(format!("spec.nodeName={n}"))
                .output();
        }
    }
}

/// A cluster of this test's own (cluster id `kt-<test>`, so that tests
/// running at once on the plane's one namespace do not take each other's
/// pods for theirs), over its nodes.
async fn start(dir: &Path, test: &str, nodes: Vec<String>) -> KubeCluster {
    start_as(dir, test, nodes, &format!("kt-{test}")).await
}

/// [`start`] as the Paceline cluster `cluster_id`.
async fn start_as(dir: &Path, test: &str, nodes: Vec<String>, cluster_id: &str) -> KubeCluster {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.join("paceline.sqlite")).expect("sqlite"));
    let provider = connect(test, cluster_id).await;
    let (cluster, loops) = provider_cluster::assemble(Arc::new(provider.clone()), store, manager_config()).await;
    KubeCluster::registered(cluster, provider, loops, nodes).await
}

/// The provider of test `test`'s nodes (its node selector) as Paceline
/// cluster `cluster_id`, connected as the paceline ServiceAccount, with
/// short heartbeats and redeliveries.
async fn connect(test: &str, cluster_id: &str) -> KubernetesProvider {
    KubernetesProvider::connect(KubernetesConfig {
        kubeconfig: Some(plane().kubeconfig.clone()),
        cluster_id: cluster_id.to_string(),
        node_selector: Some(format!("paceline-test={test}")),
        heartbeat_interval: Duration::from_millis(500),
        redeliver_after: Duration::from_secs(2),
        keep_finished_pods: Duration::from_secs(60),
        ..KubernetesConfig::default()
    })
    .await
    .expect("the provider connects as the paceline ServiceAccount")
}

/// The host manager's settings of these tests: a lost host within 5 s.
fn manager_config() -> ManagerConfig {
    ManagerConfig {
        heartbeat_timeout_ms: 5_000,
        auto_down_when_drained: false,
        tick_interval: Some(Duration::from_millis(100)),
        ..ManagerConfig::default()
    }
}

impl KubeCluster {
    /// The cluster, once every one of `nodes` is a reachable host.
    async fn registered(
        cluster: Arc<Cluster>,
        provider: KubernetesProvider,
        loops: tokio::task::JoinHandle<()>,
        nodes: Vec<String>,
    ) -> KubeCluster {
        let c = KubeCluster { cluster, provider, loops, nodes, keep_pods: Default::default() };
        c.wait("the nodes registered", 60, async |c| {
            c.nodes.iter().all(|n| c.cluster.hosts.host(n).is_some_and(|h| h.reachable))
        })
        .await;
        c
    }

    async fn wait(&self, what: &str, secs: u64, mut f: impl AsyncFnMut(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !f(self).await {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn state(&self, job: &str) -> JobState {
        self.cluster.jobs.get(job).await.expect("job").runtime.state
    }

    async fn running_by_host(&self, job: &str) -> BTreeMap<String, usize> {
        let info = self.cluster.jobs.get(job).await.expect("job");
        info.tasks.iter().filter(|t| t.state == TaskState::Running).filter_map(|t| t.host.clone()).fold(
            BTreeMap::new(),
            |mut m, h| {
                *m.entry(h).or_default() += 1;
                m
            },
        )
    }
}

/// The nodes the job's pods are bound to (`spec.nodeName`), one per pod.
fn pod_nodes(job: &str) -> Vec<String> {
    let out = kubectl(&[
        "get",
        "pods",
        "-n",
        "paceline-tasks",
        "-l",
        &format!("paceline.io/job-id={job}"),
        "-o",
        "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}",
    ]);
    out.lines().map(str::to_owned).filter(|l| !l.is_empty()).collect()
}

fn job(kind: JobKind, n: u32, cpu_millis: u64, labels: &[(&str, &str)]) -> JobConfig {
    JobConfig {
        name: "job".into(),
        owner: "team".into(),
        pool: "/team".into(),
        kind,
        instance_count: n,
        default_task: TaskSpec {
            command: "sh".into(),
            args: vec!["-c".into(), "echo hello".into()],
            resources: Resources::new(cpu_millis, 256, 10, 0),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            kill_grace_period_secs: 0,
            ..TaskSpec::default()
        },
        ..JobConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_a_batch_job_runs_to_its_end_on_kwok_nodes() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("batch", 2, 4);
    let c = start(dir.path(), "batch", names.clone()).await;
    let ok = unique("kbatch");
    let spec = job(JobKind::Batch, 4, 500, &[("paceline.io/kwok-exit-code", "0"), ("paceline.io/kwok-run-for", "1s")]);
    c.cluster.jobs.create(&ok, spec).await.expect("create");
    let failing = unique("kfail");
    let spec = job(JobKind::Batch, 1, 500, &[("paceline.io/kwok-exit-code", "3")]);
    c.cluster.jobs.create(&failing, spec).await.expect("create");
    c.wait("the jobs ended", 90, async |c| c.state(&ok).await.is_terminal() && c.state(&failing).await.is_terminal())
        .await;
    let info = c.cluster.jobs.get(&ok).await.expect("job");
    assert_eq!(info.runtime.state, JobState::Succeeded, "{:?}", info.tasks);
    assert!(info.tasks.iter().all(|t| t.state == TaskState::Succeeded && t.run == 1), "{:?}", info.tasks);
    assert!(info.tasks.iter().all(|t| t.host.as_ref().is_some_and(|h| names.contains(h))), "{:?}", info.tasks);
    // Each run was one pod, bound to the node its task ran on.
    let bound = pod_nodes(&ok);
    assert_eq!(bound.len(), 4, "{bound:?}");
    assert!(bound.iter().all(|n| names.contains(n)), "{bound:?}");
    let failed = c.cluster.jobs.get(&failing).await.expect("job");
    assert_eq!(failed.runtime.state, JobState::Failed, "{:?}", failed.tasks);
    let events = c.cluster.jobs.task_events(&failing, 0).await.expect("events");
    assert!(events.iter().any(|e| e.to == TaskState::Failed), "{events:?}");
    assert_eq!(c.provider.foreign_usage(&names[0]), Resources::ZERO, "Paceline's pods are not counted as others'");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_a_deleted_node_loses_its_runs_and_they_are_placed_again() {
    let dir = tempfile::tempdir().expect("dir");
    // One task per node: 1 CPU each.
    let names = nodes("lost", 3, 1);
    let c = start(dir.path(), "lost", names.clone()).await;
    let svc = unique("ksvc");
    c.cluster.jobs.create(&svc, job(JobKind::Stateless, 2, 1000, &[])).await.expect("create");
    c.wait("2 running", 60, async |c| c.running_by_host(&svc).await.values().sum::<usize>() == 2).await;
    let bound = pod_nodes(&svc);
    assert_eq!(bound.len(), 2, "a stateless task is a pod bound to its node: {bound:?}");
    let before = c.running_by_host(&svc).await;
    let victim = before.keys().next().cloned().expect("a node");
    kubectl(&["delete", "node", &victim, "--wait=false"]);
    c.wait("placed again off the deleted node", 60, async |c| {
        let m = c.running_by_host(&svc).await;
        m.values().sum::<usize>() == 2 && !m.contains_key(&victim)
    })
    .await;
    let info = c.cluster.jobs.get(&svc).await.expect("job");
    let moved = info.tasks.iter().position(|t| t.run > 1).expect("a task ran again");
    let events = c.cluster.jobs.task_events(&svc, moved as u32).await.expect("events");
    assert!(events.iter().any(|e| e.to == TaskState::Lost), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_a_pod_deleted_by_someone_else_is_reported_lost_and_replaced() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("podgone", 1, 4);
    let c = start(dir.path(), "podgone", names.clone()).await;
    let svc = unique("kgone");
    c.cluster.jobs.create(&svc, job(JobKind::Stateless, 1, 500, &[])).await.expect("create");
    c.wait("running", 60, async |c| c.running_by_host(&svc).await.values().sum::<usize>() == 1).await;
    kubectl(&["delete", "pods", "-n", "paceline-tasks", "-l", &format!("paceline.io/job-id={svc}")]);
    c.wait("run 2 running", 60, async |c| {
        let info = c.cluster.jobs.get(&svc).await.expect("job");
        info.tasks.iter().any(|t| t.run >= 2 && t.state == TaskState::Running)
    })
    .await;
    let events = c.cluster.jobs.task_events(&svc, 0).await.expect("events");
    let lost = events.iter().find(|e| e.to == TaskState::Lost).expect("a LOST event");
    assert!(lost.reason.contains("POD_DELETED") || lost.message.contains("deleted outside Paceline"), "{lost:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_pods_of_another_scheduler_reduce_what_paceline_offers() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("shared", 1, 4);
    let node = names[0].clone();
    let other = "kt-shared-other";
    kubectl(&["delete", "pod", other, "-n", "default", "--ignore-not-found"]);
    let c = start(dir.path(), "shared", names.clone()).await;
    assert_eq!(c.cluster.hosts.host(&node).expect("host").view.total.cpu_millis, 4000);
    // Another scheduler's pod bound to the node (as kube-scheduler would bind it).
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {other}, namespace: default}}\nspec:\n  nodeName: {node}\n  \
         automountServiceAccountToken: false\n  containers:\n  - name: c\n    image: busybox\n    resources:\n      \
         requests: {{cpu: '3', memory: 1Gi}}\n"
    );
    kubectl_stdin(&["apply", "-f", "-"], Some(&manifest));
    c.wait("the host offers what the other pod leaves", 30, async |c| {
        c.cluster.hosts.host(&node).is_some_and(|h| h.view.total.cpu_millis == 1000)
    })
    .await;
    let svc = unique("kshare");
    c.cluster.jobs.create(&svc, job(JobKind::Stateless, 2, 1000, &[])).await.expect("create");
    c.wait("1 running", 60, async |c| c.running_by_host(&svc).await.values().sum::<usize>() == 1).await;
    // Never more: the node has 1 CPU Paceline may use.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(c.running_by_host(&svc).await.values().sum::<usize>(), 1);
    kubectl(&["delete", "pod", other, "-n", "default"]);
    c.wait("both running once the other pod went", 60, async |c| {
        c.running_by_host(&svc).await.values().sum::<usize>() == 2
    })
    .await;
    assert_eq!(c.cluster.hosts.host(&node).expect("host").view.total.cpu_millis, 4000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_the_server_config_selects_the_provider() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("server", 1, 2);
    let yaml = format!(
        "data_dir: {}\napi_listen: 127.0.0.1:0\nagent_listen: 127.0.0.1:0\nhosts:\n  provider: kubernetes\n  \
         kubeconfig: {}\n  node_selector: paceline-test=server\n",
        dir.path().display(),
        plane().kubeconfig.display()
    );
    let config: paceline_server::ServerConfig = serde_yaml::from_str(&yaml).expect("config");
    assert!(matches!(
        &config.hosts,
        paceline_server::HostsConfig::Kubernetes { namespace, default_image, .. }
            if namespace == "paceline-tasks" && default_image.starts_with("busybox")
    ));
    let server = paceline_server::Server::start(config).await.expect("server");
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.cluster.hosts.host(&names[0]).is_none_or(|h| !h.reachable) {
        assert!(Instant::now() < deadline, "{} registered through the server's kubernetes provider", names[0]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.cluster.hosts.provider_name(), "kubernetes");
    server.shutdown().await;

    // A kubeconfig that does not exist stops the start, naming it.
    let yaml = format!(
        "data_dir: {}\napi_listen: 127.0.0.1:0\nagent_listen: 127.0.0.1:0\nhosts:\n  provider: kubernetes\n  \
         kubeconfig: /nonexistent/kubeconfig\n",
        dir.path().join("b").display()
    );
    let config: paceline_server::ServerConfig = serde_yaml::from_str(&yaml).expect("config");
    let err = paceline_server::Server::start(config).await.expect_err("no kubeconfig");
    assert!(err.to_string().contains("/nonexistent/kubeconfig"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_a_restarted_paceline_launches_nothing_twice_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("restart", 2, 4);
    let c = start(dir.path(), "restart", names.clone()).await;
    let svc = unique("krsvc");
    c.cluster.jobs.create(&svc, job(JobKind::Stateless, 3, 500, &[])).await.expect("create");
    let batch = unique("krbat");
    let spec = job(JobKind::Batch, 2, 500, &[("paceline.io/kwok-exit-code", "0"), ("paceline.io/kwok-run-for", "6s")]);
    c.cluster.jobs.create(&batch, spec).await.expect("create");
    c.wait("all running", 60, async |c| {
        c.running_by_host(&svc).await.values().sum::<usize>() == 3
            && c.running_by_host(&batch).await.values().sum::<usize>() == 2
    })
    .await;
    let pods = |job: &str| {
        let out =
            kubectl(&["get", "pods", "-n", "paceline-tasks", "-l", &format!("paceline.io/job-id={job}"), "-o", "name"]);
        let mut v: Vec<String> = out.lines().map(str::to_owned).collect();
        v.sort();
        v
    };
    let before = pods(&svc);
    assert_eq!(before.len(), 3, "{before:?}");
    // Paceline goes away at once (as SIGKILL would leave it): nothing is
    // stopped in Kubernetes; the batch pods finish while it is away.
    let nodes = c.nodes.clone();
    c.keep_pods.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(c);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let c = start(dir.path(), "restart", nodes).await;
    c.wait("the batch job ended", 60, async |c| c.state(&batch).await.is_terminal()).await;
    let b = c.cluster.jobs.get(&batch).await.expect("job");
    assert_eq!(b.runtime.state, JobState::Succeeded, "{:?}", b.tasks);
    assert!(b.tasks.iter().all(|t| t.run == 1), "finished once, not again: {:?}", b.tasks);
    c.wait("the service runs", 30, async |c| c.running_by_host(&svc).await.values().sum::<usize>() == 3).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = c.cluster.jobs.get(&svc).await.expect("job");
    assert!(s.tasks.iter().all(|t| t.run == 1 && t.state == TaskState::Running), "{:?}", s.tasks);
    assert_eq!(pods(&svc), before, "the same pods, none created again");
    assert_eq!(pods(&batch).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_a_cordoned_node_drains_and_its_tasks_move() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("cordon", 2, 1);
    let c = start(dir.path(), "cordon", names.clone()).await;
    let svc = unique("kcord");
    c.cluster.jobs.create(&svc, job(JobKind::Stateless, 1, 1000, &[])).await.expect("create");
    c.wait("running", 60, async |c| c.running_by_host(&svc).await.values().sum::<usize>() == 1).await;
    let on = c.running_by_host(&svc).await.keys().next().cloned().expect("host");
    kubectl(&["cordon", &on]);
    c.wait("moved off the cordoned node", 60, async |c| {
        let m = c.running_by_host(&svc).await;
        m.values().sum::<usize>() == 1 && !m.contains_key(&on)
    })
    .await;
    c.wait("drained", 30, async |c| {
        c.cluster.hosts.host(&on).is_some_and(|h| h.state == paceline_model::host::MaintenanceState::Drained)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_a_pods_log_is_read_through_the_api() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("logs", 1, 2);
    let c = start(dir.path(), "logs", names.clone()).await;
    let svc = unique("klog");
    c.cluster.jobs.create(&svc, job(JobKind::Stateless, 1, 500, &[])).await.expect("create");
    c.wait("running", 60, async |c| c.running_by_host(&svc).await.values().sum::<usize>() == 1).await;
    let run_id = format!("{svc}-0-1");
    let host = c.running_by_host(&svc).await.keys().next().cloned().expect("host");
    let read = c.cluster.hosts.read_log_on(&host, &run_id, paceline_hostmgr::LogStream::Stdout, 0, 4096).await;
    // kwok's nodes run no kubelet: the API server cannot reach one to read
    // the log, and the error says so (where a kubelet answers, the log comes back).
    match read {
        Ok(chunk) => assert!(chunk.data.len() as u64 <= 4096),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(&format!("log of pod paceline-tasks/{run_id}")), "{msg}");
        }
    }
    let err = c.cluster.hosts.read_log_on(&host, "nope-0-1", paceline_hostmgr::LogStream::Stdout, 0, 10).await;
    let msg = err.expect_err("a run without a pod has no log").to_string();
    assert!(msg.contains("nope-0-1"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_daemon_and_stateful_jobs_run_as_pods() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("kinds", 2, 4);
    let c = start(dir.path(), "kinds", names.clone()).await;
    let daemon = unique("kdmn");
    let mut spec = job(JobKind::Daemon, 0, 200, &[]);
    spec.update.batch_size = 0;
    c.cluster.jobs.create(&daemon, spec).await.expect("create");
    c.wait("one daemon pod per node", 60, async |c| {
        let m = c.running_by_host(&daemon).await;
        m.len() == 2 && m.values().all(|&n| n == 1)
    })
    .await;
    let mut bound = pod_nodes(&daemon);
    bound.sort();
    assert_eq!(bound, names, "one pod bound to each node");

    let db = unique("kdb");
    let mut spec = job(JobKind::Stateful, 2, 500, &[]);
    spec.default_task.volume = Some(paceline_model::task::VolumeSpec { name: "data".into(), size_mib: 10 });
    c.cluster.jobs.create(&db, spec).await.expect("create");
    c.wait("2 running", 60, async |c| c.running_by_host(&db).await.values().sum::<usize>() == 2).await;
    let before: Vec<Option<String>> =
        c.cluster.jobs.get(&db).await.expect("job").tasks.iter().map(|t| t.host.clone()).collect();
    c.cluster.jobs.restart(&db, None, 1).await.expect("restart");
    c.wait("both restarted", 90, async |c| {
        let info = c.cluster.jobs.get(&db).await.expect("job");
        info.tasks.iter().all(|t| t.run == 2 && t.state == TaskState::Running)
    })
    .await;
    let info = c.cluster.jobs.get(&db).await.expect("job");
    let after: Vec<Option<String>> = info.tasks.iter().map(|t| t.host.clone()).collect();
    assert_eq!(before, after, "a stateful instance keeps its node (and its hostPath volume)");
    let path = kubectl(&[
        "get",
        "pod",
        "-n",
        "paceline-tasks",
        &format!("{db}-0-2"),
        "-o",
        "jsonpath={.spec.volumes[0].hostPath.path}",
    ]);
    assert_eq!(path, format!("/var/lib/paceline/volumes/{db}-0/data"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_a_rolling_update_with_a_health_check_replaces_every_pod() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("update", 2, 4);
    let c = start(dir.path(), "update", names.clone()).await;
    let svc = unique("kupd");
    let mut spec = job(JobKind::Stateless, 3, 300, &[]);
    spec.default_task.ports = vec!["http".into()];
    spec.default_task.resources.ports = 1;
    spec.default_task.health_check = Some(paceline_model::task::HealthCheck {
        command: String::new(),
        args: Vec::new(),
        http: Some(paceline_model::task::HttpProbe { port: "http".into(), path: "/".into() }),
        tcp: None,
        initial_delay_secs: 0,
        interval_secs: 1,
        timeout_secs: 1,
        max_consecutive_failures: 3,
    });
    spec.sla.max_unavailable_instances = Some(1);
    spec.update.batch_size = 1;
    c.cluster.jobs.create(&svc, spec.clone()).await.expect("create");
    c.wait("3 running and healthy", 60, async |c| {
        let info = c.cluster.jobs.get(&svc).await.expect("job");
        info.tasks.iter().all(|t| t.state == TaskState::Running && t.healthy == Some(true))
    })
    .await;
    let info = c.cluster.jobs.get(&svc).await.expect("job");
    assert!(
        info.tasks.iter().all(|t| t.ports.get("http").is_some_and(|p| (31_000..=32_999).contains(p))),
        "{:?}",
        info.tasks
    );
    let mut v2 = spec;
    v2.default_task.args = vec!["-c".into(), "echo v2".into()];
    c.cluster.jobs.update(&svc, v2, paceline_jobmgr::UpdateRequest::default()).await.expect("update");
    c.wait("every instance on v2, running and healthy", 120, async |c| {
        let info = c.cluster.jobs.get(&svc).await.expect("job");
        info.tasks.iter().all(|t| t.config_version == 2 && t.state == TaskState::Running && t.healthy == Some(true))
    })
    .await;
    let args = kubectl(&[
        "get",
        "pods",
        "-n",
        "paceline-tasks",
        "-l",
        &format!("paceline.io/job-id={svc}"),
        "-o",
        "jsonpath={range .items[*]}{.spec.containers[0].args[1]}{\"\\n\"}{end}",
    ]);
    assert_eq!(args.lines().filter(|l| *l == "echo v2").count(), 3, "{args}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_an_api_server_that_refuses_stops_the_start_with_a_clear_message() {
    // The admin kubeconfig's server with a token the API server does not know.
    let admin = std::fs::read_to_string(&plane().admin).expect("admin kubeconfig");
    let server = admin.lines().find_map(|l| l.trim().strip_prefix("server: ")).expect("a server line").to_string();
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("bad.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server}\", insecure-skip-tls-verify: true}}\n\
             users:\n- name: u\n  user: {{token: not-a-token}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
             current-context: x\n"
        ),
    )
    .expect("write");
    let err = KubernetesProvider::connect(KubernetesConfig { kubeconfig: Some(path), ..KubernetesConfig::default() })
        .await
        .expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("list pods in namespace paceline-tasks") && msg.contains("401"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_a_gang_runs_with_its_peers_and_the_ports_the_job_manager_chose() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("gang", 2, 4);
    let c = start(dir.path(), "gang", names.clone()).await;
    let gang = unique("kgang");
    let mut spec =
        job(JobKind::Batch, 3, 500, &[("paceline.io/kwok-exit-code", "0"), ("paceline.io/kwok-run-for", "3s")]);
    spec.sla.min_running_instances = Some(3);
    spec.gang.discovery = paceline_model::gang::GangDiscovery::Pytorch;
    spec.default_task.ports = vec!["coord".into()];
    spec.default_task.resources.ports = 1;
    c.cluster.jobs.create(&gang, spec).await.expect("create");
    c.wait("the gang runs", 60, async |c| c.running_by_host(&gang).await.values().sum::<usize>() == 3).await;
    let info = c.cluster.jobs.get(&gang).await.expect("job");
    let pod = format!("{gang}-0-1");
    let ann = kubectl(&[
        "get",
        "pod",
        "-n",
        "paceline-tasks",
        &pod,
        "-o",
        "jsonpath={.metadata.annotations.paceline\\.io/gang-peers}",
    ]);
    let peers: serde_json::Value = serde_json::from_str(&ann).expect("the peers file, as JSON");
    assert_eq!(peers.as_array().map(Vec::len), Some(3), "{peers}");
    let env = kubectl(&[
        "get",
        "pod",
        "-n",
        "paceline-tasks",
        &pod,
        "-o",
        "jsonpath={range .spec.containers[0].env[*]}{.name}={.value}{\"\\n\"}{end}",
    ]);
    assert!(env.lines().any(|l| l == "PACELINE_GANG_SIZE=3"), "{env}");
    assert!(env.lines().any(|l| l == "WORLD_SIZE=3"), "{env}");
    // The port the job manager chose is the one the pod got.
    let port = info.tasks[0].ports.get("coord").copied().expect("a coord port");
    assert!(env.lines().any(|l| l == format!("PORT_COORD={port}")), "{port}: {env}");
    c.wait("the gang ended", 60, async |c| c.state(&gang).await.is_terminal()).await;
    assert_eq!(c.state(&gang).await, JobState::Succeeded);
}

/// A rough launch rate (not a benchmark: one process, debug build, the
/// plane on the same cores): `cargo test --workspace --test all -- --ignored
/// kubernetes::kubernetes_launch_rate --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn kubernetes_launch_rate() {
    let dir = tempfile::tempdir().expect("dir");
    let names = nodes("rate", 20, 32);
    let c = start(dir.path(), "rate", names.clone()).await;
    let n: u32 = std::env::var("KUBERNETES_RATE_TASKS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let svc = unique("krate");
    let mut spec = job(JobKind::Stateless, n, 100, &[]);
    spec.default_task.resources = Resources::new(100, 64, 10, 0);
    let t0 = Instant::now();
    c.cluster.jobs.create(&svc, spec).await.expect("create");
    c.wait("all running", 600, async |c| c.running_by_host(&svc).await.values().sum::<usize>() == n as usize).await;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "kubernetes_launch_rate: {n} tasks running on 20 kwok nodes in {secs:.1} s ({:.0} tasks/s)",
        f64::from(n) / secs
    );
    c.cluster.jobs.kill(&svc, None).await.expect("kill");
    c.wait("killed", 600, async |c| c.state(&svc).await == JobState::Killed).await;
}
