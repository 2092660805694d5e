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

pub fn hosts(args: HostsBenchArgs) -> anyhow::Result<ExitCode> {
    debug_note();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let dir = tempfile::tempdir()?;
        let agent = agent_launches(dir.path(), args.tasks).await?;
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
async fn agent_launches(dir: &std::path::Path, n: usize) -> anyhow::Result<Duration> {
    let provider = AgentProvider::new(AgentConfig { heartbeat_interval_ms: 500, ..AgentConfig::default() });
    let hosts = HostManager::builder(Arc::new(provider.clone())).config(ManagerConfig::default()).start().await?;
    hosts.expect_runs(Vec::new()).await;
    let mut events = hosts.subscribe();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = format!("http://{}", listener.local_addr()?);
    let server = tokio::spawn(async move {
        let _ = provider.serve_with_listener(listener, std::future::pending()).await;
    });
    let mut child = Command::new(std::env::current_exe()?)
        .args(["agent", "--manager", &addr, "--hostname", "bench-agent", "--cpu-millis", "1000000", "--memory-mib", "1000000"])
        .arg("--data-dir")
        .arg(dir.join("agent"))
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
                run_id: format!("bench-{i}-1"),
                task_id: format!("bench-{i}"),
                spec: TaskSpec { command: "true".into(), resources: Resources::new(10, 64, 0, 0), ..TaskSpec::default() },
                env: Default::default(),
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

pub fn jobmgr(args: JobmgrBenchArgs) -> anyhow::Result<ExitCode> {
    debug_note();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let dir = tempfile::tempdir()?;
    let r = runtime.block_on(paceline_jobmgr::bench::run(dir.path(), args.instances)).map_err(anyhow::Error::msg)?;
    println!(
        "create: a {}-instance batch job persisted (SQLite) and every task handed to the resource manager in {:.0} ms ({} gangs; budget 1000 ms)",
        r.instances, r.create_ms, r.gangs_submitted
    );
    println!("goal state: {} transitions in memory at {:.0}/s (budget >= 100,000/s)", r.transitions, r.transitions_per_sec);
    Ok(ExitCode::SUCCESS)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
