//! The report of one replay: what a runner observed ([`Observed`]) turned
//! into figures ([`Report`]): outcomes (every task accounted for), wait
//! percentiles per pool and job kind, makespan, allocation and stranded
//! capacity over time, preemptions, each pool's allocation against its
//! entitlement, tasks never placed and why, plugin calls.
//!
//! Everything here is a function of the observation: no clock, no
//! randomness, maps ordered, floats rounded, so the same observation gives
//! the same bytes. Wall-clock figures (plugin latency, the replay's own
//! time) live apart in [`Measured`] and are left out of the comparison of
//! two runs' bytes by leaving them out ([`Report::measured`] is `None`).
//!
//! Definitions (docs/sim.md repeats them for readers):
//! - **wait** of a run: from the moment it waits for a host (its job's
//!   arrival for a first run, the moment it was queued again for a retry or
//!   after preemption) to its placement. Runs never placed are not in the
//!   percentiles; they are counted under `never_placed`.
//! - **stranded** at time t: the free resources of hosts on which no task
//!   waiting at t fits (no waiting task: nothing is stranded).
//! - **fairness deviation** of a pool at t: (allocation − entitlement) ÷
//!   cluster capacity, per kind; the summary is its mean absolute value.

use std::collections::{BTreeMap, BTreeSet};

use paceline_model::Resources;
use serde::{Deserialize, Serialize};

/// The `report` value of every report.
pub const REPORT_FORMAT: &str = "paceline-sim-report";
/// This report format's version.
pub const REPORT_VERSION: u32 = 1;
/// Tasks listed by name under `never_placed.tasks` (all are counted).
pub const NEVER_PLACED_LISTED: usize = 1_000;

/// One run of one task as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLife {
    /// Run number (1, 2, …).
    pub run: u64,
    /// When it started waiting for a host, ms since the trace's start.
    pub queued_ms: u64,
    /// When it was placed.
    pub placed_ms: Option<u64>,
    /// Where.
    pub host: Option<String>,
    /// When it ended.
    pub ended_ms: Option<u64>,
    /// How: `SUCCEEDED`, `FAILED`, `KILLED`, `LOST`.
    pub end: Option<String>,
    /// It ended because it was preempted.
    #[serde(default)]
    pub preempted: bool,
}

/// How a task of the trace ended up when the replay stopped. Every task is
/// in exactly one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Its last run exited 0.
    Succeeded,
    /// Its last run failed.
    Failed,
    /// Killed (on request, after its last placement or before any).
    Killed,
    /// Its last run was lost with its host.
    Lost,
    /// Placed and still on a host when the replay stopped.
    Running,
    /// Placed before, and its current run (a retry or a requeue after
    /// preemption) waits for a host when the replay stopped: see its reason.
    Waiting,
    /// Never placed: see its reason.
    NeverPlaced,
}

/// One task of the trace as observed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskLife {
    /// Job id.
    pub job: String,
    /// Instance.
    pub instance: u32,
    /// Leaf pool.
    pub pool: String,
    /// Job kind (`batch`, `stateless`, …).
    pub kind: String,
    /// What one run holds.
    pub demand: Resources,
    /// When its job arrived.
    pub arrived_ms: u64,
    /// Its runs, oldest first.
    pub runs: Vec<RunLife>,
    /// Where it ended up.
    pub outcome: Outcome,
    /// Why it waits (for [`Outcome::NeverPlaced`] and [`Outcome::Waiting`]).
    pub reason: Option<String>,
}

/// A host of the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostLife {
    /// Name.
    pub name: String,
    /// Capacity.
    pub resources: Resources,
    /// Attributes.
    pub attributes: paceline_model::Labels,
    /// Joined.
    pub joined_ms: u64,
    /// Failed or left, if it did.
    pub left_ms: Option<u64>,
}

/// A pool's numbers at one sample time (from the resource manager).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolSample {
    /// Held by its tasks.
    pub allocation: Resources,
    /// Its entitlement.
    pub entitlement: Resources,
    /// Allocation plus what waits.
    pub demand: Resources,
}

/// A slot's calls, per version that served it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginCalls {
    /// Slot.
    pub slot: String,
    /// `name@version`, or `native:<name>`.
    pub version: String,
    /// Calls.
    pub calls: u64,
    /// Calls that faulted (and fell back).
    pub faults: u64,
}

