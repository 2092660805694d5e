//! Feasibility: which hosts can take which tasks, before the policy ranks
//! them. Two steps, both cheap and both outside the plugin:
//!
//! 1. **The lease filter** ([`lease_request_for`]): what the host side can
//!    filter on for a whole group (the smallest demand, the hard constraints
//!    every task shares, preferred hosts), so that a round leases only hosts
//!    that may take some task of the group.
//! 2. **Eligibility** ([`build_placement_request`]): each distinct set of
//!    hard constraints (and a host to avoid) is evaluated once against the
//!    leased hosts, into the list of eligible host indices the plugin gets,
//!    so the plugin's hot loop sees only indices and integers. Fit (free
//!    capacity against demand) is left to the plugin, which sees both, and
//!    checked again by the registry on every answer.

use std::borrow::Borrow;
use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use paceline_joints::contract::IntoContract;
use paceline_joints::{JobHosts, LeaseRequest, Need};
use paceline_model::view::HostView;
use paceline_model::{Constraint, Preference, Resources};
use paceline_plugin_sdk::types::{
    self as sdk, AttributeColumn, ConstraintSet, GpuDevice, GpuHost, GpuTask, HostCount, HostFilter, HostOffer,
    JobInfo, NO_VALUE, PlacementRequest, Task,
};

/// The lease filter of a group: free capacity of at least the smallest
/// demand (a host with less cannot take any of its tasks), the hard
/// constraints every task shares (so the host side can filter on them), and
/// the hosts some task prefers. `ttl_ms` is the lease's life.
pub fn lease_request_for<'a>(
    needs: impl IntoIterator<Item = (&'a Resources, &'a Need)>,
    max_hosts: usize,
    ttl_ms: u64,
) -> LeaseRequest {
    let mut min: Option<Resources> = None;
    let mut shared: Option<&[Constraint]> = None;
    let mut same_constraints = true;
    let mut prefer = Vec::new();
    let mut jobs: BTreeSet<&str> = BTreeSet::new();
    for (demand, need) in needs {
        min = Some(min.map_or(*demand, |m| m.min(demand)));
        jobs.insert(need.job_id.as_str());
        match shared {
            None => shared = Some(&need.constraints),
            Some(s) if s != need.constraints.as_slice() => same_constraints = false,
            Some(_) => {}
        }
        if let Some(h) = &need.preferred_host
            && !prefer.contains(h)
        {
            prefer.push(h.clone());
        }
    }
    let mut request = LeaseRequest::new(min.unwrap_or_default(), max_hosts.max(1), ttl_ms.max(1));
    if same_constraints {
        request.constraints = shared.map(<[_]>::to_vec).unwrap_or_default();
    }
    request.prefer_hosts = prefer;
    request.jobs = jobs.into_iter().map(str::to_string).collect();
    request
}

/// A task waiting for placement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskView {
    /// Job id.
    pub job: String,
    /// Instance number.
    pub instance: u32,
    /// Gang id, shared by tasks placed all or nothing.
    pub gang: u32,
    /// Job priority.
    pub priority: u32,
    /// What one run needs.
    pub demand: Resources,
    /// Hard constraints.
    pub constraints: Vec<Constraint>,
    /// Soft constraints.
    pub preferences: Vec<Preference>,
    /// The host the task prefers (a stateful task's last host).
    pub preferred_host: Option<String>,
    /// A host this task must not be placed on this time (its last launch
    /// there was refused, e.g. a Mesos offer rescinded under it).
    pub avoid_host: Option<String>,
    /// GPU models the task accepts (empty: any).
    pub gpu_models: Vec<String>,
}

/// Builds a plugin request from hosts and tasks. Tasks keep their order (gangs
/// must be contiguous); the request's indices follow `hosts` and `tasks`.
/// `hosts` may be owned views or shared ones (a lease's `Arc<HostView>`).
pub fn build_placement_request<H: Borrow<HostView>>(round: u64, hosts: &[H], tasks: &[TaskView]) -> PlacementRequest {
    build_placement_request_indexed(round, hosts, tasks, None)
}

