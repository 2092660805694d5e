//! Writes: every change of a task goes through one batched compare-and-set
//! with a task event, and the mirror follows; a job's runtime is derived from
//! its tasks' counts and written when it changes.

use std::sync::Arc;

use paceline_model::job::{JobGoal, JobState};
use paceline_model::task::{TaskEvent, TaskRuntime, TaskState};
use paceline_storage::TaskCas;

use super::JobManager;
use crate::error::JobError;

/// One task write: the new runtime and the event's reason and message.
pub(crate) struct Write {
    pub instance: u32,
    pub rt: TaskRuntime,
    pub reason: String,
    pub message: String,
    /// The state the event says the task left, when it is not the stored
    /// one: a burst of run updates folded into one write (STARTING then
    /// RUNNING) records the states it skips as events of their own, and this
    /// write's event follows the last of them.
    pub from: Option<TaskState>,
}

impl Write {
    pub(crate) fn new(instance: u32, rt: TaskRuntime, reason: &str) -> Write {
        Write { instance, rt, reason: reason.to_string(), message: String::new(), from: None }
    }
}

impl JobManager {
    /// Writes task runtimes with one batched compare-and-set, records a task
    /// event for each state or run change, and updates the mirror. Items that
    /// lose their compare-and-set are reloaded from storage and reported.
    pub(crate) async fn write_tasks(&self, key: u64, writes: Vec<Write>) -> Result<(), JobError> {
        self.write_tasks_with_events(key, writes, Vec::new()).await
    }

