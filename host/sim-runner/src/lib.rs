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
        }
    }
}

/// How each task's runs behave, by (job, instance), read by [`Scripted`].
#[derive(Debug, Default)]
struct Scripts {
    jobs: BTreeMap<String, (RunScript, Vec<RunScript>)>,
}

/// The `sim` provider with each launch's `SIM_*` environment filled in from
/// the trace's run scripts (a job spec of the trace says nothing about how
/// its runs behave; the trace's `run`/`runs` do).
#[derive(Debug)]
struct Scripted {
    sim: SimProvider,
    scripts: Arc<Mutex<Scripts>>,
}

fn script_env(s: RunScript, env: &mut BTreeMap<String, String>) {
    use paceline_hostmgr::sim::script::vars;
    // At least 1 ms: a run never ends inside the step that launched it.
    match s.ms {
        Some(ms) => {
            env.insert(vars::DURATION_MS.into(), ms.max(1).to_string());
        }
        None if s.exit != 0 || s.fail_runs > 0 => {
            env.insert(vars::DURATION_MS.into(), "1".into());
        }
        None => {}
    }
    if s.exit != 0 {
        env.insert(vars::EXIT_CODE.into(), s.exit.to_string());
    }
    if s.fail_runs > 0 {
        env.insert(vars::FAIL_RUNS.into(), s.fail_runs.to_string());
    }
}

#[async_trait]
impl Provider for Scripted {
    fn name(&self) -> &'static str {
        self.sim.name()
    }

    async fn start(&self, events: mpsc::Sender<ProviderEvent>) -> Result<(), ProviderError> {
        self.sim.start(events).await
    }

    async fn launch(&self, host: &str, mut runs: Vec<LaunchRequest>) -> Result<(), ProviderError> {
        {
            let scripts = self.scripts.lock().unwrap_or_else(|e| e.into_inner());
            for r in &mut runs {
                let job = r.env.get("PACELINE_JOB_ID").cloned().unwrap_or_default();
                let instance: usize = r.env.get("PACELINE_INSTANCE").and_then(|i| i.parse().ok()).unwrap_or(0);
                if let Some((default, per)) = scripts.jobs.get(&job) {
                    script_env(per.get(instance).copied().unwrap_or(*default), &mut r.env);
                }
            }
        }
        self.sim.launch(host, runs).await
    }

    async fn kill(&self, host: &str, run_id: &str, grace: Option<Duration>) -> Result<(), ProviderError> {
        self.sim.kill(host, run_id, grace).await
    }

    async fn acknowledge(&self, host: &str, run_id: &str, seq: u64) -> Result<(), ProviderError> {
        self.sim.acknowledge(host, run_id, seq).await
    }

    async fn reconcile(&self, host: &str, expected: Vec<String>) -> Result<(), ProviderError> {
        self.sim.reconcile(host, expected).await
    }

    async fn read_log(
        &self,
        host: &str,
        run_id: &str,
        stream: LogStream,
        offset: u64,
        max: u64,
    ) -> Result<LogChunk, ProviderError> {
        self.sim.read_log(host, run_id, stream, offset, max).await
    }
}

/// A job of the trace as the report needs it.
struct JobMeta {
    config: Arc<JobConfig>,
    arrived_ms: u64,
    rejected: Option<String>,
}

/// What the runner learns of one task from the store's events.
#[derive(Default)]
struct Life {
    runs: Vec<RunLife>,
}

struct Runner {
    cluster: Arc<Cluster>,
    sim: Arc<SimProvider>,
    store: Arc<MemoryStore>,
    registry: Arc<Registry>,
    scripts: Arc<Mutex<Scripts>>,
    jobs: BTreeMap<String, JobMeta>,
    lives: BTreeMap<(String, u32), Life>,
    hosts: Vec<HostLife>,
    host_index: BTreeMap<String, usize>,
    pools: Vec<String>,
    leaf_samples: BTreeMap<String, Vec<PoolSample>>,
    samples_ms: Vec<u64>,
    swaps: Vec<(u64, String, String)>,
    plugins: BTreeMap<String, Vec<u8>>,
    tasks_arrived: u64,
    /// "Arrive until full": the resource manager's preemption kills are not
    /// carried out (the mode measures packing; preempting would trade one
    /// job for another).
    no_preemption: bool,
}

