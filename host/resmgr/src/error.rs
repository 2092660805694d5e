//! Errors the resource manager returns. Each names what the caller got wrong:
//! a pool change names the pool and the field.

use paceline_model::pool::{ResourceKind, SpecError, amount_text};

/// A refused pool change. The tree is left as it was.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pool {pool}: {field}: {reason}")]
pub struct PoolError {
    /// Path of the pool the change was about.
    pub pool: String,
    /// The field at fault, such as `reservation.cpu_millis`, `limit.gpus`, `path`, `parent`.
    pub field: String,
    /// Why.
    pub reason: PoolErrorReason,
}

impl PoolError {
    pub(crate) fn new(pool: &str, field: impl Into<String>, reason: PoolErrorReason) -> Self {
        PoolError { pool: pool.to_string(), field: field.into(), reason }
    }
}

/// Why a pool change was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PoolErrorReason {
    /// The path is not `/` followed by `/`-separated names of `[A-Za-z0-9_.-]`.
    #[error("invalid path (want /name/name, names of letters, digits, '_', '.', '-')")]
    InvalidPath,
    /// No pool at that path.
    #[error("no such pool")]
    NotFound,
    /// A sibling already has that name.
    #[error("a pool with this path already exists")]
    AlreadyExists,
    /// The parent does not exist.
    #[error("parent pool {0} does not exist")]
    ParentNotFound(String),
    /// The root pool is fixed.
    #[error("the root pool cannot be changed, moved or deleted")]
    Root,
    /// The spec is wrong on its own.
    #[error("{0}")]
    Spec(SpecError),
    /// Children's reservations would exceed the parent's.
    #[error(
        "sum of the children's reservations ({sum} {unit}) would exceed parent {parent}'s reservation ({parent_reservation})",
        unit = kind.unit(),
        sum = amount_text(*sum),
        parent_reservation = amount_text(*parent_reservation)
    )]
    ChildReservations {
        /// The kind.
        kind: ResourceKind,
        /// Sum of the children's reservations after the change.
        sum: u64,
        /// The parent.
        parent: String,
        /// The parent's reservation.
        parent_reservation: u64,
    },
    /// The limit would exceed the parent's.
    #[error("limit ({limit}) would exceed parent {parent}'s limit ({parent_limit})", parent_limit = amount_text(*parent_limit))]
    LimitAboveParent {
        /// The kind.
        kind: ResourceKind,
        /// The proposed limit.
        limit: u64,
        /// The parent.
        parent: String,
        /// The parent's limit.
        parent_limit: u64,
    },
    /// A child's limit would exceed the new limit.
    #[error("child {child}'s limit ({child_limit}) would exceed the new limit ({limit})", child_limit = amount_text(*child_limit))]
    LimitBelowChild {
        /// The kind.
        kind: ResourceKind,
        /// The child.
        child: String,
        /// The child's limit.
        child_limit: u64,
        /// The proposed limit.
        limit: u64,
    },
    /// The target parent runs or queues jobs; only leaves hold jobs.
    #[error("pool {0} holds jobs; only leaf pools may hold jobs, so it cannot get children")]
    ParentHoldsJobs(String),
    /// The pool has children.
    #[error("the pool has children")]
    HasChildren,
    /// The pool holds queued gangs or live tasks.
    #[error("the pool holds {gangs} queued gangs and {tasks} live tasks")]
    HoldsJobs {
        /// Queued gangs.
        gangs: u64,
        /// Live tasks.
        tasks: u64,
    },
    /// Moving a pool under itself or its own descendant.
    #[error("{0} is the pool itself or one of its descendants")]
    Cycle(String),
    /// Jobs go to leaf pools only.
    #[error("the pool has children; jobs go to leaf pools only")]
    NotLeaf,
    /// A pool file could not be read.
    #[error("{0}")]
    File(String),
}

/// A refused gang submission.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The pool does not exist or is not a leaf.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A gang of zero tasks.
    #[error("gang of job {job} has no tasks")]
    Empty {
        /// The job.
        job: u64,
    },
}

/// A transition that does not apply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// Unknown or finished task id.
    #[error("no live task {0}")]
    UnknownTask(u64),
    /// The transition is not allowed in the task's state.
    #[error("task {task}: {event:?} is not allowed in state {state:?}")]
    Transition {
        /// The task.
        task: u64,
        /// Its state.
        state: crate::task::TaskState,
        /// The transition refused.
        event: crate::task::Transition,
    },
}

/// A preemption policy failed to answer. The manager logs it and uses the
/// native fallback.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("preemption policy {policy} failed: {message}")]
pub struct PolicyError {
    /// The policy's name.
    pub policy: String,
    /// What went wrong (a trap, a timeout, fuel, …).
    pub message: String,
}

/// Why a policy's victims were rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VictimError {
    /// The SDK's contract checks failed (unknown task or need, twice, not preemptible, wrong pool).
    #[error("contract: {0}")]
    Contract(String),
    /// A victim that is not needed: the need is covered without it.
    #[error("task {task} is not needed for need {need}")]
    NotNeeded {
        /// Index into the request's running tasks.
        task: u32,
        /// Index into the request's needs.
        need: u32,
    },
    /// The victims chosen for a need do not cover it, so killing them helps no one.
    #[error("victims for need {need} do not cover it")]
    NotEnough {
        /// Index into the request's needs.
        need: u32,
    },
}
