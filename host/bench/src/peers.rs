//! `paceline bench peers`: other schedulers' own benchmark shapes, run
//! through Paceline's placement engine, so a reader can run the peer's
//! benchmark beside ours on the same machine and compare placements per
//! second.
//!
//! What is measured is the engine's round as `paceline server` runs it
//! (`EngineConfig::default()`, the built-in Wasm policies in their default
//! slots): taking the tasks, leasing hosts from the real host manager (its
//! filter evaluates the shared hard constraints), feasibility per constraint
//! set, one Wasm policy call per group, the registry's validation of the
//! answer, and the commit. What is not: the API, the store and the job
//! manager (the ready queue here hands out the shape's tasks and, where the
//! peer commits, launches them on the host manager's simulated hosts, which
//! holds their resources as a real launch does). Figures only, never a test.

use std::collections::{BTreeMap, VecDeque};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::Args;
use paceline_hostmgr::{HostManager, HostShape, SimConfig, SimProvider};
use paceline_joints::{Committed, PortError, TaskHandle};
use paceline_model::job::JobKind;
use paceline_model::run::LaunchRequest;
use paceline_model::task::TaskSpec;
use paceline_model::{Constraint, Resources, UnplacedReason};
use paceline_placement::{Engine, EngineConfig, LeaseId, Need, Placement, ReadyQueue, ReadyTask, Taken};

/// Arguments of `bench peers`.
#[derive(Debug, Args)]
pub struct PeersBenchArgs {
    /// Shapes to run (repeatable); default every shape. Names:
    /// nomad-service, nomad-service-10k, nomad-spread, nomad-spread-10k,
    /// yunikorn-2000, yunikorn-5000, k8s-basic.
    #[arg(long = "shape")]
    shapes: Vec<String>,
    /// Timed runs of each shape, each on a fresh cluster; the median is
    /// reported (and the slowest).
    #[arg(long, default_value_t = 5)]
    repeat: u32,
}

