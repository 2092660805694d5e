//! One module per top-level command.
pub mod bench;
pub mod demo;
pub mod plugin;
