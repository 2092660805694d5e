//! Plain Rust mirrors of the `paceline:scheduler@0.1.3` WIT types.
//!
//! Field names and meanings are those of `wit/types.wit`; see there for the
//! contract. These types are what a policy reads and returns, what scenario
//! files hold, and what the host runtime hands to native fallbacks, so the
//! same policy code runs natively and as a component.

use serde::{Deserialize, Serialize};

/// An amount of each schedulable resource, in integer units.
///
/// Arithmetic saturates; no scheduling decision uses floats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Resources {
    /// CPU in millicores: 1000 is one core.
    pub cpu_millis: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Disk in MiB.
    pub disk_mib: u64,
    /// Whole GPU devices (in a host's `free`: its wholly free devices; in a
    /// demand: 0 for a share of one device, see [`GpuTask`]).
    pub gpus: u64,
    /// Host ports, as a count.
    pub ports: u64,
}

/// One host leased to a placement round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostOffer {
    /// What is free on the host for this round.
    pub free: Resources,
    /// The host's whole capacity.
    pub total: Resources,
}

/// A host attribute laid out as a column over the request's hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttributeColumn {
    /// Attribute name, such as `zone`.
    pub key: String,
    /// One value per host: an index into `PlacementRequest::symbols`, or
    /// [`NO_VALUE`] when the host lacks the attribute.
    pub values: Vec<u32>,
}

/// Marks a host that has no value for an attribute.
pub const NO_VALUE: u32 = u32::MAX;

/// How many tasks of one job a host already runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCount {
    /// Index into `PlacementRequest::hosts`.
    pub host: u32,
    /// Tasks of the job already on that host.
    pub count: u32,
}

/// What a policy needs to know about a job in the round.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobInfo {
    /// Scheduling priority; higher is more important.
    pub priority: u32,
    /// At most this many of the job's tasks per host (existing included); 0 is no limit.
    pub max_per_host: u32,
    /// Index into `PlacementRequest::attributes` to spread the job across.
    pub spread_over: Option<u32>,
    /// Hosts that already run tasks of this job.
    pub existing: Vec<HostCount>,
}

/// A soft constraint: a weighted preference for hosts with an attribute value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preference {
    /// Index into `PlacementRequest::attributes`.
    pub attribute: u32,
    /// Index into `PlacementRequest::symbols`.
    pub value: u32,
    /// Added to a matching host's score; negative to avoid.
    pub weight: i32,
}

/// The hosts a task may run on after hard constraints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostFilter {
    /// Every host in the request.
    #[default]
    All,
    /// Only these host indices, ascending.
    Only(Vec<u32>),
}

/// Constraints shared by tasks with the same needs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConstraintSet {
    /// Hosts that satisfy the hard constraints.
    pub eligible: HostFilter,
    /// Soft constraints.
    pub preferences: Vec<Preference>,
}

/// One task to place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Task {
    /// Index into `PlacementRequest::jobs`.
    pub job: u32,
    /// Instance number within the job.
    pub instance: u32,
    /// Gang id: tasks sharing it are placed all together or not at all.
    pub gang: u32,
    /// What the task needs.
    pub demand: Resources,
    /// Index into `PlacementRequest::constraints`.
    pub constraints: u32,
    /// Preferred host index, if offered.
    pub preferred_host: Option<u32>,
}

/// Everything a placement policy sees in one round.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementRequest {
    /// Round number.
    pub round: u64,
    /// Hosts leased to this round.
    pub hosts: Vec<HostOffer>,
    /// Host attributes, one column per key.
    pub attributes: Vec<AttributeColumn>,
    /// Interned attribute values.
    pub symbols: Vec<String>,
    /// Jobs whose tasks are in the round.
    pub jobs: Vec<JobInfo>,
    /// Constraint sets referred to by tasks.
    pub constraints: Vec<ConstraintSet>,
    /// Tasks to place, gangs contiguous, in admission order.
    pub tasks: Vec<Task>,
    /// GPU devices per host, in host order (0.1.2); empty when no host of
    /// the round has a GPU and no task asks for one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_hosts: Vec<GpuHost>,
    /// GPU ask per task, in task order (0.1.2; 0 for a task that asks for
    /// none); empty exactly when `gpu_hosts` is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_tasks: Vec<GpuTask>,
    /// The task shapes the runtime has seen lately, most frequent first
    /// (0.1.2; empty without a GPU side).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_workload: Vec<TaskClass>,
}

