//! Task specs, states, goals, runtimes and events: wire ⇄ model.

use paceline_model::task::{
    HealthCheck, HttpProbe, RestartPolicy, SpecError, TaskEvent, TaskGoal, TaskId, TaskRuntime, TaskSpec, TaskState,
    TcpProbe, VolumeSpec,
};
use paceline_model::task_secret::SecretRef;

use super::FieldError;
use super::resource::{constraint, constraint_pb, gpu_grant_pb, preference, preference_pb, resources, resources_pb};
use crate::v1 as pb;
/// A launch's secret as the agent protocol carries it (its value in the
/// clear: for the agent's mutually authenticated stream only).
pub fn launch_secret_pb(s: &paceline_model::task_secret::LaunchSecret) -> crate::agent::v1::LaunchSecret {
    use paceline_model::task_secret::SecretTarget;
    let (env, file) = match &s.target {
        SecretTarget::Env(e) => (e.clone(), String::new()),
        SecretTarget::File(f) => (String::new(), f.clone()),
    };
    crate::agent::v1::LaunchSecret { name: s.name.clone(), env, file, value: s.value.expose().as_bytes().to_vec() }
}

/// A task state to the wire.
pub fn task_state_pb(s: TaskState) -> pb::TaskState {
    use pb::TaskState as P;
    match s {
        TaskState::Initialized => P::Initialized,
        TaskState::Pending => P::Pending,
        TaskState::Ready => P::Ready,
        TaskState::Placing => P::Placing,
        TaskState::Placed => P::Placed,
        TaskState::Launching => P::Launching,
        TaskState::Launched => P::Launched,
        TaskState::Starting => P::Starting,
        TaskState::Running => P::Running,
        TaskState::Succeeded => P::Succeeded,
        TaskState::Failed => P::Failed,
        TaskState::Lost => P::Lost,
        TaskState::Killed => P::Killed,
        TaskState::Preempting => P::Preempting,
        TaskState::Killing => P::Killing,
    }
}

/// A task state from the wire (for filters).
pub fn task_state(field: &str, s: i32) -> Result<TaskState, FieldError> {
    let state = pb::TaskState::try_from(s).map_err(|_| FieldError::new(field, format!("unknown task state {s}")))?;
    TaskState::ALL.into_iter().find(|m| task_state_pb(*m) == state).ok_or_else(|| FieldError::new(field, "must be set"))
}

fn health_check(h: &pb::HealthCheck) -> HealthCheck {
    HealthCheck {
        command: h.command.clone(),
        args: h.args.clone(),
        http: (!h.http_port.is_empty()).then(|| HttpProbe {
            port: h.http_port.clone(),
            path: if h.http_path.is_empty() { "/".into() } else { h.http_path.clone() },
        }),
        tcp: (!h.tcp_port.is_empty()).then(|| TcpProbe { port: h.tcp_port.clone() }),
        initial_delay_secs: h.initial_delay_secs,
        interval_secs: h.interval_secs,
        timeout_secs: h.timeout_secs,
        max_consecutive_failures: h.max_consecutive_failures,
    }
}

fn health_check_pb(h: &HealthCheck) -> pb::HealthCheck {
    pb::HealthCheck {
        command: h.command.clone(),
        args: h.args.clone(),
        http_port: h.http.as_ref().map(|p| p.port.clone()).unwrap_or_default(),
        http_path: h.http.as_ref().map(|p| p.path.clone()).unwrap_or_default(),
        tcp_port: h.tcp.as_ref().map(|p| p.port.clone()).unwrap_or_default(),
        initial_delay_secs: h.initial_delay_secs,
        interval_secs: h.interval_secs,
        timeout_secs: h.timeout_secs,
        max_consecutive_failures: h.max_consecutive_failures,
    }
}

/// A task spec from the wire; `field` is its path for errors.
pub fn task_spec(field: &str, t: &pb::TaskSpec) -> Result<TaskSpec, FieldError> {
    let constraints = t
        .constraints
        .iter()
        .enumerate()
        .map(|(i, c)| constraint(&format!("{field}.constraints[{i}]"), c))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TaskSpec {
        command: t.command.clone(),
        args: t.args.clone(),
        env: t.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        image: (!t.image.is_empty()).then(|| t.image.clone()),
        resources: resources(t.resources.as_ref()),
        ports: t.ports.clone(),
        constraints,
        preferences: t.preferences.iter().map(preference).collect(),
        labels: t.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        health_check: t.health_check.as_ref().map(health_check),
        restart_policy: t
            .restart_policy
            .as_ref()
            .map(|r| RestartPolicy {
                on_failure: r.on_failure,
                on_success: r.on_success,
                max_restarts: r.max_restarts,
                backoff_secs: r.backoff_secs,
            })
            .unwrap_or_default(),
        volume: t.volume.as_ref().map(|v| VolumeSpec { name: v.name.clone(), size_mib: v.size_mib }),
        kill_grace_period_secs: t.kill_grace_period_secs,
        stop_signal: t.stop_signal.clone(),
        secrets: t
            .secrets
            .iter()
            .map(|r| SecretRef {
                name: r.name.clone(),
                env: (!r.env.is_empty()).then(|| r.env.clone()),
                file: (!r.file.is_empty()).then(|| r.file.clone()),
            })
            .collect(),
        gpu_models: t.gpu_models.clone(),
    })
}

