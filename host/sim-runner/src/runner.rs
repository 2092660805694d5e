//! The runner's state: the assembled roles over the scripted provider, the
//! jobs, tasks and hosts it has seen, and each step of a replay (policy
//! swaps, arrivals, host changes, one pass of the loops).

use super::*;

/// A job of the trace as the report needs it.
pub(crate) struct JobMeta {
    pub(crate) config: Arc<JobConfig>,
    pub(crate) arrived_ms: u64,
    pub(crate) rejected: Option<String>,
}

/// What the runner learns of one task from the store's events.
#[derive(Default)]
pub(crate) struct Life {
    pub(crate) runs: Vec<RunLife>,
}

pub(crate) struct Runner {
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) sim: Arc<SimProvider>,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) scripts: Arc<Mutex<Scripts>>,
    pub(crate) jobs: BTreeMap<String, JobMeta>,
    pub(crate) lives: BTreeMap<(String, u32), Life>,
    pub(crate) hosts: Vec<HostLife>,
    pub(crate) host_index: BTreeMap<String, usize>,
    pub(crate) pools: Vec<String>,
    pub(crate) leaf_samples: BTreeMap<String, Vec<PoolSample>>,
    pub(crate) samples_ms: Vec<u64>,
    pub(crate) swaps: Vec<(u64, String, String)>,
    pub(crate) plugins: BTreeMap<String, Vec<u8>>,
    pub(crate) tasks_arrived: u64,
    /// "Arrive until full": the resource manager's preemption kills are not
    /// carried out (the mode measures packing; preempting would trade one
    /// job for another).
    pub(crate) no_preemption: bool,
}

pub(crate) fn rel(abs: u64) -> u64 {
    abs.saturating_sub(BASE_MS)
}

/// Expands `placement` to every placement slot.
pub(crate) fn slots_of(slot: &str) -> Vec<String> {
    if slot == "placement" {
        ["batch", "stateless", "stateful", "daemon"].iter().map(|k| format!("placement/{k}")).collect()
    } else {
        vec![slot.to_string()]
    }
}

pub(crate) fn pending_category(info: &paceline_resmgr::PendingInfo) -> String {
    use paceline_resmgr::PendingReason as P;
    let pool = &info.pool;
    match info.reason {
        P::NotEvaluated => format!("admission: not yet evaluated in {pool}"),
        P::OverEntitlement { kind, .. } => format!("admission: over entitlement ({kind}) in {pool}"),
        P::WaitingOnReservation { kind, .. } => format!("admission: waiting on reservation ({kind}) in {pool}"),
        P::OverSlackEntitlement { kind, .. } => format!("admission: over slack entitlement ({kind}) in {pool}"),
        P::OverControllerLimit { kind, .. } => format!("admission: over the controller limit ({kind}) in {pool}"),
        P::ClusterFull { kind, .. } => format!("admission: cluster full ({kind}), waiting for preemption"),
        P::ClusterUsedUp { kind, .. } => format!("admission: cluster's {kind} all in use by {pool}"),
        P::BehindHead { .. } => format!("admission: queued behind another gang in {pool}"),
        P::PoolCannotHold { kind, .. } => format!("admission: pool {pool} can never hold {kind}"),
    }
}

impl Runner {
    pub(crate) async fn swap(&mut self, slot: &str, source: &PolicySource) -> Result<(), SimError> {
        let (name, bytes): (String, Vec<u8>) = match source {
            PolicySource::Builtin(n) => match builtin(n).or_else(|| self.plugins.get(n).map(Vec::as_slice)) {
                Some(b) => (n.clone(), b.to_vec()),
                None => {
                    return Err(SimError::Policy {
                        slot: slot.into(),
                        plugin: n.clone(),
                        message: format!(
                            "not a built-in policy ({}) nor one given with --plugin NAME=PATH",
                            paceline_plugin::builtins::names()
                        ),
                    });
                }
            },
            PolicySource::Wasm { name, bytes } => (name.clone(), bytes.clone()),
        };
        let version = match source {
            PolicySource::Builtin(_) if builtin(&name).is_some() => crate_version_label(),
            _ => format!("sha-{}", &paceline_plugin::PluginRuntime::sha256_hex(&bytes)[..12]),
        };
        for slot in slots_of(slot) {
            let registry = self.registry.clone();
            let (n, version, bytes) = (name.clone(), version.clone(), bytes.clone());
            let s = slot.clone();
            let fail = |message: String| SimError::Policy { slot: slot.clone(), plugin: name.clone(), message };
            let r = tokio::task::spawn_blocking(move || {
                let name = n;
                let id = format!("{name}@{version}");
                let known =
                    registry.list().iter().any(|x| x.slot == s && x.versions.iter().any(|v| v.record.id() == id));
                if !known {
                    registry.deploy(&s, &name, &version, &bytes, DeployOptions::default())?;
                }
                registry.activate(&s, &id)
            })
            .await
            .map_err(|e| fail(e.to_string()))?;
            r.map_err(|e| fail(e.to_string()))?;
        }
        Ok(())
    }

