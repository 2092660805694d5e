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
//!
//! The parts: `observed` (what a runner hands over), `figures` (the
//! report's shape, as serialised) and `compute` (observation → figures).

mod compute;
mod figures;
mod observed;

pub use figures::{
    Fill, GpuFillPoint, MeanPeak, NeverPlaced, NeverPlacedTask, Outcomes, Percentiles, PoolFairness, PoolSeries,
    Report, Series, Summary, WaitGroup,
};
pub use observed::{
    FillObserved, FillPoint, HostLife, Measured, Observed, Outcome, PluginCalls, PluginLatency, PoolSample, RunLife,
    TaskLife,
};

/// The `report` value of every report.
pub const REPORT_FORMAT: &str = "paceline-sim-report";
/// This report format's version.
pub const REPORT_VERSION: u32 = 1;
/// Tasks listed by name under `never_placed.tasks` (all are counted).
pub const NEVER_PLACED_LISTED: usize = 1_000;

impl Report {
    /// The report as pretty JSON, ending in a newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}
