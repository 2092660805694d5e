//! # paceline-sim-runner
//!
//! The replay runner of `paceline sim`: a trace's events driven through
//! the real roles — job manager with its lifecycle plugins, resource
//! manager, placement engine with the Wasm policies, host manager over the
//! `sim` provider — on a virtual clock that jumps from one event to the
//! next, and the observations it makes turned into a
//! [`paceline_sim::Report`].
//!
//! - **Owns**: the replay loop, its virtual clock, the scripted runs of the
//!   `sim` provider and the observations a report is made from.
//! - **Receives**: a trace (read by `paceline_sim`), policy bytes, a seed.
//! - **Hands on**: a [`paceline_sim::Report`]; nothing is written anywhere
//!   but an in-memory store.
//! - **Must not**: read the wall clock for anything a report shows (only
//!   `Report::measured`), reach a real store or provider, or print: the
//!   binary renders what this returns.
//!
//! # Determinism
//! The same trace, policies and seed give the same report, byte for byte
//! (`Report::measured` aside, which holds wall-clock figures):
//! - the caller runs this on a current-thread Tokio runtime, so the roles'
//!   tasks interleave only where they await;
//! - the store is in memory (`paceline_storage::memory`): no writer thread
//!   whose answers could come back in another order;
//! - the job manager handles one job at a time (`concurrent_jobs = 1`), so
//!   its writes, plugin calls and resource-manager calls happen in job order
//!   whichever plugin call returns first;
//! - every phase of a step ends with `HostAccess::sync`, so what the host
//!   manager applied (run ends, freed capacity) is the same at every phase
//!   boundary whatever the scheduling in between (`Cluster::step` does not
//!   sync: on a wall clock that would only add waits);
//! - runs end on the virtual clock only (scripted durations of at least
//!   1 ms), never during a placement round;
//! - plugins get a fresh instance per call and a wall-clock deadline far
//!   beyond any sane call, so machine load cannot make a call fall back;
//! - heartbeats and their deadlines are off (hosts fail only when the trace
//!   says so), as are redeliveries (every update is acknowledged in the
//!   step that handled it);
//! - the report is built from ordered maps and sorted inputs.
//!
//! # Time
//! The loop period (`tick_ms`, 1 s by default) is the resolution: events
//! and run ends take effect at the next step at or after them. After a step
//! that changed nothing the clock jumps to the next thing due: a trace
//! event, a run's end, a job-manager deadline or a resource-manager timer.

use std::collections::{BTreeMap, VecDeque};
use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use paceline_hostmgr::{
    HostManager, LogChunk, LogStream, ManagerConfig, Provider, ProviderError, ProviderEvent, SimConfig, SimProvider,
};
use paceline_model::job::JobConfig;
use paceline_model::run::LaunchRequest;
use paceline_model::task::TaskState;
use paceline_plugin::{DeployOptions, Registry, RuntimeConfig};
use paceline_server::cluster::{AssembleConfig, Cluster};
use paceline_sim::report::{
    FillObserved, HostLife, Measured, Observed, Outcome, PluginCalls, PluginLatency, PoolSample, RunLife, TaskLife,
};
use paceline_sim::trace::{Event, MaintenanceTo, RunScript};
use paceline_sim::{Reader, Report, TraceError};
use paceline_storage::memory::MemoryStore;
use tokio::sync::mpsc;

mod arrival;
mod observe;
mod runner;
mod scripted;

use arrival::*;
use runner::*;
use scripted::*;

/// Virtual time of the trace's 0 on the simulator's clock.
pub const BASE_MS: u64 = 1_000_000_000;

/// A replay that could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The trace is malformed (line and field named).
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A policy could not be loaded or swapped in.
    #[error("policy {slot} = {plugin}: {message}")]
    Policy {
        /// Slot.
        slot: String,
        /// Plugin.
        plugin: String,
        /// Why.
        message: String,
    },
    /// The trace asks for something the cluster refuses (line named).
    #[error("line {line}: {message}")]
    Refused {
        /// Trace line.
        line: u64,
        /// Why.
        message: String,
    },
    /// Wiring the roles failed.
    #[error("starting the simulated cluster: {0}")]
    Start(String),
}

