//! A placement policy whose answers break the contract in a different way
//! each round: unknown hosts, a task assigned twice, over capacity, missing
//! tasks, a gang placed in part, and a job over its per-host maximum.
//! Validation must reject every one.
use paceline_plugin_sdk::prelude::*;

/// Answers wrongly on purpose.
#[derive(Debug)]
pub struct Garbage;

impl PlacementPolicy for Garbage {
    fn place(request: &PlacementRequest) -> PlacementResult {
        let n = request.tasks.len() as u32;
        let rest = |from: u32| -> Vec<Unplaced> {
            (from..n).map(|task| Unplaced { task, reason: UnplacedReason::Deferred, detail: String::new() }).collect()
        };
        let (assignments, unplaced) = match request.round % 6 {
            0 => ((0..n).map(|task| Assignment { task, host: u32::MAX - 1 }).collect(), Vec::new()),
            1 => ((0..n).chain(0..1).map(|task| Assignment { task, host: 0 }).collect(), Vec::new()),
            // Everything on host 0, whatever it has free.
            2 => ((0..n).map(|task| Assignment { task, host: 0 }).collect(), Vec::new()),
            // The first task alone: its gang, when it has one, only in part.
            4 => (vec![Assignment { task: 0, host: 0 }], rest(1)),
            // The first two tasks on host 0, whatever the job's per-host maximum.
            5 => ((0..n.min(2)).map(|task| Assignment { task, host: 0 }).collect(), rest(2)),
            _ => (Vec::new(), Vec::new()),
        };
        PlacementResult { assignments, unplaced, grants: Vec::new() }
    }
}

export_placement!(Garbage);
