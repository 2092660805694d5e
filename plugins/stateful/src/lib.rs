//! `stateful`: the default lifecycle of services with persistent volumes.
//!
//! Like `stateless` (keep the count running, restart with backoff), with
//! two differences that matter for local state:
//! - a restart happens in place: the runtime gives the new run the
//!   instance's last host as its preferred host, where its volume lives;
//! - updates move one instance at a time, in instance order, so a quorum
//!   of replicas stays up.
//!
//! The runtime also submits stateful gangs as non-preemptible.

use paceline_plugin_sdk::prelude::*;
use plugin_lifecycle_kit as kit;

/// The stateful lifecycle.
#[derive(Debug)]
pub struct Stateful;

impl LifecyclePolicy for Stateful {
    fn on_event(job: &JobView, tasks: &[TaskView], event: &Event) -> Vec<Action> {
        kit::service(job, tasks, event, true)
    }
}

export_lifecycle!(Stateful);

#[cfg(test)]
mod tests;
