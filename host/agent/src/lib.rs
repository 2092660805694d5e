//! # paceline-agent
//!
//! The node agent (`paceline agent`): it owns the task processes of one
//! host, their sandboxes, logs and persistent volumes, and the agent side of
//! the agent protocol (`proto/paceline/agent/v1/agent.proto`). It receives
//! `Launch`/`Kill`/`Ack`/`ReadLog` from the host manager and hands on
//! `Register`, heartbeats and status updates. It does not decide what runs
//! where (placement, the job manager) and must not touch other crates'
//! state; everything it keeps lives under its data dir.
//!
//! # Layout
//!
//! - [`config`]: [`AgentConfig`] and host detection (resources, GPUs, attributes).
//! - [`isolation`]: cgroup v2 per run when delegated, else rlimits.
//! - [`spec`]: [`RunSpec`], the validated launch the supervisor keeps.
//! - [`supervisor`]: [`Supervisor`], processes, kills, health checks, restart re-adoption.
//! - [`outbox`]: [`Outbox`], status updates on disk until acknowledged.
//! - [`launch_log`]: `launches.log`, one appended line per process start.
//! - [`task_user`]: which OS user a task runs as (a uid per run, decision 0047).
//! - [`identity`]: the agent's key, certificate and CA; joining with a token.
//! - [`session`]: [`run`], the gRPC session with the host manager.
//! - [`convert`]: model ⇄ protocol conversions for the host manager's agent provider.
//! - [`bench`]: [`bench_launch`], the launch-throughput figure.
//! - [`usage`]: what runs actually use (cgroup v2 or `/proc`), sampled for heartbeats.
//!
//! Private helpers: `process` (launch wrapper, signals, `/proc`), `health`
//! (one probe), `record` (the persisted run record), `ports` (port and GPU
//! pools).

pub mod bench;
pub mod config;
pub mod convert;
pub mod error;
mod health;
pub mod identity;
pub mod isolation;
pub mod launch_log;
pub mod outbox;
mod ports;
mod process;
mod record;
pub mod session;
pub mod spec;
pub mod supervisor;
pub mod task_user;
pub mod usage;

pub use bench::{BenchFigures, bench_launch};
pub use config::{AgentConfig, HostInfo, ResourceOverrides};
pub use error::{AgentError, LaunchError};
pub use identity::{Identity, JoinSettings, JoinToken};
pub use isolation::{Isolation, IsolationChoice};
pub use outbox::Outbox;
pub use session::run;
pub use spec::RunSpec;
pub use supervisor::{LaunchOutcome, LogData, Supervisor, SupervisorConfig};
pub use task_user::{TaskUserChoice, TaskUsers};