/// Wall-clock figures: they vary from run to run, so they sit apart.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The replay's wall time, ms.
    pub wall_ms: u64,
    /// Virtual time per wall time.
    pub speedup: f64,
    /// Cluster steps run.
    pub steps: u64,
    /// Peak resident memory of the process, MiB (Linux `VmHWM`), if known.
    pub peak_rss_mib: Option<u64>,
    /// Plugin call latency per slot and version.
    pub plugins: Vec<PluginLatency>,
}

/// One version's call latency, from the registry's histogram.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginLatency {
    /// Slot.
    pub slot: String,
    /// Version id.
    pub version: String,
    /// Calls.
    pub calls: u64,
    /// Mean, µs.
    pub mean_us: u64,
    /// Bucket bound under which half finished, µs.
    pub p50_us: u64,
    /// Bucket bound under which 99% finished, µs.
    pub p99_us: u64,
}

/// Everything a runner hands over after a replay.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// Trace name.
    pub trace: String,
    /// Trace source.
    pub source: String,
    /// Seed the runner was given.
    pub seed: u64,
    /// The seed the trace was generated with (its header's `seed`), if any.
    pub trace_seed: Option<u64>,
    /// The runner's loop period, ms.
    pub tick_ms: u64,
    /// Slot → the policy serving it at the start (`name@version`).
    pub policies: BTreeMap<String, String>,
    /// Policy swaps the trace made: (at, slot, plugin).
    pub swaps: Vec<(u64, String, String)>,
    /// Virtual time the replay stopped, ms since the trace's start.
    pub end_ms: u64,
    /// Hosts.
    pub hosts: Vec<HostLife>,
    /// Tasks.
    pub tasks: Vec<TaskLife>,
    /// Sample times, ms.
    pub samples_ms: Vec<u64>,
    /// Per leaf pool, one sample per sample time.
    pub pools: BTreeMap<String, Vec<PoolSample>>,
    /// Plugin calls.
    pub plugins: Vec<PluginCalls>,
    /// Attribute whose spread over a job's tasks is reported (`zone`).
    pub spread_key: String,
    /// Copy every task's life into [`Report::tasks`] (off by default: a
    /// trace of 200,000 tasks would make the report tens of MB).
    pub list_tasks: bool,
    /// Set when the runner fed the jobs "until full" instead of by time.
    pub fill: Option<FillObserved>,
}

/// What a runner in "arrive until full" mode saw besides the tasks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FillObserved {
    /// It stopped at the first job that could not be placed whole (else it
    /// went on through the trace, skipping such jobs).
    pub stop_at_first_unplaced: bool,
    /// The first job that could not be placed whole, if any.
    pub first_unplaced: Option<String>,
    /// Jobs submitted (the trace's first ones, in its order).
    pub jobs_submitted: u64,
    /// Trace lines the mode does not replay, by event name (kills, updates,
    /// failures, maintenance, policy swaps: they are about time).
    pub dropped: BTreeMap<String, u64>,
    /// GPU allocation as the arrived work grew: one point per 2% of the
    /// cluster's GPU capacity arrived (empty without GPUs).
    pub gpu_curve: Vec<FillPoint>,
}

/// One point of [`FillObserved::gpu_curve`], in milli-GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FillPoint {
    /// GPU asked for by the jobs submitted so far (placed or not).
    pub arrived_milli: u64,
    /// GPU held by the jobs placed so far.
    pub allocated_milli: u64,
    /// The cluster's GPU capacity then.
    pub capacity_milli: u64,
}

/// The figures of an "arrive until full" replay: how much of the trace's
/// work the cluster holds at once under the policies, nothing ever ending.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fill {
    /// It stopped at the first job that could not be placed whole.
    pub stop_at_first_unplaced: bool,
    /// Jobs submitted.
    pub jobs_submitted: u64,
    /// Jobs whose every task was placed.
    pub jobs_placed: u64,
    /// Tasks placed (and running at the stop).
    pub tasks_placed: u64,
    /// The first job that could not be placed whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_unplaced: Option<String>,
    /// CPU cores held by placed tasks at the stop.
    pub cpu_cores: f64,
    /// GPUs held by placed tasks at the stop (shares counted in thousandths).
    pub gpus: f64,
    /// Shares of the capacity of the hosts up at the stop.
    pub cpu_share: f64,
    /// See `cpu_share`.
    pub memory_share: f64,
    /// See `cpu_share`.
    pub gpu_share: f64,
    /// Trace lines not replayed in this mode, by event.
    pub dropped: BTreeMap<String, u64>,
    /// GPU allocation as the arrived work grew (the fragmentation paper's
    /// curve); empty without GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_curve: Vec<GpuFillPoint>,
    /// The first point of `gpu_curve` where the arrived work reached 100% of
    /// the GPU capacity, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_at_full: Option<GpuFillPoint>,
}