    /// Applies one trace event that the trace dates `at` (the step runs at or after it).
    pub(crate) async fn apply(&mut self, line: u64, at: u64, event: Event) -> Result<(), SimError> {
        let refused = |message: String| SimError::Refused { line, message };
        match event {
            Event::Pool(entry) => {
                let spec = entry.spec();
                if let Ok(mut rm) = self.cluster.resmgr.lock() {
                    rm.create_pool(&entry.path, spec).map_err(|e| refused(format!("pool {}: {e}", entry.path)))?;
                }
                self.pools.push(entry.path);
            }
            Event::Host(h) => {
                self.sim
                    .add_host(&h.name, h.resources, h.attributes.clone())
                    .await
                    .map_err(|e| refused(format!("host {}: {e}", h.name)))?;
                self.host_index.insert(h.name.clone(), self.hosts.len());
                self.hosts.push(HostLife {
                    name: h.name,
                    resources: h.resources,
                    attributes: h.attributes,
                    joined_ms: at,
                    left_ms: None,
                });
            }
            Event::HostDown(h) => {
                self.sim.remove_host(&h.name).await.map_err(|e| refused(format!("host {}: {e}", h.name)))?;
                if let Some(&i) = self.host_index.get(&h.name) {
                    self.hosts[i].left_ms = Some(at);
                }
            }
            Event::Maintenance(m) => {
                let hosts = &self.cluster.hosts;
                let r = match m.state {
                    MaintenanceTo::Draining => hosts.drain(&m.name).await,
                    MaintenanceTo::Down => hosts.down(&m.name).await,
                    MaintenanceTo::Up => hosts.up(&m.name).await,
                };
                if let Err(e) = r {
                    tracing::warn!(line, host = %m.name, error = %e, "maintenance change refused; the replay goes on");
                }
            }
            Event::Job(j) => {
                let j = *j;
                if let Ok(mut s) = self.scripts.lock() {
                    s.jobs.insert(j.id.clone(), (j.run, j.runs.clone()));
                }
                // A replay starts no process: the secrets a recorded job
                // names do not matter to placement, and the simulator holds
                // none to give (decision 0032).
                let mut spec = j.spec;
                spec.default_task.secrets.clear();
                spec.instance_overrides.values_mut().for_each(|t| t.secrets.clear());
                let config = Arc::new(spec.clone());
                let rejected = match self.cluster.jobs.create(&j.id, spec).await {
                    Ok(_) => None,
                    Err(e) => Some(format!("rejected at submission: {e}")),
                };
                self.tasks_arrived += u64::from(config.instance_count);
                self.jobs.insert(j.id, JobMeta { config, arrived_ms: at, rejected });
            }
            Event::Kill(k) => {
                if let Err(e) = self.cluster.jobs.kill(&k.job, k.instances).await {
                    tracing::debug!(line, job = %k.job, error = %e, "kill refused (the job may have ended)");
                }
            }
            Event::Update(u) => {
                let u = *u;
                if let Ok(mut s) = self.scripts.lock() {
                    s.jobs.insert(u.job.clone(), (u.run, u.runs.clone()));
                }
                if let Err(e) =
                    self.cluster.jobs.update(&u.job, u.spec.clone(), paceline_jobmgr::UpdateRequest::default()).await
                {
                    tracing::debug!(line, job = %u.job, error = %e, "update refused (the job may have ended)");
                } else if let Some(meta) = self.jobs.get_mut(&u.job) {
                    meta.config = Arc::new(u.spec);
                }
            }
            Event::Policy(p) => {
                self.swap(&p.slot, &PolicySource::Builtin(p.plugin.clone())).await?;
                self.swaps.push((at, p.slot, p.plugin));
            }
            Event::End => {}
        }
        Ok(())
    }

