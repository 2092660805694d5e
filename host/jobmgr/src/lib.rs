//! # paceline-jobmgr
//!
//! The job manager: jobs, their tasks and runs, the goal-state engine that
//! drives every task toward what the runtime wants of it, rolling updates,
//! and the calls to the `lifecycle/<kind>` plugin slots that decide how each
//! job kind reacts to events.
//!
//! ```text
//!  API ──create/kill/restart/update──▶ JobManager ──gangs──▶ resmgr ──ready──▶ placement
//!                                        ▲   │                                    │
//!   hostmgr ──RunUpdate (on_run_update)──┘   │◀──────── on_placed(lease, placements)
//!                                            ├──launch / kill──▶ TaskLauncher (hostmgr)
//!                                            └──on_event──▶ lifecycle plugin ──actions──┐
//!                                                 ▲─────────────────────────────────────┘
//! ```
//!
//! - **Owns**: job configs (versioned) and runtimes, task runtimes (one run
//!   at a time, run ids), task events, update workflows and their
//!   per-instance progress — all through [`paceline_storage::Store`], every
//!   runtime write a compare-and-set; the job-id ↔ `u64` key map the
//!   resource manager speaks in; the deadline queue (restart backoff, max
//!   run time, kill retries).
//! - **Receives**: API calls ([`JobManager::create`] …), placements
//!   ([`JobManager::on_placed`]), run updates from hosts
//!   ([`JobManager::on_run_update`]), host inventory changes
//!   ([`JobManager::on_hosts_changed`], [`JobManager::on_host_draining`]),
//!   kill requests of the resource manager ([`JobManager::on_resmgr_kills`])
//!   and time ([`JobManager::tick`] with a [`Clock`]).
//! - **Hands on**: gangs to the resource manager, launches and kills to a
//!   [`TaskLauncher`], what placement needs per task
//!   ([`JobManager::placement_need`]) and which runs hosts should hold
//!   ([`JobManager::expected_runs`]).
//! - **Must not touch**: hosts (only through [`TaskLauncher`]), placement
//!   decisions, pool accounting (the resource manager's), other crates'
//!   storage tables.
//!
//! # Layout
//! - [`joints`]: the traits and records the placement engine and wiring call with.
//! - [`clock`]: injected time ([`SystemClock`], [`ManualClock`]).
//! - [`error`]: the one error type, [`JobError`].
//! - [`table`]: the declarative (state, goal) → action table.
//! - [`deadline`]: the deadline queue.
//! - `state` (private): the in-memory mirror of jobs and tasks.
//! - `views` (private): building the lifecycle plugin's views.
//! - [`manager`]: [`JobManager`]: the API, the joints, the engine's effects.
//! - `validate` (private): create-time checks beyond `JobConfig::validate`.
//! - [`plugins`]: registering the native lifecycle fallbacks.
//! - [`scenario`]: a reusable test harness (recording launcher, placement player).
//! - [`bench`]: the `paceline bench jobmgr` figures.
#![forbid(unsafe_code)]

pub mod bench;
pub mod clock;
pub mod deadline;
pub mod error;
pub mod feed;
pub mod joints;
pub mod manager;
pub mod plugins;
pub mod scenario;
mod state;
pub mod table;
mod validate;
mod views;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::JobError;
pub use joints::{Placement, PlacementNeed, TaskLauncher};
pub use manager::{JobInfo, JobManager, JobManagerConfig, UpdateRequest};
