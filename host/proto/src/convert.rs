//! Wire ⇄ domain model: the one place where the protocols' values become the
//! model's and back. The public API (`paceline.v1`) and the internal
//! protocols share `paceline.v1`'s `Resources`, `Constraint` and
//! `Preference`, so each of those is converted here and nowhere else.
//!
//! Reading a wire message checks what the wire cannot express (an enum left
//! unspecified, a oneof left empty) and names the field by its full path
//! (`spec.default_task.constraints[2]`); the model's own `validate` then
//! checks ranges and sizes. Writing is total.

use std::collections::BTreeMap;

use crate::v1 as pb;
use paceline_model::gpu::{GpuDevice, GpuGrant, GpuSlot};
use paceline_model::job::{JobConfig, JobKind, JobRuntime, JobState, Sla, Update, UpdateSpec, UpdateState};
use paceline_model::resources::GPU_MILLI;
use paceline_model::task::{
    HealthCheck, HttpProbe, RestartPolicy, SpecError, TaskEvent, TaskGoal, TaskId, TaskRuntime, TaskSpec, TaskState,
    TcpProbe, VolumeSpec,
};
use paceline_model::task_secret::SecretRef;
use paceline_model::{Constraint, Preference, Resources};

/// A wire value that cannot become a model value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    /// Full path of the field, such as `spec.default_task.constraints[0]`.
    pub field: String,
    /// Why.
    pub reason: String,
}

impl FieldError {
    /// A field and why its value is refused.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> FieldError {
        FieldError { field: field.into(), reason: reason.into() }
    }
}

impl From<FieldError> for tonic::Status {
    fn from(e: FieldError) -> tonic::Status {
        tonic::Status::invalid_argument(e.to_string())
    }
}

/// Resources from the wire: `gpu_milli` when set, else whole `gpus`.
pub fn resources(r: Option<&pb::Resources>) -> Resources {
    r.map(|r| Resources {
        cpu_millis: r.cpu_millis,
        memory_mib: r.memory_mib,
        disk_mib: r.disk_mib,
        gpu_milli: if r.gpu_milli > 0 { r.gpu_milli } else { r.gpus.saturating_mul(GPU_MILLI) },
        ports: r.ports,
    })
    .unwrap_or_default()
}

/// A GPU grant from the wire.
pub fn gpu_grant(g: Option<&pb::GpuGrant>) -> GpuGrant {
    g.map(|g| GpuGrant { devices: g.devices.clone(), milli_each: g.milli_each }).unwrap_or_default()
}

/// A GPU grant to the wire (`None` when empty).
pub fn gpu_grant_pb(g: &GpuGrant) -> Option<pb::GpuGrant> {
    (!g.is_empty()).then(|| pb::GpuGrant { devices: g.devices.clone(), milli_each: g.milli_each })
}

/// A GPU device from the wire.
pub fn gpu_device(d: &pb::GpuDevice) -> GpuDevice {
    GpuDevice { index: d.index, model: d.model.clone() }
}

/// A GPU device to the wire.
pub fn gpu_device_pb(d: &GpuDevice) -> pb::GpuDevice {
    pb::GpuDevice { index: d.index, model: d.model.clone() }
}

/// A device with its use, to the wire.
pub fn gpu_slot_pb(s: &GpuSlot) -> pb::GpuSlot {
    pb::GpuSlot { device: Some(gpu_device_pb(&s.device)), used_milli: s.used_milli }
}

/// A device with its use, from the wire.
pub fn gpu_slot(s: &pb::GpuSlot) -> GpuSlot {
    GpuSlot { device: s.device.as_ref().map(gpu_device).unwrap_or_default(), used_milli: s.used_milli }
}

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

/// Resources to the wire: both GPU spellings (whole devices rounded down).
pub fn resources_pb(r: &Resources) -> pb::Resources {
    pb::Resources {
        cpu_millis: r.cpu_millis,
        memory_mib: r.memory_mib,
        disk_mib: r.disk_mib,
        gpus: r.whole_gpus(),
        ports: r.ports,
        gpu_milli: r.gpu_milli,
    }
}

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

