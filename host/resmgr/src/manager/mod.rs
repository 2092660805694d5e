//! The resource manager: one synchronous, deterministic object that holds the
//! pool tree, the queues, the admitted tasks and the ready queue. Time is
//! passed in (`now_ms`); [`ResourceManager::tick`] is the period.
//!
//! A tick: fire timeouts and expired backoffs → recompute entitlement
//! (incremental unless the tree or capacity changed) and slack → admit gangs
//! → look for preemption → hand back kill requests. Admission is in
//! [`crate::admit`], preemption rounds in [`crate::round`].
//!
//! Here: the manager, its records, construction, pools and entitlement, and
//! the tick. The rest of `impl ResourceManager` is split by responsibility:
//! `gangs` (submission, admission's charge, adoption), `tasks` (the ready
//! queue, placement's answers, kills, the transition table's side effects),
//! `timers` (timeouts, backoff, kill requests) and `status` (pool status,
//! "why pending", counts).

mod gangs;
mod status;
mod tasks;
mod timers;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

pub use paceline_joints::{ReadyTask, TaskHandle};
use paceline_model::Resources;
use paceline_model::UnplacedReason;
use paceline_model::job::JobKind;
use paceline_model::pool::{PoolSpec, ResourceKind};
use paceline_plugin_sdk::types::VictimReason;

use crate::amounts::{self, Amounts};
use crate::entitlement::{self, EntScratch};
use crate::error::{PoolError, PoolErrorReason, SubmitError, TaskError};
use crate::gang::{GangId, GangSpec};
use crate::gate::AvailabilityGate;
use crate::preempt::{NativePriorityPreempt, PreemptionPolicy};
use crate::queue::{GangSlot, Gangs, Lane, PoolQueue};
use crate::reason::{PendingInfo, PendingReason};
use crate::task::{self, TaskState, Timeouts, Transition};
use crate::tree::{PoolId, PoolTree};

/// Tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// K: a pool must stay above its entitlement this many consecutive
    /// periods before another pool's waiting work may preempt it.
    pub preempt_after_periods: u32,
    /// State timeouts and placement backoff.
    pub timeouts: Timeouts,
}

impl Default for Config {
    fn default() -> Self {
        Config { preempt_after_periods: 3, timeouts: Timeouts::default() }
    }
}

/// A handle from a task record's slot and generation (a slot is reused once
/// its task ends; the generation tells the old handle from the new).
pub(crate) fn handle(index: u32, generation: u32) -> TaskHandle {
    TaskHandle((u64::from(generation) << 32) | u64::from(index))
}

/// The slot a handle names.
pub(crate) fn slot_of(id: TaskHandle) -> usize {
    (id.0 & 0xffff_ffff) as usize
}

/// The generation a handle names.
fn generation_of(id: TaskHandle) -> u32 {
    (id.0 >> 32) as u32
}

/// The live task a handle names, if it is still that task (its slot not
/// ended or reused since).
fn live(tasks: &[TaskRec], id: TaskHandle) -> Option<&TaskRec> {
    tasks.get(slot_of(id)).filter(|t| t.live && t.generation == generation_of(id))
}

#[derive(Clone, Debug)]
pub(crate) struct TaskRec {
    pub generation: u32,
    pub live: bool,
    pub state: TaskState,
    /// Bumped on every transition, so stale timers are ignored.
    pub epoch: u32,
    pub pool: u32,
    pub job: u64,
    pub instance: u32,
    /// Admission number of its gang: tasks of a gang share it.
    pub gang: u64,
    pub kind: JobKind,
    pub priority: u32,
    pub preemptible: bool,
    pub revocable: bool,
    pub kill_on_preempt: bool,
    pub controller: bool,
    pub resources: Resources,
    pub attempts: u32,
    pub since_ms: u64,
    pub started_ms: u64,
    pub last_unplaced: Option<UnplacedReason>,
    /// The live tasks of one job form a list through their slots
    /// ([`NO_SLOT`] ends it), so "why pending" reads a job's tasks without a
    /// scan of every task.
    pub job_prev: u32,
    pub job_next: u32,
}

/// No slot: the end of a job's task list.
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// Why the manager asks for a task to be killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillReason {
    /// Chosen by the preemption policy.
    Preempted(VictimReason),
    /// Someone asked ([`ResourceManager::kill`]).
    Requested,
}

/// A kill the runtime must carry out, then confirm with `Transition::KillConfirmed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KillRequest {
    /// The task.
    pub task: TaskHandle,
    /// Its job.
    pub job: u64,
    /// Its instance.
    pub instance: u32,
    /// Why.
    pub reason: KillReason,
}

/// What one tick did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Gangs moved to READY.
    pub admitted_gangs: usize,
    /// Timeouts that fired.
    pub timeouts: usize,
    /// Kills to carry out (preemption victims and requested kills).
    pub kills: Vec<KillRequest>,
}