    /// Folds the store's new task events into the task lives.
    pub(crate) fn observe(&mut self) {
        for (job, instance, e) in self.store.take_events() {
            let arrived = self.jobs.get(&job).map_or(0, |j| j.arrived_ms);
            let life = self.lives.entry((job, instance)).or_default();
            let at = rel(e.at_ms);
            let idx = match life.runs.iter().position(|r| r.run == e.run) {
                Some(i) => i,
                None => {
                    let queued_ms = if e.run == 1 { arrived } else { at };
                    life.runs.push(RunLife { run: e.run, queued_ms, ..RunLife::default() });
                    life.runs.len() - 1
                }
            };
            let r = &mut life.runs[idx];
            if e.to == TaskState::Placed && r.placed_ms.is_none() {
                r.placed_ms = Some(at);
                r.host = e.host.clone();
            }
            if e.to.is_terminal() && r.ended_ms.is_none() {
                r.ended_ms = Some(at);
                r.end = Some(e.to.as_str().to_string());
            }
            if e.reason == "PREEMPTED" {
                r.preempted = true;
            }
        }
    }

    /// Samples every leaf pool's numbers at each sample time up to `now`
    /// (exclusive): the state between two steps is the one after the first.
    pub(crate) fn sample_until(&mut self, now: u64, every: u64) {
        let next = |samples: &Vec<u64>| samples.last().map_or(0, |t| t + every);
        while next(&self.samples_ms) < now {
            let t = next(&self.samples_ms);
            self.samples_ms.push(t);
            let Ok(rm) = self.cluster.resmgr.lock() else { return };
            for path in &self.pools {
                let Some(status) = rm.pool_status(path) else { continue };
                let is_leaf = !self.pools.iter().any(|p| p.starts_with(&format!("{path}/")));
                if !is_leaf {
                    continue;
                }
                self.leaf_samples.entry(path.clone()).or_default().push(PoolSample {
                    allocation: status.allocation.saturating_add(&status.revocable_allocation),
                    entitlement: status.entitlement,
                    demand: status.demand,
                });
            }
        }
    }

    /// Keeps about `most` of the samples, evenly spaced, the last one
    /// included. Left as they are when a pool joined after the first sample
    /// (its samples would no longer line up with the times).
    pub(crate) fn thin_samples(&mut self, most: usize) {
        let n = self.samples_ms.len();
        if n <= most || self.leaf_samples.values().any(|v| v.len() != n) {
            return;
        }
        fn thin<T>(v: &mut Vec<T>, every: usize) {
            let n = v.len();
            let mut i = 0;
            v.retain(|_| {
                i += 1;
                (i - 1) % every == 0 || i == n
            });
        }
        let every = n.div_ceil(most);
        thin(&mut self.samples_ms, every);
        for v in self.leaf_samples.values_mut() {
            thin(v, every);
        }
    }

    /// Whether a pool is above its entitlement while work waits somewhere:
    /// the resource manager counts periods before preempting, so steps must
    /// go on at the loop period.
    pub(crate) fn preemption_pending(&self) -> bool {
        let Ok(rm) = self.cluster.resmgr.lock() else { return false };
        let statuses: Vec<_> = self.pools.iter().filter_map(|p| rm.pool_status(p)).collect();
        statuses.iter().any(|s| s.queued_gangs > 0) && statuses.iter().any(|s| s.over_periods > 0)
    }

    /// One pass of every loop at `now`, each phase ending with the host
    /// manager settled. Returns whether anything changed.
    pub(crate) async fn step(&self, now: u64) -> bool {
        let c = &self.cluster;
        let _ = c.hosts.sync().await;
        c.hosts.tick().await;
        let mut events = c.pump_host_events().await;
        if let Err(e) = c.jobs.tick(now).await {
            tracing::warn!(error = %e, "job manager tick failed");
        }
        let (kills, admitted) = match c.resmgr.lock() {
            Ok(mut rm) => {
                let t = rm.tick(now);
                (t.kills, t.admitted_gangs)
            }
            Err(_) => (Vec::new(), 0),
        };
        let killed = !kills.is_empty() && !self.no_preemption;
        if killed && let Err(e) = c.jobs.on_resmgr_kills(kills).await {
            tracing::warn!(error = %e, "kills from the resource manager not handled");
        }
        let _ = c.hosts.sync().await;
        events += c.pump_host_events().await;
        let round = c.engine.run_round(now).await;
        let _ = c.hosts.sync().await;
        events += c.pump_host_events().await;
        let _ = c.hosts.sync().await;
        events > 0 || round.placed > 0 || round.dropped > 0 || killed || admitted > 0
    }
}