fn rel(abs: u64) -> u64 {
    abs.saturating_sub(BASE_MS)
}

/// Expands `placement` to every placement slot.
fn slots_of(slot: &str) -> Vec<String> {
    if slot == "placement" {
        ["batch", "stateless", "stateful", "daemon"].iter().map(|k| format!("placement/{k}")).collect()
    } else {
        vec![slot.to_string()]
    }
}

fn pending_category(info: &paceline_resmgr::PendingInfo) -> String {
    use paceline_resmgr::PendingReason as P;
    let pool = &info.pool;
    match info.reason {
        P::NotEvaluated => format!("admission: not yet evaluated in {pool}"),
        P::OverEntitlement { kind, .. } => format!("admission: over entitlement ({kind}) in {pool}"),
        P::WaitingOnReservation { kind, .. } => format!("admission: waiting on reservation ({kind}) in {pool}"),
        P::OverSlackEntitlement { kind, .. } => format!("admission: over slack entitlement ({kind}) in {pool}"),
        P::OverControllerLimit { kind, .. } => format!("admission: over the controller limit ({kind}) in {pool}"),
        P::ClusterFull { kind, .. } => format!("admission: cluster full ({kind}), waiting for preemption"),
        P::ClusterUsedUp { kind, .. } => format!("admission: cluster's {kind} all in use by {pool}"),
        P::BehindHead { .. } => format!("admission: queued behind another gang in {pool}"),
        P::PoolCannotHold { kind, .. } => format!("admission: pool {pool} can never hold {kind}"),
    }
}

impl Runner {
    async fn swap(&mut self, slot: &str, source: &PolicySource) -> Result<(), SimError> {
        let (name, bytes): (String, Vec<u8>) = match source {
            PolicySource::Builtin(n) => match builtin(n).or_else(|| self.plugins.get(n).map(Vec::as_slice)) {
                Some(b) => (n.clone(), b.to_vec()),
                None => {
                    return Err(SimError::Policy {
                        slot: slot.into(),
                        plugin: n.clone(),
                        message: format!(
                            "not a built-in policy ({}) nor one given with --plugin NAME=PATH",
                            paceline_plugin::builtins::names()
                        ),
                    });
                }
            },
            PolicySource::Wasm { name, bytes } => (name.clone(), bytes.clone()),
        };
        let version = match source {
            PolicySource::Builtin(_) if builtin(&name).is_some() => crate_version_label(),
            _ => format!("sha-{}", &paceline_plugin::PluginRuntime::sha256_hex(&bytes)[..12]),
        };
        for slot in slots_of(slot) {
            let registry = self.registry.clone();
            let (n, version, bytes) = (name.clone(), version.clone(), bytes.clone());
            let s = slot.clone();
            let fail = |message: String| SimError::Policy { slot: slot.clone(), plugin: name.clone(), message };
            let r = tokio::task::spawn_blocking(move || {
                let name = n;
                let id = format!("{name}@{version}");
                let known =
                    registry.list().iter().any(|x| x.slot == s && x.versions.iter().any(|v| v.record.id() == id));
                if !known {
                    registry.deploy(&s, &name, &version, &bytes, DeployOptions::default())?;
                }
                registry.activate(&s, &id)
            })
            .await
            .map_err(|e| fail(e.to_string()))?;
            r.map_err(|e| fail(e.to_string()))?;
        }
        Ok(())
    }

