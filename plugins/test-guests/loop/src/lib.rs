//! A placement policy that never returns: the runtime's deadline must stop it.
use paceline_plugin_sdk::prelude::*;

/// Spins forever.
#[derive(Debug)]
pub struct Spin;

impl PlacementPolicy for Spin {
    fn place(request: &PlacementRequest) -> PlacementResult {
        let mut x = request.round;
        loop {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            if x == 0 && request.tasks.len() == usize::MAX {
                return PlacementResult::default();
            }
        }
    }
}

export_placement!(Spin);