    /// [`JobManager::write_tasks`] with `before`, events that precede the
    /// writes' own (a placement's PLACED, the states a burst of run updates
    /// skipped), in the same store call: each is stored with its instance's
    /// write, and not if that write lost (`Store::cas_tasks_with_events`).
    pub(crate) async fn write_tasks_with_events(
        &self,
        key: u64,
        mut writes: Vec<Write>,
        before: Vec<(u32, TaskEvent)>,
    ) -> Result<(), JobError> {
        if writes.is_empty() {
            if before.is_empty() {
                return Ok(());
            }
            let job_id = self.mem().jobs.get(&key).map(|j| j.id.clone());
            return match job_id {
                Some(job_id) => self.append_events(&job_id, before).await,
                None => Ok(()),
            };
        }
        let now = self.now();
        let (job_id, olds, mut events) = {
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
            // A LAUNCHED (decision 0073) and a whole-job kill's KILLING
            // (decision 0064) kept in memory only go into the history
            // first: they happened before `before` and the writes' own.
            let mut events = Vec::with_capacity(before.len() + 2 * writes.len());
            for w in &writes {
                let unwritten = job.tasks[w.instance as usize].unwritten_events(job.runtime.created_at_ms);
                events.extend(unwritten.map(|e| (w.instance, e)));
            }
            events.extend(before);
            (job.id.clone(), olds, events)
        };
        for (w, old) in writes.iter_mut().zip(&olds) {
            w.rt.updated_at_ms = now;
            let new_reason = !w.reason.is_empty() && w.reason != old.reason;
            if !w.reason.is_empty() {
                w.rt.reason = w.reason.clone();
            }
            if !w.message.is_empty() {
                w.rt.message = w.message.clone();
            } else if new_reason && w.rt.message == old.message {
                // A new reason with no message of its own: the old message
                // explained the old reason ("health check passed" must not
                // stay on a drain's kill). A message the caller set on the
                // runtime itself (a refused launch's) stays.
                w.rt.message.clear();
            }
            if w.rt.state != old.state || w.rt.run != old.run || !w.reason.is_empty() && w.reason != old.reason {
                events.push((
                    w.instance,
                    TaskEvent {
                        run: w.rt.run,
                        from: (w.rt.run == old.run).then_some(w.from.unwrap_or(old.state)),
                        to: w.rt.state,
                        at_ms: now,
                        host: w.rt.host.clone(),
                        reason: w.rt.reason.clone(),
                        message: w.rt.message.clone(),
                    },
                ));
            }
        }
        let cas: Vec<TaskCas> = writes
            .iter()
            .zip(&olds)
            .map(|(w, old)| TaskCas { instance: w.instance, expected_version: old.version, runtime: w.rt.clone() })
            .collect();
        // The runtimes and their events in one store call (one transaction
        // on SQLite): one round trip through the writer, not two.
        let results = self.store.cas_tasks_with_events(&job_id, &cas, &events).await?;
        let lost = paceline_storage::types::lost_instances(&cas, &results);
        if !lost.is_empty() {
            events.retain(|(i, _)| !lost.contains(i));
        }
        let feed_id: Arc<str> = Arc::from(job_id.as_str());
        let mut changed = Vec::with_capacity(results.len());
        let mut first_err = None;
        {
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(());
            };
            let created_at_ms = job.runtime.created_at_ms;
            for ((w, old), res) in writes.into_iter().zip(olds).zip(results) {
                match res {
                    Ok(version) => {
                        let mut rt = w.rt;
                        rt.version = version;
                        // Submit→running: the first run of a task of the job's
                        // first config, the first time it runs (later configs'
                        // tasks were not submitted with the job).
                        if rt.state == TaskState::Running
                            && old.state != TaskState::Running
                            && rt.run == 1
                            && rt.config_version == 1
                        {
                            self.submit_to_running.observe(now.saturating_sub(created_at_ms));
                        }
                        if rt.run != old.run {
                            let t = &mut job.tasks[w.instance as usize];
                            t.last_seq = 0;
                            t.healthy = None;
                            t.exit_code = None;
                            t.rm_task = None;
                        }
                        job.set_task_runtime(w.instance as usize, rt);
                        changed.push(crate::feed::Change::Task(feed_id.clone(), w.instance));
                    }
                    Err(e) => {
                        tracing::warn!(job = %job.id, instance = w.instance, error = %e, "task compare-and-set lost");
                        first_err.get_or_insert(e);
                    }
                }
            }
            m.refresh_live(key);
        }
        self.feed.publish(changed);
        self.note_transitions(&job_id, &events);
        if let Some(e) = first_err {
            self.reload_tasks(key).await?;
            return Err(e.into());
        }
        Ok(())
    }

    /// Appends task events of one job, all in one store operation.
    /// The changes people care about are noted as job events too.
    pub(crate) async fn append_events(&self, job_id: &str, events: Vec<(u32, TaskEvent)>) -> Result<(), JobError> {
        self.note_transitions(job_id, &events);
        self.store.append_job_events(job_id, &events).await?;
        Ok(())
    }

    /// Re-reads a job's task runtimes after a lost compare-and-set.
    async fn reload_tasks(&self, key: u64) -> Result<(), JobError> {
        let Some(job_id) = self.mem().jobs.get(&key).map(|j| j.id.clone()) else {
            return Ok(());
        };
        let records = self.store.tasks_of_job(&job_id, &[]).await?;
        let now = self.now();
        let mut m = self.mem();
        if let Some(job) = m.jobs.get_mut(&key) {
            for r in records {
                job.set_task_runtime(r.instance as usize, r.runtime);
            }
            // What the store holds of a job being killed whole is the tasks'
            // state before the kill: the kill is applied to them again.
            if job.runtime.goal == JobGoal::Kill {
                job.kill_in_memory(now);
            }
        }
        m.refresh_live(key);
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
        let (to, at) = (stored.state, stored.updated_at_ms);
        {
            let mut m = self.mem();
            let from = m.jobs.get_mut(&key).map(|job| std::mem::replace(&mut job.runtime, stored).state);
            m.refresh_live(key);
            // Noted before the new state is readable (the lock is held), so
            // a reader that sees the job ended also finds its end event.
            if let Some(from) = from {
                self.note_job_state(id, from, to, at);
            }
        }
        self.feed.publish([crate::feed::Change::Job(Arc::from(id))]);
        Ok(())
    }
}
