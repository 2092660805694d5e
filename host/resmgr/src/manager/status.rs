//! What the manager reports: pool status, "why pending" per gang and per
//! task, counts of pending gangs by reason, and sizes.

use super::*;

impl ResourceManager {
    /// A pool's numbers.
    pub fn pool_status(&self, path: &str) -> Option<PoolStatus> {
        let id = self.tree.id(path)?;
        let n = &self.tree.nodes[id.index()];
        let r = amounts::to_resources;
        Some(PoolStatus {
            path: n.path.clone(),
            spec: n.spec.clone(),
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