    /// Applies one trace event that the trace dates `at` (the step runs at or after it).
    async fn apply(&mut self, line: u64, at: u64, event: Event) -> Result<(), SimError> {
        let refused = |message: String| SimError::Refused { line, message };
        match event {
            Event::Pool(entry) => {
                let spec = entry.spec();
                if let Ok(mut rm) = self.cluster.resmgr.lock() {
                    rm.create_pool(&entry.path, spec).map_err(|e| refused(format!("pool {}: {e}", entry.path)))?;
                }
                self.pools.push(entry.path);
            }
            Event::Host(h) => {
                self.sim
                    .add_host(&h.name, h.resources, h.attributes.clone())
                    .await
                    .map_err(|e| refused(format!("host {}: {e}", h.name)))?;
                self.host_index.insert(h.name.clone(), self.hosts.len());
                self.hosts.push(HostLife {
                    name: h.name,
                    resources: h.resources,
                    attributes: h.attributes,
                    joined_ms: at,
                    left_ms: None,
                });
            }
            Event::HostDown(h) => {
                self.sim.remove_host(&h.name).await.map_err(|e| refused(format!("host {}: {e}", h.name)))?;
                if let Some(&i) = self.host_index.get(&h.name) {
                    self.hosts[i].left_ms = Some(at);
                }
            }
            Event::Maintenance(m) => {
                let hosts = &self.cluster.hosts;
                let r = match m.state {
                    MaintenanceTo::Draining => hosts.drain(&m.name).await,
                    MaintenanceTo::Down => hosts.down(&m.name).await,
                    MaintenanceTo::Up => hosts.up(&m.name).await,
                };
                if let Err(e) = r {
                    tracing::warn!(line, host = %m.name, error = %e, "maintenance change refused; the replay goes on");
                }
            }
            Event::Job(j) => {
                let j = *j;
                if let Ok(mut s) = self.scripts.lock() {
                    s.jobs.insert(j.id.clone(), (j.run, j.runs.clone()));
                }
                // A replay starts no process: the secrets a recorded job
                // names do not matter to placement, and the simulator holds
                // none to give (decision 0032).
                let mut spec = j.spec;
                spec.default_task.secrets.clear();
                spec.instance_overrides.values_mut().for_each(|t| t.secrets.clear());
                let config = Arc::new(spec.clone());
                let rejected = match self.cluster.jobs.create(&j.id, spec).await {
                    Ok(_) => None,
                    Err(e) => Some(format!("rejected at submission: {e}")),
                };
                self.tasks_arrived += u64::from(config.instance_count);
                self.jobs.insert(j.id, JobMeta { config, arrived_ms: at, rejected });
            }
            Event::Kill(k) => {
                if let Err(e) = self.cluster.jobs.kill(&k.job, k.instances).await {
                    tracing::debug!(line, job = %k.job, error = %e, "kill refused (the job may have ended)");
                }
            }
            Event::Update(u) => {
                let u = *u;
                if let Ok(mut s) = self.scripts.lock() {
                    s.jobs.insert(u.job.clone(), (u.run, u.runs.clone()));
                }
                if let Err(e) =
                    self.cluster.jobs.update(&u.job, u.spec.clone(), paceline_jobmgr::UpdateRequest::default()).await
                {
                    tracing::debug!(line, job = %u.job, error = %e, "update refused (the job may have ended)");
                } else if let Some(meta) = self.jobs.get_mut(&u.job) {
                    meta.config = Arc::new(u.spec);
                }
            }
            Event::Policy(p) => {
                self.swap(&p.slot, &PolicySource::Builtin(p.plugin.clone())).await?;
                self.swaps.push((at, p.slot, p.plugin));
            }
            Event::End => {}
        }
        Ok(())
    }

    /// Folds the store's new task events into the task lives.
    fn observe(&mut self) {
        for (job, instance, e) in self.store.take_events() {
            let arrived = self.jobs.get(&job).map_or(0, |j| j.arrived_ms);
            let life = self.lives.entry((job, instance)).or_default();
            let at = rel(e.at_ms);
            let idx = match life.runs.iter().position(|r| r.run == e.run) {
                Some(i) => i,
                None => {
                    let queued_ms = if e.run == 1 { arrived } else { at };
                    life.runs.push(RunLife { run: e.run, queued_ms, ..RunLife::default() });
                    life.runs.len() - 1
                }
            };
            let r = &mut life.runs[idx];
            if e.to == TaskState::Placed && r.placed_ms.is_none() {
                r.placed_ms = Some(at);
                r.host = e.host.clone();
            }
            if e.to.is_terminal() && r.ended_ms.is_none() {
                r.ended_ms = Some(at);
                r.end = Some(e.to.as_str().to_string());
            }
            if e.reason == "PREEMPTED" {
                r.preempted = true;
            }
        }
    }

