//! `paceline bench kubernetes`: binding rates on a real control plane
//! (issues 45 and 46). One plane from `deploy/kubernetes/kubernetes.sh`
//! (etcd, kube-apiserver, kube-controller-manager, kwok) with N kwok nodes
//! of Kubernetes' `SchedulingBasic` shape (4 CPU, 32 GiB, 110 pods), and P
//! pods of 100m / 500Mi, placed in turn by:
//!
//! - `limit-bind`: P pending pods of a scheduler nobody runs, then a client
//!   that POSTs each a Binding, round-robin over the nodes, no decision: what
//!   the API server allows a scheduler of pods it did not create;
//! - `limit-create`: a client creating P pods with `spec.nodeName` set,
//!   round-robin: what it allows a scheduler that creates its pods bound (as
//!   the `kubernetes` provider does);
//! - `paceline-jobs`: a real `paceline server` (its defaults, the
//!   `kubernetes` provider, API auth on) and one batch job of P instances
//!   through the gRPC API: Paceline's own pods, created bound;
//! - `paceline-pods`: P pending pods of `schedulerName: paceline`, then a
//!   real `paceline server` with the pod scheduler on (decision 0055), which
//!   admits each as a job in `/default` and binds it (the Binding API);
//! - `kube-scheduler`: P pending pods of the default scheduler, then
//!   kube-scheduler started (client QPS and burst 5000, the script's
//!   default, so its own client does not throttle it).
//!
//! Every run starts from an empty cluster (the pods before deleted with no
//! grace) on a freshly started plane (`kubernetes.sh stop` and `start`;
//! etcd keeps the nodes) and is timed the same way: a watch on the pods' namespace sees
//! each pod bound; the rate is from the first bind seen to the last. Peak
//! RSS is each process's high-water mark, reset before the run
//! (`/proc/PID/clear_refs`). Figures only, never a test.
//!
//! `--plane-cpus` with `--scheduler-cpus` pins the plane and the side under
//! test to cores of their own (`kubernetes/pin.rs`), as on separate
//! machines; by default everything shares every core.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Binding, Container, Namespace, ObjectReference, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use paceline_model::Resources;
use paceline_model::job::{JobConfig, JobKind};
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::task::TaskSpec;
use paceline_proto::v1 as pb;

mod pin;

/// The runs, in the order they run (kube-scheduler last: it is started for
/// its run and stopped after it).
const RUNS: [&str; 5] = ["limit-bind", "limit-create", "paceline-jobs", "paceline-pods", "kube-scheduler"];

/// Namespace of the bench's own pods (the limits' and kube-scheduler's).
const NAMESPACE: &str = "paceline-bench";
/// Label of the bench's nodes (the provider's node selector).
const NODE_LABEL: &str = "paceline-bench";
/// Prefix of the bench's nodes.
const NODE_PREFIX: &str = "bench-node-";

/// Arguments of `bench kubernetes`.
#[derive(Debug, Args)]
pub struct KubernetesBenchArgs {
    /// kwok nodes (4 CPU, 32 GiB, 110 pods each).
    #[arg(long, default_value_t = 500)]
    nodes: usize,
    /// Pods per run (100m CPU, 500 MiB each).
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// The control plane's directory: started there by
    /// `deploy/kubernetes/kubernetes.sh start` (reused when it runs). Not
    /// the tests' plane: its nodes would outnumber theirs.
    #[arg(long, default_value = "/tmp/paceline-bench-kubernetes")]
    dir: PathBuf,
    /// The control-plane script.
    #[arg(long, default_value = "deploy/kubernetes/kubernetes.sh")]
    script: PathBuf,
    /// Requests in flight at once from the limits' clients (creates, binds).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Runs, comma-separated, of: limit-bind, limit-create, paceline-jobs, paceline-pods, kube-scheduler.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "limit-bind,limit-create,paceline-jobs,paceline-pods,kube-scheduler"
    )]
    runs: Vec<String>,
    /// Leave the plane running at the end (default: `kubernetes.sh stop`).
    #[arg(long)]
    keep: bool,
    /// Who the limits' clients call as: `admin`, the plane's admin
    /// (`system:masters`: a client certificate, exempt from API priority and
    /// fairness), in the bench's namespace; or `paceline`, Paceline's
    /// ServiceAccount token, in Paceline's task namespace (what Paceline's
    /// own calls get: the same authentication, authorization and queueing).
    #[arg(long, value_enum, default_value_t = LimitAs::Admin)]
    limit_as: LimitAs,
    /// What limit-create's pods carry: `plain`, the `SchedulingBasic` pod
    /// (one container, requests only); or `paceline`, the pod Paceline's
    /// provider makes for a task of the same size (`pods::build_pod`: its
    /// labels, annotations, environment, requests and limits), so that the
    /// limit is for the same objects.
    #[arg(long, value_enum, default_value_t = LimitPod::Plain)]
    limit_pod: LimitPod,
    /// CPUs (a `taskset` list, e.g. `0`) for the control plane's processes,
    /// with `--scheduler-cpus` for the side under test: each on cores of its
    /// own, as on separate machines. Off by default (everything shares
    /// every core).
    #[arg(long)]
    plane_cpus: Option<String>,
    /// CPUs for the side under test: this process (the limits' clients, the
    /// Paceline server) and kube-scheduler. With `--plane-cpus`.
    #[arg(long)]
    scheduler_cpus: Option<String>,
}

