//! Gangs: submission and its checks, cancelling, admission's charge, the
//! tasks an admitted gang becomes, and runs adopted after a restart.

use super::*;

impl ResourceManager {
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
    pub(super) fn check_gang(&self, p: u32, spec: &GangSpec) -> Result<(), SubmitError> {
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
    pub(super) fn create_tasks(
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
    pub(super) fn charge(&mut self, p: u32, spec: &GangSpec, total: &Amounts, from_queue: bool) {
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
}
