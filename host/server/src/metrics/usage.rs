//! What running tasks actually use, as their agents measured it, read at
//! scrape time: per pool (summed over its running tasks that were measured,
//! interior pools over their subtree, beside `pool_allocation`), and per
//! host behind `metrics_per_host`. Never per task: a series per task would
//! grow with every run (docs/operations.md, "Metrics").

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use paceline_hostmgr::HostAccess;
use paceline_jobmgr::JobManager;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::gauges;

/// Measured CPU and memory per pool (and per host when asked).
pub struct UsageCollector {
    hosts: Arc<dyn HostAccess>,
    jobs: Arc<JobManager>,
    per_host: bool,
}

impl std::fmt::Debug for UsageCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageCollector").finish_non_exhaustive()
    }
}

impl UsageCollector {
    /// Over the cluster's host and job managers; `per_host`: also one
    /// series per host (`metrics_per_host`).
    pub fn new(hosts: Arc<dyn HostAccess>, jobs: Arc<JobManager>, per_host: bool) -> Self {
        UsageCollector { hosts, jobs, per_host }
    }
}

/// Sums per pool (with its ancestors) and per host: (cpu millicores,
/// memory MiB, tasks measured).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Sums {
    pub pools: BTreeMap<String, [u64; 3]>,
    pub hosts: BTreeMap<String, [u64; 3]>,
}

/// A pool path and its ancestors: `/a/b` → `/a/b`, `/a`, `/`.
fn with_ancestors(pool: &str) -> Vec<String> {
    let mut out = vec![pool.to_owned()];
    let mut p = pool;
    while let Some((parent, _)) = p.rsplit_once('/') {
        let parent = if parent.is_empty() { "/" } else { parent };
        if out.last().is_some_and(|l| l == parent) {
            break;
        }
        out.push(parent.to_owned());
        p = parent;
        if p == "/" {
            break;
        }
    }
    out
}

/// Adds up `measured`; `pool_of` names a job's pool (`None`: a job no
/// longer known, left out).
pub(crate) fn sum(measured: &[paceline_hostmgr::MeasuredRun], mut pool_of: impl FnMut(&str) -> Option<String>) -> Sums {
    let mut sums = Sums::default();
    let mut pools: HashMap<String, Option<Vec<String>>> = HashMap::new();
    for paceline_hostmgr::MeasuredRun { task_id, host, used, .. } in measured {
        let add = |row: &mut [u64; 3]| {
            row[0] += used.cpu_millis;
            row[1] += used.memory_mib;
            row[2] += 1;
        };
        add(sums.hosts.entry(host.clone()).or_default());
        let job = task_id.rsplit_once('-').map_or(task_id.as_str(), |(job, _)| job);
        let chain = pools.entry(job.to_owned()).or_insert_with(|| pool_of(job).map(|p| with_ancestors(&p)));
        for pool in chain.iter().flatten() {
            add(sums.pools.entry(pool.clone()).or_default());
        }
    }
    sums
}

impl Collector for UsageCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let measured = self.hosts.measured_use();
        let sums = sum(&measured, |job| self.jobs.summary(job).map(|s| s.pool));
        let kinds = |rows: &BTreeMap<String, [u64; 3]>, label: &'static str| {
            rows.iter()
                .flat_map(move |(name, v)| {
                    [
                        ([(label, name.clone()), ("kind", "cpu".to_owned())], v[0]),
                        ([(label, name.clone()), ("kind", "memory".to_owned())], v[1]),
                    ]
                })
                .collect::<Vec<_>>()
        };
        gauges(
            &mut encoder,
            "pool_used",
            "Measured use of a pool's running tasks (their agents' latest samples; interior pools: their subtree); cpu in millicores, memory in MiB",
            kinds(&sums.pools, "pool"),
        )?;
        gauges(
            &mut encoder,
            "pool_tasks_measured",
            "Running tasks of a pool whose use was measured (what pool_used sums; subtree sums)",
            sums.pools.iter().map(|(p, v)| ([("pool", p.clone())], v[2])),
        )?;
        if self.per_host {
            gauges(
                &mut encoder,
                "host_used",
                "Measured use of a host's running tasks (metrics_per_host); cpu in millicores, memory in MiB",
                kinds(&sums.hosts, "host"),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_hostmgr::{MeasuredRun, MeasuredUse};

    #[test]
    fn pools_sum_their_subtree_and_hosts_their_runs() {
        assert_eq!(with_ancestors("/a/b"), vec!["/a/b", "/a", "/"]);
        assert_eq!(with_ancestors("/"), vec!["/"]);
        let run = |task: &str, host: &str, cpu, mem| MeasuredRun {
            run_id: format!("{task}-1"),
            task_id: task.to_owned(),
            host: host.to_owned(),
            reserved: paceline_model::Resources::ZERO,
            used: MeasuredUse { cpu_millis: cpu, memory_mib: mem, sampled_at_ms: 1 },
        };
        let measured = vec![
            run("web-1a2b-0", "h1", 500, 100),
            run("web-1a2b-1", "h2", 250, 50),
            run("batch-9-0", "h1", 1000, 10),
            run("gone-0", "h2", 7, 7),
        ];
        let sums = sum(&measured, |job| match job {
            "web-1a2b" => Some("/prod/web".to_owned()),
            "batch-9" => Some("/batch".to_owned()),
            _ => None,
        });
        assert_eq!(sums.pools.get("/prod/web"), Some(&[750, 150, 2]));
        assert_eq!(sums.pools.get("/prod"), Some(&[750, 150, 2]));
        assert_eq!(sums.pools.get("/"), Some(&[1750, 160, 3]));
        assert_eq!(sums.hosts.get("h1"), Some(&[1500, 110, 2]));
        assert_eq!(sums.hosts.get("h2"), Some(&[257, 57, 2]));
    }
}
