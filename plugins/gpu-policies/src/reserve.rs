//! `gpu-fgd-reserve`: `gpu-fgd-plus` that keeps a reserve of wholly free
//! devices from the shares that would waste most of one.
//!
//! A share placed on a wholly free device leaves `1000 − milli` on it that
//! only a smaller share can use. When the workload's tasks that could use
//! that remainder are rare (under [`RARE_PER_MILLE`] of its GPU tasks: on
//! openb, the 810 milli-GPU share, whose remainder of 190 fits about 1.5%
//! of the GPU tasks) and fewer than [`RESERVE_DEVICES`] wholly free devices
//! are left among the hosts offered, the share is deferred rather than
//! placed there: the device is kept whole for a task that fills it. Shares
//! that fit a device already in use, and every other task, are placed as
//! `gpu-fgd-plus` places them.
//!
//! This is admission, not placement: the policy leaves out a pod that fits.
//! In the fill experiment (`paceline sim run --arrive-until-full`) a
//! deferred pod is withdrawn; in a cluster it stays pending until devices
//! free up. The reserve is an absolute count tuned on openb (6,212
//! devices; decision 0057): it is not a default for other clusters.

use paceline_plugin_sdk::prelude::*;

use crate::fgd::choose;
use crate::{FragPlus, place_with_devices};

/// Wholly free devices (among the hosts offered) under which a rarely
/// fillable share no longer takes one. Tuned on openb, GPU allocated, mean
/// of seeds 42–44: 750 → 95.91%, 900 → 95.99%, 1,000 → 96.02%, 1,250 →
/// 95.82%, 1,500 → 95.40%.
pub const RESERVE_DEVICES: u64 = 1000;

/// A share's remainder on a fresh device counts as rarely fillable when the
/// workload's GPU tasks that fit in it are fewer than this, per mille.
pub const RARE_PER_MILLE: u64 = 50;

/// `gpu-fgd-plus` with a reserve of wholly free devices.
#[derive(Debug)]
pub struct FgdReserve;

impl PlacementPolicy for FgdReserve {
    fn place(request: &PlacementRequest) -> PlacementResult {
        let frag = FragPlus::new(&request.gpu_workload);
        place_with_devices(request, |round, t| {
            let (h, devices) = choose(round, &frag, t)?;
            let ask = round.gpu_task(t);
            let fresh = devices
                .as_ref()
                .and_then(|d| d.first())
                .and_then(|&d| round.gpu_free.get(h as usize)?.get(d as usize))
                .is_some_and(|&f| f == DEVICE_MILLI);
            let share = ask.milli > 0 && ask.milli < DEVICE_MILLI;
            if share && fresh && rarely_fillable(&request.gpu_workload, DEVICE_MILLI - ask.milli) {
                let whole: u64 =
                    round.gpu_free.iter().map(|d| d.iter().filter(|&&f| f == DEVICE_MILLI).count() as u64).sum();
                if whole < RESERVE_DEVICES {
                    return Err(UnplacedReason::Deferred);
                }
            }
            Ok((h, devices))
        })
    }
}

/// Whether the workload's GPU tasks that fit in `left` milli-GPU are fewer
/// than [`RARE_PER_MILLE`] of them (a workload without GPU tasks: no).
pub fn rarely_fillable(workload: &[TaskClass], left: u32) -> bool {
    let (mut fit, mut all) = (0u64, 0u64);
    for c in workload.iter().filter(|c| c.milli > 0) {
        all += u64::from(c.weight);
        if c.milli <= left {
            fit += u64::from(c.weight);
        }
    }
    all > 0 && fit * 1000 < all * RARE_PER_MILLE
}
