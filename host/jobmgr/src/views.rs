//! Building the lifecycle plugin's views of a job and its tasks (the leaf
//! values are converted by `paceline_joints::contract`).

use paceline_joints::contract::IntoContract;
use paceline_model::job::InstanceUpdateState;
use paceline_model::task::TaskState;
use paceline_plugin_sdk::types as sdk;

use crate::state::JobEntry;

/// Failures allowed per instance: the restart policy's budget (batch).
pub(crate) fn max_failures(job: &JobEntry) -> u32 {
    let p = &job.config().default_task.restart_policy;
    if p.on_failure { p.max_restarts.unwrap_or(u32::MAX) } else { 0 }
}

pub(crate) fn job_view(job: &JobEntry, draining: &std::collections::BTreeSet<String>) -> sdk::JobView {
    let cfg = job.config();
    let update = job.update.as_ref().filter(|u| u.is_active()).map(|u| sdk::UpdateView {
        target_version: job.target_version(),
        batch_size: u.update.spec.batch_size,
        max_unavailable: cfg.sla.max_unavailable_instances.unwrap_or(0),
        max_failures: u.update.spec.max_failed_instances,
        rollback_on_failure: u.update.spec.rollback_on_failure
            && u.update.state != paceline_model::job::UpdateState::RollingBackward,
        paused: u.paused(),
        done: u.of_state(InstanceUpdateState::Succeeded),
        in_flight: u.of_state(InstanceUpdateState::InProgress),
        failed: u.of_state(InstanceUpdateState::Failed),
    });
    sdk::JobView {
        kind: cfg.kind.into_contract(),
        state: job.runtime.state.into_contract(),
        instance_count: job.instance_count(),
        max_failures_per_instance: max_failures(job),
        max_run_time_ms: cfg.sla.max_run_time_secs.unwrap_or(0).saturating_mul(1000),
        config_version: job.runtime.config_version,
        resources: cfg.default_task.resources.into_contract(),
        update,
        matching_hosts: job
            .daemon_hosts
            .iter()
            .map(|h| if draining.contains(h) { String::new() } else { h.clone() })
            .collect(),
    }
}

pub(crate) fn task_views(job: &JobEntry, now_ms: u64) -> Vec<sdk::TaskView> {
    job.tasks
        .iter()
        .enumerate()
        .map(|(i, t)| sdk::TaskView {
            instance: i as u32,
            state: t.rt.state.into_contract(),
            run: t.rt.run.min(u64::from(u32::MAX)) as u32,
            failures: t.rt.failure_count,
            healthy: t.healthy,
            config_version: t.rt.config_version,
            host: t.rt.host.clone(),
            running_for_ms: (t.rt.state == TaskState::Running)
                .then(|| t.rt.started_at_ms.map(|s| now_ms.saturating_sub(s)))
                .flatten(),
            exit_code: t.exit_code,
        })
        .collect()
}
