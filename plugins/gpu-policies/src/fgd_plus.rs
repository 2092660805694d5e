//! `gpu-fgd-plus`: fragmentation gradient descent whose measure also counts
//! the GPU a host's CPU and memory cannot feed.
//!
//! FGD asks, per class of the workload, whether *one* task of the class
//! still fits a host; a host with 4 free GPUs and 12 cores left fits one
//! more task of 11 cores and 1 GPU, so FGD sees no fragmentation there,
//! though three of those GPUs can never be used by that class. This
//! measure asks how many tasks of the class the host could still take
//! (its devices alone: `n_dev`; its CPU and memory alone: `n_res`) and,
//! when the CPU or memory runs out first, counts the free GPU the class
//! could have used in proportion: `usable × (1 − n_res / n_dev)` is lost
//! besides FGD's own loss. Everything else (steps, tie-breakers, devices,
//! the window of the workload) is `gpu-fgd`'s, so the two differ only
//! where CPU or memory would strand GPUs.
//!
//! What it knows that FGD does not: how many of each class's tasks a host
//! still holds, so a CPU-only task goes where cores are spare beyond what
//! the free GPUs need, and a GPU task with many cores goes where the cores
//! per free GPU are high.

use paceline_plugin_sdk::prelude::*;

use crate::fgd::{Measure, choose};
use crate::place_with_devices;

/// Fragmentation gradient descent with the CPU-stranding term.
#[derive(Debug)]
pub struct FgdPlus;

impl PlacementPolicy for FgdPlus {
    fn place(request: &PlacementRequest) -> PlacementResult {
        let frag = FragPlus::new(&request.gpu_workload);
        place_with_devices(request, |round, t| choose(round, &frag, t))
    }
}

/// The workload's classes, measured with the CPU-stranding term.
#[derive(Clone, Debug, Default)]
pub struct FragPlus {
    /// (cpu millis, memory MiB, milli-GPU, weight).
    classes: Vec<(u64, u64, u32, u64)>,
}

impl FragPlus {
    /// The measure for a workload.
    pub fn new(workload: &[TaskClass]) -> FragPlus {
        let classes = workload
            .iter()
            .filter(|c| c.weight > 0)
            .map(|c| (c.cpu_millis, c.memory_mib, c.milli, u64::from(c.weight)))
            .collect();
        FragPlus { classes }
    }

    /// The fragmentation of a host with `cpu` and `memory` free and its
    /// devices' free milli-GPU in `devices`: per class, weight × the free
    /// GPU the class cannot use (FGD's), plus the part of what it could
    /// use that the host's CPU or memory cannot feed.
    pub fn of(&self, cpu: u64, memory: u64, devices: &[u32]) -> u64 {
        let free: u64 = devices.iter().map(|&f| u64::from(f)).sum();
        if free == 0 {
            return 0;
        }
        let whole = devices.iter().filter(|&&f| f == DEVICE_MILLI).count() as u64;
        let mut sum = 0u64;
        for &(c, m, milli, w) in &self.classes {
            let lost = if c > cpu || m > memory {
                free
            } else if milli == 0 {
                0
            } else {
                // What the devices could give the class: the free GPU it
                // could use and how many of its tasks that is.
                let (usable, n_dev) = if milli < DEVICE_MILLI {
                    devices
                        .iter()
                        .filter(|&&f| f >= milli)
                        .fold((0u64, 0u64), |(u, n), &f| (u + u64::from(f), n + u64::from(f / milli)))
                } else {
                    let k = u64::from(milli / DEVICE_MILLI);
                    if whole >= k { (whole * u64::from(DEVICE_MILLI), whole / k) } else { (0, 0) }
                };
                // How many its CPU and memory could feed.
                let n_res =
                    [(cpu, c), (memory, m)].iter().filter(|(_, need)| *need > 0).map(|(have, need)| have / need).min();
                let fed = match n_res {
                    Some(n) if n < n_dev => usable * n / n_dev,
                    _ => usable,
                };
                free - fed
            };
            sum = sum.saturating_add(w.saturating_mul(lost));
        }
        sum
    }

    /// The step a growth falls on: [`crate::Frag::step`]'s rule.
    pub fn step(&self, grown: i128) -> i128 {
        let total: i128 = self.classes.iter().map(|c| i128::from(c.3)).sum();
        grown.div_euclid(total.max(1) * crate::STEP_MILLI)
    }
}

impl Measure for FragPlus {
    fn of(&self, cpu: u64, memory: u64, devices: &[u32]) -> u64 {
        FragPlus::of(self, cpu, memory, devices)
    }
    fn step(&self, grown: i128) -> i128 {
        FragPlus::step(self, grown)
    }
}
