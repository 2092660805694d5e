//! Integration tests of the plugin runtime against real components built by
//! `paceline-plugin-artifacts`. One test binary, a module per area.

mod adversarial;
mod defaults;
mod determinism;
mod hotswap;
mod invariants;
mod languages;
mod registry;
mod support;