/// A shape of task seen lately, with its relative weight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskClass {
    /// CPU in millicores.
    pub cpu_millis: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// GPU ask in milli-GPUs (0: none).
    pub milli: u32,
    /// How often it was seen (relative).
    pub weight: u32,
}

/// One milli-GPU unit per device: 1000 is one whole device.
pub const DEVICE_MILLI: u32 = 1000;

/// One GPU device as a policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuDevice {
    /// Milli-GPUs free on it (1000: wholly free).
    pub free_milli: u32,
    /// Its model: an index into `PlacementRequest::symbols`, or [`NO_VALUE`].
    pub model: u32,
}

/// A host's GPU devices, in the host's device order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuHost {
    /// The devices; empty for a host without GPUs.
    pub devices: Vec<GpuDevice>,
}

/// One task's GPU ask.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuTask {
    /// 0: none; below 1000: a share of one device; else that many whole
    /// devices × 1000.
    pub milli: u32,
    /// Models the task accepts (indices into `PlacementRequest::symbols`);
    /// empty: any.
    pub models: Vec<u32>,
}

impl GpuTask {
    /// Devices the task needs and milli-GPUs on each: `(n, 1000)` for n
    /// whole devices, `(1, share)` for a share, `(0, 0)` for none.
    pub fn shape(&self) -> (u32, u32) {
        match self.milli {
            0 => (0, 0),
            m if m < DEVICE_MILLI => (1, m),
            m => (m / DEVICE_MILLI, DEVICE_MILLI),
        }
    }

    /// Whether device `d` takes the task's per-device ask with `free` left
    /// on it: whole devices only when wholly free, a share when it fits;
    /// and of an accepted model.
    pub fn takes(&self, d: &GpuDevice, free: u32) -> bool {
        let (_, each) = self.shape();
        let room = if each == DEVICE_MILLI { free == DEVICE_MILLI } else { free >= each };
        room && (self.models.is_empty() || self.models.contains(&d.model))
    }
}

/// The devices an assigned task gets on its host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeviceGrant {
    /// Index into `PlacementRequest::tasks`.
    pub task: u32,
    /// Indices into the host's [`GpuHost::devices`].
    pub devices: Vec<u32>,
}

/// Task `task` goes to host `host`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assignment {
    /// Index into `PlacementRequest::tasks`.
    pub task: u32,
    /// Index into `PlacementRequest::hosts`.
    pub host: u32,
}

/// Why a task was not placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnplacedReason {
    /// No eligible host had enough free resources.
    InsufficientResources,
    /// No host satisfied the task's constraints.
    ConstraintsUnsatisfiable,
    /// The job reached its per-host maximum on every host that fits.
    MaxPerHost,
    /// Another task of the same gang could not be placed.
    GangIncomplete,
    /// The policy chose not to place it this round.
    Deferred,
}

impl UnplacedReason {
    /// A stable snake_case name, for metrics and "why pending".
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InsufficientResources => "insufficient_resources",
            Self::ConstraintsUnsatisfiable => "constraints_unsatisfiable",
            Self::MaxPerHost => "max_per_host",
            Self::GangIncomplete => "gang_incomplete",
            Self::Deferred => "deferred",
        }
    }
}

/// A task left unplaced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unplaced {
    /// Index into `PlacementRequest::tasks`.
    pub task: u32,
    /// Category of the reason.
    pub reason: UnplacedReason,
    /// Human-readable detail; may be empty.
    #[serde(default)]
    pub detail: String,
}

/// A placement policy's answer: every task exactly once, assigned or unplaced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementResult {
    /// Tasks placed.
    pub assignments: Vec<Assignment>,
    /// Tasks not placed.
    pub unplaced: Vec<Unplaced>,
    /// Device grants of assigned tasks that ask for GPU (0.1.2); a task
    /// without one gets devices chosen by the runtime.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<DeviceGrant>,
}

/// A resource pool as the resource manager sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolView {
    /// Pool path.
    pub path: String,
    /// Guaranteed resources.
    pub reservation: Resources,
    /// Current entitlement.
    pub entitlement: Resources,
    /// Resources held by its running non-revocable tasks.
    pub allocation: Resources,
}

