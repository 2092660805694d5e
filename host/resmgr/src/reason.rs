//! "Why pending": the reason a queued gang waits, kept as data so the API can
//! show it and tests can assert it.

use paceline_model::UnplacedReason;
use paceline_model::pending::human;
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
    /// `by` units of `kind` over its reservation. Non-preemptible work runs
    /// only within its pool's reservation, so when the gang alone needs more
    /// of `kind` than the pool reserves (`need > reservation`) it can never
    /// be admitted while the pool is as it is ([`PendingReason::never`]);
    /// `kind` is then that kind, whichever kind is short first.
    WaitingOnReservation {
        /// The kind short: one the gang alone needs more of than the
        /// reservation, if any; else the first kind short.
        kind: ResourceKind,
        /// By how much.
        by: u64,
        /// The pool's reservation of `kind`.
        reservation: u64,
        /// What the gang alone needs of `kind`.
        need: u64,
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

    /// What it means, for people, of a gang queued in `pool`: the one
    /// wording every surface shows ([`PendingInfo`]'s `Display`, and through
    /// it "why pending" in the API, the CLI and the web UI).
    pub fn describe<'a>(&'a self, pool: &'a str) -> Described<'a> {
        Described { reason: self, pool }
    }

    /// Which of its pool's bounds holds the gang, for a reason that is one
    /// (`"entitlement"`, `"reservation (non-preemptible work)"`, …): the
    /// detail "why pending" gives beside the sentence. `None` for the
    /// reasons that are not the pool's bound (cluster capacity, order).
    pub fn bound(&self) -> Option<&'static str> {
        match self {
            PendingReason::OverEntitlement { .. } => Some("entitlement"),
            PendingReason::WaitingOnReservation { .. } => Some("reservation (non-preemptible work)"),
            PendingReason::OverSlackEntitlement { .. } => Some("slack entitlement"),
            PendingReason::OverControllerLimit { .. } => Some("controller limit"),
            PendingReason::PoolCannotHold { .. } => Some("cap of 0"),
            PendingReason::NotEvaluated
            | PendingReason::ClusterFull { .. }
            | PendingReason::ClusterUsedUp { .. }
            | PendingReason::BehindHead { .. } => None,
        }
    }

    /// It can never be admitted while its pool is as it is, whatever else
    /// ends or is queued: the pool is capped at 0 in a kind the gang needs,
    /// or the gang is non-preemptible and needs more than the pool reserves.
    /// Someone must change the pool or the job.
    pub fn never(&self) -> bool {
        match *self {
            PendingReason::PoolCannotHold { .. } => true,
            PendingReason::WaitingOnReservation { reservation, need, .. } => need > reservation,
            _ => false,
        }
    }
}

/// How the text of a gang its pool can never admit for want of reservation
/// begins (then the pool's path): the API groups such instances into one
/// warning by it.
pub const NEVER_RUNS_IN_POOL: &str = "can never run in pool ";

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
        std::fmt::Display::fmt(&self.reason.describe(&self.pool), f)
    }
}

/// [`PendingReason::describe`]: a reason in words, for a gang of `pool`.
#[derive(Clone, Copy, Debug)]
pub struct Described<'a> {
    reason: &'a PendingReason,
    pool: &'a str,
}