/// A peer's benchmark shape.
struct Shape {
    name: &'static str,
    /// The peer benchmark it mirrors: project, file, benchmark.
    source: &'static str,
    /// How it maps onto Paceline, where the peer's words differ.
    mapping: &'static str,
    hosts: Vec<HostShape>,
    /// Placed and committed before the timer starts.
    before: Vec<Ask>,
    /// Timed.
    asks: Vec<Ask>,
    /// Launch the placements on the hosts (the peer commits each), or only
    /// count them (the peer's evaluation commits nothing).
    commit: bool,
    /// The peer's figure on this machine, as the issue recorded it.
    peer: Option<(&'static str, f64)>,
}

/// `count` alike tasks of one job.
#[derive(Clone)]
struct Ask {
    job: &'static str,
    count: u32,
    resources: Resources,
    constraints: Vec<Constraint>,
    /// The slot that places them (its built-in policy is the peer's ranking).
    slot: &'static str,
    pool: u32,
}

const NOMAD_SOURCE: &str =
    "Nomad scheduler/benchmarks/benchmarks_test.go, BenchmarkServiceScheduler (hashicorp/nomad main, 2025)";

fn nomad(nodes: usize, spread: bool) -> Shape {
    const RACKS: usize = 25;
    // 14,000 MHz with 100 reserved, 32,000 MB with 256 reserved, 100 GiB disk.
    let node = Resources::new(14_000 - 100, 32_000 - 256, 100 * 1024, 0);
    let hosts = (0..RACKS)
        .map(|r| {
            let count = nodes / RACKS + usize::from(r < nodes % RACKS);
            HostShape::new(count, format!("r{r:02}-"), node).attribute("rack", format!("r{r:02}"))
        })
        .collect();
    let first_half: Vec<String> = (0..RACKS / 2).map(|r| format!("r{r:02}")).collect();
    let constraints =
        vec![Constraint::AttributeIn { key: "rack".into(), values: first_half }, Constraint::MaxPerHost { max: 1 }];
    Shape {
        name: match (nodes, spread) {
            (5_000, false) => "nomad-service",
            (5_000, true) => "nomad-spread",
            (_, false) => "nomad-service-10k",
            (_, true) => "nomad-spread-10k",
        },
        source: NOMAD_SOURCE,
        mapping: if spread {
            "MHz as millicores, MB as MiB; the spread algorithm is the built-in `spread` policy; job anti-affinity as max_per_host 1 (Nomad's is a soft score penalty: ours is the hard form); the 1,200 instances are taken in rounds of the server's batch (1,000); nothing committed"
        } else {
            "MHz as millicores, MB as MiB; binpack is the built-in `binpack` policy; job anti-affinity as max_per_host 1 (Nomad's is a soft score penalty: ours is the hard form); the 1,200 instances are taken in rounds of the server's batch (1,000); nothing committed"
        },
        hosts,
        before: Vec::new(),
        asks: vec![Ask {
            job: "service",
            count: 1_200,
            resources: Resources::new(6_000, 6_000, 150, 0),
            constraints,
            slot: if spread { "placement/stateless" } else { "placement/batch" },
            pool: 1,
        }],
        commit: false,
        peer: (nodes == 5_000 && !spread).then_some(("4,200–4,500 placements/s", 4_500.0)),
    }
}

fn yunikorn(nodes: usize) -> Shape {
    // 10,000 asks of 1 vcore / 10 MB over two queues; each node 10,000/N + 1 vcores.
    let vcores = 10_000 / nodes as u64 + 1;
    let node = Resources::new(vcores * 1_000, 1 << 20, 1 << 20, 0);
    let ask = |job, pool| Ask {
        job,
        count: 5_000,
        resources: Resources::new(1_000, 10, 0, 0),
        constraints: Vec::new(),
        slot: "placement/stateless",
        pool,
    };
    Shape {
        name: if nodes == 2_000 { "yunikorn-2000" } else { "yunikorn-5000" },
        source: "YuniKorn pkg/scheduler/tests/performance_test.go, BenchmarkScheduling (apache/yunikorn-core master, 2025)",
        mapping: "vcores as cores, MB as MiB; the two queues are two pools; YuniKorn's default node order (fair: least used first) is the built-in `spread` policy; each allocation committed (launched on the host manager's simulated hosts)",
        hosts: vec![HostShape::new(nodes, "n-", node)],
        before: Vec::new(),
        asks: vec![ask("queue-a", 1), ask("queue-b", 2)],
        commit: true,
        peer: Some(("4,900–5,100 allocations/s", 5_100.0)),
    }
}

fn k8s_basic() -> Shape {
    // 5,000 nodes of 4 CPU / 32 GiB / 110 pods; 1,000 pods placed first, then 10,000 measured.
    let node = Resources::new(4_000, 32 * 1024, 1 << 20, 0);
    let pod = |job, count| Ask {
        job,
        count,
        resources: Resources::new(100, 500, 0, 0),
        constraints: Vec::new(),
        slot: "placement/stateless",
        pool: 1,
    };
    Shape {
        name: "k8s-basic",
        source: "Kubernetes test/integration/scheduler_perf, SchedulingBasic 5000Nodes (kubernetes/kubernetes master, 2025)",
        mapping: "the default scheduler's least-allocated scoring is the built-in `spread` policy; 500 Mi as 500 MiB; the 110-pod limit never binds (40 pods of 100m fill 4 CPU); each pod committed (launched on the host manager's simulated hosts)",
        hosts: vec![HostShape::new(5_000, "node-", node)],
        before: vec![pod("init-pods", 1_000)],
        asks: vec![pod("measured-pods", 10_000)],
        commit: true,
        peer: None,
    }
}

fn all_shapes() -> Vec<Shape> {
    vec![
        nomad(5_000, false),
        nomad(10_000, false),
        nomad(5_000, true),
        nomad(10_000, true),
        yunikorn(2_000),
        yunikorn(5_000),
        k8s_basic(),
    ]
}

/// The ready queue of one run: the shape's tasks by kind, handed out in
/// order; placements launched on the hosts (or only counted).
struct ShapeQueue {
    ready: Mutex<BTreeMap<JobKind, VecDeque<(ReadyTask, Need)>>>,
    hosts: Option<HostManager>,
    placed: AtomicU64,
    unplaced: AtomicU64,
    /// The first refusal of a launch, said once at the end.
    refusal: Mutex<Option<String>>,
}

fn kind_of(slot: &str) -> JobKind {
    if slot.ends_with("stateless") { JobKind::Stateless } else { JobKind::Batch }
}

impl ShapeQueue {
    fn new(asks: &[Ask], hosts: Option<HostManager>, first_job: u64) -> ShapeQueue {
        let mut ready: BTreeMap<JobKind, VecDeque<(ReadyTask, Need)>> = BTreeMap::new();
        let mut handle = first_job << 32;
        for (j, ask) in asks.iter().enumerate() {
            let job = first_job + j as u64;
            let need = Need {
                job_id: format!("{}-{job}", ask.job),
                constraints: ask.constraints.clone(),
                slot: ask.slot.to_string(),
                ..Need::default()
            };
            let queue = ready.entry(kind_of(ask.slot)).or_default();
            for instance in 0..ask.count {
                handle += 1;
                let task = ReadyTask {
                    id: TaskHandle(handle),
                    job,
                    instance,
                    gang: handle,
                    pool: paceline_joints::PoolId(ask.pool),
                    priority: 0,
                    resources: ask.resources,
                };
                queue.push_back((task, need.clone()));
            }
        }
        ShapeQueue {
            ready: Mutex::new(ready),
            hosts,
            placed: AtomicU64::new(0),
            unplaced: AtomicU64::new(0),
            refusal: Mutex::new(None),
        }
    }

