//! The lifecycle slot: the job's `lifecycle/<kind>` plugin is asked about
//! events, and its actions (launch, kill, restart after a delay, mark the
//! job, move an update) are carried out.

use paceline_joints::contract::FromContract;
use paceline_model::job::{JobKind, JobState};
use paceline_model::task::{TaskGoal, TaskRuntime, TaskState};
use paceline_plugin_sdk::types as sdk;

use super::JobManager;
use super::writes::Write;
use crate::deadline::{Deadline, DeadlineKind};
use crate::error::JobError;
use crate::state::TaskEntry;
use crate::views;

/// Reason recorded on a run killed for running past the job's max run time;
/// its end is recorded as FAILED.
pub(crate) const MAX_RUN_TIME: &str = "MAX_RUN_TIME";
/// How many follow-up rounds one event may trigger (an update batch that
/// completes at once asks the plugin again).
const MAX_ROUNDS: usize = 8;

impl JobManager {
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
    pub(crate) async fn drive_rounds_many(&self, key: u64, mut events: Vec<sdk::Event>) -> Result<(), JobError> {
        if events.is_empty() {
            return Ok(());
        }
        for _ in 0..MAX_ROUNDS {
            let Some((slot, served_by, actions)) = self.ask(key, events).await? else {
                break;
            };
            let mut refused = Vec::new();
            let follow = self.execute(key, actions, &mut refused).await?;
            // A refusal here is a fault of the version that answered, as an
            // invalid answer is (issue 23): counted towards rollback.
            for reason in refused {
                self.registry.report_refusal(&slot, &served_by, "job manager", &reason);
            }
            match follow {
                Some(e) => events = vec![e],
                None => break,
            }
        }
        Ok(())
    }

    /// One lifecycle call about `events` (in the order they happened),
    /// against views of the job as it is now: the slot asked, who answered,
    /// and the actions; `None` when the job is gone.
    async fn ask(
        &self,
        key: u64,
        events: Vec<sdk::Event>,
    ) -> Result<Option<(String, paceline_plugin::ServedBy, Vec<sdk::Action>)>, JobError> {
        let now = self.now();
        let (slot, job, tasks) = {
            let m = self.mem();
            let Some(j) = m.jobs.get(&key) else {
                return Ok(None);
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
        let asked = slot.clone();
        // Many jobs are handled at once, most of their time waiting on the
        // store; their plugin calls are not let pile onto the blocking pool
        // (each would take a fresh instance beyond the few kept warm).
        let _calling = self.lifecycle_calls.acquire().await.map_err(|e| JobError::Plugin(e.to_string()))?;
        let answer = tokio::task::spawn_blocking(move || registry.on_events(&asked, &job, &tasks, &events))
            .await
            .map_err(|e| JobError::Plugin(e.to_string()))?
            .map_err(|e| JobError::Plugin(e.to_string()))?;
        if let Some(first) = answer.faults.first() {
            let job_id = self.mem().jobs.get(&key).map(|j| j.id.clone());
            if let Some(job_id) = job_id {
                self.note_plugin_fallback(&job_id, &slot, first, &answer.served_by, now);
            }
        }
        Ok(Some((slot, answer.served_by, answer.value)))
    }

    /// Carries out lifecycle actions, each distinct action once (an answer
    /// to many events may repeat a job-wide decision). Returns a follow-up
    /// event when the update moved without any run changing (so the plugin
    /// must be asked again). Actions the job manager cannot carry out are
    /// skipped and their reasons pushed to `refused`.
    async fn execute(
        &self,
        key: u64,
        actions: Vec<sdk::Action>,
        refused: &mut Vec<String>,
    ) -> Result<Option<sdk::Event>, JobError> {
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
                        refused.push(format!("restart of instance {}, which the job does not have", r.instance));
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
                sdk::Action::MarkJob(s) => {
                    if let Err(why) = self.mark_job(key, JobState::from_contract(s)).await? {
                        refused.push(why);
                    }
                }
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
                job.push_task(TaskEntry::new(rt));
            }
        }
        m.refresh_live(key);
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

    /// The `mark-job` action. A terminal state stops the job's live tasks
    /// first (their goals are written before the job's end), so a job never
    /// reads as ended while a task of it is meant to run (decision 0023).
    /// Validation already refused SUCCEEDED with unfinished instances; what
    /// is refused here is a job that ended meanwhile (`Ok(Err(reason))`).
    async fn mark_job(&self, key: u64, state: JobState) -> Result<Result<(), String>, JobError> {
        let live: Vec<u32> = {
            let m = self.mem();
            let Some(job) = m.jobs.get(&key) else {
                return Ok(Ok(()));
            };
            if job.runtime.state.is_terminal() {
                return Ok(Err(format!("the job is already {}; it cannot be marked {state}", job.runtime.state)));
            }
            (0..job.tasks.len() as u32).filter(|&i| !job.tasks[i as usize].rt.state.is_terminal()).collect()
        };
        if state.is_terminal() {
            // What still runs of an ending job is stopped: the kills are
            // written first, so a crash between the two writes leaves a
            // running job with tasks being killed, never an ended job with
            // a task meant to run.
            let writes = {
                let m = self.mem();
                let Some(job) = m.jobs.get(&key) else {
                    return Ok(Ok(()));
                };
                live.iter()
                    .filter(|&&i| job.tasks[i as usize].wants_run())
                    .map(|&i| {
                        let mut rt = job.tasks[i as usize].rt.clone();
                        rt.goal = TaskGoal::Kill;
                        Write::new(i, rt, "")
                    })
                    .collect()
            };
            self.write_tasks(key, writes).await?;
        }
        let (id, old, rt) = {
            let mut m = self.mem();
            let Some(job) = m.jobs.get_mut(&key) else {
                return Ok(Ok(()));
            };
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
            (job.id.clone(), job.runtime.version, rt)
        };
        self.put_job_runtime(key, &id, old, rt).await?;
        if state.is_terminal() {
            self.step(key, &live).await?;
        }
        Ok(Ok(()))
    }
}