/// A running task that could be preempted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunningTask {
    /// Index into `PreemptionRequest::pools`.
    pub pool: u32,
    /// Job priority.
    pub priority: u32,
    /// The job allows preemption.
    pub preemptible: bool,
    /// Runs on revocable resources.
    pub revocable: bool,
    /// Start time in virtual milliseconds.
    pub started_at_ms: u64,
    /// What the task holds.
    pub resources: Resources,
}

/// Waiting work and the resources it needs freed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Need {
    /// Index of the waiting pool.
    pub pool: u32,
    /// Priority of the waiting work.
    pub priority: u32,
    /// Resources to free.
    pub resources: Resources,
    /// Pools victims may come from (indices); empty means any.
    pub from_pools: Vec<u32>,
}

/// Everything a preemption policy sees.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PreemptionRequest {
    /// Pools involved.
    pub pools: Vec<PoolView>,
    /// Candidate tasks.
    pub running: Vec<RunningTask>,
    /// What must be freed, most important first.
    pub needs: Vec<Need>,
    /// GPU amounts of each pool in milli-GPUs, in pool order (0.1.3); empty
    /// when nothing in the request holds or needs GPU. The `gpus` fields
    /// above stay whole devices, a share rounded up.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_pools: Vec<GpuPool>,
    /// Milli-GPUs each running task holds, in `running` order (0.1.3); empty
    /// exactly when `gpu_pools` is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_running: Vec<u64>,
    /// Milli-GPUs each need must have freed, in `needs` order (0.1.3); empty
    /// exactly when `gpu_pools` is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_needs: Vec<u64>,
}

/// A pool's GPU amounts in milli-GPUs (1000 per device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuPool {
    /// Guaranteed milli-GPUs.
    pub reservation_milli: u64,
    /// Milli-GPUs the pool is entitled to now.
    pub entitlement_milli: u64,
    /// Milli-GPUs its running non-revocable tasks hold.
    pub allocation_milli: u64,
}

impl PreemptionRequest {
    /// Whether the request carries its GPU side in milli-GPUs (0.1.3).
    pub fn has_gpu_side(&self) -> bool {
        !self.gpu_pools.is_empty() || !self.gpu_running.is_empty() || !self.gpu_needs.is_empty()
    }

    /// The request with every `gpus` field in milli-GPUs, taken from the GPU
    /// side: the one unit in which "enough" and "no more than needed" are
    /// right for shares of a device (two 500-milli tasks free one device).
    /// Without a GPU side (a request built before 0.1.3, or one without
    /// GPUs) it is the request unchanged, whole devices throughout. A
    /// preemption policy compares amounts in this view; the runtime checks
    /// answers in it.
    pub fn in_milli_gpus(&self) -> std::borrow::Cow<'_, PreemptionRequest> {
        use std::borrow::Cow;
        if !self.has_gpu_side() {
            return Cow::Borrowed(self);
        }
        let mut r = self.clone();
        let (pools, running, needs) =
            (std::mem::take(&mut r.gpu_pools), std::mem::take(&mut r.gpu_running), std::mem::take(&mut r.gpu_needs));
        // A missing entry (a malformed side) counts as none: the checks
        // then see less GPU, never more.
        for (i, p) in r.pools.iter_mut().enumerate() {
            let g = pools.get(i).copied().unwrap_or_default();
            p.reservation.gpus = g.reservation_milli;
            p.entitlement.gpus = g.entitlement_milli;
            p.allocation.gpus = g.allocation_milli;
        }
        for (i, t) in r.running.iter_mut().enumerate() {
            t.resources.gpus = running.get(i).copied().unwrap_or(0);
        }
        for (i, n) in r.needs.iter_mut().enumerate() {
            n.resources.gpus = needs.get(i).copied().unwrap_or(0);
        }
        Cow::Owned(r)
    }

    /// The request as a component built before 0.1.3 sees it: without its
    /// GPU side, GPUs in whole devices (a share rounded up).
    pub fn in_whole_gpus(&self) -> std::borrow::Cow<'_, PreemptionRequest> {
        use std::borrow::Cow;
        if !self.has_gpu_side() {
            return Cow::Borrowed(self);
        }
        let mut r = self.clone();
        r.gpu_pools.clear();
        r.gpu_running.clear();
        r.gpu_needs.clear();
        Cow::Owned(r)
    }
}

