//! # paceline-bench
//!
//! The benchmarks behind `paceline bench <area>`: each runs real parts (the
//! assembled roles of `paceline-server`, the placement engine, the plugin
//! runtime, the stores, a real agent, a real Kubernetes control plane) and
//! prints figures and ratios to stdout. Timing goals live here, never in
//! tests. Build with `--release` for figures worth recording
//! (docs/benchmarks.md lists the commands and quotes their output).
//!
//! - **Owns**: the benchmarks' workloads, their timing and their printed
//!   reports ([`plugin`], [`hosts`], [`metrics`], [`pending`], [`peers`],
//!   [`server`], [`kubernetes`], and the storage, job-query and resource
//!   manager benches in [`run`]); their command-line arguments ([`BenchCommand`]
//!   and one `clap` struct per bench, so a flag, its default and its help
//!   are written once, beside the code that reads them).
//! - **Receives**: parsed arguments and a [`BenchEnv`] (the `paceline`
//!   binary `bench hosts` starts as its agent, the checkout `--languages`
//!   builds the example plugins in).
//! - **Must not**: be a dependency of any role or of `paceline-server`;
//!   decide anything a role owns; hold tests with timing goals. Its errors
//!   are `anyhow` (decision 0058): a benchmark is a command's body that
//!   prints or fails, never a library whose callers match on errors.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};

pub mod hosts;
pub mod kubernetes;
mod languages;
pub mod metrics;
pub mod peers;
pub mod pending;
pub mod plugin;
pub mod server;
mod store_records;

/// What a benchmark needs from the program that runs it.
#[derive(Debug, Clone)]
pub struct BenchEnv {
    /// The `paceline` binary: `bench hosts` starts `paceline agent` from it.
    pub paceline: PathBuf,
    /// A Paceline checkout: `bench plugin --languages` runs
    /// `plugins/examples/build.sh` there.
    pub checkout: PathBuf,
}

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Wasm vs native placement, round trip, activation and deploy costs.
    Plugin(plugin::PluginBenchArgs),
    /// Entitlement over 10,000 pools, admission throughput, queue memory.
    Resmgr,
    /// Persisting a large job and task-runtime update rates, SQLite and Cassandra.
    Storage(StorageBenchArgs),
    /// One real agent running trivial tasks; host-manager leases and status throughput on simulated hosts.
    Hosts(hosts::HostsBenchArgs),
    /// Creating a large batch job and killing it while it waits; goal-state transitions in memory.
    Jobmgr(hosts::JobmgrBenchArgs),
    /// The whole pipeline on simulated hosts: jobs submitted, placed by the Wasm policies, launched.
    Pipeline(hosts::PipelineBenchArgs),
    /// Job queries (by owner, pool, label, state; live jobs) on a store of many jobs.
    JobQueries(JobQueriesBenchArgs),
    /// One scrape of `/metrics` on 10,000 simulated hosts and 11,000 pools: time and size.
    Metrics(metrics::MetricsBenchArgs),
    /// "Why pending" when read: GetJob and ListTasks of a large waiting job on 10,000 simulated hosts.
    Pending(pending::PendingBenchArgs),
    /// Nomad's, YuniKorn's and the Kubernetes scheduler's own benchmark shapes through the placement engine.
    Peers(peers::PeersBenchArgs),
    /// The pipeline through a real `paceline server` and its gRPC API with auth, over simulated hosts.
    Server(server::ServerBenchArgs),
    /// Binding rates on a real Kubernetes control plane: the API server's limits, Paceline's own pods, kube-scheduler.
    Kubernetes(kubernetes::KubernetesBenchArgs),
}

/// Arguments of `bench storage`.
#[derive(Debug, Args)]
pub struct StorageBenchArgs {
    /// Instances of the job.
    #[arg(long, default_value_t = 10_000)]
    instances: u32,
    /// Task runtimes per batch of updates.
    #[arg(long, default_value_t = 1_000)]
    batch: usize,
    /// Rounds of updates over the whole job.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// `host:port` of a Cassandra node to measure too (e.g. after `deploy/cassandra/cassandra.sh start`).
    #[arg(long, env = "PACELINE_CASSANDRA")]
    cassandra: Option<String>,
}

