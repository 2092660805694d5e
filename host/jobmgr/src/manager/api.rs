//! The job API: create, get, query, kill, restart, delete, task events.

use std::sync::Arc;

use paceline_model::job::{JobConfig, JobGoal, JobKind, JobRuntime};
use paceline_model::task::{TaskEvent, TaskGoal, TaskRuntime, TaskState};
use paceline_storage::{JobQuery, JobSummary, Page};

use super::writes::Write;
use super::{JobInfo, JobManager};
use crate::error::JobError;
use crate::validate;

/// The writes that give chosen `instances` of `job` the goal to be killed
/// (those that have it already are left alone). A run on a host goes KILLING
/// in the same write (the goal-state step then only asks its host): one
/// write per task instead of two. A whole job's kill writes no task
/// (`JobEntry::kill_in_memory`).
fn kill_writes(job: &crate::state::JobEntry, instances: &[u32]) -> Vec<Write> {
    instances
        .iter()
        .filter_map(|&i| job.tasks.get(i as usize).map(|t| (i, t)))
        .filter(|(_, t)| t.rt.goal != TaskGoal::Kill)
        .map(|(i, t)| {
            let killing = t.goes_killing();
            let mut rt = t.rt.clone();
            rt.goal = TaskGoal::Kill;
            if killing {
                rt.state = TaskState::Killing;
                return Write::new(i, rt, crate::state::KILL_REQUESTED);
            }
            Write::new(i, rt, "")
        })
        .collect()
}

