//! Runs on hosts: what the job manager asks a host to start
//! ([`LaunchRequest`]) and what comes back ([`RunUpdate`]).
//!
//! These are the provider-neutral shapes that cross the host manager: the
//! agent, Mesos and simulated providers all translate to and from them, and
//! the job manager and resource manager consume them without knowing which
//! provider ran the task.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::task::{TaskSpec, TaskState};

/// The environment the job manager gives every run of instance `instance`
/// of job `job_id` (`PACELINE_JOB_ID`, `PACELINE_INSTANCE`,
/// `PACELINE_RUN_ID`); a host adds its own (`PACELINE_TASK_ID`, ports, …).
pub fn run_env(job_id: &str, instance: u32, run_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("PACELINE_JOB_ID".to_string(), job_id.to_string()),
        ("PACELINE_INSTANCE".to_string(), instance.to_string()),
        ("PACELINE_RUN_ID".to_string(), run_id.to_string()),
    ])
}

/// Start one run of a task on a host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRequest {
    /// Unique run id, `<job>-<instance>-<run>` (see [`crate::task::TaskId::run_id`]).
    pub run_id: String,
    /// The task id, `<job>-<instance>`; persistent volumes are kept per task id.
    pub task_id: String,
    /// What to run; its `resources` are what the host sets aside.
    pub spec: TaskSpec,
    /// Extra environment the runtime adds (PACELINE_JOB_ID, PACELINE_INSTANCE, …).
    pub env: BTreeMap<String, String>,
    /// The spec's secrets with their values, resolved by the job manager
    /// just before the launch (decision 0032). Never stored: the host keeps
    /// them in memory for the run only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<crate::task_secret::LaunchSecret>,
    /// The host's GPU devices the run gets (placement's grant); empty for a
    /// run that asks for no GPU, or to let the host manager choose.
    #[serde(default, skip_serializing_if = "crate::gpu::GpuGrant::is_empty")]
    pub gpu: crate::gpu::GpuGrant,
    /// For a gang member: the ports the host must assign (chosen by the job
    /// manager, so that every member could be told every member's) and the
    /// peers file (see [`crate::gang`]). `None` for any other run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<crate::gang::GangLaunch>,
    /// The host user to run as (the job's `user:`, which its pool allowed);
    /// `None`: the host's default (a uid of the run's own on an agent that
    /// runs as root). A host that cannot run the task as this user refuses
    /// the launch rather than run it as anyone else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// The states a host reports for a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunState {
    /// The sandbox is ready and the process is being started.
    Starting,
    /// The process runs.
    Running,
    /// Exited with status 0.
    Succeeded,
    /// Exited non-zero, was signalled, failed to start or hit its memory limit.
    Failed,
    /// Stopped on request.
    Killed,
    /// The host or its agent lost track of it.
    Lost,
}

impl RunState {
    /// The run ended.
    pub fn is_terminal(self) -> bool {
        matches!(self, RunState::Succeeded | RunState::Failed | RunState::Killed | RunState::Lost)
    }

    /// The task state this run state maps to.
    pub fn task_state(self) -> TaskState {
        match self {
            RunState::Starting => TaskState::Starting,
            RunState::Running => TaskState::Running,
            RunState::Succeeded => TaskState::Succeeded,
            RunState::Failed => TaskState::Failed,
            RunState::Killed => TaskState::Killed,
            RunState::Lost => TaskState::Lost,
        }
    }

    /// Upper-case name, as in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Starting => "STARTING",
            RunState::Running => "RUNNING",
            RunState::Succeeded => "SUCCEEDED",
            RunState::Failed => "FAILED",
            RunState::Killed => "KILLED",
            RunState::Lost => "LOST",
        }
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state change of one run, as a host reported it.
///
/// Delivered at least once and in order per run: consumers drop an update
/// whose `seq` they have already handled (and acknowledge it again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunUpdate {
    /// The host the run is on.
    pub host: String,
    /// The run.
    pub run_id: String,
    /// Its task id.
    pub task_id: String,
    /// Per run: 1, 2, 3, … in the order the host produced them.
    pub seq: u64,
    /// The new state.
    pub state: RunState,
    /// Health after the last check, when the run has a health check.
    pub healthy: Option<bool>,
    /// Exit status, when the process exited.
    pub exit_code: Option<i32>,
    /// The signal that ended the process, when one did.
    pub signal: Option<i32>,
    /// Machine-readable reason (EXITED, KILLED_BY_REQUEST, MEMORY_LIMIT, HOST_LOST, …).
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
    /// When it happened, milliseconds since the Unix epoch (virtual time for simulated hosts).
    pub at_ms: u64,
    /// Host ports assigned to the run, by name.
    pub ports: BTreeMap<String, u16>,
}
