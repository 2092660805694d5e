//! Rolling updates and restarts: a new config version, an update workflow
//! with per-instance progress, batches chosen by the lifecycle plugin
//! (`update-batch`), and the engine restarting each batch's instances on
//! the target version; failure beyond the budget rolls back when asked.
//!
//! Instance count changes apply when the update starts (new instances are
//! created at the target version, the lifecycle kills those above the new
//! count); instances whose spec does not change are moved to the new
//! version in place, without a restart.

use std::collections::BTreeMap;

use paceline_model::job::{InstanceProgress, InstanceUpdateState, JobConfig, JobKind, Update, UpdateSpec, UpdateState};
use paceline_model::task::{TaskGoal, TaskState};
use paceline_plugin_sdk::types as sdk;

use super::writes::Write;
use super::{JobManager, UpdateRequest};
use crate::error::JobError;
use crate::state::UpdateEntry;
use crate::validate;

impl JobManager {
    /// Updates a job to `config` (a new config version) with a rolling
    /// update per its `update` spec (or `request.spec`). Returns the update id.
    pub async fn update(&self, id: &str, config: JobConfig, request: UpdateRequest) -> Result<String, JobError> {
        validate::check(&config, self.config.max_instances, &self.rm())?;
        self.check_secrets(&config).await?;
        let _op = self.ops.lock().await;
        let key = self.mem().key_of(id).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
        {
            let m = self.mem();
            let job = m.jobs.get(&key).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
            if job.kind() != config.kind {
                return Err(JobError::invalid("kind", "a job's kind cannot change"));
            }
            if job.runtime.state.is_terminal() {
                return Err(JobError::State(format!("job {id} is {}", job.runtime.state)));
            }
        }
        let spec = request.spec.unwrap_or_else(|| config.update.clone());
        let update_id = self.start_update(key, config, spec, None).await?;
        // An update that adds a lease starts it; one that changes its length
        // counts from the last renewal.
        self.start_owner_lease(key);
        Ok(update_id)
    }

    /// Grows a live job by `count` instances at its current spec: an update
    /// that only raises `instance_count`, so nothing restarts and the new
    /// instances (numbered after the highest, never reusing an id) go
    /// through admission like any other and wait while the pool is full.
    /// Read and written under the operations lock, so two concurrent calls
    /// each get their own instances. Returns the new instance ids and the
    /// update id.
    pub async fn add_instances(&self, id: &str, count: u32) -> Result<(Vec<u32>, String), JobError> {
        if count == 0 {
            return Err(JobError::invalid("count", "must be at least 1"));
        }
        let _op = self.ops.lock().await;
        let key = self.mem().key_of(id).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
        let (config, spec, old) = {
            let m = self.mem();
            let job = m.jobs.get(&key).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
            if job.kind() == JobKind::Daemon {
                return Err(JobError::invalid("id", "a daemon job runs one instance per host and cannot be grown"));
            }
            if job.runtime.state.is_terminal() || job.runtime.goal != paceline_model::job::JobGoal::Run {
                return Err(JobError::State(format!("job {id} is {}", job.runtime.state)));
            }
            let mut config = (**job.config()).clone();
            let old = config.instance_count;
            config.instance_count = old.checked_add(count).ok_or_else(|| {
                JobError::invalid("count", format!("{old} + {count} instances is more than a job can have"))
            })?;
            let mut spec = config.update.clone();
            spec.start_paused = false;
            (config, spec, old)
        };
        validate::check(&config, self.config.max_instances, &self.rm()).map_err(|e| match e {
            JobError::Invalid { field, reason } if field == "instance_count" => {
                JobError::Invalid { field: "count".into(), reason }
            }
            e => e,
        })?;
        let new = config.instance_count;
        let update = self.start_update(key, config, spec, None).await?;
        Ok(((old..new).collect(), update))
    }