impl JobManager {
    /// Creates a job: checks it (`JobConfig::validate`, the instance limit,
    /// the pool is a leaf of the resource manager's tree, port and slot
    /// names), persists config version 1, the runtime and every task
    /// runtime, then hands the instances to the resource manager (gangs of
    /// `sla.min_running_instances`) through the lifecycle's answer to
    /// `job-created`. A rejected job persists nothing; the error names the
    /// field. Returns the job's key in the resource manager.
    pub async fn create(&self, id: &str, config: JobConfig) -> Result<u64, JobError> {
        if id.is_empty()
            || id.len() > 200
            || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            return Err(JobError::invalid("id", "must be 1-200 of [A-Za-z0-9._-]"));
        }
        validate::check(&config, self.config.max_instances, &self.rm())?;
        self.check_secrets(&config).await?;
        if self.mem().keys.contains_key(id) {
            return Err(JobError::State(format!("job {id} already exists")));
        }
        // The job and its tasks are written before taking the engine's lock:
        // nothing else knows the job yet, and the store refuses a second
        // create of the same id. So creates from many clients share group
        // commits instead of queueing behind each other's fsyncs.
        let now = self.now();
        let runtime = JobRuntime::initial(1, now);
        let mut daemon_hosts = Vec::new();
        if config.kind == JobKind::Daemon {
            daemon_hosts = self.matching_hosts(&config);
        }
        let count = if config.kind == JobKind::Daemon { daemon_hosts.len() as u32 } else { config.instance_count };
        // Tasks are stored PENDING at once (the gangs are queued below, under
        // the lock), in the same all-or-nothing write as the job: a crash
        // leaves the whole job or none of it. The first state of a run has
        // no event of its own; events start at PLACED. A crash before the
        // gangs are queued leaves PENDING tasks, which recovery queues.
        let rows: Vec<(u32, TaskRuntime)> = (0..count)
            .map(|i| {
                let mut rt = TaskRuntime::initial(1, now);
                rt.state = TaskState::Pending;
                if config.kind == JobKind::Daemon {
                    rt.host = daemon_hosts.get(i as usize).cloned();
                }
                (i, rt)
            })
            .collect();
        let stored = self.store.create_job_with_tasks(id, &config, &runtime, &rows).await?;
        self.enter_and_drive(super::creates::CreateWork { id: id.to_string(), config, stored, rows, daemon_hosts })
            .await
    }

    /// A job with its tasks and latest update.
    pub async fn get(&self, id: &str) -> Result<JobInfo, JobError> {
        {
            let m = self.mem();
            if let Some(job) = m.key_of(id).and_then(|k| m.jobs.get(&k)) {
                return Ok(JobInfo {
                    id: job.id.clone(),
                    config: job.config().clone(),
                    config_version: job.runtime.desired_config_version,
                    latest_config_version: job.latest_version,
                    runtime: job.runtime.clone(),
                    tasks: job.tasks.iter().map(|t| t.rt.clone()).collect(),
                    update: job.update.as_ref().map(|u| u.update.clone()),
                });
            }
        }
        // Not in memory: a terminal job from before a restart.
        let runtime = self.store.get_job_runtime(id).await.map_err(|_| JobError::NotFound(format!("job {id}")))?;
        let (version, config) = self.store.get_job_config(id, Some(runtime.desired_config_version)).await?;
        let tasks = self.store.tasks_of_job(id, &[]).await?.into_iter().map(|r| r.runtime).collect();
        let update = self.store.updates_of_job(id).await?.pop();
        let latest_config_version = self.store.get_job_config(id, None).await?.0;
        Ok(JobInfo {
            id: id.to_string(),
            config: Arc::new(config),
            config_version: version,
            latest_config_version,
            runtime,
            tasks,
            update,
        })
    }

    /// The spec of config version `version` of job `id` (every version a job
    /// had is kept): for reading a job's history and rolling back to it.
    pub async fn config_at(&self, id: &str, version: u64) -> Result<JobConfig, JobError> {
        match self.store.get_job_config(id, Some(version)).await {
            Ok((_, config)) => Ok(config),
            Err(e) if e.is_not_found() => Err(JobError::NotFound(format!("job {id} config version {version}"))),
            Err(e) => Err(e.into()),
        }
    }

    /// The pool a job runs in (its current config's), for authorization
    /// checks: from memory for live jobs, from storage for finished ones.
    pub async fn pool_of(&self, id: &str) -> Result<String, JobError> {
        {
            let m = self.mem();
            if let Some(job) = m.key_of(id).and_then(|k| m.jobs.get(&k)) {
                return Ok(job.config().pool.clone());
            }
        }
        let runtime = self.store.get_job_runtime(id).await.map_err(|_| JobError::NotFound(format!("job {id}")))?;
        let (_, config) = self.store.get_job_config(id, Some(runtime.desired_config_version)).await?;
        Ok(config.pool)
    }

    /// Jobs matching `query` (from storage).
    pub async fn query(&self, query: &JobQuery) -> Result<Page<JobSummary>, JobError> {
        Ok(self.store.query_jobs(query).await?)
    }

    /// The job's key in the resource manager.
    pub fn job_key(&self, id: &str) -> Option<u64> {
        self.mem().key_of(id)
    }

    /// [`JobManager::kill`] under the operations lock, with the job's
    /// message when the whole job is killed (`kill requested`, `owner lease
    /// expired …`).
    pub(crate) async fn kill_locked(
        &self,
        id: &str,
        instances: Option<Vec<u32>>,
        message: &str,
    ) -> Result<(), JobError> {
        let key = self.mem().key_of(id).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
        let Some(instances) = instances else {
            return self.kill_whole_job(key, id, message).await;
        };
        let writes = {
            let m = self.mem();
            let job = m.jobs.get(&key).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
            if let Some(bad) = instances.iter().find(|&&i| i as usize >= job.tasks.len()) {
                return Err(JobError::NotFound(format!("instance {bad} of job {id}")));
            }
            kill_writes(job, &instances)
        };
        self.write_tasks(key, writes).await?;
        self.step(key, &instances).await?;
        self.sync_job(key).await
    }

    /// A whole job's kill: the job's goal KILL is its only durable write
    /// (decision 0064). Its tasks take the goal in memory; runs on hosts go
    /// KILLING there and their hosts are asked to stop them; each task is
    /// written once, when its run has ended (KILLED from its host's report,
    /// or at once for a run that never reached a host). A crash before those
    /// writes leaves a job whose goal is KILL, which recovery kills whole.
    async fn kill_whole_job(&self, key: u64, id: &str, message: &str) -> Result<(), JobError> {
        let (version, rt) = {
            let m = self.mem();
            let job = m.jobs.get(&key).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
            let mut rt = job.runtime.clone();
            rt.goal = JobGoal::Kill;
            rt.message = message.into();
            // The state and counts the kill leads to, in the same write (as
            // `sync_job` derives them), when runs are left to stop.
            if !job.marked
                && job.tasks.iter().any(|t| !t.rt.state.is_terminal() && t.rt.state != TaskState::Initialized)
            {
                rt.state = paceline_model::job::JobState::Killing;
                rt.task_counts = job.counts_after_kill();
                rt.updated_at_ms = self.now();
            }
            (job.runtime.version, rt)
        };
        self.put_job_runtime(key, id, version, rt).await?;
        let (all, changed) = {
            let now = self.now();
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(());
            };
            let changed = job.kill_in_memory(now);
            let all: Vec<u32> = (0..job.tasks.len() as u32).collect();
            m.refresh_live(key);
            (all, changed)
        };
        let feed_id: Arc<str> = Arc::from(id);
        self.feed.publish(changed.into_iter().map(|i| crate::feed::Change::Task(feed_id.clone(), i)));
        self.step(key, &all).await?;
        self.sync_job(key).await
    }

    /// Stops chosen instances for good (the `RemoveInstances` call): each
    /// gets the goal to be killed, which no lifecycle undoes (only an
    /// explicit restart would), while the job keeps its goal to run and its
    /// instance count. Returns the instances that were still meant to run.
    pub async fn remove_instances(&self, id: &str, instances: &[u32]) -> Result<Vec<u32>, JobError> {
        if instances.is_empty() {
            return Err(JobError::invalid("instances", "name at least one instance"));
        }
        let live: Vec<u32> = {
            let m = self.mem();
            let key = m.key_of(id).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
            let job = m.jobs.get(&key).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
            if let Some(bad) = instances.iter().find(|&&i| i as usize >= job.tasks.len()) {
                return Err(JobError::NotFound(format!("instance {bad} of job {id}")));
            }
            let mut live: Vec<u32> =
                instances.iter().copied().filter(|&i| job.tasks[i as usize].rt.goal != TaskGoal::Kill).collect();
            live.sort_unstable();
            live.dedup();
            live
        };
        self.kill(id, Some(instances.to_vec())).await?;
        Ok(live)
    }

    /// Deletes a terminal job with everything stored about it. Refused
    /// while a task of it has not ended (a failed job's kills still in
    /// flight): deleting its records then would orphan a running process,
    /// whose updates nobody would read and whose resources nobody would free.
    pub async fn delete(&self, id: &str) -> Result<(), JobError> {
        let _op = self.ops.lock().await;
        let (state, live) = {
            let m = self.mem();
            let job = m.key_of(id).and_then(|k| m.jobs.get(&k));
            let on_host = |s: TaskState| s.is_on_host() || s == TaskState::Placed;
            let live = job.map_or(0, |j| j.tasks.iter().filter(|t| on_host(t.rt.state)).count());
            (job.map(|j| j.runtime.state), live)
        };
        if live > 0 {
            return Err(JobError::State(format!(
                "job {id} still has {live} task(s) stopping; delete it once they have ended"
            )));
        }
        let state = match state {
            Some(s) => s,
            None => self.store.get_job_runtime(id).await.map_err(|_| JobError::NotFound(format!("job {id}")))?.state,
        };
        if !state.is_terminal() {
            return Err(JobError::State(format!(
                "job {id} is {state}; only terminal jobs can be deleted (kill it first)"
            )));
        }
        // Events not flushed yet would bring the deleted job's events back.
        self.events.forget(id);
        self.store.delete_job(id).await?;
        {
            let mut m = self.mem();
            if let Some(k) = m.keys.remove(id) {
                m.jobs.remove(&k);
                m.refresh_live(k);
            }
        }
        // Watchers read the job and find it gone.
        self.feed.publish([crate::feed::Change::Job(Arc::from(id))]);
        Ok(())
    }

    /// A task's events, newest first. Stores order events of one
    /// millisecond by their key (the state's name); here they are put in the
    /// order the run went through them ([`TaskState::timeline_rank`]).
    pub async fn task_events(&self, id: &str, instance: u32) -> Result<Vec<TaskEvent>, JobError> {
        let mut events = self.store.task_events(id, instance, self.config.events_limit).await?;
        // A LAUNCHED (decision 0073) or a whole-job kill's KILLING
        // (decision 0064) not yet in the store.
        let unwritten: Vec<TaskEvent> = {
            let m = self.mem();
            let job = m.key_of(id).and_then(|k| m.jobs.get(&k));
            job.and_then(|j| Some(j.tasks.get(instance as usize)?.unwritten_events(j.runtime.created_at_ms).collect()))
                .unwrap_or_default()
        };
        let added = !unwritten.is_empty();
        events.extend(unwritten);
        newest_first(&mut events);
        if added && self.config.events_limit > 0 {
            events.truncate(self.config.events_limit as usize);
        }
        Ok(events)
    }

    /// One task's runtime, from memory.
    pub fn task(&self, id: &str, instance: u32) -> Option<TaskRuntime> {
        let m = self.mem();
        m.key_of(id).and_then(|k| m.jobs.get(&k)).and_then(|j| j.tasks.get(instance as usize)).map(|t| t.rt.clone())
    }

    /// Why the resource manager has not admitted a task yet ("waiting on
    /// reservation: …", "over entitlement by …"), while its gang is queued
    /// there; `None` once admitted (or for an unknown task).
    pub fn admission_reason(&self, id: &str, instance: u32) -> Option<String> {
        self.admission_info(id, instance).map(|info| info.to_string())
    }

    /// [`JobManager::admission_reason`] as data.
    pub fn admission_info(&self, id: &str, instance: u32) -> Option<paceline_resmgr::PendingInfo> {
        let gang = {
            let m = self.mem();
            m.key_of(id)
                .and_then(|k| m.jobs.get(&k))
                .and_then(|j| j.tasks.get(instance as usize))
                .and_then(|t| t.gang)?
        };
        let rm = self.resmgr.lock().ok()?;
        rm.why_pending(gang)
    }

    /// Why the last placement round left an admitted task unplaced, while
    /// it waits for another round; `None` once placed, or if no round tried.
    pub fn placement_failure(&self, id: &str, instance: u32) -> Option<paceline_model::UnplacedReason> {
        let key = self.mem().key_of(id)?;
        let rm = self.resmgr.lock().ok()?;
        rm.find_task(key, instance).and_then(|t| t.last_unplaced)
    }
}

/// Newest first: by time, then run, then the run's own order of states
/// (a stable sort, so anything else keeps the store's order).
pub(crate) fn newest_first(events: &mut [TaskEvent]) {
    events.sort_by_key(|e| std::cmp::Reverse((e.at_ms, e.run, e.to.timeline_rank())));
}
