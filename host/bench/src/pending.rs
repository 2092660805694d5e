//! `paceline bench pending`: what "why pending" costs when it is read
//! (decision 0026): `GetJob` (the job's summary and warnings) and
//! `ListTasks` (every task's kind and reason) of a large job none of whose
//! instances is running, on many simulated hosts. Figures only, never a test.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

/// Arguments of `bench pending`.
#[derive(Debug, Args)]
pub struct PendingBenchArgs {
    /// Simulated hosts.
    #[arg(long, default_value_t = 10_000)]
    hosts: u32,
    /// Instances of the job that waits (each needs more than any host has).
    #[arg(long, default_value_t = 10_000)]
    instances: u32,
    /// Reads timed per call (the median and the slowest are reported).
    #[arg(long, default_value_t = 10)]
    reads: u32,
}

/// A request as the open API's principal (the services refuse one without a
/// principal, and a `user`'s would be narrowed to its pools).
fn as_admin<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.extensions_mut().insert(Arc::new(paceline_api::auth::Principal::anonymous()));
    request
}

/// Runs `bench pending`.
pub fn run(args: PendingBenchArgs) -> anyhow::Result<ExitCode> {
    use paceline_hostmgr::{HostShape, SimConfig, SimProvider};
    use paceline_model::Resources;
    use paceline_model::job::{JobConfig, JobKind};
    use paceline_model::pool::{PerKind, PoolSpec};
    use paceline_model::task::TaskSpec;
    use paceline_proto::v1 as pb;
    use paceline_server::cluster::{AssembleConfig, Cluster};
    use pb::job_service_server::JobService;
    use pb::task_service_server::TaskService;

    if cfg!(debug_assertions) {
        println!("(DEBUG build - figures not meaningful; use --release)");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let dir = tempfile::tempdir()?;
        let start_ms = paceline_joints::Clock::now_ms(&paceline_joints::SystemClock);
        let sim = Arc::new(SimProvider::new(SimConfig {
            shapes: vec![
                HostShape::new(args.hosts as usize, "h-", Resources::new(8_000, 32_768, 1_000_000, 0))
                    .attribute("zone", "a"),
            ],
            start_ms,
            ..SimConfig::default()
        }));
        let clock = sim.clock();
        let store: Arc<dyn paceline_storage::Store> =
            Arc::new(paceline_storage::sqlite::SqliteStore::open(dir.path().join("bench.db"))?);
        let hosts = crate::hosts::sim_host_manager(&sim).await?;
        let rt = Arc::new(paceline_plugin::PluginRuntime::new(paceline_plugin::RuntimeConfig::default())?);
        let registry =
            Arc::new(paceline_plugin::Registry::open(rt, Arc::new(paceline_plugin::MemoryStore::default()))?);
        let config = AssembleConfig { install_default_plugins: true, ..AssembleConfig::default() };
        let mut refused = None;
        let cluster = Cluster::assemble(store, registry, hosts, Arc::new(clock.clone()), config, |rm| {
            let all = PerKind { cpu: 1 << 40, memory: 1 << 40, disk: 1 << 40, gpu: 1 << 20 };
            rm.set_capacity(Resources::new(1 << 40, 1 << 40, 1 << 40, 1 << 20));
            if let Err(e) = rm.create_pool("/bench", PoolSpec { reservation: all, ..PoolSpec::default() }) {
                refused = Some(e.to_string());
            }
        })
        .await?;
        if let Some(e) = refused {
            anyhow::bail!("creating the pool: {e}");
        }
        // Too big for any host: every instance is admitted, tried, and waits.
        let job = JobConfig {
            name: "big".into(),
            owner: "bench".into(),
            pool: "/bench".into(),
            kind: JobKind::Batch,
            instance_count: args.instances,
            default_task: TaskSpec {
                command: "serve".into(),
                resources: Resources::new(16_000, 256, 10, 0),
                ..TaskSpec::default()
            },
            ..JobConfig::default()
        };
        cluster.jobs.create("big", job).await?;
        // Enough rounds for every instance to be tried once.
        for _ in 0..(args.instances / 1_000 + 3) {
            sim.advance(1_000).await;
            cluster.step(sim.now_ms()).await;
        }
        let roles = cluster.roles();
        let jobs = paceline_api::jobs::JobApi::new(roles.jobs.clone(), roles.hosts.clone());
        let tasks = paceline_api::tasks::TaskApi::new(roles.jobs.clone(), roles.hosts.clone());
        // What a read costs without "why pending": the job manager's own read.
        let mut plain_times = Vec::new();
        for _ in 0..args.reads.max(1) {
            let started = Instant::now();
            cluster.jobs.get("big").await?;
            plain_times.push(started.elapsed());
        }
        // The copy of the host list a read takes (once per read).
        let started = Instant::now();
        let host_copy = cluster.hosts.hosts().len();
        let copy_ms = started.elapsed().as_secs_f64() * 1000.0;
        let mut get_times = Vec::new();
        let mut list_times = Vec::new();
        let mut summary = String::new();
        let mut waiting = 0;
        for _ in 0..args.reads.max(1) {
            let started = Instant::now();
            let got = jobs.get_job(as_admin(pb::GetJobRequest { id: "big".into(), config_version: None })).await?;
            get_times.push(started.elapsed());
            summary = got.into_inner().job.and_then(|j| j.status).map(|s| s.pending_summary).unwrap_or_default();
            // Every page of the job's tasks (a page holds at most 5,000).
            let started = Instant::now();
            let (mut page_token, mut listed) = (String::new(), Vec::new());
            loop {
                let request = pb::ListTasksRequest { job_id: "big".into(), states: vec![], limit: 0, page_token };
                let page = tasks.list_tasks(as_admin(request)).await?.into_inner();
                listed.extend(page.tasks);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            list_times.push(started.elapsed());
            waiting = listed.iter().filter(|t| !t.pending_kind.is_empty()).count();
        }
        let stats = |times: &mut Vec<Duration>| {
            times.sort();
            let median = times[times.len() / 2].as_secs_f64() * 1000.0;
            let slowest = times.last().copied().unwrap_or(Duration::ZERO).as_secs_f64() * 1000.0;
            (median, slowest)
        };
        let (plain_median, plain_slowest) = stats(&mut plain_times);
        let (get_median, get_slowest) = stats(&mut get_times);
        let (list_median, list_slowest) = stats(&mut list_times);
        println!("why pending: {} hosts, a job of {} instances; summary: {summary}", args.hosts, args.instances);
        println!(
            "JobManager::get alone (no why pending): median {plain_median:.1} ms, slowest {plain_slowest:.1} ms of {} reads",
            plain_times.len()
        );
        println!("copy of the host list ({host_copy} hosts): {copy_ms:.1} ms");
        println!(
            "GetJob (summary and warnings): median {get_median:.1} ms, slowest {get_slowest:.1} ms of {} reads",
            get_times.len()
        );
        println!(
            "ListTasks ({waiting} tasks with a kind and reason): median {list_median:.1} ms, slowest {list_slowest:.1} ms of {} reads",
            list_times.len()
        );
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
