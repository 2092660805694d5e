//! Launch: the job manager's side of the ready queue. The placement engine
//! takes READY tasks with what each needs, and commits its placements here:
//! this is the one owner of the PLACING → PLACED step (the resource
//! manager's record and the store's), of the LAUNCHING write and of the
//! launch itself. It also says which runs the hosts should hold.

use std::collections::BTreeMap;

use async_trait::async_trait;
use paceline_joints::{Committed, ExpectedRun, LeaseId, Need, Placement, PortError, ReadyQueue, Taken, TaskHandle};
use paceline_model::UnplacedReason;
use paceline_model::gpu::GpuGrant;
use paceline_model::job::JobKind;
use paceline_model::run::LaunchRequest;
use paceline_model::task::{TaskEvent, TaskId, TaskRuntime, TaskState};
use paceline_model::task_secret::LaunchSecret;
use paceline_resmgr::{TaskState as RmState, Transition};

use super::JobManager;
use super::writes::Write;
use crate::deadline::{Deadline, DeadlineKind};
use crate::error::JobError;
use crate::state::{LAUNCHED, Mem, TaskEntry};

/// How long the next run of a task whose launch was refused `refusals`
/// times in a row waits before it is submitted again: not at all after the
/// first refusal (the refusing host is avoided; another may take it), then
/// the resource manager's placement backoff (`Timeouts::backoff`: 1 s by
/// default, doubling up to a minute), one curve for both. Without it a
/// refusal that lasts (a secret that is missing, a run the host still
/// holds) resubmitted the task at once, every few milliseconds, each time
/// with four writes to the store.
pub(crate) fn refusal_backoff_ms(timeouts: &paceline_resmgr::Timeouts, refusals: u8) -> Option<u64> {
    match refusals {
        0 | 1 => None,
        n => Some(timeouts.backoff(u32::from(n - 1))),
    }
}

/// The next run of an instance whose launch on `host` was refused before
/// anything started (by the launcher at once, or later by the host as
/// `LAUNCH_REJECTED`): the resource manager's task is released, a stateful
/// instance forgets the host, and the next placement avoids it (a daemon
/// instance has only its host). No failure is counted. Returns the run, and
/// when to submit it again: `None` for now, else a time after a backoff
/// ([`refusal_backoff_ms`]); the caller submits or sets the deadline.
pub(crate) fn refused_launch(
    rm: &mut paceline_resmgr::ResourceManager,
    kind: JobKind,
    t: &mut TaskEntry,
    rm_task: Option<paceline_joints::TaskHandle>,
    host: &str,
    why: String,
    now: u64,
) -> (TaskRuntime, Option<u64>) {
    if let Some(id) = rm_task
        && rm.kill(id, now).is_ok()
    {
        let _ = rm.transition(id, Transition::KillConfirmed, now);
    }
    let mut rt = t.rt.next_run(now);
    if matches!(kind, JobKind::Stateful | JobKind::Daemon) {
        rt.host = t.rt.host.clone().filter(|h| h != host || kind == JobKind::Daemon);
    }
    rt.message = why;
    if kind != JobKind::Daemon {
        t.avoid_host = Some(host.into());
    }
    t.launch_refusals = t.launch_refusals.saturating_add(1);
    (rt, refusal_backoff_ms(rm.timeouts(), t.launch_refusals).map(|wait| now.saturating_add(wait)))
}

/// The deadline that submits `instance`'s run `run` again at `at_ms`.
pub(crate) fn resubmit_at(job_key: u64, instance: u32, run: u64, at_ms: u64) -> Deadline {
    Deadline { at_ms, job_key, instance, run, kind: DeadlineKind::Resubmit }
}

#[async_trait]
impl ReadyQueue for JobManager {
    async fn take_ready(&self, kind: JobKind, max: usize, now_ms: u64) -> Result<Taken, PortError> {
        let mut ready = Vec::new();
        self.rm().take_ready(kind, max, now_ms, &mut ready);
        let mut abandoned = Vec::new();
        let mut taken = Taken { ready: Vec::with_capacity(ready.len()), orphans: Vec::new() };
        {
            let m = self.mem();
            for t in ready {
                match need_in(&m, t.job, t.instance) {
                    Some(need) => taken.ready.push((t, need)),
                    None if abandoned_in(&m, t.job, t.instance) => abandoned.push(t.id),
                    None => taken.orphans.push(t),
                }
            }
        }
        if !abandoned.is_empty() {
            // Lock order: the resource manager before the mirror, so the
            // mirror is let go first.
            let mut rm = self.rm();
            for id in abandoned {
                tracing::debug!(task = id.0, "taken task whose run was stopped before launch; released");
                if rm.kill(id, now_ms).is_ok() {
                    let _ = rm.transition(id, Transition::KillConfirmed, now_ms);
                }
            }
        }
        Ok(taken)
    }

