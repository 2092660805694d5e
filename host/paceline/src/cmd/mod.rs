//! One module per top-level command.
pub mod agent;
pub mod bench;
pub mod demo;
pub mod plugin;
