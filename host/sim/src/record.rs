//! A live cluster's history as a trace (`paceline trace record`): hosts,
//! pools, and each job with the run time and exit of its tasks' runs as
//! their events show them, and the kills that were asked for. The caller
//! fetches the records (the binary reads them through the public API);
//! this module only turns them into trace lines.
//!
//! What the history holds and what it does not:
//! - a job arrives at its creation time, with its **current** config (the
//!   public API serves no older versions: updates are not replayed, the
//!   job runs its latest spec from the start);
//! - a task's script comes from its runs: the first `fail_runs` runs that
//!   failed, then the last run's length (RUNNING to its end) and exit (a
//!   failed end exits 1: events do not carry exit codes);
//! - a run still going when recorded runs until killed in the replay, as
//!   does a run that was killed on request (the kill comes at its time);
//! - hosts join at 0 with their capacity and attributes (join times are not
//!   kept); preemptions and host losses are outcomes of the replay, not
//!   inputs.

use std::collections::BTreeMap;

use paceline_model::job::JobConfig;
use paceline_model::pool::PoolEntry;
use paceline_model::task::{TaskEvent, TaskState};

use crate::trace::{Event, Header, HostEvent, JobEvent, KillEvent, RunScript, Timed};

/// One task's history, oldest event first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordedTask {
    /// Instance.
    pub instance: u32,
    /// Events, oldest first.
    pub events: Vec<TaskEvent>,
}

/// One job as recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedJob {
    /// Id.
    pub id: String,
    /// Current config.
    pub config: JobConfig,
    /// Creation time, ms since the epoch.
    pub created_ms: u64,
    /// Its tasks.
    pub tasks: Vec<RecordedTask>,
}

/// A run's end: when, how, why.
type RunEnd = (u64, TaskState, String);

/// What one task's events say about its runs.
fn script_of(events: &[TaskEvent]) -> (RunScript, Option<u64>) {
    let mut runs: BTreeMap<u64, (Option<u64>, Option<RunEnd>)> = BTreeMap::new();
    for e in events {
        let r = runs.entry(e.run).or_default();
        if matches!(e.to, TaskState::Running | TaskState::Starting) && r.0.is_none() {
            r.0 = Some(e.at_ms);
        }
        if e.to.is_terminal() && r.1.is_none() {
            r.1 = Some((e.at_ms, e.to, e.reason.clone()));
        }
    }
    let mut script = RunScript::default();
    let mut kill_at = None;
    let mut leading_failures = true;
    let total = runs.len();
    for (n, (_, (started, end))) in runs.iter().enumerate() {
        let last = n + 1 == total;
        match end {
            Some((at, TaskState::Failed, _)) if !last && leading_failures => {
                script.fail_runs += 1;
                script.ms = started.map(|s| at.saturating_sub(s).max(1));
            }
            Some((at, state, reason)) if last => {
                match state {
                    TaskState::Succeeded | TaskState::Failed => {
                        script.exit = i32::from(*state == TaskState::Failed);
                        script.ms = started.map(|s| at.saturating_sub(s).max(1)).or(Some(1));
                    }
                    TaskState::Killed if reason != "PREEMPTED" => {
                        script.ms = None;
                        // The kill was asked for when KILLING was written, or at the end.
                        kill_at = events
                            .iter()
                            .filter(|e| e.to == TaskState::Killing)
                            .map(|e| e.at_ms)
                            .next_back()
                            .or(Some(*at));
                    }
                    _ => script.ms = None,
                }
            }
            _ => leading_failures = false,
        }
        if last && end.is_none() {
            script.ms = None;
        }
    }
    (script, kill_at)
}

/// Builds the trace. `now_ms` is the recording time (the trace's span ends there).
pub fn build(
    name: &str,
    pools: Vec<PoolEntry>,
    hosts: Vec<HostEvent>,
    jobs: Vec<RecordedJob>,
    now_ms: u64,
) -> (Header, Vec<Timed>) {
    let t0 = jobs.iter().map(|j| j.created_ms).min().unwrap_or(now_ms);
    let mut events: Vec<Timed> = pools.into_iter().map(|p| Timed { at: 0, event: Event::Pool(p) }).collect();
    events.extend(hosts.into_iter().map(|h| Timed { at: 0, event: Event::Host(h) }));
    let mut later: Vec<(u64, usize, Event)> = Vec::new();
    let mut kills = 0;
    for (n, job) in jobs.into_iter().enumerate() {
        let mut runs = Vec::with_capacity(job.tasks.len());
        let mut kill_times: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for t in &job.tasks {
            let (script, kill_at) = script_of(&t.events);
            runs.push(script);
            if let Some(k) = kill_at {
                kill_times.entry(k).or_default().push(t.instance);
            }
        }
        let uniform = runs.windows(2).all(|w| w[0] == w[1]);
        let (run, runs) = if uniform {
            (runs.first().copied().unwrap_or_default(), Vec::new())
        } else {
            (RunScript::default(), runs)
        };
        let count = job.config.instance_count;
        later.push((
            job.created_ms.saturating_sub(t0),
            n,
            Event::Job(Box::new(JobEvent { id: job.id.clone(), spec: job.config, run, runs, gpu_milli: None })),
        ));
        for (at, instances) in kill_times {
            kills += 1;
            let instances = if instances.len() as u32 == count { None } else { Some(instances) };
            later.push((at.saturating_sub(t0), n, Event::Kill(KillEvent { job: job.id.clone(), instances })));
        }
    }
    later.sort_by_key(|(at, n, _)| (*at, *n));
    let jobs_n = later.iter().filter(|(_, _, e)| matches!(e, Event::Job(_))).count();
    events.extend(later.into_iter().map(|(at, _, event)| Timed { at, event }));
    let mut header = Header::new(name, "recorded");
    header.duration_ms = Some(now_ms.saturating_sub(t0));
    header.notes = vec![
        format!("recorded: {jobs_n} jobs, {kills} kill requests"),
        "jobs arrive with their current config (updates are not replayed); task scripts from their runs' events".into(),
    ];
    (header, events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(run: u64, to: TaskState, at_ms: u64, reason: &str) -> TaskEvent {
        TaskEvent { run, from: None, to, at_ms, host: Some("h".into()), reason: reason.into(), message: String::new() }
    }

    #[test]
    fn a_failed_then_succeeded_task_becomes_fail_runs_and_the_last_length() {
        let events = vec![
            ev(1, TaskState::Running, 1_000, ""),
            ev(1, TaskState::Failed, 1_500, "EXITED"),
            ev(2, TaskState::Running, 3_000, ""),
            ev(2, TaskState::Succeeded, 5_000, "EXITED"),
        ];
        let (s, kill) = script_of(&events);
        assert_eq!(s, RunScript { ms: Some(2_000), exit: 0, fail_runs: 1 });
        assert_eq!(kill, None);
        let killed = vec![
            ev(1, TaskState::Running, 1_000, ""),
            ev(1, TaskState::Killing, 4_000, ""),
            ev(1, TaskState::Killed, 4_100, ""),
        ];
        let (s, kill) = script_of(&killed);
        assert_eq!((s.ms, kill), (None, Some(4_000)));
    }
}
