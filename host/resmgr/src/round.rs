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
//!
//! A stateless job's running instances are candidates only with the
//! permission of its count of unavailable instances (decision 0046): the
//! round asks the [`AvailabilityGate`](crate::gate::AvailabilityGate) once,
//! for every such job at once, and offers the policy only the instances
//! granted; the others stay, and the policy picks from the rest.

use std::collections::{HashMap, HashSet};

use paceline_joints::contract::IntoContract;
use paceline_model::job::JobKind;
use paceline_plugin_sdk::types::{GpuPool, Need, PoolView, PreemptionRequest, RunningTask, VictimReason};

use crate::amounts::{self, Amounts};
use crate::gate::GateAsk;
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
        // The candidates: running preemptible (or revocable) tasks of the
        // pools the needs name, in slot order (the policy's request as before).
        let candidates: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| {
                let t = &self.tasks[i];
                t.live
                    && t.state == TaskState::Running
                    && (t.preemptible || t.revocable)
                    && index[t.pool as usize] != NONE
            })
            .collect();
        if candidates.is_empty() {
            return;
        }
        // A stateless job's instances may go only with the permission of its
        // count of unavailable instances (decision 0046): one ask per job,
        // its instances latest started first (the default policy's order).
        let mut asks: Vec<GateAsk> = Vec::new();
        if self.gate.is_some() {
            let mut ask_of: HashMap<u64, usize> = HashMap::new();
            let mut latest_first = candidates.clone();
            latest_first.sort_by_key(|&i| (std::cmp::Reverse(self.tasks[i].started_ms), i));
            for &i in &latest_first {
                let t = &self.tasks[i];
                if t.kind != JobKind::Stateless {
                    continue;
                }
                let a = *ask_of.entry(t.job).or_insert_with(|| {
                    asks.push(GateAsk { job: t.job, instances: Vec::new() });
                    asks.len() - 1
                });
                asks[a].instances.push(t.instance);
            }
        }
        let mut chosen: Vec<(TaskHandle, VictimReason, u32)> = Vec::new();
        let mut choose = |granted: &[Vec<u32>]| -> Vec<(u64, u32)> {
            let allowed: HashSet<(u64, u32)> =
                asks.iter().zip(granted).flat_map(|(a, g)| g.iter().map(move |&i| (a.job, i))).collect();
            let gated: HashSet<u64> = asks.iter().map(|a| a.job).collect();
            let mut running_ids: Vec<TaskHandle> = Vec::new();
            for &i in &candidates {
                let t = &self.tasks[i];
                if gated.contains(&t.job) && !allowed.contains(&(t.job, t.instance)) {
                    continue;
                }
                running_ids.push(crate::manager::handle(i as u32, t.generation));
                req.running.push(RunningTask {
                    pool: index[t.pool as usize],
                    priority: t.priority,
                    preemptible: t.preemptible,
                    revocable: t.revocable,
                    started_at_ms: t.started_ms,
                    resources: t.resources.into_contract(),
                });
                req.gpu_running.push(t.resources.gpu_milli);
            }
            if req.running.is_empty() {
                return Vec::new();
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
            let mut out = Vec::new();
            for v in preempt::choose(self.policy.as_ref(), &req) {
                let id = running_ids[v.task as usize];
                let t = &self.tasks[crate::manager::slot_of(id)];
                if gated.contains(&t.job) {
                    out.push((t.job, t.instance));
                }
                chosen.push((id, v.reason, req.running[v.task as usize].pool));
            }
            out
        };
        match self.gate.clone() {
            Some(gate) if !asks.is_empty() => gate.round(&asks, &mut choose),
            _ => {
                choose(&[]);
            }
        }
        for (id, reason, pool) in chosen {
            if self.apply(id, Transition::Preempt, now_ms).is_err() {
                continue;
            }
            let t = &self.tasks[crate::manager::slot_of(id)];
            tracing::info!(
                task = id.0,
                job = t.job,
                pool = req.pools[pool as usize].path.as_str(),
                ?reason,
                "preempting"
            );
            self.kills.push(KillRequest {
                task: id,
                job: t.job,
                instance: t.instance,
                reason: KillReason::Preempted(reason),
            });
        }
    }
}
