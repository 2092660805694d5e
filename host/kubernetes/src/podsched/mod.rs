//! The pod scheduler (decision 0055): pods with `spec.schedulerName:
//! paceline` that Paceline did not create are admitted through Paceline's
//! pools, gang-admitted, placed by the active placement plugin and bound
//! through the Binding API.
//!
//! Each pending pod (or each gang of pods) becomes a Paceline batch job
//! through the [`PodJobs`] port (the job manager, in `host/server`), so
//! pools, max-min fairness, gangs, the Wasm placement slot (shadow, hot
//! swap) and why-pending apply as they do to any job. The job's run binds
//! the pod instead of creating one ([`KubernetesProvider`]'s launch finds
//! the pod by the job id, in a map this module fills before it submits the
//! job); its kill never deletes the pod (its owner is in charge).
//!
//! A pod that waits gets `PodScheduled=False` with Paceline's why-pending
//! as its message, and an Event (`FailedScheduling`), at most one per pod
//! per [`PodSchedulerConfig::event_interval`]; a pod Paceline cannot honour
//! (unknown pool, malformed gang, an unsupported field) gets the same
//! condition saying why, and nothing else is affected.

mod report;
mod run;
pub mod translate;
mod units;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::Api;
use kube::runtime::watcher;
use paceline_model::job::JobConfig;
use tracing::warn;

use crate::provider::KubernetesProvider;
use crate::state::lock;
use crate::watch::WatchReader;

/// Job id prefix of a single pod's job (`k8spod-<pod uid>`).
pub const SINGLE_PREFIX: &str = "k8spod-";
/// Job id prefix of a gang's job (`k8spg-<hash of its pods' uids>`).
pub const GANG_PREFIX: &str = "k8spg-";

/// Whether `job` is a job id of the pod scheduler's form.
pub fn is_pod_job(job: &str) -> bool {
    job.starts_with(SINGLE_PREFIX) || job.starts_with(GANG_PREFIX)
}

/// A pod Paceline schedules but did not create.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid: the Binding's precondition (a pod recreated under the same
    /// name is another pod).
    pub uid: String,
}

impl PodRef {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Settings of the pod scheduler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSchedulerConfig {
    /// `spec.schedulerName` of the pods Paceline schedules.
    pub scheduler_name: String,
    /// Namespaces whose pods it schedules; empty: every namespace.
    pub namespaces: Vec<String>,
    /// The pool of pods whose namespace and own annotations name none;
    /// `None`: such a pod is refused (its condition says how to name one).
    pub default_pool: Option<String>,
    /// A pod waiting longer than this gets its condition (shorter waits,
    /// the usual case under load, cost no API call).
    pub report_after: Duration,
    /// At most one Event per pod this often (its condition follows every
    /// change of the reason).
    pub event_interval: Duration,
    /// At most this many condition patches and Events per second, all pods
    /// together, so that reporting never crowds out binding.
    pub max_reports_per_sec: usize,
    /// How often pending pods are looked at.
    pub loop_interval: Duration,
}

impl Default for PodSchedulerConfig {
    fn default() -> Self {
        PodSchedulerConfig {
            scheduler_name: "paceline".into(),
            namespaces: Vec::new(),
            default_pool: None,
            report_after: Duration::from_secs(2),
            event_interval: Duration::from_secs(60),
            max_reports_per_sec: 50,
            loop_interval: Duration::from_millis(100),
        }
    }
}

/// What [`PodJobs::submit`] came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submit {
    /// The job was created.
    Created,
    /// A job with this id exists (a restart submitting again).
    Exists,
    /// The job manager refused it (unknown pool, …): the pod's condition.
    Refused(String),
    /// It could not be created now (storage); tried again.
    Failed(String),
}

/// The job manager, as the pod scheduler uses it (implemented over
/// `paceline_jobmgr::JobManager` in `host/server`).
#[async_trait]
pub trait PodJobs: Send + Sync + 'static {
    /// Creates job `id`.
    async fn submit(&self, id: &str, config: JobConfig) -> Submit;
    /// Kills job `id` (its pods went before they were bound).
    async fn withdraw(&self, id: &str);
    /// Why the first waiting instance of job `id` waits (its kind and
    /// Paceline's sentence); `None` when none does.
    fn why_pending(&self, id: &str) -> Option<paceline_model::pending::Why>;
    /// Whether job `id` is live (`Some(true)`), ended (`Some(false)`) or unknown.
    async fn job_live(&self, id: &str) -> Option<bool>;
}

