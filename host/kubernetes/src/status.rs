//! A pod's phase and its container's state as a run state: [`observe`].
//!
//! | pod | run |
//! |---|---|
//! | Pending (bound, containers being created) | STARTING |
//! | Pending, image cannot be pulled (`ErrImagePull`, `ImagePullBackOff`, `InvalidImageName`) | FAILED `IMAGE_PULL_FAILED` |
//! | Pending, container cannot be created (`CreateContainerConfigError`, …) | FAILED `CONTAINER_ERROR` |
//! | Running | RUNNING (healthy = the container is ready, when it has a readiness probe) |
//! | Succeeded | SUCCEEDED, exit code 0 |
//! | Failed, container terminated `OOMKilled` | FAILED `MEMORY_LIMIT`, its exit code |
//! | Failed, container terminated otherwise | FAILED `EXITED`, its exit code and signal |
//! | Failed, `status.reason` `Evicted` | FAILED `EVICTED` |
//! | Failed, rejected by the kubelet (`OutOfcpu`, …) | FAILED `POD_REJECTED` |
//! | Unknown | no change (the node's state decides) |
//!
//! Deletions are the provider's: KILLED when Paceline asked, LOST
//! (`POD_DELETED`) when someone else deleted the pod.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use paceline_model::run::RunState;

use crate::pods::CONTAINER;

/// What a pod says about its run now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The run's state.
    pub state: RunState,
    /// Readiness, when the container has a readiness probe (the task's health check).
    pub healthy: Option<bool>,
    /// The container's exit code, once it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when the runtime says.
    pub signal: Option<i32>,
    /// Machine-readable reason.
    pub reason: String,
    /// What Kubernetes said.
    pub message: String,
    /// The pod will not end by itself (an image that cannot be pulled): delete it.
    pub stuck: bool,
}

impl Observed {
    fn new(state: RunState, reason: &str, message: String) -> Self {
        Observed { state, healthy: None, exit_code: None, signal: None, reason: reason.into(), message, stuck: false }
    }
}

const IMAGE_PULL: &[&str] = &["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"];
const CONTAINER_ERRORS: &[&str] = &["CreateContainerConfigError", "CreateContainerError", "RunContainerError"];

/// The run state a pod shows; `None` when it says nothing (phase Unknown).
pub fn observe(pod: &Pod) -> Option<Observed> {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let container = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == CONTAINER).or_else(|| cs.first()));
    let probed = pod.spec.as_ref().and_then(|s| s.containers.first()).is_some_and(|c| c.readiness_probe.is_some());
    let pod_reason = status.and_then(|s| s.reason.clone()).unwrap_or_default();
    let pod_message = status.and_then(|s| s.message.clone()).unwrap_or_default();
    Some(match phase {
        "Pending" => {
            let waiting = container.and_then(|c| c.state.as_ref()).and_then(|s| s.waiting.as_ref());
            let reason = waiting.and_then(|w| w.reason.as_deref()).unwrap_or("");
            let message = waiting.and_then(|w| w.message.clone()).unwrap_or_default();
            if IMAGE_PULL.contains(&reason) {
                let image = container.map(|c| c.image.as_str()).unwrap_or("");
                let mut o = Observed::new(
                    RunState::Failed,
                    "IMAGE_PULL_FAILED",
                    format!("image {image}: {reason}{}{message}", if message.is_empty() { "" } else { ": " }),
                );
                o.stuck = true;
                o
            } else if CONTAINER_ERRORS.contains(&reason) {
                let mut o = Observed::new(RunState::Failed, "CONTAINER_ERROR", format!("{reason}: {message}"));
                o.stuck = true;
                o
            } else {
                Observed::new(RunState::Starting, "", String::new())
            }
        }
        "Running" => {
            let mut o = Observed::new(RunState::Running, "", String::new());
            if probed {
                o.healthy = Some(container.is_some_and(|c| c.ready));
            }
            o
        }
        "Succeeded" => {
            let mut o = Observed::new(RunState::Succeeded, "EXITED", String::new());
            o.exit_code = Some(terminated(container).map_or(0, |t| t.0));
            o
        }
        "Failed" => {
            if pod_reason == "Evicted" {
                let mut o = Observed::new(RunState::Failed, "EVICTED", pod_message);
                if let Some((code, signal, _, _)) = terminated(container) {
                    o.exit_code = Some(code);
                    o.signal = signal;
                }
                return Some(o);
            }
            match terminated(container) {
                Some((code, signal, reason, message)) => {
                    let (why, message) = if reason == "OOMKilled" {
                        ("MEMORY_LIMIT", format!("OOMKilled: the container went over its memory limit{message}"))
                    } else {
                        ("EXITED", format!("{reason}{message}"))
                    };
                    let mut o = Observed::new(RunState::Failed, why, message);
                    o.exit_code = Some(code);
                    o.signal = signal;
                    o
                }
                None => Observed::new(
                    RunState::Failed,
                    "POD_REJECTED",
                    format!("{pod_reason}{}{pod_message}", if pod_message.is_empty() { "" } else { ": " }),
                ),
            }
        }
        _ => return None,
    })
}

