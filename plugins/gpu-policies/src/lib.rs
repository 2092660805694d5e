//! GPU-sharing placement policies (decision 0035): `gpu-fgd`, the
//! fragmentation gradient descent of Weng et al., "Beware of Fragmentation"
//! (USENIX ATC 2023), written from the paper's description, its variant
//! `gpu-fgd-plus` (decision 0057), and the four
//! baselines that paper compares it with, as Paceline defines them:
//! `gpu-random` (random fit), `gpu-bestfit` (best fit), `gpu-dotprod`
//! (dot product) and `gpu-packing` (GPU packing).
//!
//! This crate owns the policies' code only. Each is exported as a component
//! by a crate of its own under `plugins/` (an `export_placement!` line), so
//! that linking the code does not link an export; the host links them
//! natively for tests and the simulator's fallbacks.
//!
//! Every policy places gangs whole ([`place_gangs_on_devices`]), honours eligibility,
//! per-host maxima and GPU models, and names the devices it chose.
//!
//! Choices the paper leaves open, stated once here for `gpu-fgd` (figures:
//! GPU capacity allocated on the openb trace, trace order / mean of the
//! paper's shuffled arrivals, docs/benchmarks.md; "tuned" marks a choice
//! made on those figures rather than on the paper's text):
//! - the fragmentation measure is the paper's: for a class that cannot run
//!   on the host (CPU, memory, no device that takes it) all free GPU, else
//!   the free GPU of the devices with less free than min(ask, 1 GPU);
//!   memory counts for "cannot run" (the paper names non-GPU resources;
//!   ignoring memory: 94.80% / 94.95%, against 95.10% / 95.01% with it,
//!   both compared exactly);
//! - fragmentation is summed in integers (weight × milli-GPU), exactly;
//!   *hosts* are compared on the growth of the expected fragmentation
//!   (divided by the classes' total weight) floored to steps of 40
//!   milli-GPU ([`STEP_MILLI`], tuned). The paper ran FGD as a
//!   Kubernetes score plugin, whose scores are whole points of 0–100, so
//!   its gradients were compared in steps too, but it does not say how it
//!   mapped them. Kept: 95.11% / 95.34% (the paper's ten seeds). Measured
//!   on seeds 42–44: exact 95.10% / 95.01%; steps of 20: 94.97 / 94.96;
//!   40: 95.09 / 95.41; 80: 94.88 / 95.50; a logistic map to 0–100: 95.10 / 95.33; a
//!   Kubernetes-style min-max normalisation over the hosts: no change
//!   (truncated) or 95.01 / 95.18 (rounded from the best); whole percent of
//!   the host's GPU capacity: 94.68 / 95.23;
//! - a host's *device* is the one its growth is least on, exactly (the
//!   paper's choice of device), then the fullest one;
//! - ties (the same step) go to the host with the least GPU left after the
//!   task, then the fullest device, then the least CPU left, then the
//!   lowest index: packing among equally good hosts. Kubernetes draws among
//!   equal top scores at random; here that placed far less (exact
//!   gradients, random ties: 90.99% / 92.60%; logistic map with random
//!   ties: 90.19% / 92.01%), because whole-GPU and CPU-only tasks grow
//!   fragmentation by zero on most hosts and a draw scatters them. Tuned
//!   in the sense that the paper is silent; packing is the baseline it
//!   compares with;
//! - a task class that asks for no GPU loses nothing on a host it fits and
//!   all the host's free GPU on one it does not (CPU exhausted). The paper,
//!   as we read it, counts all free GPU as such a class's fragment everywhere, which adds
//!   the same to every candidate of a task and only keeps CPU beside free
//!   GPUs through the GPU classes. Ours keeps CPU beside free GPUs; measured
//!   (tuned): 95.10% / 95.01% against the paper's 94.63% / 95.24%
//!   compared exactly, and 95.09% / 95.41% against 94.27% / 95.35% in steps
//!   of 40;
//! - a class's weight is its count of tasks (the paper's popularity);
//!   weighting shares by their GPU ask: 94.37% / 95.11%, compared exactly;
//! - the workload is the runtime's window of the last 256 tasks
//!   (`gpu-request.workload`), not the trace's whole distribution: the
//!   whole distribution seen so far (`--workload-window 100000`) placed
//!   less, 94.69% shuffled compared exactly and 94.62% in steps of 40
//!   (seeds 42–44). The paper, as we read it, uses the trace's
//!   distribution; why it does worse here is not understood;
//! - devices with equal free capacity score alike and the lowest index
//!   stands for them.
//!
//! `gpu-fgd-plus` ([`FgdPlus`], decision 0057) is `gpu-fgd` with one change
//! to the measure: a class that fits a host loses, besides FGD's loss, the
//! part of the GPU it could use that the host's CPU and memory cannot feed,
//! `usable × (1 − n_res / n_dev)` (`n_dev`: its tasks the devices could
//! take; `n_res`: those the CPU and memory could). Its open choices (tuned
//! on openb, seeds 42–44, against 95.56% for the kept form): the term in
//! proportion, not whole tasks per device (95.51%); weight 1 (counted half:
//! 95.48%; twice: 94.84%); FGD's steps of 40 (20: 95.55%; 80: 95.36%) and
//! window of 256 (1,024: 95.52%); no protection of idle 8-GPU hosts (2 steps
//! for breaking one: 95.07%) and multi-GPU classes weighted by their count
//! only (by their GPUs: 95.18%). Ten seeds: 95.56%, trace order 95.34%
//! (`gpu-fgd`: 95.34%, 95.11%).
//!
//! `gpu-fgd-reserve` ([`FgdReserve`], decision 0057) is `gpu-fgd-plus` that
//! defers a share which would take a wholly free device and leave a
//! remainder fewer than [`RARE_PER_MILLE`] of the workload's GPU tasks fit
//! (on openb, the 810 milli-GPU share), once fewer than [`RESERVE_DEVICES`]
//! wholly free devices are offered: admission, it leaves out pods that
//! fit. Its open choices: the reserve, an absolute count tuned on openb
//! (750: 95.91%, 1,000: 96.02%, 1,500: 95.40%, seeds 42–44); "rare" as 5%
//! of the GPU tasks (not tuned). Ten seeds: 96.00%; trace order: 94.54%.

