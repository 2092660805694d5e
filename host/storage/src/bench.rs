//! `paceline bench storage`: persist a 10,000-instance job (config and every
//! task runtime), then measure task-runtime compare-and-set updates per
//! second in batches; on Cassandra also the Paxos compare-and-set used
//! before decision 0049 and plain writes without any version check. The
//! Cassandra handle claims a leader epoch first, as an elected server does,
//! so its figures include the fence reads.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use paceline_model::Resources;
use paceline_model::job::{JobConfig, JobKind, JobRuntime};
use paceline_model::task::{TaskRuntime, TaskSpec, TaskState};

use crate::cassandra::CassandraStore;
use crate::config::CassandraConfig;
use crate::error::Result;
use crate::sqlite::SqliteStore;
use crate::store::Store;
use crate::types::TaskCas;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Instances of the job.
    pub instances: u32,
    /// Task runtimes per batch of updates.
    pub batch: usize,
    /// Rounds of updates over the whole job.
    pub rounds: u32,
    /// Where the SQLite file goes (a fresh temporary file if `None`).
    pub sqlite_path: Option<PathBuf>,
    /// `host:port` of a Cassandra node; skipped if `None`.
    pub cassandra: Option<String>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions { instances: 10_000, batch: 1_000, rounds: 3, sqlite_path: None, cassandra: None }
    }
}

/// Figures of one backend.
#[derive(Clone, Debug, Default)]
pub struct BackendFigures {
    /// `sqlite` or `cassandra`.
    pub backend: String,
    /// Time to write the job config, its runtime and every task runtime.
    pub create_job: Duration,
    /// Compare-and-set updates per second, in batches.
    pub cas_updates_per_sec: f64,
    /// Cassandra: the compare-and-set by Paxos of before decision 0049,
    /// updates per second, on a job of its own.
    pub lwt_updates_per_sec: Option<f64>,
    /// Plain (unconditional) updates per second, where measured.
    pub plain_updates_per_sec: Option<f64>,
    /// Time to read every task runtime of the job back.
    pub read_all: Duration,
}