/// The pods limit-create makes (`--limit-pod`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LimitPod {
    Plain,
    Paceline,
}

/// The identity of the limits' clients (`--limit-as`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LimitAs {
    Admin,
    Paceline,
}

/// Paceline's task namespace (deploy/kubernetes/manifests/rbac.yaml).
const TASK_NAMESPACE: &str = "paceline-tasks";

/// One run's figures.
struct Figures {
    /// Pods seen bound.
    bound: usize,
    /// From the first bind seen to the last.
    span: Duration,
    /// Peak RSS (MiB) of the processes that matter, by name.
    rss: Vec<(&'static str, Option<u64>)>,
    /// Anything else the run measured.
    notes: String,
}

/// Runs `bench kubernetes`.
pub fn run(args: KubernetesBenchArgs) -> anyhow::Result<ExitCode> {
    if cfg!(debug_assertions) {
        println!("(DEBUG build - figures not meaningful; use --release)");
    }
    for r in &args.runs {
        if !RUNS.contains(&r.as_str()) {
            bail!("--runs: unknown run {r:?} (known: {})", RUNS.join(", "));
        }
    }
    if args.nodes == 0 || args.pods == 0 {
        bail!("--nodes and --pods must be at least 1");
    }
    if args.pods > args.nodes * 110 || args.pods.saturating_mul(100) > args.nodes * 4_000 {
        bail!("{} pods do not fit {} nodes of 4 CPU / 110 pods", args.pods, args.nodes);
    }
    pin::check(&args)?;
    pin::this_process(&args)?;
    script(&args, &["start"])?;
    pin::plane(&args)?;
    script(&args, &["stop-scheduler"])?;
    let started = Instant::now();
    script(
        &args,
        &[
            "nodes",
            &args.nodes.to_string(),
            "--prefix",
            NODE_PREFIX,
            "--cpu",
            "4",
            "--memory",
            "32Gi",
            "--pods",
            "110",
            "--labels",
            &format!("{NODE_LABEL}=1"),
        ],
    )?;
    println!(
        "control plane: {} (kubernetes.sh start), {} kwok nodes {NODE_PREFIX}0… of 4 CPU / 32 GiB / 110 pods applied in {:.1} s",
        args.dir.display(),
        args.nodes,
        started.elapsed().as_secs_f64()
    );
    println!(
        "each run: {} pods of 100m CPU / 500 MiB from an empty cluster; rate from the first bind a watch sees to the last; limits' clients keep {} requests in flight, as {}",
        args.pods,
        args.clients,
        match args.limit_as {
            LimitAs::Admin => "the plane's admin (system:masters, exempt from priority and fairness) in paceline-bench",
            LimitAs::Paceline => "Paceline's ServiceAccount (its token, as Paceline calls) in paceline-tasks",
        }
    );
    if let Some(line) = pin::describe(&args) {
        println!("{line}");
    }
    let env = plane_env(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(bench(&args, &env));
    if !args.keep {
        let _ = script(&args, &["stop"]);
    }
    result?;
    Ok(ExitCode::SUCCESS)
}

/// The kubeconfigs `kubernetes.sh env` names.
struct PlaneEnv {
    /// Paceline's ServiceAccount (what the server uses).
    paceline: PathBuf,
    /// The admin (what the bench's own clients use).
    admin: PathBuf,
}

fn script(args: &KubernetesBenchArgs, words: &[&str]) -> anyhow::Result<String> {
    let (cmd, rest) = words.split_first().context("a script command")?;
    let out = Command::new("bash")
        .arg(&args.script)
        .arg(cmd)
        .args(if *cmd == "nodes" { &rest[..1] } else { &[][..] })
        .arg(&args.dir)
        .args(if *cmd == "nodes" { &rest[1..] } else { rest })
        .output()
        .with_context(|| format!("running {}", args.script.display()))?;
    if !out.status.success() {
        bail!(
            "{} {cmd} {}: {}",
            args.script.display(),
            args.dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn plane_env(args: &KubernetesBenchArgs) -> anyhow::Result<PlaneEnv> {
    let text = script(args, &["env"])?;
    let var = |name: &str| -> anyhow::Result<PathBuf> {
        paceline_kubernetes::plane::env_value(&text, name)
            .map(PathBuf::from)
            .with_context(|| format!("kubernetes.sh env printed no {name}"))
    };
    Ok(PlaneEnv { paceline: var("PACELINE_KUBECONFIG")?, admin: var("PACELINE_KUBECONFIG_ADMIN")? })
}

async fn client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).with_context(|| format!("{}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

async fn bench(args: &KubernetesBenchArgs, env: &PlaneEnv) -> anyhow::Result<()> {
    let admin = client(&env.admin).await?;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let ns = Namespace {
        metadata: ObjectMeta { name: Some(NAMESPACE.into()), ..ObjectMeta::default() },
        ..Namespace::default()
    };
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context("creating the bench's namespace"),
    }
    let nodes: Vec<String> = (0..args.nodes).map(|i| format!("{NODE_PREFIX}{i}")).collect();
    let mut table = Vec::new();
    let mut admin = admin;
    for (i, run) in RUNS.iter().filter(|r| args.runs.iter().any(|a| a == *r)).enumerate() {
        empty(&admin, args.clients).await?;
        if i > 0 {
            // Each run on a freshly started plane (etcd keeps the nodes):
            // a run that follows another on the same processes was up to
            // five times slower (the API server's watch cache and kwok still
            // busy with the last run's 10,000 pods and their deletions).
            let restarted = Instant::now();
            tokio::task::block_in_place(|| -> anyhow::Result<()> {
                script(args, &["stop"])?;
                script(args, &["start"])?;
                pin::plane(args)
            })?;
            admin = client(&env.admin).await?;
            println!("(plane restarted for this run in {:.1} s)", restarted.elapsed().as_secs_f64());
        }
        println!("--- {run}");
        let figures = match *run {
            "limit-bind" => limit_bind(args, &limit_client(args, env, &admin).await?, &admin, &nodes).await?,
            "limit-create" => limit_create(args, &limit_client(args, env, &admin).await?, &admin, &nodes).await?,
            "paceline-jobs" => paceline_jobs(args, env, &admin).await?,
            "paceline-pods" => paceline_pods(args, env, &admin).await?,
            _ => kube_scheduler(args, &admin).await?,
        };
        let rate = figures.bound as f64 / figures.span.as_secs_f64().max(1e-9);
        let rss = figures
            .rss
            .iter()
            .map(|(n, m)| format!("{n} {}", m.map_or("?".into(), |m| format!("{m} MiB"))))
            .collect::<Vec<_>>();
        println!(
            "{run}: {} pods bound in {:.2} s = {rate:.0} pods/s; peak RSS {}{}",
            figures.bound,
            figures.span.as_secs_f64(),
            rss.join(", "),
            if figures.notes.is_empty() { String::new() } else { format!("; {}", figures.notes) }
        );
        table.push((*run, rate));
    }
    empty(&admin, args.clients).await?;
    let of = |name: &str| table.iter().find(|(r, _)| *r == name).map(|(_, rate)| *rate);
    if let (Some(limit), Some(ours)) = (of("limit-create"), of("paceline-jobs")) {
        println!("paceline-jobs / limit-create: {:.0} %", 100.0 * ours / limit);
    }
    if let (Some(limit), Some(theirs)) = (of("limit-bind"), of("kube-scheduler")) {
        println!("kube-scheduler / limit-bind: {:.0} %", 100.0 * theirs / limit);
    }
    if let (Some(ours), Some(theirs)) = (of("paceline-jobs"), of("kube-scheduler")) {
        println!("paceline-jobs / kube-scheduler: {:.2}x", ours / theirs);
    }
    if let (Some(limit), Some(ours)) = (of("limit-bind"), of("paceline-pods")) {
        println!("paceline-pods / limit-bind: {:.0} %", 100.0 * ours / limit);
    }
    if let (Some(ours), Some(theirs)) = (of("paceline-pods"), of("kube-scheduler")) {
        println!("paceline-pods / kube-scheduler: {:.2}x", ours / theirs);
    }
    Ok(())
}

/// Deletes every pod of the bench's namespace and Paceline's task
/// namespace, no grace, `clients` at a time, and waits until none is left.
/// One DELETE per pod: a deletecollection of 10,000 pods ran for minutes on
/// the API server (one pod after another) and answered 504 meanwhile.
async fn empty(admin: &kube::Client, clients: usize) -> anyhow::Result<()> {
    let delete = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    let deadline = Instant::now() + Duration::from_secs(600);
    for namespace in [NAMESPACE, TASK_NAMESPACE] {
        let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
        loop {
            let names: Vec<String> = pods
                .list_metadata(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect();
            if names.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                bail!("{} pods still in {namespace} after 600 s of deleting", names.len());
            }
            futures::stream::iter(names)
                .map(|name| {
                    let (pods, delete) = (pods.clone(), delete.clone());
                    async move {
                        match pods.delete(&name, &delete).await {
                            Ok(_) => Ok(()),
                            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                            Err(e) => Err(e),
                        }
                    }
                })
                .buffer_unordered(clients.max(1))
                .try_collect::<Vec<()>>()
                .await
                .with_context(|| format!("deleting the pods of {namespace}"))?;
        }
    }
    Ok(())
}

/// A pod of the `SchedulingBasic` shape.
fn pod(name: String, namespace: &str, scheduler: &str, node: Option<String>) -> Pod {
    let requests = [("cpu".to_string(), Quantity("100m".into())), ("memory".to_string(), Quantity("500Mi".into()))];
    Pod {
        metadata: ObjectMeta { name: Some(name), namespace: Some(namespace.into()), ..ObjectMeta::default() },
        spec: Some(PodSpec {
            scheduler_name: Some(scheduler.into()),
            node_name: node,
            containers: vec![Container {
                name: "pause".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                resources: Some(ResourceRequirements {
                    requests: Some(requests.into_iter().collect()),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Creates `n` pods with `make(i)`, `clients` at a time.
async fn create_pods(
    api: &Api<Pod>,
    n: usize,
    clients: usize,
    make: impl Fn(usize) -> Pod,
) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    let pods: Vec<Pod> = (0..n).map(make).collect();
    futures::stream::iter(pods)
        .map(|p| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &p).await.map(|_| ()) }
        })
        .buffer_unordered(clients.max(1))
        .try_collect::<Vec<()>>()
        .await
        .context("creating pods")?;
    Ok(t0.elapsed())
}

/// Watches `namespace` until `want` pods are seen bound (or `limit`
/// passes): the time of the first bind seen and of the last.
fn watch_binds(
    admin: &kube::Client,
    namespace: &str,
    want: usize,
    limit: Duration,
) -> tokio::task::JoinHandle<anyhow::Result<(usize, Duration)>> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    tokio::spawn(async move {
        let mut seen = HashSet::with_capacity(want);
        let mut first = None;
        let mut last = Instant::now();
        let stream = watcher(pods, watcher::Config::default()).applied_objects();
        let mut stream = std::pin::pin!(stream);
        let deadline = tokio::time::Instant::now() + limit;
        while seen.len() < want {
            let next = tokio::time::timeout_at(deadline, stream.next()).await;
            let Ok(Some(pod)) = next else { break };
            let pod = pod.context("watching pods")?;
            let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
            if bound
                && let Some(name) = pod.metadata.name
                && seen.insert(name)
            {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
            }
        }
        Ok((seen.len(), first.map_or(Duration::ZERO, |f| last.duration_since(f))))
    })
}

/// The pod Paceline's provider makes for instance `i` of a batch job of
/// 100m / 500 MiB tasks (what paceline-jobs submits), bound to `node`: the
/// provider's own `build_pod`, with the environment the job manager adds.
fn paceline_shaped_pod(i: usize, namespace: &str, node: &str) -> anyhow::Result<Pod> {
    let config = paceline_kubernetes::KubernetesConfig {
        namespace: namespace.into(),
        cluster_id: "pl-bench-limit-pod".into(),
        ..paceline_kubernetes::KubernetesConfig::default()
    };
    let job = "bench-kubernetes-00000000";
    let instance = u32::try_from(i)?;
    let task = paceline_model::task::TaskId::new(job.to_string(), instance);
    let run_id = task.run_id(1);
    let env = paceline_model::run::run_env(job, instance, &run_id);
    let req = paceline_model::run::LaunchRequest {
        run_id,
        task_id: task.to_string(),
        spec: TaskSpec { command: "pause".into(), resources: Resources::new(100, 500, 1, 0), ..TaskSpec::default() },
        env,
        secrets: Vec::new(),
        gpu: Default::default(),
        gang: None,
        user: None,
    };
    let (pod, _) = paceline_kubernetes::pods::build_pod(&config, &req, node, &Default::default())
        .map_err(|e| anyhow::anyhow!("building a Paceline-shaped pod: {e}"))?;
    Ok(pod)
}

/// The limits' client and the namespace it writes in (`--limit-as`).
async fn limit_client(
    args: &KubernetesBenchArgs,
    env: &PlaneEnv,
    admin: &kube::Client,
) -> anyhow::Result<(kube::Client, &'static str)> {
    Ok(match args.limit_as {
        LimitAs::Admin => (admin.clone(), NAMESPACE),
        LimitAs::Paceline => (client(&env.paceline).await?, TASK_NAMESPACE),
    })
}

async fn limit_bind(
    args: &KubernetesBenchArgs,
    (limit, namespace): &(kube::Client, &'static str),
    admin: &kube::Client,
    nodes: &[String],
) -> anyhow::Result<Figures> {
    let api: Api<Pod> = Api::namespaced(limit.clone(), namespace);
    let created = create_pods(&api, args.pods, args.clients, |i| {
        pod(format!("rr-{i}"), namespace, "paceline-bench-nobody", None)
    })
    .await?;
    let watch = watch_binds(admin, namespace, args.pods, Duration::from_secs(900));
    reset_peaks(&args.dir);
    futures::stream::iter(0..args.pods)
        .map(|i| {
            let api = api.clone();
            let name = format!("rr-{i}");
            let binding = Binding {
                metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
                target: ObjectReference {
                    kind: Some("Node".into()),
                    name: Some(nodes[i % nodes.len()].clone()),
                    ..ObjectReference::default()
                },
            };
            async move {
                api.create_subresource::<Binding, serde_json::Value>("binding", &name, &PostParams::default(), &binding)
                    .await
            }
        })
        .buffer_unordered(args.clients.max(1))
        .try_collect::<Vec<_>>()
        .await
        .context("binding pods")?;
    let (bound, span) = watch.await??;
    Ok(Figures {
        bound,
        span,
        rss: plane_peaks(&args.dir),
        notes: format!("the {} pending pods created first in {:.1} s", args.pods, created.as_secs_f64()),
    })
}

async fn limit_create(
    args: &KubernetesBenchArgs,
    (limit, namespace): &(kube::Client, &'static str),
    admin: &kube::Client,
    nodes: &[String],
) -> anyhow::Result<Figures> {
    let api: Api<Pod> = Api::namespaced(limit.clone(), namespace);
    let watch = watch_binds(admin, namespace, args.pods, Duration::from_secs(900));
    // Made before the clock starts, as the plain pods are.
    let pods = (0..args.pods)
        .map(|i| {
            let node = nodes[i % nodes.len()].clone();
            match args.limit_pod {
                LimitPod::Plain => Ok(pod(format!("rc-{i}"), namespace, "paceline-bench-nobody", Some(node))),
                LimitPod::Paceline => paceline_shaped_pod(i, namespace, &node),
            }
        })
        .collect::<anyhow::Result<Vec<Pod>>>()?;
    // The watch's first list before the first create.
    tokio::time::sleep(Duration::from_millis(500)).await;
    reset_peaks(&args.dir);
    create_pods(&api, args.pods, args.clients, |i| pods[i].clone()).await?;
    let (bound, span) = watch.await??;
    let notes = match args.limit_pod {
        LimitPod::Plain => String::new(),
        LimitPod::Paceline => "pods shaped as Paceline's provider makes them (--limit-pod paceline)".into(),
    };
    Ok(Figures { bound, span, rss: plane_peaks(&args.dir), notes })
}

async fn kube_scheduler(args: &KubernetesBenchArgs, admin: &kube::Client) -> anyhow::Result<Figures> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let created =
        create_pods(&api, args.pods, args.clients, |i| pod(format!("ks-{i}"), NAMESPACE, "default-scheduler", None))
            .await?;
    let watch = watch_binds(admin, NAMESPACE, args.pods, Duration::from_secs(900));
    tokio::time::sleep(Duration::from_millis(500)).await;
    reset_peaks(&args.dir);
    let start = {
        let (script, dir) = (args.script.clone(), args.dir.clone());
        tokio::task::spawn_blocking(move || Command::new("bash").arg(script).arg("start-scheduler").arg(dir).output())
    };
    let out = start.await??;
    if !out.status.success() {
        bail!("kubernetes.sh start-scheduler: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    pin::plane(args)?;
    let (bound, span) = watch.await??;
    let mut rss = plane_peaks(&args.dir);
    rss.push(("kube-scheduler", pid_of(&args.dir, "kube-scheduler").and_then(peak_mib)));
    script(args, &["stop-scheduler"])?;
    Ok(Figures {
        bound,
        span,
        rss,
        notes: format!(
            "the {} pending pods created first in {:.1} s; kube-scheduler's client QPS/burst {}/{}",
            args.pods,
            created.as_secs_f64(),
            std::env::var("KUBERNETES_SCHEDULER_QPS").unwrap_or_else(|_| "5000".into()),
            std::env::var("KUBERNETES_SCHEDULER_BURST").unwrap_or_else(|_| "5000".into()),
        ),
    })
}

async fn paceline_jobs(args: &KubernetesBenchArgs, env: &PlaneEnv, admin: &kube::Client) -> anyhow::Result<Figures> {
    let dir = tempfile::tempdir()?;
    let (token, tokens) = crate::server::admin_token(dir.path())?;
    let defaults = paceline_api::quota::QuotaLimits::default();
    let pods = args.pods as u64;
    let quota_tasks = defaults.max_live_tasks_per_principal.max(pods);
    let yaml = format!(
        "data_dir: {}\napi_listen: 127.0.0.1:0\nagent_listen: 127.0.0.1:0\ntokens_file: {}\nhosts: {{provider: kubernetes, kubeconfig: {}, node_selector: {NODE_LABEL}=1}}\nquotas: {{max_live_tasks_per_principal: {quota_tasks}}}\n",
        dir.path().join("data").display(),
        tokens.display(),
        env.paceline.display(),
    );
    let config: paceline_server::ServerConfig = serde_yaml::from_str(&yaml).context("the bench's server config")?;
    let engine = paceline_placement::EngineConfig::default();
    println!(
        "a real paceline server: its defaults (built-in Wasm policies, engine batch {} / {} hosts per lease, a step every {} ms, API auth on), hosts: {{provider: kubernetes, node_selector: {NODE_LABEL}=1}} as Paceline's ServiceAccount{}",
        engine.batch_size,
        engine.max_hosts_per_lease,
        config.loop_interval_ms,
        if quota_tasks != defaults.max_live_tasks_per_principal {
            format!("; live tasks per principal raised to {quota_tasks}")
        } else {
            String::new()
        }
    );
    let t0 = Instant::now();
    let server = paceline_server::Server::start(config).await.context("starting the server")?;
    while server.cluster.hosts.hosts().iter().filter(|h| h.reachable).count() < args.nodes {
        if t0.elapsed() > Duration::from_secs(300) {
            bail!("the server saw fewer than {} hosts after 300 s", args.nodes);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let registered = t0.elapsed();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.api_addr))?.connect().await?;
    let bearer = paceline_proto::bearer::Bearer::new(Some(&token))?;
    let api = tonic::service::interceptor::InterceptedService::new(channel, bearer);
    let task = Resources::new(100, 500, 1, 0);
    let reservation = PerKind { cpu: 100 * pods, memory: 500 * pods, disk: pods, gpu: 0 };
    pb::pool_service_client::PoolServiceClient::new(api.clone())
        .create_pool(pb::CreatePoolRequest {
            path: "/bench".into(),
            spec: Some(paceline_api::pools::pool_spec_pb(&PoolSpec { reservation, ..PoolSpec::default() })),
        })
        .await
        .context("creating /bench")?;
    let watch = watch_binds(admin, TASK_NAMESPACE, args.pods, Duration::from_secs(900));
    tokio::time::sleep(Duration::from_millis(500)).await;
    reset_peaks(&args.dir);
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let spec = JobConfig {
        name: "bench-kubernetes".into(),
        pool: "/bench".into(),
        kind: JobKind::Batch,
        instance_count: u32::try_from(args.pods)?,
        default_task: TaskSpec { command: "pause".into(), resources: task, ..TaskSpec::default() },
        ..JobConfig::default()
    };
    let submit = Instant::now();
    pb::job_service_client::JobServiceClient::new(api.clone())
        .create_job(pb::CreateJobRequest { spec: Some(paceline_api::convert::job_spec_pb(&spec)) })
        .await
        .context("creating the job")?;
    let submitted = submit.elapsed();
    let (bound, span) = watch.await??;
    let mut rss = plane_peaks(&args.dir);
    rss.push(("paceline (the bench's process: server and clients)", peak_mib(std::process::id())));
    let all = submit.elapsed();
    server.shutdown().await;
    Ok(Figures {
        bound,
        span,
        rss,
        notes: format!(
            "{} hosts registered {:.1} s after start; job created in {:.0} ms; the last pod {:.2} s after the create",
            args.nodes,
            registered.as_secs_f64(),
            submitted.as_secs_f64() * 1e3,
            all.as_secs_f64()
        ),
    })
}

/// Pods Paceline did not create: P pending pods of `schedulerName:
/// paceline` first (as kube-scheduler's run), then a real server with the
/// pod scheduler on, every pod in `/default` (its pool made at the first start).
async fn paceline_pods(args: &KubernetesBenchArgs, env: &PlaneEnv, admin: &kube::Client) -> anyhow::Result<Figures> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let created =
        create_pods(&api, args.pods, args.clients, |i| pod(format!("pp-{i}"), NAMESPACE, "paceline", None)).await?;
    let dir = tempfile::tempdir()?;
    let yaml = format!(
        "data_dir: {}\napi_listen: 127.0.0.1:0\nagent_listen: 127.0.0.1:0\nhosts: {{provider: kubernetes, kubeconfig: {}, node_selector: {NODE_LABEL}=1, pod_scheduler: {{namespaces: [{NAMESPACE}], default_pool: /default}}}}\n",
        dir.path().join("data").display(),
        env.paceline.display(),
    );
    let config: paceline_server::ServerConfig = serde_yaml::from_str(&yaml).context("the bench's server config")?;
    println!(
        "a real paceline server: its defaults, hosts: {{provider: kubernetes, node_selector: {NODE_LABEL}=1, pod_scheduler: {{namespaces: [{NAMESPACE}], default_pool: /default}}}}; the {} pending pods created first in {:.1} s",
        args.pods,
        created.as_secs_f64()
    );
    let watch = watch_binds(admin, NAMESPACE, args.pods, Duration::from_secs(900));
    reset_peaks(&args.dir);
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let t0 = Instant::now();
    let server = paceline_server::Server::start(config).await.context("starting the server")?;
    let (bound, span) = watch.await??;
    let all = t0.elapsed();
    let mut rss = plane_peaks(&args.dir);
    rss.push(("paceline (the bench's process: server and clients)", peak_mib(std::process::id())));
    server.shutdown().await;
    Ok(Figures {
        bound,
        span,
        rss,
        notes: format!(
            "the last pod bound {:.2} s after the server's start (hosts registering included)",
            all.as_secs_f64()
        ),
    })
}

/// The plane's pid of `name` (its pid file).
fn pid_of(dir: &Path, name: &str) -> Option<u32> {
    std::fs::read_to_string(dir.join(format!("{name}.pid"))).ok()?.trim().parse().ok()
}

/// VmHWM of `pid`, MiB.
fn peak_mib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1_024)
}

/// Resets the plane's processes' peak RSS (writing 5 to clear_refs).
fn reset_peaks(dir: &Path) {
    for name in ["kube-apiserver", "etcd", "kwok", "kube-scheduler"] {
        if let Some(pid) = pid_of(dir, name) {
            let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
        }
    }
}

fn plane_peaks(dir: &Path) -> Vec<(&'static str, Option<u64>)> {
    ["kube-apiserver", "etcd", "kwok"].into_iter().map(|n| (n, pid_of(dir, n).and_then(peak_mib))).collect()
}
