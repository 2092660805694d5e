//! Recovery after a restart: reload every live job from storage and drive
//! each task toward its goal.

use std::collections::BTreeMap;
use std::sync::Arc;

use paceline_joints::contract::IntoContract;
use paceline_model::job::{JobConfig, JobGoal, JobKind, JobRuntime, JobState, UpdateState};
use paceline_model::task::{TaskGoal, TaskState};
use paceline_plugin_sdk::types as sdk;

use super::JobManager;
use super::writes::Write;
use crate::error::JobError;
use crate::state::{JobEntry, TaskEntry, UpdateEntry};

/// Whether a stored job is one whose `create` never finished: still
/// INITIALIZED at its first config with no task written, although it should
/// have some (a daemon job on no matching host legitimately has none).
fn create_cut_short(runtime: &JobRuntime, first: Option<&Arc<JobConfig>>, tasks: usize) -> bool {
    runtime.state == JobState::Initialized
        && runtime.config_version <= 1
        && runtime.update_id.is_none()
        && tasks == 0
        && first.is_some_and(|c| c.kind != JobKind::Daemon && c.instance_count > 0)
}

impl JobManager {
    /// Reloads every job that is not terminal and drives its tasks:
    /// runs that had not reached a host (INITIALIZED … PLACED) are handed to
    /// the resource manager again (its queues do not survive a restart);
    /// runs on hosts are adopted by the resource manager (their pools are
    /// charged again) and expected there ([`JobManager::expected_runs`]) and
    /// wait for their hosts' updates; kills under way are sent again (a job
    /// whose goal is KILL is killed whole, see `finish_written_kill`); runs
    /// that ended while their goal is to run are shown to the lifecycle
    /// again (restart timers do not survive); an update in progress resumes.
    /// Returns the number of jobs recovered.
    pub async fn recover(&self) -> Result<usize, JobError> {
        let _op = self.ops.lock().await;
        // Creates a crash cut short were never acknowledged: they go before
        // anything is read (the store's own record of them, decision 0033).
        match self.store.remove_interrupted_creates().await {
            Ok(ids) => {
                for id in ids {
                    tracing::warn!(job = %id, "removed a job whose create was cut short by a crash (never acknowledged)");
                }
            }
            // What is left is invisible to every read; it only keeps its id
            // taken until a later start removes it. Not a reason to stay down.
            Err(e) => {
                tracing::warn!(error = %e, "creates cut short by a crash not cleaned up; the next start tries again")
            }
        }
        let live = self.store.live_jobs().await?;
        let mut keys = Vec::new();
        for summary in live {
            let id = summary.id.clone();
            let runtime = summary.runtime;
            let mut configs = BTreeMap::new();
            let mut no_config = false;
            for v in [runtime.config_version, runtime.desired_config_version, summary.latest_config_version] {
                if let std::collections::btree_map::Entry::Vacant(e) = configs.entry(v) {
                    match self.store.get_job_config(&id, Some(v)).await {
                        Ok((_, c)) => {
                            e.insert(Arc::new(c));
                        }
                        Err(err) if err.is_not_found() && v <= 1 => {
                            no_config = true;
                            break;
                        }
                        Err(err) => return Err(err.into()),
                    }
                }
            }
            let records = if no_config { Vec::new() } else { self.store.tasks_of_job(&id, &[]).await? };
            if no_config || create_cut_short(&runtime, configs.values().next(), records.len()) {
                // `create` answers only after the job, its first config and
                // its tasks are written. Since decision 0033 the store writes
                // them all or nothing; a store written by an earlier version
                // (job and tasks in two writes, found by scripts/torture) can
                // still hold a job whose create a crash cut short, that nobody
                // was told about. Finishing it could
                // run a job twice (the client retried under another id), and
                // keeping it left it INITIALIZED for ever or, without its
                // config, stopped every later start. It goes, as a refused
                // create leaves nothing.
                tracing::warn!(job = %id, "removing a job whose create was cut short by a crash (never acknowledged)");
                self.store.delete_job(&id).await?;
                continue;
            }
            for r in &records {
                for v in [r.runtime.config_version, r.runtime.desired_config_version] {
                    if let std::collections::btree_map::Entry::Vacant(e) = configs.entry(v) {
                        let (_, c) = self.store.get_job_config(&id, Some(v)).await?;
                        e.insert(Arc::new(c));
                    }
                }
            }
            let update = match &runtime.update_id {
                Some(uid) => {
                    let u = self.store.get_update(uid).await?;
                    let progress = self.store.update_progress(uid).await?;
                    Some(UpdateEntry { update: u, progress: progress.into_iter().map(|p| (p.instance, p)).collect() })
                }
                // The last, finished update stays visible to `get` after a restart.
                None => self
                    .store
                    .updates_of_job(&id)
                    .await?
                    .into_iter()
                    .filter(|u| u.state.is_terminal())
                    .max_by_key(|u| u.created_at_ms)
                    .map(|u| UpdateEntry { update: u, progress: BTreeMap::new() }),
            };
            let kind = configs.values().next_back().map(|c| c.kind).unwrap_or_default();
            let tasks: Vec<TaskEntry> = records.into_iter().map(|r| TaskEntry::new(r.runtime)).collect();
            let daemon_hosts = if kind == JobKind::Daemon {
                tasks.iter().map(|t| t.rt.host.clone().unwrap_or_default()).collect()
            } else {
                Vec::new()
            };
            let unfinished = JobEntry::count_unfinished(&tasks);
            let mut m = self.mem();
            let key = m.next_key;
            m.next_key += 1;
            m.keys.insert(id.clone(), key);
            m.jobs.insert(
                key,
                JobEntry {
                    id,
                    key,
                    configs,
                    latest_version: summary.latest_config_version,
                    runtime,
                    tasks,
                    update,
                    daemon_hosts,
                    marked: false,
                    unfinished,
                },
            );
            // The live counts are rebuilt from the store, job by job.
            m.refresh_live(key);
            keys.push(key);
        }
        for &key in &keys {
            self.start_owner_lease(key);
            self.recover_job(key).await?;
        }
        Ok(keys.len())
    }

