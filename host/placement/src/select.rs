//! Select: the one plugin call of a group. The policy ranks the leased hosts
//! for the group's tasks and selects one per task (or leaves a task
//! unplaced with a reason); the registry validates the answer and falls back
//! to an earlier version or the native policy when the plugin traps, runs
//! past its deadline or answers badly.

use std::collections::HashMap;
use std::sync::Arc;

use paceline_joints::{Lease, Need, ReadyTask};
use paceline_plugin::{Names, Registry, ServedBy};
use paceline_plugin_sdk::types::PlacementResult;
use tracing::warn;

use crate::feasible::{TaskView, build_placement_request_indexed};
use crate::narrow::{narrow, widen};

/// A call answered by someone other than the version tried first: who
/// failed, how, and who answered instead (for the `PluginFellBack` event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FellBack {
    /// The version tried first (`name@version`).
    pub failed: String,
    /// How it failed (`trap`, `deadline`, …).
    pub fault: &'static str,
    /// Who answered: a version or `native policy NAME`.
    pub served_by: String,
}

/// A group's answer: the policy's result (in the lease's host indices),
/// whether a fallback gave it, and what narrowing offered.
pub(crate) struct Selected {
    pub result: PlacementResult,
    pub fell_back: Option<FellBack>,
    /// Hosts feasible for some task of the group.
    pub feasible: usize,
    /// Hosts the plugin was offered (decision 0054).
    pub offered: usize,
}

/// Asks `slot` to place `tasks` on `hosts`, offering the plugin the
/// candidates the slot's setting allows (`crate::narrow`); `None` when the
/// slot failed outright (no version and no native policy answered validly).
pub(crate) async fn place(
    registry: &Arc<Registry>,
    slot: &str,
    tasks: &[(ReadyTask, Need)],
    lease: &Lease,
    round: u64,
    workload: Vec<paceline_plugin_sdk::types::TaskClass>,
) -> Option<Selected> {
    let mut request =
        build_placement_request_indexed(round, &lease.hosts, &task_views(tasks), lease.job_hosts.as_deref());
    if !request.gpu_tasks.is_empty() {
        request.gpu_workload = workload;
    }
    let narrowing = narrow(&request, registry.candidates(slot));
    let (feasible, offered) = (narrowing.feasible, narrowing.offered);
    let (request, kept) = match narrowing.narrowed {
        Some(n) => (n.request, Some(n.hosts)),
        None => (request, None),
    };
    // Names for a shadow run's per-task diff, copied only while one runs.
    let names = registry.is_shadowed(slot).then(|| Names {
        tasks: tasks.iter().map(|(t, need)| format!("{}/{}", need.job_id, t.instance)).collect(),
        hosts: match &kept {
            Some(kept) => kept.iter().filter_map(|&h| lease.hosts.get(h as usize)).map(|h| h.name.clone()).collect(),
            None => lease.hosts.iter().map(|h| h.name.clone()).collect(),
        },
    });
    let registry = registry.clone();
    let slot_name = slot.to_string();
    // Wasm calls are synchronous and bounded by the runtime's deadline.
    let call = move || registry.place_named(&slot_name, &request, || names.unwrap_or_default());
    match tokio::task::spawn_blocking(call).await {
        Ok(Ok(answer)) => {
            let fell_back = answer.faults.first().map(|first| {
                warn!(slot, served_by = ?answer.served_by, faults = answer.faults.len(), "placement fell back");
                FellBack {
                    failed: first.version.clone(),
                    fault: first.kind.as_str(),
                    served_by: match &answer.served_by {
                        ServedBy::Version(id) => id.clone(),
                        ServedBy::Native(name) => format!("the native policy {name}"),
                    },
                }
            });
            let result = match &kept {
                Some(kept) => widen(kept, answer.value),
                None => answer.value,
            };
            Some(Selected { result, fell_back, feasible, offered })
        }
        Ok(Err(e)) => {
            warn!(slot, error = %e, "placement slot failed");
            None
        }
        Err(e) => {
            warn!(slot, error = %e, "placement call panicked");
            None
        }
    }
}

/// The plugin's view of a group's tasks; gang ids renumbered densely.
fn task_views(tasks: &[(ReadyTask, Need)]) -> Vec<TaskView> {
    let mut gangs: HashMap<u64, u32> = HashMap::new();
    tasks
        .iter()
        .map(|(t, need)| {
            let next = gangs.len() as u32;
            let gang = *gangs.entry(t.gang).or_insert(next);
            TaskView {
                job: need.job_id.clone(),
                instance: t.instance,
                gang,
                priority: t.priority,
                demand: t.resources,
                constraints: need.constraints.clone(),
                preferences: need.preferences.clone(),
                preferred_host: need.preferred_host.clone(),
                avoid_host: need.avoid_host.clone(),
                gpu_models: need.gpu_models.clone(),
            }
        })
        .collect()
}
