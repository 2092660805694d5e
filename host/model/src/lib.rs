//! # paceline-model
//!
//! Domain types and pure logic shared by every role: resources in integer
//! units, labels, hard and soft constraints and their evaluation, pools,
//! jobs, tasks and hosts with their state tables, and the views of hosts and
//! tasks from which a plugin request is built.
//!
//! It owns no state and performs no I/O, but for [`secret`]'s reading of
//! secret files and its one writer of key files (every crate that keeps a
//! secret shares them). It must not depend on any other
//! workspace crate: not on the other `host/` crates, and not on the plugin
//! SDK either. The plugin contract (`wit/`, mirrored by the SDK's types) and
//! the public API (`proto/`) have types of their own, each converted to and
//! from these in exactly one place (`paceline_joints::contract` and
//! `paceline_proto::convert`), so that the model can change while a released
//! contract or API version stays as it was (decision 0013).
//!
//! # Layout
//! - [`resources`]: the `Resources` vector and its saturating arithmetic.
//! - [`labels`]: key/value labels on hosts and tasks.
//! - [`constraint`]: hard constraints and soft preferences, and their evaluation.
//! - [`pool`]: pool specs (reservation, limit, share, type, slack) and the YAML file format.
//! - [`job`]: job specs, SLA, update specs, job runtime and the state derived from task counts.
//! - [`task`]: task specs, task runtimes with run ids, the task state table with timeouts, events.
//! - [`health`]: a task's health check (command, HTTP GET or TCP connect) and its validation.
//! - [`secret`]: a configured secret that never formats, its readers, and the atomic key-file writer.
//! - [`task_secret`]: secrets a task references by name, and their values on the way to a launch.
//! - [`task_user`]: the host user a job may name (`user:`) and the pools' allow-lists of them.
//! - [`run`]: launch requests and run updates that cross the host manager.
//! - [`run_id`]: [`RunId`], `<job>-<instance>-<run>`, built and split in one place.
//! - [`host`]: host inventory records and the maintenance state machine.
//! - [`view`]: a host as placement sees it ([`view::HostView`]).
//! - [`unplaced`]: why a task was not placed in a round.
//! - [`event`]: events of jobs and tasks for people, with repeats folded in (decision 0025).
#![forbid(unsafe_code)]

pub mod constraint;
pub mod event;
pub mod gang;
pub mod gpu;
pub mod health;
pub mod host;
pub mod job;
pub mod labels;
pub mod pending;
pub mod pool;
pub mod resources;
pub mod run;
pub mod run_id;
pub mod secret;
pub mod task;
pub mod task_secret;
pub mod task_user;
pub mod unplaced;
pub mod view;

pub use constraint::{Constraint, Preference};
pub use labels::Labels;
pub use resources::Resources;
pub use run_id::{RunId, RunIdError};
pub use unplaced::UnplacedReason;
