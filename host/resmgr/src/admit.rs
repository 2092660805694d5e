//! Admission: moving whole gangs from pool queues to READY.
//!
//! A gang is admitted when, in every kind,
//! - non-revocable: pool allocation + gang ≤ pool entitlement, and if it is
//!   non-preemptible, the pool's non-preemptible allocation + gang ≤ its
//!   reservation;
//! - revocable: pool revocable allocation + gang ≤ pool slack entitlement;
//! - a controller gang (a job marked `controller`): the pool's controller
//!   allocation + gang ≤ its controller cap (`PoolSpec::controller_cap`);
//!   a gang waiting on it blocks nothing behind it;
//! - always: everything allocated in the cluster + gang ≤ capacity (the
//!   entitlement of a pool over its own may still be held by it until
//!   preemption frees it).
//!
//! Head-of-line rules. A queue is walked in priority-then-FIFO order, in three
//! lanes: preemptible, non-preemptible, revocable. The first gang that does
//! not fit blocks its lane, so a big gang is not starved by small ones behind
//! it. A gang over entitlement or short of cluster capacity blocks both
//! non-revocable lanes (anything behind it would take what it waits for). A
//! non-preemptible gang waiting on reservation blocks only the
//! non-preemptible lane: preemptible work behind it goes ahead, since it does
//! not use the reservation headroom it waits for. Revocable gangs draw on
//! slack and neither block nor are blocked by the others. The walk stops when
//! every lane that still has gangs is blocked.

use crate::amounts;
use crate::gang::GangId;
use crate::manager::ResourceManager;
use crate::queue::{GangSlot, Lane};
use crate::reason::PendingReason;
use crate::tree::Node;
use paceline_model::pool::ResourceKind;

impl ResourceManager {
    /// Admits every gang that fits, in every pool with queued gangs. Returns
    /// the number of gangs admitted.
    pub fn admit(&mut self, now_ms: u64) -> usize {
        let mut admitted = 0;
        let mut i = 0;
        while i < self.active.len() {
            let p = self.active[i];
            admitted += self.admit_pool(p, now_ms);
            if self.queues[p as usize].len() == 0 {
                self.queues[p as usize].active = false;
                self.queues[p as usize].levels.clear();
                self.active.swap_remove(i);
            } else {
                i += 1;
            }
        }
        admitted
    }

    fn check(&self, slot: &GangSlot) -> Result<(), PendingReason> {
        let n = &self.tree.nodes[slot.pool as usize];
        if slot.spec.controller
            && let Some((kind, by)) = amounts::over(&n.alloc_ctl, &slot.total, &n.ctl_cap)
        {
            return Err(PendingReason::OverControllerLimit { kind, by });
        }
        if slot.spec.revocable {
            if let Some((kind, by)) = amounts::over(&n.alloc_rev, &slot.total, &n.slack_ent) {
                return Err(PendingReason::OverSlackEntitlement { kind, by });
            }
        } else {
            // A pool capped at 0 in a kind the gang needs (static with no
            // reservation there, or a limit of 0) can never admit it: say so
            // rather than "over entitlement".
            if let Some(k) = (0..4).find(|&k| slot.total[k] > 0 && n.cap[k] == 0) {
                return Err(PendingReason::PoolCannotHold { kind: ResourceKind::ALL[k], is_static: n.is_static[k] });
            }
            if let Some((kind, by)) = amounts::over(&n.alloc_nr, &slot.total, &n.ent) {
                return Err(PendingReason::OverEntitlement { kind, by });
            }
            if !slot.spec.preemptible
                && let Some((kind, _)) = amounts::over(&n.alloc_np, &slot.total, &n.res)
            {
                // A kind the gang alone needs more of than the pool reserves
                // is the one a person must change; name it before one that
                // only waits for other work to end.
                let k = (0..4).find(|&k| slot.total[k] > n.res[k]).unwrap_or(kind.index());
                return Err(reservation_wait(n, slot, k));
            }
        }
        let root = &self.tree.nodes[0];
        let used = amounts::add(&root.alloc_nr, &root.alloc_rev);
        if let Some((kind, by)) = amounts::over(&used, &slot.total, &self.capacity) {
            return Err(PendingReason::ClusterFull { kind, by });
        }
        Ok(())
    }