/// Arguments of `bench job-queries`.
#[derive(Debug, Args)]
pub struct JobQueriesBenchArgs {
    /// Jobs to create (one task each) before the queries.
    #[arg(long, default_value_t = 100_000)]
    jobs: u32,
    /// Creates in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// `host:port` of a Cassandra node (its login and TLS from the
    /// `PACELINE_CASSANDRA_*` variables `deploy/cassandra/cassandra.sh env`
    /// prints); a keyspace `paceline_bench_qSECONDS` of its own, dropped at
    /// the end. Without it only SQLite is measured.
    #[arg(long, env = "PACELINE_CASSANDRA")]
    cassandra: Option<String>,
    /// Skip SQLite.
    #[arg(long)]
    no_sqlite: bool,
}

fn job_queries(a: JobQueriesBenchArgs) -> anyhow::Result<ExitCode> {
    use paceline_storage::bench_queries;
    if cfg!(debug_assertions) {
        println!("(DEBUG build - figures not meaningful; use --release)");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        if !a.no_sqlite {
            let dir = tempfile::tempdir()?;
            let store: Arc<dyn paceline_storage::Store> =
                Arc::new(paceline_storage::sqlite::SqliteStore::open(dir.path().join("paceline.db"))?);
            let report = bench_queries::run(store, None, a.jobs, a.concurrency).await?;
            print!("{report}");
            let size = std::fs::metadata(dir.path().join("paceline.db")).map(|m| m.len()).unwrap_or(0);
            println!("sqlite file: {:.1} MiB\n", size as f64 / (1 << 20) as f64);
        }
        if let Some(addr) = a.cassandra.filter(|s| !s.is_empty()) {
            // A keyspace of its own, dropped at the end.
            let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let ks = format!("paceline_bench_q{secs}");
            let cfg = paceline_storage::CassandraConfig::local(&addr, &ks).with_env_security();
            let store = Arc::new(paceline_storage::cassandra::CassandraStore::connect(&cfg).await?);
            let report = bench_queries::run(store.clone(), Some(store.as_ref()), a.jobs, a.concurrency).await;
            let dropped = store.session().query_unpaged(format!("DROP KEYSPACE IF EXISTS {ks}"), &[]).await;
            print!("{}", report?);
            if let Err(e) = dropped {
                println!("(keyspace {ks} not dropped: {e})");
            }
        } else {
            println!("cassandra skipped: no --cassandra / PACELINE_CASSANDRA");
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Runs one benchmark, printing its figures.
pub fn run(cmd: BenchCommand, env: &BenchEnv) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Plugin(a) => plugin::run(a, env),
        BenchCommand::Hosts(a) => hosts::hosts(a, env),
        BenchCommand::Jobmgr(a) => hosts::jobmgr(a),
        BenchCommand::Pipeline(a) => hosts::pipeline(a),
        BenchCommand::Metrics(a) => metrics::run(a),
        BenchCommand::Pending(a) => pending::run(a),
        BenchCommand::Peers(a) => peers::run(a),
        BenchCommand::Server(a) => server::run(a),
        BenchCommand::Kubernetes(a) => kubernetes::run(a),
        BenchCommand::JobQueries(a) => job_queries(a),
        BenchCommand::Resmgr => {
            if cfg!(debug_assertions) {
                println!("(DEBUG build - figures not meaningful; use --release)");
            }
            print!("{}", paceline_resmgr::bench::report());
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Storage(a) => {
            if cfg!(debug_assertions) {
                println!("(DEBUG build - figures not meaningful; use --release)");
            }
            let options = paceline_storage::bench::BenchOptions {
                instances: a.instances,
                batch: a.batch,
                rounds: a.rounds,
                sqlite_path: None,
                cassandra: a.cassandra.filter(|s| !s.is_empty()),
            };
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let report = runtime.block_on(paceline_storage::bench::run(&options))?;
            print!("{report}");
            Ok(ExitCode::SUCCESS)
        }
    }
}
