//! Library half of the `paceline` binary: how the `host/` crates are wired
//! together. Kept apart from `main.rs` so that tests can use the same wiring.

pub mod cluster;
pub mod ha;
pub mod leader;
pub mod metrics;
pub mod metrics_usage;
pub mod retention;
pub mod server;
pub mod sim;
pub mod store_metrics;
pub mod wiring;