    async fn unplaced(&self, tasks: &[(TaskHandle, UnplacedReason)], now_ms: u64) -> Result<usize, PortError> {
        // (job key, reason) per task sent back, for the Deferred events.
        let mut deferred = Vec::with_capacity(tasks.len());
        let count = {
            let mut rm = self.rm();
            tasks
                .iter()
                .filter(|(id, reason)| {
                    let job = rm.task(*id).map(|t| t.job);
                    match rm.placement_failed(*id, *reason, now_ms) {
                        Ok(()) => {
                            deferred.extend(job.map(|job| (job, *reason)));
                            true
                        }
                        Err(e) => {
                            tracing::debug!(task = id.0, error = %e, "unplaced task no longer placing");
                            false
                        }
                    }
                })
                .count()
        };
        self.note_deferred(&deferred, now_ms);
        Ok(count)
    }

    async fn commit(&self, lease: LeaseId, placements: Vec<Placement>, _now_ms: u64) -> Result<Committed, PortError> {
        Ok(self.commit_placements(lease, placements).await)
    }
}

/// What placing instance `instance` of the job with key `job_key` takes;
/// `None` if the job or instance is unknown or the task is not waiting for
/// placement (the engine then sends it back).
fn need_in(m: &Mem, job_key: u64, instance: u32) -> Option<Need> {
    let job = m.jobs.get(&job_key)?;
    let t = job.tasks.get(instance as usize)?;
    if !waits_for_placement(t) {
        return None;
    }
    let cfg = job.config_at(t.rt.desired_config_version);
    let kind = cfg.kind;
    let slot_default = format!("placement/{}", kind.as_str());
    let slot = cfg
        .plugin_overrides
        .get(&slot_default)
        .map(|name| if name.starts_with("placement/") { name.clone() } else { format!("placement/{name}") })
        .unwrap_or(slot_default);
    let preferred_host = match kind {
        JobKind::Stateful | JobKind::Daemon => {
            t.rt.host.clone().filter(|h| kind == JobKind::Daemon || !m.draining.contains(h))
        }
        _ => None,
    };
    let spec = cfg.task_spec(instance);
    Some(Need {
        job_id: job.id.clone(),
        constraints: spec.constraints.clone(),
        preferences: spec.preferences.clone(),
        preferred_host,
        host_required: kind == JobKind::Daemon,
        slot,
        avoid_host: if kind == JobKind::Daemon { None } else { t.avoid_host.as_deref().map(str::to_owned) },
        gpu_models: spec.gpu_models.clone(),
    })
}

/// A task the job manager stopped before it reached a host: its job is
/// here, and the instance no longer wants to run nor is on a host. The
/// resource manager's task for it (a killed member of a gang queued for
/// the others) is released when the engine takes it, rather than sent back
/// to wait again while charged to its pool.
fn abandoned_in(m: &Mem, job_key: u64, instance: u32) -> bool {
    let Some(t) = m.jobs.get(&job_key).and_then(|j| j.tasks.get(instance as usize)) else {
        return false;
    };
    !t.wants_run() && !t.rt.state.is_on_host()
}

/// Per host, the instances placed there with their resource manager
/// handles and GPU devices.
type HostsPlaced = BTreeMap<String, Vec<(u32, TaskHandle, GpuGrant)>>;

/// A task the job manager still wants placed.
fn waits_for_placement(t: &TaskEntry) -> bool {
    matches!(t.rt.state, TaskState::Pending | TaskState::Ready | TaskState::Placing) && t.wants_run()
}

impl JobManager {
    /// What placing an admitted task takes (the need [`ReadyQueue::take_ready`]
    /// hands out with it); `None` if it is not waiting for placement.
    pub fn need_of(&self, job_key: u64, instance: u32) -> Option<Need> {
        need_in(&self.mem(), job_key, instance)
    }

