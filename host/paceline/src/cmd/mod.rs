//! One module per top-level command.
pub mod agent;
pub mod agent_token;
pub mod auth;
pub mod bench;
pub mod client;
pub mod demo;
pub mod example;
pub mod help;
pub mod operator;
pub mod placement;
pub mod plugin;
pub mod plugin_new;
pub mod process;
pub mod record;
pub mod server;
pub mod sim;
pub mod storage;
