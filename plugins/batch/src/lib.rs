//! `batch`: the default lifecycle of batch jobs (run to completion).
//!
//! - Created (or grown): launch every instance not yet started.
//! - An instance failed or was lost: restart it after an exponential
//!   backoff while its failures are within `max_failures_per_instance`;
//!   past that the job is FAILED (the runtime then kills what still runs).
//! - Every instance succeeded: the job is SUCCEEDED.
//! - A max-run-time timer fired and the run is past the limit: kill it (the
//!   runtime records the run as FAILED with reason `MAX_RUN_TIME`).
//! - Kill requested: kill every live instance.
//! - A restart or update in progress: rolling batches, as for services.
//!
//! A pure function of its input: no clock, no I/O.

use paceline_plugin_sdk::prelude::*;
use plugin_lifecycle_kit as kit;

/// The batch lifecycle.
#[derive(Debug)]
pub struct Batch;

impl LifecyclePolicy for Batch {
    fn on_event(job: &JobView, tasks: &[TaskView], event: &Event) -> Vec<Action> {
        let mut out = Vec::new();
        if kit::job_done(job) {
            return out;
        }
        match event {
            Event::JobCreated | Event::Scaled | Event::UpdateChanged | Event::HostsChanged => {
                kit::converge_count(job, tasks, &mut out);
            }
            Event::KillRequested => kit::kill_all(tasks, &mut out),
            Event::Timer(i) => {
                if let Some(t) = kit::task(tasks, *i)
                    && job.max_run_time_ms > 0
                    && t.state == TaskState::Running
                    && t.running_for_ms.is_some_and(|ms| ms >= job.max_run_time_ms)
                {
                    out.push(Action::Kill(*i));
                }
            }
            Event::TaskChanged(change) => match change.state {
                TaskState::Failed | TaskState::Lost => {
                    if let Some(t) = kit::task(tasks, change.instance)
                        && t.instance < job.instance_count
                    {
                        if t.failures > job.max_failures_per_instance {
                            out.push(Action::MarkJob(JobState::Failed));
                        } else {
                            out.push(kit::restart(t));
                        }
                    }
                }
                TaskState::Succeeded => {
                    let counted = tasks.iter().filter(|t| t.instance < job.instance_count);
                    let (mut n, mut ok) = (0u32, 0u32);
                    for t in counted {
                        n += 1;
                        ok += u32::from(t.state == TaskState::Succeeded);
                    }
                    if n >= job.instance_count && ok == n {
                        out.push(Action::MarkJob(JobState::Succeeded));
                    }
                }
                _ => {}
            },
        }
        // A restart or update of a running batch job rolls like a service's.
        if !matches!(event, Event::KillRequested) {
            kit::rolling_update(job, tasks, false, &mut out);
        }
        out
    }
}

export_lifecycle!(Batch);

#[cfg(test)]
mod tests;
