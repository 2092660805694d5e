//! `paceline bench server`: the pipeline as a user gets it. A real
//! `paceline server` (its configuration file's defaults: SQLite in its data
//! directory, the durable plugin registry with the built-in Wasm policies,
//! the API with its auth layer, the loop's period) over simulated hosts
//! (`hosts: {provider: sim}`); clients submit jobs through the gRPC API with
//! a bearer token, spread over a tree of pools, and the bench times until
//! every task is launched. Figures only, never a test.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use futures::StreamExt;
use paceline_model::Resources;
use paceline_model::job::{JobConfig, JobKind};
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::task::TaskSpec;
use paceline_proto::v1 as pb;
use pb::job_service_client::JobServiceClient;
use pb::pool_service_client::PoolServiceClient;

/// Arguments of `bench server`.
#[derive(Debug, Args)]
pub struct ServerBenchArgs {
    /// Jobs submitted.
    #[arg(long, default_value_t = 1_000)]
    jobs: u32,
    /// Instances per job.
    #[arg(long, default_value_t = 100)]
    instances: u32,
    /// Simulated hosts (8 cores, or enough for the work, as `bench pipeline` sizes them).
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// Teams: leaf pools under two organisations, each reserving its share
    /// of the cluster; jobs go to them in turn.
    #[arg(long, default_value_t = 10)]
    teams: u32,
    /// Clients submitting at once, each its own stream of CreateJob calls.
    #[arg(long, default_value_t = 32)]
    clients: usize,
}

use super::bench_hosts::PIPELINE_TASK as TASK;

pub fn run(args: ServerBenchArgs) -> anyhow::Result<ExitCode> {
    if cfg!(debug_assertions) {
        println!("(DEBUG build - figures not meaningful; use --release)");
    }
    let total = u64::from(args.jobs) * u64::from(args.instances);
    let host = super::bench_hosts::size_hosts(total, args.hosts, None)?;
    let cores = host.cpu_millis / 1_000;
    let teams = args.teams.max(1);
    let dir = tempfile::tempdir()?;
    // An admin token, as `paceline auth token --role admin` makes one.
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "version: 1\nprincipals:\n  - name: bench\n    role: admin\n    token_sha256: {}\n",
            paceline_api::auth::token_hash_hex(&token)
        ),
    )?;
    let yaml = format!(
        "data_dir: {}\napi_listen: 127.0.0.1:0\nagent_listen: 127.0.0.1:0\ntokens_file: {}\nhosts: {{provider: sim, hosts: {}, resources: {{cpu_millis: {}, memory_mib: {}, disk_mib: {}, gpus: 0}}, zones: 2}}\n",
        dir.path().join("data").display(),
        tokens.display(),
        args.hosts,
        host.cpu_millis,
        host.memory_mib,
        host.disk_mib,
    );
    let config: paceline::server::ServerConfig = serde_yaml::from_str(&yaml).context("the bench's server config")?;
    let engine = paceline_placement::EngineConfig::default();
    println!(
        "a real paceline server: its defaults (SQLite in its data dir, durable plugin registry, built-in Wasm policies, engine batch {} / {} hosts per lease, a step every {} ms, API auth on: every call carries an admin token)",
        engine.batch_size, engine.max_hosts_per_lease, config.loop_interval_ms
    );
    println!(
        "its config beyond the defaults: hosts: {{provider: sim, hosts: {}, {} cores / {} GiB each, zones: 2}}; API on 127.0.0.1; pools: 2 organisations, {teams} teams each reserving 1/{teams} of the cluster",
        args.hosts,
        cores,
        host.memory_mib / 1_024
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let data = dir.path().join("data");
    runtime.block_on(bench(args, config, token, host, total, &data))?;
    Ok(ExitCode::SUCCESS)
}

