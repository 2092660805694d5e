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
        let mut compact = Compact::new(request);
        let mut picker = RunPicker::new();
        place_gangs(Round::new(request), |round, t| {
            compact.sync(round);
            best_fit(round, &compact, &mut picker, t)
        })
    }
}

/// A host as the hot loop reads it: free cpu, memory, disk and GPUs, and
/// their fullness weights, in 32 bits each: 32 bytes a host, one stream.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(32))]
pub struct Slot {
    free: [u32; 4],
    scale: [u32; 4],
}

/// Free capacity of every host in [`Slot`]s, kept in step with the round
/// through its journal.
#[derive(Debug)]
pub struct Compact {
    slots: Vec<Slot>,
    seen: usize,
}

fn clamp32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl Compact {
    /// Builds the compact copy of every host's free capacity.
    pub fn new(request: &PlacementRequest) -> Compact {
        let weight = |total: u64| (1u64 << 31).checked_div(total).map_or(0, clamp32);
        let slots = request
            .hosts
            .iter()
            .map(|h| Slot {
                // Clamping free capacity down is safe: a task that fits the
                // clamped value fits the real one.
                free: [
                    clamp32(h.free.cpu_millis),
                    clamp32(h.free.memory_mib),
                    clamp32(h.free.disk_mib),
                    clamp32(h.free.gpus),
                ],
                scale: [
                    weight(h.total.cpu_millis),
                    weight(h.total.memory_mib),
                    weight(h.total.disk_mib),
                    weight(h.total.gpus),
                ],
            })
            .collect();
        Compact { slots, seen: 0 }
    }

    /// Applies the round's changes made since the last sync.
    pub fn sync(&mut self, round: &Round<'_>) {
        for &h in &round.journal()[self.seen..] {
            let f = &round.free[h as usize];
            self.slots[h as usize].free =
                [clamp32(f.cpu_millis), clamp32(f.memory_mib), clamp32(f.disk_mib), clamp32(f.gpus)];
        }
        self.seen = round.journal().len();
    }
}

export_placement!(Binpack);

/// A host's rank for a task: preference weight matched (negated), the
/// fullness left after the task, then milli-GPUs left; least first.
type Rank = (i64, u64, u64);

/// Picks the best-fit host for task `t`, or says why there is none. A run
/// of alike tasks (one job's instances) is served from `picker`'s heap after
/// its first task: the same choices, without a scan per task.
pub fn best_fit(
    round: &Round<'_>,
    compact: &Compact,
    picker: &mut RunPicker<Rank>,
    t: u32,
) -> Result<u32, UnplacedReason> {
    let task = &round.request.tasks[t as usize];
    let demand = task.demand;
    let gpu = round.gpu_task(t).milli;
    if let Some(p) = task.preferred_host
        && round.fits(t, p)
        && !round.at_max_per_host(task.job, p)
        && eligible_host(round, task, p)
    {
        return Ok(p);
    }
    let limited = round.request.jobs.get(task.job as usize).is_some_and(|j| j.max_per_host > 0);
    let has_preferences =
        round.request.constraints.get(task.constraints as usize).is_some_and(|c| !c.preferences.is_empty());
    let small = |d: u64| d <= u64::from(u32::MAX);
    let fast = matches!(round.eligible(task), HostFilter::All)
        && !limited
        && !has_preferences
        && demand.gpus == 0
        && gpu == 0
        && demand.ports == 0
        && small(demand.cpu_millis)
        && small(demand.memory_mib)
        && small(demand.disk_mib);
    if fast {
        let d = [demand.cpu_millis as u32, demand.memory_mib as u32, demand.disk_mib as u32];
        // The heap ranks hosts by the tight loop's own score.
        let rank = |h: u32| (0, fast_score(&compact.slots[h as usize], d), 0);
        return picker.pick_or_scan(round, t, rank, || {
            best_fit_all(&compact.slots, d).ok_or(UnplacedReason::InsufficientResources)
        });
    }
    // Everything else: a host matching more preference weight wins, then
    // the fullest after taking the task; for a GPU ask, then the host with
    // the fewest milli-GPUs left (shares pack onto started devices).
    picker.pick(round, t, |h| {
        let leftover = round.free[h as usize].saturating_sub(&demand);
        let gpu_left: u64 = if gpu > 0 { round.gpu_free[h as usize].iter().map(|&f| u64::from(f)).sum() } else { 0 };
        (-round.preference_score(task, h), round.scales[h as usize].score(&leftover), gpu_left)
    })
}

/// The tight loop's score of a host the task fits: fullness left after it.
fn fast_score(s: &Slot, d: [u32; 3]) -> u64 {
    let f = s.free;
    u64::from(f[0].saturating_sub(d[0])) * u64::from(s.scale[0])
        + u64::from(f[1].saturating_sub(d[1])) * u64::from(s.scale[1])
        + u64::from(f[2].saturating_sub(d[2])) * u64::from(s.scale[2])
        + u64::from(f[3]) * u64::from(s.scale[3])
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
/// - one stream of 32-byte [`Slot`]s, 32-bit values: half the memory traffic
///   of the round's 64-bit vectors and one base pointer;
/// - hosts are visited four at a time (LLVM unrolls the fixed inner loop), so
///   Cranelift's loop branch and, with deadlines on, its epoch check run once
///   per four hosts;
/// - only the three kinds the task asks for are compared, which keeps the
///   loop's live values within the registers Cranelift can hold without
///   spilling; a host's free GPUs still count in its score, so CPU work
///   leans away from GPU hosts;
/// - a host that fits has `free >= demand`, so the leftover needs no saturation.
#[inline(never)]
pub fn best_fit_all(slots: &[Slot], demand: [u32; 3]) -> Option<u32> {
    let mut best_score = u64::MAX;
    let mut best = u32::MAX;
    let mut base = 0u32;
    let chunks = slots.chunks_exact(4);
    let tail = chunks.remainder();
    for s4 in chunks {
        // Indexing the four-wide chunk keeps the unrolled shape of the hot loop explicit.
        #[allow(clippy::needless_range_loop)]
        for k in 0..4 {
            consider(&s4[k], demand, base + k as u32, &mut best_score, &mut best);
        }
        base += 4;
    }
    for (k, s) in tail.iter().enumerate() {
        consider(s, demand, base + k as u32, &mut best_score, &mut best);
    }
    (best != u32::MAX).then_some(best)
}

#[inline(always)]
fn consider(s: &Slot, d: [u32; 3], index: u32, best_score: &mut u64, best: &mut u32) {
    let f = s.free;
    if (f[0] >= d[0]) & (f[1] >= d[1]) & (f[2] >= d[2]) {
        let score = u64::from(f[0] - d[0]) * u64::from(s.scale[0])
            + u64::from(f[1] - d[1]) * u64::from(s.scale[1])
            + u64::from(f[2] - d[2]) * u64::from(s.scale[2])
            + u64::from(f[3]) * u64::from(s.scale[3]);
        if score < *best_score {
            *best_score = score;
            *best = index;
        }
    }
}

#[cfg(test)]
mod tests;
