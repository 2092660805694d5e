//! `spread`: place a job's instances across hosts and across a host
//! attribute (such as `zone`), the default for stateless services.
//!
//! For each task, among eligible hosts that fit (and are below the job's
//! per-host maximum), it picks the host whose attribute value (zone) holds the
//! fewest of the job's tasks, then the host holding the fewest, then the
//! emptiest host (worst fit), then the lowest index. Soft preferences come
//! first of all. Gangs are placed whole or not at all.

use paceline_plugin_sdk::prelude::*;

/// The spreading policy.
#[derive(Debug)]
pub struct Spread;

impl PlacementPolicy for Spread {
    fn place(request: &PlacementRequest) -> PlacementResult {
        let mut picker = RunPicker::new();
        place_gangs(Round::tracking_every_job(request), |round, t| choose(round, &mut picker, t))
    }
}

export_placement!(Spread);

/// A host's rank for a task: preference weight matched (negated), the
/// job's tasks on the host's attribute value, on the host, then how full
/// the host would be; least first.
type Rank = (i64, u32, u32, u64);

fn choose(round: &Round<'_>, picker: &mut RunPicker<Rank>, t: u32) -> Result<u32, UnplacedReason> {
    let task = &round.request.tasks[t as usize];
    let job = round.request.jobs.get(task.job as usize);
    let column = job.and_then(|j| j.spread_over);
    // Tasks of the job per attribute value, from the hosts that hold any.
    let mut per_value: Vec<(u32, u32)> = Vec::new();
    if let Some(col) = column {
        for (h, c) in round.job_hosts(task.job) {
            if let Some(v) = round.attribute(col, h) {
                match per_value.iter_mut().find(|(value, _)| *value == v) {
                    Some((_, n)) => *n += c,
                    None => per_value.push((v, c)),
                }
            }
        }
    }
    let value_count = |h: u32| -> u32 {
        column
            .and_then(|col| round.attribute(col, h))
            .and_then(|v| per_value.iter().find(|(value, _)| *value == v).map(|(_, n)| *n))
            .unwrap_or(0)
    };
    let rank = |h: u32| {
        let free = &round.free[h as usize];
        let total = round.request.hosts[h as usize].total;
        let used_after = total.saturating_sub(&free.saturating_sub(&task.demand));
        (
            -round.preference_score(task, h),
            value_count(h),
            round.job_count(task.job, h),
            round.scales[h as usize].score(&used_after),
        )
    };
    match column {
        // A placement changes the rank of the host it went to and no other:
        // a run of the job's tasks is served from the picker's heap.
        None => picker.pick(round, t, rank),
        // It changes the count of every host of its attribute value.
        Some(_) => round.pick_min_by_key(t, rank),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_plugin_sdk::harness::{load_dir, run_placement};

    #[test]
    fn scenarios() {
        for s in load_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios")).expect("scenario table") {
            run_placement::<Spread>(&s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
    }
}
