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

    /// What it means, for people: the one wording every surface shows (job
    /// events, and through them the API, the CLI and the web UI), ending in
    /// the stable code ([`UnplacedReason::as_str`]) for scripts and searches.
    pub fn describe(self) -> &'static str {
        match self {
            Self::InsufficientResources => {
                "not placed: no eligible host has enough free resources (insufficient_resources)"
            }
            Self::ConstraintsUnsatisfiable => {
                "not placed: no host satisfies the task's constraints (constraints_unsatisfiable)"
            }
            Self::MaxPerHost => "not placed: the job is at its per-host maximum on every host that fits (max_per_host)",
            Self::GangIncomplete => {
                "not placed: another task of its gang could not be placed, so none was (gang_incomplete)"
            }
            Self::Deferred => "not placed this round: the policy deferred it or a lease failed (deferred)",
            Self::HostManagerUnreachable => {
                "not placed this round: the host manager could not be reached; retrying shortly \
                 (host_manager_unreachable)"
            }
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

    #[test]
    fn each_description_ends_in_its_stable_code() {
        for r in UnplacedReason::ALL {
            assert!(r.describe().starts_with("not placed"), "{r:?}");
            assert!(r.describe().ends_with(&format!(" ({})", r.as_str())), "{r:?}: {}", r.describe());
        }
        assert_eq!(
            UnplacedReason::HostManagerUnreachable.describe(),
            "not placed this round: the host manager could not be reached; retrying shortly (host_manager_unreachable)"
        );
    }
}
