//! Job specs, kinds and states, updates, job events: wire ⇄ model.

use std::collections::BTreeMap;

use paceline_model::job::{JobConfig, JobKind, JobRuntime, JobState, Sla, Update, UpdateSpec, UpdateState};
use paceline_model::task::{TaskRuntime, TaskState};

use super::FieldError;
use super::task::{check_task, spec_error, task_spec, task_spec_pb};
use crate::v1 as pb;
/// A job kind from the wire.
pub fn job_kind(field: &str, k: i32) -> Result<JobKind, FieldError> {
    match pb::JobKind::try_from(k) {
        Ok(pb::JobKind::Batch) => Ok(JobKind::Batch),
        Ok(pb::JobKind::Stateless) => Ok(JobKind::Stateless),
        Ok(pb::JobKind::Stateful) => Ok(JobKind::Stateful),
        Ok(pb::JobKind::Daemon) => Ok(JobKind::Daemon),
        Ok(pb::JobKind::Unspecified) => {
            Err(FieldError::new(field, "must be set (batch, stateless, stateful or daemon)"))
        }
        Err(_) => Err(FieldError::new(field, format!("unknown job kind {k}"))),
    }
}

/// A job kind to the wire.
pub fn job_kind_pb(k: JobKind) -> pb::JobKind {
    match k {
        JobKind::Batch => pb::JobKind::Batch,
        JobKind::Stateless => pb::JobKind::Stateless,
        JobKind::Stateful => pb::JobKind::Stateful,
        JobKind::Daemon => pb::JobKind::Daemon,
    }
}

/// A job state to the wire.
pub fn job_state_pb(s: JobState) -> pb::JobState {
    match s {
        JobState::Initialized => pb::JobState::Initialized,
        JobState::Pending => pb::JobState::Pending,
        JobState::Running => pb::JobState::Running,
        JobState::Succeeded => pb::JobState::Succeeded,
        JobState::Failed => pb::JobState::Failed,
        JobState::Killing => pb::JobState::Killing,
        JobState::Killed => pb::JobState::Killed,
    }
}

/// A job state from the wire (for filters).
pub fn job_state(field: &str, s: i32) -> Result<JobState, FieldError> {
    let state = pb::JobState::try_from(s).map_err(|_| FieldError::new(field, format!("unknown job state {s}")))?;
    JobState::ALL.into_iter().find(|m| job_state_pb(*m) == state).ok_or_else(|| FieldError::new(field, "must be set"))
}

/// An update spec from the wire.
pub fn update_spec(u: &pb::UpdateSpec) -> UpdateSpec {
    UpdateSpec {
        batch_size: u.batch_size,
        max_failed_instances: u.max_failed_instances,
        rollback_on_failure: u.rollback_on_failure,
        start_paused: u.start_paused,
    }
}

/// An update spec to the wire.
pub fn update_spec_pb(u: &UpdateSpec) -> pb::UpdateSpec {
    pb::UpdateSpec {
        batch_size: u.batch_size,
        max_failed_instances: u.max_failed_instances,
        rollback_on_failure: u.rollback_on_failure,
        start_paused: u.start_paused,
    }
}

/// A job spec from the wire, validated by the model. `field` is its path
/// (`spec`) for errors.
pub fn job_config(field: &str, j: &pb::JobSpec) -> Result<JobConfig, FieldError> {
    let default_task = j
        .default_task
        .as_ref()
        .ok_or_else(|| FieldError::new(format!("{field}.default_task"), "must be set"))
        .and_then(|t| task_spec(&format!("{field}.default_task"), t))?;
    let mut instance_overrides = BTreeMap::new();
    for (i, t) in &j.instance_overrides {
        instance_overrides.insert(*i, task_spec(&format!("{field}.instance_overrides[{i}]"), t)?);
    }
    let sla = j
        .sla
        .as_ref()
        .map(|s| Sla {
            priority: s.priority,
            preemptible: s.preemptible,
            revocable: s.revocable,
            max_running_instances: s.max_running_instances,
            min_running_instances: s.min_running_instances,
            max_run_time_secs: s.max_run_time_secs,
            max_unavailable_instances: s.max_unavailable_instances,
            kill_on_preempt: s.kill_on_preempt,
        })
        .unwrap_or_default();
    let config = JobConfig {
        name: j.name.clone(),
        owner: j.owner.clone(),
        pool: j.pool.clone(),
        kind: job_kind(&format!("{field}.kind"), j.kind)?,
        instance_count: j.instance_count,
        sla,
        default_task,
        instance_overrides,
        labels: j.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        update: j.update.as_ref().map(update_spec).unwrap_or_default(),
        plugin_overrides: j.plugin_overrides.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        description: j.description.clone(),
        controller: j.controller,
        owner_lease_secs: j.owner_lease_secs,
        gang: gang_spec(&format!("{field}.gang"), j.gang.as_ref())?,
        user: (!j.user.is_empty()).then(|| j.user.clone()),
    };
    // Task specs first, so their errors carry the task's own path.
    check_task(&format!("{field}.default_task"), &config.default_task)?;
    for (i, t) in &config.instance_overrides {
        check_task(&format!("{field}.instance_overrides[{i}]"), t)?;
    }
    config.validate().map_err(|e| spec_error(field, &e))?;
    Ok(config)
}

