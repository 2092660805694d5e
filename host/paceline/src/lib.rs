//! Library half of the `paceline` binary: how the `host/` crates are wired
//! together. Kept apart from `main.rs` so that tests can use the same wiring.

pub mod cluster;
pub mod ha;
pub mod hostmgr_peer;
pub mod leader;
pub mod placement_peer;
pub mod server;
pub mod wiring;
