//! Launches and kills: how the job manager starts and stops runs on hosts,
//! and the runs it expects them to hold (reconciliation after a restart or a
//! failover).

use std::time::Duration;

use async_trait::async_trait;
use paceline_model::Resources;
use paceline_model::run::LaunchRequest;

use crate::error::PortError;
use crate::lease::LeaseId;

/// The host manager as the job manager sees it for launches.
///
/// The job manager awaits these calls while it holds its operation lock: an
/// implementation must not call back into the job manager before returning
/// (run updates come back through the host manager's event stream).
#[async_trait]
pub trait Launcher: Send + Sync {
    /// Launches `runs` on `host`, one of the hosts of `lease`. `Ok(refused)`
    /// means the host side accepted every run not listed in `refused` (their
    /// progress comes back as run updates) and started none of those listed:
    /// a run is refused alone when only it conflicts with what the host side
    /// holds (its run id already known, its task with a live run, no GPU
    /// device for it), so its batch-mates still start. `Err` means none was
    /// started.
    async fn launch(&self, lease: LeaseId, host: &str, runs: Vec<LaunchRequest>) -> Result<Vec<RunRefused>, PortError>;

    /// Stops run `run_id`, with a grace period (`None`: the provider's
    /// default). The end comes back as a run update (KILLED or LOST); `Err`
    /// is retried by the job manager.
    async fn kill(&self, run_id: &str, grace: Option<Duration>) -> Result<(), PortError>;
}

/// A run of a launch batch that the host side refused on its own, the rest
/// of the batch started ([`Launcher::launch`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunRefused {
    /// The run (`<job>-<instance>-<run>`).
    pub run_id: String,
    /// Why, for the task's events.
    pub reason: String,
}

/// A run the job manager's records place on a host.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExpectedRun {
    /// The host.
    pub host: String,
    /// The run (`<job>-<instance>-<run>`).
    pub run_id: String,
    /// Its task id (`<job>-<instance>`).
    pub task_id: String,
    /// What it holds.
    pub resources: Resources,
    /// The GPU devices it holds on the host.
    #[serde(default, skip_serializing_if = "paceline_model::gpu::GpuGrant::is_empty")]
    pub gpu: paceline_model::gpu::GpuGrant,
    /// The last update seq the job manager handled (0 if none): an update the
    /// host manager makes up (a LOST for a missing run) must follow it.
    pub last_seq: u64,
}
