//! Helpers shared by the default lifecycle policies (`plugins/batch`,
//! `stateless`, `stateful`, `daemon`): what counts as a live run, restart
//! backoff, the rolling-update step every service kind uses, and
//! [`service`], the whole policy of long-running services.
//!
//! Owns no policy of its own and no state: every function is a pure
//! function of the job and task views, so the policies stay replayable.
//! Must not depend on anything in `host/`.

use paceline_plugin_sdk::types::{Action, Event, JobState, JobView, Restart, TaskState, TaskView};

/// First restart delay; doubles per consecutive failure.
pub const BACKOFF_BASE_MS: u64 = 1_000;
/// Restart delay ceiling.
pub const BACKOFF_MAX_MS: u64 = 60_000;

/// The run holds or is about to hold a host (anything not terminal and not
/// merely created).
pub fn is_live(state: TaskState) -> bool {
    !is_terminal(state) && state != TaskState::Initialized
}

/// The run ended.
pub fn is_terminal(state: TaskState) -> bool {
    matches!(state, TaskState::Succeeded | TaskState::Failed | TaskState::Lost | TaskState::Killed)
}

/// The job ended: a policy answers nothing more for it.
pub fn job_done(job: &JobView) -> bool {
    matches!(job.state, JobState::Succeeded | JobState::Failed | JobState::Killed)
}

/// Exponential restart backoff after `failures` consecutive failures (1 = first).
pub fn backoff_ms(failures: u32) -> u64 {
    let shift = failures.saturating_sub(1).min(16);
    BACKOFF_BASE_MS.saturating_mul(1u64 << shift).min(BACKOFF_MAX_MS)
}

/// A restart of `instance` after its backoff.
pub fn restart(t: &TaskView) -> Action {
    Action::RestartAfter(Restart { instance: t.instance, delay_ms: backoff_ms(t.failures.max(1)) })
}

/// The view of instance `i`, if the runtime sent one.
pub fn task(tasks: &[TaskView], i: u32) -> Option<&TaskView> {
    // Tasks arrive ordered by instance, usually dense: try the index first.
    match tasks.get(i as usize) {
        Some(t) if t.instance == i => Some(t),
        _ => tasks.iter().find(|t| t.instance == i),
    }
}

/// Launch every instance below the job's count that was created but never
/// started; kill every live instance at or above it (the job shrank).
pub fn converge_count(job: &JobView, tasks: &[TaskView], out: &mut Vec<Action>) {
    for t in tasks {
        if t.instance < job.instance_count && t.state == TaskState::Initialized {
            out.push(Action::Launch(t.instance));
        } else if t.instance >= job.instance_count && is_live(t.state) && t.state != TaskState::Killing {
            out.push(Action::Kill(t.instance));
        }
    }
}

/// Kill every live instance (the job is being killed).
pub fn kill_all(tasks: &[TaskView], out: &mut Vec<Action>) {
    out.extend(
        tasks.iter().filter(|t| is_live(t.state) && t.state != TaskState::Killing).map(|t| Action::Kill(t.instance)),
    );
}

/// One step of a rolling update, shared by the service kinds.
///
/// - Paused or no update: nothing.
/// - More failed instances than `max_failures`: finish, rolling back when
///   the update asks for it.
/// - A batch in flight: wait for it (the runtime moves instances to `done`
///   once they run the target version, healthy when they have a check).
/// - Otherwise: the next `min(batch_size, max_unavailable)` instances below
///   the job's count that do not run the target version, lowest first
///   (`one_at_a_time` forces batches of one, for stateful jobs); none left
///   means the update succeeded.
pub fn rolling_update(job: &JobView, tasks: &[TaskView], one_at_a_time: bool, out: &mut Vec<Action>) {
    let Some(u) = &job.update else { return };
    if u.paused {
        return;
    }
    if u.failed.len() as u64 > u64::from(u.max_failures) {
        out.push(Action::UpdateFinished(u.rollback_on_failure));
        return;
    }
    if !u.in_flight.is_empty() {
        return;
    }
    let mut size = if u.batch_size == 0 { job.instance_count } else { u.batch_size };
    if u.max_unavailable > 0 {
        size = size.min(u.max_unavailable);
    }
    if one_at_a_time {
        size = 1;
    }
    let size = size.max(1) as usize;
    let next: Vec<u32> = tasks
        .iter()
        .filter(|t| t.instance < job.instance_count)
        .filter(|t| t.config_version != u.target_version)
        .filter(|t| !u.done.contains(&t.instance) && !u.failed.contains(&t.instance))
        .map(|t| t.instance)
        .take(size)
        .collect();
    if next.is_empty() {
        out.push(Action::UpdateFinished(false));
    } else {
        out.push(Action::UpdateBatch(next));
    }
}

/// The policy of long-running services (`stateless`, and `stateful` with
/// `one_at_a_time`): keep the count running, restart any run that ends
/// (with backoff), kill everything on request, and take the rolling-update
/// step (one instance at a time, in instance order, when `one_at_a_time`).
pub fn service(job: &JobView, tasks: &[TaskView], event: &Event, one_at_a_time: bool) -> Vec<Action> {
    let mut out = Vec::new();
    if job_done(job) || job.state == JobState::Killing {
        return out;
    }
    match event {
        Event::KillRequested => {
            kill_all(tasks, &mut out);
            return out;
        }
        Event::JobCreated | Event::Scaled | Event::HostsChanged | Event::UpdateChanged => {
            converge_count(job, tasks, &mut out)
        }
        Event::TaskChanged(change) => {
            if let Some(t) = task(tasks, change.instance)
                && t.instance < job.instance_count
                && matches!(change.state, TaskState::Failed | TaskState::Lost | TaskState::Succeeded)
            {
                out.push(restart(t));
            }
        }
        Event::Timer(_) => {}
    }
    rolling_update(job, tasks, one_at_a_time, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_plugin_sdk::types::UpdateView;

    #[test]
    fn backoff_doubles_to_a_ceiling() {
        assert_eq!((backoff_ms(1), backoff_ms(2), backoff_ms(3)), (1_000, 2_000, 4_000));
        assert_eq!(backoff_ms(50), BACKOFF_MAX_MS);
    }

    #[test]
    fn rolling_update_picks_batches_and_finishes() {
        let tasks: Vec<TaskView> = (0..5)
            .map(|i| TaskView { instance: i, state: TaskState::Running, config_version: 1, ..Default::default() })
            .collect();
        let mut job = JobView {
            instance_count: 5,
            update: Some(UpdateView { target_version: 2, batch_size: 2, ..Default::default() }),
            ..Default::default()
        };
        let mut out = vec![];
        rolling_update(&job, &tasks, false, &mut out);
        assert_eq!(out, vec![Action::UpdateBatch(vec![0, 1])]);
        let mut out = vec![];
        rolling_update(&job, &tasks, true, &mut out);
        assert_eq!(out, vec![Action::UpdateBatch(vec![0])]);
        if let Some(u) = job.update.as_mut() {
            u.failed = vec![0];
            u.rollback_on_failure = true;
        }
        let mut out = vec![];
        rolling_update(&job, &tasks, false, &mut out);
        assert_eq!(out, vec![Action::UpdateFinished(true)]);
    }
}
