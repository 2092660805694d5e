//! Fragmentation gradient descent.
//!
//! The fragmentation of a host for one class of task is the GPU capacity
//! of the host that class cannot use:
//! - the whole of the host's free GPU when the class does not fit the host
//!   at all (CPU, memory, or no device that takes it);
//! - else the free GPU on devices that cannot take it: for a share of one
//!   device, the devices with less free than the share; for whole devices,
//!   the devices not wholly free.
//!
//! A class that asks for no GPU loses nothing on a host it fits (it needs
//! no GPU there) and the whole free GPU on one it does not: a CPU task that
//! takes a host's last cores strands that host's GPUs for the CPU tasks to
//! come as well.
//!
//! A host's fragmentation is the sum over the workload's classes of their
//! weight × that amount. Each task goes where its placement makes the
//! fragmentation grow least (the steepest descent), device included.
//!
//! Hosts are compared on the growth of the *expected* fragmentation (the
//! sum divided by the classes' total weight: milli-GPU a task of the
//! workload, drawn at random, could not use) in steps of [`STEP_MILLI`],
//! and hosts on the same step by the tie-breakers (crate docs): the paper's
//! own implementation scores hosts as a Kubernetes plugin does, in whole
//! points of 0–100, so hosts whose gradients differ by less than a point
//! score alike there too.

use paceline_plugin_sdk::prelude::*;

use crate::{candidates, place_with_devices};

/// Most devices a host is scored with (larger hosts are scored on their
/// first 64; a guard, no real host has more).
const MAX_DEVICES: usize = 64;

/// The step, in milli-GPU of expected fragmentation, in which gradients are
/// compared: 1/25 of a GPU. Tuned on the openb trace (docs/benchmarks.md:
/// exact comparison and steps of 20 placed about 0.4 point less of the GPU
/// capacity with shuffled arrivals; steps of 80 about 0.1 point more there
/// but 0.2 point less in the trace's order); the paper does not give its
/// mapping.
pub const STEP_MILLI: i128 = 40;

/// The fragmentation gradient descent policy.
#[derive(Debug)]
pub struct Fgd;

impl PlacementPolicy for Fgd {
    fn place(request: &PlacementRequest) -> PlacementResult {
        let frag = Frag::new(&request.gpu_workload);
        place_with_devices(request, |round, t| choose(round, &frag, t))
    }
}

/// A fragmentation measure the descent follows: [`Frag`], or a variant
/// ([`crate::FragPlus`]).
pub(crate) trait Measure {
    /// The fragmentation of a host with `cpu` and `memory` free and its
    /// devices' free milli-GPU in `devices`.
    fn of(&self, cpu: u64, memory: u64, devices: &[u32]) -> u64;
    /// The step a growth of `grown` falls on (hosts on one step tie).
    fn step(&self, grown: i128) -> i128;
}

impl Measure for Frag {
    fn of(&self, cpu: u64, memory: u64, devices: &[u32]) -> u64 {
        Frag::of(self, cpu, memory, devices)
    }
    fn step(&self, grown: i128) -> i128 {
        Frag::step(self, grown)
    }
}

/// The workload's GPU classes, as fragmentation is measured against them.
#[derive(Clone, Debug, Default)]
pub struct Frag {
    /// (cpu millis, memory MiB, milli-GPU, weight).
    classes: Vec<(u64, u64, u32, u64)>,
}

impl Frag {
    /// The measure for a workload.
    pub fn new(workload: &[TaskClass]) -> Frag {
        let classes = workload
            .iter()
            .filter(|c| c.weight > 0)
            .map(|c| (c.cpu_millis, c.memory_mib, c.milli, u64::from(c.weight)))
            .collect();
        Frag { classes }
    }

    /// The step on which a growth of `grown` (as [`Frag::of`] differences
    /// it) falls: its expected value in milli-GPU, floored to a multiple
    /// of [`STEP_MILLI`], divided by it.
    pub fn step(&self, grown: i128) -> i128 {
        let total: i128 = self.classes.iter().map(|c| i128::from(c.3)).sum();
        grown.div_euclid(total.max(1) * STEP_MILLI)
    }