    /// Restarts instances (`None`: all) in rolling batches of `batch_size`
    /// (0: all at once): an update to an identical config version in which
    /// every listed instance gets a new run. Returns the update id.
    pub async fn restart(&self, id: &str, instances: Option<Vec<u32>>, batch_size: u32) -> Result<String, JobError> {
        let _op = self.ops.lock().await;
        let key = self.mem().key_of(id).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
        let (config, spec, all) = {
            let m = self.mem();
            let job = m.jobs.get(&key).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
            let n = job.instance_count();
            let all: Vec<u32> = instances.unwrap_or_else(|| (0..n).collect());
            if let Some(bad) = all.iter().find(|&&i| i >= n) {
                return Err(JobError::NotFound(format!("instance {bad} of job {id}")));
            }
            let mut spec = job.config().update.clone();
            spec.batch_size = batch_size;
            spec.start_paused = false;
            ((**job.config()).clone(), spec, all)
        };
        self.start_update(key, config, spec, Some(all)).await
    }

    async fn start_update(
        &self,
        key: u64,
        config: JobConfig,
        spec: UpdateSpec,
        force: Option<Vec<u32>>,
    ) -> Result<String, JobError> {
        let now = self.now();
        let (id, from, to, old_count, active) = {
            let m = self.mem();
            let job = m.jobs.get(&key).ok_or_else(|| JobError::NotFound(format!("job key {key}")))?;
            (
                job.id.clone(),
                job.runtime.desired_config_version,
                job.latest_version + 1,
                job.instance_count(),
                job.update.as_ref().is_some_and(|u| u.is_active()),
            )
        };
        if active {
            return Err(JobError::State(format!("job {id} has an update in progress; abort it first")));
        }
        self.store.add_job_config(&id, to, &config).await?;
        let new_count = if config.kind == JobKind::Daemon { old_count } else { config.instance_count };
        let (restart, bump) = {
            let mut m = self.mem();
            let job = m.jobs.get_mut(&key).ok_or_else(|| JobError::NotFound(format!("job key {key}")))?;
            let old_cfg = job.config().clone();
            job.configs.insert(to, std::sync::Arc::new(config.clone()));
            job.latest_version = to;
            let mut restart = Vec::new();
            let mut bump = Vec::new();
            for i in 0..old_count.min(new_count).min(job.tasks.len() as u32) {
                let t = &job.tasks[i as usize];
                let changed = match &force {
                    Some(list) => list.contains(&i),
                    None => old_cfg.task_spec(i) != config.task_spec(i),
                };
                if changed && t.wants_run() {
                    restart.push(i);
                } else {
                    let mut rt = t.rt.clone();
                    rt.desired_config_version = to;
                    if !changed || !t.wants_run() {
                        rt.config_version = to;
                    }
                    bump.push(Write::new(i, rt, ""));
                }
            }
            // The latest spec's count, owner and pool are what the job holds now.
            m.refresh_live(key);
            (restart, bump)
        };
        let state = if spec.start_paused { UpdateState::Paused } else { UpdateState::RollingForward };
        let update = Update {
            id: format!("{id}-update-{to}"),
            job_id: id.clone(),
            from_config_version: from,
            to_config_version: to,
            state,
            spec,
            instances: restart.clone(),
            created_at_ms: now,
            updated_at_ms: now,
            message: String::new(),
            version: 0,
        };
        let update = self.store.create_update(&update).await?;
        let progress: Vec<InstanceProgress> = restart
            .iter()
            .map(|&i| InstanceProgress {
                instance: i,
                state: InstanceUpdateState::Pending,
                attempts: 0,
                updated_at_ms: now,
            })
            .collect();
        self.store.put_update_progress(&update.id, &progress).await?;
        let (jv, mut jrt) = {
            let m = self.mem();
            let job = m.jobs.get(&key).ok_or_else(|| JobError::NotFound(format!("job key {key}")))?;
            (job.runtime.version, job.runtime.clone())
        };
        jrt.desired_config_version = to;
        jrt.update_id = Some(update.id.clone());
        jrt.updated_at_ms = now;
        self.put_job_runtime(key, &id, jv, jrt).await?;
        {
            let mut m = self.mem();
            if let Some(job) = m.jobs.get_mut(&key) {
                job.update = Some(UpdateEntry {
                    update: update.clone(),
                    progress: progress.into_iter().map(|p| (p.instance, p)).collect(),
                });
            }
        }
        self.write_tasks(key, bump).await?;
        self.apply_count(key, old_count, new_count).await?;
        if restart.is_empty() {
            self.finish_update(key, false).await?;
        }
        if old_count != new_count {
            self.drive(key, sdk::Event::Scaled).await?;
        }
        self.drive(key, sdk::Event::UpdateChanged).await?;
        Ok(update.id)
    }

