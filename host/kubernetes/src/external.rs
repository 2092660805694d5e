//! Runs that bind a pod Paceline did not create (the pod scheduler,
//! decision 0055): the launch is a Binding of the existing pod to the node
//! placement chose, the run follows the pod through the watch of other
//! pods, and nothing here ever deletes or recreates the pod (its owner is
//! in charge of it).

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use paceline_hostmgr::provider::ProviderEvent;
use paceline_model::run::{LaunchRequest, RunState};
use tracing::{debug, warn};

use crate::nodes;
use crate::pods::{self, RUN_ID, TASK_ID};
use crate::podsched::PodRef;
use crate::state::{Inner, Run, St, api_message, is_status, unix_ms};
use crate::status;

/// Annotation (set through the Binding) naming the Paceline cluster that
/// bound the pod; with [`RUN_ID`] and [`TASK_ID`] it is what a restarted
/// provider adopts the pod's run by.
pub const BOUND_BY: &str = "paceline.io/bound-by";

/// What a binding came to.
enum Bound {
    Yes,
    /// The pod is gone: its owner deleted it before it could be bound.
    Gone,
    /// Bound already, to another node or by another run (or its uid changed).
    Elsewhere(String),
    /// Not bound; may be tried again (API error, no answer).
    Failed(String),
}

/// A run taken on to bind a pod: its run id, task id and pod.
pub(crate) type ToBind = (String, String, PodRef);

