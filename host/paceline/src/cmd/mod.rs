//! One module per top-level command.
pub mod agent;
pub mod auth;
pub mod bench;
pub mod bench_hosts;
pub mod bench_languages;
pub mod bench_metrics;
pub mod bench_pending;
pub mod client;
pub mod demo;
pub mod help;
pub mod placement;
pub mod plugin;
pub mod plugin_new;
pub mod process;
pub mod record;
pub mod server;
pub mod sim;