/// A pool's numbers, for the API and tests. Interior pools show their subtree's sums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolStatus {
    /// Path.
    pub path: String,
    /// Spec.
    pub spec: PoolSpec,
    /// Non-revocable entitlement.
    pub entitlement: Resources,
    /// Revocable (slack) entitlement.
    pub slack_entitlement: Resources,
    /// Held by non-revocable tasks.
    pub allocation: Resources,
    /// Held by non-preemptible tasks (part of `allocation`).
    pub non_preemptible_allocation: Resources,
    /// Held by revocable tasks.
    pub revocable_allocation: Resources,
    /// Non-revocable demand: allocation + queued gangs.
    pub demand: Resources,
    /// Demand it can use: capped by its limit and its children's.
    pub usable_demand: Resources,
    /// Revocable demand.
    pub revocable_demand: Resources,
    /// Queued gangs.
    pub queued_gangs: u64,
    /// Live tasks.
    pub live_tasks: u64,
    /// Consecutive periods above entitlement.
    pub over_periods: u32,
}

/// An admitted task's state, for the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskInfo {
    /// State.
    pub state: TaskState,
    /// Pool.
    pub pool: PoolId,
    /// Job.
    pub job: u64,
    /// Instance.
    pub instance: u32,
    /// Failed placement attempts.
    pub attempts: u32,
    /// Why the last placement round left it unplaced.
    pub last_unplaced: Option<UnplacedReason>,
    /// Resources.
    pub resources: Resources,
    /// Preemptible.
    pub preemptible: bool,
    /// Revocable.
    pub revocable: bool,
    /// Priority.
    pub priority: u32,
}

/// The resource manager.
pub struct ResourceManager {
    pub(crate) tree: PoolTree,
    pub(crate) capacity: Amounts,
    capacity_changed: bool,
    pub(crate) queues: Vec<PoolQueue>,
    pub(crate) active: Vec<u32>,
    pub(crate) gangs: Gangs,
    pub(crate) tasks: Vec<TaskRec>,
    free_tasks: Vec<u32>,
    /// Each job's first live task slot (the head of its list).
    job_heads: HashMap<u64, u32>,
    ready: [VecDeque<u64>; 4],
    backoff: BinaryHeap<Reverse<(u64, u64)>>,
    timers: BinaryHeap<Reverse<(u64, u64, u32)>>,
    /// `timers` is compacted when it grows to this length.
    timers_compact_at: usize,
    dirty: Vec<u32>,
    scratch: EntScratch,
    pub(crate) preempting: Vec<Amounts>,
    /// Per pool: priority → running preemptible (or revocable) tasks, so a
    /// round knows without a scan whether intra-pool preemption could help.
    pub(crate) running_by_priority: Vec<BTreeMap<u32, u32>>,
    pub(crate) preempting_total: Amounts,
    pub(crate) kills: Vec<KillRequest>,
    pub(crate) policy: Box<dyn PreemptionPolicy>,
    /// Asked before a stateless job's instance is preempted; none: every
    /// candidate may go (a resource manager alone, in its own tests).
    pub(crate) gate: Option<std::sync::Arc<dyn AvailabilityGate>>,
    pub(crate) config: Config,
    next_gang: u64,
    pub(crate) now_ms: u64,
}

impl std::fmt::Debug for ResourceManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceManager")
            .field("pools", &self.tree.len())
            .field("capacity", &self.capacity)
            .field("policy", &self.policy.name())
            .finish_non_exhaustive()
    }
}

/// Below this many entries the timer heap is never compacted.
const MIN_TIMERS_COMPACT_AT: usize = 4096;

pub(crate) fn kind_index(kind: JobKind) -> usize {
    match kind {
        JobKind::Batch => 0,
        JobKind::Stateless => 1,
        JobKind::Stateful => 2,
        JobKind::Daemon => 3,
    }
}

impl ResourceManager {
    /// An empty manager (root pool only) with the native preemption policy.
    pub fn new(config: Config) -> ResourceManager {
        ResourceManager {
            tree: PoolTree::new(),
            capacity: amounts::ZERO,
            capacity_changed: true,
            queues: vec![PoolQueue::default()],
            active: Vec::new(),
            gangs: Gangs::default(),
            tasks: Vec::new(),
            free_tasks: Vec::new(),
            job_heads: HashMap::new(),
            ready: Default::default(),
            backoff: BinaryHeap::new(),
            timers: BinaryHeap::new(),
            timers_compact_at: MIN_TIMERS_COMPACT_AT,
            dirty: Vec::new(),
            scratch: EntScratch::default(),
            preempting: vec![amounts::ZERO],
            running_by_priority: vec![BTreeMap::new()],
            preempting_total: amounts::ZERO,
            kills: Vec::new(),
            policy: Box::new(NativePriorityPreempt),
            gate: None,
            config,
            next_gang: 0,
            now_ms: 0,
        }
    }

