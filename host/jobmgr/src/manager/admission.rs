//! Admission: runs go to the resource manager as gangs, and the resource
//! manager hears how each one ends (its record of the task follows the job
//! manager's, never the other way round).

use paceline_model::job::JobKind;
use paceline_model::task::TaskState;
use paceline_resmgr::{GangSpec, TaskState as RmState, Transition};

use super::JobManager;
use super::writes::Write;
use crate::error::JobError;
use crate::state::TaskEntry;

impl JobManager {
    /// Hands runs (tasks in INITIALIZED) to the resource manager as gangs and
    /// writes them PENDING. Consecutive instances with the same resources
    /// form gangs of `sla.min_running_instances`.
    pub(crate) async fn submit(&self, key: u64, instances: &[u32]) -> Result<(), JobError> {
        if instances.is_empty() {
            return Ok(());
        }
        let writes = {
            // Lock order everywhere: resource manager, then the mirror (a
            // ready queue's `take_ready` reads needs after taking from the former).
            let mut rm = self.rm();
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(());
            };
            let queued = self.queue_gangs(&mut rm, job, instances)?;
            queued
                .into_iter()
                .map(|i| {
                    let mut rt = job.tasks[i as usize].rt.clone();
                    rt.state = TaskState::Pending;
                    rt.config_version = rt.desired_config_version;
                    Write::new(i, rt, "SUBMITTED")
                })
                .collect()
        };
        self.write_tasks(key, writes).await
    }

    /// The in-memory half of [`JobManager::submit`]: queues the gangs in
    /// the resource manager and remembers each task's gang. Returns the
    /// instances queued, in order.
    pub(crate) fn queue_gangs(
        &self,
        rm: &mut paceline_resmgr::ResourceManager,
        job: &mut crate::state::JobEntry,
        instances: &[u32],
    ) -> Result<Vec<u32>, JobError> {
        let now = self.now();
        let cfg = job.config().clone();
        let gang_size = cfg.sla.min_running_instances.unwrap_or(1).max(1) as usize;
        let mut sorted: Vec<u32> = instances.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let res_of = |job: &crate::state::JobEntry, i: u32| {
            job.config_at(job.tasks[i as usize].rt.desired_config_version).task_spec(i).resources
        };
        // Runs of consecutive instances with equal resources, cut into gang-sized chunks.
        let mut groups: Vec<Vec<u32>> = Vec::new();
        for i in sorted {
            let extend = groups.last().is_some_and(|g: &Vec<u32>| {
                let last = g[g.len() - 1];
                last.wrapping_add(1) == i && g.len() < gang_size && res_of(job, last) == res_of(job, i)
            });
            match groups.last_mut() {
                Some(g) if extend => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        // `rm` is locked by the caller (before the mirror).
        let mut queued = Vec::new();
        for g in groups {
            let first = g[0];
            let spec = gang_spec(job.key, &cfg, first, g.len() as u32, res_of(job, first));
            let gang = rm.submit(&cfg.pool, spec, now).map_err(|e| JobError::Resmgr(e.to_string()))?;
            for i in g {
                job.tasks[i as usize].gang = Some(gang);
                queued.push(i);
            }
        }
        Ok(queued)
    }

    /// Tells the resource manager how a run ended (or that it runs), walking
    /// its table: LAUNCHING reaches SUCCEEDED through RUNNING, a kill we did
    /// not ask it for goes through KILLING.
    pub(crate) fn rm_report(&self, rm_task: Option<paceline_joints::TaskHandle>, state: TaskState) {
        let Some(id) = rm_task else { return };
        let now = self.now();
        let mut rm = self.rm();
        let Some(info) = rm.task(id) else { return };
        let steps: Vec<Transition> = match (info.state, state) {
            (RmState::Placed, TaskState::Launching | TaskState::Launched) => {
                vec![Transition::StartLaunch]
            }
            (RmState::Placed, TaskState::Running | TaskState::Starting) => {
                vec![Transition::StartLaunch, Transition::Running]
            }
            (RmState::Launching, TaskState::Running | TaskState::Starting) => {
                vec![Transition::Running]
            }
            (RmState::Launching, TaskState::Succeeded) => {
                vec![Transition::Running, Transition::Succeeded]
            }
            (RmState::Killing | RmState::Preempting, TaskState::Killed | TaskState::Failed | TaskState::Succeeded) => {
                vec![Transition::KillConfirmed]
            }
            (_, TaskState::Succeeded) => vec![Transition::Succeeded],
            (_, TaskState::Failed) => vec![Transition::Failed],
            (_, TaskState::Lost) => vec![Transition::Lost],
            (_, TaskState::Killed) => {
                if rm.kill(id, now).is_err() {
                    return;
                }
                vec![Transition::KillConfirmed]
            }
            _ => vec![],
        };
        for e in steps {
            if let Err(err) = rm.transition(id, e, now) {
                tracing::debug!(task = id.0, event = ?e, error = %err, "resource manager refused a task event");
                break;
            }
        }
    }

    /// Gives a run that never reached a host back to the resource manager,
    /// where it can by itself: a task whose handle it holds, or a gang
    /// still queued. Says what is left for the caller, which releases those
    /// of a job together ([`release_left`]).
    pub(crate) fn rm_release(&self, rm: &mut paceline_resmgr::ResourceManager, t: &TaskEntry) -> Released {
        let now = self.now();
        if let Some(id) = t.rm_task
            && rm.task(id).is_some()
        {
            if rm.kill(id, now).is_ok() {
                let _ = rm.transition(id, Transition::KillConfirmed, now);
            }
            return Released::Done;
        }
        match t.gang {
            // Cancels the whole queued gang: only done when the gang is one
            // task or every member is being released.
            Some(gang) if rm.cancel(gang) => Released::Done,
            // Admitted (READY or PLACING, charged to its pool): the task's
            // handle reaches us only with its placement.
            Some(_) => Released::Admitted,
            // A preempted run the resource manager queued again as a gang of
            // its own, or a run not yet submitted.
            None if matches!(t.rt.state, TaskState::Pending | TaskState::Ready | TaskState::Placing) => {
                Released::Requeued
            }
            None => Released::Done,
        }
    }
}

/// What [`JobManager::rm_release`] left to release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// Nothing: released, or nothing was held.
    Done,
    /// An admitted task whose handle the job manager does not hold.
    Admitted,
    /// Perhaps a gang the resource manager requeued after a preemption.
    Requeued,
}

