//! The ready queue: admitted tasks going out to a placement engine, and the
//! engine's outcome coming back. The resource manager decides what is ready
//! (admission against pool entitlements); the job manager knows what each
//! task needs and owns every task's record. Both live in one process
//! (decision 0012), and the job manager serves this port for both.

use async_trait::async_trait;
use paceline_model::job::JobKind;
use paceline_model::{Constraint, Preference, Resources, UnplacedReason};

use crate::error::PortError;
use crate::lease::LeaseId;

/// The resource manager's handle of an admitted task. Valid only at the
/// resource manager that issued it (which checks it when it comes back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskHandle(pub u64);

/// A pool's handle in the resource manager that issued it. Valid until the
/// pool is deleted; a later pool may reuse it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolId(pub u32);

impl PoolId {
    /// The root pool `/`.
    pub const ROOT: PoolId = PoolId(0);

    /// The arena index, for tables keyed by pool.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// An admitted task handed to a placement engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyTask {
    /// The task's handle.
    pub id: TaskHandle,
    /// Its job's key (the job manager's number for the job).
    pub job: u64,
    /// Its instance number.
    pub instance: u32,
    /// Admission number of its gang: tasks sharing it are placed all or none.
    pub gang: u64,
    /// Its pool.
    pub pool: PoolId,
    /// Job priority.
    pub priority: u32,
    /// What one run needs.
    pub resources: Resources,
}

/// What placing one task takes beyond its resources, as the job manager
/// knows it: only what the engine reads, so a round copies no task specs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Need {
    /// The job's id.
    pub job_id: String,
    /// Hard constraints of the run to place.
    pub constraints: Vec<Constraint>,
    /// Soft constraints of the run to place.
    pub preferences: Vec<Preference>,
    /// The host the task prefers: a stateful instance's last host (where its
    /// volume is), a daemon instance's host.
    pub preferred_host: Option<String>,
    /// Only `preferred_host` will do (a daemon instance).
    pub host_required: bool,
    /// The placement slot to ask (`placement/<kind>`, or the job's override).
    pub slot: String,
    /// A host not to use for this run: the previous launch there was refused.
    pub avoid_host: Option<String>,
    /// GPU models the task accepts (empty: any); checked per device.
    pub gpu_models: Vec<String>,
}

/// What one [`ReadyQueue::take_ready`] handed out. Every task is PLACING
/// until it is committed or sent back unplaced (or the resource manager's
/// PLACING timeout returns it to READY: an engine that died mid-round loses
/// nothing).
#[derive(Clone, Debug, Default)]
pub struct Taken {
    /// Tasks to place, each with what it needs.
    pub ready: Vec<(ReadyTask, Need)>,
    /// Tasks whose job is gone or no longer wants them placed: send them
    /// back (they are not placeable).
    pub orphans: Vec<ReadyTask>,
}

/// A task and the host an engine chose for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The task, as it was taken.
    pub task: ReadyTask,
    /// The chosen host, one of the lease's.
    pub host: String,
    /// The host's GPU devices the task gets (empty when it asks for none).
    pub gpu: paceline_model::gpu::GpuGrant,
}

/// What a [`ReadyQueue::commit`] did with each placement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Committed {
    /// Written PLACED and LAUNCHING and accepted by the host manager.
    pub launched: u32,
    /// Written, but their host refused the launch: a new run, that host
    /// avoided next time, back to READY at once or, refused again, after a
    /// backoff.
    pub refused: u32,
    /// No longer waiting (killed or preempted while the engine decided, or
    /// their job gone): not launched, released.
    pub dropped: u32,
}

/// The ready queue as a placement engine sees it. Each call covers a batch:
/// a round makes one `take_ready` per job kind and one `commit` and at most
/// one `unplaced` per group, whatever the number of tasks.
#[async_trait]
pub trait ReadyQueue: Send + Sync {
    /// Takes up to `max` READY tasks of `kind` (whole gangs, so possibly more)
    /// and marks them PLACING.
    async fn take_ready(&self, kind: JobKind, max: usize, now_ms: u64) -> Result<Taken, PortError>;

    /// Sends tasks back to READY with a reason (their "why pending"; the
    /// resource manager backs them off, but for
    /// [`UnplacedReason::HostManagerUnreachable`]: nothing was tried, so no
    /// attempt counts and they return after a short fixed delay). Returns
    /// how many still were PLACING.
    async fn unplaced(&self, tasks: &[(TaskHandle, UnplacedReason)], now_ms: u64) -> Result<usize, PortError>;

    /// The one step from PLACING to running: for each placement whose task
    /// still waits, the resource manager's record becomes PLACED, the job
    /// manager writes PLACED and LAUNCHING with the host, and the runs are
    /// launched on the hosts of `lease`. A task that no longer waits is
    /// dropped. One call, so that no failure between the steps can leave a
    /// task PLACED but never launched (PLACED has no timeout; PLACING has).
    async fn commit(&self, lease: LeaseId, placements: Vec<Placement>, now_ms: u64) -> Result<Committed, PortError>;
}
