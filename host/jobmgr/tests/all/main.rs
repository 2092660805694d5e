//! Job manager scenarios on real SQLite, a real resource manager and the
//! real Wasm lifecycle plugins served through the plugin registry. The
//! test plays placement and the hosts through `paceline_jobmgr::scenario`.

mod batch;
mod bench;
mod common;
mod controller;
mod daemon;
mod drain;
mod events;
mod gang;
mod grow;
mod lease;
mod live_counts;
mod preempt_sla;
mod recover;
mod release;
mod stateful;
mod stateless;
mod validation;