async fn bench(
    args: ServerBenchArgs,
    config: paceline::server::ServerConfig,
    token: String,
    host: Resources,
    total: u64,
    data: &std::path::Path,
) -> anyhow::Result<()> {
    let server = paceline::server::Server::start(config).await.context("starting the server")?;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.api_addr))?.connect().await?;
    let bearer = paceline_proto::bearer::Bearer::new(Some(&token))?;
    let api = tonic::service::interceptor::InterceptedService::new(channel, bearer);

    // The pool tree: /org-a and /org-b, the teams alternating under them,
    // each team reserving its share of the cluster (what entitlement divides).
    let teams = args.teams.max(1);
    let capacity = |per_host: u64| per_host.saturating_mul(args.hosts as u64);
    let share = |per_host: u64| capacity(per_host) / u64::from(teams);
    let mut pools = PoolServiceClient::new(api.clone());
    let mut leaves = Vec::new();
    for org in ["/org-a", "/org-b"] {
        let half = |per_host: u64| capacity(per_host) / 2;
        let spec = PoolSpec {
            reservation: PerKind {
                cpu: half(host.cpu_millis),
                memory: half(host.memory_mib),
                disk: half(host.disk_mib),
                gpu: 0,
            },
            ..PoolSpec::default()
        };
        pools
            .create_pool(pb::CreatePoolRequest {
                path: org.into(),
                spec: Some(paceline_api::pools::pool_spec_pb(&spec)),
            })
            .await
            .with_context(|| format!("creating {org}"))?;
    }
    for t in 0..teams {
        let path = format!("/org-{}/team-{t}", if t % 2 == 0 { 'a' } else { 'b' });
        let spec = PoolSpec {
            reservation: PerKind {
                cpu: share(host.cpu_millis),
                memory: share(host.memory_mib),
                disk: share(host.disk_mib),
                gpu: 0,
            },
            ..PoolSpec::default()
        };
        pools
            .create_pool(pb::CreatePoolRequest {
                path: path.clone(),
                spec: Some(paceline_api::pools::pool_spec_pb(&spec)),
            })
            .await
            .with_context(|| format!("creating {path}"))?;
        leaves.push(path);
    }

    let leaves = Arc::new(leaves);
    let instances = args.instances;
    let wall = Instant::now();
    let clients = {
        let api = api.clone();
        tokio::spawn(async move {
            futures::stream::iter(0..args.jobs)
                .map(|j| {
                    let mut client = JobServiceClient::new(api.clone());
                    let pool = leaves[j as usize % leaves.len()].clone();
                    async move {
                        let spec = JobConfig {
                            name: format!("bench-{j}"),
                            pool,
                            kind: JobKind::Batch,
                            instance_count: instances,
                            default_task: TaskSpec { command: "work".into(), resources: TASK, ..TaskSpec::default() },
                            ..JobConfig::default()
                        };
                        let request = pb::CreateJobRequest { spec: Some(paceline_api::convert::job_spec_pb(&spec)) };
                        client.create_job(request).await.map(|_| ()).map_err(|e| anyhow::anyhow!("job {j}: {e}"))
                    }
                })
                .buffer_unordered(args.clients.max(1))
                .collect::<Vec<_>>()
                .await
        })
    };
    let mut submitted = None;

    loop {
        let Some(launched) = server.cluster.hosts.run_count() else {
            bail!("the server's host manager counts no runs")
        };
        let launched = launched as u64;
        if launched >= total {
            break;
        }
        if submitted.is_none() && clients.is_finished() {
            submitted = Some(wall.elapsed());
        }
        if wall.elapsed() > Duration::from_secs(600) {
            bail!("gave up after 600 s with {launched} of {total} launched");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let launched_after = wall.elapsed();
    for created in clients.await? {
        created?;
    }
    let submitted = submitted.unwrap_or(launched_after);
    let store_bytes = dir_size(data);
    println!(
        "server: {total} tasks ({} jobs x {instances}) through the API onto {} simulated hosts: submitted in {:.0} ms, all launched after {:.0} ms = {:.0} tasks/s",
        args.jobs,
        args.hosts,
        submitted.as_secs_f64() * 1e3,
        launched_after.as_secs_f64() * 1e3,
        total as f64 / launched_after.as_secs_f64()
    );
    println!(
        "peak RSS (this process: server, simulated hosts and clients) {} MiB; store {:.1} MiB",
        peak_rss_mib().unwrap_or(0),
        store_bytes as f64 / (1 << 20) as f64
    );
    server.shutdown().await;
    Ok(())
}

/// Bytes under `dir`, recursively (0 where unreadable).
fn dir_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => dir_size(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    })
}

/// Peak resident memory of this process so far (VmHWM), MiB.
fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1_024)
}