/// Why a task was chosen as a victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VictimReason {
    /// Its pool is above entitlement and another pool needs the resources.
    OverEntitlement,
    /// Higher-priority work in the same pool needs them.
    HigherPriority,
    /// It ran on revocable resources that are needed now.
    Revoked,
}

/// A task to preempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Victim {
    /// Index into `PreemptionRequest::running`.
    pub task: u32,
    /// Index into `PreemptionRequest::needs`.
    pub need: u32,
    /// Why.
    pub reason: VictimReason,
}

/// The kinds of job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// Runs to completion.
    #[default]
    Batch,
    /// Long-running, interchangeable instances.
    Stateless,
    /// Sticky host and persistent volume.
    Stateful,
    /// One instance per matching host.
    Daemon,
}

/// Task states.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum TaskState {
    #[default]
    Initialized,
    Pending,
    Ready,
    Placing,
    Placed,
    Launching,
    Launched,
    Starting,
    Running,
    Succeeded,
    Failed,
    Lost,
    Killed,
    Preempting,
    Killing,
}

/// Job states.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum JobState {
    #[default]
    Initialized,
    Pending,
    Running,
    Succeeded,
    Failed,
    Killed,
    Killing,
}

/// A rolling update in progress.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpdateView {
    /// Configuration version the update moves to.
    pub target_version: u64,
    /// Instances per batch.
    pub batch_size: u32,
    /// Most instances unavailable at once.
    pub max_unavailable: u32,
    /// Failed instances that abort the update.
    pub max_failures: u32,
    /// Roll back on failure.
    pub rollback_on_failure: bool,
    /// Paused.
    pub paused: bool,
    /// Instances already updated.
    pub done: Vec<u32>,
    /// Instances in the current batch.
    pub in_flight: Vec<u32>,
    /// Instances that failed during the update.
    pub failed: Vec<u32>,
}

/// The job as the lifecycle sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobView {
    /// Kind.
    pub kind: JobKind,
    /// Current state.
    pub state: JobState,
    /// Desired instance count.
    pub instance_count: u32,
    /// Failures allowed per instance (batch).
    pub max_failures_per_instance: u32,
    /// Maximum run time in ms; 0 is none.
    pub max_run_time_ms: u64,
    /// Current configuration version.
    pub config_version: u64,
    /// Resources of one instance.
    pub resources: Resources,
    /// Update in progress.
    pub update: Option<UpdateView>,
    /// Hosts matching a daemon job.
    pub matching_hosts: Vec<String>,
}

/// One instance as the lifecycle sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskView {
    /// Instance number.
    pub instance: u32,
    /// State.
    pub state: TaskState,
    /// Run number.
    pub run: u32,
    /// Failures so far.
    pub failures: u32,
    /// Health, when reported.
    pub healthy: Option<bool>,
    /// Configuration version it runs.
    pub config_version: u64,
    /// Host name, when placed.
    pub host: Option<String>,
    /// Virtual ms since the run started.
    pub running_for_ms: Option<u64>,
    /// Exit code of the last run.
    pub exit_code: Option<i32>,
}

/// A task state change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskChange {
    /// Instance number.
    pub instance: u32,
    /// New state.
    pub state: TaskState,
}

/// What happened to a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// The job was created.
    JobCreated,
    /// A task changed state.
    TaskChanged(TaskChange),
    /// A requested timer fired for this instance.
    Timer(u32),
    /// An update was started, paused, resumed or aborted.
    UpdateChanged,
    /// Hosts matching a daemon job changed.
    HostsChanged,
    /// The instance count changed.
    Scaled,
    /// Someone asked to kill the job.
    KillRequested,
}

/// A delayed restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Restart {
    /// Instance number.
    pub instance: u32,
    /// Delay in milliseconds.
    pub delay_ms: u64,
}

/// What the runtime should do for a job.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Start a new run of an instance.
    Launch(u32),
    /// Kill an instance.
    Kill(u32),
    /// Restart after a delay.
    RestartAfter(Restart),
    /// Set the job's state.
    MarkJob(JobState),
    /// Start the next update batch.
    UpdateBatch(Vec<u32>),
    /// The update finished; `true` means roll back.
    UpdateFinished(bool),
}
