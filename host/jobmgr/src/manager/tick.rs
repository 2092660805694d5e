//! Time and the resource manager's kills: due deadlines (restart after a
//! backoff, max run time, kill retries, resubmits after refused launches),
//! preemption victims, and the
//! progress of an update as its instances' runs change.

use paceline_model::job::{InstanceUpdateState, JobKind};
use paceline_model::task::{TaskGoal, TaskState};
use paceline_plugin_sdk::types as sdk;

use super::JobManager;
use super::writes::Write;
use crate::deadline::DeadlineKind;
use crate::error::JobError;

impl JobManager {
    /// Fires due deadlines: restarts after backoff, max-run-time checks, kill retries;
    /// kills jobs whose owner lease ran out.
    /// Also writes the job events noted since the last flush, once a second
    /// (decision 0025), before taking the job manager's lock.
    pub async fn tick(&self, now_ms: u64) -> Result<(), JobError> {
        self.flush_events_if_due(now_ms).await;
        let _op = self.ops.lock().await;
        self.expire_owner_leases(now_ms).await?;
        let due = self.mem().deadlines.due(now_ms);
        // Resubmits are gathered per job and submitted together, so that
        // members of a gang refused together are queued as one gang again.
        let mut resubmit: std::collections::BTreeMap<u64, Vec<u32>> = std::collections::BTreeMap::new();
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
                DeadlineKind::Resubmit
                    if state == TaskState::Initialized && matches!(goal, TaskGoal::Run | TaskGoal::Succeed) =>
                {
                    resubmit.entry(d.job_key).or_default().push(d.instance);
                }
                _ => {}
            }
        }
        for (key, instances) in resubmit {
            self.submit(key, &instances).await?;
            self.sync_job(key).await?;
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
            if let paceline_resmgr::KillReason::Preempted(why) = k.reason {
                let live = {
                    let m = self.mem();
                    m.jobs.get(&k.job).and_then(|j| {
                        let t = j.tasks.get(k.instance as usize).filter(|t| t.rt.state.is_on_host())?;
                        Some((j.id.clone(), t.rt.host.clone()))
                    })
                };
                if let Some((job_id, host)) = live {
                    self.note_preempted(&job_id, k.instance, host.as_deref(), why);
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
    pub(crate) async fn requeued_run(&self, key: u64, instance: u32) -> Result<(), JobError> {
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
