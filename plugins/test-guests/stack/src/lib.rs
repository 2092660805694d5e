//! A placement policy that recurses without bound: the stack limit must trap.
use paceline_plugin_sdk::prelude::*;

/// Recurses until the stack runs out.
#[derive(Debug)]
pub struct Deep;

#[allow(unconditional_recursion)] // the point of this guest
fn depth(n: u64) -> u64 {
    std::hint::black_box(depth(std::hint::black_box(n + 1)) + 1)
}

impl PlacementPolicy for Deep {
    fn place(request: &PlacementRequest) -> PlacementResult {
        let _ = depth(request.round);
        PlacementResult::default()
    }
}

export_placement!(Deep);