/// A hard constraint from the wire.
pub fn constraint(field: &str, c: &pb::Constraint) -> Result<Constraint, FieldError> {
    use pb::constraint::Kind;
    let kv = |kv: &pb::constraint::KeyValue| (kv.key.clone(), kv.value.clone());
    Ok(match c.kind.as_ref().ok_or_else(|| FieldError::new(field, "no constraint kind is set"))? {
        Kind::AttributeEquals(x) => {
            let (key, value) = kv(x);
            Constraint::AttributeEquals { key, value }
        }
        Kind::AttributeNotEquals(x) => {
            let (key, value) = kv(x);
            Constraint::AttributeNotEquals { key, value }
        }
        Kind::AttributeIn(x) => Constraint::AttributeIn { key: x.key.clone(), values: x.values.clone() },
        Kind::AttributeExists(key) => Constraint::AttributeExists { key: key.clone() },
        Kind::WithTaskLabel(x) => {
            let (key, value) = kv(x);
            Constraint::WithTaskLabel { key, value }
        }
        Kind::WithoutTaskLabel(x) => {
            let (key, value) = kv(x);
            Constraint::WithoutTaskLabel { key, value }
        }
        Kind::MaxPerHost(max) => Constraint::MaxPerHost { max: *max },
        Kind::SpreadOver(key) => Constraint::SpreadOver { key: key.clone() },
    })
}

/// A hard constraint to the wire.
pub fn constraint_pb(c: &Constraint) -> pb::Constraint {
    use pb::constraint::{KeyValue, KeyValues, Kind};
    let kv = |key: &String, value: &String| KeyValue { key: key.clone(), value: value.clone() };
    let kind = match c {
        Constraint::AttributeEquals { key, value } => Kind::AttributeEquals(kv(key, value)),
        Constraint::AttributeNotEquals { key, value } => Kind::AttributeNotEquals(kv(key, value)),
        Constraint::AttributeIn { key, values } => {
            Kind::AttributeIn(KeyValues { key: key.clone(), values: values.clone() })
        }
        Constraint::AttributeExists { key } => Kind::AttributeExists(key.clone()),
        Constraint::WithTaskLabel { key, value } => Kind::WithTaskLabel(kv(key, value)),
        Constraint::WithoutTaskLabel { key, value } => Kind::WithoutTaskLabel(kv(key, value)),
        Constraint::MaxPerHost { max } => Kind::MaxPerHost(*max),
        Constraint::SpreadOver { key } => Kind::SpreadOver(key.clone()),
    };
    pb::Constraint { kind: Some(kind) }
}

/// A soft constraint from the wire.
pub fn preference(p: &pb::Preference) -> Preference {
    Preference { key: p.key.clone(), value: p.value.clone(), weight: p.weight }
}