/// GPU allocation at one amount of arrived work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuFillPoint {
    /// GPU asked for by the jobs submitted so far, a share of capacity.
    pub arrived: f64,
    /// GPU held by placed jobs, a share of capacity.
    pub allocated: f64,
    /// GPUs not allocated (capacity − held, in GPUs).
    pub unallocated_gpus: f64,
}

/// Percentiles of a set of durations, ms (nearest rank).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Values.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 95th.
    pub p95: u64,
    /// 99th.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

impl Percentiles {
    /// Of `values` (sorted here).
    pub fn of(mut values: Vec<u64>) -> Percentiles {
        values.sort_unstable();
        let at = |q: u64| -> u64 {
            if values.is_empty() {
                return 0;
            }
            let rank = (q * values.len() as u64).div_ceil(100).max(1);
            values[(rank - 1) as usize]
        };
        Percentiles {
            count: values.len() as u64,
            p50: at(50),
            p95: at(95),
            p99: at(99),
            max: values.last().copied().unwrap_or(0),
        }
    }
}

/// Wait percentiles of one (pool, kind).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitGroup {
    /// Pool.
    pub pool: String,
    /// Job kind.
    pub kind: String,
    /// Percentiles of its runs' waits.
    pub wait_ms: Percentiles,
}

/// How many tasks ended up where.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcomes {
    /// Tasks in the trace.
    pub tasks: u64,
    /// See [`Outcome`].
    pub succeeded: u64,
    /// See [`Outcome`].
    pub failed: u64,
    /// See [`Outcome`].
    pub killed: u64,
    /// See [`Outcome`].
    pub lost: u64,
    /// See [`Outcome`].
    pub running: u64,
    /// See [`Outcome`].
    pub waiting: u64,
    /// See [`Outcome`].
    pub never_placed: u64,
}

impl Outcomes {
    /// The categories summed: always equal to `tasks` (conservation).
    pub fn accounted(&self) -> u64 {
        self.succeeded + self.failed + self.killed + self.lost + self.running + self.waiting + self.never_placed
    }
}

/// Mean and peak of a series.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MeanPeak {
    /// Time-sampled mean.
    pub mean: f64,
    /// Largest sample.
    pub peak: f64,
}

/// Headline figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Runs placed (launches), retries and requeues included.
    pub placements: u64,
    /// Runs preempted.
    pub preemptions: u64,
    /// When the last batch task ended, ms since the trace's start.
    pub makespan_ms: u64,
    /// Waits of every run placed.
    pub wait_ms: Percentiles,
    /// Allocated CPU as a fraction of capacity.
    pub cpu_allocation: MeanPeak,
    /// Allocated memory as a fraction of capacity.
    pub memory_allocation: MeanPeak,
    /// Allocated GPUs as a fraction of capacity (0 without GPUs).
    pub gpu_allocation: MeanPeak,
    /// Stranded CPU, cores.
    pub stranded_cpu_cores: MeanPeak,
    /// Stranded memory, GiB.
    pub stranded_memory_gib: MeanPeak,
    /// Stranded GPUs.
    pub stranded_gpus: MeanPeak,
    /// Jobs with two or more tasks placed.
    pub spread_jobs: u64,
    /// Their mean count of distinct `spread_key` values.
    pub spread_mean_values: f64,
    /// Share of them on two or more values.
    pub spread_multi_share: f64,
}

/// A pool's fairness.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolFairness {
    /// Pool.
    pub pool: String,
    /// Mean |allocation − entitlement| ÷ capacity, CPU.
    pub cpu_mean_abs_deviation: f64,
    /// Same for GPUs.
    pub gpu_mean_abs_deviation: f64,
    /// Mean allocation ÷ capacity, CPU.
    pub cpu_mean_share: f64,
    /// Mean entitlement ÷ capacity, CPU.
    pub cpu_mean_entitlement: f64,
}

