//! What a runner observed during a replay, handed to [`Observed::report`].

use std::collections::BTreeMap;

use paceline_model::Resources;
use serde::{Deserialize, Serialize};
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
