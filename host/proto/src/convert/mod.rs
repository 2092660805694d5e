//! Wire ⇄ domain model: the one place where the protocols' values become the
//! model's and back. The public API (`paceline.v1`) and the internal
//! protocols share `paceline.v1`'s `Resources`, `Constraint` and
//! `Preference`, so each of those is converted here and nowhere else.
//!
//! Reading a wire message checks what the wire cannot express (an enum left
//! unspecified, a oneof left empty) and names the field by its full path
//! (`spec.default_task.constraints[2]`); the model's own `validate` then
//! checks ranges and sizes. Writing is total.
//!
//! The parts: `resource` (resources, GPUs, constraints), `task` (task
//! specs, states, runtimes) and `job` (job specs, states, updates, events).
//! This file holds the error type and the placement protocol's host view.

mod job;
mod resource;
mod task;

pub use job::*;
pub use resource::*;
pub use task::*;

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

#[cfg(test)]
mod tests {
    use paceline_model::job::{JobConfig, JobKind, JobState, Sla};
    use paceline_model::task::{HealthCheck, HttpProbe, TaskRuntime, TaskSpec, TaskState};
    use paceline_model::{Constraint, Resources};

    use super::*;
    use crate::v1 as pb;

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
