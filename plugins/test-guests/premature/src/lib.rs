//! A lifecycle that breaks the job invariants in a well-formed way, one per
//! event: on creation it launches the instances and marks the job SUCCEEDED
//! before any has run; on a task change it launches an instance past the
//! job's count; on a kill request it moves the job back to PENDING; on a
//! timer it restarts an instance the job does not have. Validation must
//! reject each, and the job manager must never carry one out.
use paceline_plugin_sdk::prelude::*;

/// Declares victory early on purpose.
#[derive(Debug)]
pub struct Premature;

impl LifecyclePolicy for Premature {
    fn on_event(job: &JobView, tasks: &[TaskView], event: &Event) -> Vec<Action> {
        match event {
            Event::JobCreated => {
                let mut out: Vec<Action> = tasks.iter().map(|t| Action::Launch(t.instance)).collect();
                out.push(Action::MarkJob(JobState::Succeeded));
                out
            }
            Event::TaskChanged(_) => vec![Action::Launch(job.instance_count)],
            Event::KillRequested => vec![Action::MarkJob(JobState::Pending)],
            Event::Timer(_) => vec![Action::RestartAfter(Restart { instance: job.instance_count + 7, delay_ms: 0 })],
            _ => Vec::new(),
        }
    }
}

export_lifecycle!(Premature);
