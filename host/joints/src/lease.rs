//! Offer leases: a placement engine leases the hosts that pass a filter,
//! decides, launches on some of them and gives the lease back. A host is in
//! at most one live lease, which is what lets several engines run at once
//! without placing on the same free capacity.

use std::fmt;

use async_trait::async_trait;
use std::sync::Arc;

use paceline_model::view::HostView;
use paceline_model::{Constraint, Resources};

use crate::error::PortError;

/// Identifies a lease at the host manager that granted it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct LeaseId(pub u64);

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L{}", self.0)
    }
}

/// Which hosts to lease, and for how long.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseRequest {
    /// A host must have at least this much free (a group's smallest demand).
    pub min_free: Resources,
    /// Hard constraints on host attributes and the tasks a host runs, shared
    /// by every task of the group, for the host side to filter on; those the
    /// engine enforces itself (`max_per_host`, `spread_over`) are ignored.
    pub constraints: Vec<Constraint>,
    /// When not empty, only these hosts may be leased (tasks pinned to a
    /// host); unknown names are skipped.
    pub only_hosts: Vec<String>,
    /// Hosts taken first when they qualify (a stateful task's previous host);
    /// the rest of the lease is filled as usual.
    pub prefer_hosts: Vec<String>,
    /// At most this many hosts (at least 1).
    pub max_hosts: usize,
    /// How long the lease lives, in milliseconds of the host manager's clock
    /// (at least 1); the hosts go back by themselves after it.
    pub ttl_ms: u64,
    /// The jobs whose tasks the lease is for: the answer says, per job, which
    /// leased hosts already run its tasks ([`Lease::job_hosts`]). Empty asks
    /// for nothing; absent on the wire from an older engine.
    #[serde(default)]
    pub jobs: Vec<String>,
}

impl LeaseRequest {
    /// Up to `max_hosts` hosts with `min_free` free, for `ttl_ms`.
    pub fn new(min_free: Resources, max_hosts: usize, ttl_ms: u64) -> Self {
        LeaseRequest {
            min_free,
            constraints: Vec::new(),
            only_hosts: Vec::new(),
            prefer_hosts: Vec::new(),
            max_hosts,
            ttl_ms,
            jobs: Vec::new(),
        }
    }
}

/// Hosts leased to one engine until released or `expires_at_ms`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    /// Its id, named by launches and the release.
    pub id: LeaseId,
    /// When the hosts go back, on the host manager's clock.
    pub expires_at_ms: u64,
    /// The leased hosts as placement sees them (free = total − allocated).
    /// Shared with the host manager's own copy: a lease costs a reference
    /// count per host, not a copy of its attributes and job counts (the
    /// manager copies a view only when it changes one a lease still holds).
    pub hosts: Vec<Arc<HostView>>,
    /// Per job named in [`LeaseRequest::jobs`], the leased hosts that already
    /// run its tasks, from the host manager's job index. `None` when the
    /// source keeps no index (a remote or older one): placement then reads
    /// each host's `job_counts` itself, which costs a lookup per job and host
    /// and was a quarter of a 5,000-host replay's time.
    #[serde(default)]
    pub job_hosts: Option<Vec<JobHosts>>,
}

/// Where one job already runs among a lease's hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobHosts {
    /// The job's id.
    pub job: String,
    /// `(index into Lease::hosts, tasks of the job on that host)`, by index;
    /// hosts running none of its tasks are left out.
    pub hosts: Vec<(u32, u32)>,
}

/// The host manager as a placement engine sees it.
#[async_trait]
pub trait OfferSource: Send + Sync {
    /// Leases the hosts that pass the request's filter (possibly none).
    async fn lease(&self, request: &LeaseRequest) -> Result<Lease, PortError>;
    /// Gives a lease back; hosts launched on keep their allocation.
    async fn release(&self, lease: LeaseId) -> Result<(), PortError>;
}
