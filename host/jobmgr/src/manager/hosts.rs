//! Hosts as the job manager sees them: daemon jobs follow the hosts that
//! match them; a draining host's instances move elsewhere within each job's
//! `max_unavailable_instances`.

use paceline_model::Labels;
use paceline_model::job::{JobConfig, JobKind};
use paceline_model::task::{TaskGoal, TaskState};
use paceline_model::view::HostView;
use paceline_plugin_sdk::types as sdk;

use super::JobManager;
use super::writes::Write;
use crate::error::JobError;

impl JobManager {
    /// Hosts that accept tasks, are not draining and satisfy the job's hard
    /// constraints, in the order the wiring reported them.
    pub(crate) fn matching_hosts(&self, config: &JobConfig) -> Vec<String> {
        let m = self.mem();
        m.hosts
            .iter()
            .filter(|(name, labels, accepts)| {
                *accepts && !m.draining.contains(name) && {
                    let view = HostView { name: name.clone(), attributes: labels.clone(), ..HostView::default() };
                    config.default_task.constraints.iter().all(|c| c.admits(&view) != Some(false))
                }
            })
            .map(|(n, _, _)| n.clone())
            .collect()
    }

    /// The cluster's hosts changed: `(name, attributes, accepts tasks)` for
    /// every host. Daemon jobs get an instance on each newly matching host
    /// (a host that matched before gets its old instance back) and lose the
    /// instance of a host that no longer matches.
    pub async fn on_hosts_changed(&self, hosts: Vec<(String, Labels, bool)>) {
        let _op = self.ops.lock().await;
        {
            let mut m = self.mem();
            for (name, _, accepts) in &hosts {
                if *accepts {
                    m.draining.remove(name);
                }
            }
            m.hosts = hosts;
        }
        let daemons: Vec<u64> = {
            let m = self.mem();
            m.jobs
                .values()
                .filter(|j| j.kind() == JobKind::Daemon && !j.runtime.state.is_terminal())
                .map(|j| j.key)
                .collect()
        };
        for key in daemons {
            if let Err(e) = self.refresh_daemon(key).await {
                tracing::error!(job = key, error = %e, "daemon job did not follow the host change");
            }
        }
    }

    async fn refresh_daemon(&self, key: u64) -> Result<(), JobError> {
        let Some(config) = self.mem().jobs.get(&key).map(|j| j.config().clone()) else {
            return Ok(());
        };
        let matching = self.matching_hosts(&config);
        let changed = {
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(());
            };
            let before = job.daemon_hosts.clone();
            // Slots keep their instance number: a host that leaves leaves an
            // empty slot, a host that comes back gets its slot (and volume) back.
            let bound: Vec<String> = job.tasks.iter().map(|t| t.rt.host.clone().unwrap_or_default()).collect();
            let mut slots: Vec<String> = (0..job.daemon_hosts.len().max(bound.len()))
                .map(|i| {
                    let h =
                        job.daemon_hosts.get(i).filter(|h| !h.is_empty()).or(bound.get(i)).cloned().unwrap_or_default();
                    if matching.contains(&h) { h } else { String::new() }
                })
                .collect();
            for h in &matching {
                if slots.contains(h) {
                    continue;
                }
                match bound.iter().position(|b| b == h) {
                    Some(i) if i < slots.len() && slots[i].is_empty() => slots[i] = h.clone(),
                    _ => slots.push(h.clone()),
                }
            }
            job.daemon_hosts = slots;
            job.daemon_hosts != before
        };
        if changed {
            self.drive(key, sdk::Event::HostsChanged).await?;
        }
        Ok(())
    }

    /// Whether the job manager knows `host` is draining (it was told through
    /// [`JobManager::on_host_draining`] and the host has not taken tasks since).
    pub fn is_draining(&self, host: &str) -> bool {
        self.mem().draining.contains(host)
    }

    /// `host` is draining: the host manager offers it no more. Every job's
    /// instances on it are killed and placed elsewhere (daemon instances just
    /// stop), each only when the job's one unavailability count allows
    /// (decision 0046: an instance is unavailable until it runs healthy,
    /// whatever took it down); the rest follow as replacements pass their
    /// health checks ([`JobManager::drain_pass`] runs again after every
    /// job's run updates). The host stays DRAINING until its last run ends.
    pub async fn on_host_draining(&self, host: &str) {
        let _op = self.ops.lock().await;
        self.mem().draining.insert(host.to_string());
        let keys: Vec<u64> = self.mem().jobs.keys().copied().collect();
        for key in keys {
            let daemon = self.mem().jobs.get(&key).is_some_and(|j| j.kind() == JobKind::Daemon);
            let r = if daemon { self.refresh_daemon(key).await } else { self.drain_pass(key).await };
            if let Err(e) = r {
                tracing::error!(job = key, %host, error = %e, "drain step failed");
            }
            let _ = self.sync_job(key).await;
        }
    }

    /// Moves instances of one job off draining hosts, each with the
    /// permission of the job's unavailability count
    /// ([`crate::availability::grant`]): one already unavailable there
    /// (starting, not yet healthy) goes at once; a serving one only while
    /// fewer than the limit are unavailable.
    pub(crate) async fn drain_pass(&self, key: u64) -> Result<(), JobError> {
        let (victims, writes) = {
            let m = self.mem();
            if m.draining.is_empty() {
                return Ok(());
            }
            let Some(job) = m.jobs.get(&key) else {
                return Ok(());
            };
            if job.kind() == JobKind::Daemon {
                return Ok(());
            }
            let mut wanted = Vec::new();
            let mut writes = Vec::new();
            for (i, t) in job.tasks.iter().enumerate() {
                let on_draining = t.rt.host.as_ref().is_some_and(|h| m.draining.contains(h));
                if !on_draining {
                    continue;
                }
                if t.rt.state.is_on_host()
                    && !matches!(t.rt.state, TaskState::Killing | TaskState::Preempting)
                    && t.rt.goal == TaskGoal::Run
                {
                    wanted.push(i as u32);
                } else if t.rt.state.is_terminal() && job.kind() == JobKind::Stateful {
                    // Forget the sticky host so the next run goes elsewhere.
                    let mut rt = t.rt.clone();
                    rt.host = None;
                    writes.push(Write::new(i as u32, rt, ""));
                }
            }
            // Serving instances last: the ones already down cost nothing.
            wanted.sort_by_key(|&i| crate::availability::available(job, i));
            let victims = crate::availability::grant(job, &wanted);
            if victims.len() < wanted.len() {
                tracing::debug!(
                    job = %job.id,
                    waiting = wanted.len() - victims.len(),
                    "drain waits: the job has as many instances unavailable as it may"
                );
            }
            (victims, writes)
        };
        self.write_tasks(key, writes).await?;
        // Killed with the goal still RUN: the engine starts the next run at
        // once, and placement (which no longer sees the host) puts it elsewhere.
        self.kill_runs(key, &victims, Some("HOST_DRAINING")).await
    }
}
