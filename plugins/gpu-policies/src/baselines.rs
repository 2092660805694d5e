//! The baselines of the fragmentation paper, as Paceline defines them. Each
//! scores the hosts a task fits (devices included); the device is the
//! runtime's default (the fullest device a share fits on, the lowest wholly
//! free devices for whole GPUs) unless said otherwise.
//!
//! - `gpu-random` (random fit): a host drawn uniformly among those that fit,
//!   from a generator seeded by the round and the task (deterministic).
//! - `gpu-bestfit` (best fit): the host with the least left after the task,
//!   as the sum of the CPU, memory and GPU left, each a fraction of the
//!   host's total.
//! - `gpu-dotprod` (dot product, Tetris-style alignment): the host whose
//!   free vector has the largest dot product with the task's demand, both
//!   as fractions of the host's total (CPU, memory, GPU).
//! - `gpu-packing` (GPU packing): a share goes to a device already in use if
//!   one takes it (the fullest), else to a host already in use, else to an
//!   idle host; whole GPUs to a host already in use before an idle one; then
//!   the least GPU left, then the lowest index.

use paceline_plugin_sdk::prelude::*;

use crate::{candidates, gpu_free, gpu_total, place_with_devices};

/// Fractions in parts per million: integer scores.
const PPM: u64 = 1_000_000;

fn frac(part: u64, total: u64) -> u64 {
    if total == 0 { 0 } else { (u128::from(part) * u128::from(PPM) / u128::from(total)) as u64 }
}

/// Random fit.
#[derive(Debug)]
pub struct RandomFit;

impl PlacementPolicy for RandomFit {
    fn place(request: &PlacementRequest) -> PlacementResult {
        place_with_devices(request, |round, t| {
            let hosts = candidates(round, t)?;
            // splitmix64 of (round, task): the same request, the same answer.
            let mut x = round.request.round.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(t);
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^= x >> 31;
            Ok((hosts[(x % hosts.len() as u64) as usize], None))
        })
    }
}

/// Best fit.
#[derive(Debug)]
pub struct BestFit;

impl PlacementPolicy for BestFit {
    fn place(request: &PlacementRequest) -> PlacementResult {
        place_with_devices(request, |round, t| {
            let demand = round.request.tasks[t as usize].demand;
            let milli = u64::from(round.gpu_task(t).milli);
            candidates(round, t)?
                .into_iter()
                .min_by_key(|&h| {
                    let (free, total) = (&round.free[h as usize], &round.request.hosts[h as usize].total);
                    let left = frac(free.cpu_millis - demand.cpu_millis, total.cpu_millis)
                        + frac(free.memory_mib - demand.memory_mib, total.memory_mib)
                        + frac(gpu_free(round, h).saturating_sub(milli), gpu_total(round, h));
                    (left, h)
                })
                .map(|h| (h, None))
                .ok_or(UnplacedReason::InsufficientResources)
        })
    }
}

/// Dot product.
#[derive(Debug)]
pub struct DotProduct;

impl PlacementPolicy for DotProduct {
    fn place(request: &PlacementRequest) -> PlacementResult {
        place_with_devices(request, |round, t| {
            let demand = round.request.tasks[t as usize].demand;
            let milli = u64::from(round.gpu_task(t).milli);
            candidates(round, t)?
                .into_iter()
                .max_by_key(|&h| {
                    let (free, total) = (&round.free[h as usize], &round.request.hosts[h as usize].total);
                    let gpu_total = gpu_total(round, h);
                    let dot = u128::from(frac(demand.cpu_millis, total.cpu_millis))
                        * u128::from(frac(free.cpu_millis, total.cpu_millis))
                        + u128::from(frac(demand.memory_mib, total.memory_mib))
                            * u128::from(frac(free.memory_mib, total.memory_mib))
                        + u128::from(frac(milli, gpu_total)) * u128::from(frac(gpu_free(round, h), gpu_total));
                    // Ties to the lowest index: max_by_key keeps the last.
                    (dot, std::cmp::Reverse(h))
                })
                .map(|h| (h, None))
                .ok_or(UnplacedReason::InsufficientResources)
        })
    }
}

/// GPU packing.
#[derive(Debug)]
pub struct GpuPacking;

impl PlacementPolicy for GpuPacking {
    fn place(request: &PlacementRequest) -> PlacementResult {
        place_with_devices(request, |round, t| {
            let ask = round.gpu_task(t);
            let milli = u64::from(ask.milli);
            let share = ask.milli > 0 && ask.milli < DEVICE_MILLI;
            candidates(round, t)?
                .into_iter()
                .map(|h| {
                    let in_use = gpu_free(round, h) < gpu_total(round, h)
                        || round.free[h as usize].cpu_millis < round.request.hosts[h as usize].total.cpu_millis;
                    let on_used_device = share
                        && round
                            .default_devices(t, h)
                            .and_then(|d| d.first().copied())
                            .is_some_and(|d| round.gpu_free[h as usize][d as usize] < DEVICE_MILLI);
                    let tier = if on_used_device {
                        0
                    } else if in_use {
                        1
                    } else {
                        2
                    };
                    ((tier, gpu_free(round, h).saturating_sub(milli), h), h)
                })
                .min()
                .map(|(_, h)| (h, None))
                .ok_or(UnplacedReason::InsufficientResources)
        })
    }
}
