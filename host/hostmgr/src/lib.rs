//! # paceline-hostmgr
//!
//! The host manager: it owns the **host inventory** (capacity, allocation,
//! attributes, maintenance state, liveness, the runs on each host), **offer
//! leases** to placement, **launch and kill**, the **status pipeline** with
//! acknowledgement, **host loss**, **reconciliation** and **maintenance**,
//! over one [`Provider`] that reaches the hosts.
//!
//! ```text
//!  placement ──lease/release──▶ ┌──────────────┐ ──HostEvent (one subscriber)──▶ jobmgr / resmgr (fan-out by caller)
//!  jobmgr ──launch/kill────────▶ │ HostManager  │ ◀──acknowledge(run, seq)─────── (after a durable write)
//!  jobmgr ──expect_runs────────▶ └──────┬───────┘
//!                                       │ Provider trait: launch, kill, acknowledge, reconcile, read_log
//!                        ┌──────────────┼────────────────┐
//!                  AgentProvider     MesosProvider     SimProvider
//!                  gRPC server for                     virtual clock,
//!                  `paceline agent`                    scripted runs
//! ```
//!
//! - **Receives**: lease requests from placement, launches and kills from
//!   the job manager, its expectations after a restart, maintenance
//!   commands, and provider events (registrations, heartbeats, run updates).
//! - **Hands on**: [`HostEvent`]s to one subscriber (run updates with a
//!   per-run `seq`, hosts joining/leaving, maintenance changes); acks to the
//!   provider once the subscriber acknowledged; host records to the store.
//! - **Must not**: decide what runs where (placement does), restart tasks or
//!   judge a job's availability (the job manager does, e.g. when a host
//!   drains), or touch job/task storage; it persists only host records.
//!
//! # The status pipeline
//! Updates are delivered at least once and in order per run. The manager
//! drops a `seq` it already handled; it keeps each update until the
//! subscriber calls [`HostManager::acknowledge`], re-sends it after
//! `redeliver_after_ms` and replays it to a new subscriber, and only then
//! acknowledges the provider (which stops the agent re-sending). Resources
//! are freed when a terminal update arrives, not when it is acknowledged.
//! Updates the manager makes up use the run's next seq: LOST with reason
//! `HOST_LOST` (host silent past `heartbeat_timeout_ms`), `RUN_MISSING`
//! (a registering host does not report a run the manager expects),
//! `LAUNCH_TIMEOUT` (no update within `launch_timeout_ms` of launch), and
//! FAILED with `LAUNCH_REJECTED` (the host refused the launch).
//!
//! # Simulated runs
//! The `sim` provider scripts a run from its task spec's `env` (or the
//! launch's extra `env`), all times on the virtual clock:
//!
//! | variable | effect | default |
//! |---|---|---|
//! | `SIM_DURATION_MS=n` | exits `n` ms after RUNNING | runs until killed |
//! | `SIM_EXIT_CODE=c` | exits with `c` (0: SUCCEEDED, else FAILED); alone, it exits at once | 0 |
//! | `SIM_FAIL_RUNS=k` | runs whose run number (last `-<n>` of the run id) is ≤ k exit 1 (at once when no duration) | none |
//! | `SIM_UNHEALTHY=1` | with a health check: RUNNING is followed by a RUNNING update with healthy=false (healthy=true without this) | healthy |
//!
//! A run goes STARTING (seq 1), RUNNING (2), then, with a health check, a
//! health update (3), then its end: SUCCEEDED/FAILED (reason `EXITED`),
//! KILLED (`KILLED_BY_REQUEST`, after the kill grace on the virtual clock),
//! or LOST (`HOST_REMOVED`). An unparsable value makes the launch rejected,
//! naming the variable. Unscripted runs follow [`sim::RandomRuns`] (seeded).
//!
//! # Layout
//! - [`provider`]: the [`Provider`] trait and [`ProviderEvent`].
//! - [`sim`]: [`SimProvider`], simulated hosts on a virtual clock.
//! - [`agent`]: [`AgentProvider`], the gRPC server `paceline agent` dials.
//! - [`mesos`]: [`MesosProvider`], a Mesos framework (v1 scheduler HTTP API).
//! - [`manager`]: [`HostManager`] (async shell) over its state and rules.
//! - [`access`]: [`HostAccess`], the manager as the other roles see it, in
//!   this process or another.
//! - [`peer`]: both ends of `paceline.hostmgr.v1`, for a host manager in a
//!   process of its own ([`peer::HostPeerService`], [`peer::RemoteHosts`]).
//! - [`pki`]: [`pki::AgentPki`], the agent port's CA, join tokens and agent certificates.
//! - [`lease`]: the joints' lease records and the manager's live leases.
//! - [`event`]: [`HostEvent`] and the subscriber stream.
//! - [`error`]: [`HostError`], [`ProviderError`].
//! - [`bench`]: the `paceline bench hosts` figures.
//! - `fuzz_entry` (hidden): bytes into the Mesos stream and agent session code, for fuzz targets.
#![forbid(unsafe_code)]

pub mod access;
pub mod agent;
pub mod bench;
pub mod error;
pub mod event;
#[doc(hidden)]
pub mod fuzz_entry;
pub mod lease;
pub mod manager;
pub mod mesos;
pub mod peer;
pub mod pki;
pub mod provider;
pub mod sim;

pub use access::HostAccess;
pub use agent::{AgentConfig, AgentProvider};
pub use error::{HostError, ProviderError, RemoteErrorKind};
pub use event::{HostEvent, HostEvents};
pub use lease::{JobHosts, Lease, LeaseId, LeaseRequest};
pub use manager::{ExpectedRun, HostInfo, HostManager, HostManagerBuilder, ManagerConfig};
pub use mesos::{MesosConfig, MesosProvider};
pub use provider::{
    HostRegistration, LogChunk, LogStream, MeasuredRun, MeasuredUse, Provider, ProviderEvent, RunHolding, RunUsage,
    RunningRun,
};
pub use sim::{HostShape, SimConfig, SimProvider};