/// Where one pending pod stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not looked at yet (or changed since it was refused).
    New,
    /// Refused; the condition says why.
    Refused(String),
    /// A gang member waiting for the rest of its group.
    Grouped(String),
    /// In job `job`, the pod's `attempt`-th.
    Submitted { job: String, attempt: u32 },
}

#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) r: PodRef,
    pub(crate) pod: Pod,
    pub(crate) first_seen: Instant,
    /// Arrival order: the `Sched::arrivals` count when it was first seen
    /// (the watch's order, the API server's). Jobs are submitted in it.
    pub(crate) seen: u64,
    pub(crate) phase: Phase,
    /// The attempt of the next job for this pod (a job that ended while
    /// the pod still waits is followed by another).
    pub(crate) attempt: u32,
    /// The message of the condition last written.
    pub(crate) reported: Option<String>,
    pub(crate) last_event: Option<Instant>,
    pub(crate) gone: bool,
    /// Seen since the watch last (re)started listing.
    pub(crate) listed: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Sched {
    /// Namespace → its pool annotation.
    pub(crate) namespaces: HashMap<String, Option<String>>,
    pub(crate) ns_synced: bool,
    pub(crate) pods_synced: bool,
    /// Pending pods by uid.
    pub(crate) pods: HashMap<String, Entry>,
    pub(crate) listing: bool,
    /// Pods seen so far (the next one's `Entry::seen`).
    pub(crate) arrivals: u64,
}

/// The running pod scheduler: its watches and its loop. Stops when dropped.
#[derive(Debug)]
pub struct PodScheduler {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    state: Arc<Mutex<Sched>>,
}

impl Drop for PodScheduler {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl PodScheduler {
    /// Starts watching namespaces and pending pods with
    /// `spec.schedulerName` `config.scheduler_name`, submitting them
    /// through `jobs` and binding them through `provider`.
    pub fn start(provider: &KubernetesProvider, config: PodSchedulerConfig, jobs: Arc<dyn PodJobs>) -> PodScheduler {
        let state = Arc::new(Mutex::new(Sched::default()));
        let client = provider.client();
        let mut tasks = Vec::new();
        let st = state.clone();
        tasks.push(tokio::spawn(async move {
            WatchReader::start(Api::<Namespace>::all(client), watcher::Config::default())
                .for_each_batch(|items| {
                    let mut st = lock(&st);
                    for item in items {
                        match item {
                            Ok(ev) => on_namespace(&mut st, ev),
                            Err(e) => warn!(error = %e, "pod scheduler: namespace watch"),
                        }
                    }
                })
                .await;
        }));
        let st = state.clone();
        let client = provider.client();
        // Not `spec.nodeName=`: an exact match on the pods' indexed field
        // makes the API server size the watch's buffer for a kubelet (10
        // events), and a backlog of pending pods being bound overflows it
        // at once: the watch is closed, and the API server holds up every
        // other watcher's events while it waits on it. A pod bound shows as
        // bound here (and leaves the watch when it runs, or when it ends).
        let fields = format!("spec.schedulerName={},status.phase=Pending", config.scheduler_name);
        let namespaces = config.namespaces.clone();
        tasks.push(tokio::spawn(async move {
            WatchReader::start(Api::<Pod>::all(client), watcher::Config::default().fields(&fields))
                .for_each_batch(|items| {
                    let mut st = lock(&st);
                    for item in items {
                        match item {
                            Ok(ev) => on_pod(&mut st, &namespaces, ev),
                            Err(e) => warn!(error = %e, "pod scheduler: pod watch"),
                        }
                    }
                })
                .await;
        }));
        let runner = run::Runner::new(provider.clone(), config, jobs, state.clone());
        tasks.push(tokio::spawn(runner.run()));
        PodScheduler { tasks, state }
    }