    /// Samples every leaf pool's numbers at each sample time up to `now`
    /// (exclusive): the state between two steps is the one after the first.
    fn sample_until(&mut self, now: u64, every: u64) {
        let next = |samples: &Vec<u64>| samples.last().map_or(0, |t| t + every);
        while next(&self.samples_ms) < now {
            let t = next(&self.samples_ms);
            self.samples_ms.push(t);
            let Ok(rm) = self.cluster.resmgr.lock() else { return };
            for path in &self.pools {
                let Some(status) = rm.pool_status(path) else { continue };
                let is_leaf = !self.pools.iter().any(|p| p.starts_with(&format!("{path}/")));
                if !is_leaf {
                    continue;
                }
                self.leaf_samples.entry(path.clone()).or_default().push(PoolSample {
                    allocation: status.allocation.saturating_add(&status.revocable_allocation),
                    entitlement: status.entitlement,
                    demand: status.demand,
                });
            }
        }
    }

    /// Keeps about `most` of the samples, evenly spaced, the last one
    /// included. Left as they are when a pool joined after the first sample
    /// (its samples would no longer line up with the times).
    fn thin_samples(&mut self, most: usize) {
        let n = self.samples_ms.len();
        if n <= most || self.leaf_samples.values().any(|v| v.len() != n) {
            return;
        }
        fn thin<T>(v: &mut Vec<T>, every: usize) {
            let n = v.len();
            let mut i = 0;
            v.retain(|_| {
                i += 1;
                (i - 1) % every == 0 || i == n
            });
        }
        let every = n.div_ceil(most);
        thin(&mut self.samples_ms, every);
        for v in self.leaf_samples.values_mut() {
            thin(v, every);
        }
    }

    /// Whether a pool is above its entitlement while work waits somewhere:
    /// the resource manager counts periods before preempting, so steps must
    /// go on at the loop period.
    fn preemption_pending(&self) -> bool {
        let Ok(rm) = self.cluster.resmgr.lock() else { return false };
        let statuses: Vec<_> = self.pools.iter().filter_map(|p| rm.pool_status(p)).collect();
        statuses.iter().any(|s| s.queued_gangs > 0) && statuses.iter().any(|s| s.over_periods > 0)
    }

    /// One pass of every loop at `now`, each phase ending with the host
    /// manager settled. Returns whether anything changed.
    async fn step(&self, now: u64) -> bool {
        let c = &self.cluster;
        let _ = c.hosts.sync().await;
        c.hosts.tick().await;
        let mut events = c.pump_host_events().await;
        if let Err(e) = c.jobs.tick(now).await {
            tracing::warn!(error = %e, "job manager tick failed");
        }
        let (kills, admitted) = match c.resmgr.lock() {
            Ok(mut rm) => {
                let t = rm.tick(now);
                (t.kills, t.admitted_gangs)
            }
            Err(_) => (Vec::new(), 0),
        };
        let killed = !kills.is_empty() && !self.no_preemption;
        if killed && let Err(e) = c.jobs.on_resmgr_kills(kills).await {
            tracing::warn!(error = %e, "kills from the resource manager not handled");
        }
        let _ = c.hosts.sync().await;
        events += c.pump_host_events().await;
        let round = c.engine.run_round(now).await;
        let _ = c.hosts.sync().await;
        events += c.pump_host_events().await;
        let _ = c.hosts.sync().await;
        events > 0 || round.placed > 0 || round.dropped > 0 || killed || admitted > 0
    }
}

