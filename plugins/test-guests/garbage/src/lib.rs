//! A placement policy whose answers break the contract in a different way
//! each round: unknown hosts, a task assigned twice, over capacity, and
//! missing tasks. Validation must reject every one.
use paceline_plugin_sdk::prelude::*;

/// Answers wrongly on purpose.
#[derive(Debug)]
pub struct Garbage;

impl PlacementPolicy for Garbage {
    fn place(request: &PlacementRequest) -> PlacementResult {
        let n = request.tasks.len() as u32;
        let assignments = match request.round % 4 {
            0 => (0..n).map(|task| Assignment { task, host: u32::MAX - 1 }).collect(),
            1 => (0..n).chain(0..1).map(|task| Assignment { task, host: 0 }).collect(),
            // Everything on host 0, whatever it has free.
            2 => (0..n).map(|task| Assignment { task, host: 0 }).collect(),
            _ => Vec::new(),
        };
        PlacementResult { assignments, unplaced: Vec::new() }
    }
}

export_placement!(Garbage);