impl Inner {
    /// The pod a run of the pod scheduler binds: `Some(Ok)` for one of its
    /// jobs, `Some(Err)` for a job id of its form it does not know (yet:
    /// after a restart, until it has listed the pending pods), `None` for
    /// a run of an ordinary job.
    pub(crate) fn pod_of(&self, task_id: &str) -> Option<Result<PodRef, String>> {
        let (job, instance) = task_id.rsplit_once('-')?;
        let map = crate::state::lock(&self.pod_jobs);
        match map.get(job) {
            Some(pods) => Some(
                instance
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| pods.get(i).cloned())
                    .ok_or_else(|| format!("job {job} has no pod for instance {instance}")),
            ),
            None if crate::podsched::is_pod_job(job) => {
                Some(Err(format!("job {job}: its pod is not known (yet) to the pod scheduler")))
            }
            None => None,
        }
    }

    /// Takes on each run that binds a pod to `host`: from here on the run is
    /// this provider's (counted on its node, killed by eviction), before its
    /// Binding is sent by [`Inner::bind_runs`]. Runs already known are left
    /// out (idempotent by run id). Returns what is to bind.
    pub(crate) fn take_binds(&self, host: &str, runs: Vec<(LaunchRequest, PodRef)>) -> Vec<ToBind> {
        let mut work = Vec::new();
        let mut st = self.st();
        for (req, pod) in runs {
            if st.runs.contains_key(&req.run_id) {
                continue; // idempotent by run id
            }
            let run = Run::new(
                pod.name.clone(),
                Some(pod.namespace.clone()),
                host.to_string(),
                req.task_id.clone(),
                req.spec.resources,
            );
            st.add_run(req.run_id.clone(), run);
            work.push((req.run_id, req.task_id, pod));
        }
        work
    }

    /// Binds each taken run's pod to `host` (at most `max_concurrent_calls`
    /// API writes at once, all calls of the provider together), and says
    /// how each went as the run's updates: a pod bound by an earlier try of
    /// the same run counts as bound; a pod bound elsewhere, or gone, ends
    /// its run (LOST: it is its owner's, never created again); an API error
    /// gives the launch back (`LaunchRejected`).
    pub(crate) async fn bind_runs(&self, host: &str, work: Vec<ToBind>) {
        let results: Vec<(String, PodRef, Bound)> = futures::stream::iter(work)
            .map(|(run_id, task_id, pod)| async move {
                let b = self.bind(host, &run_id, &task_id, &pod).await;
                (run_id, pod, b)
            })
            .buffer_unordered(self.config.max_concurrent_calls.max(1))
            .collect()
            .await;
        let mut st = self.st();
        for (run_id, pod, bound) in results {
            let key = format!("{}/{}", pod.namespace, pod.name);
            match bound {
                Bound::Yes => {
                    if let Some(run) = st.runs.get_mut(&run_id)
                        && run.last.is_none()
                    {
                        self.update(&run_id, run, RunState::Starting, None, None, None, "", String::new());
                    }
                }
                Bound::Gone | Bound::Elsewhere(_) => {
                    let (reason, message) = match bound {
                        Bound::Gone => {
                            ("POD_DELETED", format!("pod {key} was deleted by its owner before it was bound"))
                        }
                        Bound::Elsewhere(m) => ("POD_BOUND_ELSEWHERE", m),
                        _ => unreachable!(),
                    };
                    st.external.remove(&key);
                    if let Some(run) = st.runs.get_mut(&run_id)
                        && !run.terminal
                    {
                        run.pod_gone = true;
                        self.update(&run_id, run, RunState::Lost, None, None, None, reason, message);
                    }
                }
                Bound::Failed(message) => {
                    st.external.remove(&key);
                    if st.runs.get(&run_id).is_some_and(|r| r.last.is_none()) {
                        st.forget_run(&run_id);
                        self.send(ProviderEvent::LaunchRejected {
                            host: host.to_string(),
                            run_id,
                            error: format!("binding pod {key}: {message}"),
                        });
                    }
                }
            }
        }
    }

    /// POSTs `pods/<name>/binding`: the pod's uid as a precondition (a pod
    /// recreated under the same name is another pod), and the annotations a
    /// restarted provider adopts the run by (the API server copies a
    /// Binding's annotations onto the pod, in the same write).
    async fn bind(&self, host: &str, run_id: &str, task_id: &str, pod: &PodRef) -> Bound {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let binding = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": pod.name,
                "uid": pod.uid,
                "annotations": {
                    BOUND_BY: self.config.cluster_id,
                    RUN_ID: run_id,
                    TASK_ID: task_id,
                },
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": host},
        });
        let pp = PostParams::default();
        let bind = || api.create_subresource::<_, serde_json::Value>("binding", &pod.name, &pp, &binding);
        let err = match self.call("bind pod", bind).await {
            Ok(_) => return Bound::Yes,
            Err(e) => e,
        };
        if is_status(&err, kube::core::Status::is_not_found) {
            return Bound::Gone;
        }
        if !is_status(&err, |s| s.code == 409) {
            return Bound::Failed(api_message(&err));
        }
        // Conflict: bound already (by this run, before a restart or a lost
        // answer, or by someone else), or a new pod of the same name.
        match tokio::time::timeout(self.config.call_timeout, api.get_opt(&pod.name)).await {
            Ok(Ok(None)) => Bound::Gone,
            Ok(Ok(Some(p))) => {
                let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
                let ann = p.metadata.annotations.as_ref();
                let ours = ann.and_then(|a| a.get(RUN_ID)).is_some_and(|r| r == run_id);
                if p.metadata.uid.as_deref() != Some(pod.uid.as_str()) {
                    Bound::Gone
                } else if node == host && ours {
                    Bound::Yes
                } else if node.is_empty() {
                    Bound::Failed(api_message(&err))
                } else {
                    Bound::Elsewhere(format!(
                        "pod {}/{} is bound to node {node} already ({})",
                        pod.namespace,
                        pod.name,
                        if ours { "by this run" } else { "not by this run" }
                    ))
                }
            }
            Ok(Err(e)) => Bound::Failed(api_message(&e)),
            Err(_) => Bound::Failed(api_message(&err)),
        }
    }

    /// A bound pod seen by the watch of other pods that is one of the pod
    /// scheduler's: its run moves with it (or, before the first list is
    /// over, a run bound by an earlier process is adopted). `false`: count
    /// it as any other scheduler's pod (its run ended, or it is not ours).
    pub(crate) fn external_apply(&self, st: &mut St, pod: &Pod, key: &str) -> bool {
        if let Some(run_id) = st.external.get(key).cloned() {
            let started = st.started;
            let Some(run) = st.runs.get_mut(&run_id) else {
                st.external.remove(key);
                return false;
            };
            if run.terminal {
                return false;
            }
            if let Some(o) = status::observe(pod) {
                self.observed(started, &run_id, run, o);
            }
            return true;
        }
        let ann = pod.metadata.annotations.as_ref();
        let ours = ann.and_then(|a| a.get(BOUND_BY)).is_some_and(|c| *c == self.config.cluster_id);
        let (Some(run_id), true, false) = (ann.and_then(|a| a.get(RUN_ID)).cloned(), ours, st.started) else {
            return false;
        };
        // Bound by an earlier process of this cluster: adopted, reported on
        // its node's registration, so that the job manager finds its run.
        let host = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        let task_id = ann.and_then(|a| a.get(TASK_ID)).cloned().unwrap_or_else(|| pods::task_of(&run_id).to_string());
        let resources = nodes::pod_usage(pod, self.config.port_range).unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let mut run = Run::new(name, Some(namespace), host, task_id, resources);
        run.seq = unix_ms();
        run.adopted = true;
        // Nothing reported yet by this process (`last` stays empty): what
        // the pod shows is sent once the manager knows the node (a run
        // whose RUNNING the last process never got to send must not stay
        // STARTING).
        run.latest = status::observe(pod);
        debug!(pod = key, run_id, "adopted a pod this cluster bound before");
        st.add_run(run_id, run);
        true
    }

    /// One of the pod scheduler's bound pods left the watch: it finished or
    /// was deleted. Which one is read from the API (the watch's last object
    /// is the pod before it changed); a pod gone is its owner's doing, and
    /// the run ends SUCCEEDED with reason `POD_DELETED` (the owner ended it;
    /// Paceline does not restart what it does not own).
    pub(crate) fn external_gone(&self, st: &mut St, key: &str) {
        let Some(run_id) = st.external.get(key).cloned() else { return };
        let Some(run) = st.runs.get(&run_id) else {
            st.external.remove(key);
            return;
        };
        if run.terminal {
            return;
        }
        if !st.started {
            st.forget_run(&run_id);
            return;
        }
        // Read by the next tick (the watch's handler cannot spawn with the state).
        st.external_ended.push(run_id);
    }

    /// Reads how the pods of [`Inner::external_gone`] ended and ends their runs.
    pub(crate) fn read_external_ends(self: &std::sync::Arc<Self>) {
        let ended: Vec<(String, String, String)> = {
            let mut st = self.st();
            let ids = std::mem::take(&mut st.external_ended);
            ids.into_iter()
                .filter_map(|id| {
                    let r = st.runs.get(&id)?;
                    Some((id, r.namespace.clone().unwrap_or_default(), r.pod.clone()))
                })
                .collect()
        };
        for (run_id, ns, name) in ended {
            let inner = self.clone();
            tokio::spawn(async move {
                let api: Api<Pod> = Api::namespaced(inner.client.clone(), &ns);
                let read = tokio::time::timeout(inner.config.call_timeout, api.get_opt(&name)).await;
                let mut st = inner.st();
                let Some(run) = st.runs.get_mut(&run_id) else { return };
                match read {
                    Ok(Ok(Some(p))) => {
                        if let Some(o) = status::observe(&p).filter(|o| o.state.is_terminal()) {
                            inner.progress(&run_id, run, o);
                        }
                    }
                    Ok(Ok(None)) if run.kill_requested => {
                        run.pod_gone = true;
                        let message = format!("pod {ns}/{name} was evicted");
                        inner.update(&run_id, run, RunState::Killed, None, None, None, "KILLED_BY_REQUEST", message);
                    }
                    Ok(Ok(None)) => {
                        run.pod_gone = true;
                        let message = format!("pod {ns}/{name} was deleted by its owner");
                        inner.update(&run_id, run, RunState::Succeeded, None, None, None, "POD_DELETED", message);
                    }
                    Ok(Err(e)) => warn!(pod = name, error = api_message(&e), "how a bound pod ended cannot be read"),
                    Err(_) => warn!(pod = name, "how a bound pod ended cannot be read: no answer"),
                }
            });
        }
    }

    /// Evicts the pod of a run that bound one (`pods/<name>/eviction`): the
    /// API server refuses (429) while a PodDisruptionBudget allows no
    /// disruption, and the kill fails saying so (the pod stays, its run
    /// goes on); a pod already gone ends the run at once.
    pub(crate) async fn evict(
        &self,
        host: &str,
        run_id: &str,
        ns: &str,
        pod: &str,
        grace: Option<std::time::Duration>,
    ) -> Result<(), paceline_hostmgr::error::ProviderError> {
        use paceline_hostmgr::error::ProviderError;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let ep = kube::api::EvictParams {
            delete_options: Some(kube::api::DeleteParams {
                grace_period_seconds: grace.map(|g| g.as_secs().min(u64::from(u32::MAX)) as u32),
                ..kube::api::DeleteParams::default()
            }),
            ..kube::api::EvictParams::default()
        };
        let answer = tokio::time::timeout(self.config.call_timeout, api.evict(pod, &ep)).await;
        let mut st = self.st();
        match answer {
            Ok(Ok(_)) => {
                if let Some(run) = st.runs.get_mut(run_id) {
                    // Ends when the watch sees the pod go (KILLED).
                    run.kill_requested = true;
                }
                Ok(())
            }
            Ok(Err(e)) if is_status(&e, kube::core::Status::is_not_found) => {
                if let Some(run) = st.runs.get_mut(run_id)
                    && !run.terminal
                {
                    run.pod_gone = true;
                    let message = format!("pod {ns}/{pod} was already gone");
                    self.update(run_id, run, RunState::Killed, None, None, None, "KILLED_BY_REQUEST", message);
                }
                Ok(())
            }
            Ok(Err(e)) if is_status(&e, |s| s.code == 429) => Err(ProviderError::Remote {
                host: host.to_string(),
                message: format!("evicting pod {ns}/{pod}: refused by a PodDisruptionBudget ({})", api_message(&e)),
            }),
            Ok(Err(e)) => Err(ProviderError::Remote {
                host: host.to_string(),
                message: format!("evicting pod {ns}/{pod}: {}", api_message(&e)),
            }),
            Err(_) => Err(ProviderError::Timeout {
                host: host.to_string(),
                timeout_ms: self.config.call_timeout.as_millis() as u64,
            }),
        }
    }
}