    /// Runs the host side should hold: every run between LAUNCHING and its
    /// end, sorted by host and run. The host manager reconciles its hosts
    /// against this after a restart or a failover (reporting LOST what is
    /// missing, with a seq after the last one handled so that it is not taken
    /// for a duplicate; killing what is not expected).
    pub fn expected_runs(&self) -> Vec<ExpectedRun> {
        let m = self.mem();
        let mut out = Vec::new();
        for job in m.jobs.values() {
            for (i, t) in job.tasks.iter().enumerate() {
                if t.rt.state.is_on_host()
                    && let Some(h) = &t.rt.host
                {
                    let task = TaskId::new(job.id.clone(), i as u32);
                    out.push(ExpectedRun {
                        host: h.clone(),
                        run_id: task.run_id(t.rt.run),
                        task_id: task.to_string(),
                        resources: job.config_at(t.rt.config_version).task_spec(i as u32).resources,
                        gpu: t.rt.gpu.clone(),
                        last_seq: t.last_seq,
                    });
                }
            }
        }
        out.sort_by(|a, b| (&a.host, &a.run_id).cmp(&(&b.host, &b.run_id)));
        out
    }

    /// [`ReadyQueue::commit`]: the placement engine chose hosts of lease
    /// `lease` for tasks. For each placement whose task still waits here and
    /// is still PLACING at the resource manager, the resource manager's
    /// record becomes PLACED (here and nowhere else), the task is written
    /// LAUNCHING with its host (events PLACED, LAUNCHING), and the runs are
    /// launched per host; an accepted launch is noted LAUNCHED (and
    /// STARTLAUNCH at the resource manager), a refused one gives the task
    /// back under a new run that avoids the host. A placement whose task no
    /// longer waits (killed, deleted) is dropped and its resource-manager
    /// task released; one whose resource-manager task is no longer PLACING
    /// (preempted, or timed out and taken again) is dropped as it is.
    ///
    /// Cost: each job's tasks are written together (one compare-and-set
    /// batch per step, whatever the number of hosts), and jobs proceed
    /// concurrently so the store commits their writes in shared groups: a
    /// round of thousands of placements costs a handful of commits.
    pub async fn commit_placements(&self, lease: LeaseId, placements: Vec<Placement>) -> Committed {
        let _op = self.ops.lock().await;
        let now = self.now();
        let mut committed = Committed::default();
        let mut jobs: BTreeMap<u64, HostsPlaced> = BTreeMap::new();
        {
            let mut rm = self.rm();
            let m = self.mem();
            for p in placements {
                let (key, instance, id) = (p.task.job, p.task.instance, p.task.id);
                let waits =
                    m.jobs.get(&key).and_then(|j| j.tasks.get(instance as usize)).is_some_and(waits_for_placement);
                if !waits {
                    tracing::info!(job = key, instance, "placement for a task no longer waiting; released");
                    if rm.kill(id, now).is_ok() {
                        let _ = rm.transition(id, Transition::KillConfirmed, now);
                    }
                    committed.dropped += 1;
                    continue;
                }
                if rm.task(id).is_none_or(|t| t.state != RmState::Placing)
                    || rm.transition(id, Transition::Placed, now).is_err()
                {
                    tracing::debug!(job = key, instance, "placed task no longer placing (preempted or timed out)");
                    committed.dropped += 1;
                    continue;
                }
                jobs.entry(key).or_default().entry(p.host).or_default().push((instance, id, p.gpu));
            }
        }
        use futures::StreamExt;
        let outcomes: Vec<(u32, u32)> = futures::stream::iter(jobs)
            .map(|(key, hosts)| async move {
                let n = hosts.values().map(Vec::len).sum::<usize>() as u32;
                match self.launch_job(lease, key, hosts).await {
                    Ok(counts) => counts,
                    Err(e) => {
                        // Written tasks wait in LAUNCHING for the host's report
                        // or the resource manager's LAUNCHING timeout.
                        tracing::error!(job = key, error = %e, "launch failed");
                        (0, n)
                    }
                }
            })
            .buffer_unordered(self.config.concurrent_jobs.max(1))
            .collect()
            .await;
        for (launched, refused) in outcomes {
            committed.launched += launched;
            committed.refused += refused;
        }
        committed
    }