/// Exit code, signal, reason and `: message` of the container's termination.
fn terminated(c: Option<&ContainerStatus>) -> Option<(i32, Option<i32>, String, String)> {
    let t = c.and_then(|c| c.state.as_ref()).and_then(|s| s.terminated.as_ref())?;
    let message = t.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
    Some((t.exit_code, t.signal.filter(|&s| s != 0), t.reason.clone().unwrap_or_default(), message))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateTerminated, ContainerStateWaiting, PodSpec, PodStatus, Probe,
    };

    use super::*;

    fn pod(phase: &str, state: Option<ContainerState>, ready: bool) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container { name: CONTAINER.into(), ..Container::default() }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: state.map(|s| {
                    vec![ContainerStatus {
                        name: CONTAINER.into(),
                        image: "busybox".into(),
                        ready,
                        state: Some(s),
                        ..ContainerStatus::default()
                    }]
                }),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn term(code: i32, reason: &str) -> Option<ContainerState> {
        Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                reason: Some(reason.into()),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        })
    }

    fn waiting(reason: &str) -> Option<ContainerState> {
        Some(ContainerState {
            waiting: Some(ContainerStateWaiting { reason: Some(reason.into()), message: Some("nope".into()) }),
            ..ContainerState::default()
        })
    }

    fn state(p: &Pod) -> (RunState, String, Option<i32>) {
        let o = observe(p).expect("observed");
        (o.state, o.reason, o.exit_code)
    }

    #[test]
    fn phases_become_run_states() {
        assert_eq!(state(&pod("Pending", None, false)).0, RunState::Starting);
        assert_eq!(state(&pod("Pending", waiting("ContainerCreating"), false)).0, RunState::Starting);
        assert_eq!(state(&pod("Running", None, true)), (RunState::Running, String::new(), None));
        assert_eq!(
            state(&pod("Succeeded", term(0, "Completed"), false)),
            (RunState::Succeeded, "EXITED".into(), Some(0))
        );
        assert_eq!(state(&pod("Failed", term(3, "Error"), false)), (RunState::Failed, "EXITED".into(), Some(3)));
        assert_eq!(
            state(&pod("Failed", term(137, "OOMKilled"), false)),
            (RunState::Failed, "MEMORY_LIMIT".into(), Some(137))
        );
        assert!(observe(&pod("Unknown", None, false)).is_none());
    }

    #[test]
    fn image_pull_errors_fail_the_run_and_ask_for_the_pod_to_go() {
        for reason in ["ErrImagePull", "ImagePullBackOff"] {
            let o = observe(&pod("Pending", waiting(reason), false)).expect("observed");
            assert_eq!((o.state, o.reason.as_str(), o.stuck), (RunState::Failed, "IMAGE_PULL_FAILED", true));
            assert!(o.message.contains(reason) && o.message.contains("busybox"), "{}", o.message);
        }
    }

    #[test]
    fn evictions_and_kubelet_rejections_say_so() {
        let mut p = pod("Failed", None, false);
        if let Some(s) = p.status.as_mut() {
            s.reason = Some("Evicted".into());
            s.message = Some("The node was low on resource: memory.".into());
        }
        let o = observe(&p).expect("observed");
        assert_eq!((o.state, o.reason.as_str()), (RunState::Failed, "EVICTED"));
        assert!(o.message.contains("low on resource"));
        if let Some(s) = p.status.as_mut() {
            s.reason = Some("OutOfcpu".into());
        }
        assert_eq!(observe(&p).expect("observed").reason, "POD_REJECTED");
    }

    #[test]
    fn readiness_is_health_only_with_a_probe() {
        let mut p = pod("Running", None, false);
        assert_eq!(observe(&p).expect("o").healthy, None);
        if let Some(s) = p.spec.as_mut() {
            s.containers[0].readiness_probe = Some(Probe::default());
        }
        let p = Pod { status: pod("Running", waiting("x"), true).status, ..p };
        assert_eq!(observe(&p).expect("o").healthy, Some(true));
    }
}
