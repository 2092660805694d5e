//! Offer leases: what placement asks for and gets.
//!
//! A lease hands a set of hosts to one placement engine for a TTL; a host is
//! in at most one live lease. Launching on a host consumes that host's offer;
//! releasing or letting the TTL pass returns the rest.

use std::fmt;

use paceline_model::Constraint;
use paceline_model::Resources;
use paceline_model::view::HostView;

/// Identifies a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct LeaseId(pub u64);

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L{}", self.0)
    }
}

/// Which hosts to lease.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseRequest {
    /// A host must have at least this much free.
    pub min_free: Resources,
    /// Hard constraints on host attributes and the tasks a host runs; those
    /// placement enforces itself (`max_per_host`, `spread_over`) are ignored here.
    pub constraints: Vec<Constraint>,
    /// When not empty, only these hosts may be leased (tasks pinned to a
    /// host); unknown names are skipped.
    pub only_hosts: Vec<String>,
    /// Hosts taken first when they qualify (a stateful task's previous
    /// host); the rest of the lease is filled as usual.
    pub prefer_hosts: Vec<String>,
    /// At most this many hosts (at least 1).
    pub max_hosts: usize,
    /// How long the lease lives, in milliseconds of the manager's clock (at least 1).
    pub ttl_ms: u64,
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
        }
    }
}

/// Hosts leased to the caller until `expires_at_ms`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    /// Its id, for `launch` and `release`.
    pub id: LeaseId,
    /// When the hosts go back, on the manager's clock.
    pub expires_at_ms: u64,
    /// The hosts, as placement sees them (free = total − allocated).
    pub offers: Vec<HostView>,
}

/// A live lease inside the manager.
#[derive(Debug)]
pub(crate) struct LeaseEntry {
    pub expires_at_ms: u64,
    /// Host slots still in the lease.
    pub hosts: Vec<u32>,
}