    /// Replaces the preemption policy (e.g. an adapter over the plugin slot).
    pub fn set_policy(&mut self, policy: Box<dyn PreemptionPolicy>) {
        tracing::info!(policy = policy.name(), "preemption policy set");
        self.policy = policy;
    }

    /// Installs the availability gate preemption rounds ask before taking
    /// a stateless job's instance down (the job manager's count, decision 0046).
    pub fn set_availability_gate(&mut self, gate: std::sync::Arc<dyn AvailabilityGate>) {
        self.gate = Some(gate);
    }

    /// Sets the cluster's capacity; entitlement is recomputed in full at the next pass.
    pub fn set_capacity(&mut self, capacity: Resources) {
        self.capacity = amounts::of(&capacity);
        self.capacity_changed = true;
    }

    /// The cluster's capacity.
    pub fn capacity(&self) -> Resources {
        amounts::to_resources(&self.capacity)
    }

    /// The state timeouts and the placement backoff this manager runs
    /// with; the job manager's wait after refused launches follows the same
    /// curve.
    pub fn timeouts(&self) -> &Timeouts {
        &self.config.timeouts
    }

    /// The pool tree (read-only; change it through the manager).
    pub fn tree(&self) -> &PoolTree {
        &self.tree
    }

    fn sync_pools(&mut self) {
        let n = self.tree.nodes.len();
        self.queues.resize_with(n, PoolQueue::default);
        self.preempting.resize(n, amounts::ZERO);
        self.running_by_priority.resize_with(n, BTreeMap::new);
    }

    /// Creates a pool (see [`PoolTree::create`]).
    pub fn create_pool(&mut self, path: &str, spec: PoolSpec) -> Result<PoolId, PoolError> {
        let id = self.tree.create(path, spec)?;
        self.sync_pools();
        // A reused slot may still be listed from the pool deleted there.
        self.active.retain(|&p| p != id.0);
        self.queues[id.index()] = PoolQueue::default();
        self.preempting[id.index()] = amounts::ZERO;
        self.running_by_priority[id.index()].clear();
        Ok(id)
    }

    /// Replaces a pool's spec.
    pub fn update_pool(&mut self, path: &str, spec: PoolSpec) -> Result<(), PoolError> {
        self.tree.update(path, spec)
    }

    /// Deletes an empty leaf pool.
    pub fn delete_pool(&mut self, path: &str) -> Result<(), PoolError> {
        self.tree.delete(path)
    }

    /// Moves a pool under another; returns its new path.
    pub fn move_pool(&mut self, path: &str, new_parent: &str) -> Result<String, PoolError> {
        self.tree.move_pool(path, new_parent)
    }

    /// Creates or updates pools from YAML, all or nothing.
    pub fn load_pools_yaml(&mut self, yaml: &str) -> Result<usize, PoolError> {
        let n = self.tree.load_yaml(yaml)?;
        self.sync_pools();
        Ok(n)
    }

    fn mark_dirty(&mut self, leaf: u32) {
        let n = &mut self.tree.nodes[leaf as usize];
        if !n.dirty {
            n.dirty = true;
            self.dirty.push(leaf);
        }
    }

    /// Brings entitlement up to date: incremental after demand changes, full
    /// after a tree or capacity change. Slack is recomputed too.
    pub fn recompute_entitlement(&mut self) {
        if self.capacity_changed {
            self.tree.shape_changed = true;
            self.capacity_changed = false;
        }
        entitlement::incremental(&mut self.tree, &self.capacity, &mut self.dirty, &mut self.scratch);
        entitlement::slack(&mut self.tree, &self.capacity, &mut self.scratch);
    }

    /// Recomputes every pool's entitlement from scratch (for benchmarks and checks).
    pub fn recompute_entitlement_full(&mut self) {
        self.dirty.clear();
        entitlement::full(&mut self.tree, &self.capacity, &mut self.scratch);
        self.capacity_changed = false;
    }

    /// Only the non-revocable entitlement, incrementally (for benchmarks).
    pub fn recompute_entitlement_incremental(&mut self) {
        entitlement::incremental(&mut self.tree, &self.capacity, &mut self.dirty, &mut self.scratch);
    }

    /// Interior pools whose division among children the last non-revocable
    /// entitlement pass recomputed: the work an incremental pass saved.
    pub fn last_pass_divisions(&self) -> usize {
        self.scratch.divided
    }

    /// One period.
    pub fn tick(&mut self, now_ms: u64) -> TickReport {
        self.now_ms = now_ms;
        let timeouts = self.fire_timers(now_ms);
        self.recompute_entitlement();
        let admitted_gangs = self.admit(now_ms);
        self.preemption_round(now_ms);
        TickReport { admitted_gangs, timeouts, kills: self.take_kills() }
    }
}
