//! Take: a batch of ready tasks, grouped into plugin calls.

use std::collections::BTreeMap;

use paceline_joints::{Need, ReadyTask};

/// Tasks of one round that share a placement slot (and, for tasks pinned to
/// a host, that host), gangs contiguous.
pub(crate) struct Group {
    pub slot: String,
    pub pinned_to: Option<String>,
    pub tasks: Vec<(ReadyTask, Need)>,
}

/// Splits a batch by slot and pinned host, keeping admission order (and so
/// gangs contiguous: a gang is one job, and a job uses one slot). Pinned
/// tasks (daemon instances) get a group per host so that the lease holds
/// just that host and the policy cannot put them elsewhere.
pub(crate) fn by_slot(batch: Vec<(ReadyTask, Need)>) -> Vec<Group> {
    // Keyed by (slot, pinned host).
    type Key = (String, Option<String>);
    let mut groups: BTreeMap<Key, Vec<(ReadyTask, Need)>> = BTreeMap::new();
    for (task, need) in batch {
        let pinned = if need.host_required { need.preferred_host.clone() } else { None };
        groups.entry((need.slot.clone(), pinned)).or_default().push((task, need));
    }
    groups.into_iter().map(|((slot, pinned_to), tasks)| Group { slot, pinned_to, tasks }).collect()
}
