//! Gang discovery at launch (docs/user-guide.md, "Gang discovery"): each
//! gang member a launch starts gets its world's peer list (ranks, addresses,
//! ports) in its environment and in a file the host writes.
//!
//! The list is assembled here because this is where every member's host is
//! known: a gang is placed whole in one round and committed in one call. A
//! host picks a run's ports when it starts it, too late for the others to
//! be told, so a member's ports are picked here instead, from the host's
//! `port_range` attribute, and the host must assign exactly those. A member
//! launched later (a replacement) gets the list as it is then: the members
//! on hosts with the ports they hold.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use paceline_model::gang::{self, GangLaunch, Member};

use crate::state::Mem;

/// What one member's launch gets.
#[derive(Debug)]
pub(crate) struct MemberLaunch {
    /// `PACELINE_GANG_*` and the framework's variables.
    pub env: BTreeMap<String, String>,
    /// Its exact ports and the peers file.
    pub launch: GangLaunch,
}

/// Discovery for the instances of job `key` placed now (`placed`: instance
/// → host), keyed by instance; empty for a job without gangs.
pub(crate) fn plan(m: &Mem, key: u64, placed: &BTreeMap<u32, String>) -> BTreeMap<u32, MemberLaunch> {
    let mut out = BTreeMap::new();
    let Some(job) = m.jobs.get(&key) else { return out };
    let cfg = job.config();
    let size = cfg.sla.min_running_instances.unwrap_or(1);
    if size <= 1 || placed.is_empty() {
        return out;
    }
    let attribute = |host: &str, name: &str| {
        m.hosts.iter().find(|(h, _, _)| h == host).and_then(|(_, labels, _)| labels.get(name).cloned())
    };
    let address = |host: &str| attribute(host, gang::ADDRESS_ATTRIBUTE).unwrap_or_else(|| host.to_string());
    let port_names = |i: u32| -> Vec<String> {
        job.tasks
            .get(i as usize)
            .map(|t| job.config_at(t.rt.desired_config_version).task_spec(i).ports.clone())
            .unwrap_or_default()
    };

    // Ports held on the hosts of this launch: every run there that the job
    // manager knows of (a run launched without exact ports is known once
    // its host reports them; the host refuses a launch that meets one
    // before, and the member is placed again).
    let hosts: BTreeSet<&String> = placed.values().collect();
    let mut held: HashMap<&str, BTreeSet<u16>> = hosts.iter().map(|h| (h.as_str(), BTreeSet::new())).collect();
    for t in m.jobs.values().flat_map(|j| j.tasks.iter()) {
        if let Some(set) = t.rt.host.as_deref().filter(|_| t.rt.state.is_on_host()).and_then(|h| held.get_mut(h)) {
            set.extend(t.rt.ports.values().copied());
        }
    }
    let mut pinned: BTreeMap<u32, Vec<(String, u16)>> = BTreeMap::new();
    for (&i, host) in placed {
        let names = port_names(i);
        if names.is_empty() {
            continue;
        }
        let range = attribute(host, gang::PORT_RANGE_ATTRIBUTE).and_then(|r| gang::parse_port_range(&r));
        let Some(set) = held.get_mut(host.as_str()) else { continue };
        match range.and_then(|r| gang::pick_ports(r, set, names.len())) {
            Some(ports) => {
                set.extend(ports.iter().copied());
                pinned.insert(i, names.into_iter().zip(ports).collect());
            }
            // The host picks them; its peers are not told them.
            None => tracing::warn!(
                job = %job.id,
                instance = i,
                %host,
                "gang member's ports cannot be chosen (the host reports no port_range, or it is full); \
                 its peers will not know them"
            ),
        }
    }

    // One list per world with a member in this launch.
    let mut worlds: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    for &i in placed.keys() {
        if let Some(world) = gang::world_of(i, size, cfg.instance_count) {
            worlds.entry(world).or_default().push(i);
        }
    }
    for ((first, world_size), starting) in worlds {
        let members: Vec<Member> = (first..first + world_size)
            .filter_map(|j| {
                if let Some(host) = placed.get(&j) {
                    let ports = pinned.get(&j).cloned().unwrap_or_default();
                    return Some(Member { instance: j, host: host.clone(), address: address(host), ports });
                }
                // A member already running (this launch replaces another):
                // where it is and the ports it holds, in its spec's order.
                let t = job.tasks.get(j as usize).filter(|t| t.rt.state.is_on_host())?;
                let host = t.rt.host.clone()?;
                let ports =
                    port_names(j).into_iter().filter_map(|n| t.rt.ports.get(&n).map(|p| (n.clone(), *p))).collect();
                Some(Member { instance: j, address: address(&host), host, ports })
            })
            .collect();
        let list = gang::peers(first, members);
        let peers_json = match serde_json::to_string(&list) {
            Ok(json) => json,
            Err(e) => {
                // Plain strings and numbers: cannot fail; launch without.
                tracing::error!(job = %job.id, error = %e, "serialising a gang's peer list");
                continue;
            }
        };
        tracing::info!(
            job = %job.id,
            first,
            size = world_size,
            starting = starting.len(),
            hosts = %list.iter().map(gang::GangPeer::endpoint).collect::<Vec<_>>().join(","),
            "gang peers"
        );
        for i in starting {
            let env = gang::env(&list, world_size, i - first, cfg.gang.discovery);
            let ports = pinned.remove(&i).unwrap_or_default().into_iter().collect();
            out.insert(i, MemberLaunch { env, launch: GangLaunch { ports, peers_json: peers_json.clone() } });
        }
    }
    out
}