/// Tasks never placed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeverPlaced {
    /// Count per reason.
    pub by_reason: BTreeMap<String, u64>,
    /// The first [`NEVER_PLACED_LISTED`] of them.
    pub tasks: Vec<NeverPlacedTask>,
}

/// One task never placed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeverPlacedTask {
    /// Job.
    pub job: String,
    /// Instance.
    pub instance: u32,
    /// Pool.
    pub pool: String,
    /// Why.
    pub reason: String,
}

/// Time series at the sample times.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Sample times, ms since the trace's start.
    pub t_ms: Vec<u64>,
    /// Allocated / capacity, CPU.
    pub cpu: Vec<f64>,
    /// Allocated / capacity, memory.
    pub memory: Vec<f64>,
    /// Allocated / capacity, GPUs.
    pub gpu: Vec<f64>,
    /// Stranded CPU, cores.
    pub stranded_cpu_cores: Vec<f64>,
    /// Stranded GPUs.
    pub stranded_gpus: Vec<f64>,
    /// Runs waiting for a host.
    pub waiting: Vec<u64>,
    /// Runs on hosts.
    pub running: Vec<u64>,
}

/// One pool's series.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolSeries {
    /// Pool.
    pub pool: String,
    /// Allocation ÷ capacity, CPU.
    pub cpu_allocation: Vec<f64>,
    /// Entitlement ÷ capacity, CPU.
    pub cpu_entitlement: Vec<f64>,
    /// (Allocation − entitlement) ÷ capacity, CPU.
    pub cpu_deviation: Vec<f64>,
}

/// The report of one replay (`paceline-sim-report` version 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`REPORT_FORMAT`].
    pub report: String,
    /// Always [`REPORT_VERSION`].
    pub version: u32,
    /// Trace name.
    pub trace: String,
    /// Trace source.
    pub source: String,
    /// Seed of the replay (`--seed`), not the trace's.
    pub seed: u64,
    /// The seed the trace was generated with (`sim generate --seed`), from
    /// its header; absent for traces not generated (imported, recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_seed: Option<u64>,
    /// Loop period, ms.
    pub tick_ms: u64,
    /// Slot → policy at the start.
    pub policies: BTreeMap<String, String>,
    /// Policy swaps: "at ms: slot → plugin".
    pub swaps: Vec<String>,
    /// Virtual time the replay stopped, ms.
    pub end_ms: u64,
    /// Hosts in the trace.
    pub hosts: u64,
    /// Jobs in the trace.
    pub jobs: u64,
    /// Where every task ended up.
    pub outcomes: Outcomes,
    /// Headline figures.
    pub summary: Summary,
    /// Waits per pool and kind.
    pub waits: Vec<WaitGroup>,
    /// Per pool.
    pub fairness: Vec<PoolFairness>,
    /// Never placed.
    pub never_placed: NeverPlaced,
    /// Plugin calls.
    pub plugins: Vec<PluginCalls>,
    /// Cluster series.
    pub series: Series,
    /// Pool series.
    pub pool_series: Vec<PoolSeries>,
    /// Every task with its runs (placement, host, end) and outcome, when
    /// asked for (`paceline sim run --tasks`); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskLife>,
    /// The "arrive until full" figures, in that mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fill: Option<Fill>,
    /// Wall-clock figures; absent in reproducible output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
}

/// Rounds to 4 decimals (stable text).
fn r4(v: f64) -> f64 {
    if v.is_finite() { (v * 10_000.0).round() / 10_000.0 } else { 0.0 }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { r4(a as f64 / b as f64) }
}

