//! Integration tests of the host manager, one module per area, one binary.
#![allow(clippy::unwrap_used)]

mod agent;
mod identity;
mod lease;
mod maintenance;
mod peer;
mod provider_drain;
mod sim;
mod support;