/// A job spec to the wire.
pub fn job_spec_pb(c: &JobConfig) -> pb::JobSpec {
    pb::JobSpec {
        name: c.name.clone(),
        owner: c.owner.clone(),
        pool: c.pool.clone(),
        kind: job_kind_pb(c.kind) as i32,
        instance_count: c.instance_count,
        sla: Some(pb::Sla {
            priority: c.sla.priority,
            preemptible: c.sla.preemptible,
            revocable: c.sla.revocable,
            max_running_instances: c.sla.max_running_instances,
            min_running_instances: c.sla.min_running_instances,
            max_run_time_secs: c.sla.max_run_time_secs,
            max_unavailable_instances: c.sla.max_unavailable_instances,
            kill_on_preempt: c.sla.kill_on_preempt,
        }),
        default_task: Some(task_spec_pb(&c.default_task)),
        instance_overrides: c.instance_overrides.iter().map(|(i, t)| (*i, task_spec_pb(t))).collect(),
        labels: c.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        update: Some(update_spec_pb(&c.update)),
        plugin_overrides: c.plugin_overrides.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        description: c.description.clone(),
        controller: c.controller,
        owner_lease_secs: c.owner_lease_secs,
        gang: (!c.gang.is_default()).then(|| pb::GangSpec { discovery: c.gang.discovery.as_str().to_string() }),
        user: c.user.clone().unwrap_or_default(),
    }
}

/// A gang's discovery from the wire; unset is the default.
fn gang_spec(field: &str, g: Option<&pb::GangSpec>) -> Result<paceline_model::gang::GangSpec, FieldError> {
    let Some(g) = g else { return Ok(Default::default()) };
    let discovery = paceline_model::gang::GangDiscovery::parse(&g.discovery).ok_or_else(|| {
        FieldError::new(
            format!("{field}.discovery"),
            format!("{:?} is not one of none, pytorch, tensorflow, jax", g.discovery),
        )
    })?;
    Ok(paceline_model::gang::GangSpec { discovery })
}

/// A job runtime to the wire.
pub fn job_status_pb(rt: &JobRuntime) -> pb::JobStatus {
    pb::JobStatus {
        state: job_state_pb(rt.state) as i32,
        config_version: rt.config_version,
        desired_config_version: rt.desired_config_version,
        task_counts: rt.task_counts.iter().map(|(s, n)| (s.as_str().to_string(), *n)).collect(),
        created_at_ms: rt.created_at_ms,
        updated_at_ms: rt.updated_at_ms,
        completed_at_ms: rt.completed_at_ms.unwrap_or(0),
        message: rt.message.clone(),
        // The API fills these in against the hosts of the moment.
        pending_summary: String::new(),
        warnings: Vec::new(),
        // Not in the runtime: the API fills it in from the job manager.
        latest_config_version: 0,
    }
}

/// An update state to the wire.
pub fn update_state_pb(s: UpdateState) -> pb::UpdateState {
    match s {
        UpdateState::Initialized => pb::UpdateState::Initialized,
        UpdateState::RollingForward => pb::UpdateState::RollingForward,
        UpdateState::Paused => pb::UpdateState::Paused,
        UpdateState::Succeeded => pb::UpdateState::Succeeded,
        UpdateState::RollingBackward => pb::UpdateState::RollingBackward,
        UpdateState::RolledBack => pb::UpdateState::RolledBack,
        UpdateState::Aborted => pb::UpdateState::Aborted,
        UpdateState::Failed => pb::UpdateState::Failed,
    }
}

/// An update to the wire. The update record lists only the instances it
/// touches, so progress per instance is read from the tasks: at the target
/// version and up (or finished) is done, failed is failed, the rest are in
/// progress.
pub fn update_pb(u: &Update, tasks: &[TaskRuntime]) -> pb::UpdateStatus {
    let (mut done, mut in_progress, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for &i in &u.instances {
        match tasks.get(i as usize) {
            Some(t) if t.state == TaskState::Failed => failed.push(i),
            Some(t)
                if t.config_version == u.to_config_version
                    && matches!(t.state, TaskState::Running | TaskState::Succeeded) =>
            {
                done.push(i)
            }
            // An instance removed by the update (shrink) has no task left.
            None => done.push(i),
            Some(_) if u.state.is_terminal() => done.push(i),
            Some(_) => in_progress.push(i),
        }
    }
    pb::UpdateStatus {
        id: u.id.clone(),
        state: update_state_pb(u.state) as i32,
        from_config_version: u.from_config_version,
        to_config_version: u.to_config_version,
        done,
        in_progress,
        failed,
        message: u.message.clone(),
    }
}

/// A job event (decision 0025) to the wire.
pub fn job_event_pb(e: &paceline_model::event::JobEvent) -> pb::JobEvent {
    use paceline_model::event::EventType;
    pb::JobEvent {
        job_id: e.job_id.clone(),
        instance: e.instance,
        r#type: match e.event_type {
            EventType::Normal => pb::EventType::Normal,
            EventType::Warning => pb::EventType::Warning,
        } as i32,
        reason: e.reason.as_str().to_string(),
        message: e.message.clone(),
        first_seen_ms: e.first_seen_ms,
        last_seen_ms: e.last_seen_ms,
        count: e.count,
    }
}
