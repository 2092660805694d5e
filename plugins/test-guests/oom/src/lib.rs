//! A placement policy that allocates without bound: the memory cap must contain it.
use paceline_plugin_sdk::prelude::*;

/// Allocates 1 MiB blocks forever.
#[derive(Debug)]
pub struct Hog;

impl PlacementPolicy for Hog {
    fn place(request: &PlacementRequest) -> PlacementResult {
        let mut blocks: Vec<Vec<u8>> = Vec::new();
        loop {
            blocks.push(std::hint::black_box(vec![request.round as u8; 1 << 20]));
        }
    }
}

export_placement!(Hog);