impl Runner {
    /// Why instance `i` of a job waits, as the report words it.
    fn why_waiting(&self, id: &str, i: u32, state: Option<TaskState>) -> String {
        self.cluster
            .jobs
            .admission_info(id, i)
            .map(|info| pending_category(&info))
            .or_else(|| self.cluster.jobs.placement_failure(id, i).map(|r| format!("placement: {}", r.as_str())))
            .unwrap_or_else(|| {
                format!("waiting ({}) with no reason recorded yet", state.map_or("unknown", TaskState::as_str))
            })
    }

    /// Takes a job that did not fit whole out of a fill that goes on: left
    /// waiting, it would hold the head of its pool's queue (admission is in
    /// order) and keep its placed tasks' resources. Its tasks are reported
    /// never placed, with why the first one waited.
    async fn withdraw(&mut self, id: &str, now: u64) {
        let tasks = match self.cluster.jobs.get(id).await {
            Ok(info) => info.tasks,
            Err(_) => return, // rejected at submission: nothing to take out
        };
        let why = tasks
            .iter()
            .enumerate()
            .find(|(_, t)| !(t.state.is_on_host() || t.state == TaskState::Placed))
            .map(|(i, t)| self.why_waiting(id, i as u32, Some(t.state)))
            .unwrap_or_else(|| "no task waiting".into());
        if let Err(e) = self.cluster.jobs.kill(id, None).await {
            tracing::warn!(job = id, error = %e, "withdrawing a job that did not fit");
        }
        self.step(BASE_MS + now).await;
        self.observe();
        if let Some(meta) = self.jobs.get_mut(id) {
            meta.rejected = Some(format!("did not fit whole when it arrived (withdrawn): {why}"));
        }
    }

    /// Whether every task of a submitted job is on a host (or placed on its way there).
    async fn placed_whole(&self, id: &str) -> bool {
        if self.jobs.get(id).is_none_or(|m| m.rejected.is_some()) {
            return false;
        }
        match self.cluster.jobs.get(id).await {
            Ok(info) => {
                !info.tasks.is_empty()
                    && info.tasks.iter().all(|t| t.state.is_on_host() || t.state == TaskState::Placed)
            }
            Err(_) => false,
        }
    }