fn mean_peak(values: &[f64]) -> MeanPeak {
    if values.is_empty() {
        return MeanPeak::default();
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let peak = values.iter().copied().fold(0.0, f64::max);
    MeanPeak { mean: r4(mean), peak: r4(peak) }
}

/// Minimal elements (no other waiting demand fits inside them): if none of
/// these fits a host, no waiting demand does.
fn minimal(demands: &BTreeMap<Resources4, u64>) -> Vec<Resources> {
    let mut keys: Vec<Resources> = demands.keys().map(|k| k.0).collect();
    keys.sort_by_key(|r| (r.cpu_millis, r.memory_mib, r.gpu_milli, r.disk_mib, r.ports));
    let mut out: Vec<Resources> = Vec::new();
    for k in keys {
        if !out.iter().any(|m| m.fits_in(&k)) {
            out.push(k);
        }
    }
    out
}

/// `Resources` ordered, as a map key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Resources4(Resources);

impl Ord for Resources4 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let k = |r: &Resources| (r.cpu_millis, r.memory_mib, r.disk_mib, r.gpu_milli, r.ports);
        k(&self.0).cmp(&k(&other.0))
    }
}

impl PartialOrd for Resources4 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A change at one time, for the sweep over samples.
enum Change {
    HostUp(usize),
    HostDown(usize),
    Place(usize, Resources),
    Free(usize, Resources),
    Wait(Resources),
    Unwait(Resources),
}