/// [`build_placement_request`] with the lease's job index
/// ([`Lease::job_hosts`](paceline_joints::Lease::job_hosts)): where each job
/// already runs among `hosts`, so that a job's `existing` counts cost its
/// hosts, not a lookup in every host's `job_counts` (a quarter of a
/// 5,000-host replay's time before). `None` reads the hosts.
pub fn build_placement_request_indexed<H: Borrow<HostView>>(
    round: u64,
    hosts: &[H],
    tasks: &[TaskView],
    job_hosts: Option<&[JobHosts]>,
) -> PlacementRequest {
    let hosts: Vec<&HostView> = hosts.iter().map(Borrow::borrow).collect();
    let indexed: Option<HashMap<&str, &[(u32, u32)]>> =
        job_hosts.map(|index| index.iter().map(|j| (j.job.as_str(), j.hosts.as_slice())).collect());
    // Host names are looked up only for a task's preferred or avoided host:
    // the index is built the first time one is (sorting thousands of names
    // each round was a tenth of a replay's time).
    let host_index: OnceCell<HashMap<&str, u32>> = OnceCell::new();
    let host_at = |name: &str| -> Option<u32> {
        host_index
            .get_or_init(|| hosts.iter().enumerate().map(|(i, h)| (h.name.as_str(), i as u32)).collect())
            .get(name)
            .copied()
    };

    // Attribute columns: only the keys some task scores or spreads on.
    let mut keys: BTreeSet<&str> = BTreeSet::new();
    for t in tasks {
        keys.extend(t.preferences.iter().map(|p| p.key.as_str()));
        keys.extend(t.constraints.iter().filter_map(|c| match c {
            Constraint::SpreadOver { key } => Some(key.as_str()),
            _ => None,
        }));
    }
    let mut symbols: Vec<String> = Vec::new();
    let mut symbol_index: BTreeMap<String, u32> = BTreeMap::new();
    let mut intern = |s: &str, symbols: &mut Vec<String>| -> u32 {
        if let Some(&i) = symbol_index.get(s) {
            return i;
        }
        let i = symbols.len() as u32;
        symbols.push(s.to_string());
        symbol_index.insert(s.to_string(), i);
        i
    };
    let key_index: BTreeMap<&str, u32> = keys.iter().enumerate().map(|(i, k)| (*k, i as u32)).collect();
    let attributes: Vec<AttributeColumn> = keys
        .iter()
        .map(|k| AttributeColumn {
            key: (*k).to_string(),
            values: hosts.iter().map(|h| h.attributes.get(*k).map_or(NO_VALUE, |v| intern(v, &mut symbols))).collect(),
        })
        .collect();

    // Jobs, in order of first appearance.
    let mut job_index: BTreeMap<&str, u32> = BTreeMap::new();
    let mut jobs: Vec<JobInfo> = Vec::new();
    // Constraint sets, deduplicated.
    // A constraint set: hard constraints, preferences and the host to avoid.
    type SetKey<'a> = (&'a [Constraint], &'a [Preference], Option<&'a str>);
    let mut set_index: BTreeMap<SetKey<'_>, u32> = BTreeMap::new();
    let mut constraints: Vec<ConstraintSet> = Vec::new();
    let mut out_tasks = Vec::with_capacity(tasks.len());
    for t in tasks {
        let job = *job_index.entry(t.job.as_str()).or_insert_with(|| {
            let max_per_host = t
                .constraints
                .iter()
                .filter_map(|c| if let Constraint::MaxPerHost { max } = c { Some(*max) } else { None })
                .min()
                .unwrap_or(0);
            let spread_over = t.constraints.iter().find_map(|c| match c {
                Constraint::SpreadOver { key } => key_index.get(key.as_str()).copied(),
                _ => None,
            });
            let existing = match &indexed {
                Some(index) => index
                    .get(t.job.as_str())
                    .map(|on| on.iter().map(|&(host, count)| HostCount { host, count }).collect())
                    .unwrap_or_default(),
                None => hosts
                    .iter()
                    .enumerate()
                    .filter_map(|(i, h)| h.job_counts.get(&t.job).map(|&count| HostCount { host: i as u32, count }))
                    .collect(),
            };
            jobs.push(JobInfo { priority: t.priority, max_per_host, spread_over, existing });
            (jobs.len() - 1) as u32
        });
        let avoid = t.avoid_host.as_deref();
        let set = *set_index.entry((t.constraints.as_slice(), t.preferences.as_slice(), avoid)).or_insert_with(|| {
            let hard: Vec<&Constraint> =
                t.constraints.iter().filter(|c| c.admits(&HostView::default()).is_some()).collect();
            let eligible = if hard.is_empty() && avoid.is_none_or(|a| host_at(a).is_none()) {
                HostFilter::All
            } else {
                let only: Vec<u32> = hosts
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| Some(h.name.as_str()) != avoid && hard.iter().all(|c| c.admits(h) == Some(true)))
                    .map(|(i, _)| i as u32)
                    .collect();
                if only.len() == hosts.len() { HostFilter::All } else { HostFilter::Only(only) }
            };
            let preferences = t
                .preferences
                .iter()
                .filter_map(|p| {
                    let attribute = *key_index.get(p.key.as_str())?;
                    Some(sdk::Preference {
                        attribute,
                        value: symbol_index_lookup(&symbols, &p.value),
                        weight: p.weight,
                    })
                })
                .collect();
            constraints.push(ConstraintSet { eligible, preferences });
            (constraints.len() - 1) as u32
        });
        // A share of one device asks for no whole device (its device is
        // chosen on the GPU side); whole devices are counted.
        let mut demand = t.demand.into_contract();
        demand.gpus = t.demand.whole_gpus();
        out_tasks.push(Task {
            job,
            instance: t.instance,
            gang: t.gang,
            demand,
            constraints: set,
            preferred_host: t.preferred_host.as_deref().and_then(host_at),
        });
    }
    // The GPU side (0.1.2) when some task asks for GPU or some host has a
    // GPU (where a CPU task goes decides whether it strands a host's GPUs):
    // devices per host (a host's `free.gpus` is then its wholly free
    // devices), and each task's ask with its models as symbols. A cluster
    // without GPUs pays nothing for it.
    let wants_gpu = tasks.iter().any(|t| t.demand.gpu_milli > 0) || hosts.iter().any(|h| !h.gpus.is_empty());
    let (gpu_hosts, gpu_tasks) = if wants_gpu {
        let gpu_hosts: Vec<GpuHost> = hosts
            .iter()
            .map(|h| GpuHost {
                devices: h
                    .gpus
                    .iter()
                    .map(|slot| GpuDevice {
                        free_milli: slot.free_milli(),
                        model: if slot.device.model.is_empty() {
                            NO_VALUE
                        } else {
                            intern(&slot.device.model, &mut symbols)
                        },
                    })
                    .collect(),
            })
            .collect();
        let gpu_tasks = tasks
            .iter()
            .map(|t| GpuTask {
                milli: u32::try_from(t.demand.gpu_milli).unwrap_or(u32::MAX),
                models: t.gpu_models.iter().map(|m| intern(m, &mut symbols)).collect(),
            })
            .collect();
        (gpu_hosts, gpu_tasks)
    } else {
        (Vec::new(), Vec::new())
    };
    PlacementRequest {
        round,
        hosts: hosts
            .iter()
            .map(|h| {
                let mut free = h.free().into_contract();
                free.gpus = if h.gpus.is_empty() {
                    h.free().whole_gpus()
                } else {
                    h.gpus.iter().filter(|s| s.used_milli == 0).count() as u64
                };
                let mut total = h.total.into_contract();
                total.gpus = h.total.whole_gpus();
                HostOffer { free, total }
            })
            .collect(),
        attributes,
        symbols,
        jobs,
        constraints,
        tasks: out_tasks,
        gpu_hosts,
        gpu_tasks,
        gpu_workload: Vec::new(),
    }
}

