//! The server crate's integration tests, one binary: the roles assembled
//! by `paceline_server` in the test process (over simulated hosts, the fake
//! Mesos master or a real Kubernetes API server), driven through the public
//! gRPC API or the roles' own calls. Tests that need the `paceline` binary
//! live in `host/paceline/tests`.
//!
//! Run one part with e.g. `cargo test --workspace --test all -- kubernetes::`.

mod api_grpc;
mod audit;
mod dev_server;
mod job_events;
mod kill_waiting;
mod kubernetes;
mod least_privilege;
mod mesos;
mod metered_snapshot;
mod pipeline_sim;
mod plugin_languages;
mod plugin_store;
mod preemption_slot;
mod provider_cluster;
mod support;
mod tenant_reads;
mod watch_usage;
mod web_ui;
mod why_pending;
