//! Admitted tasks: the ready queue, placement's answers, kills, and the
//! transition table applied with its side effects (accounting, timers,
//! the job links).

use super::*;

impl ResourceManager {
    pub(super) fn task_mut(&mut self, id: TaskHandle) -> Result<&mut TaskRec, TaskError> {
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
    pub(super) fn finish(&mut self, id: TaskHandle, preempted: bool, now_ms: u64) {
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

    /// Puts a new live task first in its job's list.
    pub(super) fn link_to_job(&mut self, slot: u32) {
        let job = self.tasks[slot as usize].job;
        let next = self.job_heads.insert(job, slot).unwrap_or(NO_SLOT);
        if let Some(n) = self.tasks.get_mut(next as usize) {
            n.job_prev = slot;
        }
        let t = &mut self.tasks[slot as usize];
        (t.job_prev, t.job_next) = (NO_SLOT, next);
    }

    /// Takes an ended task out of its job's list.
    pub(super) fn unlink_from_job(&mut self, slot: u32) {
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
}