/// The model's spec error, with its field under `prefix`.
pub(super) fn spec_error(prefix: &str, e: &SpecError) -> FieldError {
    let field = match e {
        SpecError::Empty(f) => Some(*f),
        SpecError::TooLong { field, .. } | SpecError::TooMany { field, .. } | SpecError::Invalid { field, .. } => {
            Some(*field)
        }
        _ => None,
    };
    match field {
        // `env key` and similar prose names are not paths: keep them in the reason.
        Some(f) if !f.contains(' ') => FieldError::new(format!("{prefix}.{f}"), e.to_string()),
        Some(f) if f.starts_with("env") => FieldError::new(format!("{prefix}.env"), e.to_string()),
        _ => FieldError::new(prefix, e.to_string()),
    }
}

/// What the model leaves open but a schedulable task needs: CPU and memory.
pub(super) fn check_task(field: &str, t: &TaskSpec) -> Result<(), FieldError> {
    if t.resources.cpu_millis == 0 {
        return Err(FieldError::new(format!("{field}.resources.cpu_millis"), "must be above 0"));
    }
    if t.resources.memory_mib == 0 {
        return Err(FieldError::new(format!("{field}.resources.memory_mib"), "must be above 0"));
    }
    t.validate().map_err(|e| spec_error(field, &e))
}

/// A task spec to the wire.
pub fn task_spec_pb(t: &TaskSpec) -> pb::TaskSpec {
    pb::TaskSpec {
        command: t.command.clone(),
        args: t.args.clone(),
        env: t.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        image: t.image.clone().unwrap_or_default(),
        resources: Some(resources_pb(&t.resources)),
        ports: t.ports.clone(),
        constraints: t.constraints.iter().map(constraint_pb).collect(),
        preferences: t.preferences.iter().map(preference_pb).collect(),
        labels: t.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        health_check: t.health_check.as_ref().map(health_check_pb),
        restart_policy: Some(pb::RestartPolicy {
            on_failure: t.restart_policy.on_failure,
            on_success: t.restart_policy.on_success,
            max_restarts: t.restart_policy.max_restarts,
            backoff_secs: t.restart_policy.backoff_secs,
        }),
        volume: t.volume.as_ref().map(|v| pb::Volume { name: v.name.clone(), size_mib: v.size_mib }),
        kill_grace_period_secs: t.kill_grace_period_secs,
        stop_signal: t.stop_signal.clone(),
        secrets: t
            .secrets
            .iter()
            .map(|r| pb::SecretRef {
                name: r.name.clone(),
                env: r.env.clone().unwrap_or_default(),
                file: r.file.clone().unwrap_or_default(),
            })
            .collect(),
        gpu_models: t.gpu_models.clone(),
    }
}

/// A task goal's API name (`RUN`, `KILL`, …).
pub fn task_goal_str(g: TaskGoal) -> &'static str {
    match g {
        TaskGoal::Run => "RUN",
        TaskGoal::Succeed => "SUCCEED",
        TaskGoal::Kill => "KILL",
        TaskGoal::Delete => "DELETE",
    }
}

/// A task runtime to the wire.
pub fn task_pb(job_id: &str, instance: u32, rt: &TaskRuntime) -> pb::Task {
    let waiting =
        matches!(rt.state, TaskState::Initialized | TaskState::Pending | TaskState::Ready | TaskState::Placing);
    pb::Task {
        job_id: job_id.to_string(),
        instance,
        state: task_state_pb(rt.state) as i32,
        goal: task_goal_str(rt.goal).to_string(),
        run: rt.run,
        run_id: TaskId { job_id: job_id.to_string(), instance }.run_id(rt.run),
        config_version: rt.config_version,
        host: rt.host.clone().unwrap_or_default(),
        ports: rt.ports.iter().map(|(k, v)| (k.clone(), u32::from(*v))).collect(),
        // Health is a running task's: a run that ended (KILLED, FAILED, …)
        // or has not started keeps its last check in the runtime, which
        // must not read as `healthy: true` (issue 43).
        healthy: if matches!(rt.state, TaskState::Running | TaskState::Killing | TaskState::Preempting) {
            rt.healthy
        } else {
            None
        },
        reason: rt.reason.clone(),
        message: rt.message.clone(),
        failure_count: rt.failure_count,
        started_at_ms: rt.started_at_ms.unwrap_or(0),
        completed_at_ms: rt.completed_at_ms.unwrap_or(0),
        pending_reason: if waiting {
            if rt.message.is_empty() { rt.reason.clone() } else { rt.message.clone() }
        } else {
            String::new()
        },
        // The API fills it in, with the text (it needs the managers' state).
        pending_kind: String::new(),
        gpu: gpu_grant_pb(&rt.gpu),
        // The API fills them in from the host's device list.
        gpu_device_indices: Vec::new(),
        // The API fills these in from the host manager (what the run holds
        // on its host, what its agent measured).
        reserved: None,
        usage: None,
    }
}

/// A task event to the wire.
pub fn task_event_pb(e: &TaskEvent) -> pb::TaskEvent {
    pb::TaskEvent {
        run: e.run,
        from: e.from.map(|s| task_state_pb(s) as i32).unwrap_or(0),
        to: task_state_pb(e.to) as i32,
        at_ms: e.at_ms,
        host: e.host.clone().unwrap_or_default(),
        reason: e.reason.clone(),
        message: e.message.clone(),
    }
}
