//! # paceline-jobmgr
//!
//! The job manager: jobs, their tasks and runs, the goal-state engine that
//! drives every task toward what the runtime wants of it, rolling updates,
//! and the calls to the `lifecycle/<kind>` plugin slots that decide how each
//! job kind reacts to events.
//!
//! ```text
//!  API ──create/kill/restart/update──▶ JobManager ──gangs──▶ resmgr (admission)
//!                                        ▲   │  ReadyQueue: take_ready ─────────▶ placement
//!   hostmgr ──RunUpdate (on_run_updates)─┘   │◀─ ReadyQueue: commit(lease, placements)
//!                                            ├──launch / kill──▶ Launcher (hostmgr)
//!                                            └──on_events──▶ lifecycle plugin ──actions──┐
//!                                                 ▲──────────────────────────────────────┘
//! ```
//!
//! - **Owns**: job configs (versioned) and runtimes, task runtimes (one run
//!   at a time, run ids), task events, update workflows and their
//!   per-instance progress — all through [`paceline_storage::Store`], every
//!   runtime write a compare-and-set; the job-id ↔ `u64` key map the
//!   resource manager speaks in; the deadline queue (restart backoff, max
//!   run time, kill retries); the retention of finished jobs ([`retention`],
//!   run by the leading server). It opens task secrets (decision 0032) only to
//!   hand them to a launch, and keeps no value. Pool changes made durable
//!   ([`pools::PoolManager`]: applied to the resource manager, stored, undone
//!   when the store refuses), and the pools read back at start.
//! - **Receives**: API calls ([`JobManager::create`] …), placements
//!   (it serves the joints' [`ReadyQueue`](paceline_joints::ReadyQueue): the
//!   commit is the one owner of PLACED), run updates from hosts
//!   ([`JobManager::on_run_update`]), host inventory changes
//!   ([`JobManager::on_hosts_changed`], [`JobManager::on_host_draining`]),
//!   kill requests of the resource manager ([`JobManager::on_resmgr_kills`]),
//!   its preemption rounds' questions (the availability gate,
//!   [`JobManager::install_availability_gate`])
//!   and time ([`JobManager::tick`] with a [`Clock`](paceline_joints::Clock), the joints' one clock).
//! - **Hands on**: gangs to the resource manager, launches and kills to a
//!   [`Launcher`](paceline_joints::Launcher), what placement needs per task
//!   (with each ready task) and which runs hosts should hold
//!   ([`JobManager::expected_runs`]).
//! - **Must not touch**: hosts (only through the launcher), placement
//!   decisions, pool accounting (the resource manager's), other crates'
//!   storage tables.
//!
//! # Layout
//! - [`error`]: the one error type, [`JobError`].
//! - [`pools`]: pool changes and the pools restored at start.
//! - [`table`]: the declarative (state, goal) → action table.
//! - [`deadline`]: the deadline queue.
//! - `state` (private): the in-memory mirror of jobs and tasks.
//! - [`live_counts`]: live jobs and tasks per owner and pool, kept as the
//!   mirror changes, for the API's quotas.
//! - `availability` (private): the one count of a job's unavailable
//!   instances and the permission to take one down (decision 0046).
//! - `views` (private): building the lifecycle plugin's views.
//! - [`manager`]: [`JobManager`], one module per flow: `api`, `writes`,
//!   `admission` (gangs to the resource manager), `goal` (the goal-state
//!   step), `lifecycle` (the plugin and its actions), `launch` (the ready
//!   queue: needs, commit, launches), `runs` (run updates), `tick`
//!   (deadlines, preemption kills, update progress), `update`, `hosts`,
//!   `recover`, `secrets` (the secrets a config may name, and which jobs
//!   name one), `gate` (the availability gate preemption rounds ask).
//! - `validate` (private): create-time checks beyond `JobConfig::validate`.
//! - [`scenario`]: a reusable test harness (recording launcher, placement player).
//! - [`bench`]: the `paceline bench jobmgr` figures.
#![forbid(unsafe_code)]

mod availability;
pub mod bench;
pub mod deadline;
pub mod error;
pub mod events;
pub mod feed;
pub mod latency;
pub mod live_counts;
pub mod manager;
pub mod pools;
pub mod retention;
pub mod scenario;
mod state;
pub mod table;
mod validate;
mod views;

pub use availability::Availability;
pub use error::JobError;
pub use events::EventRecorder;
pub use manager::{JobInfo, JobManager, JobManagerConfig, PendingReport, UpdateRequest};
pub use pools::{PoolChangeError, PoolManager};
