//! Preemption rounds: when to preempt, what the policy is asked, and how its
//! answer is carried out.
//!
//! Two triggers, checked every period after admission:
//! - **inter-pool**: a pool's head gang fits its entitlement but the cluster
//!   is short (others hold it), and some pool has stayed above its
//!   entitlement for K consecutive periods (or revocable work holds
//!   capacity). The need is the shortfall, minus what is already being
//!   preempted; victims may come from those pools only.
//! - **intra-pool**: a pool's head gang is over the pool's entitlement but
//!   would fit it; the need is the overshoot, victims come from the same pool
//!   and (the policy's rule) have a lower priority than the waiting gang.
//!
//! Victims go to PREEMPTING and a kill request is emitted; once the kill is
//! confirmed the task is released and requeued (or ends KILLED if its spec
//! says kill-on-preempt).

use paceline_joints::contract::IntoContract;
use paceline_plugin_sdk::types::{GpuPool, Need, PoolView, PreemptionRequest, RunningTask};

use crate::amounts::{self, Amounts};
use crate::manager::{KillReason, KillRequest, ResourceManager, TaskHandle};
use crate::preempt;
use crate::queue::Lane;
use crate::reason::PendingReason;
use crate::task::{TaskState, Transition};
use crate::tree::NONE;

/// The GPU kind's position in [`Amounts`] (milli-GPUs).
const GPU: usize = 3;

struct PendingNeed {
    pool: u32,
    priority: u32,
    amount: Amounts,
    intra: bool,
}

impl ResourceManager {
    fn count_over_periods(&mut self) {
        self.tree.ensure_order();
        for oi in 1..self.tree.order.len() {
            let n = &mut self.tree.nodes[self.tree.order[oi] as usize];
            if n.children.is_empty() {
                n.over_periods = if amounts::fits(&n.alloc_nr, &n.ent) { 0 } else { n.over_periods.saturating_add(1) };
            }
        }
    }

