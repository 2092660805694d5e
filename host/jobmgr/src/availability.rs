//! The one count of a job's unavailable instances (decision 0046), and the
//! one permission every path that takes instances down asks: the drain
//! (`manager/hosts.rs`), rolling updates and restarts (`manager/update.rs`)
//! and the resource manager's preemption rounds (`manager/gate.rs`).
//!
//! An instance the job wants running counts as unavailable until it runs
//! and, when its spec has a health check, its host reports it healthy,
//! whatever took it down (a drain, an update, a preemption, a crash, a
//! placement still to come). A path may take an available instance down
//! only while the job's unavailable instances are fewer than its limit;
//! taking down one that is already unavailable costs nothing, so an update
//! that replaces a crash-looping instance is never held back by it.

use paceline_model::job::JobKind;
use paceline_model::task::TaskState;

use crate::state::JobEntry;

/// A job's availability as the job manager sees it now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Availability {
    /// Instances the job wants running that are not running healthy.
    pub unavailable: u32,
    /// How many may be unavailable at once before no path may take another down.
    pub limit: u32,
}

/// How many instances of `job` may be unavailable at once: its
/// `sla.max_unavailable_instances`; unset, the batch size of its update
/// (the one in progress, else its config's; 0 meaning all instances), so a
/// job without the setting updates as before. Never below 1: a limit of 0
/// would block every drain for ever.
pub(crate) fn limit(job: &JobEntry) -> u32 {
    let config = job.config();
    let limit = config.sla.max_unavailable_instances.unwrap_or_else(|| {
        let batch = job
            .update
            .as_ref()
            .filter(|u| u.is_active())
            .map_or(config.update.batch_size, |u| u.update.spec.batch_size);
        if batch == 0 { job.instance_count() } else { batch }
    });
    limit.max(1)
}

/// Whether instance `i` counts at all: below the count and wanted running
/// (a killed or scaled-away instance is not "unavailable").
fn counted(job: &JobEntry, i: u32) -> bool {
    i < job.instance_count() && job.tasks.get(i as usize).is_some_and(|t| t.wants_run())
}

/// Whether instance `i` serves: RUNNING and, when the spec it runs has a
/// health check, reported healthy. A finished batch instance counts as
/// available (it has nothing left to serve); a service's SUCCEEDED run
/// will be restarted, so it does not.
pub(crate) fn available(job: &JobEntry, i: u32) -> bool {
    let Some(t) = job.tasks.get(i as usize) else {
        return false;
    };
    if t.preempted {
        // A preemption round chose it; its kill is on its way.
        return false;
    }
    match t.rt.state {
        TaskState::Running => {
            let checked = job.config_at(t.rt.config_version).task_spec(i).health_check.is_some();
            !checked || t.rt.healthy == Some(true)
        }
        TaskState::Succeeded => job.kind() == JobKind::Batch,
        _ => false,
    }
}

/// The job's unavailable instances now.
pub(crate) fn unavailable(job: &JobEntry) -> u32 {
    (0..job.instance_count()).filter(|&i| counted(job, i) && !available(job, i)).count() as u32
}

/// The count and the limit, together.
pub(crate) fn of(job: &JobEntry) -> Availability {
    Availability { unavailable: unavailable(job), limit: limit(job) }
}

/// The permission: of `wanted` (instances a path would take down now, in
/// the order it prefers), those it may. An available instance is granted
/// while the unavailable ones (counting those granted before it) are fewer
/// than the limit; one already unavailable, or not counted, always is.
/// The caller must take the granted ones down before it lets go of the
/// operation lock, so the next caller's count includes them.
pub(crate) fn grant(job: &JobEntry, wanted: &[u32]) -> Vec<u32> {
    let limit = limit(job);
    let mut down = unavailable(job);
    let mut out = Vec::with_capacity(wanted.len());
    for &i in wanted {
        if !counted(job, i) || !available(job, i) {
            out.push(i);
        } else if down < limit {
            down += 1;
            out.push(i);
        }
    }
    out
}

/// Of `wanted`, those whose going costs nothing: not counted, or already
/// unavailable. What a path may take down when it cannot know the count.
pub(crate) fn free(job: &JobEntry, wanted: &[u32]) -> Vec<u32> {
    wanted.iter().copied().filter(|&i| !counted(job, i) || !available(job, i)).collect()
}
