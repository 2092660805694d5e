//! The resource manager: one synchronous, deterministic object that holds the
//! pool tree, the queues, the admitted tasks and the ready queue. Time is
//! passed in (`now_ms`); [`ResourceManager::tick`] is the period.
//!
//! A tick: fire timeouts and expired backoffs → recompute entitlement
//! (incremental unless the tree or capacity changed) and slack → admit gangs
//! → look for preemption → hand back kill requests. Admission is in
//! [`crate::admit`], preemption rounds in [`crate::round`].

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

    /// Sets the cluster's capacity; entitlement is recomputed in full at the next pass.
    pub fn set_capacity(&mut self, capacity: Resources) {
        self.capacity = amounts::of(&capacity);
        self.capacity_changed = true;
    }

    /// The cluster's capacity.
    pub fn capacity(&self) -> Resources {
        amounts::to_resources(&self.capacity)
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

    /// Queues a gang in a leaf pool.
    pub fn submit(&mut self, pool: &str, spec: GangSpec, now_ms: u64) -> Result<GangId, SubmitError> {
        let p = self.tree.lookup(pool)?;
        self.submit_to(p, spec, now_ms)
    }

    /// Queues a gang in a leaf pool by id.
    pub fn submit_id(&mut self, pool: PoolId, spec: GangSpec, now_ms: u64) -> Result<GangId, SubmitError> {
        if self.tree.path(pool).is_none() {
            return Err(PoolError::new(&format!("#{}", pool.0), "path", PoolErrorReason::NotFound).into());
        }
        self.submit_to(pool.0, spec, now_ms)
    }

    /// A gang may go to pool `p`: a leaf, and at least one task.
    fn check_gang(&self, p: u32, spec: &GangSpec) -> Result<(), SubmitError> {
        let node = &self.tree.nodes[p as usize];
        if p == 0 || !node.children.is_empty() {
            return Err(PoolError::new(&node.path, "path", PoolErrorReason::NotLeaf).into());
        }
        if spec.tasks == 0 {
            return Err(SubmitError::Empty { job: spec.job });
        }
        Ok(())
    }

    pub(crate) fn submit_to(&mut self, p: u32, spec: GangSpec, now_ms: u64) -> Result<GangId, SubmitError> {
        self.check_gang(p, &spec)?;
        let node = &self.tree.nodes[p as usize];
        let total = amounts::times(&amounts::of(&spec.per_task), u64::from(spec.tasks));
        let id = self.gangs.insert(GangSlot {
            generation: 0,
            queued: true,
            pool: p,
            spec,
            total,
            enqueued_ms: now_ms,
            reason: PendingReason::NotEvaluated,
        });
        let q = &mut self.queues[p as usize];
        let priority = match node.spec.queue_policy {
            paceline_model::pool::QueuePolicy::PriorityFifo => spec.priority,
            paceline_model::pool::QueuePolicy::Fifo => 0,
        };
        q.levels.entry(Reverse(priority)).or_default().push_back(id.0);
        q.per_lane[Lane::of(&spec) as usize] += 1;
        if !q.active {
            q.active = true;
            self.active.push(p);
        }
        let revocable = spec.revocable;
        self.tree.walk_up(p, |n| {
            if revocable {
                n.queued_rev = amounts::add(&n.queued_rev, &total);
            } else {
                n.queued_nr = amounts::add(&n.queued_nr, &total);
            }
            n.gangs += 1;
        });
        self.mark_dirty(p);
        Ok(id)
    }

    /// Removes a queued gang. Returns false if it is not queued.
    pub fn cancel(&mut self, gang: GangId) -> bool {
        let Some(slot) = self.gangs.get(gang) else { return false };
        let (p, total, spec) = (slot.pool, slot.total, slot.spec);
        self.gangs.remove(gang);
        self.queues[p as usize].per_lane[Lane::of(&spec) as usize] -= 1;
        self.unqueue_accounting(p, &spec, &total);
        self.mark_dirty(p);
        true
    }

    pub(crate) fn unqueue_accounting(&mut self, p: u32, spec: &GangSpec, total: &Amounts) {
        let revocable = spec.revocable;
        self.tree.walk_up(p, |n| {
            if revocable {
                n.queued_rev = amounts::sub(&n.queued_rev, total);
            } else {
                n.queued_nr = amounts::sub(&n.queued_nr, total);
            }
            n.gangs -= 1;
        });
    }

    /// Creates the tasks of an admitted gang in READY and charges its pool.
    pub(crate) fn admit_gang(&mut self, id: GangId, now_ms: u64) {
        let Some(slot) = self.gangs.get(id) else { return };
        let (p, spec, total) = (slot.pool, slot.spec, slot.total);
        self.gangs.remove(id);
        let kind = kind_index(spec.kind);
        self.create_tasks(p, &spec, TaskState::Ready, now_ms, |rm, tid| rm.ready[kind].push_back(tid.0));
        self.charge(p, &spec, &total, true);
    }

    /// Creates one record per task of `spec` in `state`, all of one new gang
    /// number, and hands each new id (in instance order) to `each`.
    fn create_tasks(
        &mut self,
        p: u32,
        spec: &GangSpec,
        state: TaskState,
        now_ms: u64,
        mut each: impl FnMut(&mut Self, TaskHandle),
    ) {
        let gang = self.next_gang;
        self.next_gang += 1;
        for t in 0..spec.tasks {
            let rec = TaskRec {
                generation: 0,
                live: true,
                state,
                epoch: 0,
                pool: p,
                job: spec.job,
                instance: spec.first_instance.wrapping_add(t),
                gang,
                kind: spec.kind,
                priority: spec.priority,
                preemptible: spec.preemptible,
                revocable: spec.revocable,
                kill_on_preempt: spec.kill_on_preempt,
                controller: spec.controller,
                resources: spec.per_task,
                attempts: 0,
                since_ms: now_ms,
                started_ms: if state == TaskState::Running { now_ms } else { 0 },
                last_unplaced: None,
                job_prev: NO_SLOT,
                job_next: NO_SLOT,
            };
            let tid = match self.free_tasks.pop() {
                Some(i) => {
                    let generation = self.tasks[i as usize].generation.wrapping_add(1);
                    self.tasks[i as usize] = TaskRec { generation, ..rec };
                    handle(i, generation)
                }
                None => {
                    self.tasks.push(rec);
                    handle((self.tasks.len() - 1) as u32, 0)
                }
            };
            self.link_to_job(slot_of(tid) as u32);
            each(self, tid);
        }
    }

    /// Charges pool `p` and its ancestors with a gang's `total`; `from_queue`:
    /// the gang was queued there (its queued amounts and count go).
    fn charge(&mut self, p: u32, spec: &GangSpec, total: &Amounts, from_queue: bool) {
        let (revocable, np, n) = (spec.revocable, !spec.preemptible && !spec.revocable, u64::from(spec.tasks));
        let controller = spec.controller;
        self.tree.walk_up(p, |node| {
            if controller {
                node.alloc_ctl = amounts::add(&node.alloc_ctl, total);
            }
            if revocable {
                if from_queue {
                    node.queued_rev = amounts::sub(&node.queued_rev, total);
                }
                node.alloc_rev = amounts::add(&node.alloc_rev, total);
            } else {
                if from_queue {
                    node.queued_nr = amounts::sub(&node.queued_nr, total);
                }
                node.alloc_nr = amounts::add(&node.alloc_nr, total);
                if np {
                    node.alloc_np = amounts::add(&node.alloc_np, total);
                }
            }
            if from_queue {
                node.gangs -= 1;
            }
            node.tasks += n;
        });
    }

    /// Registers tasks that already hold resources on hosts, without queueing
    /// or admission: a job manager recovering after a restart or a failover
    /// hands over its runs on hosts, since this manager's state does not
    /// survive either. Each task gets a record in `state` (`Launching` for a
    /// run not yet confirmed running, `Running` otherwise; any other state is
    /// taken as `Running`) and its pool is charged as an admitted gang is, so
    /// allocation, entitlement, admission and preemption see them. A pool
    /// over its entitlement afterwards is left to preemption, as for any
    /// other pool. Returns the tasks' ids in instance order.
    pub fn adopt(
        &mut self,
        pool: &str,
        spec: GangSpec,
        state: TaskState,
        now_ms: u64,
    ) -> Result<Vec<TaskHandle>, SubmitError> {
        let p = self.tree.lookup(pool)?;
        self.check_gang(p, &spec)?;
        let state = if state == TaskState::Launching { TaskState::Launching } else { TaskState::Running };
        let total = amounts::times(&amounts::of(&spec.per_task), u64::from(spec.tasks));
        let mut ids = Vec::with_capacity(spec.tasks as usize);
        self.create_tasks(p, &spec, state, now_ms, |_, tid| ids.push(tid));
        self.charge(p, &spec, &total, false);
        self.mark_dirty(p);
        Ok(ids)
    }

    fn task_mut(&mut self, id: TaskHandle) -> Result<&mut TaskRec, TaskError> {
        self.tasks
            .get_mut(slot_of(id))
            .filter(|t| t.live && t.generation == generation_of(id))
            .ok_or(TaskError::UnknownTask(id.0))
    }

    /// An admitted task's state.
    pub fn task(&self, id: TaskHandle) -> Option<TaskInfo> {
        let t = live(&self.tasks, id)?;
        Some(TaskInfo {
            state: t.state,
            pool: PoolId(t.pool),
            job: t.job,
            instance: t.instance,
            attempts: t.attempts,
            last_unplaced: t.last_unplaced,
            resources: t.resources,
            preemptible: t.preemptible,
            revocable: t.revocable,
            priority: t.priority,
        })
    }

    /// The live admitted task of (`job`, `instance`), if any: a scan, for
    /// rare questions ("why is this task still waiting?").
    pub fn find_task(&self, job: u64, instance: u32) -> Option<TaskInfo> {
        let i = self.tasks.iter().position(|t| t.live && t.job == job && t.instance == instance)?;
        self.task(handle(i as u32, self.tasks[i].generation))
    }

    /// Hands up to `max` READY tasks of one job kind to placement (they become
    /// PLACING). A gang is never split: the batch runs past `max` to finish it.
    pub fn take_ready(&mut self, kind: JobKind, max: usize, now_ms: u64, out: &mut Vec<ReadyTask>) -> usize {
        let k = kind_index(kind);
        let start = out.len();
        let mut last_gang = None;
        while let Some(&raw) = self.ready[k].front() {
            let id = TaskHandle(raw);
            let valid = live(&self.tasks, id).is_some_and(|t| t.state == TaskState::Ready);
            if !valid {
                self.ready[k].pop_front();
                continue;
            }
            let t = &self.tasks[slot_of(id)];
            if out.len() - start >= max && last_gang != Some(t.gang) {
                break;
            }
            self.ready[k].pop_front();
            last_gang = Some(t.gang);
            out.push(ReadyTask {
                id,
                job: t.job,
                instance: t.instance,
                gang: t.gang,
                pool: PoolId(t.pool),
                priority: t.priority,
                resources: t.resources,
            });
            // Cannot fail: checked above.
            let _ = self.apply(id, Transition::StartPlacing, now_ms);
        }
        out.len() - start
    }

    /// READY tasks waiting for placement, per kind (stale entries included until drained).
    pub fn ready_len(&self, kind: JobKind) -> usize {
        self.ready[kind_index(kind)].len()
    }

    /// Placement could not place the task this round: back to READY after a
    /// backoff that doubles with each attempt. When the engine could not
    /// reach the host manager ([`UnplacedReason::HostManagerUnreachable`])
    /// nothing was tried: back to READY after the fixed
    /// [`Timeouts::unreachable_retry_ms`], the attempts left as they were.
    pub fn placement_failed(&mut self, id: TaskHandle, reason: UnplacedReason, now_ms: u64) -> Result<(), TaskError> {
        let event = match reason {
            UnplacedReason::HostManagerUnreachable => Transition::HostManagerUnreachable,
            _ => Transition::PlacementFailed,
        };
        // Checked before the reason is noted, so that a refused call changes nothing.
        let state = self.task_mut(id)?.state;
        if task::next(state, event).is_none() {
            return Err(TaskError::Transition { task: id.0, state, event });
        }
        self.task_mut(id)?.last_unplaced = Some(reason);
        self.apply(id, event, now_ms).map(|_| ())
    }

    /// Releases what job `job` still holds here for `instances` (sorted)
    /// short of a host: each admitted task of theirs that is READY (queued
    /// or backing off) or PLACING ends KILLED at once and its pool is given
    /// back. For runs the job manager stopped before launch, whose task
    /// handle it never learnt (a gang is admitted here, and the handle
    /// reaches the job manager only with its placement). One walk over the
    /// job's live tasks, whatever the number of instances. Returns how many
    /// tasks were released. A PLACING task released here is dropped by the
    /// engine's commit, or refused when it is sent back.
    pub fn release_unplaced(&mut self, job: u64, instances: &[u32], now_ms: u64) -> usize {
        let mut unplaced = Vec::new();
        let mut slot = self.job_heads.get(&job).copied().unwrap_or(NO_SLOT);
        while let Some(t) = self.tasks.get(slot as usize) {
            if matches!(t.state, TaskState::Ready | TaskState::Placing) && instances.binary_search(&t.instance).is_ok()
            {
                unplaced.push(handle(slot, t.generation));
            }
            slot = t.job_next;
        }
        // Each kill below queues one kill request, for nothing on a host:
        // they are dropped again.
        let requests = self.kills.len();
        for &id in &unplaced {
            // Kill, then confirmed at once: nothing runs on a host to wait for.
            if self.apply(id, Transition::Kill, now_ms).is_ok() {
                let _ = self.apply(id, Transition::KillConfirmed, now_ms);
            }
        }
        self.kills.truncate(requests);
        unplaced.len()
    }

    /// Cancels the queued one-task gangs of job `job` for `instances`
    /// (sorted): the gangs requeued here for preempted runs, whose ids the
    /// job manager does not hold. A scan over the gang records, so only for
    /// that rare case. Returns how many were cancelled.
    pub fn cancel_queued_of(&mut self, job: u64, instances: &[u32]) -> usize {
        let found: Vec<GangId> = self
            .gangs
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.queued
                    && s.spec.job == job
                    && s.spec.tasks == 1
                    && instances.binary_search(&s.spec.first_instance).is_ok()
            })
            .map(|(i, s)| GangId::new(i as u32, s.generation))
            .collect();
        found.into_iter().filter(|&g| self.cancel(g)).count()
    }

    /// Asks for a task to be killed; the kill request comes back from the next
    /// [`ResourceManager::tick`] (or [`ResourceManager::take_kills`]).
    pub fn kill(&mut self, id: TaskHandle, now_ms: u64) -> Result<(), TaskError> {
        self.apply(id, Transition::Kill, now_ms).map(|_| ())
    }

    /// Applies a transition reported by placement or the runtime: `Placed`,
    /// `StartLaunch`, `Running`, `Succeeded`, `Failed`, `Lost`,
    /// `KillConfirmed`. The manager's own transitions (`Admit`, `StartPlacing`,
    /// `PlacementFailed`, `HostManagerUnreachable`, `Preempt`, `Kill`,
    /// `Timeout`) have their own entry points and are refused here.
    pub fn transition(&mut self, id: TaskHandle, event: Transition, now_ms: u64) -> Result<TaskState, TaskError> {
        use Transition as E;
        if matches!(
            event,
            E::Admit
                | E::StartPlacing
                | E::PlacementFailed
                | E::HostManagerUnreachable
                | E::Preempt
                | E::Kill
                | E::Timeout
        ) {
            let state = self.task_mut(id)?.state;
            return Err(TaskError::Transition { task: id.0, state, event });
        }
        self.apply(id, event, now_ms)
    }

    /// Applies one transition of the table and its side effects.
    pub(crate) fn apply(&mut self, id: TaskHandle, event: Transition, now_ms: u64) -> Result<TaskState, TaskError> {
        let t = self.task_mut(id)?;
        let from = t.state;
        let to = task::next(from, event).ok_or(TaskError::Transition { task: id.0, state: from, event })?;
        t.state = to;
        t.epoch = t.epoch.wrapping_add(1);
        t.since_ms = now_ms;
        let (epoch, pool, res, kind) = (t.epoch, t.pool, t.resources, t.kind);
        if (t.preemptible || t.revocable) && (from == TaskState::Running) != (to == TaskState::Running) {
            let priority = t.priority;
            let counts = &mut self.running_by_priority[pool as usize];
            if to == TaskState::Running {
                *counts.entry(priority).or_default() += 1;
            } else if let Some(c) = counts.get_mut(&priority) {
                *c -= 1;
                if *c == 0 {
                    counts.remove(&priority);
                }
            }
        }
        if from == TaskState::Preempting {
            let r = amounts::of(&res);
            self.preempting[pool as usize] = amounts::sub(&self.preempting[pool as usize], &r);
            self.preempting_total = amounts::sub(&self.preempting_total, &r);
        }
        if let Some(ms) = self.config.timeouts.of(to) {
            self.timers.push(Reverse((now_ms.saturating_add(ms), id.0, epoch)));
        }
        match to {
            TaskState::Ready if event == Transition::PlacementFailed => {
                let timeouts = self.config.timeouts;
                let t = self.task_mut(id)?;
                t.attempts += 1;
                let wait = timeouts.backoff(t.attempts);
                self.backoff.push(Reverse((now_ms.saturating_add(wait), id.0)));
            }
            TaskState::Ready if event == Transition::HostManagerUnreachable => {
                // Not an attempt: the attempts stay, the delay is fixed.
                let wait = self.config.timeouts.unreachable_retry_ms;
                self.backoff.push(Reverse((now_ms.saturating_add(wait), id.0)));
            }
            TaskState::Ready => self.ready[kind_index(kind)].push_back(id.0),
            TaskState::Running => self.task_mut(id)?.started_ms = now_ms,
            TaskState::Preempting => {
                let r = amounts::of(&res);
                self.preempting[pool as usize] = amounts::add(&self.preempting[pool as usize], &r);
                self.preempting_total = amounts::add(&self.preempting_total, &r);
            }
            TaskState::Killing => {
                let t = &self.tasks[slot_of(id)];
                self.kills.push(KillRequest {
                    task: id,
                    job: t.job,
                    instance: t.instance,
                    reason: KillReason::Requested,
                });
            }
            s if s.is_terminal() => {
                self.finish(id, from == TaskState::Preempting && event == Transition::KillConfirmed, now_ms)
            }
            _ => {}
        }
        Ok(to)
    }

    /// Releases an ended task; a preempted one goes back to its queue unless
    /// its spec says kill-on-preempt.
    fn finish(&mut self, id: TaskHandle, preempted: bool, now_ms: u64) {
        let t = &mut self.tasks[slot_of(id)];
        t.live = false;
        self.unlink_from_job(slot_of(id) as u32);
        let t = &self.tasks[slot_of(id)];
        let (p, res, revocable, preemptible) = (t.pool, amounts::of(&t.resources), t.revocable, t.preemptible);
        let controller = t.controller;
        let requeue = preempted && !t.kill_on_preempt;
        let spec = GangSpec {
            job: t.job,
            first_instance: t.instance,
            kind: t.kind,
            priority: t.priority,
            preemptible: t.preemptible,
            revocable: t.revocable,
            kill_on_preempt: t.kill_on_preempt,
            controller: t.controller,
            tasks: 1,
            per_task: t.resources,
        };
        self.free_tasks.push(slot_of(id) as u32);
        let np = !preemptible && !revocable;
        self.tree.walk_up(p, |n| {
            if controller {
                n.alloc_ctl = amounts::sub(&n.alloc_ctl, &res);
            }
            if revocable {
                n.alloc_rev = amounts::sub(&n.alloc_rev, &res);
            } else {
                n.alloc_nr = amounts::sub(&n.alloc_nr, &res);
                if np {
                    n.alloc_np = amounts::sub(&n.alloc_np, &res);
                }
            }
            n.tasks -= 1;
        });
        self.mark_dirty(p);
        if requeue {
            // The pool still exists: it cannot be deleted while it holds tasks.
            if let Err(e) = self.submit_to(p, spec, now_ms) {
                tracing::error!(error = %e, "requeue of a preempted task failed");
            }
        }
    }

    /// The earliest time a timer (state timeout) or a placement backoff is
    /// due, if any: a caller driving a virtual clock need not tick before.
    pub fn next_wake_ms(&self) -> Option<u64> {
        let timer = self.timers.peek().map(|Reverse((at, _, _))| *at);
        let backoff = self.backoff.peek().map(|Reverse((at, _))| *at);
        match (timer, backoff) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Hosts joined that together offer at most `room` on any one host (the
    /// component-wise maximum of what each can take): every task waiting out
    /// a placement backoff (or an unreachable host manager's retry delay)
    /// whose resources fit in `room` goes back to READY now, its attempts
    /// kept (so its next failure waits longer still); the others keep their
    /// backoff, since no host that joined could take them. After a host
    /// manager's failover every host joins again, so tasks whose leases
    /// failed meanwhile are placed at once; a small host that joins a full
    /// cluster re-offers only what it could hold. One pass over the waiting
    /// tasks, reusing the heap's buffer. Returns how many went back.
    pub fn retry_backed_off(&mut self, room: &Resources) -> usize {
        let mut waiting = std::mem::take(&mut self.backoff).into_vec();
        let mut back = 0;
        waiting.retain(|&Reverse((_, raw))| {
            let id = TaskHandle(raw);
            let Some(t) = live(&self.tasks, id).filter(|t| t.state == TaskState::Ready) else {
                // Ended, or no longer waiting: the entry is stale.
                return false;
            };
            if !t.resources.fits_in(room) {
                return true;
            }
            self.ready[kind_index(t.kind)].push_back(raw);
            back += 1;
            false
        });
        self.backoff = BinaryHeap::from(waiting);
        back
    }

    /// A task whose placement backoff is over goes back to its ready queue,
    /// if it is still the same live READY task; whether it went.
    fn end_backoff(&mut self, raw: u64) -> bool {
        let id = TaskHandle(raw);
        let Some(kind) = live(&self.tasks, id).filter(|t| t.state == TaskState::Ready).map(|t| t.kind) else {
            return false;
        };
        self.ready[kind_index(kind)].push_back(raw);
        true
    }

    /// Kill requests not yet handed out.
    pub fn take_kills(&mut self) -> Vec<KillRequest> {
        std::mem::take(&mut self.kills)
    }

    /// A task's timer stays in the heap after the task leaves the timed
    /// state (PLACING, LAUNCHING, …) until it is due, minutes later: at a
    /// million tasks placed in a minute that is millions of dead entries
    /// (tens of MiB). When the heap has doubled since the last compaction,
    /// the dead ones are dropped, so the work is amortised per push.
    fn compact_timers(&mut self) {
        if self.timers.len() < self.timers_compact_at {
            return;
        }
        let tasks = &self.tasks;
        self.timers.retain(|Reverse((_, raw, epoch))| {
            let id = TaskHandle(*raw);
            live(tasks, id).is_some_and(|t| t.epoch == *epoch)
        });
        let live = self.timers.len();
        self.timers.shrink_to(live.saturating_mul(2));
        self.timers_compact_at = live.saturating_mul(2).max(MIN_TIMERS_COMPACT_AT);
    }

    /// State-timeout entries held, live and dead (memory accounting and
    /// tests).
    pub fn timer_entries(&self) -> usize {
        self.timers.len()
    }

    fn fire_timers(&mut self, now_ms: u64) -> usize {
        self.compact_timers();
        let mut fired = 0;
        while let Some(&Reverse((at, raw, epoch))) = self.timers.peek() {
            if at > now_ms {
                break;
            }
            self.timers.pop();
            let id = TaskHandle(raw);
            let current = live(&self.tasks, id).is_some_and(|t| t.epoch == epoch);
            if current && self.apply(id, Transition::Timeout, now_ms).is_ok() {
                tracing::debug!(task = raw, "task timed out back to READY");
                fired += 1;
            }
        }
        while let Some(&Reverse((at, raw))) = self.backoff.peek() {
            if at > now_ms {
                break;
            }
            self.backoff.pop();
            self.end_backoff(raw);
        }
        fired
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

    /// A pool's numbers.
    pub fn pool_status(&self, path: &str) -> Option<PoolStatus> {
        let id = self.tree.id(path)?;
        let n = &self.tree.nodes[id.index()];
        let r = amounts::to_resources;
        Some(PoolStatus {
            path: n.path.clone(),
            spec: n.spec,
            entitlement: r(&n.ent),
            slack_entitlement: r(&n.slack_ent),
            allocation: r(&n.alloc_nr),
            non_preemptible_allocation: r(&n.alloc_np),
            revocable_allocation: r(&n.alloc_rev),
            demand: r(&n.demand_nr()),
            usable_demand: r(&n.usable),
            revocable_demand: r(&n.demand_rev()),
            queued_gangs: n.gangs,
            live_tasks: n.tasks,
            over_periods: n.over_periods,
        })
    }

    /// Why a queued gang waits; `None` if it is not queued.
    pub fn why_pending(&self, gang: GangId) -> Option<PendingInfo> {
        let slot = self.gangs.get(gang)?;
        let q = &self.queues[slot.pool as usize];
        let lane = Lane::of(&slot.spec) as usize;
        let reason = match q.blocked[lane] {
            // Behind a head, but it could not be admitted at the head either,
            // ever, as the pool is: that is what a person must act on, not
            // the gang before it (which may be an earlier task of its own job).
            Some(head) if head != gang => self.never_admitted(slot).unwrap_or(PendingReason::BehindHead { head }),
            // Entitled to all the cluster has of that kind, the gang would fit
            // an empty cluster, and the pool's own work holds some: the
            // cluster is what is short, which a person reads differently.
            _ => match slot.reason {
                PendingReason::OverEntitlement { kind, by } => {
                    let (k, n) = (kind as usize, &self.tree.nodes[slot.pool as usize]);
                    if n.ent[k] >= self.capacity[k] && slot.total[k] <= self.capacity[k] && n.alloc_nr[k] > 0 {
                        PendingReason::ClusterUsedUp { kind, by }
                    } else {
                        slot.reason
                    }
                }
                r => r,
            },
        };
        Some(PendingInfo {
            gang,
            pool: self.tree.nodes[slot.pool as usize].path.clone(),
            reason,
            queued_at_ms: slot.enqueued_ms,
        })
    }

    /// Who a queued gang is, for naming it to people: its job's key, first
    /// instance and number of tasks. `None` if it is not queued.
    pub fn gang_span(&self, gang: GangId) -> Option<(u64, u32, u32)> {
        let slot = self.gangs.get(gang)?;
        slot.queued.then_some((slot.spec.job, slot.spec.first_instance, slot.spec.tasks))
    }

    /// Every live task of `job` as "why pending" reads it, in one pass over
    /// the task records: for the API, not for a round.
    pub fn job_task_waits(&self, job: u64) -> Vec<crate::reason::TaskWait> {
        let mut out = Vec::new();
        let mut slot = self.job_heads.get(&job).copied().unwrap_or(NO_SLOT);
        while let Some(t) = self.tasks.get(slot as usize) {
            out.push(crate::reason::TaskWait {
                instance: t.instance,
                state: t.state,
                last_unplaced: t.last_unplaced,
                gang: t.gang,
            });
            slot = t.job_next;
        }
        out
    }

    /// Puts a new live task first in its job's list.
    fn link_to_job(&mut self, slot: u32) {
        let job = self.tasks[slot as usize].job;
        let next = self.job_heads.insert(job, slot).unwrap_or(NO_SLOT);
        if let Some(n) = self.tasks.get_mut(next as usize) {
            n.job_prev = slot;
        }
        let t = &mut self.tasks[slot as usize];
        (t.job_prev, t.job_next) = (NO_SLOT, next);
    }

    /// Takes an ended task out of its job's list.
    fn unlink_from_job(&mut self, slot: u32) {
        let t = &mut self.tasks[slot as usize];
        let (job, prev, next) = (t.job, t.job_prev, t.job_next);
        (t.job_prev, t.job_next) = (NO_SLOT, NO_SLOT);
        match self.tasks.get_mut(prev as usize) {
            Some(p) => p.job_next = next,
            None if next == NO_SLOT => {
                self.job_heads.remove(&job);
            }
            None => {
                self.job_heads.insert(job, next);
            }
        }
        if let Some(n) = self.tasks.get_mut(next as usize) {
            n.job_prev = prev;
        }
    }

    /// Every queued gang counted by pool and [`PendingReason::name`] (a gang
    /// behind a blocked head counts as `behind_head`, or by its own reason
    /// when that reason is one it could never be admitted for, as
    /// [`Self::why_pending`] says). One pass over the gang records: for metrics, read at scrape
    /// time rather than kept up to date on every admission.
    pub fn pending_counts(&self) -> Vec<crate::reason::PendingCount> {
        let mut counts: BTreeMap<(u32, &'static str), (u64, u64)> = BTreeMap::new();
        for (i, slot) in self.gangs.slots.iter().enumerate() {
            if !slot.queued {
                continue;
            }
            let id = GangId::new(i as u32, slot.generation);
            let blocked = self.queues[slot.pool as usize].blocked[Lane::of(&slot.spec) as usize];
            let reason = match blocked {
                Some(head) if head != id => self.never_admitted(slot).map_or("behind_head", |r| r.name()),
                _ => slot.reason.name(),
            };
            let c = counts.entry((slot.pool, reason)).or_default();
            c.0 += 1;
            c.1 += u64::from(slot.spec.tasks);
        }
        counts
            .into_iter()
            .map(|((pool, reason), (gangs, tasks))| crate::reason::PendingCount {
                pool: self.tree.nodes[pool as usize].path.clone(),
                reason,
                gangs,
                tasks,
            })
            .collect()
    }

    /// Bytes held by the queues and gang records (capacity, not length).
    pub fn queue_bytes(&self) -> usize {
        let deques: usize = self
            .queues
            .iter()
            .map(|q| std::mem::size_of::<PoolQueue>() + q.levels.values().map(|d| d.capacity() * 8 + 64).sum::<usize>())
            .sum();
        self.gangs.bytes() + deques + self.active.capacity() * 4
    }

    /// The first kind a pool is over its entitlement in, if any.
    pub fn over_entitlement(&self, path: &str) -> Option<(ResourceKind, u64)> {
        let n = &self.tree.nodes[self.tree.id(path)?.index()];
        amounts::over(&n.alloc_nr, &amounts::ZERO, &n.ent)
    }
}