/// A soft constraint to the wire.
pub fn preference_pb(p: &Preference) -> pb::Preference {
    pb::Preference { key: p.key.clone(), value: p.value.clone(), weight: p.weight }
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
fn spec_error(prefix: &str, e: &SpecError) -> FieldError {
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
fn check_task(field: &str, t: &TaskSpec) -> Result<(), FieldError> {
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

/// A host as placement sees it, from the placement protocol.
pub fn host_view(h: &crate::placement::v2::HostView) -> paceline_model::view::HostView {
    paceline_model::view::HostView {
        name: h.name.clone(),
        total: resources(h.total.as_ref()),
        allocated: resources(h.allocated.as_ref()),
        attributes: h.attributes.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        task_labels: h.task_labels.iter().cloned().collect(),
        job_counts: h.job_counts.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        gpus: h.gpus.iter().map(gpu_slot).collect(),
    }
}

/// A host as placement sees it, to the placement protocol.
pub fn host_view_pb(h: &paceline_model::view::HostView) -> crate::placement::v2::HostView {
    crate::placement::v2::HostView {
        name: h.name.clone(),
        total: Some(resources_pb(&h.total)),
        allocated: Some(resources_pb(&h.allocated)),
        attributes: h.attributes.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        task_labels: h.task_labels.iter().cloned().collect(),
        job_counts: h.job_counts.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        gpus: h.gpus.iter().map(gpu_slot_pb).collect(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JobConfig {
        JobConfig {
            name: "web".into(),
            owner: "team".into(),
            pool: "/team/web".into(),
            kind: JobKind::Stateless,
            instance_count: 3,
            sla: Sla { priority: 5, max_unavailable_instances: Some(1), ..Sla::default() },
            default_task: TaskSpec {
                command: "python3".into(),
                args: vec!["-m".into(), "http.server".into()],
                resources: Resources { cpu_millis: 500, memory_mib: 128, disk_mib: 10, gpu_milli: 0, ports: 1 },
                ports: vec!["http".into()],
                constraints: vec![
                    Constraint::AttributeIn { key: "zone".into(), values: vec!["a".into(), "b".into()] },
                    Constraint::MaxPerHost { max: 1 },
                ],
                health_check: Some(HealthCheck {
                    command: String::new(),
                    args: vec![],
                    http: Some(HttpProbe { port: "http".into(), path: "/".into() }),
                    tcp: None,
                    initial_delay_secs: 1,
                    interval_secs: 2,
                    timeout_secs: 1,
                    max_consecutive_failures: 3,
                }),
                ..TaskSpec::default()
            },
            ..JobConfig::default()
        }
    }

    /// Issue 43: a KILLED task read `healthy: true`, its last check before
    /// the kill. Only a running task is healthy or not.
    #[test]
    fn only_a_running_task_carries_its_health() {
        let mut rt = TaskRuntime::initial(1, 0);
        rt.healthy = Some(true);
        for state in TaskState::ALL {
            rt.state = state;
            let wire = task_pb("web", 0, &rt).healthy;
            let running = matches!(state, TaskState::Running | TaskState::Killing | TaskState::Preempting);
            assert_eq!(wire, if running { Some(true) } else { None }, "{state:?}");
        }
        rt.state = TaskState::Running;
        rt.healthy = Some(false);
        assert_eq!(task_pb("web", 0, &rt).healthy, Some(false));
    }

    #[test]
    fn a_job_spec_survives_the_round_trip() {
        let model = spec();
        let wire = job_spec_pb(&model);
        assert_eq!(job_config("spec", &wire), Ok(model));
        let controller = JobConfig { controller: true, ..spec() };
        let wire = job_spec_pb(&controller);
        assert!(wire.controller);
        assert_eq!(job_config("spec", &wire), Ok(controller));
        let leased = JobConfig { owner_lease_secs: Some(30), ..spec() };
        let wire = job_spec_pb(&leased);
        assert_eq!(wire.owner_lease_secs, Some(30));
        assert_eq!(job_config("spec", &wire), Ok(leased));
    }

    #[test]
    fn a_stop_signal_travels_and_one_outside_the_list_is_refused_by_name() {
        let mut model = spec();
        model.default_task.stop_signal = "SIGPWR".into();
        let wire = job_spec_pb(&model);
        assert_eq!(wire.default_task.as_ref().map(|t| t.stop_signal.as_str()), Some("SIGPWR"));
        assert_eq!(job_config("spec", &wire), Ok(model));
        for bad in ["SIGKILL", "PWR", "sigterm"] {
            let mut wire = job_spec_pb(&spec());
            if let Some(t) = wire.default_task.as_mut() {
                t.stop_signal = bad.into();
            }
            let err = job_config("spec", &wire).expect_err(bad).to_string();
            assert!(err.contains("spec.default_task.stop_signal"), "{bad}: {err}");
        }
    }

    #[test]
    fn an_owner_lease_of_zero_or_past_a_day_is_refused_by_name() {
        for secs in [0, 86_401] {
            let mut wire = job_spec_pb(&spec());
            wire.owner_lease_secs = Some(secs);
            let err = job_config("spec", &wire).expect_err("refused").to_string();
            assert!(err.contains("spec.owner_lease_secs"), "{err}");
        }
    }

    #[test]
    fn errors_name_the_field_path() {
        let mut wire = job_spec_pb(&spec());
        wire.kind = pb::JobKind::Unspecified as i32;
        let e = job_config("spec", &wire).expect_err("kind unset");
        assert_eq!(e.field, "spec.kind");

        let mut wire = job_spec_pb(&spec());
        if let Some(t) = wire.default_task.as_mut() {
            t.constraints[1] = pb::Constraint { kind: None };
        }
        let e = job_config("spec", &wire).expect_err("empty constraint");
        assert_eq!(e.field, "spec.default_task.constraints[1]");

        let mut wire = job_spec_pb(&spec());
        wire.default_task = None;
        assert_eq!(job_config("spec", &wire).expect_err("no task").field, "spec.default_task");

        let mut wire = job_spec_pb(&spec());
        if let Some(t) = wire.default_task.as_mut() {
            t.ports.clear();
        }
        let e = job_config("spec", &wire).expect_err("health port not in ports");
        assert!(e.reason.contains("resources.ports") || e.reason.contains("health_check"), "{e}");
        let status: tonic::Status = e.into();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn states_map_both_ways() {
        for s in TaskState::ALL {
            assert_eq!(task_state("s", task_state_pb(s) as i32), Ok(s));
        }
        for s in JobState::ALL {
            assert_eq!(job_state("s", job_state_pb(s) as i32), Ok(s));
        }
        assert!(task_state("s", 0).is_err());
        assert!(job_state("s", 99).is_err());
    }

    #[test]
    fn a_host_view_survives_the_placement_protocol() {
        let mut h = paceline_model::view::HostView::new("h1", Resources::new(4000, 8192, 10, 1_000));
        h.allocated = Resources { cpu_millis: 500, ports: 2, ..Resources::ZERO };
        h.attributes.insert("zone".into(), "a".into());
        h.task_labels.insert("app=web".into());
        h.job_counts.insert("web-1".into(), 3);
        assert_eq!(host_view(&host_view_pb(&h)), h);
    }
}