impl Observed {
    /// Builds the report (without [`Measured`]).
    pub fn report(&self) -> Report {
        let host_index: BTreeMap<&str, usize> =
            self.hosts.iter().enumerate().map(|(i, h)| (h.name.as_str(), i)).collect();
        // Outcomes, waits, placements, preemptions, makespan.
        let mut outcomes = Outcomes { tasks: self.tasks.len() as u64, ..Outcomes::default() };
        let mut waits_all = Vec::new();
        let mut groups: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
        let mut never = NeverPlaced::default();
        let mut summary = Summary::default();
        let mut jobs: BTreeSet<&str> = BTreeSet::new();
        for t in &self.tasks {
            jobs.insert(&t.job);
            match t.outcome {
                Outcome::Succeeded => outcomes.succeeded += 1,
                Outcome::Failed => outcomes.failed += 1,
                Outcome::Killed => outcomes.killed += 1,
                Outcome::Lost => outcomes.lost += 1,
                Outcome::Running => outcomes.running += 1,
                Outcome::Waiting => outcomes.waiting += 1,
                Outcome::NeverPlaced => {
                    outcomes.never_placed += 1;
                    let reason = t.reason.clone().unwrap_or_else(|| "no reason observed".into());
                    *never.by_reason.entry(reason.clone()).or_default() += 1;
                    if never.tasks.len() < NEVER_PLACED_LISTED {
                        never.tasks.push(NeverPlacedTask {
                            job: t.job.clone(),
                            instance: t.instance,
                            pool: t.pool.clone(),
                            reason,
                        });
                    }
                }
            }
            for r in &t.runs {
                if let Some(p) = r.placed_ms {
                    summary.placements += 1;
                    let w = p.saturating_sub(r.queued_ms);
                    waits_all.push(w);
                    groups.entry((t.pool.clone(), t.kind.clone())).or_default().push(w);
                }
                summary.preemptions += u64::from(r.preempted);
                if t.kind == "batch"
                    && let Some(e) = r.ended_ms
                {
                    summary.makespan_ms = summary.makespan_ms.max(e);
                }
            }
        }
        summary.wait_ms = Percentiles::of(waits_all);
        let waits =
            groups.into_iter().map(|((pool, kind), v)| WaitGroup { pool, kind, wait_ms: Percentiles::of(v) }).collect();

        // Spread of each job's placed tasks over `spread_key`.
        let mut per_job: BTreeMap<&str, (u64, BTreeSet<&str>)> = BTreeMap::new();
        for t in &self.tasks {
            let first = t.runs.iter().find_map(|r| r.host.as_deref().filter(|_| r.placed_ms.is_some()));
            if let Some(h) = first {
                let e = per_job.entry(&t.job).or_default();
                e.0 += 1;
                if let Some(v) = host_index.get(h).and_then(|&i| self.hosts[i].attributes.get(&self.spread_key)) {
                    e.1.insert(v);
                }
            }
        }
        let multi: Vec<&(u64, BTreeSet<&str>)> = per_job.values().filter(|(n, _)| *n >= 2).collect();
        summary.spread_jobs = multi.len() as u64;
        if !multi.is_empty() {
            summary.spread_mean_values =
                r4(multi.iter().map(|(_, v)| v.len() as f64).sum::<f64>() / multi.len() as f64);
            summary.spread_multi_share =
                ratio(multi.iter().filter(|(_, v)| v.len() >= 2).count() as u64, multi.len() as u64);
        }

        // The sweep: changes in time order, applied up to each sample time.
        let mut changes: Vec<(u64, u8, Change)> = Vec::new();
        for (i, h) in self.hosts.iter().enumerate() {
            changes.push((h.joined_ms, 0, Change::HostUp(i)));
            if let Some(l) = h.left_ms {
                changes.push((l, 1, Change::HostDown(i)));
            }
        }
        for t in &self.tasks {
            for r in &t.runs {
                let wait_end = r.placed_ms.or(r.ended_ms).unwrap_or(u64::MAX);
                if wait_end > r.queued_ms {
                    changes.push((r.queued_ms, 2, Change::Wait(t.demand)));
                    if wait_end != u64::MAX {
                        changes.push((wait_end, 1, Change::Unwait(t.demand)));
                    }
                }
                if let (Some(p), Some(h)) = (r.placed_ms, r.host.as_deref().and_then(|h| host_index.get(h).copied())) {
                    let end = r.ended_ms.unwrap_or(u64::MAX);
                    if end > p {
                        changes.push((p, 2, Change::Place(h, t.demand)));
                        if end != u64::MAX {
                            changes.push((end, 1, Change::Free(h, t.demand)));
                        }
                    }
                }
            }
        }
        // At one time: frees and departures before arrivals and placements.
        changes.sort_by_key(|(t, order, _)| (*t, *order));
        let n = self.hosts.len();
        let mut alive = vec![false; n];
        let mut used = vec![Resources::ZERO; n];
        let mut capacity = Resources::ZERO;
        let mut allocated = Resources::ZERO;
        let mut waiting: BTreeMap<Resources4, u64> = BTreeMap::new();
        let (mut waiting_n, mut running_n) = (0u64, 0u64);
        let mut series = Series::default();
        let mut next = 0;
        let mut capacity_at: Vec<Resources> = Vec::with_capacity(self.samples_ms.len());
        let mut minimal_cache: Option<Vec<Resources>> = None;
        for &s in &self.samples_ms {
            while next < changes.len() && changes[next].0 <= s {
                match changes[next].2 {
                    Change::HostUp(i) => {
                        if !alive[i] {
                            alive[i] = true;
                            capacity = capacity.saturating_add(&self.hosts[i].resources);
                        }
                    }
                    Change::HostDown(i) => {
                        if alive[i] {
                            alive[i] = false;
                            capacity = capacity.saturating_sub(&self.hosts[i].resources);
                        }
                    }
                    Change::Place(i, d) => {
                        used[i] = used[i].saturating_add(&d);
                        allocated = allocated.saturating_add(&d);
                        running_n += 1;
                    }
                    Change::Free(i, d) => {
                        used[i] = used[i].saturating_sub(&d);
                        allocated = allocated.saturating_sub(&d);
                        running_n = running_n.saturating_sub(1);
                    }
                    Change::Wait(d) => {
                        *waiting.entry(Resources4(d)).or_default() += 1;
                        waiting_n += 1;
                        minimal_cache = None;
                    }
                    Change::Unwait(d) => {
                        if let Some(c) = waiting.get_mut(&Resources4(d)) {
                            *c -= 1;
                            if *c == 0 {
                                waiting.remove(&Resources4(d));
                                minimal_cache = None;
                            }
                        }
                        waiting_n = waiting_n.saturating_sub(1);
                    }
                }
                next += 1;
            }
            let mins = minimal_cache.get_or_insert_with(|| minimal(&waiting));
            let mut stranded = Resources::ZERO;
            if !mins.is_empty() {
                for i in 0..n {
                    if !alive[i] {
                        continue;
                    }
                    let free = self.hosts[i].resources.saturating_sub(&used[i]);
                    if !mins.iter().any(|m| m.fits_in(&free)) {
                        stranded = stranded.saturating_add(&free);
                    }
                }
            }
            series.t_ms.push(s);
            series.cpu.push(ratio(allocated.cpu_millis, capacity.cpu_millis));
            series.memory.push(ratio(allocated.memory_mib, capacity.memory_mib));
            series.gpu.push(ratio(allocated.gpu_milli, capacity.gpu_milli));
            series.stranded_cpu_cores.push(r4(stranded.cpu_millis as f64 / 1_000.0));
            series.stranded_gpus.push(r4(stranded.gpu_milli as f64 / 1_000.0));
            series.waiting.push(waiting_n);
            series.running.push(running_n);
            capacity_at.push(capacity);
            summary.stranded_memory_gib.peak =
                summary.stranded_memory_gib.peak.max(r4(stranded.memory_mib as f64 / 1_024.0));
            summary.stranded_memory_gib.mean += stranded.memory_mib as f64 / 1_024.0;
        }
        let samples = series.t_ms.len().max(1) as f64;
        summary.stranded_memory_gib.mean = r4(summary.stranded_memory_gib.mean / samples);
        summary.cpu_allocation = mean_peak(&series.cpu);
        summary.memory_allocation = mean_peak(&series.memory);
        summary.gpu_allocation = mean_peak(&series.gpu);
        summary.stranded_cpu_cores = mean_peak(&series.stranded_cpu_cores);
        summary.stranded_gpus = mean_peak(&series.stranded_gpus);

        // Pools against their entitlement.
        let mut fairness = Vec::new();
        let mut pool_series = Vec::new();
        for (pool, samples) in &self.pools {
            let mut ps = PoolSeries { pool: pool.clone(), ..PoolSeries::default() };
            let (mut dev_cpu, mut dev_gpu, mut n_gpu) = (0.0, 0.0, 0u64);
            for (s, cap) in samples.iter().zip(&capacity_at) {
                let a = ratio(s.allocation.cpu_millis, cap.cpu_millis);
                let e = ratio(s.entitlement.cpu_millis.min(cap.cpu_millis), cap.cpu_millis);
                ps.cpu_allocation.push(a);
                ps.cpu_entitlement.push(e);
                ps.cpu_deviation.push(r4(a - e));
                dev_cpu += (a - e).abs();
                if cap.gpu_milli > 0 {
                    let ag = ratio(s.allocation.gpu_milli, cap.gpu_milli);
                    let eg = ratio(s.entitlement.gpu_milli.min(cap.gpu_milli), cap.gpu_milli);
                    dev_gpu += (ag - eg).abs();
                    n_gpu += 1;
                }
            }
            let k = ps.cpu_allocation.len().max(1) as f64;
            fairness.push(PoolFairness {
                pool: pool.clone(),
                cpu_mean_abs_deviation: r4(dev_cpu / k),
                gpu_mean_abs_deviation: if n_gpu == 0 { 0.0 } else { r4(dev_gpu / n_gpu as f64) },
                cpu_mean_share: r4(ps.cpu_allocation.iter().sum::<f64>() / k),
                cpu_mean_entitlement: r4(ps.cpu_entitlement.iter().sum::<f64>() / k),
            });
            pool_series.push(ps);
        }

        Report {
            report: REPORT_FORMAT.into(),
            version: REPORT_VERSION,
            trace: self.trace.clone(),
            source: self.source.clone(),
            seed: self.seed,
            trace_seed: self.trace_seed,
            tick_ms: self.tick_ms,
            policies: self.policies.clone(),
            swaps: self.swaps.iter().map(|(at, slot, p)| format!("{at} ms: {slot} -> {p}")).collect(),
            end_ms: self.end_ms,
            // A host that failed and joined again is one host.
            hosts: self.hosts.iter().map(|h| h.name.as_str()).collect::<BTreeSet<_>>().len() as u64,
            jobs: jobs.len() as u64,
            outcomes,
            summary,
            waits,
            fairness,
            never_placed: never,
            plugins: self.plugins.clone(),
            series,
            pool_series,
            tasks: if self.list_tasks { self.tasks.clone() } else { Vec::new() },
            fill: self.fill.as_ref().map(|f| self.fill_figures(f)),
            measured: None,
        }
    }
}