    /// Makes the task rows match a new count: instances that come (back)
    /// into the count get a fresh run at the desired version (or, when a
    /// kill is still under way, the goal to run again).
    async fn apply_count(&self, key: u64, old: u32, new: u32) -> Result<(), JobError> {
        if new <= old {
            return Ok(());
        }
        self.ensure_instances(key, new).await?;
        let now = self.now();
        let writes = {
            let m = self.mem();
            let Some(job) = m.jobs.get(&key) else {
                return Ok(());
            };
            let target = job.target_version();
            (old..new)
                .filter_map(|i| {
                    let t = &job.tasks[i as usize];
                    let mut rt = if t.rt.state.is_terminal() { t.rt.next_run(now) } else { t.rt.clone() };
                    rt.goal = TaskGoal::Run;
                    rt.desired_config_version = target;
                    if rt.state == TaskState::Initialized {
                        rt.config_version = target;
                    }
                    (rt != t.rt).then(|| Write::new(i, rt, "SCALED_UP"))
                })
                .collect()
        };
        self.write_tasks(key, writes).await
    }

    /// The `update-batch` action: restart each instance on the target
    /// version, as far as the job's unavailability count allows (decision
    /// 0046): an instance the count does not grant now stays pending, and
    /// the plugin names it again once an instance is back (every health
    /// change reaches it). Returns whether the plugin must be asked again
    /// (some instance completed at once).
    pub(crate) async fn update_batch(&self, key: u64, batch: &[u32]) -> Result<bool, JobError> {
        let now = self.now();
        let (update_id, progress, writes, kill, instant) = {
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(false);
            };
            let target = job.target_version();
            let mut writes = Vec::new();
            let mut kill = Vec::new();
            let mut instant = false;
            let mut progress = Vec::new();
            // Those already in flight take nothing more down; ask for the rest.
            // Sets, not lists: a batch may be every instance of a large job.
            let in_flight: std::collections::HashSet<u32> = job.update.as_ref().map_or_else(Default::default, |u| {
                u.progress.values().filter(|p| p.state == InstanceUpdateState::InProgress).map(|p| p.instance).collect()
            });
            let wanted: Vec<u32> = batch.iter().copied().filter(|i| !in_flight.contains(i)).collect();
            // Services only: a batch job's queued instances would count as
            // down and hold its running ones back, and a daemon has one
            // instance per host (its batch size is its limit, as before).
            let service = matches!(job.kind(), JobKind::Stateless | JobKind::Stateful);
            let mut granted = if service { crate::availability::grant(job, &wanted) } else { wanted.clone() };
            if granted.is_empty() && !wanted.is_empty() {
                // None of the plugin's picks may go down now. The update's
                // own pending instances that are down already cost nothing:
                // start those instead. Otherwise an instance that is down
                // (crash-looping, never healthy) and that only this update
                // can bring back holds the update, and itself, for ever.
                let spare: Vec<u32> = job.update.as_ref().map_or_else(Vec::new, |u| {
                    u.progress
                        .values()
                        .filter(|p| p.state == InstanceUpdateState::Pending)
                        .map(|p| p.instance)
                        .filter(|&i| !crate::availability::available(job, i))
                        .take(wanted.len())
                        .collect()
                });
                granted = crate::availability::grant(job, &spare);
            }
            if granted != wanted {
                tracing::debug!(
                    job = %job.id,
                    asked = ?wanted,
                    started = ?granted,
                    "update batch held back: the job has as many instances unavailable as it may"
                );
            }
            let tasks = job.tasks.clone();
            let Some(u) = job.update.as_mut().filter(|u| u.is_active() && !u.paused()) else {
                return Ok(false);
            };
            for &i in &granted {
                let Some(t) = tasks.get(i as usize) else {
                    continue;
                };
                let p = u.progress.entry(i).or_insert(InstanceProgress {
                    instance: i,
                    state: InstanceUpdateState::Pending,
                    attempts: 0,
                    updated_at_ms: now,
                });
                if p.state == InstanceUpdateState::InProgress {
                    continue;
                }
                p.attempts += 1;
                p.updated_at_ms = now;
                let mut rt = t.rt.clone();
                rt.desired_config_version = target;
                if !t.wants_run() {
                    // A stopped instance just moves to the new version.
                    rt.config_version = target;
                    p.state = InstanceUpdateState::Succeeded;
                    instant = true;
                } else {
                    p.state = InstanceUpdateState::InProgress;
                    match t.rt.state {
                        s if s.is_on_host() => kill.push(i),
                        TaskState::Initialized
                        | TaskState::Pending
                        | TaskState::Ready
                        | TaskState::Placing
                        | TaskState::Placed => {
                            // Not launched yet: it will launch at the desired version.
                        }
                        _ => {} // ended: its restart (below or after backoff) uses the desired version
                    }
                }
                progress.push(p.clone());
                writes.push(Write::new(i, rt, "UPDATE"));
            }
            (u.update.id.clone(), progress, writes, kill, instant)
        };
        self.store.put_update_progress(&update_id, &progress).await?;
        let ended: Vec<u32> = writes
            .iter()
            .filter(|w| w.rt.state.is_terminal() && matches!(w.rt.goal, TaskGoal::Run | TaskGoal::Succeed))
            .map(|w| w.instance)
            .collect();
        self.write_tasks(key, writes).await?;
        self.kill_runs(key, &kill, Some("UPDATE")).await?;
        self.start_runs(key, &ended, "UPDATE").await?;
        Ok(instant)
    }

    /// The `update-finished` action. With `rollback` on a forward update:
    /// start rolling back to the previous version (returns `true`: ask the
    /// plugin for batches). Otherwise the update ends: SUCCEEDED, FAILED
    /// (more failures than allowed, no rollback) or ROLLED_BACK.
    pub(crate) async fn finish_update(&self, key: u64, rollback: bool) -> Result<bool, JobError> {
        let now = self.now();
        let (id, mut update, failed, jv, mut jrt, old_count) = {
            let m = self.mem();
            let Some(job) = m.jobs.get(&key) else {
                return Ok(false);
            };
            let Some(u) = job.update.as_ref().filter(|u| u.is_active()) else {
                return Ok(false);
            };
            let failed = u.of_state(InstanceUpdateState::Failed).len() as u32;
            (job.id.clone(), u.update.clone(), failed, job.runtime.version, job.runtime.clone(), job.instance_count())
        };
        let forward = update.state != UpdateState::RollingBackward;
        let expected = update.version;
        if rollback && forward {
            update.state = UpdateState::RollingBackward;
            update.message =
                format!("{failed} instances failed; rolling back to version {}", update.from_config_version);
            update.updated_at_ms = now;
            let stored = self.store.cas_update(&update.id, expected, &update).await?;
            jrt.desired_config_version = update.from_config_version;
            jrt.updated_at_ms = now;
            self.put_job_runtime(key, &id, jv, jrt).await?;
            // Every instance not on the old version is rolled back; progress starts over.
            let (progress, writes, new_count) = {
                let mut m = self.mem();
                let Some(job) = m.jobs.get_mut(&key) else {
                    return Ok(false);
                };
                let from = update.from_config_version;
                let mut progress = BTreeMap::new();
                let mut writes = Vec::new();
                for (i, t) in job.tasks.iter().enumerate() {
                    let i = i as u32;
                    if t.rt.desired_config_version != from {
                        let mut rt = t.rt.clone();
                        rt.desired_config_version = from;
                        if rt.state == TaskState::Initialized || rt.state.is_terminal() && !t.wants_run() {
                            rt.config_version = from;
                        }
                        writes.push(Write::new(i, rt, "ROLLBACK"));
                    }
                    if t.rt.config_version != from && t.wants_run() {
                        progress.insert(
                            i,
                            InstanceProgress {
                                instance: i,
                                state: InstanceUpdateState::Pending,
                                attempts: 0,
                                updated_at_ms: now,
                            },
                        );
                    }
                }
                job.update = Some(UpdateEntry { update: stored.clone(), progress: progress.clone() });
                (progress, writes, job.instance_count())
            };
            let list: Vec<InstanceProgress> = progress.into_values().collect();
            self.store.put_update_progress(&update.id, &list).await?;
            self.write_tasks(key, writes).await?;
            // The lifecycle sees the count change with the follow-up
            // `update-changed` (every default policy converges the count on it).
            self.apply_count(key, old_count, new_count).await?;
            return Ok(true);
        }
        update.state = if !forward {
            UpdateState::RolledBack
        } else if failed > update.spec.max_failed_instances {
            UpdateState::Failed
        } else {
            UpdateState::Succeeded
        };
        update.updated_at_ms = now;
        update.message = format!(
            "{} with {failed} failed instances",
            match update.state {
                UpdateState::RolledBack => "rolled back",
                UpdateState::Failed => "failed",
                _ => "succeeded",
            }
        );
        let stored = self.store.cas_update(&update.id, expected, &update).await?;
        jrt.config_version = jrt.desired_config_version;
        jrt.update_id = None;
        jrt.updated_at_ms = now;
        self.put_job_runtime(key, &id, jv, jrt).await?;
        if let Some(job) = self.mem().jobs.get_mut(&key)
            && let Some(u) = job.update.as_mut()
        {
            u.update = stored;
        }
        Ok(false)
    }

    /// Pauses the job's update.
    pub async fn pause_update(&self, id: &str) -> Result<(), JobError> {
        self.set_update_state(id, |s| match s {
            UpdateState::RollingForward | UpdateState::RollingBackward | UpdateState::Initialized => {
                Some(UpdateState::Paused)
            }
            _ => None,
        })
        .await
    }

    /// Resumes a paused update (forward, or backward if it was rolling back).
    pub async fn resume_update(&self, id: &str) -> Result<(), JobError> {
        self.set_update_state(id, |s| (s == UpdateState::Paused).then_some(UpdateState::RollingForward)).await
    }

    /// Aborts the update: instances stay where they are; the job keeps the
    /// target version as its desired one.
    pub async fn abort_update(&self, id: &str) -> Result<(), JobError> {
        self.set_update_state(id, |s| (!s.is_terminal()).then_some(UpdateState::Aborted)).await
    }

    async fn set_update_state(
        &self,
        id: &str,
        next: impl Fn(UpdateState) -> Option<UpdateState>,
    ) -> Result<(), JobError> {
        let _op = self.ops.lock().await;
        let now = self.now();
        let key = self.mem().key_of(id).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
        let (mut update, backward, jv, jrt) = {
            let m = self.mem();
            let job = m.jobs.get(&key).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
            let u = job
                .update
                .as_ref()
                .filter(|u| u.is_active())
                .ok_or_else(|| JobError::State(format!("job {id} has no update in progress")))?;
            let backward = job.runtime.desired_config_version != u.update.to_config_version;
            (u.update.clone(), backward, job.runtime.version, job.runtime.clone())
        };
        let Some(mut state) = next(update.state) else {
            return Err(JobError::State(format!("update {} is {:?}", update.id, update.state)));
        };
        if state == UpdateState::RollingForward && backward {
            state = UpdateState::RollingBackward;
        }
        let expected = update.version;
        update.state = state;
        update.updated_at_ms = now;
        let stored = self.store.cas_update(&update.id, expected, &update).await?;
        if state == UpdateState::Aborted {
            let mut rt = jrt;
            rt.update_id = None;
            rt.updated_at_ms = now;
            self.put_job_runtime(key, id, jv, rt).await?;
        }
        if let Some(job) = self.mem().jobs.get_mut(&key)
            && let Some(u) = job.update.as_mut()
        {
            u.update = stored;
        }
        self.drive(key, sdk::Event::UpdateChanged).await
    }
}
