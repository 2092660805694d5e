//! A gang: what a job submits (identical tasks admitted all or nothing) and
//! the handle of a queued one.

use paceline_model::Resources;
use paceline_model::job::JobKind;

/// What a job submits: a gang of identical tasks, admitted all or nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GangSpec {
    /// The job's id (opaque to the resource manager).
    pub job: u64,
    /// First instance number of the gang; tasks are `first_instance..first_instance + tasks`.
    pub first_instance: u32,
    /// Job kind: the ready queue is drained per kind.
    pub kind: JobKind,
    /// Priority; higher first.
    pub priority: u32,
    /// May be preempted. Non-preemptible work must stay within reservation.
    pub preemptible: bool,
    /// Runs on slack (revocable) capacity.
    pub revocable: bool,
    /// A preempted task ends KILLED instead of going back to the queue.
    pub kill_on_preempt: bool,
    /// Controller tasks (a job marked `controller`): also held to the
    /// pool's controller limit.
    pub controller: bool,
    /// Tasks in the gang (at least 1).
    pub tasks: u32,
    /// What each task needs.
    pub per_task: Resources,
}

impl Default for GangSpec {
    fn default() -> Self {
        GangSpec {
            job: 0,
            first_instance: 0,
            kind: JobKind::Batch,
            priority: 0,
            preemptible: true,
            revocable: false,
            kill_on_preempt: false,
            controller: false,
            tasks: 1,
            per_task: Resources::ZERO,
        }
    }
}

/// A queued gang's handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GangId(pub u64);

impl GangId {
    pub(crate) fn new(index: u32, generation: u32) -> GangId {
        GangId((u64::from(generation) << 32) | u64::from(index))
    }
    pub(crate) fn index(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
    pub(crate) fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}
