//! Offer leases: what placement asks for and gets (the joints' records) and
//! the manager's own record of a live lease.
//!
//! A lease hands a set of hosts to one placement engine for a TTL; a host is
//! in at most one live lease. Launching on a host consumes that host's offer;
//! releasing or letting the TTL pass returns the rest.

pub use paceline_joints::lease::{JobHosts, Lease, LeaseId, LeaseRequest};

/// A live lease inside the manager.
#[derive(Debug)]
pub(crate) struct LeaseEntry {
    pub expires_at_ms: u64,
    /// Host slots still in the lease.
    pub hosts: Vec<u32>,
}
