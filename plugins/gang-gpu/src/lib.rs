//! `gang-gpu`: whole gangs, with GPU tasks packed onto the fewest hosts.
//!
//! A gang is placed entirely or not at all. A task that needs GPUs goes to a
//! host that already holds tasks of its job when one fits (keeping a
//! distributed training job on few machines), else to the host with the most
//! free GPUs, then best fit. A task without GPUs avoids GPU hosts when any
//! other host fits, so GPUs stay free for work that needs them.

use paceline_plugin_sdk::prelude::*;

/// The gang and GPU policy.
#[derive(Debug)]
pub struct GangGpu;

impl PlacementPolicy for GangGpu {
    fn place(request: &PlacementRequest) -> PlacementResult {
        place_gangs(Round::tracking_every_job(request), choose)
    }
}

export_placement!(GangGpu);

fn choose(round: &Round<'_>, t: u32) -> Result<u32, UnplacedReason> {
    let task = &round.request.tasks[t as usize];
    let wants_gpu = task.demand.gpus > 0;
    let hosts: Box<dyn Iterator<Item = u32> + '_> = match round.eligible(task) {
        HostFilter::All => Box::new(0..round.free.len() as u32),
        HostFilter::Only(h) if h.is_empty() => return Err(UnplacedReason::ConstraintsUnsatisfiable),
        HostFilter::Only(h) => Box::new(h.iter().copied()),
    };
    // Smaller keys win.
    let mut best: Option<(i64, u8, u64, u64, u32)> = None;
    let mut blocked_by_max = false;
    for h in hosts {
        let Some(free) = round.free.get(h as usize) else { continue };
        if !task.demand.fits_in(free) {
            continue;
        }
        if round.at_max_per_host(task.job, h) {
            blocked_by_max = true;
            continue;
        }
        let leftover = round.scales[h as usize].score(&free.saturating_sub(&task.demand));
        let has_gpus = round.request.hosts[h as usize].total.gpus > 0;
        let key = if wants_gpu {
            let with_job = u8::from(round.job_count(task.job, h) == 0);
            (-round.preference_score(task, h), with_job, u64::MAX - free.gpus, leftover, h)
        } else {
            (-round.preference_score(task, h), u8::from(has_gpus), 0, leftover, h)
        };
        if best.is_none_or(|b| key < b) {
            best = Some(key);
        }
    }
    match best {
        Some(k) => Ok(k.4),
        None if blocked_by_max => Err(UnplacedReason::MaxPerHost),
        None => Err(UnplacedReason::InsufficientResources),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_plugin_sdk::harness::{Scenario, run_placement};

    #[test]
    fn scenarios() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios");
        let mut ran = 0;
        for entry in std::fs::read_dir(dir).expect("scenarios directory") {
            let path = entry.expect("entry").path();
            let scenario = Scenario::load(&path).expect("scenario loads");
            run_placement::<GangGpu>(&scenario).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            ran += 1;
        }
        assert!(ran >= 3, "expected the scenario table, found {ran} files");
    }
}
