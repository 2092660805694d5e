//! The joints other roles call the job manager through, and the one it
//! calls out through. These signatures are the contract with the placement
//! engine and the wiring in `host/paceline`; keep them stable.

use std::sync::Arc;

use async_trait::async_trait;
use paceline_model::job::JobKind;
use paceline_model::run::LaunchRequest;
use paceline_model::task::TaskSpec;

/// How the job manager starts and stops runs on hosts. The wiring
/// implements it over the host manager; tests record calls.
///
/// The job manager awaits these calls while it holds its operation lock:
/// an implementation must not call back into the [`crate::JobManager`]
/// before returning (deliver run updates from another task or a channel).
#[async_trait]
pub trait TaskLauncher: Send + Sync {
    /// Launches `runs` on `host` under the placement engine's offer lease
    /// `lease_id`. `Ok` means the provider accepted them; their progress
    /// comes back as `RunUpdate`s through [`crate::JobManager::on_run_update`].
    /// `Err` means none was started: the job manager sends them back to
    /// READY (with a new run id).
    async fn launch(&self, lease_id: &str, host: &str, runs: Vec<LaunchRequest>) -> Result<(), String>;

    /// Asks `host` to stop run `run_id`, with a grace period in seconds
    /// (`None`: the provider's default). The end comes back as a
    /// `RunUpdate` in state KILLED (or LOST). `Err` is retried by the
    /// job manager's deadline queue.
    async fn kill(&self, host: &str, run_id: &str, grace_secs: Option<u32>) -> Result<(), String>;
}

/// What the placement engine needs to place one READY task that the
/// resource manager handed it (`ReadyTask { job, instance, .. }`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementNeed {
    /// The job's id (the resource manager knows only the `u64` key).
    pub job_id: String,
    /// The job's kind.
    pub kind: JobKind,
    /// The spec of the config version the next run will use.
    pub spec: Arc<TaskSpec>,
    /// The host the task would like: a stateful instance's last host (where
    /// its volume is), a daemon instance's host. `None` for the others.
    pub preferred_host: Option<String>,
    /// `true` when only `preferred_host` will do (daemon instances).
    pub host_required: bool,
    /// The placement slot to ask: the job's override for
    /// `placement/<kind>` if it names one, else `placement/<kind>`.
    pub placement_slot: String,
    /// The run id that will be launched (`<job>-<instance>-<run>`).
    pub run_id: String,
    /// A host not to use for this run: the previous run's launch there was
    /// refused (a Mesos offer rescinded, an agent that refused). Not set for
    /// daemon instances, which have one host.
    pub avoid_host: Option<String>,
}

/// One placed task, as the placement engine hands it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The job's key in the resource manager (`ReadyTask::job`).
    pub job_key: u64,
    /// Instance number.
    pub instance: u32,
    /// The resource manager's handle of the task (`ReadyTask::id`).
    pub resmgr_task: paceline_resmgr::TaskId,
    /// The chosen host.
    pub host: String,
}
