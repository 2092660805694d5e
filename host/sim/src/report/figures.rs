//! The report's figures as serialised: the shape of `paceline-sim-report` version 1.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::observed::{Measured, PluginCalls, TaskLife};

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
