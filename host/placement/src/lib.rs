//! # paceline-placement
//!
//! The placement engine (ARCHITECTURE §5): it turns admitted work into
//! placements, one round at a time, and holds no state between rounds, so any
//! number of engines may run at once (the host manager leases each host to
//! one engine at a time).
//!
//! ## One round, top to bottom
//!
//! ```text
//!   ReadyQueue::take_ready(kind)          take      READY → PLACING, each task with its Need
//!        │                                           (tasks whose job is gone go straight back)
//!        ▼
//!   group by slot (and pinned host)       take      gangs stay contiguous
//!        │
//!        ▼  for each group
//!   lease filter ─▶ OfferSource::lease    feasible  smallest demand, shared hard constraints,
//!        │                                           preferred and pinned hosts
//!        ▼
//!   eligible hosts per constraint set     feasible  hard constraints evaluated once per
//!        │                                           distinct set: the plugin sees indices
//!        ▼
//!   at most K candidates per alike group  narrow    tightest fit and most free, raised to
//!        │                                           hold the group; preferred hosts kept
//!        ▼
//!   Registry::place(slot, request)        select    ONE plugin call: rank and select;
//!        │                                           the registry validates the answer and
//!        │                                           falls back (previous version, native)
//!        ▼
//!   ReadyQueue::commit(lease, placements) commit    the job manager, the one owner of PLACED:
//!   ReadyQueue::unplaced(tasks, reasons)             written, launched, or dropped if killed;
//!   OfferSource::release(lease)                      the rest back to READY with the reason
//! ```
//!
//! The steps are named as Nomad's scheduler names its own (feasibility, then
//! ranking and selection, then the plan's commit); ranking and selection are
//! the plugin's, in one call per group, never one per (task, host) pair.
//!
//! - **Receives**: READY tasks with their needs ([`ReadyQueue`]), leases of
//!   host offers ([`OfferSource`]), the plugin registry.
//! - **Hands on**: placements through [`ReadyQueue::commit`], unplaced tasks
//!   with the policy's reason, released leases.
//! - **Must not**: touch storage, launch anything itself (the commit does),
//!   or trust a plugin's answer (the registry validates each one: capacity,
//!   constraints, whole gangs, indices within the leased hosts).
//!
//! The ports are the joints' (`paceline-joints`); the job manager serves the
//! ready queue and the host manager the offers, in this process or, through
//! [`remote`], across the network (`paceline server --roles placement`).
//!
//! # Layout
//! - [`engine`]: [`Engine`], its configuration and one round's report.
//! - [`take`] (private): grouping a batch by slot.
//! - [`feasible`]: the lease filter and the plugin's request (eligible hosts).
//! - [`narrow`]: candidate narrowing, at most K feasible hosts per group
//!   of alike tasks offered to the plugin (decision 0054).
//! - [`select`] (private): the one plugin call per group.
//! - [`commit`](crate::commit) (private): the answer to the ready queue.
//! - [`remote`]: both ends of `paceline.placement.v2`.
#![forbid(unsafe_code)]

mod commit;
pub mod engine;
pub mod feasible;
pub mod narrow;
pub mod remote;
mod select;
mod take;
pub mod workload;

pub use engine::{Engine, EngineConfig, RoundReport};
pub use feasible::{TaskView, build_placement_request, build_placement_request_indexed, lease_request_for};
pub use narrow::{Narrowed, Narrowing, narrow};
pub use paceline_joints::{
    Committed, Lease, LeaseId, LeaseRequest, Need, OfferSource, Placement, PortError, ReadyQueue, ReadyTask, Taken,
};
pub use paceline_plugin::Candidates;