    /// Launches one job's placed tasks, grouped per host.
    /// Returns how many were launched and how many their host refused.
    async fn launch_job(&self, lease: LeaseId, key: u64, hosts: HostsPlaced) -> Result<(u32, u32), JobError> {
        let now = self.now();
        let (job_id, secrets_pool, writes, placed_events, mut runs) = {
            let mut m = self.mem();
            // A gang's members learn each other (before the mirror is
            // written: it reads the ports other runs hold).
            let placed: BTreeMap<u32, String> =
                hosts.iter().flat_map(|(h, tasks)| tasks.iter().map(move |(i, _, _)| (*i, h.clone()))).collect();
            let mut discovery = super::gang::plan(&m, key, &placed);
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok((0, 0));
            };
            let job_id = job.id.clone();
            let n: usize = hosts.values().map(Vec::len).sum();
            let mut writes = Vec::with_capacity(n);
            let mut events = Vec::with_capacity(n);
            let mut runs: Vec<Vec<LaunchRequest>> = Vec::with_capacity(hosts.len());
            let placed_message = format!("lease {lease}");
            for (host, tasks) in &hosts {
                let mut host_runs = Vec::with_capacity(tasks.len());
                for (i, rm_task, gpu) in tasks {
                    let (i, rm_task) = (*i, *rm_task);
                    let t = &mut job.tasks[i as usize];
                    t.rm_task = Some(rm_task);
                    t.gang = None;
                    t.avoid_host = None;
                    events.push((
                        i,
                        TaskEvent {
                            run: t.rt.run,
                            from: Some(t.rt.state),
                            to: TaskState::Placed,
                            at_ms: now,
                            host: Some(host.clone()),
                            reason: "PLACED".into(),
                            message: placed_message.clone(),
                        },
                    ));
                    let mut rt = t.rt.clone();
                    rt.state = TaskState::Launching;
                    rt.host = Some(host.clone());
                    rt.gpu = gpu.clone();
                    rt.config_version = rt.desired_config_version;
                    let (spec, user) = match job.configs.get(&rt.config_version) {
                        Some(cfg) => (cfg.task_spec(i).clone(), cfg.user.clone()),
                        None => (job.config().task_spec(i).clone(), job.config().user.clone()),
                    };
                    let run_id = TaskId::new(job_id.clone(), i).run_id(rt.run);
                    let mut env = paceline_model::run::run_env(&job_id, i, &run_id);
                    let member = discovery.remove(&i);
                    if let Some(d) = &member {
                        env.extend(d.env.clone());
                        // Known as held from now on (the host reports the same).
                        rt.ports = d.launch.ports.clone();
                    }
                    host_runs.push(LaunchRequest {
                        gang: member.map(|d| d.launch),
                        task_id: TaskId::new(job_id.clone(), i).to_string(),
                        run_id,
                        spec,
                        env,
                        secrets: Vec::new(),
                        gpu: gpu.clone(),
                        user,
                    });
                    // PLACED is recorded above as an event of its own; the
                    // LAUNCHING write's event follows it.
                    let mut write = Write::new(i, rt, "LAUNCHING");
                    write.from = Some(TaskState::Placed);
                    writes.push(write);
                }
                runs.push(host_runs);
            }
            // The pool is needed only to open secrets: most launches name none.
            let secrets_pool =
                runs.iter().flatten().any(|r| !r.spec.secrets.is_empty()).then(|| job.config().pool.clone());
            (job_id, secrets_pool, writes, events, runs)
        };
        // The PLACED event first, then LAUNCHING: one runtime write, both
        // steps in the event log, one store call for all of it.
        self.write_tasks_with_events(key, writes, placed_events).await?;
        // Secrets are opened last, outside the lock, and only for this
        // launch: nothing else holds their values. A secret that cannot be
        // had fails the launch as a host's refusal would (the tasks go
        // back to READY, the reason in their events), never a run without it.
        let resolved = match &secrets_pool {
            Some(pool) => self.resolve_secrets(pool, &mut runs).await,
            None => Ok(()),
        };
        let outcomes = match resolved {
            Ok(()) => {
                futures::future::join_all(
                    hosts.keys().zip(runs).map(|(host, runs)| self.launcher.launch(lease, host, runs)),
                )
                .await
            }
            Err(why) => {
                tracing::warn!(job = %job_id, error = %why, "launch refused: a secret cannot be had");
                hosts.keys().map(|_| Err(paceline_joints::PortError::refused(why.clone()))).collect()
            }
        };
        let mut writes = Vec::new();
        let mut launched = Vec::new();
        let mut retry = Vec::new();
        let mut later = Vec::new();
        let mut accepted = 0u32;
        {
            let mut rm = self.rm();
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok((0, 0));
            };
            let kind = job.kind();
            let created_at_ms = job.runtime.created_at_ms;
            for ((host, tasks), outcome) in hosts.iter().zip(outcomes) {
                // `Ok` lists the runs refused one by one (rarely any); `Err`
                // refused the host's whole batch.
                let batch_refused = outcome.as_ref().err().map(|e| {
                    tracing::warn!(%host, error = %e, "launch refused; tasks go back to READY");
                    format!("launch on {host} failed: {e}")
                });
                let refused_runs = outcome.unwrap_or_default();
                for &(i, id, _) in tasks {
                    let t = &mut job.tasks[i as usize];
                    let why = batch_refused.clone().or_else(|| {
                        if refused_runs.is_empty() {
                            return None;
                        }
                        let run_id = TaskId::new(job_id.clone(), i).run_id(t.rt.run);
                        let r = refused_runs.iter().find(|r| r.run_id == run_id)?;
                        tracing::warn!(%host, run = %run_id, reason = %r.reason, "run refused; its task goes back to READY");
                        Some(format!("launch on {host} failed: {}", r.reason))
                    });
                    if let Some(why) = why {
                        let (rt, wait_until) = refused_launch(&mut rm, kind, t, Some(id), host, why, now);
                        match wait_until {
                            None => retry.push(i),
                            Some(at) => later.push(resubmit_at(key, i, rt.run, at)),
                        }
                        writes.push(Write::new(i, rt, "LAUNCH_FAILED"));
                        continue;
                    }
                    accepted += 1;
                    if rm.task(id).is_some_and(|x| x.state == RmState::Placed) {
                        let _ = rm.transition(id, Transition::StartLaunch, now);
                    }
                    // A run update may already have moved it further.
                    // LAUNCHED is the mirror's state, not a runtime write of
                    // its own: recovery treats a stored LAUNCHING exactly as
                    // LAUNCHED (both wait for the host's report, see
                    // `table`), so the task's next write (its STARTING or
                    // RUNNING) carries it. Its event rides with that write
                    // too (decision 0073): one compare-and-set and one event
                    // row per task less.
                    if t.rt.state == TaskState::Launching {
                        t.rt.state = TaskState::Launched;
                        t.rt.reason = LAUNCHED.into();
                        t.rt.updated_at_ms = now;
                        if !t.keep_launched(created_at_ms, now) {
                            launched.push((
                                i,
                                TaskEvent {
                                    run: t.rt.run,
                                    from: Some(TaskState::Launching),
                                    to: TaskState::Launched,
                                    at_ms: now,
                                    host: t.rt.host.clone(),
                                    reason: LAUNCHED.into(),
                                    message: String::new(),
                                },
                            ));
                        }
                    }
                }
            }
        }
        let refused = (retry.len() + later.len()) as u32;
        self.append_events(&job_id, launched).await?;
        self.write_tasks(key, writes).await?;
        if !later.is_empty() {
            let mut m = self.mem();
            for d in later {
                m.deadlines.push(d);
            }
        }
        if !retry.is_empty() {
            self.submit(key, &retry).await?;
        }
        self.sync_job(key).await?;
        Ok((accepted, refused))
    }

    /// Fills in the values of the secrets the runs' specs name, from
    /// `pool` (decision 0032); each secret is read and opened once per call.
    async fn resolve_secrets(&self, pool: &str, runs: &mut [Vec<LaunchRequest>]) -> Result<(), String> {
        let mut opened: BTreeMap<String, paceline_model::secret::Secret> = BTreeMap::new();
        for run in runs.iter_mut().flatten() {
            for r in &run.spec.secrets {
                let Some(target) = r.target() else {
                    return Err(format!("secret {}: no target", r.name));
                };
                if !opened.contains_key(&r.name) {
                    let key = self.secret_key.as_ref().ok_or("this server has no secrets key (decision 0032)")?;
                    let sealed = self.store.get_secret(pool, &r.name).await.map_err(|e| {
                        if e.is_not_found() {
                            format!("secret {} not found in pool {pool}", r.name)
                        } else {
                            format!("secret {}: {e}", r.name)
                        }
                    })?;
                    let value = key.open(&sealed).map_err(|e| e.to_string())?;
                    opened.insert(r.name.clone(), value);
                }
                let value = opened[&r.name].clone();
                run.secrets.push(LaunchSecret { name: r.name.clone(), target, value });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::refusal_backoff_ms;
    use paceline_resmgr::Timeouts;

    #[test]
    fn a_refused_launch_waits_from_the_second_refusal_doubling_to_a_minute() {
        let t = Timeouts::default();
        let waits: Vec<Option<u64>> =
            [0u8, 1, 2, 3, 4, 8, 9, u8::MAX].into_iter().map(|n| refusal_backoff_ms(&t, n)).collect();
        assert_eq!(
            waits,
            [None, None, Some(1_000), Some(2_000), Some(4_000), Some(60_000), Some(60_000), Some(60_000)]
        );
    }

    #[test]
    fn the_refusal_backoff_follows_the_resource_managers_tuned_timeouts() {
        let t = Timeouts { backoff_base_ms: 250, backoff_max_ms: 900, ..Timeouts::default() };
        let waits: Vec<Option<u64>> = [1u8, 2, 3, 4, 5].into_iter().map(|n| refusal_backoff_ms(&t, n)).collect();
        assert_eq!(waits, [None, Some(250), Some(500), Some(900), Some(900)]);
    }
}
