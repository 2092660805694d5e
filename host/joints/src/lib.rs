//! # paceline-joints
//!
//! Where the roles meet. Every record one role hands another and every port
//! one role calls another through is defined here, once; each role crate
//! implements the ports it serves and holds the ports it calls, and none of
//! them redefines or translates these types. `host/paceline` only wires.
//!
//! ```text
//!                 take_ready ─────────▶ ┌───────────────────────────┐
//!  placement  ◀── Taken (ReadyTask+Need)│ ReadyQueue                │  jobmgr (with the
//!  engine         unplaced ───────────▶ │   served by the job       │  resource manager
//!   │             commit(lease, [Placement]) ─▶ manager: the one    │  in its process)
//!   │                                   │   owner of PLACED         │
//!   │ lease / release                   └─────────────┬─────────────┘
//!   ▼                                                 │ launch / kill
//!  ┌──────────────┐                                   ▼
//!  │ OfferSource  │◀────────── both served by ───── Launcher
//!  └──────────────┘           the host manager (ExpectedRun for reconciliation)
//! ```
//!
//! - **Owns**: the ready-queue records ([`ReadyTask`], [`Need`], [`Taken`],
//!   [`Placement`], [`Committed`]) and the handles they carry ([`TaskHandle`],
//!   [`PoolId`]); offer leases ([`LeaseRequest`], [`Lease`], [`LeaseId`]);
//!   launches ([`Launcher`], [`ExpectedRun`]); the three ports
//!   ([`ReadyQueue`], [`OfferSource`], [`Launcher`]) and their one error
//!   ([`PortError`]); injected time ([`Clock`]); and [`contract`], the one
//!   place where the model's types become the plugin contract's and back.
//! - **Must not**: hold state, do I/O, or know which process is on the other
//!   side of a port (in-process or over `paceline.placement.v2` /
//!   `paceline.hostmgr.v1`: the remote adapters live with their roles).
//!
//! # Layout
//! - [`queue`]: the ready queue port and what crosses it.
//! - [`lease`]: offer leases and the offer source port.
//! - [`launch`]: the launcher port and expected runs.
//! - [`error`]: the one error, [`PortError`].
//! - [`events`]: the event sink port ([`EventSink`], decision 0025).
//! - [`clock`]: [`Clock`], [`SystemClock`], [`ManualClock`].
//! - [`contract`]: model ⇄ plugin contract conversions.
#![forbid(unsafe_code)]

pub mod clock;
pub mod contract;
pub mod error;
pub mod events;
pub mod launch;
pub mod lease;
pub mod queue;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{PortError, PortErrorKind};
pub use events::EventSink;
pub use launch::{ExpectedRun, Launcher, RunRefused};
pub use lease::{JobHosts, Lease, LeaseId, LeaseRequest, OfferSource};
pub use queue::{Committed, Need, Placement, PoolId, ReadyQueue, ReadyTask, Taken, TaskHandle};
