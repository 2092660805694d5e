//! # paceline-model
//!
//! Domain types and pure logic shared by every role: resources in integer
//! units, labels, hard and soft constraints and their evaluation, pools,
//! jobs, tasks and hosts with their state tables, and the views of hosts and
//! tasks from which a plugin request is built.
//!
//! It owns no state and performs no I/O. It must not depend on any other
//! `host/` crate; the plugin contract's resource type comes from the SDK
//! (`paceline-plugin-sdk`), so the scheduler and plugins count resources the
//! same way.
//!
//! # Layout
//! - [`resources`]: the `Resources` vector (re-exported from the SDK).
//! - [`labels`]: key/value labels on hosts and tasks.
//! - [`constraint`]: hard constraints and soft preferences, and their evaluation.
//! - [`pool`]: pool specs (reservation, limit, share, type, slack) and the YAML file format.
//! - [`job`]: job specs, SLA, update specs, job runtime and the state derived from task counts.
//! - [`task`]: task specs, task runtimes with run ids, the task state table with timeouts, events.
//! - [`run`]: launch requests and run updates that cross the host manager.
//! - [`host`]: host inventory records and the maintenance state machine.
//! - [`view`]: host and task views, and [`view::build_placement_request`].
#![forbid(unsafe_code)]

pub mod constraint;
pub mod host;
pub mod job;
pub mod labels;
pub mod pool;
pub mod resources;
pub mod run;
pub mod task;
pub mod view;

pub use constraint::{Constraint, Preference};
pub use labels::Labels;
pub use resources::Resources;
