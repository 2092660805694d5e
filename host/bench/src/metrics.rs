//! `paceline bench metrics`: what one scrape of `/metrics` costs on a large
//! cluster (simulated hosts, many pools, the built-in Wasm policies), and
//! how large it is. Figures only; the goal (≤ 100 ms) is checked by reading
//! them, never by a test.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;

/// Arguments of `bench metrics`.
#[derive(Debug, Args)]
pub struct MetricsBenchArgs {
    /// Simulated hosts.
    #[arg(long, default_value_t = 10_000)]
    hosts: u32,
    /// Pools: a tenth (at least one) interior pools under the root, the rest leaves under them.
    #[arg(long, default_value_t = 11_000)]
    pools: u32,
    /// Scrapes timed (the median and the slowest are reported).
    #[arg(long, default_value_t = 20)]
    scrapes: u32,
}

/// Runs `bench metrics`.
pub fn run(args: MetricsBenchArgs) -> anyhow::Result<ExitCode> {
    use paceline_hostmgr::{HostShape, SimConfig, SimProvider};
    use paceline_model::Resources;
    use paceline_model::pool::{PerKind, PoolSpec};
    use paceline_server::cluster::{AssembleConfig, Cluster};

    if cfg!(debug_assertions) {
        println!("(DEBUG build - figures not meaningful; use --release)");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let dir = tempfile::tempdir()?;
        let start_ms = paceline_joints::Clock::now_ms(&paceline_joints::SystemClock);
        let sim = Arc::new(SimProvider::new(SimConfig {
            shapes: vec![HostShape::new(args.hosts as usize, "h-", Resources::new(8_000, 32_768, 1_000_000, 0))],
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
        let interior = (args.pools / 10).max(1);
        let leaves = args.pools.saturating_sub(interior);
        let config = AssembleConfig { install_default_plugins: true, ..AssembleConfig::default() };
        let mut refused = None;
        let cluster = Cluster::assemble(store, registry, hosts, Arc::new(clock.clone()), config, |rm| {
            // A parent reserves what its children reserve.
            let per_parent = u64::from(leaves.div_ceil(interior));
            let small = PerKind { cpu: 100, memory: 128, disk: 128, gpu: 0 };
            let parent = PerKind {
                cpu: small.cpu * per_parent,
                memory: small.memory * per_parent,
                disk: small.disk * per_parent,
                gpu: 0,
            };
            let pools = (0..interior)
                .map(|i| (format!("/d{i}"), parent))
                .chain((0..leaves).map(|j| (format!("/d{}/p{j}", j % interior), small)));
            for (path, reservation) in pools {
                if let Err(e) = rm.create_pool(&path, PoolSpec { reservation, ..PoolSpec::default() }) {
                    refused.get_or_insert(format!("{path}: {e}"));
                }
            }
        })
        .await?;
        if let Some(e) = refused {
            anyhow::bail!("creating the pools: {e}");
        }
        // One pass of the loops: hosts registered, entitlement computed.
        cluster.step(sim.now_ms()).await;
        let pools = cluster.resmgr.lock().map(|rm| rm.tree().len()).unwrap_or(0);
        let metrics = cluster.metrics.clone().ok_or_else(|| anyhow::anyhow!("the cluster keeps no metrics"))?;
        let mut times = Vec::with_capacity(args.scrapes as usize);
        let mut size = 0;
        let mut series = 0;
        for _ in 0..args.scrapes.max(1) {
            let started = Instant::now();
            let text = metrics.encode(false)?;
            times.push(started.elapsed());
            size = text.len();
            series = text.lines().filter(|l| !l.starts_with('#')).count();
        }
        times.sort();
        let median = times[times.len() / 2];
        let slowest = times.last().copied().unwrap_or(Duration::ZERO);
        println!(
            "metrics scrape: {} hosts, {pools} pools (root included): median {:.1} ms, slowest {:.1} ms of {} scrapes; {} bytes ({:.1} MiB), {series} series (goal: <= 100 ms)",
            cluster.hosts.hosts().len(),
            median.as_secs_f64() * 1000.0,
            slowest.as_secs_f64() * 1000.0,
            times.len(),
            size,
            size as f64 / (1024.0 * 1024.0),
        );
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