/// Where a policy comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicySource {
    /// A built-in policy by name (`binpack`, `spread`, `gang-gpu`,
    /// `priority-preempt`, `batch`, `stateless`, `stateful`, `daemon`, and the
    /// GPU-sharing `gpu-fgd`, `gpu-random`, `gpu-bestfit`, `gpu-dotprod`,
    /// `gpu-packing`).
    Builtin(String),
    /// A component's bytes, with the name it is known by.
    Wasm {
        /// Name (the file's stem).
        name: String,
        /// Component bytes.
        bytes: Vec<u8>,
    },
}

/// The built-in component `name` ([`paceline_plugin::builtins`], the one
/// table `sim --policy`, `plugin deploy --builtin` and `plugin list` read).
pub fn builtin(name: &str) -> Option<&'static [u8]> {
    paceline_plugin::builtins::by_name(name).map(|b| b.bytes)
}

/// A progress callback: (virtual ms, the trace's span in ms if known, tasks arrived).
pub type Progress = Box<dyn FnMut(u64, Option<u64>, u64)>;

/// Settings of one replay.
pub struct Options {
    /// Loop period and time resolution, ms.
    pub tick_ms: u64,
    /// Passed to the simulator (its random runs) and into the report.
    pub seed: u64,
    /// Policies at the start: (slot or `placement`, source).
    pub policies: Vec<(String, PolicySource)>,
    /// Components the trace's `policy` lines may name.
    pub plugins: BTreeMap<String, Vec<u8>>,
    /// Samples for the report's series.
    pub samples: u64,
    /// Attribute whose spread over a job's tasks is reported.
    pub spread_key: String,
    /// Stop at this trace time even if work remains.
    pub until_ms: Option<u64>,
    /// Most tasks a placement round takes per job kind.
    pub batch_size: usize,
    /// Tasks in the engine's workload mix (`EngineConfig::workload_window`).
    pub workload_window: usize,
    /// Called about every 200 ms of wall time.
    pub progress: Option<Progress>,
    /// How the trace's jobs arrive.
    pub arrival: Arrival,
    /// Put every task's runs into the report (`Report::tasks`).
    pub list_tasks: bool,
    /// Feasible hosts offered to placement policies per group of alike
    /// tasks (decision 0054): the registry's default for every placement slot.
    pub candidates: paceline_plugin::Candidates,
}

/// How a replay feeds the trace's jobs to the cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Arrival {
    /// At their trace times, each run as the trace scripts it.
    #[default]
    ByTime,
    /// "Arrive until full": times ignored, jobs submitted in trace order,
    /// each once the one before it is placed or known not to fit, and no
    /// run ever ends. It measures how much of the trace's work the cluster
    /// holds at once under the placement policy (fragmentation), which a
    /// replay by time cannot when arrivals are spread out. Hosts and pools
    /// join as their lines come; kills, updates, failures, maintenance and
    /// policy swaps are about time and are dropped (counted in the report).
    UntilFull {
        /// Stop at the first job that cannot be placed whole; otherwise go
        /// on through the trace, leaving such jobs waiting.
        stop_at_first_unplaced: bool,
        /// Go on until the GPU asked for by the jobs submitted reaches this
        /// percentage of the cluster's GPU capacity, offering the trace's
        /// jobs again (ids suffixed `.r2`, `.r3`, …) when it runs out (the
        /// fragmentation paper's experiment); `None`: the trace once.
        until_gpu_pct: Option<u32>,
        /// Jobs in a random order drawn from this seed (hosts, pools and
        /// the rest first, as the trace has them), a new order each time the
        /// trace is offered again; `None`: the trace's order.
        shuffle: Option<u64>,
    },
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options").field("tick_ms", &self.tick_ms).field("seed", &self.seed).finish_non_exhaustive()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tick_ms: 1_000,
            seed: 0,
            policies: Vec::new(),
            plugins: BTreeMap::new(),
            samples: 240,
            spread_key: "zone".into(),
            until_ms: None,
            batch_size: 1_000,
            workload_window: paceline_placement::workload::WINDOW,
            progress: None,
            arrival: Arrival::ByTime,
            list_tasks: false,
            candidates: paceline_plugin::Candidates::Auto,
        }
    }
}