fn gpu_fill_point(p: &FillPoint) -> GpuFillPoint {
    GpuFillPoint {
        arrived: ratio(p.arrived_milli, p.capacity_milli),
        allocated: ratio(p.allocated_milli, p.capacity_milli),
        unallocated_gpus: r4(p.capacity_milli.saturating_sub(p.allocated_milli) as f64 / 1_000.0),
    }
}

impl Observed {
    fn fill_figures(&self, f: &FillObserved) -> Fill {
        let mut held = Resources::default();
        let mut placed: BTreeMap<&str, bool> = BTreeMap::new();
        let mut tasks_placed = 0;
        for t in &self.tasks {
            let running = t.outcome == Outcome::Running;
            let whole = placed.entry(&t.job).or_insert(true);
            *whole &= running;
            if running {
                tasks_placed += 1;
                held = held.saturating_add(&t.demand);
            }
        }
        let capacity = self
            .hosts
            .iter()
            .filter(|h| h.left_ms.is_none())
            .fold(Resources::default(), |a, h| a.saturating_add(&h.resources));
        Fill {
            stop_at_first_unplaced: f.stop_at_first_unplaced,
            jobs_submitted: f.jobs_submitted,
            jobs_placed: placed.values().filter(|w| **w).count() as u64,
            tasks_placed,
            first_unplaced: f.first_unplaced.clone(),
            cpu_cores: r4(held.cpu_millis as f64 / 1_000.0),
            gpus: r4(held.gpu_milli as f64 / 1_000.0),
            cpu_share: ratio(held.cpu_millis, capacity.cpu_millis),
            memory_share: ratio(held.memory_mib, capacity.memory_mib),
            gpu_share: ratio(held.gpu_milli, capacity.gpu_milli),
            dropped: f.dropped.clone(),
            gpu_curve: f.gpu_curve.iter().map(gpu_fill_point).collect(),
            gpu_at_full: f.gpu_curve.iter().find(|p| p.arrived_milli >= p.capacity_milli).map(gpu_fill_point),
        }
    }
}