    fn collect_needs(&self, needs: &mut Vec<PendingNeed>) {
        let root = &self.tree.nodes[0];
        let used = amounts::add(&root.alloc_nr, &root.alloc_rev);
        for &p in &self.active {
            let q = &self.queues[p as usize];
            let n = &self.tree.nodes[p as usize];
            let heads = [q.blocked[Lane::Preemptible as usize], q.blocked[Lane::NonPreemptible as usize]];
            for (h, head) in heads.iter().enumerate() {
                let Some(head) = *head else { continue };
                if h == 1 && heads[0] == Some(head) {
                    continue;
                }
                let Some(slot) = self.gangs.get(head) else { continue };
                match slot.reason {
                    PendingReason::ClusterFull { .. } => {
                        let short = amounts::sub(&amounts::add(&used, &slot.total), &self.capacity);
                        let amount = amounts::sub(&short, &self.preempting_total);
                        if !amounts::is_zero(&amount) {
                            needs.push(PendingNeed { pool: p, priority: slot.spec.priority, amount, intra: false });
                        }
                    }
                    // Only if a lower-priority preemptible task runs in the pool:
                    // otherwise no victim could help and the policy is not asked.
                    PendingReason::OverEntitlement { .. }
                        if amounts::fits(&slot.total, &n.ent)
                            && self.running_by_priority[p as usize].range(..slot.spec.priority).next().is_some() =>
                    {
                        let over = amounts::sub(&amounts::add(&n.alloc_nr, &slot.total), &n.ent);
                        let amount = amounts::sub(&over, &self.preempting[p as usize]);
                        if !amounts::is_zero(&amount) {
                            needs.push(PendingNeed { pool: p, priority: slot.spec.priority, amount, intra: true });
                        }
                    }
                    _ => {}
                }
            }
        }
        // Most important first; pool order breaks ties so rounds are deterministic.
        needs.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.pool.cmp(&b.pool)));
    }

    /// Runs one preemption round; victims' kill requests go to the outbox.
    pub(crate) fn preemption_round(&mut self, now_ms: u64) {
        self.count_over_periods();
        let mut pending = Vec::new();
        self.collect_needs(&mut pending);
        if pending.is_empty() {
            return;
        }
        let k = self.config.preempt_after_periods;
        // Pools inter-pool needs may take from: above entitlement for K periods, or holding revocable work.
        let donors: Vec<u32> = self
            .tree
            .order
            .iter()
            .copied()
            .filter(|&i| {
                let n = &self.tree.nodes[i as usize];
                i != 0 && n.children.is_empty() && (n.over_periods >= k || !amounts::is_zero(&n.alloc_rev))
            })
            .collect();

        // Request pool indices: a table from arena index to request index.
        let mut index = vec![NONE; self.tree.nodes.len()];
        let mut req = PreemptionRequest::default();
        let mut add_pool = |req: &mut PreemptionRequest, p: u32| -> u32 {
            if index[p as usize] == NONE {
                index[p as usize] = req.pools.len() as u32;
                let n = &self.tree.nodes[p as usize];
                req.pools.push(PoolView {
                    path: n.path.clone(),
                    reservation: amounts::to_resources(&n.res).into_contract(),
                    entitlement: amounts::to_resources(&n.ent).into_contract(),
                    allocation: amounts::to_resources(&n.alloc_nr).into_contract(),
                });
                req.gpu_pools.push(GpuPool {
                    reservation_milli: n.res[GPU],
                    entitlement_milli: n.ent[GPU],
                    allocation_milli: n.alloc_nr[GPU],
                });
            }
            index[p as usize]
        };
        for need in &pending {
            let pool = add_pool(&mut req, need.pool);
            let from_pools = if need.intra {
                vec![pool]
            } else {
                // The waiting pool's own revocable work may be revoked too.
                let own_rev = !amounts::is_zero(&self.tree.nodes[need.pool as usize].alloc_rev);
                let from: Vec<u32> = donors.iter().copied().filter(|&d| d != need.pool || own_rev).collect();
                if from.is_empty() {
                    continue;
                }
                from.into_iter().map(|d| add_pool(&mut req, d)).collect()
            };
            req.needs.push(Need {
                pool,
                priority: need.priority,
                resources: amounts::to_resources(&need.amount).into_contract(),
                from_pools,
            });
            req.gpu_needs.push(need.amount[GPU]);
        }
        if req.needs.is_empty() {
            return;
        }
        let mut running_ids: Vec<TaskHandle> = Vec::new();
        for (i, t) in self.tasks.iter().enumerate() {
            if !t.live || t.state != TaskState::Running || !(t.preemptible || t.revocable) {
                continue;
            }
            let pi = index[t.pool as usize];
            if pi == NONE {
                continue;
            }
            running_ids.push(crate::manager::handle(i as u32, t.generation));
            req.running.push(RunningTask {
                pool: pi,
                priority: t.priority,
                preemptible: t.preemptible,
                revocable: t.revocable,
                started_at_ms: t.started_ms,
                resources: t.resources.into_contract(),
            });
            req.gpu_running.push(t.resources.gpu_milli);
        }
        if req.running.is_empty() {
            return;
        }
        // The GPU side (WIT 0.1.3) only where some GPU is involved: a round
        // without GPUs is what it was before, in either unit.
        let any_gpu = req.gpu_needs.iter().chain(&req.gpu_running).any(|&m| m > 0)
            || req
                .gpu_pools
                .iter()
                .any(|p| p.reservation_milli > 0 || p.entitlement_milli > 0 || p.allocation_milli > 0);
        if !any_gpu {
            req.gpu_pools.clear();
            req.gpu_running.clear();
            req.gpu_needs.clear();
        }
        let victims = preempt::choose(self.policy.as_ref(), &req);
        for v in victims {
            let id = running_ids[v.task as usize];
            if self.apply(id, Transition::Preempt, now_ms).is_err() {
                continue;
            }
            let t = &self.tasks[crate::manager::slot_of(id)];
            tracing::info!(task = id.0, job = t.job, pool = req.pools[req.running[v.task as usize].pool as usize].path.as_str(), reason = ?v.reason, "preempting");
            self.kills.push(KillRequest {
                task: id,
                job: t.job,
                instance: t.instance,
                reason: KillReason::Preempted(v.reason),
            });
        }
    }
}
