//! "Why pending": the reason a queued gang waits, kept as data so the API can
//! show it and tests can assert it.

use paceline_model::UnplacedReason;
use paceline_model::pool::ResourceKind;

use crate::gang::GangId;

/// Why a gang is still queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingReason {
    /// No admission pass has looked at it yet.
    NotEvaluated,
    /// Admitting it would put its pool `by` units of `kind` over its entitlement.
    OverEntitlement {
        /// The first kind short.
        kind: ResourceKind,
        /// By how much.
        by: u64,
    },
    /// It is non-preemptible and would take its pool's non-preemptible work
    /// `by` units of `kind` over its reservation.
    WaitingOnReservation {
        /// The first kind short.
        kind: ResourceKind,
        /// By how much.
        by: u64,
    },
    /// Its pool can never hold any of `kind`, which the gang needs: the pool
    /// is static there with no reservation (`is_static`), or its limit is 0.
    /// It waits until the pool is changed.
    PoolCannotHold {
        /// The kind the pool is capped at 0 in.
        kind: ResourceKind,
        /// Static with no reservation (else a limit of 0).
        is_static: bool,
    },
    /// It is a controller task and would take its pool's controllers `by`
    /// units of `kind` over the pool's controller limit.
    OverControllerLimit {
        /// The first kind short.
        kind: ResourceKind,
        /// By how much.
        by: u64,
    },
    /// It is revocable and would take its pool over its slack entitlement.
    OverSlackEntitlement {
        /// The first kind short.
        kind: ResourceKind,
        /// By how much.
        by: u64,
    },
    /// Within entitlement, but the cluster's capacity is held by others
    /// (pools over their entitlement, or revocable work): waits for preemption.
    ClusterFull {
        /// The first kind short.
        kind: ResourceKind,
        /// By how much.
        by: u64,
    },
    /// How [`crate::ResourceManager::why_pending`] reads an
    /// [`PendingReason::OverEntitlement`] when the pool is entitled to all
    /// the cluster has of `kind`: the cluster, not the pool's share, is what
    /// is short, and the pool's own work holds it. Admission never records it.
    ClusterUsedUp {
        /// The first kind short.
        kind: ResourceKind,
        /// By how much.
        by: u64,
    },
    /// Queued behind `head`, which waits in the same lane (priority-then-FIFO).
    BehindHead {
        /// The gang at the head of the lane.
        head: GangId,
    },
}

impl PendingReason {
    /// A short, stable name for the kind of reason (its numbers left out),
    /// so that counts by reason have a bounded set of labels.
    pub fn name(&self) -> &'static str {
        match self {
            PendingReason::NotEvaluated => "not_evaluated",
            PendingReason::OverEntitlement { .. } => "over_entitlement",
            PendingReason::WaitingOnReservation { .. } => "waiting_on_reservation",
            PendingReason::PoolCannotHold { .. } => "pool_cannot_hold",
            PendingReason::OverControllerLimit { .. } => "over_controller_limit",
            PendingReason::OverSlackEntitlement { .. } => "over_slack_entitlement",
            PendingReason::ClusterFull { .. } => "cluster_full",
            PendingReason::ClusterUsedUp { .. } => "cluster_used_up",
            PendingReason::BehindHead { .. } => "behind_head",
        }
    }
}

/// Queued gangs of one pool that wait for one kind of reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingCount {
    /// The pool's path.
    pub pool: String,
    /// [`PendingReason::name`].
    pub reason: &'static str,
    /// Gangs waiting.
    pub gangs: u64,
    /// Their tasks.
    pub tasks: u64,
}

/// A queued gang's reason with its pool, for display.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingInfo {
    /// The gang.
    pub gang: GangId,
    /// Its pool's path.
    pub pool: String,
    /// Why it waits.
    pub reason: PendingReason,
    /// When it was queued (ms, the manager's clock).
    pub queued_at_ms: u64,
}

impl std::fmt::Display for PendingInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pool = &self.pool;
        match self.reason {
            PendingReason::NotEvaluated => write!(f, "queued in pool {pool}, not yet evaluated"),
            PendingReason::OverEntitlement { kind, by } => {
                write!(f, "over entitlement by {by} {} of {kind} in pool {pool}", kind.unit())
            }
            PendingReason::PoolCannotHold { kind, is_static: true } => write!(
                f,
                "pool {pool} is static in {kind} with no {kind} reservation: it is entitled to exactly its reservation \
                 (0), so work that needs {kind} can never run there; give it a reservation.{field} or make only \
                 its reserved kinds static",
                field = kind.field()
            ),
            PendingReason::PoolCannotHold { kind, is_static: false } => write!(
                f,
                "pool {pool} has limit.{field} 0: work that needs {kind} can never run there; raise the limit",
                field = kind.field()
            ),
            PendingReason::WaitingOnReservation { kind, by } => write!(
                f,
                "waiting on reservation: non-preemptible work would exceed pool {pool}'s reservation by {by} {} of {kind}",
                kind.unit()
            ),
            PendingReason::OverSlackEntitlement { kind, by } => {
                write!(f, "over slack entitlement by {by} {} of {kind} in pool {pool}", kind.unit())
            }
            PendingReason::OverControllerLimit { kind, by } => write!(
                f,
                "controller task: pool {pool}'s controllers would exceed its controller_limit_percent by {by} {} of \
                 {kind}; it waits for other controllers there to end",
                kind.unit()
            ),
            PendingReason::ClusterFull { kind, by } => write!(
                f,
                "within pool {pool}'s entitlement but the cluster is short {by} {} of {kind}; waiting for preemption",
                kind.unit()
            ),
            PendingReason::ClusterUsedUp { kind, by } => write!(
                f,
                "the cluster's {kind} is all in use ({by} {} short): pool {pool} may use all of it and its own work \
                 holds it; waiting for some of that work to end (or to be preempted by higher priority)",
                kind.unit()
            ),
            // The head is named by job and instances by the job manager, which
            // knows job names; its number here is internal.
            PendingReason::BehindHead { .. } => write!(f, "queued in pool {pool} behind an earlier gang that waits"),
        }
    }
}

/// A live task as "why pending" reads it ([`crate::ResourceManager::job_task_waits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskWait {
    /// Its instance number.
    pub instance: u32,
    /// Its state in the resource manager.
    pub state: crate::task::TaskState,
    /// Why the last placement round left it unplaced, if one did.
    pub last_unplaced: Option<UnplacedReason>,
    /// Admission number of its gang: tasks sharing it are placed all or none.
    pub gang: u64,
}

/// A stable name for a placement failure, for "why pending" of a task back in READY.
pub fn unplaced_text(reason: UnplacedReason) -> &'static str {
    match reason {
        UnplacedReason::InsufficientResources => "no host with enough free resources in the last round",
        UnplacedReason::ConstraintsUnsatisfiable => "no feasible host in the last round (constraints)",
        UnplacedReason::MaxPerHost => "every fitting host already runs the job's maximum per host",
        UnplacedReason::GangIncomplete => "another task of its gang could not be placed",
        UnplacedReason::Deferred => "deferred by the placement policy",
        UnplacedReason::HostManagerUnreachable => "the host manager could not be reached; retrying shortly",
    }
}