    /// Pending pods it knows now (waiting, refused or in a job not yet bound).
    pub fn pending(&self) -> usize {
        lock(&self.state).pods.values().filter(|e| !e.gone).count()
    }
}

fn on_namespace(st: &mut Sched, ev: watcher::Event<Namespace>) {
    let pool =
        |ns: &Namespace| ns.metadata.annotations.as_ref().and_then(|a| a.get(translate::POOL_ANNOTATION)).cloned();
    match ev {
        watcher::Event::Apply(ns) | watcher::Event::InitApply(ns) => {
            let name = ns.metadata.name.clone().unwrap_or_default();
            let p = pool(&ns);
            if st.namespaces.get(&name) != Some(&p) {
                // Refused for want of a pool: looked at again.
                for e in st.pods.values_mut().filter(|e| e.r.namespace == name) {
                    if matches!(e.phase, Phase::Refused(_)) {
                        e.phase = Phase::New;
                    }
                }
            }
            st.namespaces.insert(name, p);
        }
        watcher::Event::Delete(ns) => {
            st.namespaces.remove(ns.metadata.name.as_deref().unwrap_or(""));
        }
        watcher::Event::Init => {}
        watcher::Event::InitDone => st.ns_synced = true,
    }
}

fn on_pod(st: &mut Sched, namespaces: &[String], ev: watcher::Event<Pod>) {
    match ev {
        watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
            let (Some(uid), Some(name), Some(ns)) =
                (pod.metadata.uid.clone(), pod.metadata.name.clone(), pod.metadata.namespace.clone())
            else {
                return;
            };
            if !namespaces.is_empty() && !namespaces.contains(&ns) {
                return;
            }
            if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty()) {
                // Bound (by Paceline or anyone): no longer pending. Listed
                // bound, it is not listed as pending.
                if let Some(e) = st.pods.get_mut(&uid) {
                    e.gone = true;
                }
                return;
            }
            let listing = st.listing;
            match st.pods.get_mut(&uid) {
                Some(e) => {
                    e.listed |= listing;
                    if e.pod.spec != pod.spec || e.pod.metadata.annotations != pod.metadata.annotations {
                        // Refused, or waiting for its gates: looked at again.
                        if matches!(e.phase, Phase::Refused(_)) {
                            e.phase = Phase::New;
                        }
                        e.pod = pod;
                    }
                }
                None => {
                    let r = PodRef { namespace: ns, name, uid: uid.clone() };
                    let seen = st.arrivals;
                    st.arrivals += 1;
                    st.pods.insert(
                        uid,
                        Entry {
                            r,
                            pod,
                            first_seen: Instant::now(),
                            seen,
                            phase: Phase::New,
                            attempt: 0,
                            reported: None,
                            last_event: None,
                            gone: false,
                            listed: listing,
                        },
                    );
                }
            }
        }
        watcher::Event::Delete(pod) => {
            if let Some(e) = pod.metadata.uid.as_ref().and_then(|u| st.pods.get_mut(u)) {
                e.gone = true;
            }
        }
        watcher::Event::Init => {
            st.listing = true;
            for e in st.pods.values_mut() {
                e.listed = false;
            }
        }
        watcher::Event::InitDone => {
            st.listing = false;
            for e in st.pods.values_mut() {
                if !e.listed {
                    e.gone = true;
                }
            }
            st.pods_synced = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, node: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "team", "uid": uid},
            "spec": {"schedulerName": "paceline", "nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"},
        }))
        .expect("a pod")
    }

    fn pending(st: &Sched) -> Vec<&str> {
        let mut v: Vec<&str> = st.pods.iter().filter(|(_, e)| !e.gone).map(|(u, _)| u.as_str()).collect();
        v.sort();
        v
    }

    /// The pending watch sees pods until they run (its selector is
    /// `status.phase=Pending`, not `spec.nodeName=`): a pod bound, whoever
    /// bound it, is no longer pending, listed or watched.
    #[test]
    fn a_bound_pod_still_in_the_watch_is_not_pending() {
        let mut st = Sched::default();
        on_pod(&mut st, &[], watcher::Event::Init);
        on_pod(&mut st, &[], watcher::Event::InitApply(pod("a", None)));
        on_pod(&mut st, &[], watcher::Event::InitApply(pod("b", Some("n1"))));
        on_pod(&mut st, &[], watcher::Event::InitDone);
        assert_eq!(pending(&st), ["a"], "a pod listed bound is not pending");
        on_pod(&mut st, &[], watcher::Event::Apply(pod("c", None)));
        on_pod(&mut st, &[], watcher::Event::Apply(pod("a", Some("n2"))));
        assert_eq!(pending(&st), ["c"], "a pending pod seen bound is gone from the pending");
        assert!(st.pods.get("a").is_some_and(|e| e.gone), "its entry stays until the loop withdraws it");
        on_pod(&mut st, &[], watcher::Event::Apply(pod("d", Some("n1"))));
        assert!(!st.pods.contains_key("d"), "a pod first seen bound is not taken on");
        // Listed again: what is bound now is gone, the rest stays.
        on_pod(&mut st, &[], watcher::Event::Init);
        on_pod(&mut st, &[], watcher::Event::InitApply(pod("c", Some("n3"))));
        on_pod(&mut st, &[], watcher::Event::InitDone);
        assert!(pending(&st).is_empty(), "{:?}", pending(&st));
    }
}