impl Report {
    /// The report as pretty JSON, ending in a newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, zone: &str) -> HostLife {
        let mut attributes = paceline_model::Labels::new();
        attributes.insert("zone".into(), zone.into());
        HostLife {
            name: name.into(),
            resources: Resources::new(4_000, 8_192, 0, 0),
            attributes,
            joined_ms: 0,
            left_ms: None,
        }
    }

    fn task(job: &str, i: u32, cpu: u64, runs: Vec<RunLife>, outcome: Outcome) -> TaskLife {
        TaskLife {
            job: job.into(),
            instance: i,
            pool: "/p".into(),
            kind: "batch".into(),
            demand: Resources::new(cpu, 1_024, 0, 0),
            arrived_ms: 0,
            runs,
            outcome,
            reason: (outcome == Outcome::NeverPlaced).then(|| "insufficient_resources".into()),
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = Percentiles::of((1..=100).collect());
        assert_eq!((p.p50, p.p95, p.p99, p.max, p.count), (50, 95, 99, 100, 100));
        assert_eq!(Percentiles::of(vec![]), Percentiles::default());
    }

    #[test]
    fn stranded_capacity_is_free_space_no_waiting_task_fits() {
        // Two hosts of 4 cores, each holding 3: 1 core free on each, and a
        // task of 2 cores waits. Both free cores are stranded.
        let placed = |h: &str| RunLife {
            run: 1,
            queued_ms: 0,
            placed_ms: Some(0),
            host: Some(h.into()),
            ended_ms: Some(10_000),
            end: Some("SUCCEEDED".into()),
            preempted: false,
        };
        let waiting = RunLife { run: 1, queued_ms: 0, ..RunLife::default() };
        let obs = Observed {
            hosts: vec![host("a", "z1"), host("b", "z2")],
            tasks: vec![
                task("j", 0, 3_000, vec![placed("a")], Outcome::Succeeded),
                task("j", 1, 3_000, vec![placed("b")], Outcome::Succeeded),
                task("k", 0, 2_000, vec![waiting], Outcome::NeverPlaced),
            ],
            samples_ms: vec![5_000, 20_000],
            spread_key: "zone".into(),
            ..Observed::default()
        };
        let r = obs.report();
        assert_eq!(
            r.series.stranded_cpu_cores,
            vec![2.0, 0.0],
            "after the frees the 2-core task fits: nothing stranded"
        );
        assert_eq!(r.outcomes.accounted(), r.outcomes.tasks);
        assert_eq!(r.never_placed.by_reason.get("insufficient_resources"), Some(&1));
        assert_eq!(r.summary.spread_jobs, 1);
        assert_eq!(r.summary.spread_mean_values, 2.0);
        assert_eq!(r.series.cpu, vec![0.75, 0.0]);
    }
}
