//! Shared helpers: runtimes, registries, workloads.

use std::sync::Arc;
use std::time::Duration;

use paceline_plugin::{MemoryStore, PluginRuntime, Registry, RuntimeConfig};
use paceline_plugin_sdk::types::*;

pub fn runtime_with(config: RuntimeConfig) -> Arc<PluginRuntime> {
    Arc::new(PluginRuntime::new(config).expect("runtime starts"))
}

pub fn runtime() -> Arc<PluginRuntime> {
    runtime_with(RuntimeConfig { call_deadline: Duration::from_secs(10), ..RuntimeConfig::default() })
}

pub fn registry(runtime: Arc<PluginRuntime>) -> Registry {
    Registry::open(runtime, Arc::new(MemoryStore::default())).expect("registry opens")
}

/// A deterministic pseudo-random round: `tasks` tasks (gangs of 1 to 3)
/// over `hosts` hosts, some partly used, two zones, some constraints.
pub fn workload(tasks: u32, hosts: u32, seed: u64) -> PlacementRequest {
    let mut s = seed;
    let mut next = move |n: u64| {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 33) % n
    };
    let hosts_v: Vec<HostOffer> = (0..hosts)
        .map(|_| {
            let total =
                Resources::new(4000 * (1 + next(4)), 8192 * (1 + next(4)), 100_000, if next(5) == 0 { 4 } else { 0 });
            let used = Resources::new(next(total.cpu_millis / 2), next(total.memory_mib / 2), 0, 0);
            HostOffer { free: total.saturating_sub(&used), total }
        })
        .collect();
    let eligible: Vec<u32> = (0..hosts).filter(|h| h % 3 != 0).collect();
    let mut tasks_v = Vec::new();
    let mut gang = 0;
    while tasks_v.len() < tasks as usize {
        let size = 1 + next(3) as usize;
        let demand = Resources::new(250 * (1 + next(8)), 512 * (1 + next(8)), 100, if next(6) == 0 { 1 } else { 0 });
        let job = next(3) as u32;
        for i in 0..size.min(tasks as usize - tasks_v.len()) {
            tasks_v.push(Task { job, instance: i as u32, gang, demand, constraints: (gang % 2), preferred_host: None });
        }
        gang += 1;
    }
    PlacementRequest {
        gpu_hosts: Vec::new(),
        gpu_tasks: Vec::new(),
        gpu_workload: Vec::new(),
        round: seed,
        hosts: hosts_v,
        attributes: vec![AttributeColumn { key: "zone".into(), values: (0..hosts).map(|h| h % 2).collect() }],
        symbols: vec!["a".into(), "b".into()],
        jobs: vec![
            JobInfo::default(),
            JobInfo { max_per_host: 2, spread_over: Some(0), ..JobInfo::default() },
            JobInfo { priority: 5, ..JobInfo::default() },
        ],
        constraints: vec![
            ConstraintSet::default(),
            ConstraintSet {
                eligible: HostFilter::Only(eligible),
                preferences: vec![Preference { attribute: 0, value: 1, weight: 3 }],
            },
        ],
        tasks: tasks_v,
    }
}
