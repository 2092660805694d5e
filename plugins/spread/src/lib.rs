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
        place_gangs(Round::tracking_every_job(request), choose)
    }
}

export_placement!(Spread);

fn choose(round: &Round<'_>, t: u32) -> Result<u32, UnplacedReason> {
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
    let hosts: Box<dyn Iterator<Item = u32> + '_> = match round.eligible(task) {
        HostFilter::All => Box::new(0..round.free.len() as u32),
        HostFilter::Only(h) if h.is_empty() => return Err(UnplacedReason::ConstraintsUnsatisfiable),
        HostFilter::Only(h) => Box::new(h.iter().copied()),
    };
    let mut best: Option<(i64, u32, u32, u64, u32)> = None;
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
        let total = round.request.hosts[h as usize].total;
        let used_after = total.saturating_sub(&free.saturating_sub(&task.demand));
        let key = (
            -round.preference_score(task, h),
            value_count(h),
            round.job_count(task.job, h),
            round.scales[h as usize].score(&used_after),
            h,
        );
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
            run_placement::<Spread>(&scenario).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            ran += 1;
        }
        assert!(ran >= 3, "expected the scenario table, found {ran} files");
    }
}
