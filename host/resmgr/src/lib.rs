//! # paceline-resmgr
//!
//! The resource manager: who may use how much of the cluster, and in what order.
//!
//! ```text
//!  pool changes (API, YAML) ──▶ PoolTree ──┐
//!  cluster capacity ───────────────────────┤
//!  gangs (submit) ──▶ pool queues ─────────┼─▶ entitlement ─▶ admission ─▶ READY queue ─▶ placement
//!  transitions (placement, runtime) ───────┘        │                           ▲
//!                                                   └─▶ preemption round ─▶ kill requests ─▶ runtime
//! ```
//!
//! - **Owns**: the pool tree (specs, validation), per-pool accounting of
//!   demand and allocation (non-revocable and revocable, aggregated up the
//!   tree), entitlement, the queues of gangs, the states of admitted tasks
//!   (READY → … → terminal, with timeouts and placement backoff), and the
//!   decision of when to preempt.
//! - **Receives**: pool changes, the cluster's capacity, gangs, transitions
//!   from placement and the runtime, a clock (`now_ms` on every call: nothing
//!   here sleeps or reads the time), a [`PreemptionPolicy`], and an
//!   [`AvailabilityGate`] (the job manager's count of unavailable instances).
//! - **Hands on**: batches of READY tasks per job kind
//!   ([`ResourceManager::take_ready`]), kill requests ([`TickReport::kills`]),
//!   and "why pending" per queued gang ([`ResourceManager::why_pending`]).
//! - **Must not touch**: hosts and placement (the placement engine does), the
//!   Wasm runtime (`host/plugin` adapts its `preemption` slot to
//!   [`PreemptionPolicy`]; this crate links only the native default),
//!   storage, and async runtimes. Decisions use integers only.
//!
//! See docs/resmgr.md for the rules as users see them.
//!
//! # Layout
//! - [`tree`]: the pool tree, its validation and the YAML loader.
//! - [`waterfill`](crate::waterfill) (private): integer weighted max-min fill.
//! - [`entitlement`](crate::entitlement) (private): the three-phase division, full and incremental, and slack.
//! - [`gang`]: gang specs and the handle of a queued gang.
//! - [`queue`]: the gang slab and per-pool priority-then-FIFO queues.
//! - [`admit`](crate::admit) (private): admission and the head-of-line rules.
//! - [`task`]: task states, the transition table, timeouts and backoff.
//! - [`manager`]: [`ResourceManager`], which ties these together, and the tick.
//! - [`round`](crate::round) (private): preemption triggers and carrying out victims.
//! - [`preempt`]: the [`PreemptionPolicy`] trait, the native default, victim validation.
//! - [`gate`]: the [`AvailabilityGate`] port: a stateless job's count of
//!   unavailable instances, asked before one of them is preempted (the job
//!   manager implements it).
//! - [`reason`]: "why pending".
//! - [`error`](crate::error): errors.
//! - [`bench`]: the benchmark workloads behind `paceline bench resmgr`.
#![forbid(unsafe_code)]

mod admit;
mod amounts;
pub mod bench;
mod entitlement;
pub mod error;
pub mod gang;
pub mod gate;
pub mod manager;
pub mod preempt;
pub mod queue;
pub mod reason;
mod round;
pub mod task;
pub mod tree;
mod waterfill;

pub use error::{PolicyError, PoolError, PoolErrorReason, SubmitError, TaskError, VictimError};
pub use gang::{GangId, GangSpec};
pub use gate::{AvailabilityGate, GateAsk};
pub use manager::{
    Config, KillReason, KillRequest, PoolStatus, ReadyTask, ResourceManager, TaskHandle, TaskInfo, TickReport,
};
pub use paceline_model::pool::{PerKind, PoolFile, PoolSpec, PoolType, QueuePolicy, ResourceKind, UNLIMITED};
pub use preempt::{NativePriorityPreempt, PreemptionPolicy};
pub use reason::{PendingCount, PendingInfo, PendingReason, TaskWait};
pub use task::{TaskState, Timeouts, Transition};
pub use tree::{PoolId, PoolTree};
