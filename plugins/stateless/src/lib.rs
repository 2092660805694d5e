//! `stateless`: the default lifecycle of services without local state.
//!
//! - Keep `instance_count` instances running: launch those never started,
//!   kill those at or above the count (scale down).
//! - A run that ends (failed, lost, or even succeeded) is restarted after an
//!   exponential backoff: a service never ends on its own.
//! - Rolling update: batches of `min(batch_size, max_unavailable)`
//!   instances; the runtime restarts a batch on the target version and moves
//!   an instance to `done` once it runs healthy; more failures than allowed
//!   finish the update (rolling back if asked). See
//!   [`plugin_lifecycle_kit::rolling_update`].
//! - Kill requested: kill everything.

use paceline_plugin_sdk::prelude::*;
use plugin_lifecycle_kit as kit;

/// The stateless lifecycle.
#[derive(Debug)]
pub struct Stateless;

impl LifecyclePolicy for Stateless {
    fn on_event(job: &JobView, tasks: &[TaskView], event: &Event) -> Vec<Action> {
        service(job, tasks, event, false)
    }
}

/// The service logic shared with `stateful` (which updates one at a time).
pub fn service(
    job: &JobView,
    tasks: &[TaskView],
    event: &Event,
    one_at_a_time: bool,
) -> Vec<Action> {
    let mut out = Vec::new();
    if kit::job_done(job) || job.state == JobState::Killing {
        return out;
    }
    match event {
        Event::KillRequested => {
            kit::kill_all(tasks, &mut out);
            return out;
        }
        Event::JobCreated | Event::Scaled | Event::HostsChanged | Event::UpdateChanged => {
            kit::converge_count(job, tasks, &mut out)
        }
        Event::TaskChanged(change) => {
            if let Some(t) = kit::task(tasks, change.instance)
                && t.instance < job.instance_count
                && matches!(
                    change.state,
                    TaskState::Failed | TaskState::Lost | TaskState::Succeeded
                )
            {
                out.push(kit::restart(t));
            }
        }
        Event::Timer(_) => {}
    }
    kit::rolling_update(job, tasks, one_at_a_time, &mut out);
    out
}

export_lifecycle!(Stateless);

#[cfg(test)]
mod tests;