    /// Why `slot` could never be admitted while its pool is as it is, if so,
    /// whatever is queued before it or ends: the pool is capped at 0 in a
    /// kind it needs, or it is non-preemptible and needs more than the pool
    /// reserves ([`PendingReason::never`]). "Why pending" reads a gang
    /// behind a blocked head by this before naming the head: what is queued
    /// before it does not matter then.
    pub(crate) fn never_admitted(&self, slot: &GangSlot) -> Option<PendingReason> {
        if slot.spec.revocable {
            return None;
        }
        let n = &self.tree.nodes[slot.pool as usize];
        if let Some(k) = (0..4).find(|&k| slot.total[k] > 0 && n.cap[k] == 0) {
            return Some(PendingReason::PoolCannotHold { kind: ResourceKind::ALL[k], is_static: n.is_static[k] });
        }
        if slot.spec.preemptible {
            return None;
        }
        (0..4).find(|&k| slot.total[k] > n.res[k]).map(|k| reservation_wait(n, slot, k))
    }

    fn admit_pool(&mut self, p: u32, now_ms: u64) -> usize {
        // Taken out so the walk can admit (which touches the tree) while holding it.
        let mut q = std::mem::take(&mut self.queues[p as usize]);
        q.blocked = [None; 3];
        let mut blocked = [false; 3];
        let mut admitted = 0;
        'levels: for dq in q.levels.values_mut() {
            let mut i = 0;
            while i < dq.len() {
                if (0..3).all(|l| blocked[l] || q.per_lane[l] == 0) {
                    break 'levels;
                }
                let id = GangId(dq[i]);
                let Some(slot) = self.gangs.get(id) else {
                    // Admitted or cancelled earlier: drop it once it reaches the front.
                    if i == 0 {
                        dq.pop_front();
                    } else {
                        i += 1;
                    }
                    continue;
                };
                let lane = Lane::of(&slot.spec) as usize;
                if blocked[lane] {
                    i += 1;
                    continue;
                }
                match self.check(slot) {
                    Ok(()) => {
                        self.admit_gang(id, now_ms);
                        q.per_lane[lane] -= 1;
                        admitted += 1;
                        if i == 0 {
                            dq.pop_front();
                        } else {
                            i += 1;
                        }
                    }
                    Err(reason @ PendingReason::OverControllerLimit { .. }) => {
                        // Blocks nothing: the work behind it (the executors of
                        // the controllers already running, say) is what the
                        // cap keeps room for.
                        if let Some(s) = self.gangs.get_mut(id) {
                            s.reason = reason;
                        }
                        i += 1;
                    }
                    Err(reason) => {
                        if let Some(s) = self.gangs.get_mut(id) {
                            s.reason = reason;
                        }
                        blocked[lane] = true;
                        q.blocked[lane] = Some(id);
                        let both = matches!(
                            reason,
                            PendingReason::OverEntitlement { .. }
                                | PendingReason::ClusterFull { .. }
                                | PendingReason::PoolCannotHold { .. }
                        );
                        if lane != Lane::Revocable as usize && both {
                            for l in [Lane::Preemptible as usize, Lane::NonPreemptible as usize] {
                                if !blocked[l] {
                                    blocked[l] = true;
                                    q.blocked[l] = Some(id);
                                }
                            }
                        }
                        i += 1;
                    }
                }
            }
        }
        q.levels.retain(|_, dq| !dq.is_empty());
        self.queues[p as usize] = q;
        admitted
    }
}

/// A non-preemptible gang's wait on its pool's reservation in kind `k`.
fn reservation_wait(n: &Node, slot: &GangSlot, k: usize) -> PendingReason {
    PendingReason::WaitingOnReservation {
        kind: ResourceKind::ALL[k],
        by: n.alloc_np[k].saturating_add(slot.total[k]).saturating_sub(n.res[k]),
        reservation: n.res[k],
        need: slot.total[k],
    }
}
