//! # paceline-placement
//!
//! The placement engine (ARCHITECTURE §5). Each round it drains admitted
//! (READY) gangs from the resource manager in batches per job kind, groups
//! the tasks by the placement slot their job uses, leases a filtered set of
//! host offers for each group, makes **one plugin call per group**, and
//! commits the answer: placed tasks go to the job manager to launch on the
//! leased hosts, unplaced ones go back to the resource manager with the
//! policy's reason (which becomes the gang's "why pending" and drives its
//! backoff). Every lease is released at the end of the round.
//!
//! The engine holds no state of its own between rounds, so several engines
//! may run at once: the host manager leases a host to one engine at a time,
//! which is what keeps two engines from placing on the same free capacity.
//!
//! It owns the round loop only. It must not touch storage, launch anything
//! itself, or trust a plugin's answer: the plugin registry validates each
//! answer (capacity, constraints, whole gangs, indices within the leased
//! hosts) and falls back to the previous good version or the native policy.
//! The queue side ([`ReadyQueue`]), the host side ([`OfferSource`]) and the
//! job side ([`PlacementSink`]) are traits so that the engine runs
//! in-process beside the other roles ([`LocalQueue`]) or in a process of its
//! own against them over the network (`paceline server --roles placement`).

mod engine;
mod group;
mod queue;

pub use engine::{Engine, EngineConfig, RoundReport};
pub use group::lease_request_for;
pub use queue::{LocalQueue, ReadyQueue, Taken};

use std::sync::Arc;

use async_trait::async_trait;
use paceline_model::task::TaskSpec;
use paceline_model::view::HostView;
use paceline_model::{Constraint, Resources};
use paceline_resmgr::ReadyTask;

/// What the engine asks the host manager for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseRequest {
    /// Only hosts with at least this much free (the smallest demand of the group).
    pub min_free: Resources,
    /// Hard constraints every task of the group shares; the host side filters on them.
    pub constraints: Vec<Constraint>,
    /// Hosts to include when they qualify (a stateful task's previous host).
    pub include_hosts: Vec<String>,
    /// When not empty, only these hosts may be leased (tasks pinned to a host).
    pub only_hosts: Vec<String>,
    /// At most this many hosts.
    pub max_hosts: usize,
}

/// Hosts leased to one engine until released or expired.
#[derive(Clone, Debug, Default)]
pub struct Lease {
    /// The lease id; launches name it.
    pub id: String,
    /// The leased hosts with their free capacity and attributes.
    pub hosts: Vec<HostView>,
}

/// Errors of the host side, as text: the engine only logs them and retries.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OfferError(pub String);

/// The host manager as the engine sees it.
#[async_trait]
pub trait OfferSource: Send + Sync {
    /// Leases hosts that pass the request's filter.
    async fn lease(&self, request: &LeaseRequest) -> Result<Lease, OfferError>;
    /// Gives a lease back; hosts launched on keep their allocation.
    async fn release(&self, lease_id: &str);
}

/// What one task needs, as the job manager knows it.
#[derive(Clone, Debug)]
pub struct Need {
    /// The job's id.
    pub job_id: String,
    /// The spec of the run to place.
    pub spec: Arc<TaskSpec>,
    /// The host the task prefers (a stateful instance's last host).
    pub preferred_host: Option<String>,
    /// Only `preferred_host` will do (a daemon instance).
    pub host_required: bool,
    /// The placement slot the job uses (`placement/<kind>` or an override).
    pub slot: String,
    /// A host not to use this time (the last launch there was refused).
    pub avoid_host: Option<String>,
}

/// A task the engine placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The task as the resource manager handed it out.
    pub task: ReadyTask,
    /// The host chosen.
    pub host: String,
}

/// The job manager's answer to "what does this task need", for a
/// [`LocalQueue`] (a remote queue sends needs with the tasks).
pub trait NeedSource: Send + Sync {
    /// What an admitted task needs; `None` when its job is gone.
    fn need(&self, job_key: u64, instance: u32) -> Option<Need>;
}

/// The job manager as the engine sees it.
#[async_trait]
pub trait PlacementSink: Send + Sync {
    /// Launches placed tasks on the hosts of `lease_id`. Returns when the
    /// launches were handed to the host manager (the lease is released after).
    async fn placed(&self, lease_id: &str, placements: Vec<Placement>);
}
