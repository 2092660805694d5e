//! A placement policy that panics: the runtime must turn it into a typed error.
use paceline_plugin_sdk::prelude::*;

/// Panics with a recognisable message.
#[derive(Debug)]
pub struct Panics;

impl PlacementPolicy for Panics {
    fn place(request: &PlacementRequest) -> PlacementResult {
        panic!("policy gave up on round {}", request.round)
    }
}

export_placement!(Panics);
