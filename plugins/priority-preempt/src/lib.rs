//! `priority-preempt`: the default preemption policy.
//!
//! For each need, in order, candidates are the preemptible (or revocable)
//! running tasks of the pools the need allows; inside the waiting pool itself
//! only tasks of lower priority than the waiting work qualify. They are taken
//! in this order: revocable first, then lowest priority, then most recently
//! started (least work lost). A non-revocable task of another pool is skipped
//! when taking it would bring that pool's allocation below its reservation
//! in a kind the need is short of.
//! A candidate is taken only if it frees a kind the need still lacks; once the
//! need is covered, victims that turned out unnecessary are dropped again,
//! most valuable first, so the set is as small as the order allows. A need
//! that cannot be covered in full takes no victims at all: killing tasks that
//! do not make room helps no one.
//!
//! GPU counts in milli-GPUs when the request carries its GPU side (WIT
//! 0.1.3): two tasks holding half a device each free one device, and a
//! need of half a device is not paid with a whole one when a half will do.

use paceline_plugin_sdk::prelude::*;

/// The priority preemption policy.
#[derive(Debug)]
pub struct PriorityPreempt;

impl PreemptionPolicy for PriorityPreempt {
    fn select_victims(request: &PreemptionRequest) -> Vec<Victim> {
        select(request)
    }
}

export_preemption!(PriorityPreempt);

fn select(request: &PreemptionRequest) -> Vec<Victim> {
    let request = &*request.in_milli_gpus();
    let mut taken = vec![false; request.running.len()];
    let mut allocation: Vec<Resources> = request.pools.iter().map(|p| p.allocation).collect();
    let mut victims = Vec::new();
    for (n, need) in request.needs.iter().enumerate() {
        let mut candidates: Vec<u32> = (0..request.running.len() as u32)
            .filter(|&i| {
                let t = &request.running[i as usize];
                !taken[i as usize]
                    && (t.preemptible || t.revocable)
                    && (need.from_pools.is_empty() || need.from_pools.contains(&t.pool))
                    && (t.pool != need.pool || t.priority < need.priority || t.revocable)
            })
            .collect();
        candidates.sort_by_key(|&i| {
            let t = &request.running[i as usize];
            (!t.revocable, t.priority, u64::MAX - t.started_at_ms, i)
        });

        let mut chosen: Vec<u32> = Vec::new();
        let mut freed = Resources::ZERO;
        for c in candidates {
            if need.resources.fits_in(&freed) {
                break;
            }
            let t = &request.running[c as usize];
            let unmet = need.resources.saturating_sub(&freed);
            if t.resources.min(&unmet).is_zero() {
                continue;
            }
            if !keeps_reservation(request, &allocation, t, need) {
                continue;
            }
            take(&mut allocation, t, true);
            freed = freed.saturating_add(&t.resources);
            chosen.push(c);
        }
        if !need.resources.fits_in(&freed) {
            for &c in &chosen {
                take(&mut allocation, &request.running[c as usize], false);
            }
            continue;
        }
        // Drop victims that are not needed, most valuable (last taken) first.
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            let t = &request.running[chosen[i] as usize];
            if need.resources.fits_in(&freed.saturating_sub(&t.resources)) {
                freed = freed.saturating_sub(&t.resources);
                take(&mut allocation, t, false);
                chosen.remove(i);
            }
        }
        for c in chosen {
            taken[c as usize] = true;
            let t = &request.running[c as usize];
            let reason = if t.revocable {
                VictimReason::Revoked
            } else if t.pool == need.pool {
                VictimReason::HigherPriority
            } else {
                VictimReason::OverEntitlement
            };
            victims.push(Victim { task: c, need: n as u32, reason });
        }
    }
    victims
}

/// Taking `t` leaves its pool at or above its reservation in every kind `t`
/// holds and the need asks for. Revocable tasks and tasks of the waiting pool
/// itself do not count.
fn keeps_reservation(request: &PreemptionRequest, allocation: &[Resources], t: &RunningTask, need: &Need) -> bool {
    if t.revocable || t.pool == need.pool {
        return true;
    }
    let (Some(pool), Some(alloc)) = (request.pools.get(t.pool as usize), allocation.get(t.pool as usize)) else {
        return false;
    };
    let after = alloc.saturating_sub(&t.resources);
    let r = &pool.reservation;
    let held = &t.resources;
    // Only the kinds the need is short of count: a pool using less memory
    // than it reserves, but borrowing CPU, still gives back the borrowed CPU
    // (the memory its victims free is a side effect, not a taking).
    let wanted = &need.resources;
    let keeps = |held: u64, wanted: u64, after: u64, reserved: u64| held == 0 || wanted == 0 || after >= reserved;
    keeps(held.cpu_millis, wanted.cpu_millis, after.cpu_millis, r.cpu_millis)
        && keeps(held.memory_mib, wanted.memory_mib, after.memory_mib, r.memory_mib)
        && keeps(held.disk_mib, wanted.disk_mib, after.disk_mib, r.disk_mib)
        && keeps(held.gpus, wanted.gpus, after.gpus, r.gpus)
}

/// Subtracts (`take`) or adds back a non-revocable task's resources.
fn take(allocation: &mut [Resources], t: &RunningTask, take: bool) {
    if t.revocable {
        return;
    }
    if let Some(a) = allocation.get_mut(t.pool as usize) {
        *a = if take { a.saturating_sub(&t.resources) } else { a.saturating_add(&t.resources) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_plugin_sdk::harness::{load_dir, run_preemption};

    #[test]
    fn scenarios() {
        for s in load_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios")).expect("scenario table") {
            run_preemption::<PriorityPreempt>(&s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
    }

    /// Requests with their GPU side (WIT 0.1.3). Kept apart from
    /// `scenarios/`, which the Python and TypeScript ports also run: they
    /// build the 0.1.0 world and see whole devices only.
    #[test]
    fn gpu_scenarios() {
        let table = load_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios-gpu")).expect("scenario table");
        assert!(!table.is_empty());
        for s in table {
            run_preemption::<PriorityPreempt>(&s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
    }
}