    /// The fragmentation of a host with `cpu` and `memory` free and its
    /// devices' free milli-GPU in `devices`.
    pub fn of(&self, cpu: u64, memory: u64, devices: &[u32]) -> u64 {
        let free: u64 = devices.iter().map(|&f| u64::from(f)).sum();
        if free == 0 {
            return 0;
        }
        let whole = devices.iter().filter(|&&f| f == DEVICE_MILLI).count() as u64;
        let most = devices.iter().copied().max().unwrap_or(0);
        let mut sum = 0u64;
        for &(c, m, milli, w) in &self.classes {
            let gpu_fits = match milli {
                0 => true,
                m if m < DEVICE_MILLI => most >= m,
                m => whole >= u64::from(m / DEVICE_MILLI),
            };
            let lost = if c > cpu || m > memory || !gpu_fits {
                free
            } else {
                let need = milli.min(DEVICE_MILLI);
                devices.iter().filter(|&&f| f < need).map(|&f| u64::from(f)).sum()
            };
            sum = sum.saturating_add(w.saturating_mul(lost));
        }
        sum
    }
}

/// (growth's step, GPU left on the host, left on the device, CPU left, host).
type Key = (i128, u64, u32, u64, u32);

/// The host and devices where task `t` grows fragmentation least.
pub(crate) fn choose<M: Measure>(
    round: &Round<'_>,
    frag: &M,
    t: u32,
) -> Result<(u32, Option<Vec<u32>>), UnplacedReason> {
    let task = &round.request.tasks[t as usize];
    let ask = round.gpu_task(t);
    let (count, each) = ask.shape();
    // (growth's step, GPU left on the host, left on the device, CPU left,
    // host) → the choice.
    let mut best: Option<(Key, (u32, Vec<u32>))> = None;
    for h in candidates(round, t)? {
        let free = &round.free[h as usize];
        let cpu_after = free.cpu_millis.saturating_sub(task.demand.cpu_millis);
        let mem_after = free.memory_mib.saturating_sub(task.demand.memory_mib);
        let devices: &[u32] = round.gpu_free.get(h as usize).map_or(&[], |d| &d[..d.len().min(MAX_DEVICES)]);
        let before = i128::from(frag.of(free.cpu_millis, free.memory_mib, devices));
        let mut after = [0u32; MAX_DEVICES];
        after[..devices.len()].copy_from_slice(devices);
        let options: Vec<Vec<u32>> = if count == 0 {
            vec![Vec::new()]
        } else if each == DEVICE_MILLI {
            round.default_devices(t, h).into_iter().collect()
        } else {
            // One option per distinct free amount (the lowest index of
            // each): devices alike score alike.
            let info = &round.request.gpu_hosts[h as usize].devices;
            let mut seen: Vec<u32> = Vec::new();
            let mut out = Vec::new();
            for (i, &f) in devices.iter().enumerate() {
                if ask.takes(&info[i], f) && !seen.contains(&f) {
                    seen.push(f);
                    out.push(vec![i as u32]);
                }
            }
            out
        };
        // The host's best devices: the least growth, exactly (the paper
        // picks the device that grows fragmentation least), then the
        // fullest device (best fit).
        let mut here: Option<((i128, u32), u64, Vec<u32>)> = None;
        for option in options {
            for &d in &option {
                after[d as usize] -= each;
            }
            let f_after = frag.of(cpu_after, mem_after, &after[..devices.len()]);
            let grown = i128::from(f_after) - before;
            let gpu_left: u64 = after[..devices.len()].iter().map(|&f| u64::from(f)).sum();
            for &d in &option {
                after[d as usize] += each;
            }
            let dev_left = option.first().map_or(0, |&d| after[d as usize] - each);
            if here.as_ref().is_none_or(|(k, _, _)| (grown, dev_left) < *k) {
                here = Some(((grown, dev_left), gpu_left, option));
            }
        }
        // Hosts: by the growth's step, then the tie-breakers.
        if let Some(((grown, dev_left), gpu_left, option)) = here {
            let key = (frag.step(grown), gpu_left, dev_left, cpu_after, h);
            if best.as_ref().is_none_or(|(b, _)| key < *b) {
                best = Some((key, (h, option)));
            }
        }
    }
    best.map(|(_, (h, devices))| (h, Some(devices))).ok_or(UnplacedReason::InsufficientResources)
}
