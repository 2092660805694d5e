//! Grouping a batch of ready tasks into plugin calls, and the lease filter of
//! a group.

use std::collections::BTreeMap;

use paceline_model::Resources;
use paceline_resmgr::ReadyTask;

use crate::{LeaseRequest, Need};

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
    let mut groups: BTreeMap<(String, Option<String>), Vec<(ReadyTask, Need)>> = BTreeMap::new();
    for (task, need) in batch {
        let pinned = if need.host_required { need.preferred_host.clone() } else { None };
        groups.entry((need.slot.clone(), pinned)).or_default().push((task, need));
    }
    groups.into_iter().map(|((slot, pinned_to), tasks)| Group { slot, pinned_to, tasks }).collect()
}

/// The lease filter of a group: free capacity of at least the smallest
/// demand (a host with less cannot take any of its tasks), the hard
/// constraints every task shares (so the host side can filter on them),
/// and the hosts some task prefers.
pub fn lease_request_for<'a>(
    needs: impl IntoIterator<Item = (&'a Resources, &'a Need)>,
    max_hosts: usize,
) -> LeaseRequest {
    let mut min: Option<Resources> = None;
    let mut shared: Option<&[paceline_model::Constraint]> = None;
    let mut same_constraints = true;
    let mut include = Vec::new();
    for (demand, need) in needs {
        min = Some(match min {
            None => *demand,
            Some(m) => Resources {
                cpu_millis: m.cpu_millis.min(demand.cpu_millis),
                memory_mib: m.memory_mib.min(demand.memory_mib),
                disk_mib: m.disk_mib.min(demand.disk_mib),
                gpus: m.gpus.min(demand.gpus),
                ports: m.ports.min(demand.ports),
            },
        });
        match shared {
            None => shared = Some(&need.spec.constraints),
            Some(s) if s != need.spec.constraints.as_slice() => same_constraints = false,
            Some(_) => {}
        }
        if let Some(h) = &need.preferred_host
            && !include.contains(h)
        {
            include.push(h.clone());
        }
    }
    LeaseRequest {
        min_free: min.unwrap_or_default(),
        constraints: if same_constraints { shared.map(<[_]>::to_vec).unwrap_or_default() } else { Vec::new() },
        only_hosts: Vec::new(),
        include_hosts: include,
        max_hosts,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use paceline_model::Constraint;
    use paceline_model::task::TaskSpec;

    use super::*;

    fn need(constraints: Vec<Constraint>, preferred: Option<&str>) -> Need {
        let spec = TaskSpec { constraints, ..TaskSpec::default() };
        Need {
            job_id: "j".into(),
            spec: Arc::new(spec),
            preferred_host: preferred.map(str::to_string),
            host_required: false,
            slot: "placement/batch".into(),
            avoid_host: None,
        }
    }

    #[test]
    fn the_filter_takes_the_smallest_demand_and_only_shared_constraints() {
        let zone = Constraint::AttributeEquals { key: "zone".into(), value: "a".into() };
        let a = need(vec![zone.clone()], Some("h1"));
        let b = need(vec![zone.clone()], None);
        let c = need(vec![], Some("h1"));
        let small = Resources::new(500, 2048, 0, 0);
        let big = Resources::new(2000, 1024, 10, 1);
        let req = lease_request_for([(&small, &a), (&big, &b)], 50);
        assert_eq!(req.min_free, Resources::new(500, 1024, 0, 0));
        assert_eq!(req.constraints, vec![zone]);
        assert_eq!(req.include_hosts, vec!["h1".to_string()]);
        assert_eq!(req.max_hosts, 50);
        let mixed = lease_request_for([(&small, &a), (&big, &c)], 50);
        assert!(mixed.constraints.is_empty(), "constraints differ: the plugin filters, not the lease");
        assert_eq!(mixed.include_hosts, vec!["h1".to_string()], "one entry per preferred host");
    }
}
