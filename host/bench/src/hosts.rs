//! `paceline bench hosts` and `paceline bench jobmgr`.

use std::collections::BTreeSet;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use paceline_hostmgr::{AgentConfig, AgentProvider, HostEvent, HostManager, LeaseRequest, ManagerConfig};
use paceline_model::Resources;
use paceline_model::run::{LaunchRequest, RunState};
use paceline_model::task::TaskSpec;

/// Arguments of `bench hosts`.
#[derive(Debug, Args)]
pub struct HostsBenchArgs {
    /// Trivial tasks one real agent runs.
    #[arg(long, default_value_t = 100)]
    tasks: usize,
    /// Simulated hosts behind the host manager.
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// Runs whose status updates flow to the subscriber.
    #[arg(long, default_value_t = 100_000)]
    runs: usize,
    /// Seconds each lease measurement runs.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
}

/// Arguments of `bench jobmgr`.
#[derive(Debug, Args)]
pub struct JobmgrBenchArgs {
    /// Instances of the batch job created.
    #[arg(long, default_value_t = 10_000)]
    instances: u32,
}

fn debug_note() {
    if cfg!(debug_assertions) {
        println!("(DEBUG build - figures not meaningful; use --release)");
    }
}

/// Runs `bench hosts`.
pub fn hosts(args: HostsBenchArgs, env: &crate::BenchEnv) -> anyhow::Result<ExitCode> {
    debug_note();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let dir = tempfile::tempdir()?;
        let agent = agent_launches(&env.paceline, dir.path(), args.tasks).await?;
        println!("agent: {} `true` tasks through the host manager and a real agent: all SUCCEEDED after {:.0} ms (budget 3000 ms)", args.tasks, ms(agent));
        let isolation = paceline_agent::Isolation::detect(paceline_agent::IsolationChoice::Auto);
        let sup = paceline_agent::bench_launch(&dir.path().join("supervisor"), args.tasks, isolation, Duration::from_secs(60)).await?;
        println!("agent supervisor alone: {sup}");
        for per_lease in [100, args.hosts] {
            let f = paceline_hostmgr::bench::lease_rounds(args.hosts, per_lease, Duration::from_secs(args.seconds)).await?;
            println!(
                "leases: {} sim hosts, {} per lease: {:.0} lease-and-release rounds/s ({} rounds; budget >= 100/s)",
                f.hosts, f.hosts_per_lease, f.rounds_per_sec, f.rounds
            );
        }
        let f = paceline_hostmgr::bench::status_updates(args.hosts, args.runs).await?;
        println!(
            "status: {} updates of {} runs through to an acknowledging subscriber: {:.0} updates/s in {:.0} ms (budget >= 50,000/s)",
            f.updates,
            f.runs,
            f.updates_per_sec,
            ms(f.elapsed)
        );
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Starts a host manager with the agent provider, one `paceline agent`
/// process, launches `n` runs of `true` and times until every SUCCEEDED
/// update was acknowledged.
async fn agent_launches(paceline: &std::path::Path, dir: &std::path::Path, n: usize) -> anyhow::Result<Duration> {
    // The agent port as a server has it: TLS, and a join token for the agent.
    let pki = paceline_hostmgr::pki::AgentPki::open(dir.join("pki"))?;
    let token = pki.create_token(Duration::from_secs(600), Some(1), "bench hosts")?;
    let ca_hash = pki.ca_hash();
    let provider = AgentProvider::with_identity(
        AgentConfig { heartbeat_interval_ms: 500, ..AgentConfig::default() },
        Arc::new(pki),
        Vec::new(),
    );
    let hosts = HostManager::builder(Arc::new(provider.clone())).config(ManagerConfig::default()).start().await?;
    hosts.expect_runs(Vec::new()).await;
    let mut events = hosts.subscribe();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = format!("http://{}", listener.local_addr()?);
    let server = tokio::spawn(async move {
        let _ = provider.serve_with_listener(listener, std::future::pending()).await;
    });
    let mut child = Command::new(paceline)
        .args([
            "agent",
            "--manager",
            &addr,
            "--hostname",
            "bench-agent",
            "--cpu-millis",
            "1000000",
            "--memory-mib",
            "1000000",
        ])
        .arg("--data-dir")
        .arg(dir.join("agent"))
        .args(["--ca-hash", &ca_hash])
        .env("PACELINE_JOIN_TOKEN", &token.token)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting paceline agent")?;
    let result = async {
        let deadline = Instant::now() + Duration::from_secs(30);
        while hosts.host("bench-agent").is_none_or(|h| !h.reachable) {
            if Instant::now() > deadline {
                bail!("the agent did not register");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let runs: Vec<LaunchRequest> = (0..n)
            .map(|i| LaunchRequest {
                gang: None,
                user: None,
                run_id: format!("bench-{i}-1"),
                task_id: format!("bench-{i}"),
                spec: TaskSpec {
                    command: "true".into(),
                    resources: Resources::new(10, 64, 0, 0),
                    ..TaskSpec::default()
                },
                env: Default::default(),
                secrets: Vec::new(),
                gpu: Default::default(),
            })
            .collect();
        let mut req = LeaseRequest::new(Resources::ZERO, 1, 60_000);
        req.only_hosts = vec!["bench-agent".into()];
        let start = Instant::now();
        let lease = hosts.lease(&req)?;
        hosts.launch(lease.id, "bench-agent", runs).await?;
        let _ = hosts.release(lease.id);
        let mut done = BTreeSet::new();
        while done.len() < n {
            let left = Duration::from_secs(60).checked_sub(start.elapsed()).context("timed out")?;
            match tokio::time::timeout(left, events.recv()).await {
                Ok(Some(HostEvent::Run(u))) => {
                    hosts.acknowledge(&u.run_id, u.seq).await;
                    if u.state == RunState::Succeeded {
                        done.insert(u.run_id);
                    } else if u.state.is_terminal() {
                        bail!("{} ended {}: {}", u.run_id, u.state, u.message);
                    }
                }
                Ok(Some(_)) => {}
                _ => bail!("timed out with {} of {n} done", done.len()),
            }
        }
        Ok(start.elapsed())
    }
    .await;
    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let _ = child.wait();
    server.abort();
    result
}

/// Runs `bench jobmgr`.
pub fn jobmgr(args: JobmgrBenchArgs) -> anyhow::Result<ExitCode> {
    debug_note();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let dir = tempfile::tempdir()?;
    let r = runtime.block_on(paceline_jobmgr::bench::run(dir.path(), args.instances)).map_err(anyhow::Error::msg)?;
    println!(
        "create: a {}-instance batch job persisted (SQLite) and every task handed to the resource manager in {:.0} ms ({} gangs; budget 1000 ms)",
        r.instances, r.create_ms, r.gangs_submitted
    );
    println!(
        "kill: the same job killed while every gang waits, in {:.0} ms; the pool holds {} gangs or tasks afterwards (0 is right)",
        r.kill_queued_ms, r.held_after_kill
    );
    println!(
        "goal state: {} transitions in memory at {:.0}/s (budget >= 100,000/s)",
        r.transitions, r.transitions_per_sec
    );
    Ok(ExitCode::SUCCESS)
}

/// Where `bench pipeline`'s wall time went, summed over the steps it ran.
#[derive(Debug, Default)]
struct Breakdown {
    create: Duration,
    placement: Duration,
    host_events: Duration,
    ticks: Duration,
}

impl Breakdown {
    fn add(&mut self, step: &paceline_server::cluster::StepReport) {
        self.placement += step.placement_time;
        self.host_events += step.host_events_time;
        self.ticks += step.ticks_time;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Arguments of `bench pipeline`.
#[derive(Debug, Args)]
pub struct PipelineBenchArgs {
    /// Jobs submitted.
    #[arg(long, default_value_t = 1_000)]
    jobs: u32,
    /// Instances per job.
    #[arg(long, default_value_t = 100)]
    instances: u32,
    /// Simulated hosts.
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// Cores of each host. Default: 8, or as many as the work needs when
    /// that is more (each host 25% above its share of the tasks; Nomad's
    /// C1M put 200 containers on a host). Memory is sized alike (4 GiB per
    /// core). Work that cannot fit is refused with the arithmetic.
    #[arg(long)]
    host_cores: Option<u64>,
    /// Place through `paceline.placement.v2` on a loopback port, as an engine
    /// in a process of its own does (`--roles placement`), instead of in the loop.
    #[arg(long)]
    remote_placement: bool,
    /// Keep no metrics (the server keeps them; see --metrics-compare).
    #[arg(long)]
    no_metrics: bool,
    /// Run N times without metrics and N times with them (scraped every
    /// second), in turn, and print both rates and the difference.
    #[arg(long, default_value_t = 0, value_name = "N")]
    metrics_compare: u32,
}

/// A placement engine reaching `cluster` over gRPC on a loopback port (the
/// `--roles placement` path), running rounds on the simulator's clock until
/// the returned task is aborted.
async fn remote_engine(
    cluster: &Arc<paceline_server::cluster::Cluster>,
    clock: paceline_joints::ManualClock,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let peer = paceline_placement::remote::CoreService::new(
        cluster.jobs.clone(),
        cluster.hosts.clone(),
        Arc::new(clock.clone()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(peer.into_server())
            .serve_with_incoming(paceline_proto::incoming::tcp(listener)),
    );
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?.connect().await?;
    let remote =
        Arc::new(paceline_placement::remote::RemoteCore::new(channel, paceline_proto::bearer::Bearer::new(None)?));
    let engine = paceline_placement::Engine::new(
        remote.clone(),
        remote,
        cluster.registry.clone(),
        paceline_placement::EngineConfig::default(),
    );
    Ok(tokio::spawn(async move {
        loop {
            let report = engine.run_round(paceline_joints::Clock::now_ms(&clock)).await;
            if report.taken == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }))
}

/// Every role over simulated hosts (SQLite, the built-in Wasm policies):
/// submits `jobs × instances` tasks and times until all run.
/// Runs `bench pipeline`.
pub fn pipeline(args: PipelineBenchArgs) -> anyhow::Result<ExitCode> {
    debug_note();
    let engine = paceline_placement::EngineConfig::default();
    println!(
        "as `paceline server` runs: SQLite store, engine defaults (batch {} tasks per kind, {} hosts per lease), a step every {} ms, the built-in Wasm policies",
        engine.batch_size,
        engine.max_hosts_per_lease,
        paceline_server::ServerConfig::default().loop_interval_ms,
    );
    println!(
        "differs from `paceline server`: jobs created in-process by 32 concurrent clients (not through the gRPC API and its auth layer); plugin registry in memory; one pool /bench with an unlimited reservation; hosts simulated"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    if args.metrics_compare == 0 {
        runtime.block_on(pipeline_once(&args, !args.no_metrics))?;
        return Ok(ExitCode::SUCCESS);
    }
    // Off and on in turn, so that a machine busier in one half of the run
    // than in the other weighs on both alike; the medians are compared.
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for run in 1..=args.metrics_compare {
        println!("-- run {run} of {}, metrics off", args.metrics_compare);
        off.push(runtime.block_on(pipeline_once(&args, false))?);
        println!("-- run {run} of {}, metrics on (scraped every second)", args.metrics_compare);
        on.push(runtime.block_on(pipeline_once(&args, true))?);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (off_rate, on_rate) = (median(&mut off), median(&mut on));
    println!(
        "metrics overhead: {on_rate:.0} tasks/s with metrics (scraped every second) vs {off_rate:.0} tasks/s without, median of {} runs each: {:+.1}% (goal: no more than 3% slower)",
        args.metrics_compare,
        (off_rate / on_rate - 1.0) * 100.0
    );
    Ok(ExitCode::SUCCESS)
}

/// A host manager over `sim`'s hosts on its virtual clock, ticked only when
/// a bench steps it, every host registered.
pub(crate) async fn sim_host_manager(sim: &Arc<paceline_hostmgr::SimProvider>) -> anyhow::Result<HostManager> {
    let hosts = HostManager::builder(sim.clone())
        .clock(Arc::new(sim.clock()))
        .config(ManagerConfig { tick_interval: None, ..ManagerConfig::default() })
        .start()
        .await?;
    hosts.sync().await?;
    Ok(hosts)
}

/// What each pipeline task asks for.
pub(crate) const PIPELINE_TASK: Resources = Resources::new(250, 512, 100, 0);

/// The hosts' shape: `--host-cores`, or sized for the work; an error with
/// the arithmetic when the work cannot fit.
fn host_for(args: &PipelineBenchArgs) -> anyhow::Result<Resources> {
    size_hosts(u64::from(args.jobs) * u64::from(args.instances), args.hosts, args.host_cores)
}

/// Hosts for `total` tasks of [`PIPELINE_TASK`] on `hosts` hosts: `cores`
/// each, or 8, or enough for each host's share plus 25%; an error with the
/// arithmetic when the work cannot fit. `bench pipeline` and `bench server`
/// size alike.
pub(crate) fn size_hosts(total: u64, hosts: usize, cores: Option<u64>) -> anyhow::Result<Resources> {
    let hosts = hosts.max(1) as u64;
    let share = total.div_ceil(hosts);
    let cores_needed = (share * PIPELINE_TASK.cpu_millis * 5 / 4).div_ceil(1_000);
    let cores = cores.unwrap_or(cores_needed.max(8));
    let host = Resources::new(cores * 1_000, cores * 4_096, 1_000_000, 0);
    let per_host = (host.cpu_millis / PIPELINE_TASK.cpu_millis)
        .min(host.memory_mib / PIPELINE_TASK.memory_mib)
        .min(host.disk_mib / PIPELINE_TASK.disk_mib);
    if per_host.saturating_mul(hosts) < total {
        bail!(
            "{total} tasks of {} millicores / {} MiB cannot fit on {hosts} hosts of {cores} cores / {} MiB: {per_host} a host x {hosts} = {} tasks; use --hosts {} or --host-cores {}",
            PIPELINE_TASK.cpu_millis,
            PIPELINE_TASK.memory_mib,
            host.memory_mib,
            per_host.saturating_mul(hosts),
            total.div_ceil(per_host.max(1)),
            (share * PIPELINE_TASK.cpu_millis).div_ceil(1_000),
        );
    }
    Ok(host)
}

/// One pipeline run; returns its rate (tasks launched per second). With
/// `metrics`, the cluster keeps its metrics and a scraper encodes them
/// every second, as a Prometheus scraping at a 1 s interval would.
async fn pipeline_once(args: &PipelineBenchArgs, metrics: bool) -> anyhow::Result<f64> {
    use futures::StreamExt;
    use paceline_hostmgr::{HostShape, SimConfig, SimProvider};
    use paceline_model::job::{JobConfig, JobKind};
    use paceline_model::pool::{PerKind, PoolSpec};
    use paceline_server::cluster::{AssembleConfig, Cluster};

    let dir = tempfile::tempdir()?;
    let start_ms = paceline_joints::Clock::now_ms(&paceline_joints::SystemClock);
    let host = host_for(args)?;
    let sim = Arc::new(SimProvider::new(SimConfig {
        shapes: vec![
            HostShape::new(args.hosts / 2, "a-", host).attribute("zone", "a"),
            HostShape::new(args.hosts - args.hosts / 2, "b-", host).attribute("zone", "b"),
        ],
        start_ms,
        ..SimConfig::default()
    }));
    let clock = sim.clock();
    let mut store: Arc<dyn paceline_storage::Store> =
        Arc::new(paceline_storage::sqlite::SqliteStore::open(dir.path().join("bench.db"))?);
    // With metrics, the store is timed as `paceline server` times it.
    let store_metrics = metrics.then(paceline_storage::metered::StoreMetrics::default);
    if let Some(m) = &store_metrics {
        store = Arc::new(paceline_storage::metered::MeteredStore::new(store, m.clone()));
    }
    let hosts = sim_host_manager(&sim).await?;
    let rt = Arc::new(paceline_plugin::PluginRuntime::new(paceline_plugin::RuntimeConfig::default())?);
    let registry = Arc::new(paceline_plugin::Registry::open(rt, Arc::new(paceline_plugin::MemoryStore::default()))?);
    let config = AssembleConfig {
        install_default_plugins: true,
        engine: paceline_placement::EngineConfig::default(),
        no_placement: args.remote_placement,
        no_metrics: !metrics,
        store_metrics,
        ..AssembleConfig::default()
    };
    let cluster = Cluster::assemble(store, registry, hosts, Arc::new(clock.clone()), config, |rm| {
        let all = PerKind { cpu: 1 << 40, memory: 1 << 40, disk: 1 << 40, gpu: 1 << 20 };
        let _ = rm.create_pool("/bench", PoolSpec { reservation: all, ..PoolSpec::default() });
    })
    .await?;
    let engine = if args.remote_placement { Some(remote_engine(&cluster, clock.clone()).await?) } else { None };
    let scraper = cluster.metrics.clone().map(|m| {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let _ = m.encode(false);
            }
        })
    });
    let total = u64::from(args.jobs) * u64::from(args.instances);
    let wall = Instant::now();
    let mut last = Instant::now();
    let advance = |last: &mut Instant| {
        let ms = last.elapsed().as_millis() as u64;
        *last += Duration::from_millis(ms);
        ms
    };
    // Jobs arrive from many clients at once (CLIENTS in flight), as in a
    // live cluster: the clients do not wait for the scheduling loop and
    // the loop does not wait for the clients, exactly as the API and
    // `Cluster::spawn` run side by side in `paceline server`.
    const CLIENTS: usize = 32;
    let (jobs_n, instances) = (args.jobs, args.instances);
    let make = move |j: u32| {
        let spec = JobConfig {
            name: format!("bench-{j}"),
            owner: "bench".into(),
            pool: "/bench".into(),
            kind: JobKind::Batch,
            instance_count: instances,
            default_task: TaskSpec { command: "work".into(), resources: PIPELINE_TASK, ..TaskSpec::default() },
            ..JobConfig::default()
        };
        (format!("bench-{j}"), spec)
    };
    let clients = {
        let jobs = cluster.jobs.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let created: Vec<anyhow::Result<String>> = futures::stream::iter((0..jobs_n).map(make))
                .map(|(id, spec)| {
                    let jobs = jobs.clone();
                    async move {
                        jobs.create(&id, spec)
                            .await
                            .map(|_| id.clone())
                            .map_err(|e| anyhow::anyhow!("create {id}: {e}"))
                    }
                })
                .buffer_unordered(CLIENTS)
                .collect()
                .await;
            (created, started.elapsed())
        })
    };
    let mut spent = Breakdown::default();
    let mut submitted = None;
    // Paced as `paceline server`'s loop is (`Cluster::spawn`): a step every
    // `loop_interval_ms`, the next one at once when a step ran over it.
    let period = Duration::from_millis(paceline_server::ServerConfig::default().loop_interval_ms.max(1));
    let mut every = tokio::time::interval(period);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while (sim.run_count() as u64) < total {
        every.tick().await;
        if wall.elapsed() > Duration::from_secs(600) {
            bail!("gave up after 600 s with {} of {total} launched", sim.run_count());
        }
        if submitted.is_none() && clients.is_finished() {
            submitted = Some(wall.elapsed());
        }
        sim.advance(advance(&mut last)).await;
        cluster.hosts.sync().await?;
        let step = cluster.step(sim.now_ms()).await;
        spent.add(&step);
    }
    if let Some(engine) = &engine {
        engine.abort();
    }
    let (created, create_time) = clients.await?;
    spent.create = create_time;
    let mut ids = Vec::with_capacity(created.len());
    for c in created {
        ids.push(c?);
    }
    let submitted = submitted.unwrap_or_else(|| wall.elapsed());
    let launched = wall.elapsed();
    // Let STARTING/RUNNING reach the job manager, then read the runs' start times.
    for _ in 0..5 {
        sim.advance(advance(&mut last).max(1)).await;
        cluster.hosts.sync().await?;
        cluster.step(sim.now_ms()).await;
    }
    let mut latencies = Vec::with_capacity(total as usize);
    for id in &ids {
        let info = cluster.jobs.get(id).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        for t in &info.tasks {
            if let Some(started) = t.started_at_ms {
                latencies.push(started.saturating_sub(info.runtime.created_at_ms));
            }
        }
    }
    latencies.sort_unstable();
    let pct = |p: f64| latencies.get(((latencies.len() as f64 - 1.0) * p) as usize).copied().unwrap_or(0);
    println!(
        "pipeline: {total} tasks ({} jobs x {}) onto {} simulated hosts of {} cores / {} GiB, placement {}: submitted in {:.0} ms, all launched after {:.0} ms = {:.0} tasks/s (budget <= 10 s, >= 10,000 tasks/s)",
        args.jobs,
        args.instances,
        args.hosts,
        host.cpu_millis / 1_000,
        host.memory_mib / 1_024,
        if args.remote_placement { "over gRPC on loopback (--remote-placement)" } else { "in the loop" },
        ms(submitted),
        ms(launched),
        total as f64 / launched.as_secs_f64()
    );
    println!(
        "submit -> running per task ({} measured): p50 {} ms, p99 {} ms, max {} ms",
        latencies.len(),
        pct(0.50),
        pct(0.99),
        latencies.last().copied().unwrap_or(0)
    );
    println!(
        "until all launched: creating jobs {:.0} ms (clients, alongside the loop), placement rounds with launches {:.0} ms, host events (run updates) {:.0} ms, ticks {:.0} ms",
        ms(spent.create),
        ms(spent.placement),
        ms(spent.host_events),
        ms(spent.ticks)
    );
    for slot in cluster.registry.list() {
        for v in slot.versions.iter().filter(|v| v.metrics.calls > 0) {
            println!(
                "plugin {} ({}): {} calls, mean {} us, p99 <= {} us",
                slot.slot,
                v.record.id(),
                v.metrics.calls,
                v.metrics.mean_us,
                v.metrics.p99_us
            );
        }
    }
    if let Some(scraper) = scraper {
        scraper.abort();
    }
    Ok(total as f64 / launched.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bench hosts` starts its agent from the binary the caller names, not
    /// from whatever program runs the bench (a test binary, another tool).
    #[test]
    fn bench_hosts_starts_the_agent_from_the_binary_it_is_given() {
        let env = crate::BenchEnv {
            paceline: std::path::PathBuf::from("/nonexistent/paceline"),
            checkout: std::path::PathBuf::from("."),
        };
        let args = HostsBenchArgs { tasks: 1, hosts: 1, runs: 1, seconds: 1 };
        let err = hosts(args, &env).expect_err("there is no such binary");
        assert!(format!("{err:#}").contains("starting paceline agent"), "{err:#}");
    }
}
