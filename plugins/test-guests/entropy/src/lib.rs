//! A placement policy that reads everything a sandbox could leak: the wall
//! clock, the monotonic clock, random bytes (through std's `HashMap`
//! seeding) and the environment, and reports them in its answer. Under the
//! Paceline sandbox every instance must report the same values.
use std::collections::HashMap;

use paceline_plugin_sdk::prelude::*;

/// Leaves every task unplaced with what it observed as the detail.
#[derive(Debug)]
pub struct Entropy;

impl PlacementPolicy for Entropy {
    fn place(request: &PlacementRequest) -> PlacementResult {
        let wall =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let mono = std::time::Instant::now();
        let map: HashMap<u32, u32> = (0..32).map(|i| (i, i)).collect();
        let order: Vec<u32> = map.keys().copied().take(8).collect();
        let env = std::env::vars().count();
        let cwd = std::env::current_dir().is_ok();
        let file = std::fs::read_dir("/").is_ok();
        let detail = format!("wall={wall} mono={mono:?} order={order:?} env={env} cwd={cwd} fs={file}");
        PlacementResult {
            assignments: Vec::new(),
            unplaced: (0..request.tasks.len() as u32)
                .map(|task| Unplaced { task, reason: UnplacedReason::Deferred, detail: detail.clone() })
                .collect(),
            grants: Vec::new(),
        }
    }
}

export_placement!(Entropy);
