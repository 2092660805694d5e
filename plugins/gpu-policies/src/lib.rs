//! GPU-sharing placement policies (decision 0035): `gpu-fgd`, the
//! fragmentation gradient descent of Weng et al., "Beware of Fragmentation"
//! (USENIX ATC 2023), written from the paper's description, and the four
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
//! Choices the paper leaves open, stated once here:
//! - fragmentation is summed in integers (weight × milli-GPU), so scores are
//!   exact and never rounded;
//! - a task class that asks for no GPU loses nothing on a host it fits and
//!   all the host's free GPU on one it does not (CPU exhausted). Counting
//!   every free GPU as its fragment everywhere (it can use none) would add
//!   the same to every candidate and change nothing; this reading makes
//!   FGD keep CPU beside free GPUs, and placed 94.7% of the GPU capacity on
//!   the openb trace against 93.7% for the other (docs/benchmarks.md);
//! - the workload is the runtime's window of the last 256 tasks
//!   (`gpu-request.workload`), not the trace's whole distribution (the
//!   whole distribution, known in advance, placed less: 93.5% against
//!   95.1%, the trace's arrivals being bursty);
//! - ties (equal fragmentation growth) go to the host with the least GPU
//!   left after the task, then the fullest device, then the least CPU left,
//!   then the lowest index; devices with equal free capacity score alike and
//!   the lowest index stands for them.

use paceline_plugin_sdk::prelude::*;

mod baselines;
mod fgd;

pub use baselines::{BestFit, DotProduct, GpuPacking, RandomFit};
pub use fgd::{Fgd, Frag};

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
