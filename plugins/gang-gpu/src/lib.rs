//! `gang-gpu`: whole gangs, with GPU tasks packed onto the fewest hosts.
//!
//! A gang is placed entirely or not at all. A task that needs GPUs goes to a
//! host that already holds tasks of its job when one fits (keeping a
//! distributed training job on few machines), else to the host with the most
//! free GPUs, then best fit. A task asking for a share of one GPU goes,
//! after its job's hosts, to the host whose best device for it has the
//! least left (shares pack onto devices already shared, whole devices stay
//! whole). A task without GPUs avoids GPU hosts when any other host fits,
//! so GPUs stay free for work that needs them.

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
    let ask = round.gpu_task(t);
    let share = ask.milli > 0 && ask.milli < DEVICE_MILLI;
    let wants_gpu = task.demand.gpus > 0 || ask.milli > 0;
    round.pick_min_by_key(t, |h| {
        let free = &round.free[h as usize];
        let leftover = round.scales[h as usize].score(&free.saturating_sub(&task.demand));
        if share {
            // The device it would land on: the least left after it.
            let best = round
                .default_devices(t, h)
                .and_then(|d| d.first().copied())
                .map_or(u64::MAX, |d| u64::from(round.gpu_free[h as usize][d as usize].saturating_sub(ask.milli)));
            let without_job = u8::from(round.job_count(task.job, h) == 0);
            (-round.preference_score(task, h), without_job, best, leftover)
        } else if wants_gpu {
            // Hosts already holding the job first, then the most free GPUs.
            let without_job = u8::from(round.job_count(task.job, h) == 0);
            (-round.preference_score(task, h), without_job, u64::MAX - free.gpus, leftover)
        } else {
            let has_gpus = round.request.hosts[h as usize].total.gpus > 0;
            (-round.preference_score(task, h), u8::from(has_gpus), 0, leftover)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_plugin_sdk::harness::{load_dir, run_placement};

    #[test]
    fn scenarios() {
        for s in load_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios")).expect("scenario table") {
            run_placement::<GangGpu>(&s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
    }
}
