//! The goal-state step: the (state, goal) → action table applied to
//! instances (submit, release, kill), and the runs it starts and stops.

use paceline_model::job::JobKind;
use paceline_model::task::{TaskGoal, TaskId, TaskState};

use super::JobManager;
use super::admission::{Released, release_left};
use super::writes::Write;
use crate::deadline::{Deadline, DeadlineKind};
use crate::error::JobError;
use crate::table::{self, GoalAction};

impl JobManager {
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
                let (mut admitted, mut requeued) = (Vec::new(), Vec::new());
                for i in release {
                    let t = &job.tasks[i as usize];
                    // A queued gang shared with members that still want to run
                    // stays queued; this member is released when the engine
                    // takes it (see `take_ready`). A gang's members are its
                    // consecutive instances, so only they are looked at: a
                    // scan of the whole job per task made killing a big
                    // queued job quadratic.
                    let shared = t.gang.is_some_and(|g| {
                        rm.gang_span(g).is_some_and(|(_, first, n)| {
                            n > 1
                                && (first..first.saturating_add(n)).any(|o| {
                                    o != i
                                        && job.tasks.get(o as usize).is_some_and(|o| o.gang == Some(g) && o.wants_run())
                                })
                        })
                    });
                    if !shared {
                        match self.rm_release(&mut rm, t) {
                            Released::Done => {}
                            Released::Admitted => admitted.push(i),
                            Released::Requeued => requeued.push(i),
                        }
                    }
                    let mut rt = t.rt.clone();
                    rt.state = TaskState::Killed;
                    rt.completed_at_ms = Some(self.now());
                    writes.push(Write::new(i, rt, "KILLED_BEFORE_LAUNCH"));
                }
                release_left(&mut rm, key, &mut admitted, &mut requeued, self.now());
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
                calls.push((host, TaskId::new(job.id.clone(), i).run_id(t.rt.run), u64::from(grace)));
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
            if let Err(e) = self.launcher.kill(&run_id, Some(std::time::Duration::from_secs(grace))).await {
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
}