    /// Hands the runs on hosts to the resource manager, which keeps no state
    /// across a restart or failover: without this its pools would show none
    /// of the resources these runs hold, and admit past every reservation
    /// and limit. Each run is adopted in its pool as LAUNCHING or RUNNING and
    /// keeps the handle, so its end releases the allocation as usual.
    fn adopt_runs(&self, key: u64) -> Result<usize, JobError> {
        let now = self.now();
        let mut rm = self.rm();
        let mut m = self.mem();
        let Some(job) = m.jobs.get_mut(&key) else {
            return Ok(0);
        };
        let mut adopted = 0;
        for i in 0..job.tasks.len() {
            let (state, version) = {
                let t = &job.tasks[i];
                if !t.rt.state.is_on_host() || t.rm_task.is_some() {
                    continue;
                }
                (t.rt.state, t.rt.config_version)
            };
            let cfg = job.config_at(version).clone();
            let spec = super::admission::gang_spec(job.key, &cfg, i as u32, 1, cfg.task_spec(i as u32).resources);
            let rm_state = match state {
                TaskState::Launching | TaskState::Launched => paceline_resmgr::TaskState::Launching,
                _ => paceline_resmgr::TaskState::Running,
            };
            let ids = rm.adopt(&cfg.pool, spec, rm_state, now).map_err(|e| JobError::Resmgr(e.to_string()))?;
            job.tasks[i].rm_task = ids.first().copied();
            adopted += 1;
        }
        Ok(adopted)
    }

    /// A job whose goal is KILL is killed whole: its kill wrote the job's
    /// goal and nothing of its tasks (decision 0064), so they still hold the
    /// states and goals from before it. They get the goal in memory as the
    /// kill gave it them (runs on hosts KILLING, killed again below).
    fn finish_written_kill(&self, key: u64) {
        let now = self.now();
        let mut m = self.mem();
        let Some(job) = m.jobs.get_mut(&key).filter(|j| j.runtime.goal == JobGoal::Kill) else {
            return;
        };
        let changed = job.kill_in_memory(now);
        if !changed.is_empty() {
            tracing::info!(job = %job.id, tasks = changed.len(), "a job being killed is killed again: its tasks get the goal KILL");
            m.refresh_live(key);
        }
    }

    async fn recover_job(&self, key: u64) -> Result<(), JobError> {
        self.adopt_runs(key)?;
        self.finish_written_kill(key);
        let (resubmit, rewrite, kill, ended) = {
            let m = self.mem();
            let Some(job) = m.jobs.get(&key) else {
                return Ok(());
            };
            let (mut resubmit, mut rewrite, mut kill, mut ended) = (vec![], vec![], vec![], vec![]);
            for (i, t) in job.tasks.iter().enumerate() {
                let i = i as u32;
                match (t.rt.state, t.rt.goal) {
                    (
                        TaskState::Pending | TaskState::Ready | TaskState::Placing | TaskState::Placed,
                        TaskGoal::Run | TaskGoal::Succeed,
                    ) => {
                        // The resource manager lost its queues: back to INITIALIZED, then submitted.
                        let mut rt = t.rt.clone();
                        rt.state = TaskState::Initialized;
                        rewrite.push(Write::new(i, rt, "RECOVERED"));
                        resubmit.push(i);
                    }
                    (TaskState::Initialized, TaskGoal::Run | TaskGoal::Succeed) => resubmit.push(i),
                    (TaskState::Killing, _) => kill.push(i),
                    (s, TaskGoal::Run) if s.is_terminal() => ended.push((i, s)),
                    (s, TaskGoal::Kill | TaskGoal::Delete) if !s.is_terminal() && !s.is_on_host() => resubmit.push(i),
                    _ => {}
                }
            }
            (resubmit, rewrite, kill, ended)
        };
        self.write_tasks(key, rewrite).await?;
        // The goal-state table decides: submit what should run, release what should not.
        self.step(key, &resubmit).await?;
        self.kill_runs(key, &kill, None).await?;
        for (i, s) in ended {
            if s == TaskState::Killed {
                // A restart the engine had under way.
                self.start_runs(key, &[i], "RECOVERED_RESTART").await?;
            } else {
                self.drive(key, sdk::Event::TaskChanged(sdk::TaskChange { instance: i, state: s.into_contract() }))
                    .await?;
            }
        }
        let updating = self
            .mem()
            .jobs
            .get(&key)
            .and_then(|j| j.update.as_ref())
            .is_some_and(|u| u.update.state != UpdateState::Paused && u.is_active());
        if updating {
            // In-flight instances whose new run already came up count now.
            let in_flight: Vec<u32> = self
                .mem()
                .jobs
                .get(&key)
                .and_then(|j| j.update.as_ref())
                .map(|u| u.of_state(paceline_model::job::InstanceUpdateState::InProgress))
                .unwrap_or_default();
            for i in in_flight {
                self.note_update_progress(key, i).await?;
            }
            self.drive(key, sdk::Event::UpdateChanged).await?;
        }
        self.sync_job(key).await
    }
}