/// The printable report.
#[derive(Clone, Debug, Default)]
pub struct BenchReport {
    /// Instances of the job.
    pub instances: u32,
    /// Batch size of updates.
    pub batch: usize,
    /// One entry per backend measured.
    pub backends: Vec<BackendFigures>,
    /// Why a backend was skipped, if one was.
    pub notes: Vec<String>,
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "storage benchmark: one job of {} instances, updates in batches of {}",
            self.instances, self.batch
        )?;
        writeln!(
            f,
            "{:<10} {:>14} {:>18} {:>18} {:>20} {:>12}",
            "backend", "create job", "CAS updates/s", "Paxos CAS/s", "plain updates/s", "read all"
        )?;
        for b in &self.backends {
            writeln!(
                f,
                "{:<10} {:>12.0}ms {:>18.0} {:>18} {:>20} {:>10.0}ms",
                b.backend,
                b.create_job.as_secs_f64() * 1e3,
                b.cas_updates_per_sec,
                b.lwt_updates_per_sec.map_or("-".to_string(), |v| format!("{v:.0}")),
                b.plain_updates_per_sec.map_or("-".to_string(), |v| format!("{v:.0}")),
                b.read_all.as_secs_f64() * 1e3,
            )?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

fn job(instances: u32) -> JobConfig {
    JobConfig {
        name: "bench".into(),
        owner: "bench".into(),
        pool: "/bench".into(),
        kind: JobKind::Batch,
        instance_count: instances,
        default_task: TaskSpec {
            command: "/bin/true".into(),
            args: vec!["--flag".into(), "value".into()],
            resources: Resources { cpu_millis: 500, memory_mib: 256, disk_mib: 100, gpu_milli: 0, ports: 0 },
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn run_one(store: &dyn Store, opts: &BenchOptions, job_id: &str) -> Result<BackendFigures> {
    let config = job(opts.instances);
    let start = Instant::now();
    store.create_job(job_id, &config, &JobRuntime::initial(1, 0)).await?;
    let tasks: Vec<(u32, TaskRuntime)> = (0..opts.instances).map(|i| (i, TaskRuntime::initial(1, 0))).collect();
    store.create_tasks(job_id, &tasks).await?;
    let create_job = start.elapsed();

    let mut versions: Vec<u64> = vec![1; opts.instances as usize];
    let states = [TaskState::Pending, TaskState::Ready, TaskState::Placing, TaskState::Placed, TaskState::Launching];
    let start = Instant::now();
    let mut n = 0u64;
    for round in 0..opts.rounds {
        for chunk in (0..opts.instances).collect::<Vec<_>>().chunks(opts.batch.max(1)) {
            let writes: Vec<TaskCas> = chunk
                .iter()
                .map(|&i| {
                    let mut rt = TaskRuntime::initial(1, u64::from(round));
                    rt.state = states[round as usize % states.len()];
                    TaskCas { instance: i, expected_version: versions[i as usize], runtime: rt }
                })
                .collect();
            for (w, r) in writes.iter().zip(store.cas_tasks(job_id, &writes).await?) {
                versions[w.instance as usize] = r?;
                n += 1;
            }
        }
    }
    let cas_updates_per_sec = n as f64 / start.elapsed().as_secs_f64();

    let start = Instant::now();
    let all = store.tasks_of_job(job_id, &[]).await?;
    let read_all = start.elapsed();
    debug_assert_eq!(all.len(), opts.instances as usize);
    Ok(BackendFigures {
        backend: store.backend().to_string(),
        create_job,
        cas_updates_per_sec,
        lwt_updates_per_sec: None,
        plain_updates_per_sec: None,
        read_all,
    })
}

/// The Paxos compare-and-set of before decision 0049, on a job of its own.
async fn lwt_rate(store: &CassandraStore, opts: &BenchOptions, job_id: &str) -> Result<f64> {
    store.create_job(job_id, &job(opts.instances), &JobRuntime::initial(1, 0)).await?;
    let tasks: Vec<(u32, TaskRuntime)> = (0..opts.instances).map(|i| (i, TaskRuntime::initial(1, 0))).collect();
    store.create_tasks_for_lwt_baseline(job_id, &tasks).await?;
    let mut versions: Vec<u64> = vec![1; opts.instances as usize];
    let start = Instant::now();
    let mut n = 0u64;
    for round in 0..opts.rounds {
        for chunk in (0..opts.instances).collect::<Vec<_>>().chunks(opts.batch.max(1)) {
            let writes: Vec<TaskCas> = chunk
                .iter()
                .map(|&i| {
                    let mut rt = TaskRuntime::initial(1, u64::from(round));
                    rt.state = TaskState::Running;
                    TaskCas { instance: i, expected_version: versions[i as usize], runtime: rt }
                })
                .collect();
            for (w, r) in writes.iter().zip(store.cas_tasks_lwt(job_id, &writes).await?) {
                versions[w.instance as usize] = r?;
                n += 1;
            }
        }
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

async fn plain_rate(store: &CassandraStore, opts: &BenchOptions, job_id: &str) -> Result<f64> {
    let start = Instant::now();
    let mut n = 0u64;
    for round in 0..opts.rounds {
        for chunk in (0..opts.instances).collect::<Vec<_>>().chunks(opts.batch.max(1)) {
            let rows: Vec<(u32, TaskRuntime)> = chunk
                .iter()
                .map(|&i| {
                    let mut rt = TaskRuntime::initial(1, u64::from(round));
                    rt.state = TaskState::Running;
                    rt.version = 1000 + u64::from(round);
                    (i, rt)
                })
                .collect();
            store.put_tasks_unconditional(job_id, &rows).await?;
            n += rows.len() as u64;
        }
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Task runtime compare-and-sets per second of the Cassandra store `cfg`
/// configures (its contact points, replication, consistency, login, TLS),
/// measured as [`run`] measures a node, after claiming a leader epoch as an
/// elected server does. `cfg.keyspace` should be one of the caller's own:
/// the job written there is deleted, the keyspace is left to the caller.
/// What `bench server --store cassandra:…` compares its pipeline with.
pub async fn cassandra_limit(cfg: &CassandraConfig, opts: &BenchOptions) -> Result<f64> {
    let store = CassandraStore::connect(cfg).await?;
    store.claim_leadership(crate::types::now_ms()).await?;
    let job_id = format!("bench-{}", crate::types::now_ms());
    let figures = run_one(&store, opts, &job_id).await;
    // Best effort: the caller drops the keyspace anyway.
    let _ = store.delete_job(&job_id).await;
    Ok(figures?.cas_updates_per_sec)
}

/// Runs the benchmark and returns the report.
pub async fn run(opts: &BenchOptions) -> Result<BenchReport> {
    let mut report = BenchReport { instances: opts.instances, batch: opts.batch, ..Default::default() };
    let job_id = format!("bench-{}", crate::types::now_ms());

    let tmp;
    let path = match &opts.sqlite_path {
        Some(p) => p.clone(),
        None => {
            tmp =
                std::env::temp_dir().join(format!("paceline-bench-{}-{}", std::process::id(), crate::types::now_ms()));
            tmp.join("bench.db")
        }
    };
    let sqlite = SqliteStore::open(&path)?;
    report.backends.push(run_one(&sqlite, opts, &job_id).await?);
    drop(sqlite);
    if opts.sqlite_path.is_none()
        && let Some(dir) = path.parent()
    {
        let _ = std::fs::remove_dir_all(dir);
    }

    match &opts.cassandra {
        Some(addr) => {
            let cfg = CassandraConfig::local(addr, "paceline_bench").with_env_security();
            report.notes.push(format!(
                "cassandra: contact points {:?}, keyspace {} (replication {:?} when created), consistency {:?}",
                cfg.contact_points, cfg.keyspace, cfg.replication, cfg.consistency
            ));
            let store = CassandraStore::connect(&cfg).await?;
            // As an elected server does: every write then reads the fence.
            store.claim_leadership(crate::types::now_ms()).await?;
            let mut figures = run_one(&store, opts, &job_id).await?;
            let lwt_job = format!("{job_id}-paxos");
            figures.lwt_updates_per_sec = Some(lwt_rate(&store, opts, &lwt_job).await?);
            figures.plain_updates_per_sec = Some(plain_rate(&store, opts, &job_id).await?);
            report.backends.push(figures);
            for id in [&job_id, &lwt_job] {
                if let Err(e) = store.delete_job(id).await {
                    report.notes.push(format!("cleanup of cassandra bench job {id} failed: {e}"));
                }
            }
        }
        None => report.notes.push("cassandra skipped: no address given (PACELINE_CASSANDRA)".into()),
    }
    Ok(report)
}
