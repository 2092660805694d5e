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
        kit::service(job, tasks, event, false)
    }
}

export_lifecycle!(Stateless);

#[cfg(test)]
mod tests;
