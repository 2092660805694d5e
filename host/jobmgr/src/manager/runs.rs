//! Run updates: what hosts report about runs, checked against the mirror
//! (stale runs, duplicates, older states redelivered), written in waves, and
//! followed by the resource manager's record, update progress and the
//! lifecycle's reaction. A launch the host refused is placed again.

use std::collections::BTreeMap;

use paceline_joints::contract::IntoContract;
use paceline_model::RunId;
use paceline_model::run::{RunState, RunUpdate};
use paceline_model::task::{TaskEvent, TaskGoal, TaskState};
use paceline_plugin_sdk::types as sdk;

use super::JobManager;
use super::launch::refused_launch;
use super::lifecycle::MAX_RUN_TIME;
use super::writes::Write;
use crate::deadline::{Deadline, DeadlineKind};
use crate::error::JobError;

/// Reason the host manager gives a run whose launch its host refused before
/// creating anything.
const LAUNCH_REJECTED: &str = "LAUNCH_REJECTED";

/// Reason the host manager gives a run it expected on a registered host
/// that the host (or provider) does not report, found at reconcile.
const RUN_MISSING: &str = "RUN_MISSING";

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
                match RunId::split(&u.run_id) {
                    Ok((job_id, _, _)) => {
                        if let Some(key) = m.key_of(job_id) {
                            jobs.entry(key).or_default().push(i);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(run = %u.run_id, error = %e, "run update with a malformed run id; dropped")
                    }
                }
            }
        }
        use futures::StreamExt;
        // Per job: the updates' positions and their results.
        type Done = (Vec<usize>, Vec<Result<(), JobError>>);
        let done: Vec<Done> = futures::stream::iter(jobs)
            .map(|(key, idx)| async move {
                let ups: Vec<&RunUpdate> = idx.iter().map(|&i| &updates[i]).collect();
                let res = self.apply_run_updates(key, &ups).await;
                (idx, res)
            })
            .buffer_unordered(self.config.concurrent_jobs.max(1))
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
        // of the task: the run is placed again, elsewhere if it can be. So
        // are launches that never happened (reported missing before the run
        // ever reported STARTING or RUNNING, see `never_started`).
        let mut rest = Vec::with_capacity(ups.len());
        for (i, u) in ups.iter().enumerate() {
            // (Not when an earlier update of this burst is of the same run:
            // that one says it started.)
            let missing = u.state == RunState::Lost
                && u.reason == RUN_MISSING
                && !ups[..i].iter().any(|p| p.run_id == u.run_id)
                && self.never_started(key, u);
            if u.state == RunState::Failed && u.reason == LAUNCH_REJECTED || missing {
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

    /// Whether `u`, which reports a run missing (LOST, `RUN_MISSING`), is of
    /// the current run while the task still waits for it to start
    /// (LAUNCHING or LAUNCHED: no STARTING or RUNNING was ever handled) and
    /// is meant to run. Such a
    /// launch did not happen (e.g. the server was SIGKILLed with it in
    /// flight) and is not a failure of the task. Placing it again cannot run
    /// it twice: the host manager says RUN_MISSING only after its host (or
    /// provider) registered and listed its runs without this one, and from
    /// then on holds the run as ended, so a copy the host reports later
    /// (a create that was still in flight) is killed on sight, never adopted.
    fn never_started(&self, key: u64, u: &RunUpdate) -> bool {
        let Ok((_, instance, run)) = RunId::split(&u.run_id) else {
            return false;
        };
        let m = self.mem();
        m.jobs.get(&key).and_then(|j| j.tasks.get(instance as usize)).is_some_and(|t| {
            t.rt.run == run && matches!(t.rt.state, TaskState::Launching | TaskState::Launched) && t.wants_run()
        })
    }

    /// A run's launch was refused by its host after the job manager handed
    /// it over (`LAUNCH_REJECTED`: e.g. the Mesos offer it was to use was
    /// rescinded), or it never started (`RUN_MISSING`, see
    /// [`JobManager::never_started`]): unless the run has moved on, its next run is written
    /// (LAUNCH_FAILED, no failure counted), the old host is avoided, and the
    /// task goes back to the resource manager.
    async fn launch_rejected(&self, key: u64, u: &RunUpdate) -> Result<(), JobError> {
        let Ok((_, instance, run)) = RunId::split(&u.run_id) else {
            return Ok(());
        };
        let now = self.now();
        let (write, wait_until) = {
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
            let why = if u.reason == RUN_MISSING {
                format!("launch on {} never started: {}", u.host, u.message)
            } else {
                format!("launch on {} refused: {}", u.host, u.message)
            };
            let (rt, wait_until) = refused_launch(&mut rm, kind, t, rm_task, &u.host, why, now);
            (Write::new(instance, rt, "LAUNCH_FAILED"), wait_until)
        };
        let run = write.rt.run;
        self.write_tasks(key, vec![write]).await?;
        match wait_until {
            None => self.submit(key, &[instance]).await,
            Some(at) => {
                self.mem().deadlines.push(super::launch::resubmit_at(key, instance, run, at));
                Ok(())
            }
        }
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
                let instance = RunId::split(&ups[next].run_id).map_or(u32::MAX, |p| p.1);
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
            // The superseded states' events are stored with the write of the
            // state they led to, and only if it is written.
            let written = self.write_tasks_with_events(key, writes, superseded).await;
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
        let (_, instance, run) = RunId::split(&update.run_id).ok()?;
        let mut m = self.mem();
        let job = m.jobs.get_mut(&key)?;
        let kill_on_preempt = job.config().sla.kill_on_preempt;
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
        if to == TaskState::Running {
            t.launch_refusals = 0;
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
        // A preempted run of a job that says kill-on-preempt ends its task:
        // the goal is written Kill with the KILLED state, in the same write,
        // so that neither the goal-state table nor a recovery starts another
        // run (KILLED with the goal Run is a restart under way), and the
        // resource manager releases the task instead of requeueing it.
        let preempted_for_good = to == TaskState::Killed && t.preempted && kill_on_preempt;
        if preempted_for_good {
            rt.goal = TaskGoal::Kill;
        }
        let reason = if preempted_for_good {
            "PREEMPTED".to_string()
        } else if to == TaskState::Failed && was_max_run_time {
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
            write: Some(Write {
                instance,
                rt,
                reason,
                message: update.message.clone(),
                // Folded onto an earlier update of the burst: its event is
                // recorded apart, and this one starts where it ended.
                from: base.map(|_| from),
            }),
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
            if goal != TaskGoal::Run && to.is_terminal() {
                self.victim_no_longer_wanted(key, instance, rm_task);
            }
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
            Ok(Some(sdk::Event::TaskChanged(sdk::TaskChange { instance, state: to.into_contract() })))
        } else {
            Ok(None)
        }
    }
}

impl JobManager {
    /// A preemption victim whose job no longer wants it to run (removed or
    /// killed while being preempted, or ended for good by its job's
    /// `sla.kill_on_preempt`) is a plain kill to the resource
    /// manager, which would otherwise requeue it when the kill is confirmed:
    /// a queued gang nobody runs, left as demand in the pool for ever.
    fn victim_no_longer_wanted(&self, key: u64, instance: u32, rm_task: Option<paceline_joints::TaskHandle>) {
        let now = self.now();
        let mut rm = self.rm();
        let mut m = self.mem();
        let Some(t) = m.jobs.get_mut(&key).and_then(|j| j.tasks.get_mut(instance as usize)) else {
            return;
        };
        if !std::mem::take(&mut t.preempted) {
            return;
        }
        if let Some(id) = rm_task
            && rm.task(id).is_some_and(|i| i.state == paceline_resmgr::TaskState::Preempting)
        {
            // PREEMPTING → KILLING: the confirmation then releases it.
            let _ = rm.kill(id, now);
        }
    }
}
