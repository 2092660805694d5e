//! The goal-state engine's effects: writing task runtimes (compare-and-set
//! plus a task event), submitting runs to the resource manager, launching
//! and killing through the launcher, asking the lifecycle slot and carrying
//! out its actions, and the joints `on_placed`, `on_run_update`, `tick`.

use std::collections::BTreeMap;
use std::sync::Arc;

use paceline_model::job::{InstanceUpdateState, JobGoal, JobKind, JobState};
use paceline_model::run::{LaunchRequest, RunState, RunUpdate};
use paceline_model::task::{TaskEvent, TaskGoal, TaskId, TaskRuntime, TaskState};
use paceline_plugin_sdk::types as sdk;
use paceline_resmgr::{GangSpec, TaskEvent as RmEvent, TaskState as RmState};
use paceline_storage::TaskCas;

use super::JobManager;
use crate::deadline::{Deadline, DeadlineKind};
use crate::error::JobError;
use crate::joints::{Placement, PlacementNeed};
use crate::state::TaskEntry;
use crate::table::{self, GoalAction};
use crate::views;

/// Reason recorded on a run killed for running past the job's max run time;
/// its end is recorded as FAILED.
pub(crate) const MAX_RUN_TIME: &str = "MAX_RUN_TIME";
/// Reason the host manager gives a run whose launch its host refused before
/// creating anything.
const LAUNCH_REJECTED: &str = "LAUNCH_REJECTED";
/// How many follow-up rounds one event may trigger (an update batch that
/// completes at once asks the plugin again).
const MAX_ROUNDS: usize = 8;
/// Jobs handled at once in one batch of placements or run updates: their
/// writes share the store's group commits.
const CONCURRENT_JOBS: usize = 64;

/// One task write: the new runtime and the event's reason and message.
pub(crate) struct Write {
    pub instance: u32,
    pub rt: TaskRuntime,
    pub reason: String,
    pub message: String,
}

impl Write {
    pub(crate) fn new(instance: u32, rt: TaskRuntime, reason: &str) -> Write {
        Write { instance, rt, reason: reason.to_string(), message: String::new() }
    }
}

/// A run update checked against the mirror, its write not yet made.
struct Prepared {
    instance: u32,
    run: u64,
    to: TaskState,
    /// The state this update moved the task from (the stored one, or that of
    /// the update it builds on).
    from: TaskState,
    /// Whether the stored state changes.
    changed: bool,
    health_changed: bool,
    /// The instance's last handled sequence number before this update.
    previous_seq: u64,
    write: Option<Write>,
}

/// The next run of an instance whose launch on `host` was refused before
/// anything started (by the launcher at once, or later by the host as
/// `LAUNCH_REJECTED`): the resource manager's task is released (the caller
/// submits the instance again), a stateful instance forgets the host, and
/// the next placement avoids it (a daemon instance has only its host). No
/// failure is counted.
fn refused_launch(
    rm: &mut paceline_resmgr::ResourceManager,
    kind: JobKind,
    t: &mut TaskEntry,
    rm_task: Option<paceline_resmgr::TaskId>,
    host: &str,
    why: String,
    now: u64,
) -> TaskRuntime {
    if let Some(id) = rm_task
        && rm.kill(id, now).is_ok()
    {
        let _ = rm.task_event(id, RmEvent::KillConfirmed, now);
    }
    let mut rt = t.rt.next_run(now);
    if matches!(kind, JobKind::Stateful | JobKind::Daemon) {
        rt.host = t.rt.host.clone().filter(|h| h != host || kind == JobKind::Daemon);
    }
    rt.message = why;
    if kind != JobKind::Daemon {
        t.avoid_host = Some(host.to_string());
    }
    rt
}

/// Order of host-reported states: a redelivered older state never moves a task back.
fn host_rank(s: TaskState) -> u8 {
    match s {
        TaskState::Starting => 1,
        TaskState::Running => 2,
        s if s.is_terminal() => 3,
        _ => 0,
    }
}

impl JobManager {
    // ---- writes ---------------------------------------------------------------