    fn waiting(&self) -> usize {
        self.ready.lock().map_or(0, |r| r.values().map(VecDeque::len).sum())
    }
}

fn poisoned<T>(_: T) -> PortError {
    PortError::unavailable("bench queue lock poisoned")
}

#[async_trait]
impl ReadyQueue for ShapeQueue {
    async fn take_ready(&self, kind: JobKind, max: usize, _now_ms: u64) -> Result<Taken, PortError> {
        let mut ready = self.ready.lock().map_err(poisoned)?;
        let Some(queue) = ready.get_mut(&kind) else { return Ok(Taken::default()) };
        let n = max.min(queue.len());
        Ok(Taken { ready: queue.drain(..n).collect(), orphans: Vec::new() })
    }

    /// Unplaced tasks are counted and dropped: each shape is one evaluation.
    async fn unplaced(&self, tasks: &[(TaskHandle, UnplacedReason)], _now_ms: u64) -> Result<usize, PortError> {
        self.unplaced.fetch_add(tasks.len() as u64, Ordering::Relaxed);
        Ok(tasks.len())
    }

    async fn commit(&self, lease: LeaseId, placements: Vec<Placement>, _now_ms: u64) -> Result<Committed, PortError> {
        let mut committed = Committed::default();
        let Some(hosts) = &self.hosts else {
            committed.launched = placements.len() as u32;
            self.placed.fetch_add(placements.len() as u64, Ordering::Relaxed);
            return Ok(committed);
        };
        // One launch per host, as the job manager's commit does.
        let mut by_host: BTreeMap<String, Vec<LaunchRequest>> = BTreeMap::new();
        for p in placements {
            let task_id = format!("bench-{}-{}", p.task.job, p.task.instance);
            by_host.entry(p.host).or_default().push(LaunchRequest {
                gang: None,
                user: None,
                run_id: format!("{task_id}-1"),
                task_id,
                spec: TaskSpec { command: "bench".into(), resources: p.task.resources, ..TaskSpec::default() },
                env: BTreeMap::new(),
                secrets: Vec::new(),
                gpu: p.gpu,
            });
        }
        for (host, runs) in by_host {
            let n = runs.len() as u32;
            match hosts.launch(lease, &host, runs).await {
                Ok(refused) => {
                    committed.launched += n - refused.len() as u32;
                    committed.refused += refused.len() as u32;
                }
                Err(e) => {
                    committed.refused += n;
                    if let Ok(mut first) = self.refusal.lock() {
                        first.get_or_insert_with(|| format!("{host}: {e}"));
                    }
                }
            }
        }
        self.placed.fetch_add(u64::from(committed.launched), Ordering::Relaxed);
        Ok(committed)
    }
}

/// What one timed run did.
struct RunFigures {
    wall: Duration,
    placed: u64,
    unplaced: u64,
    rounds: u32,
    plugin_calls: usize,
}

/// Rounds until the queue is empty (or a round takes nothing).
async fn drain(engine: &Engine, queue: &ShapeQueue, now_ms: u64) -> (u32, usize) {
    let (mut rounds, mut calls) = (0u32, 0usize);
    while queue.waiting() > 0 {
        let report = engine.run_round(now_ms).await;
        rounds += 1;
        calls += report.plugin_calls;
        if report.taken == 0 {
            break;
        }
    }
    (rounds, calls)
}

async fn run_once(shape: &Shape, registry: &Arc<paceline_plugin::Registry>) -> anyhow::Result<RunFigures> {
    let sim = Arc::new(SimProvider::new(SimConfig { shapes: shape.hosts.clone(), ..SimConfig::default() }));
    let hosts = crate::hosts::sim_host_manager(&sim).await?;
    let now = sim.now_ms();
    let engine_for =
        |queue: Arc<ShapeQueue>| Engine::new(queue, Arc::new(hosts.clone()), registry.clone(), EngineConfig::default());
    if !shape.before.is_empty() {
        let queue = Arc::new(ShapeQueue::new(&shape.before, Some(hosts.clone()), 1));
        drain(&engine_for(queue.clone()), &queue, now).await;
        let placed = queue.placed.load(Ordering::Relaxed);
        let wanted: u64 = shape.before.iter().map(|a| u64::from(a.count)).sum();
        anyhow::ensure!(placed == wanted, "placing the shape's first tasks: {placed} of {wanted} placed");
    }
    let queue = Arc::new(ShapeQueue::new(&shape.asks, shape.commit.then(|| hosts.clone()), 100));
    let engine = engine_for(queue.clone());
    let start = Instant::now();
    let (rounds, plugin_calls) = drain(&engine, &queue, now).await;
    let wall = start.elapsed();
    if let Ok(Some(refusal)) = queue.refusal.lock().map(|r| r.clone()) {
        println!("  (a launch was refused: {refusal})");
    }
    Ok(RunFigures {
        wall,
        placed: queue.placed.load(Ordering::Relaxed),
        unplaced: queue.unplaced.load(Ordering::Relaxed),
        rounds,
        plugin_calls,
    })
}

/// Runs `bench peers`.
pub fn run(args: PeersBenchArgs) -> anyhow::Result<ExitCode> {
    if cfg!(debug_assertions) {
        println!("(DEBUG build - figures not meaningful; use --release)");
    }
    let mut shapes = all_shapes();
    if !args.shapes.is_empty() {
        let known: Vec<&str> = shapes.iter().map(|s| s.name).collect();
        if let Some(bad) = args.shapes.iter().find(|s| !known.contains(&s.as_str())) {
            anyhow::bail!("no shape {bad:?}; shapes: {}", known.join(", "));
        }
        shapes.retain(|s| args.shapes.iter().any(|n| n == s.name));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let rt = Arc::new(paceline_plugin::PluginRuntime::new(paceline_plugin::RuntimeConfig::default())?);
    let registry = Arc::new(paceline_plugin::Registry::open(rt, Arc::new(paceline_plugin::MemoryStore::default()))?);
    paceline_server::wiring::install_default_plugins(&registry)?;
    let config = EngineConfig::default();
    println!(
        "engine: the server's defaults (batch {} tasks per kind per round, at most {} hosts per lease); policies: the built-in Wasm components in their default slots",
        config.batch_size, config.max_hosts_per_lease
    );
    println!(
        "differs from `paceline server`: no API, store or job manager (the tasks are handed to the engine directly); hosts simulated by the host manager's simulator"
    );
    for shape in &shapes {
        println!("\n{}: {}", shape.name, shape.source);
        println!("  mapping: {}", shape.mapping);
        // One untimed run first: the Wasm instances and the allocator warm up, as a peer's Go benchmark does with b.N.
        let warm = runtime.block_on(run_once(shape, &registry))?;
        let mut runs = Vec::new();
        for _ in 0..args.repeat.max(1) {
            runs.push(runtime.block_on(run_once(shape, &registry))?);
        }
        runs.sort_by_key(|r| r.wall);
        let median = &runs[runs.len() / 2];
        let slowest = &runs[runs.len() - 1];
        let rate = |r: &RunFigures| r.placed as f64 / r.wall.as_secs_f64().max(1e-9);
        let asked: u64 = shape.asks.iter().map(|a| u64::from(a.count)).sum();
        println!(
            "  {} of {asked} placed, {} unplaced, {} rounds, {} policy calls; median {:.1} ms = {:.0} placements/s, {:.1} us per placement (slowest {:.1} ms = {:.0}/s; warm-up run {:.1} ms)",
            median.placed,
            median.unplaced,
            median.rounds,
            median.plugin_calls,
            median.wall.as_secs_f64() * 1e3,
            rate(median),
            median.wall.as_secs_f64() * 1e6 / median.placed.max(1) as f64,
            slowest.wall.as_secs_f64() * 1e3,
            rate(slowest),
            warm.wall.as_secs_f64() * 1e3,
        );
        if let Some((said, peer)) = shape.peer {
            println!(
                "  the peer on this machine (issue 29): {said}; ours is {:.1}x its upper figure (goal: >= 5x)",
                rate(median) / peer
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