    /// "Arrive until full" ([`Arrival::UntilFull`]): the trace's lines in
    /// order with their times ignored; each job is stepped until it is placed
    /// whole, or until two steps in a row change nothing (it does not fit).
    /// Returns the virtual time reached, the steps taken and what the mode saw.
    async fn fill<R: BufRead>(
        &mut self,
        reader: &mut Reader<R>,
        tick: u64,
        sample_every: u64,
        mode: FillMode,
        progress: &mut Option<Progress>,
    ) -> Result<(u64, u64, FillObserved), SimError> {
        let FillMode { stop_at_first_unplaced, until_gpu_pct, shuffle } = mode;
        let mut seen = FillObserved { stop_at_first_unplaced, ..FillObserved::default() };
        let (mut now, mut steps) = (0u64, 0u64);
        let mut last_progress = Instant::now();
        // The GPU curve: capacity from host lines, arrived and held per job.
        let (mut capacity, mut arrived, mut held, mut next_point) = (0u64, 0u64, 0u64, 0u64);
        // The trace's jobs, kept to be offered again (`until_gpu_pct`).
        let mut offered: Vec<(u64, paceline_sim::trace::JobEvent)> = Vec::new();
        let mut trace_done = false;
        let (mut pass, mut replay) = (1u32, 0usize);
        // Shuffled: the whole trace read first, its jobs put after the rest
        // in a random order.
        let mut shuffled = match shuffle {
            Some(seed) => {
                let (mut first, mut jobs) = (VecDeque::new(), Vec::new());
                while let Some((line, timed)) = next_event(reader)? {
                    match timed.event {
                        Event::Job(_) => jobs.push((line, timed)),
                        _ => first.push_back((line, timed)),
                    }
                }
                let mut rng = paceline_sim::rng::Rng::new(seed);
                shuffle_in_place(&mut jobs, &mut rng);
                first.extend(jobs);
                Some((first, rng))
            }
            None => None,
        };
        loop {
            let target_reached =
                until_gpu_pct.is_none_or(|pct| capacity > 0 && arrived >= capacity / 100 * u64::from(pct));
            let next = match (&mut shuffled, trace_done) {
                (_, true) => None,
                (Some((queue, _)), false) => queue.pop_front(),
                (None, false) => next_event(reader)?,
            };
            let (line, mut job) = match next {
                Some((line, timed)) => match timed.event {
                    Event::Pool(_) | Event::Host(_) => {
                        if let Event::Host(h) = &timed.event {
                            capacity += h.resources.gpu_milli;
                        }
                        self.apply(line, now, timed.event).await?;
                        continue;
                    }
                    Event::End => {
                        trace_done = true;
                        continue;
                    }
                    Event::Job(j) => {
                        if until_gpu_pct.is_some() {
                            offered.push((line, (*j).clone()));
                        }
                        (line, j)
                    }
                    other => {
                        *seen.dropped.entry(other.name().to_string()).or_default() += 1;
                        continue;
                    }
                },
                None => {
                    trace_done = true;
                    // Offer the trace's jobs again until the target is met.
                    if target_reached || offered.is_empty() {
                        break;
                    }
                    if replay == offered.len() {
                        replay = 0;
                        pass += 1;
                    }
                    if replay == 0 && pass == 1 {
                        pass = 2;
                    }
                    if replay == 0
                        && let Some((_, rng)) = &mut shuffled
                    {
                        shuffle_in_place(&mut offered, rng);
                    }
                    let (line, mut j) = offered[replay].clone();
                    replay += 1;
                    j.id = format!("{}.r{pass}", j.id);
                    j.spec.name = j.id.clone();
                    (line, Box::new(j))
                }
            };
            if !trace_done && until_gpu_pct.is_some() && target_reached {
                break;
            }
            let job_gpu = job.spec.default_task.resources.gpu_milli.saturating_mul(u64::from(job.spec.instance_count));
            // Nothing ends: the cluster only fills.
            job.run = RunScript::default();
            job.runs.clear();
            let id = job.id.clone();
            self.apply(line, now, Event::Job(job)).await?;
            seen.jobs_submitted += 1;
            let mut idle = 0;
            let placed = loop {
                let changed = self.step(BASE_MS + now).await;
                steps += 1;
                self.observe();
                self.sample_until(now + tick, sample_every);
                self.sim.advance(tick).await;
                now += tick;
                if self.placed_whole(&id).await {
                    break true;
                }
                // A rejected job changes nothing; a job that waits for room
                // goes through admission and a round, then the cluster is quiet.
                idle = if changed { 0 } else { idle + 1 };
                if idle >= 2 {
                    break false;
                }
            };
            if let Some(cb) = progress.as_mut()
                && last_progress.elapsed() >= Duration::from_millis(200)
            {
                cb(now, None, self.tasks_arrived);
                last_progress = Instant::now();
            }
            arrived += job_gpu;
            if placed {
                held += job_gpu;
            }
            if capacity > 0 {
                while arrived * 50 >= next_point * capacity {
                    seen.gpu_curve.push(paceline_sim::report::FillPoint {
                        arrived_milli: arrived,
                        allocated_milli: held,
                        capacity_milli: capacity,
                    });
                    next_point += 1;
                }
            }
            if !placed {
                if seen.first_unplaced.is_none() {
                    seen.first_unplaced = Some(id.clone());
                }
                if stop_at_first_unplaced {
                    break;
                }
                self.withdraw(&id, now).await;
            }
        }
        Ok((now, steps, seen))
    }
}

/// How "arrive until full" goes ([`Arrival::UntilFull`]'s fields).
#[derive(Clone, Copy, Debug)]
struct FillMode {
    stop_at_first_unplaced: bool,
    until_gpu_pct: Option<u32>,
    shuffle: Option<u64>,
}

/// Fisher–Yates with the simulator's own generator, so an order depends on
/// the seed alone.
fn shuffle_in_place<T>(items: &mut [T], rng: &mut paceline_sim::rng::Rng) {
    for i in (1..items.len()).rev() {
        let j = rng.range(0, i as u64) as usize;
        items.swap(i, j);
    }
}