    /// Writes task runtimes with one batched compare-and-set, records a task
    /// event for each state or run change, and updates the mirror. Items that
    /// lose their compare-and-set are reloaded from storage and reported.
    pub(crate) async fn write_tasks(&self, key: u64, mut writes: Vec<Write>) -> Result<(), JobError> {
        if writes.is_empty() {
            return Ok(());
        }
        let now = self.now();
        let (job_id, olds) = {
            let m = self.mem();
            let job = m.jobs.get(&key).ok_or_else(|| JobError::NotFound(format!("job key {key}")))?;
            let olds: Vec<TaskRuntime> = writes
                .iter()
                .map(|w| {
                    job.tasks
                        .get(w.instance as usize)
                        .map(|t| t.rt.clone())
                        .ok_or_else(|| JobError::NotFound(format!("instance {}", w.instance)))
                })
                .collect::<Result<_, _>>()?;
            (job.id.clone(), olds)
        };
        for w in &mut writes {
            w.rt.updated_at_ms = now;
            if !w.reason.is_empty() {
                w.rt.reason = w.reason.clone();
            }
            if !w.message.is_empty() {
                w.rt.message = w.message.clone();
            }
        }
        let cas: Vec<TaskCas> = writes
            .iter()
            .zip(&olds)
            .map(|(w, old)| TaskCas { instance: w.instance, expected_version: old.version, runtime: w.rt.clone() })
            .collect();
        let results = self.store.cas_tasks(&job_id, &cas).await?;
        let feed_id: Arc<str> = Arc::from(job_id.as_str());
        let mut changed = Vec::with_capacity(results.len());
        let mut first_err = None;
        let mut events: Vec<(u32, TaskEvent)> = Vec::new();
        {
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(());
            };
            for ((w, old), res) in writes.into_iter().zip(olds).zip(results) {
                match res {
                    Ok(version) => {
                        let mut rt = w.rt;
                        rt.version = version;
                        if rt.state != old.state || rt.run != old.run || !w.reason.is_empty() && w.reason != old.reason
                        {
                            events.push((
                                w.instance,
                                TaskEvent {
                                    run: rt.run,
                                    from: (rt.run == old.run).then_some(old.state),
                                    to: rt.state,
                                    at_ms: now,
                                    host: rt.host.clone(),
                                    reason: rt.reason.clone(),
                                    message: rt.message.clone(),
                                },
                            ));
                        }
                        if rt.run != old.run {
                            let t = &mut job.tasks[w.instance as usize];
                            t.last_seq = 0;
                            t.healthy = None;
                            t.exit_code = None;
                            t.rm_task = None;
                        }
                        job.tasks[w.instance as usize].rt = rt;
                        changed.push(crate::feed::Change::Task(feed_id.clone(), w.instance));
                    }
                    Err(e) => {
                        tracing::warn!(job = %job.id, instance = w.instance, error = %e, "task compare-and-set lost");
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        self.feed.publish(changed);
        self.append_events(&job_id, events).await?;
        if let Some(e) = first_err {
            self.reload_tasks(key).await?;
            return Err(e.into());
        }
        Ok(())
    }

    /// Appends task events of one job, all in one store operation.
    pub(crate) async fn append_events(&self, job_id: &str, events: Vec<(u32, TaskEvent)>) -> Result<(), JobError> {
        self.store.append_job_events(job_id, &events).await?;
        Ok(())
    }

    /// Re-reads a job's task runtimes after a lost compare-and-set.
    async fn reload_tasks(&self, key: u64) -> Result<(), JobError> {
        let Some(job_id) = self.mem().jobs.get(&key).map(|j| j.id.clone()) else {
            return Ok(());
        };
        let records = self.store.tasks_of_job(&job_id, &[]).await?;
        let mut m = self.mem();
        if let Some(job) = m.jobs.get_mut(&key) {
            for r in records {
                if let Some(t) = job.tasks.get_mut(r.instance as usize) {
                    t.rt = r.runtime;
                }
            }
        }
        Ok(())
    }

    /// Recounts the job's tasks, derives its state and writes the runtime if
    /// anything changed. Terminal job states come only from the lifecycle
    /// (mark-job) or from a kill that completed.
    pub(crate) async fn sync_job(&self, key: u64) -> Result<(), JobError> {
        let now = self.now();
        let (id, old, new) = {
            let m = self.mem();
            let Some(job) = m.jobs.get(&key) else {
                return Ok(());
            };
            let counts = job.counts();
            let mut rt = job.runtime.clone();
            let n = job.instance_count();
            let live = job.tasks.iter().any(|t| !t.rt.state.is_terminal() && t.rt.state != TaskState::Initialized);
            let state = if job.marked {
                rt.state
            } else if rt.goal != JobGoal::Run {
                if live { JobState::Killing } else { JobState::Killed }
            } else {
                match JobState::derive(&counts, n, 0) {
                    s if s.is_terminal() => JobState::Running,
                    s => s,
                }
            };
            rt.state = state;
            rt.task_counts = counts;
            if state.is_terminal() && rt.completed_at_ms.is_none() {
                rt.completed_at_ms = Some(now);
            }
            if rt.state == job.runtime.state
                && rt.task_counts == job.runtime.task_counts
                && rt.config_version == job.runtime.config_version
            {
                return Ok(());
            }
            rt.updated_at_ms = now;
            (job.id.clone(), job.runtime.clone(), rt)
        };
        self.put_job_runtime(key, &id, old.version, new).await
    }

    pub(crate) async fn put_job_runtime(
        &self,
        key: u64,
        id: &str,
        expected: u64,
        rt: paceline_model::job::JobRuntime,
    ) -> Result<(), JobError> {
        let stored = self.store.cas_job_runtime(id, expected, &rt).await?;
        if let Some(job) = self.mem().jobs.get_mut(&key) {
            job.runtime = stored;
        }
        self.feed.publish([crate::feed::Change::Job(Arc::from(id))]);
        Ok(())
    }

    // ---- resource manager --------------------------------------------------

    /// Hands runs (tasks in INITIALIZED) to the resource manager as gangs and
    /// writes them PENDING. Consecutive instances with the same resources
    /// form gangs of `sla.min_running_instances`.
    pub(crate) async fn submit(&self, key: u64, instances: &[u32]) -> Result<(), JobError> {
        if instances.is_empty() {
            return Ok(());
        }
        let writes = {
            // Lock order everywhere: resource manager, then the mirror (a
            // placement engine may call `placement_need` holding the former).
            let mut rm = self.rm();
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(());
            };
            let queued = self.queue_gangs(&mut rm, job, instances)?;
            queued
                .into_iter()
                .map(|i| {
                    let mut rt = job.tasks[i as usize].rt.clone();
                    rt.state = TaskState::Pending;
                    rt.config_version = rt.desired_config_version;
                    Write::new(i, rt, "SUBMITTED")
                })
                .collect()
        };
        self.write_tasks(key, writes).await
    }

    /// The in-memory half of [`JobManager::submit`]: queues the gangs in
    /// the resource manager and remembers each task's gang. Returns the
    /// instances queued, in order.
    pub(crate) fn queue_gangs(
        &self,
        rm: &mut paceline_resmgr::ResourceManager,
        job: &mut crate::state::JobEntry,
        instances: &[u32],
    ) -> Result<Vec<u32>, JobError> {
        let now = self.now();
        let cfg = job.config().clone();
        let gang_size = cfg.sla.min_running_instances.unwrap_or(1).max(1) as usize;
        let mut sorted: Vec<u32> = instances.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let res_of = |job: &crate::state::JobEntry, i: u32| {
            job.config_at(job.tasks[i as usize].rt.desired_config_version).task_spec(i).resources
        };
        // Runs of consecutive instances with equal resources, cut into gang-sized chunks.
        let mut groups: Vec<Vec<u32>> = Vec::new();
        for i in sorted {
            let extend = groups.last().is_some_and(|g: &Vec<u32>| {
                let last = g[g.len() - 1];
                last.wrapping_add(1) == i && g.len() < gang_size && res_of(job, last) == res_of(job, i)
            });
            match groups.last_mut() {
                Some(g) if extend => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        // `rm` is locked by the caller (before the mirror).
        let mut queued = Vec::new();
        for g in groups {
            let first = g[0];
            let spec = gang_spec(job.key, &cfg, first, g.len() as u32, res_of(job, first));
            let gang = rm.submit(&cfg.pool, spec, now).map_err(|e| JobError::Resmgr(e.to_string()))?;
            for i in g {
                job.tasks[i as usize].gang = Some(gang);
                queued.push(i);
            }
        }
        Ok(queued)
    }

    /// Tells the resource manager how a run ended (or that it runs), walking
    /// its table: LAUNCHING reaches SUCCEEDED through RUNNING, a kill we did
    /// not ask it for goes through KILLING.
    pub(crate) fn rm_report(&self, rm_task: Option<paceline_resmgr::TaskId>, state: TaskState) {
        let Some(id) = rm_task else { return };
        let now = self.now();
        let mut rm = self.rm();
        let Some(info) = rm.task(id) else { return };
        let steps: Vec<RmEvent> = match (info.state, state) {
            (RmState::Placed, TaskState::Launching | TaskState::Launched) => {
                vec![RmEvent::StartLaunch]
            }
            (RmState::Placed, TaskState::Running | TaskState::Starting) => {
                vec![RmEvent::StartLaunch, RmEvent::Running]
            }
            (RmState::Launching, TaskState::Running | TaskState::Starting) => {
                vec![RmEvent::Running]
            }
            (RmState::Launching, TaskState::Succeeded) => {
                vec![RmEvent::Running, RmEvent::Succeeded]
            }
            (RmState::Killing | RmState::Preempting, TaskState::Killed | TaskState::Failed | TaskState::Succeeded) => {
                vec![RmEvent::KillConfirmed]
            }
            (_, TaskState::Succeeded) => vec![RmEvent::Succeeded],
            (_, TaskState::Failed) => vec![RmEvent::Failed],
            (_, TaskState::Lost) => vec![RmEvent::Lost],
            (_, TaskState::Killed) => {
                if rm.kill(id, now).is_err() {
                    return;
                }
                vec![RmEvent::KillConfirmed]
            }
            _ => vec![],
        };
        for e in steps {
            if let Err(err) = rm.task_event(id, e, now) {
                tracing::debug!(task = id.0, event = ?e, error = %err, "resource manager refused a task event");
                break;
            }
        }
    }

    /// Gives a run that never reached a host back to the resource manager.
    fn rm_release(&self, rm: &mut paceline_resmgr::ResourceManager, t: &TaskEntry) {
        let now = self.now();
        if let Some(id) = t.rm_task {
            if rm.kill(id, now).is_ok() {
                let _ = rm.task_event(id, RmEvent::KillConfirmed, now);
            }
        } else if let Some(gang) = t.gang {
            // Cancels the whole queued gang: only done when the gang is one
            // task or every member is being released.
            rm.cancel(gang);
        }
    }

    // ---- the goal-state step -----------------------------------------------------

    /// Applies the goal-state table to the given instances.
    pub(crate) async fn step(&self, key: u64, instances: &[u32]) -> Result<(), JobError> {
        let mut submit = Vec::new();
        let mut release = Vec::new();
        let mut kill = Vec::new();
        {
            let m = self.mem();
            let Some(job) = m.jobs.get(&key) else {
                return Ok(());
            };
            for &i in instances {
                let Some(t) = job.tasks.get(i as usize) else {
                    continue;
                };
                match table::action(t.rt.state, t.rt.goal) {
                    GoalAction::Submit => submit.push(i),
                    GoalAction::Release => release.push(i),
                    GoalAction::KillRun | GoalAction::ResendKill => kill.push(i),
                    GoalAction::Launch | GoalAction::Wait | GoalAction::Done => {}
                }
            }
        }
        self.submit(key, &submit).await?;
        if !release.is_empty() {
            let writes = {
                let mut rm = self.rm();
                let m = self.mem();
                let Some(job) = m.jobs.get(&key) else {
                    return Ok(());
                };
                let mut writes = Vec::new();
                for i in release {
                    let t = &job.tasks[i as usize];
                    // A queued gang shared with members that still want to run
                    // stays queued; this member is released when placed.
                    let shared = t.gang.is_some_and(|g| job.tasks.iter().any(|o| o.gang == Some(g) && o.wants_run()));
                    if !shared {
                        self.rm_release(&mut rm, t);
                    }
                    let mut rt = t.rt.clone();
                    rt.state = TaskState::Killed;
                    rt.completed_at_ms = Some(self.now());
                    writes.push(Write::new(i, rt, "KILLED_BEFORE_LAUNCH"));
                }
                writes
            };
            self.write_tasks(key, writes).await?;
        }
        self.kill_runs(key, &kill, None).await
    }

    /// Writes the runs KILLING and asks their hosts to stop them.
    pub(crate) async fn kill_runs(&self, key: u64, instances: &[u32], reason: Option<&str>) -> Result<(), JobError> {
        if instances.is_empty() {
            return Ok(());
        }
        let now = self.now();
        let (writes, calls) = {
            let mut m = self.mem();
            let retry = self.config.kill_retry_ms;
            let Some(job) = m.jobs.get(&key) else {
                return Ok(());
            };
            let mut writes = Vec::new();
            let mut calls = Vec::new();
            let mut deadlines = Vec::new();
            for &i in instances {
                let t = &job.tasks[i as usize];
                let Some(host) = t.rt.host.clone() else {
                    continue;
                };
                let grace = job.config_at(t.rt.config_version).task_spec(i).kill_grace_period_secs;
                calls.push((host, TaskId::new(job.id.clone(), i).run_id(t.rt.run), grace));
                deadlines.push(Deadline {
                    at_ms: now + retry,
                    job_key: key,
                    instance: i,
                    run: t.rt.run,
                    kind: DeadlineKind::KillRetry,
                });
                if t.rt.state != TaskState::Killing {
                    let mut rt = t.rt.clone();
                    rt.state = TaskState::Killing;
                    writes.push(Write::new(i, rt, reason.unwrap_or("KILL_REQUESTED")));
                }
            }
            for d in deadlines {
                m.deadlines.push(d);
            }
            (writes, calls)
        };
        self.write_tasks(key, writes).await?;
        for (host, run_id, grace) in calls {
            if let Err(e) = self.launcher.kill(&host, &run_id, Some(grace)).await {
                tracing::warn!(%host, %run_id, error = %e, "kill failed; will retry");
            }
        }
        Ok(())
    }

    /// Starts a new run of each instance whose run ended (or was never
    /// started), at its desired config version, and submits it.
    pub(crate) async fn start_runs(&self, key: u64, instances: &[u32], reason: &str) -> Result<(), JobError> {
        let now = self.now();
        let writes = {
            let m = self.mem();
            let Some(job) = m.jobs.get(&key) else {
                return Ok(());
            };
            let sticky = matches!(job.kind(), JobKind::Stateful | JobKind::Daemon);
            let mut writes = Vec::new();
            for &i in instances {
                let Some(t) = job.tasks.get(i as usize) else {
                    continue;
                };
                if !t.rt.state.is_terminal() {
                    continue;
                }
                let mut rt = t.rt.next_run(now);
                rt.goal = TaskGoal::Run;
                if sticky {
                    // The instance's host is kept as its preferred host (its
                    // volume lives there; a daemon instance is bound to it).
                    rt.host = t.rt.host.clone();
                }
                if job.kind() == JobKind::Daemon
                    && let Some(h) = job.daemon_hosts.get(i as usize)
                    && !h.is_empty()
                {
                    rt.host = Some(h.clone());
                }
                writes.push(Write::new(i, rt, reason));
            }
            writes
        };
        let started: Vec<u32> = writes.iter().map(|w| w.instance).collect();
        self.write_tasks(key, writes).await?;
        self.submit(key, &started).await
    }

    // ---- the lifecycle slot ---------------------------------------------------

    /// Asks the job's lifecycle slot about `event` and carries out the
    /// answer, following up (at most a few rounds) when carrying it out
    /// changed what the plugin would see in a way it must react to.
    pub(crate) async fn drive(&self, key: u64, event: sdk::Event) -> Result<(), JobError> {
        self.drive_rounds(key, event).await?;
        self.sync_job(key).await
    }

    /// [`JobManager::drive`] without writing the job's runtime (a caller
    /// handling many events writes it once at the end).
    async fn drive_rounds(&self, key: u64, event: sdk::Event) -> Result<(), JobError> {
        self.drive_rounds_many(key, vec![event]).await
    }

    /// [`JobManager::drive_rounds`] for several events of one job: one
    /// lifecycle call for all of them (`on-events`), its answer carried out
    /// once, then single follow-ups as needed.
    async fn drive_rounds_many(&self, key: u64, mut events: Vec<sdk::Event>) -> Result<(), JobError> {
        if events.is_empty() {
            return Ok(());
        }
        for _ in 0..MAX_ROUNDS {
            let actions = self.ask(key, events).await?;
            match self.execute(key, actions).await? {
                Some(e) => events = vec![e],
                None => break,
            }
        }
        Ok(())
    }

    /// One lifecycle call about `events` (in the order they happened),
    /// against views of the job as it is now.
    async fn ask(&self, key: u64, events: Vec<sdk::Event>) -> Result<Vec<sdk::Action>, JobError> {
        let now = self.now();
        let (slot, job, tasks) = {
            let m = self.mem();
            let Some(j) = m.jobs.get(&key) else {
                return Ok(vec![]);
            };
            let kind = j.kind();
            let slot = j
                .config()
                .plugin_overrides
                .get(&format!("lifecycle/{}", kind.as_str()))
                .filter(|s| s.starts_with("lifecycle/"))
                .cloned()
                .unwrap_or_else(|| format!("lifecycle/{}", kind.as_str()));
            (slot, views::job_view(j, &m.draining), views::task_views(j, now))
        };
        let registry = self.registry.clone();
        let answer = tokio::task::spawn_blocking(move || registry.on_events(&slot, &job, &tasks, &events))
            .await
            .map_err(|e| JobError::Plugin(e.to_string()))?
            .map_err(|e| JobError::Plugin(e.to_string()))?;
        Ok(answer.value)
    }

    /// Carries out lifecycle actions, each distinct action once (an answer
    /// to many events may repeat a job-wide decision). Returns a follow-up
    /// event when the update moved without any run changing (so the plugin
    /// must be asked again).
    async fn execute(&self, key: u64, actions: Vec<sdk::Action>) -> Result<Option<sdk::Event>, JobError> {
        let mut follow = None;
        let mut launch = Vec::new();
        let mut kill = Vec::new();
        let mut seen = std::collections::HashSet::with_capacity(actions.len());
        for a in actions {
            if !seen.insert(a.clone()) {
                continue;
            }
            match a {
                sdk::Action::Launch(i) => launch.push(i),
                sdk::Action::Kill(i) => kill.push(i),
                sdk::Action::RestartAfter(r) => {
                    let mut m = self.mem();
                    let now = self.now();
                    let Some(job) = m.jobs.get(&key) else {
                        continue;
                    };
                    let Some(t) = job.tasks.get(r.instance as usize) else {
                        continue;
                    };
                    let floor =
                        u64::from(job.config_at(t.rt.config_version).task_spec(r.instance).restart_policy.backoff_secs)
                            * 1000;
                    let d = Deadline {
                        at_ms: now + r.delay_ms.max(floor),
                        job_key: key,
                        instance: r.instance,
                        run: t.rt.run,
                        kind: DeadlineKind::Restart,
                    };
                    m.deadlines.push(d);
                }
                sdk::Action::MarkJob(s) => self.mark_job(key, views::from_plugin_job_state(s)).await?,
                sdk::Action::UpdateBatch(batch) => {
                    if self.update_batch(key, &batch).await? {
                        follow = Some(sdk::Event::UpdateChanged);
                    }
                }
                sdk::Action::UpdateFinished(rollback) => {
                    if self.finish_update(key, rollback).await? {
                        follow = Some(sdk::Event::UpdateChanged);
                    }
                }
            }
        }
        self.launch_instances(key, &launch).await?;
        self.kill_instances(key, &kill).await?;
        Ok(follow)
    }

    /// The `launch` action: create missing instances, start a new run of
    /// those whose run ended, submit those never started.
    pub(crate) async fn launch_instances(&self, key: u64, instances: &[u32]) -> Result<(), JobError> {
        if instances.is_empty() {
            return Ok(());
        }
        self.ensure_instances(key, instances.iter().copied().max().unwrap_or(0) + 1).await?;
        let (terminal, fresh, goal_writes) = {
            let m = self.mem();
            let Some(job) = m.jobs.get(&key) else {
                return Ok(());
            };
            let (mut terminal, mut fresh, mut goal_writes) = (vec![], vec![], vec![]);
            for &i in instances {
                let t = &job.tasks[i as usize];
                if t.rt.state.is_terminal() {
                    terminal.push(i);
                } else if t.rt.state == TaskState::Initialized {
                    fresh.push(i);
                    if t.rt.goal != TaskGoal::Run {
                        let mut rt = t.rt.clone();
                        rt.goal = TaskGoal::Run;
                        goal_writes.push(Write::new(i, rt, ""));
                    }
                }
            }
            (terminal, fresh, goal_writes)
        };
        self.write_tasks(key, goal_writes).await?;
        self.start_runs(key, &terminal, "LAUNCH").await?;
        self.submit(key, &fresh).await
    }

    /// Creates task rows up to `count` instances (INITIALIZED, desired version).
    pub(crate) async fn ensure_instances(&self, key: u64, count: u32) -> Result<(), JobError> {
        let now = self.now();
        let (id, new) = {
            let m = self.mem();
            let Some(job) = m.jobs.get(&key) else {
                return Ok(());
            };
            let have = job.tasks.len() as u32;
            if count <= have {
                return Ok(());
            }
            let v = job.runtime.desired_config_version;
            let new: Vec<(u32, TaskRuntime)> = (have..count)
                .map(|i| {
                    let mut rt = TaskRuntime::initial(v, now);
                    if job.kind() == JobKind::Daemon {
                        rt.host = job.daemon_hosts.get(i as usize).filter(|h| !h.is_empty()).cloned();
                    }
                    (i, rt)
                })
                .collect();
            (job.id.clone(), new)
        };
        self.store.create_tasks(&id, &new).await?;
        let mut m = self.mem();
        if let Some(job) = m.jobs.get_mut(&key) {
            for (_, mut rt) in new {
                rt.version = 1;
                job.tasks.push(TaskEntry::new(rt));
            }
        }
        Ok(())
    }

    /// The `kill` action: the instance stops (removed when at or above the
    /// count). A run past the job's max run time keeps its goal: it ends
    /// FAILED (reason MAX_RUN_TIME) and the lifecycle decides about a retry.
    pub(crate) async fn kill_instances(&self, key: u64, instances: &[u32]) -> Result<(), JobError> {
        if instances.is_empty() {
            return Ok(());
        }
        let now = self.now();
        let (writes, overrun) = {
            let m = self.mem();
            let Some(job) = m.jobs.get(&key) else {
                return Ok(());
            };
            let n = job.instance_count();
            let max_ms = job.config().sla.max_run_time_secs.map(|s| s * 1000);
            let mut writes = Vec::new();
            let mut overrun = Vec::new();
            for &i in instances {
                let Some(t) = job.tasks.get(i as usize) else {
                    continue;
                };
                let over = t.rt.state == TaskState::Running
                    && max_ms.is_some_and(|max| t.rt.started_at_ms.is_some_and(|s| now.saturating_sub(s) >= max));
                if over && t.wants_run() {
                    overrun.push(i);
                    continue;
                }
                let goal = if i >= n { TaskGoal::Delete } else { TaskGoal::Kill };
                if t.rt.goal != goal {
                    let mut rt = t.rt.clone();
                    rt.goal = goal;
                    writes.push(Write::new(i, rt, ""));
                }
            }
            (writes, overrun)
        };
        self.write_tasks(key, writes).await?;
        self.kill_runs(key, &overrun, Some(MAX_RUN_TIME)).await?;
        let rest: Vec<u32> = instances.iter().copied().filter(|i| !overrun.contains(i)).collect();
        self.step(key, &rest).await
    }

    async fn mark_job(&self, key: u64, state: JobState) -> Result<(), JobError> {
        let (id, old, rt, live) = {
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(());
            };
            if job.runtime.state.is_terminal() {
                return Ok(());
            }
            job.marked = state.is_terminal();
            let mut rt = job.runtime.clone();
            rt.state = state;
            // Counted now, with the state: a reader must not see SUCCEEDED
            // beside the counts from before the last tasks ended (the job's
            // counts are otherwise refreshed after the lifecycle's actions).
            rt.task_counts = job.counts();
            rt.message = format!("marked {state} by the lifecycle");
            if state.is_terminal() {
                rt.completed_at_ms = Some(self.now());
            }
            let live: Vec<u32> =
                (0..job.tasks.len() as u32).filter(|&i| !job.tasks[i as usize].rt.state.is_terminal()).collect();
            (job.id.clone(), job.runtime.version, rt, live)
        };
        self.put_job_runtime(key, &id, old, rt).await?;
        if state == JobState::Failed || state == JobState::Killed {
            // What still runs of a failed job is stopped.
            let writes = {
                let m = self.mem();
                let Some(job) = m.jobs.get(&key) else {
                    return Ok(());
                };
                live.iter()
                    .map(|&i| {
                        let mut rt = job.tasks[i as usize].rt.clone();
                        rt.goal = TaskGoal::Kill;
                        Write::new(i, rt, "")
                    })
                    .collect()
            };
            self.write_tasks(key, writes).await?;
            self.step(key, &live).await?;
        }
        Ok(())
    }

    // ---- joints -----------------------------------------------------------------

    /// What placement needs for instance `instance` of the job with key
    /// `job_key`; `None` if the job or instance is unknown or the task is
    /// not waiting for placement (the placement engine then gives the task
    /// back to the resource manager).
    pub fn placement_need(&self, job_key: u64, instance: u32) -> Option<PlacementNeed> {
        let m = self.mem();
        let job = m.jobs.get(&job_key)?;
        let t = job.tasks.get(instance as usize)?;
        if !matches!(t.rt.state, TaskState::Pending | TaskState::Ready | TaskState::Placing) || !t.wants_run() {
            return None;
        }
        let cfg = job.config_at(t.rt.desired_config_version);
        let kind = cfg.kind;
        let slot_default = format!("placement/{}", kind.as_str());
        let placement_slot = cfg
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
        Some(PlacementNeed {
            job_id: job.id.clone(),
            kind,
            spec: Arc::new(cfg.task_spec(instance).clone()),
            preferred_host,
            host_required: kind == JobKind::Daemon,
            placement_slot,
            run_id: TaskId::new(job.id.clone(), instance).run_id(t.rt.run),
            avoid_host: if kind == JobKind::Daemon { None } else { t.avoid_host.clone() },
        })
    }

    /// Runs the host side should hold: every run between LAUNCHING and its
    /// end, as (host, run id, resources, the last update seq handled). The
    /// host manager reconciles its hosts against this after a restart or a
    /// failover (reporting LOST what is missing, with a seq after the last
    /// one handled so that it is not taken for a duplicate; killing what is
    /// not expected).
    pub fn expected_runs(&self) -> Vec<(String, String, paceline_model::Resources, u64)> {
        let m = self.mem();
        let mut out = Vec::new();
        for job in m.jobs.values() {
            for (i, t) in job.tasks.iter().enumerate() {
                if t.rt.state.is_on_host()
                    && let Some(h) = &t.rt.host
                {
                    let res = job.config_at(t.rt.config_version).task_spec(i as u32).resources;
                    out.push((h.clone(), TaskId::new(job.id.clone(), i as u32).run_id(t.rt.run), res, t.last_seq));
                }
            }
        }
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// Placement chose hosts for tasks under offer lease `lease_id`. For each
    /// task still waiting: write LAUNCHING with its host (events PLACED,
    /// LAUNCHING), launch the runs per host, then note LAUNCHED and report
    /// PLACED and STARTLAUNCH to the resource manager (the placement engine
    /// must not report `Placed` itself). A failed launch gives the task back
    /// to the resource manager (`placement_failed`: READY after a backoff)
    /// under a new run id. Placements for tasks no longer waiting (killed,
    /// already placed) release the resource manager's task.
    ///
    /// Cost: each job's tasks are written together (one compare-and-set
    /// batch per step, whatever the number of hosts), and jobs proceed
    /// concurrently so the store commits their writes in shared groups: a
    /// round of thousands of placements costs a handful of commits.
    pub async fn on_placed(&self, lease_id: &str, placements: Vec<Placement>) {
        let _op = self.ops.lock().await;
        let mut jobs: BTreeMap<u64, BTreeMap<String, Vec<(u32, paceline_resmgr::TaskId)>>> = BTreeMap::new();
        {
            let mut rm = self.rm();
            let m = self.mem();
            for p in placements {
                let ok = m.jobs.get(&p.job_key).and_then(|j| j.tasks.get(p.instance as usize)).is_some_and(|t| {
                    matches!(t.rt.state, TaskState::Pending | TaskState::Ready | TaskState::Placing) && t.wants_run()
                });
                if ok {
                    jobs.entry(p.job_key).or_default().entry(p.host).or_default().push((p.instance, p.resmgr_task));
                } else {
                    tracing::info!(
                        job = p.job_key,
                        instance = p.instance,
                        "placement for a task no longer waiting; released"
                    );
                    let now = self.now();
                    if rm.kill(p.resmgr_task, now).is_ok() {
                        let _ = rm.task_event(p.resmgr_task, RmEvent::KillConfirmed, now);
                    }
                }
            }
        }
        use futures::StreamExt;
        futures::stream::iter(jobs)
            .map(|(key, hosts)| async move {
                if let Err(e) = self.launch_job(lease_id, key, hosts).await {
                    tracing::error!(job = key, error = %e, "launch failed");
                }
            })
            .buffer_unordered(CONCURRENT_JOBS)
            .collect::<Vec<()>>()
            .await;
    }

    /// Launches one job's placed tasks, grouped per host.
    async fn launch_job(
        &self,
        lease: &str,
        key: u64,
        hosts: BTreeMap<String, Vec<(u32, paceline_resmgr::TaskId)>>,
    ) -> Result<(), JobError> {
        let now = self.now();
        let (job_id, writes, placed_events, runs) = {
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(());
            };
            let job_id = job.id.clone();
            let n: usize = hosts.values().map(Vec::len).sum();
            let mut writes = Vec::with_capacity(n);
            let mut events = Vec::with_capacity(n);
            let mut runs: Vec<Vec<LaunchRequest>> = Vec::with_capacity(hosts.len());
            let placed_message = format!("lease {lease}");
            for (host, tasks) in &hosts {
                let mut host_runs = Vec::with_capacity(tasks.len());
                for &(i, rm_task) in tasks {
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
                    rt.config_version = rt.desired_config_version;
                    let spec = match job.configs.get(&rt.config_version) {
                        Some(cfg) => cfg.task_spec(i).clone(),
                        None => job.config().task_spec(i).clone(),
                    };
                    let run_id = TaskId::new(job_id.clone(), i).run_id(rt.run);
                    let mut env = BTreeMap::new();
                    env.insert("PACELINE_JOB_ID".to_string(), job_id.clone());
                    env.insert("PACELINE_INSTANCE".to_string(), i.to_string());
                    env.insert("PACELINE_RUN_ID".to_string(), run_id.clone());
                    host_runs.push(LaunchRequest {
                        task_id: TaskId::new(job_id.clone(), i).to_string(),
                        run_id,
                        spec,
                        env,
                    });
                    writes.push(Write::new(i, rt, "LAUNCHING"));
                }
                runs.push(host_runs);
            }
            (job_id, writes, events, runs)
        };
        // The PLACED event first, then LAUNCHING: one write each would double
        // the fsyncs; the event log still shows both steps.
        self.append_events(&job_id, placed_events).await?;
        self.write_tasks(key, writes).await?;
        {
            // Report PLACED now so the resource manager's PLACING timeout does not fire during the launch.
            let mut rm = self.rm();
            for &(_, id) in hosts.values().flatten() {
                if rm.task(id).is_some_and(|t| t.state == RmState::Placing) {
                    let _ = rm.task_event(id, RmEvent::Placed, now);
                }
            }
        }
        let outcomes = futures::future::join_all(
            hosts.keys().zip(runs).map(|(host, runs)| self.launcher.launch(lease, host, runs)),
        )
        .await;
        let mut writes = Vec::new();
        let mut launched = Vec::new();
        let mut retry = Vec::new();
        {
            let mut rm = self.rm();
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(());
            };
            let kind = job.kind();
            for ((host, tasks), outcome) in hosts.iter().zip(outcomes) {
                match outcome {
                    Ok(()) => {
                        for &(i, id) in tasks {
                            let t = &mut job.tasks[i as usize];
                            if rm.task(id).is_some_and(|x| x.state == RmState::Placed) {
                                let _ = rm.task_event(id, RmEvent::StartLaunch, now);
                            }
                            // A run update may already have moved it further.
                            // LAUNCHED is the mirror's state and an event, not
                            // a runtime write of its own: recovery treats a
                            // stored LAUNCHING exactly as LAUNCHED (both wait
                            // for the host's report, see `table`), so the
                            // task's next write (its STARTING or RUNNING)
                            // carries it. One compare-and-set per task less.
                            if t.rt.state == TaskState::Launching {
                                t.rt.state = TaskState::Launched;
                                t.rt.reason = "LAUNCHED".into();
                                t.rt.updated_at_ms = now;
                                launched.push((
                                    i,
                                    TaskEvent {
                                        run: t.rt.run,
                                        from: Some(TaskState::Launching),
                                        to: TaskState::Launched,
                                        at_ms: now,
                                        host: t.rt.host.clone(),
                                        reason: "LAUNCHED".into(),
                                        message: String::new(),
                                    },
                                ));
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(%host, error = %e, "launch refused; tasks go back to READY");
                        for &(i, id) in tasks {
                            let t = &mut job.tasks[i as usize];
                            let why = format!("launch on {host} failed: {e}");
                            let rt = refused_launch(&mut rm, kind, t, Some(id), host, why, now);
                            retry.push(i);
                            writes.push(Write::new(i, rt, "LAUNCH_FAILED"));
                        }
                    }
                }
            }
        }
        self.append_events(&job_id, launched).await?;
        self.write_tasks(key, writes).await?;
        if !retry.is_empty() {
            self.submit(key, &retry).await?;
        }
        self.sync_job(key).await
    }

    /// A host reported a change of a run. `Ok` means it is durably handled
    /// (or was a duplicate / of a stale run) and may be acknowledged.
    pub async fn on_run_update(&self, update: &RunUpdate) -> Result<(), JobError> {
        self.on_run_updates(std::slice::from_ref(update)).await.pop().unwrap_or(Ok(()))
    }

    /// Many run updates at once, in the order the host sent them; one result
    /// per update, in the same order (`Ok`: durably handled, acknowledge it).
    /// Updates of one job are written together (one compare-and-set batch
    /// per wave, see `apply_run_updates`) and jobs proceed concurrently, so
    /// a burst of thousands of updates costs a few group commits.
    pub async fn on_run_updates(&self, updates: &[RunUpdate]) -> Vec<Result<(), JobError>> {
        let _op = self.ops.lock().await;
        let mut results: Vec<Result<(), JobError>> = Vec::with_capacity(updates.len());
        results.resize_with(updates.len(), || Ok(()));
        let mut jobs: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        {
            let m = self.mem();
            for (i, u) in updates.iter().enumerate() {
                match parse_run_id(&u.run_id) {
                    Some((job_id, _, _)) => {
                        if let Some(key) = m.key_of(job_id) {
                            jobs.entry(key).or_default().push(i);
                        }
                    }
                    None => {
                        tracing::warn!(run = %u.run_id, "run update with a malformed run id; dropped")
                    }
                }
            }
        }
        use futures::StreamExt;
        let done: Vec<(Vec<usize>, Vec<Result<(), JobError>>)> = futures::stream::iter(jobs)
            .map(|(key, idx)| async move {
                let ups: Vec<&RunUpdate> = idx.iter().map(|&i| &updates[i]).collect();
                let res = self.apply_run_updates(key, &ups).await;
                (idx, res)
            })
            .buffer_unordered(CONCURRENT_JOBS)
            .collect()
            .await;
        for (idx, res) in done {
            for (i, r) in idx.into_iter().zip(res) {
                results[i] = r;
            }
        }
        results
    }

    /// One job's run updates, in order. They are applied in waves: a wave
    /// ends before an instance's second update, so each update sees the
    /// state the one before it wrote. Each wave is one compare-and-set batch;
    /// the lifecycle hears every change; the job's runtime is written once.
    async fn apply_run_updates(&self, key: u64, ups: &[&RunUpdate]) -> Vec<Result<(), JobError>> {
        let mut results: Vec<Result<(), JobError>> = Vec::with_capacity(ups.len());
        results.resize_with(ups.len(), || Ok(()));
        // Launches a host refused before starting anything are not failures
        // of the task: the run is placed again, elsewhere if it can be.
        let mut rest = Vec::with_capacity(ups.len());
        for (i, u) in ups.iter().enumerate() {
            if u.state == RunState::Failed && u.reason == LAUNCH_REJECTED {
                results[i] = self.launch_rejected(key, u).await;
            } else {
                rest.push(i);
            }
        }
        let ordered: Vec<&RunUpdate> = rest.iter().map(|&i| ups[i]).collect();
        for (i, r) in rest.into_iter().zip(self.apply_in_waves(key, &ordered).await) {
            results[i] = r;
        }
        if let Err(e) = self.drain_pass(key).await {
            tracing::warn!(job = key, error = %e, "drain pass after run updates failed");
        }
        if let Err(e) = self.sync_job(key).await {
            tracing::warn!(job = key, error = %e, "job runtime not updated after run updates; the next change retries");
        }
        results
    }

    /// A run's launch was refused by its host after the job manager handed
    /// it over (`LAUNCH_REJECTED`: e.g. the Mesos offer it was to use was
    /// rescinded): unless the run has moved on, its next run is written
    /// (LAUNCH_FAILED, no failure counted), the old host is avoided, and the
    /// task goes back to the resource manager.
    async fn launch_rejected(&self, key: u64, u: &RunUpdate) -> Result<(), JobError> {
        let Some((_, instance, run)) = parse_run_id(&u.run_id) else {
            return Ok(());
        };
        let now = self.now();
        let write = {
            let mut rm = self.rm();
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(());
            };
            let kind = job.kind();
            let Some(t) = job.tasks.get_mut(instance as usize) else {
                return Ok(());
            };
            if t.rt.run != run || !matches!(t.rt.state, TaskState::Launching | TaskState::Launched) || !t.wants_run() {
                return Ok(()); // stale, or already moved on
            }
            let rm_task = t.rm_task.take();
            let why = format!("launch on {} refused: {}", u.host, u.message);
            let rt = refused_launch(&mut rm, kind, t, rm_task, &u.host, why, now);
            Write::new(instance, rt, "LAUNCH_FAILED")
        };
        self.write_tasks(key, vec![write]).await?;
        self.submit(key, &[instance]).await
    }

    /// [`JobManager::apply_run_updates`] for updates other than refused launches.
    async fn apply_in_waves(&self, key: u64, ups: &[&RunUpdate]) -> Vec<Result<(), JobError>> {
        let mut results: Vec<Result<(), JobError>> = Vec::with_capacity(ups.len());
        results.resize_with(ups.len(), || Ok(()));
        let mut next = 0;
        while next < ups.len() {
            let now = self.now();
            // Position in `wave` of each instance's pending write.
            let mut slot_of: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
            let mut wave: Vec<(usize, Prepared)> = Vec::new();
            // Updates folded into a later one of the same run: already
            // handled, acknowledged with the wave.
            let mut folded: Vec<usize> = Vec::new();
            let mut superseded: Vec<(u32, TaskEvent)> = Vec::new();
            while next < ups.len() {
                let instance = parse_run_id(&ups[next].run_id).map_or(u32::MAX, |p| p.1);
                match slot_of.get(&instance).copied() {
                    None => {
                        if let Some(p) = self.prepare_run_update(key, ups[next], now, None) {
                            slot_of.insert(instance, wave.len());
                            wave.push((next, p));
                        }
                    }
                    // A transient state (STARTING) followed in the same
                    // burst by the next one of the same run: write only the
                    // latest, keep the event of the one it supersedes, and
                    // tell the lifecycle the state the task is in now.
                    Some(at) if !wave[at].1.to.is_terminal() => {
                        let base = &wave[at].1;
                        if let Some(p) = self.prepare_run_update(key, ups[next], now, Some(base)) {
                            if let Some(w) = &base.write {
                                superseded.push((
                                    instance,
                                    TaskEvent {
                                        run: base.run,
                                        from: Some(base.from),
                                        to: base.to,
                                        at_ms: now,
                                        host: w.rt.host.clone(),
                                        reason: w.reason.clone(),
                                        message: w.message.clone(),
                                    },
                                ));
                            }
                            let (first, _) = std::mem::replace(&mut wave[at], (next, p));
                            folded.push(first);
                        }
                    }
                    // After a terminal state: a new wave sees it written.
                    Some(_) => break,
                }
                next += 1;
            }
            if wave.is_empty() {
                continue;
            }
            let writes = wave.iter_mut().filter_map(|(_, p)| p.write.take()).collect();
            let written = self.write_tasks(key, writes).await;
            // Only once the state they led to is written.
            if written.is_ok() && !superseded.is_empty() {
                let job_id = self.mem().jobs.get(&key).map(|j| j.id.clone());
                if let Some(job_id) = job_id
                    && let Err(e) = self.append_events(&job_id, superseded).await
                {
                    tracing::warn!(job = key, error = %e, "events of superseded states not recorded");
                }
            }
            if written.is_err() {
                for i in &folded {
                    results[*i] = Err(JobError::State("not written: folded into a failed write".into()));
                }
            }
            if let Err(e) = written {
                // Not durable: forget the sequence numbers so the host's
                // resend is handled rather than taken for a duplicate.
                let msg = e.to_string();
                {
                    let mut m = self.mem();
                    if let Some(job) = m.jobs.get_mut(&key) {
                        for (_, p) in &wave {
                            if let Some(t) = job.tasks.get_mut(p.instance as usize) {
                                t.last_seq = p.previous_seq;
                            }
                        }
                    }
                }
                for (i, _) in &wave {
                    results[*i] = Err(JobError::State(format!("not written: {msg}")));
                }
                continue;
            }
            // Every change of the wave goes to the lifecycle in one call.
            let mut events = Vec::with_capacity(wave.len());
            let mut asked = Vec::with_capacity(wave.len());
            for (i, p) in wave {
                match self.after_run_update(key, &p, now).await {
                    Ok(Some(e)) => {
                        events.push(e);
                        asked.push(i);
                    }
                    Ok(None) => {}
                    Err(e) => results[i] = Err(e),
                }
            }
            if let Err(e) = self.drive_rounds_many(key, events).await {
                // The writes are durable; what failed is carrying out the
                // lifecycle's answer. Reported on the updates that asked, as
                // when each asked alone.
                let msg = e.to_string();
                for i in asked {
                    results[i] = Err(JobError::Plugin(msg.clone()));
                }
            }
        }
        results
    }

    /// The in-memory half of a run update: checks it is new and current,
    /// and builds the task write. `None`: nothing to write (stale run,
    /// duplicate, an older state redelivered, or no change).
    ///
    /// `base`: an update of the same instance earlier in this burst, not yet
    /// written; this one builds on its runtime and replaces it.
    fn prepare_run_update(&self, key: u64, update: &RunUpdate, now: u64, base: Option<&Prepared>) -> Option<Prepared> {
        let (_, instance, run) = parse_run_id(&update.run_id)?;
        let mut m = self.mem();
        let job = m.jobs.get_mut(&key)?;
        let t = job.tasks.get_mut(instance as usize)?;
        if t.rt.run != run || update.seq <= t.last_seq && t.last_seq > 0 {
            return None; // stale run or duplicate
        }
        let mut rt = match base.and_then(|b| b.write.as_ref()) {
            Some(w) => w.rt.clone(),
            None => t.rt.clone(),
        };
        let mut to = update.state.task_state();
        if update.state == RunState::Killed && rt.reason == MAX_RUN_TIME {
            to = TaskState::Failed;
        }
        let from = rt.state;
        if from.is_terminal() || host_rank(to) < host_rank(from) {
            t.last_seq = update.seq;
            return None;
        }
        let previous_seq = base.map_or(t.last_seq, |b| b.previous_seq);
        let stored_state = t.rt.state;
        t.last_seq = update.seq;
        let health_changed = update.healthy != t.healthy;
        t.healthy = update.healthy;
        if update.exit_code.is_some() {
            t.exit_code = update.exit_code;
        }
        if to == from && !health_changed {
            return None;
        }
        let was_max_run_time = rt.reason == MAX_RUN_TIME;
        rt.state = to;
        rt.healthy = update.healthy;
        if rt.host.is_none() || to != from {
            rt.host = Some(update.host.clone());
        }
        if !update.ports.is_empty() {
            rt.ports = update.ports.clone();
        }
        if to == TaskState::Running && rt.started_at_ms.is_none() {
            // The job manager's clock, not the host's: max run time and
            // running-for are measured on one clock.
            rt.started_at_ms = Some(now);
        }
        if to.is_terminal() {
            rt.completed_at_ms = Some(now);
            match to {
                TaskState::Failed | TaskState::Lost => rt.failure_count += 1,
                TaskState::Succeeded => rt.failure_count = 0,
                _ => {}
            }
        }
        let reason = if to == TaskState::Failed && was_max_run_time {
            MAX_RUN_TIME.to_string()
        } else if to == from {
            match update.healthy {
                Some(true) => "HEALTHY".to_string(),
                Some(false) => "UNHEALTHY".to_string(),
                None => update.reason.clone(),
            }
        } else {
            update.reason.clone()
        };
        Some(Prepared {
            instance,
            run,
            to,
            from,
            changed: to != stored_state,
            health_changed: health_changed || base.is_some_and(|b| b.health_changed),
            previous_seq,
            write: Some(Write { instance, rt, reason, message: update.message.clone() }),
        })
    }

    /// What follows a written run update: the resource manager hears of it,
    /// a max-run-time deadline is set, update progress moves, and a run
    /// killed while its goal is to run restarts. Returns the event the
    /// lifecycle must hear (the caller asks once for the whole wave).
    async fn after_run_update(&self, key: u64, p: &Prepared, now: u64) -> Result<Option<sdk::Event>, JobError> {
        let (instance, to, changed) = (p.instance, p.to, p.changed);
        let (rm_task, goal, max_run) = {
            let m = self.mem();
            let Some(job) = m.jobs.get(&key) else {
                return Ok(None);
            };
            let t = &job.tasks[instance as usize];
            (t.rm_task, t.rt.goal, job.config().sla.max_run_time_secs)
        };
        if changed {
            self.rm_report(rm_task, to);
        }
        if changed
            && to == TaskState::Running
            && let Some(secs) = max_run
        {
            self.mem().deadlines.push(Deadline {
                at_ms: now + secs * 1000,
                job_key: key,
                instance,
                run: p.run,
                kind: DeadlineKind::MaxRunTime,
            });
        }
        let progressed = self.note_update_progress(key, instance).await?;
        // A run killed while its goal is still to run was an engine restart
        // (update, drain, restart, preemption): start the next run at once.
        if to == TaskState::Killed && goal == TaskGoal::Run {
            let preempted = self.mem().jobs.get(&key).is_some_and(|j| j.tasks[instance as usize].preempted);
            if preempted {
                self.requeued_run(key, instance).await?;
            } else {
                self.start_runs(key, &[instance], "RESTART").await?;
            }
            Ok(Some(sdk::Event::UpdateChanged))
        } else if changed || p.health_changed || progressed {
            Ok(Some(sdk::Event::TaskChanged(sdk::TaskChange { instance, state: views::task_state(to) })))
        } else {
            Ok(None)
        }
    }

    /// Fires due deadlines: restarts after backoff, max-run-time checks, kill retries.
    pub async fn tick(&self, now_ms: u64) -> Result<(), JobError> {
        let _op = self.ops.lock().await;
        let due = self.mem().deadlines.due(now_ms);
        for d in due {
            let current = {
                let m = self.mem();
                m.jobs
                    .get(&d.job_key)
                    .and_then(|j| j.tasks.get(d.instance as usize))
                    .map(|t| (t.rt.run, t.rt.state, t.rt.goal))
            };
            let Some((run, state, goal)) = current else {
                continue;
            };
            if run != d.run {
                continue;
            }
            match d.kind {
                DeadlineKind::Restart if state.is_terminal() && goal == TaskGoal::Run => {
                    let done = self.mem().jobs.get(&d.job_key).is_some_and(|j| j.runtime.state.is_terminal());
                    if !done {
                        self.start_runs(d.job_key, &[d.instance], "RESTART_AFTER_BACKOFF").await?;
                        self.sync_job(d.job_key).await?;
                    }
                }
                DeadlineKind::MaxRunTime if state == TaskState::Running => {
                    self.drive(d.job_key, sdk::Event::Timer(d.instance)).await?;
                }
                DeadlineKind::KillRetry if state == TaskState::Killing => {
                    self.kill_runs(d.job_key, &[d.instance], None).await?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Kill requests the resource manager handed out (`TickReport::kills`).
    /// Preemption victims are killed and, once the kill is confirmed, start
    /// a new run (the resource manager requeued the task itself). Requested
    /// kills are the job manager's own and are already under way.
    pub async fn on_resmgr_kills(&self, kills: Vec<paceline_resmgr::KillRequest>) -> Result<(), JobError> {
        let _op = self.ops.lock().await;
        for k in kills {
            if let paceline_resmgr::KillReason::Preempted(_) = k.reason {
                let live = {
                    let m = self.mem();
                    m.jobs
                        .get(&k.job)
                        .and_then(|j| j.tasks.get(k.instance as usize))
                        .is_some_and(|t| t.rt.state.is_on_host())
                };
                if live {
                    if let Some(t) = self.mem().jobs.get_mut(&k.job).and_then(|j| j.tasks.get_mut(k.instance as usize))
                    {
                        t.preempted = true;
                    }
                    self.kill_runs(k.job, &[k.instance], Some("PREEMPTED")).await?;
                }
            }
        }
        Ok(())
    }

    /// The next run of a preempted instance: the resource manager requeued
    /// the task when the kill was confirmed, so the run is written PENDING
    /// without a new gang.
    async fn requeued_run(&self, key: u64, instance: u32) -> Result<(), JobError> {
        let now = self.now();
        let write = {
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(());
            };
            let sticky = matches!(job.kind(), JobKind::Stateful | JobKind::Daemon);
            let t = &mut job.tasks[instance as usize];
            t.preempted = false;
            let mut rt = t.rt.next_run(now);
            rt.state = TaskState::Pending;
            rt.goal = TaskGoal::Run;
            if sticky {
                rt.host = t.rt.host.clone();
            }
            Write::new(instance, rt, "PREEMPTED_REQUEUED")
        };
        self.write_tasks(key, vec![write]).await
    }

    /// Updates per-instance progress of the update after a run change:
    /// an in-flight instance whose run at the target version is RUNNING (and
    /// healthy, when it has a health check) succeeded; one whose run at the
    /// target failed, was lost or reported unhealthy failed. Returns whether
    /// anything moved.
    pub(crate) async fn note_update_progress(&self, key: u64, instance: u32) -> Result<bool, JobError> {
        let now = self.now();
        let (update_id, progress) = {
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(false);
            };
            let target = job.target_version();
            let Some(t) = job.tasks.get(instance as usize) else {
                return Ok(false);
            };
            let has_check = job.configs.get(&target).is_some_and(|c| c.task_spec(instance).health_check.is_some());
            let (state, healthy, version) = (t.rt.state, t.healthy, t.rt.config_version);
            let Some(u) = job.update.as_mut().filter(|u| u.is_active()) else {
                return Ok(false);
            };
            let Some(p) = u.progress.get_mut(&instance) else {
                return Ok(false);
            };
            if p.state != InstanceUpdateState::InProgress || version != target {
                return Ok(false);
            }
            let next = if state == TaskState::Running && (!has_check || healthy == Some(true)) {
                InstanceUpdateState::Succeeded
            } else if matches!(state, TaskState::Failed | TaskState::Lost) || healthy == Some(false) {
                InstanceUpdateState::Failed
            } else {
                return Ok(false);
            };
            p.state = next;
            p.updated_at_ms = now;
            (u.update.id.clone(), p.clone())
        };
        self.store.put_update_progress(&update_id, &[progress]).await?;
        Ok(true)
    }
}

/// Splits `<job>-<instance>-<run>` (job ids may contain `-`).
pub(crate) fn parse_run_id(run_id: &str) -> Option<(&str, u32, u64)> {
    let mut parts = run_id.rsplitn(3, '-');
    let run = parts.next()?.parse().ok()?;
    let instance = parts.next()?.parse().ok()?;
    let job = parts.next()?;
    Some((job, instance, run))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_parse_from_the_right() {
        assert_eq!(parse_run_id("my-job-3-7"), Some(("my-job", 3, 7)));
        assert_eq!(parse_run_id("x-1"), None);
    }
}

/// The resource manager's view of `tasks` instances of a job from `first`,
/// each needing `per_task`: its kind, priority and preemption rules.
pub(crate) fn gang_spec(
    job_key: u64,
    cfg: &paceline_model::job::JobConfig,
    first: u32,
    tasks: u32,
    per_task: paceline_model::Resources,
) -> GangSpec {
    GangSpec {
        job: job_key,
        first_instance: first,
        kind: views::kind(cfg.kind),
        priority: cfg.sla.priority,
        // Stateful work is never preempted: its volume ties it to a host.
        preemptible: (cfg.sla.preemptible || cfg.sla.revocable) && cfg.kind != JobKind::Stateful,
        revocable: cfg.sla.revocable && cfg.kind != JobKind::Stateful,
        kill_on_preempt: false,
        tasks,
        per_task,
    }
}
