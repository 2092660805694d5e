//! Why a task was not placed in a round: the placement policy's answer, or
//! the engine's own when it could not ask one. The resource manager keeps the
//! last one as part of a task's "why pending" and backs the task off (all
//! but [`UnplacedReason::HostManagerUnreachable`], which is no attempt).

use serde::{Deserialize, Serialize};

/// The category of a task left unplaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnplacedReason {
    /// No eligible host had enough free resources.
    InsufficientResources,
    /// No host satisfied the task's constraints.
    ConstraintsUnsatisfiable,
    /// The job reached its per-host maximum on every host that fits.
    MaxPerHost,
    /// Another task of the same gang could not be placed.
    GangIncomplete,
    /// Not placed this round for another reason (the policy deferred it, its
    /// job was gone, the slot gave no answer, or the host manager refused
    /// the lease).
    Deferred,
    /// The engine could not reach the host manager (its lease call failed as
    /// unavailable, e.g. during the host manager's failover): nothing about
    /// the task was tried. Not a placement attempt: the resource manager
    /// retries it after a short fixed delay, without backing off. The
    /// engine's own reason, never a placement policy's (the plugin contract
    /// has no such value; it reads as `deferred` there).
    HostManagerUnreachable,
}

impl UnplacedReason {
    /// Every reason.
    pub const ALL: [UnplacedReason; 6] = [
        UnplacedReason::InsufficientResources,
        UnplacedReason::ConstraintsUnsatisfiable,
        UnplacedReason::MaxPerHost,
        UnplacedReason::GangIncomplete,
        UnplacedReason::Deferred,
        UnplacedReason::HostManagerUnreachable,
    ];

    /// A stable snake_case name, for metrics, "why pending" and the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InsufficientResources => "insufficient_resources",
            Self::ConstraintsUnsatisfiable => "constraints_unsatisfiable",
            Self::MaxPerHost => "max_per_host",
            Self::GangIncomplete => "gang_incomplete",
            Self::Deferred => "deferred",
            Self::HostManagerUnreachable => "host_manager_unreachable",
        }
    }

    /// Parses [`UnplacedReason::as_str`]'s names.
    pub fn parse(name: &str) -> Option<UnplacedReason> {
        Self::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for r in UnplacedReason::ALL {
            assert_eq!(UnplacedReason::parse(r.as_str()), Some(r));
        }
        assert_eq!(UnplacedReason::parse("bored"), None);
    }
}