/// Replays a trace. Run it on a current-thread runtime (see the module docs).
pub async fn replay(input: impl BufRead, mut options: Options) -> Result<Report, SimError> {
    let wall = Instant::now();
    let reader = Reader::new(input)?;
    let header = reader.header().clone();
    let tick = options.tick_ms.max(1);
    let store = Arc::new(MemoryStore::new());
    let sim = Arc::new(SimProvider::new(SimConfig {
        shapes: Vec::new(),
        seed: options.seed,
        heartbeat_interval_ms: u64::MAX / 4,
        redeliver_after_ms: u64::MAX / 4,
        start_ms: BASE_MS,
        ..SimConfig::default()
    }));
    let scripts = Arc::new(Mutex::new(Scripts::default()));
    let provider = Arc::new(Scripted { sim: (*sim).clone(), scripts: scripts.clone() });
    let clock = sim.clock();
    let hosts = HostManager::builder(provider)
        .clock(Arc::new(clock.clone()))
        .config(ManagerConfig {
            tick_interval: None,
            heartbeat_timeout_ms: u64::MAX / 4,
            launch_timeout_ms: u64::MAX / 4,
            redeliver_after_ms: u64::MAX / 4,
            auto_down_when_drained: true,
            event_buffer: 1 << 20,
        })
        .start()
        .await
        .map_err(|e| SimError::Start(e.to_string()))?;
    let runtime = paceline_plugin::PluginRuntime::new(RuntimeConfig {
        reuse_instance_calls: 0,
        call_deadline: Duration::from_secs(60),
        ..RuntimeConfig::default()
    })
    .map_err(|e| SimError::Start(e.to_string()))?;
    let registry = Arc::new(
        Registry::open(Arc::new(runtime), Arc::new(paceline_plugin::MemoryStore::default()))
            .map_err(|e| SimError::Start(e.to_string()))?,
    );
    registry.set_default_candidates(options.candidates);
    let config = AssembleConfig {
        install_default_plugins: true,
        engine: paceline_placement::EngineConfig {
            batch_size: options.batch_size.max(1),
            max_hosts_per_lease: usize::MAX / 2,
            lease_ttl: Duration::from_secs(3_600),
            workload_window: options.workload_window.max(1),
            ..Default::default()
        },
        jobs: paceline_jobmgr::JobManagerConfig { concurrent_jobs: 1, max_instances: 1_000_000, ..Default::default() },
        ..AssembleConfig::default()
    };
    let store_dyn: Arc<dyn paceline_storage::Store> = store.clone();
    let cluster = Cluster::assemble(store_dyn, registry.clone(), hosts, Arc::new(clock), config, |_| {})
        .await
        .map_err(|e| SimError::Start(e.to_string()))?;
    let mut runner = Runner {
        cluster,
        sim: sim.clone(),
        store,
        registry,
        scripts,
        jobs: BTreeMap::new(),
        lives: BTreeMap::new(),
        hosts: Vec::new(),
        host_index: BTreeMap::new(),
        pools: Vec::new(),
        leaf_samples: BTreeMap::new(),
        samples_ms: Vec::new(),
        swaps: Vec::new(),
        plugins: std::mem::take(&mut options.plugins),
        tasks_arrived: 0,
        no_preemption: matches!(options.arrival, Arrival::UntilFull { .. }),
    };
    for (slot, source) in &options.policies {
        runner.swap(slot, source).await?;
    }
    let policies: BTreeMap<String, String> =
        runner.registry.list().into_iter().filter_map(|s| s.active.map(|a| (s.slot, a))).collect();
    let sample_every = {
        let span = header.duration_ms.unwrap_or(3_600_000).max(1);
        (span / options.samples.max(1)).max(tick)
    };

    let mut reader = reader;
    let mut fill = None;
    let (now, steps) = match options.arrival {
        Arrival::UntilFull { stop_at_first_unplaced, until_gpu_pct, shuffle } => {
            // The span of a fill is not the trace's and is not known before
            // it ends: one sample per step, thinned afterwards.
            let (now, steps, seen) = runner
                .fill(
                    &mut reader,
                    tick,
                    tick,
                    FillMode { stop_at_first_unplaced, until_gpu_pct, shuffle },
                    &mut options.progress,
                )
                .await?;
            runner.thin_samples(options.samples.max(1) as usize);
            fill = Some(seen);
            (now, steps)
        }
        Arrival::ByTime => by_time(&mut runner, &mut reader, &header, tick, sample_every, &mut options).await?,
    };
    runner.sample_until(now + 1, sample_every);
    runner.observe();

    // Where each task ended up.
    let mut tasks = Vec::new();
    let job_ids: Vec<String> = runner.jobs.keys().cloned().collect();
    for id in job_ids {
        let Some(meta) = runner.jobs.get(&id) else { continue };
        let (config, arrived, rejected) = (meta.config.clone(), meta.arrived_ms, meta.rejected.clone());
        let runtimes = match (&rejected, runner.cluster.jobs.get(&id).await) {
            (None, Ok(info)) => info.tasks,
            _ => Vec::new(),
        };
        let count = if rejected.is_some() { config.instance_count as usize } else { runtimes.len() };
        for i in 0..count as u32 {
            let mut life = runner.lives.remove(&(id.clone(), i)).unwrap_or_default();
            // A run's first event is its placement: a run never placed has none.
            let current = runtimes.get(i as usize).map(|rt| rt.run);
            if let Some(run) = current
                && !life.runs.iter().any(|r| r.run == run)
            {
                let queued_ms =
                    if run == 1 { arrived } else { life.runs.last().and_then(|r| r.ended_ms).unwrap_or(arrived) };
                life.runs.push(RunLife { run, queued_ms, ..RunLife::default() });
            }
            let placed = life.runs.iter().any(|r| r.placed_ms.is_some());
            let state = runtimes.get(i as usize).map(|rt| rt.state);
            let (outcome, reason) = match (&rejected, state) {
                (Some(why), _) => (Outcome::NeverPlaced, Some(why.clone())),
                (None, Some(TaskState::Succeeded)) => (Outcome::Succeeded, None),
                (None, Some(TaskState::Failed)) => (Outcome::Failed, None),
                (None, Some(TaskState::Lost)) => (Outcome::Lost, None),
                (None, Some(TaskState::Killed)) => (Outcome::Killed, None),
                (None, Some(s)) if s.is_on_host() || s == TaskState::Placed => (Outcome::Running, None),
                (None, s) => {
                    let why = runner.why_waiting(&id, i, s);
                    if placed { (Outcome::Waiting, Some(why)) } else { (Outcome::NeverPlaced, Some(why)) }
                }
            };
            tasks.push(TaskLife {
                job: id.clone(),
                instance: i,
                pool: config.pool.clone(),
                kind: config.kind.as_str().to_string(),
                demand: config.task_spec(i).resources,
                arrived_ms: arrived,
                runs: life.runs,
                outcome,
                reason,
            });
        }
    }
    let mut plugins = Vec::new();
    let mut latency = Vec::new();
    for slot in runner.registry.list() {
        for v in slot.versions.iter().filter(|v| v.metrics.calls > 0) {
            plugins.push(PluginCalls {
                slot: slot.slot.clone(),
                version: v.record.id(),
                calls: v.metrics.calls,
                faults: v.metrics.errors.values().sum(),
            });
            latency.push(PluginLatency {
                slot: slot.slot.clone(),
                version: v.record.id(),
                calls: v.metrics.calls,
                mean_us: v.metrics.mean_us,
                p50_us: v.metrics.p50_us,
                p99_us: v.metrics.p99_us,
            });
        }
    }
    let observed = Observed {
        trace: header.name.clone(),
        source: header.source.clone(),
        seed: options.seed,
        trace_seed: header.seed,
        tick_ms: tick,
        policies,
        swaps: runner.swaps.clone(),
        end_ms: now,
        hosts: runner.hosts.clone(),
        tasks,
        samples_ms: runner.samples_ms.clone(),
        pools: runner.leaf_samples.clone(),
        plugins,
        spread_key: options.spread_key.clone(),
        list_tasks: options.list_tasks,
        fill,
    };
    let mut report = observed.report();
    let wall_ms = wall.elapsed().as_millis() as u64;
    report.measured = Some(Measured {
        wall_ms,
        speedup: if wall_ms == 0 { 0.0 } else { now as f64 / wall_ms as f64 },
        steps,
        peak_rss_mib: peak_rss_mib(),
        plugins: latency,
    });
    Ok(report)
}