/// The next event of the trace with its line number.
fn next_event<R: BufRead>(reader: &mut Reader<R>) -> Result<Option<(u64, paceline_sim::Timed)>, SimError> {
    match reader.next() {
        None => Ok(None),
        Some(Ok(t)) => Ok(Some((reader.line(), t))),
        Some(Err(e)) => Err(e.into()),
    }
}

fn crate_version_label() -> String {
    paceline_server::wiring::BUILTIN_VERSION.to_string()
}

fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1_024)
}

/// The replay by time ([`Arrival::ByTime`]): events at their times, the
/// clock jumping to the next thing due. Returns the virtual time reached and
/// the steps taken.
async fn by_time<R: BufRead>(
    runner: &mut Runner,
    reader: &mut Reader<R>,
    header: &paceline_sim::Header,
    tick: u64,
    sample_every: u64,
    options: &mut Options,
) -> Result<(u64, u64), SimError> {
    let mut pending = next_event(reader)?;
    let mut now = 0u64; // trace time
    let mut steps = 0u64;
    let mut ended = false;
    let mut last_progress = Instant::now();
    loop {
        // Events due now.
        let mut applied = false;
        let mut arrived_now: Vec<String> = Vec::new();
        while let Some((line, timed)) = pending.take() {
            if timed.at > now {
                pending = Some((line, timed));
                break;
            }
            if matches!(timed.event, Event::End) {
                ended = true;
                break;
            }
            // A kill or update of a job that arrives in this same step waits
            // for the next one: a server places a new job as soon as it is
            // created, so a kill that came later in real time found its tasks
            // placed. Applied together, the kill would come first and the
            // replay would place nothing (a recorded `paceline dev` session
            // showed it: a job killed 230 ms after its creation).
            let same_step = match &timed.event {
                Event::Kill(k) => arrived_now.contains(&k.job),
                Event::Update(u) => arrived_now.contains(&u.job),
                _ => false,
            };
            if same_step {
                pending = Some((line, timed));
                break;
            }
            if let Event::Job(j) = &timed.event {
                arrived_now.push(j.id.clone());
            }
            // Arrivals count from the trace's time; they take effect at this step.
            runner.apply(line, timed.at, timed.event).await?;
            applied = true;
            pending = next_event(reader)?;
        }
        let changed = runner.step(BASE_MS + now).await || applied;
        steps += 1;
        runner.observe();
        if let Some(cb) = options.progress.as_mut()
            && last_progress.elapsed() >= Duration::from_millis(200)
        {
            cb(now, header.duration_ms, runner.tasks_arrived);
            last_progress = Instant::now();
        }
        if ended || options.until_ms.is_some_and(|u| now >= u) {
            break;
        }
        // When is the next step?
        let next_event = pending.as_ref().map(|(_, t)| t.at);
        let due = [
            runner.sim.next_due_ms().map(rel),
            runner.cluster.jobs.next_deadline_ms().map(rel),
            runner.cluster.resmgr.lock().ok().and_then(|rm| rm.next_wake_ms()).map(rel),
        ]
        .into_iter()
        .flatten()
        .min();
        let at_next_tick = now + tick;
        let target = if changed || runner.preemption_pending() {
            Some(at_next_tick)
        } else {
            match (next_event, due) {
                (None, None) => None,
                (a, b) => a.into_iter().chain(b).min().map(|t| t.max(at_next_tick).div_ceil(tick) * tick),
            }
        };
        // Nothing left that could change anything: the trace is read, no
        // run will end, no deadline is due, and the last step was idle.
        let stalled = next_event.is_none()
            && runner.sim.next_due_ms().is_none()
            && runner.cluster.jobs.next_deadline_ms().is_none()
            && !changed;
        let Some(mut target) = target.filter(|_| !stalled) else { break };
        if let Some(u) = options.until_ms {
            target = target.min(u.max(now + 1));
        }
        runner.sample_until(target, sample_every);
        runner.sim.advance(target - now).await;
        now = target;
    }
    Ok((now, steps))
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
