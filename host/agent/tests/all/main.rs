//! Integration tests of the node agent with real processes. One binary
//! (one link) with a module per area.

#![allow(clippy::unwrap_used)]

mod common;

mod bench;
mod gang;
mod gpu;
mod health;
mod kill;
mod launch_log;
mod lifecycle;
mod memory;
mod outbox;
mod reject;
mod restart;
mod session;
mod task_users;
mod volume;