impl std::fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pool = self.pool;
        match *self.reason {
            PendingReason::NotEvaluated => write!(f, "queued in pool {pool}, waiting its turn in admission order"),
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
            // Said plainly: it waits for ever unless the pool or the job is
            // changed, and these are the two changes.
            PendingReason::WaitingOnReservation { kind, reservation, need, .. } if need > reservation => write!(
                f,
                "{NEVER_RUNS_IN_POOL}{pool} as it is: non-preemptible jobs run only within their pool's reservation, \
                 and pool {pool} reserves {reserved} (reservation.{field}) while this work needs {needed}; {fix} \
                 (reservation.{field}, with `paceline pool update {pool} <file>`) or make the job preemptible \
                 (sla.preemptible: true in its spec)",
                reserved = human(kind, reservation),
                needed = human(kind, need),
                field = kind.field(),
                fix = if reservation == 0 { "add a reservation to the pool" } else { "raise the pool's reservation" },
            ),
            PendingReason::WaitingOnReservation { kind, by, reservation, .. } => write!(
                f,
                "waiting on reservation: non-preemptible work would exceed pool {pool}'s reservation by {by} {unit} of \
                 {kind}; non-preemptible jobs run only within their pool's reservation ({reserved} here), so it waits \
                 for the pool's other non-preemptible work to end (or raise reservation.{field} with `paceline pool \
                 update`, or make the job preemptible: sla.preemptible: true)",
                unit = kind.unit(),
                reserved = human(kind, reservation),
                field = kind.field(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn info(reason: PendingReason) -> String {
        PendingInfo { gang: GangId::new(0, 0), pool: "/team-a/batch".into(), reason, queued_at_ms: 0 }.to_string()
    }

    #[test]
    fn the_info_says_what_describe_says_and_only_pool_bounds_name_a_bound() {
        let waiting = PendingReason::NotEvaluated;
        assert_eq!(info(waiting), "queued in pool /team-a/batch, waiting its turn in admission order");
        assert_eq!(waiting.describe("/team-a/batch").to_string(), info(waiting));
        let over = PendingReason::OverEntitlement { kind: ResourceKind::Cpu, by: 500 };
        assert_eq!(over.bound(), Some("entitlement"));
        assert_eq!(PendingReason::ClusterFull { kind: ResourceKind::Cpu, by: 1 }.bound(), None);
        assert_eq!(PendingReason::BehindHead { head: GangId::new(0, 1) }.bound(), None);
    }

    #[test]
    fn a_reservation_that_can_never_hold_the_gang_says_never_and_both_fixes() {
        let reason =
            PendingReason::WaitingOnReservation { kind: ResourceKind::Cpu, by: 1_000, reservation: 0, need: 1_000 };
        assert!(reason.never());
        assert_eq!(
            info(reason),
            "can never run in pool /team-a/batch as it is: non-preemptible jobs run only within their pool's \
             reservation, and pool /team-a/batch reserves 0 cpu (reservation.cpu_millis) while this work needs 1 cpu; \
             add a reservation to the pool (reservation.cpu_millis, with `paceline pool update /team-a/batch <file>`) \
             or make the job preemptible (sla.preemptible: true in its spec)"
        );
        let small =
            PendingReason::WaitingOnReservation { kind: ResourceKind::Memory, by: 512, reservation: 512, need: 1_024 };
        assert!(small.never());
        let text = info(small);
        assert!(
            text.contains("reserves 512 MiB of memory (reservation.memory_mib) while this work needs 1024 MiB"),
            "{text}"
        );
        assert!(text.contains("; raise the pool's reservation (reservation.memory_mib"), "{text}");
    }

    #[test]
    fn a_reservation_held_by_other_work_waits_and_says_why() {
        let reason =
            PendingReason::WaitingOnReservation { kind: ResourceKind::Cpu, by: 500, reservation: 4_000, need: 1_000 };
        assert!(!reason.never());
        let text = info(reason);
        assert!(
            text.starts_with(
                "waiting on reservation: non-preemptible work would exceed pool /team-a/batch's reservation by 500 \
                 millicores of cpu; non-preemptible jobs run only within their pool's reservation (4 cpu here)"
            ),
            "{text}"
        );
        assert!(text.contains("sla.preemptible: true") && !text.contains("never"), "{text}");
        assert!(PendingReason::PoolCannotHold { kind: ResourceKind::Memory, is_static: true }.never());
        assert!(!PendingReason::OverEntitlement { kind: ResourceKind::Cpu, by: 1 }.never());
    }
}
