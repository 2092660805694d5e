//! `daemon`: one instance on every host that matches the job.
//!
//! Convention with the runtime: `job.matching_hosts` is indexed by
//! instance. Entry `i` names the host instance `i` is bound to, or is empty
//! when that host no longer matches (it left, is draining, or stopped
//! accepting tasks). `instance_count` equals the list's length. So:
//! - a named host whose instance is not live (never started, or ended):
//!   launch it (after a backoff when it failed);
//! - an empty entry whose instance is live: kill it;
//! - rolling updates as for stateless jobs.

use paceline_plugin_sdk::prelude::*;
use plugin_lifecycle_kit as kit;

/// The daemon lifecycle.
#[derive(Debug)]
pub struct Daemon;

impl LifecyclePolicy for Daemon {
    fn on_event(job: &JobView, tasks: &[TaskView], event: &Event) -> Vec<Action> {
        let mut out = Vec::new();
        if kit::job_done(job) || job.state == JobState::Killing {
            return out;
        }
        let wanted = |i: u32| job.matching_hosts.get(i as usize).is_some_and(|h| !h.is_empty());
        match event {
            Event::KillRequested => {
                kit::kill_all(tasks, &mut out);
                return out;
            }
            Event::JobCreated | Event::Scaled | Event::HostsChanged | Event::UpdateChanged => {
                for i in 0..job.matching_hosts.len() as u32 {
                    let state = kit::task(tasks, i).map(|t| t.state);
                    let live = state.is_some_and(kit::is_live);
                    if wanted(i) && !live && matches!(state, None | Some(TaskState::Initialized)) {
                        out.push(Action::Launch(i));
                    } else if wanted(i) && state.is_some_and(|s| s == TaskState::Killed) {
                        // Killed by a drain or a host that came back: start again.
                        out.push(Action::Launch(i));
                    } else if !wanted(i) && live && state != Some(TaskState::Killing) {
                        out.push(Action::Kill(i));
                    }
                }
            }
            Event::TaskChanged(change) => {
                if let Some(t) = kit::task(tasks, change.instance)
                    && wanted(t.instance)
                    && matches!(change.state, TaskState::Failed | TaskState::Lost | TaskState::Succeeded)
                {
                    out.push(kit::restart(t));
                }
            }
            Event::Timer(_) => {}
        }
        kit::rolling_update(job, tasks, false, &mut out);
        out
    }
}

export_lifecycle!(Daemon);

#[cfg(test)]
mod tests;
