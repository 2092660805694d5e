//! `binpack`: best-fit placement, the default for batch jobs.
//!
//! Each task goes to the eligible host whose free capacity, after taking the
//! task, is smallest (scored over cpu, memory, disk and GPUs, each as a
//! fraction of the host's total), so hosts fill up one after another and
//! whole hosts stay free for large tasks. Gangs are placed whole or not at
//! all. A task's preferred host wins when it fits; soft preferences
//! outweigh fullness.
//!
//! The hot loop ([`best_fit_all`]) runs over a flat slice of free capacity
//! with integer scores and no allocation; it is the loop the Wasm-vs-native
//! benchmark measures.

use paceline_plugin_sdk::prelude::*;

/// The best-fit policy.
#[derive(Debug)]
pub struct Binpack;

impl PlacementPolicy for Binpack {
    fn place(request: &PlacementRequest) -> PlacementResult {
        place_gangs(Round::new(request), best_fit)
    }
}

export_placement!(Binpack);

/// Picks the best-fit host for task `t`, or says why there is none.
pub fn best_fit(round: &Round<'_>, t: u32) -> Result<u32, UnplacedReason> {
    let task = &round.request.tasks[t as usize];
    let demand = task.demand;
    if let Some(p) = task.preferred_host {
        if let Some(free) = round.free.get(p as usize) {
            if demand.fits_in(free) && !round.at_max_per_host(task.job, p) && eligible_host(round, task, p) {
                return Ok(p);
            }
        }
    }
    let limited = round.request.jobs.get(task.job as usize).is_some_and(|j| j.max_per_host > 0);
    let has_preferences =
        round.request.constraints.get(task.constraints as usize).is_some_and(|c| !c.preferences.is_empty());
    let found = match round.eligible(task) {
        HostFilter::All if !limited && !has_preferences && demand.gpus == 0 && demand.ports == 0 => {
            best_fit_all(&round.free, &round.scales, &demand)
        }
        HostFilter::All => best_fit_scored(round, task, 0..round.free.len() as u32),
        HostFilter::Only(hosts) if hosts.is_empty() => return Err(UnplacedReason::ConstraintsUnsatisfiable),
        HostFilter::Only(hosts) => best_fit_scored(round, task, hosts.iter().copied()),
    };
    found.ok_or_else(|| {
        if limited { UnplacedReason::MaxPerHost } else { UnplacedReason::InsufficientResources }
    })
}

fn eligible_host(round: &Round<'_>, task: &Task, host: u32) -> bool {
    match round.eligible(task) {
        HostFilter::All => true,
        HostFilter::Only(hosts) => hosts.binary_search(&host).is_ok(),
    }
}

/// Best fit over every host for a task that needs no GPU and no port: the
/// tight loop. Ties go to the lowest index.
///
/// Its shape is chosen for the Wasm engine as much as for LLVM:
/// - hosts are visited four at a time (LLVM unrolls the fixed inner loop), so
///   Cranelift's loop branch and, with deadlines on, its epoch check run once
///   per four hosts;
/// - only the three kinds the task asks for are compared, which keeps the
///   loop's live values within the registers Cranelift can hold without
///   spilling; a host's free GPUs still count in its score, so CPU work
///   leans away from GPU hosts;
/// - a host that fits has `free >= demand`, so the leftover needs no saturation.
///
/// `demand.gpus` and `demand.ports` must be zero (the caller checks).
#[inline(never)]
pub fn best_fit_all(free: &[Resources], scales: &[ScoreScale], demand: &Resources) -> Option<u32> {
    let mut best_score = u64::MAX;
    let mut best = u32::MAX;
    let n = free.len().min(scales.len());
    let (free, scales) = (&free[..n], &scales[..n]);
    let (cpu, memory, disk) = (demand.cpu_millis, demand.memory_mib, demand.disk_mib);
    let mut base = 0u32;
    for (f4, s4) in free.chunks_exact(4).zip(scales.chunks_exact(4)) {
        for k in 0..4 {
            consider(&f4[k], &s4[k], cpu, memory, disk, base + k as u32, &mut best_score, &mut best);
        }
        base += 4;
    }
    let tail = n - n % 4;
    for (k, (f, s)) in free[tail..].iter().zip(&scales[tail..]).enumerate() {
        consider(f, s, cpu, memory, disk, (tail + k) as u32, &mut best_score, &mut best);
    }
    (best != u32::MAX).then_some(best)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn consider(f: &Resources, s: &ScoreScale, cpu: u64, memory: u64, disk: u64, index: u32, best_score: &mut u64, best: &mut u32) {
    if (f.cpu_millis >= cpu) & (f.memory_mib >= memory) & (f.disk_mib >= disk) {
        let leftover = Resources {
            cpu_millis: f.cpu_millis.wrapping_sub(cpu),
            memory_mib: f.memory_mib.wrapping_sub(memory),
            disk_mib: f.disk_mib.wrapping_sub(disk),
            gpus: f.gpus,
            ports: 0,
        };
        let score = s.score(&leftover);
        if score < *best_score {
            *best_score = score;
            *best = index;
        }
    }
}

/// Best fit over `hosts` with per-host maxima and soft preferences: a host
/// that matches more preference weight always wins; fullness breaks ties.
fn best_fit_scored(round: &Round<'_>, task: &Task, hosts: impl Iterator<Item = u32>) -> Option<u32> {
    let mut best: Option<(i64, u64, u32)> = None;
    for h in hosts {
        let Some(f) = round.free.get(h as usize) else { continue };
        if !task.demand.fits_in(f) || round.at_max_per_host(task.job, h) {
            continue;
        }
        let preference = round.preference_score(task, h);
        let leftover = round.scales[h as usize].score(&f.saturating_sub(&task.demand));
        let key = (-preference, leftover, h);
        if best.is_none_or(|b| key < b) {
            best = Some(key);
        }
    }
    best.map(|(_, _, h)| h)
}

#[cfg(test)]
mod tests;