use paceline_plugin_sdk::prelude::*;

mod baselines;
mod fgd;
mod fgd_plus;
mod reserve;

pub use baselines::{BestFit, DotProduct, GpuPacking, RandomFit};
pub use fgd::{Fgd, Frag, STEP_MILLI};
pub use fgd_plus::{FgdPlus, FragPlus};
pub use reserve::{FgdReserve, RARE_PER_MILLE, RESERVE_DEVICES, rarely_fillable};

/// The hosts task `t` may go to now: eligible, fitting (devices included)
/// and below its job's per-host maximum; with the reason when none.
pub(crate) fn candidates(round: &Round<'_>, t: u32) -> Result<Vec<u32>, UnplacedReason> {
    let task = &round.request.tasks[t as usize];
    let hosts: Vec<u32> = match round.eligible(task) {
        HostFilter::All => (0..round.free.len() as u32).collect(),
        HostFilter::Only(h) if h.is_empty() => return Err(UnplacedReason::ConstraintsUnsatisfiable),
        HostFilter::Only(h) => h.clone(),
    };
    let mut blocked_by_max = false;
    let out: Vec<u32> = hosts
        .into_iter()
        .filter(|&h| round.fits(t, h))
        .filter(|&h| {
            let at_max = round.at_max_per_host(task.job, h);
            blocked_by_max |= at_max;
            !at_max
        })
        .collect();
    match out.is_empty() {
        false => Ok(out),
        true if blocked_by_max => Err(UnplacedReason::MaxPerHost),
        true => Err(UnplacedReason::InsufficientResources),
    }
}

/// Milli-GPUs free on host `h` now.
pub(crate) fn gpu_free(round: &Round<'_>, h: u32) -> u64 {
    round.gpu_free.get(h as usize).map_or(0, |d| d.iter().map(|&f| u64::from(f)).sum())
}

/// Milli-GPUs of host `h` in all.
pub(crate) fn gpu_total(round: &Round<'_>, h: u32) -> u64 {
    round.request.gpu_hosts.get(h as usize).map_or(0, |g| g.devices.len() as u64 * u64::from(DEVICE_MILLI))
}

/// Places every gang with `choose`, which returns a host and the devices
/// (`None`: the runtime's default for a GPU ask).
pub(crate) fn place_with_devices<F>(request: &PlacementRequest, choose: F) -> PlacementResult
where
    F: FnMut(&Round<'_>, u32) -> Result<(u32, Option<Vec<u32>>), UnplacedReason>,
{
    place_gangs_on_devices(Round::new(request), choose)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_plus;
