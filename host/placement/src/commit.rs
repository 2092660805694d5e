//! Commit: the policy's answer, handed back to the ready queue. Placed tasks
//! go to [`ReadyQueue::commit`](paceline_joints::ReadyQueue::commit), whose
//! owner (the job manager) moves each one that still waits to PLACED, writes
//! it and launches it; unplaced ones go back with the policy's reason.

use std::sync::Arc;

use paceline_joints::contract::FromContract;
use paceline_joints::{Need, Placement, ReadyTask, TaskHandle};
use paceline_model::UnplacedReason;
use paceline_model::gpu::GpuGrant;
use paceline_model::view::HostView;
use paceline_plugin_sdk::types::PlacementResult;

/// A validated answer in the queue's terms.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub placements: Vec<Placement>,
    pub unplaced: Vec<(TaskHandle, UnplacedReason)>,
}

/// Reads `result` against the request it answered (`tasks` and `hosts` in the
/// request's order). The registry has validated the indices; any it had not
/// would be skipped here, never indexed out of range.
pub(crate) fn outcome(tasks: &[(ReadyTask, Need)], hosts: &[Arc<HostView>], result: &PlacementResult) -> Outcome {
    let grants: std::collections::HashMap<u32, &[u32]> =
        result.grants.iter().map(|g| (g.task, g.devices.as_slice())).collect();
    let placements = result
        .assignments
        .iter()
        .filter_map(|a| {
            let (task, _) = tasks.get(a.task as usize)?;
            let devices = grants.get(&a.task).map(|d| d.to_vec()).unwrap_or_default();
            let gpu = if devices.is_empty() {
                GpuGrant::default()
            } else {
                GpuGrant { devices, milli_each: paceline_model::gpu::shape(&task.resources).1 }
            };
            Some(Placement { task: *task, host: hosts.get(a.host as usize)?.name.clone(), gpu })
        })
        .collect();
    let unplaced = result
        .unplaced
        .iter()
        .filter_map(|u| Some((tasks.get(u.task as usize)?.0.id, UnplacedReason::from_contract(u.reason))))
        .collect();
    Outcome { placements, unplaced }
}