/// Releases, for job `key`, the admitted tasks of `admitted` and the
/// requeued gangs of `requeued` (instances, any order): one walk over the
/// job's tasks, and a scan of the queue only when a requeued run was among
/// them.
pub(crate) fn release_left(
    rm: &mut paceline_resmgr::ResourceManager,
    key: u64,
    admitted: &mut [u32],
    requeued: &mut [u32],
    now_ms: u64,
) {
    if !admitted.is_empty() {
        admitted.sort_unstable();
        rm.release_unplaced(key, admitted, now_ms);
    }
    if !requeued.is_empty() {
        requeued.sort_unstable();
        rm.release_unplaced(key, requeued, now_ms);
        rm.cancel_queued_of(key, requeued);
    }
}

/// The resource manager's view of `tasks` instances of a job from `first`,
/// each needing `per_task`: its kind, priority and preemption rules.
pub(crate) fn gang_spec(
    job_key: u64,
    cfg: &paceline_model::job::JobConfig,
    first: u32,
    tasks: u32,
    per_task: paceline_model::Resources,
) -> GangSpec {
    GangSpec {
        job: job_key,
        first_instance: first,
        kind: cfg.kind,
        priority: cfg.sla.priority,
        // Stateful work is never preempted: its volume ties it to a host.
        preemptible: (cfg.sla.preemptible || cfg.sla.revocable) && cfg.kind != JobKind::Stateful,
        revocable: cfg.sla.revocable && cfg.kind != JobKind::Stateful,
        kill_on_preempt: cfg.sla.kill_on_preempt,
        controller: cfg.controller,
        tasks,
        per_task,
    }
}