/// A preferred value no host has gets an index past every symbol, so it
/// matches nothing.
fn symbol_index_lookup(symbols: &[String], value: &str) -> u32 {
    symbols.iter().position(|s| s == value).map_or(NO_VALUE - 1, |i| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> Vec<HostView> {
        (0..3)
            .map(|i| {
                let mut h = HostView::new(format!("h{i}"), Resources::new(4000, 8192, 0, 0));
                h.attributes.insert("zone".into(), if i < 2 { "a".into() } else { "b".into() });
                h
            })
            .collect()
    }

    #[test]
    fn hard_constraints_become_eligible_lists_and_sets_are_shared() {
        let zone_b = vec![Constraint::AttributeEquals { key: "zone".into(), value: "b".into() }];
        let t = |instance, constraints: Vec<Constraint>| TaskView {
            job: "j".into(),
            instance,
            gang: instance,
            demand: Resources::new(100, 100, 0, 0),
            constraints,
            ..TaskView::default()
        };
        let req = build_placement_request(7, &hosts(), &[t(0, zone_b.clone()), t(1, zone_b), t(2, vec![])]);
        assert_eq!(req.round, 7);
        assert_eq!(req.constraints.len(), 2);
        assert_eq!(req.constraints[0].eligible, HostFilter::Only(vec![2]));
        assert_eq!(req.constraints[1].eligible, HostFilter::All);
        assert_eq!(req.tasks[1].constraints, 0);
        assert_eq!(req.jobs.len(), 1);
    }

    #[test]
    fn an_avoided_host_is_not_eligible_for_that_task_only() {
        let t = |instance, avoid: Option<&str>| TaskView {
            job: "j".into(),
            instance,
            gang: instance,
            avoid_host: avoid.map(str::to_string),
            ..TaskView::default()
        };
        let hs = hosts();
        let req = build_placement_request(1, &hs, &[t(0, Some("h1")), t(1, None), t(2, Some("gone"))]);
        assert_eq!(req.constraints.len(), 3);
        let h1 = hs.iter().position(|h| h.name == "h1").expect("h1") as u32;
        match &req.constraints[req.tasks[0].constraints as usize].eligible {
            HostFilter::Only(only) => assert!(!only.contains(&h1) && only.len() == hs.len() - 1, "{only:?}"),
            HostFilter::All => panic!("h1 must be excluded"),
        }
        assert_eq!(req.constraints[req.tasks[1].constraints as usize].eligible, HostFilter::All);
        assert_eq!(
            req.constraints[req.tasks[2].constraints as usize].eligible,
            HostFilter::All,
            "a host not offered changes nothing"
        );
    }

    #[test]
    fn spread_and_preferences_get_columns_and_existing_counts() {
        let mut hs = hosts();
        hs[1].job_counts.insert("j".into(), 2);
        let t = TaskView {
            job: "j".into(),
            constraints: vec![Constraint::SpreadOver { key: "zone".into() }, Constraint::MaxPerHost { max: 3 }],
            preferences: vec![Preference { key: "zone".into(), value: "b".into(), weight: 5 }],
            preferred_host: Some("h2".into()),
            ..TaskView::default()
        };
        let req = build_placement_request(0, &hs, &[t]);
        assert_eq!(req.attributes.len(), 1);
        assert_eq!(req.attributes[0].key, "zone");
        let b = req.symbols.iter().position(|s| s == "b").expect("b interned") as u32;
        assert_eq!(req.attributes[0].values[2], b);
        assert_eq!(req.constraints[0].preferences[0].value, b);
        assert_eq!(req.jobs[0].max_per_host, 3);
        assert_eq!(req.jobs[0].spread_over, Some(0));
        assert_eq!(req.jobs[0].existing, vec![HostCount { host: 1, count: 2 }]);
        assert_eq!(req.tasks[0].preferred_host, Some(2));
    }

    #[test]
    fn the_lease_job_index_gives_the_same_request_as_reading_the_hosts() {
        let mut hs = hosts();
        hs[0].job_counts.insert("j".into(), 1);
        hs[2].job_counts.insert("j".into(), 4);
        hs[2].job_counts.insert("k".into(), 1);
        let t = |job: &str, instance| TaskView { job: job.into(), instance, ..TaskView::default() };
        let tasks = [t("j", 0), t("k", 0), t("new", 0), t("j", 1)];
        let index = vec![
            JobHosts { job: "j".into(), hosts: vec![(0, 1), (2, 4)] },
            JobHosts { job: "k".into(), hosts: vec![(2, 1)] },
        ];
        let scanned = build_placement_request(3, &hs, &tasks);
        let indexed = build_placement_request_indexed(3, &hs, &tasks, Some(&index));
        assert_eq!(indexed, scanned);
        assert_eq!(scanned.jobs[0].existing, vec![HostCount { host: 0, count: 1 }, HostCount { host: 2, count: 4 }]);
        assert!(scanned.jobs[2].existing.is_empty(), "a job running nowhere");
    }

    #[test]
    fn the_lease_request_names_each_job_once() {
        let mut other = need(vec![], None);
        other.job_id = "a".into();
        let j = need(vec![], None);
        let r = Resources::new(1, 1, 0, 0);
        let req = lease_request_for([(&r, &j), (&r, &other), (&r, &j)], 5, 1_000);
        assert_eq!(req.jobs, vec!["a".to_string(), "j".to_string()]);
    }

    fn need(constraints: Vec<Constraint>, preferred: Option<&str>) -> Need {
        Need {
            job_id: "j".into(),
            constraints,
            preferred_host: preferred.map(str::to_string),
            slot: "placement/batch".into(),
            ..Need::default()
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
        let req = lease_request_for([(&small, &a), (&big, &b)], 50, 30_000);
        assert_eq!(req.min_free, Resources::new(500, 1024, 0, 0));
        assert_eq!(req.constraints, vec![zone]);
        assert_eq!(req.prefer_hosts, vec!["h1".to_string()]);
        assert_eq!((req.max_hosts, req.ttl_ms), (50, 30_000));
        let mixed = lease_request_for([(&small, &a), (&big, &c)], 50, 30_000);
        assert!(mixed.constraints.is_empty(), "constraints differ: the plugin filters, not the lease");
        assert_eq!(mixed.prefer_hosts, vec!["h1".to_string()], "one entry per preferred host");
    }
}
