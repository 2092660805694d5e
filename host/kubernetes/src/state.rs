//! The provider's state ([`St`]: nodes, Paceline's runs, what other pods
//! hold) and what it tells the host manager from it: registrations,
//! disconnections, drains, run updates kept until acknowledged, heartbeats.
//!
//! Every event for the host manager is queued, in order, while the state
//! lock is held, and one task forwards the queue to the manager's channel:
//! so one run's updates cannot overtake each other, and no call
//! ([`paceline_hostmgr::Provider::acknowledge`] above all) ever waits on that channel.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams};
use paceline_hostmgr::provider::{HostRegistration, ProviderEvent, RunningRun};
use paceline_model::Resources;
use paceline_model::run::{RunState, RunUpdate};
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use crate::config::KubernetesConfig;
use crate::nodes::NodeView;
pub(crate) use crate::runs::Run;
use crate::runs::Runs;
use crate::status::Observed;

/// One node as the provider knows it.
#[derive(Debug, Default)]
pub(crate) struct NodeEntry {
    /// The node as last read; `None` while it cannot be read (`error` says why).
    pub(crate) view: Option<NodeView>,
    pub(crate) error: Option<String>,
    /// The manager has it as a live host (registered, not disconnected since).
    pub(crate) connected: bool,
    /// Total and attributes last registered.
    pub(crate) registered: Option<(Resources, paceline_model::Labels)>,
    /// A drain was asked for since it was last cordoned.
    pub(crate) drain_sent: bool,
}

/// A pod of another scheduler (or bound by hand) on a node.
#[derive(Debug)]
pub(crate) struct Foreign {
    pub(crate) node: String,
    pub(crate) usage: Resources,
    pub(crate) ports: Vec<u16>,
}

/// The three watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Watch {
    Nodes = 0,
    Pods = 1,
    Foreign = 2,
}

#[derive(Debug, Default)]
pub(crate) struct St {
    pub(crate) nodes: HashMap<String, NodeEntry>,
    /// Added through [`St::add_run`], removed through [`St::forget_run`]
    /// (or, for a pod kept for its log, [`Runs::remove`]).
    pub(crate) runs: Runs,
    /// Pod name → run id, for Paceline's pods.
    pub(crate) by_pod: HashMap<String, String>,
    /// Pods whose run ended and was acknowledged → when to delete them.
    pub(crate) finished: HashMap<String, Instant>,
    pub(crate) foreign: HashMap<String, Foreign>,
    pub(crate) foreign_by_node: HashMap<String, Resources>,
    /// How many of those pods each node has (its `allocatable.pods` counts them).
    pub(crate) foreign_pods_by_node: HashMap<String, u64>,
    /// Pods Paceline bound but did not create (`namespace/name`) → run id,
    /// from just before the binding until the run's end is acknowledged:
    /// the host manager accounts for them, so they are not counted as others'.
    pub(crate) external: HashMap<String, String>,
    /// Runs of those whose pod left the watch of other pods, for the next
    /// tick to read how they ended.
    pub(crate) external_ended: Vec<String>,
    /// Each watch has listed everything once.
    pub(crate) synced: [bool; 3],
    /// Keys seen since a watch (re)started listing.
    pub(crate) listing: [Option<HashSet<String>>; 3],
    /// The manager has been told of the nodes (after the three first lists).
    pub(crate) started: bool,
    /// Nodes whose registration may have changed (other pods came or went).
    pub(crate) dirty: HashSet<String>,
    pub(crate) api_down_since: Option<Instant>,
    pub(crate) api_error_logged: Option<Instant>,
    /// The outage outlasted `api_outage_grace`: the hosts were disconnected,
    /// and register again once the API answers.
    pub(crate) outage_disconnected: bool,
}

impl St {
    /// Adds a run and the key its pod's watch finds it by: the pod's name
    /// for a pod of the task namespace, `namespace/name` for one Paceline
    /// bound but did not create.
    pub(crate) fn add_run(&mut self, id: String, run: Run) {
        match &run.namespace {
            None => self.by_pod.insert(run.pod.clone(), id.clone()),
            Some(ns) => self.external.insert(format!("{ns}/{}", run.pod), id.clone()),
        };
        self.runs.insert(id, run);
    }

    /// Removes a run and its pod's key (where the key still names this run).
    pub(crate) fn forget_run(&mut self, id: &str) -> Option<Run> {
        let run = self.runs.remove(id)?;
        let (keys, key) = match &run.namespace {
            None => (&mut self.by_pod, run.pod.clone()),
            Some(ns) => (&mut self.external, format!("{ns}/{}", run.pod)),
        };
        if keys.get(&key).is_some_and(|k| k == id) {
            keys.remove(&key);
        }
        Some(run)
    }
}

pub(crate) struct Inner {
    pub(crate) config: KubernetesConfig,
    pub(crate) client: kube::Client,
    pub(crate) pods: Api<Pod>,
    pub(crate) secrets: Api<Secret>,
    pub(crate) st: Mutex<St>,
    pub(crate) out: mpsc::UnboundedSender<ProviderEvent>,
    pub(crate) out_rx: Mutex<Option<mpsc::UnboundedReceiver<ProviderEvent>>>,
    pub(crate) tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Nodes where one of Paceline's runs ended, for the next tick to
    /// register again (a node at its pod limit offers again). Apart from
    /// `st` because [`Inner::update`] holds only the run; taken after `st`.
    pub(crate) ended_on: Mutex<Vec<String>>,
    /// Jobs of the pod scheduler → the pods their instances bind (instance
    /// `i` binds the `i`-th), set by [`crate::podsched`] before it submits
    /// the job.
    pub(crate) pod_jobs: Mutex<HashMap<String, Vec<crate::podsched::PodRef>>>,
    /// `config.max_concurrent_calls` permits: API writes in flight, all
    /// launches, binds and deletions together (see [`Inner::call`]).
    pub(crate) calls: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // kube::Client has no Debug (it holds the credentials' layers).
        f.debug_struct("Inner")
            .field("config", &self.config)
            .field("namespace", &self.config.namespace)
            .finish_non_exhaustive()
    }
}

/// How often a write the API server refused with 429 is tried again.
pub(crate) const RETRIES_ON_429: u32 = 4;

/// [`Inner::call`], for a task that holds no `Inner`.
pub(crate) async fn call<T, F, Fut>(
    calls: &tokio::sync::Semaphore,
    timeout: std::time::Duration,
    what: &str,
    f: F,
) -> Result<T, kube::Error>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    // Never closed: an error here cannot happen, and would only mean no limit.
    let _permit = calls.acquire().await;
    let mut pause = std::time::Duration::from_millis(200);
    let mut retries = 0;
    loop {
        let answer = tokio::time::timeout(timeout, f())
            .await
            .map_err(|_| kube::Error::Service(format!("{what}: no answer within {} s", timeout.as_secs()).into()))?;
        match answer {
            Err(e) if retries < RETRIES_ON_429 && is_status(&e, |s| s.code == 429) => {
                retries += 1;
                debug!(what, retries, "the API server asked to slow down (429); trying again");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            other => return other,
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

pub(crate) fn rank(s: RunState) -> u8 {
    match s {
        RunState::Starting => 0,
        RunState::Running => 1,
        _ => 2,
    }
}

/// What the API server said, in one line.
pub(crate) fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

pub(crate) fn is_status(e: &kube::Error, f: fn(&kube::core::Status) -> bool) -> bool {
    matches!(e, kube::Error::Api(s) if f(s))
}

// ---- state ---------------------------------------------------------------

impl Inner {
    pub(crate) fn st(&self) -> MutexGuard<'_, St> {
        lock(&self.st)
    }

    pub(crate) fn send(&self, ev: ProviderEvent) {
        // The receiver lives as long as the forwarder; after it, nobody listens.
        let _ = self.out.send(ev);
    }

    /// The registration of a node, if it can be a host now.
    pub(crate) fn registration(&self, st: &St, name: &str) -> Option<HostRegistration> {
        let node = st.nodes.get(name)?;
        let view = node.view.as_ref().filter(|v| v.ready)?;
        let foreign = st.foreign_by_node.get(name).copied().unwrap_or(Resources::ZERO);
        // A node as full of pods as its kubelet admits offers nothing until
        // one ends; nor does any while the API cannot be reached (a launch
        // would create nothing: placing there only moves tasks about).
        let full = view.max_pods.is_some_and(|max| self.pods_on(st, name) >= max);
        let offers = view.offers() && !full && st.api_down_since.is_none();
        let total = if offers { view.allocatable.saturating_sub(&foreign) } else { Resources::ZERO };
        let running = st
            .runs
            .on(name)
            .filter(|(_, r)| r.reported())
            .map(|(id, r)| RunningRun {
                run_id: id.clone(),
                task_id: r.task_id.clone(),
                resources: r.resources,
                gpu: r.gpu.clone(),
            })
            .collect();
        Some(HostRegistration {
            hostname: name.to_string(),
            agent_id: format!("node/{name}"),
            total,
            attributes: view.attributes.clone(),
            running,
            gpus: Vec::new(),
        })
    }

    /// Tells the manager what changed about a node: registered (again) when
    /// it is Ready and its capacity or labels changed, disconnected when it
    /// is not Ready or cannot be read, a drain when it was cordoned.
    pub(crate) fn sync_node(&self, st: &mut St, name: &str) {
        if !st.started {
            return;
        }
        let reg = self.registration(st, name);
        let Some(node) = st.nodes.get_mut(name) else { return };
        match reg {
            Some(reg) => {
                let key = (reg.total, reg.attributes.clone());
                if !node.connected || node.registered.as_ref() != Some(&key) {
                    node.connected = true;
                    node.registered = Some(key);
                    self.send(ProviderEvent::HostRegistered(reg));
                }
                let cordoned = node.view.as_ref().is_some_and(|v| v.unschedulable);
                if cordoned && !node.drain_sent {
                    node.drain_sent = true;
                    self.send(ProviderEvent::HostDrainRequested {
                        host: name.to_string(),
                        reason: "the node was cordoned (spec.unschedulable)".into(),
                    });
                } else if !cordoned && node.drain_sent {
                    // The manager puts the host back up only if this
                    // provider's drain is what took it down (an operator's
                    // own drain stays).
                    node.drain_sent = false;
                    info!(node = name, "node uncordoned; asking for the host back");
                    self.send(ProviderEvent::HostUndrainRequested {
                        host: name.to_string(),
                        reason: "the node was uncordoned".into(),
                    });
                }
            }
            None => {
                if node.connected {
                    node.connected = false;
                    let reason = match (&node.view, &node.error) {
                        (_, Some(e)) => format!("node cannot be read: {e}"),
                        (Some(v), None) => format!("node not ready: {}", v.not_ready_reason),
                        (None, None) => "node not ready".into(),
                    };
                    info!(node = name, reason, "host disconnected");
                    self.send(ProviderEvent::HostDisconnected { host: name.to_string(), reason });
                }
            }
        }
    }

    /// Sends the run's next update (kept until acknowledged).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn update(
        &self,
        run_id: &str,
        run: &mut Run,
        state: RunState,
        healthy: Option<bool>,
        exit_code: Option<i32>,
        signal: Option<i32>,
        reason: &str,
        message: String,
    ) {
        run.seq += 1;
        run.last = Some((state, healthy));
        if state.is_terminal() && !run.terminal {
            lock(&self.ended_on).push(run.host().to_string());
        }
        run.terminal |= state.is_terminal();
        let u = RunUpdate {
            host: run.host().to_string(),
            run_id: run_id.to_string(),
            task_id: run.task_id.clone(),
            seq: run.seq,
            state,
            healthy,
            exit_code,
            signal,
            reason: reason.to_string(),
            message,
            at_ms: unix_ms(),
            ports: run.ports.clone(),
        };
        run.unacked.push_back((u.clone(), Instant::now()));
        self.send(ProviderEvent::RunUpdate(u));
    }

    /// What a run's pod shows: sent once the manager knows the nodes,
    /// kept until then.
    pub(crate) fn observed(&self, started: bool, run_id: &str, run: &mut Run, o: Observed) {
        if started {
            self.progress(run_id, run, o);
        } else {
            run.latest = Some(o);
        }
    }

    /// Moves a run forward to what its pod shows (never backward).
    pub(crate) fn progress(&self, run_id: &str, run: &mut Run, mut o: Observed) {
        if run.terminal {
            return;
        }
        if run.kill_requested && o.state.is_terminal() {
            // Whatever the exit, it ended because Paceline stopped it.
            o.state = RunState::Killed;
            o.reason = "KILLED_BY_REQUEST".into();
        }
        if let Some((state, healthy)) = run.last {
            if rank(o.state) < rank(state) || (o.state == state && o.healthy == healthy) {
                return;
            }
            if o.state == state && o.reason.is_empty() {
                o.reason = "HEALTH_CHANGED".into();
            }
        }
        let stuck = o.stuck;
        self.update(run_id, run, o.state, o.healthy, o.exit_code, o.signal, &o.reason.clone(), o.message);
        if stuck {
            // An image that cannot be pulled waits forever; the pod must go.
            self.spawn_delete(run.pod.clone(), Some(0));
        }
    }

    /// One API write, with one of the `max_concurrent_calls` permits,
    /// within `call_timeout`, and again after a pause (up to
    /// [`RETRIES_ON_429`] times) when the API server answers 429: API
    /// Priority and Fairness queues a client's requests in a few queues of
    /// its priority level and refuses what overflows them. Unbounded, a
    /// burst of launches (500 hosts, a create per run each) overflowed them:
    /// 879 of 2,879 creates were refused in `bench kubernetes` (2,000 pods,
    /// 500 nodes), each refusal a launch given back and placed again. Not
    /// for evictions, whose 429 is a PodDisruptionBudget's answer.
    pub(crate) async fn call<T, F, Fut>(&self, what: &str, f: F) -> Result<T, kube::Error>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        call(&self.calls, self.config.call_timeout, what, f).await
    }

    pub(crate) fn spawn_delete(&self, pod: String, grace: Option<u32>) {
        let (pods, calls, timeout) = (self.pods.clone(), self.calls.clone(), self.config.call_timeout);
        tokio::spawn(async move {
            let dp = DeleteParams { grace_period_seconds: grace, ..DeleteParams::default() };
            match call(&calls, timeout, "delete pod", || pods.delete(&pod, &dp)).await {
                Ok(_) => debug!(pod, "pod deleted"),
                Err(e) if is_status(&e, kube::core::Status::is_not_found) => {}
                Err(e) => warn!(pod, error = api_message(&e), "pod not deleted; it is tried again at the next start"),
            }
        });
    }

    // ---- periodic ------------------------------------------------------------

    /// Re-registers nodes other pods changed, re-sends unacknowledged
    /// updates, deletes finished pods that were kept for their logs.
    pub(crate) fn tick(&self) {
        let now = Instant::now();
        let mut st = self.st();
        let ended: Vec<String> = std::mem::take(&mut *lock(&self.ended_on));
        st.dirty.extend(ended);
        if st.started {
            let dirty: Vec<String> = st.dirty.drain().collect();
            for name in dirty {
                self.sync_node(&mut st, &name);
            }
        }
        let after = self.config.redeliver_after;
        for run in st.runs.values_mut() {
            for (u, sent) in run.unacked.iter_mut() {
                if now.duration_since(*sent) >= after {
                    *sent = now;
                    let _ = self.out.send(ProviderEvent::RunUpdate(u.clone()));
                }
            }
        }
        let due: Vec<String> = st.finished.iter().filter(|(_, t)| **t <= now).map(|(p, _)| p.clone()).collect();
        for pod in due {
            st.finished.remove(&pod);
            self.spawn_delete(pod, Some(0));
        }
    }

    pub(crate) fn heartbeat(&self) {
        let mut st = self.st();
        if !st.started {
            return;
        }
        if let Some(since) = st.api_down_since
            && since.elapsed() > self.config.api_outage_grace
        {
            // Nothing vouches for the nodes any more: the manager loses
            // them after its heartbeat timeout, told why.
            if !st.outage_disconnected {
                st.outage_disconnected = true;
                let reason = format!(
                    "kubernetes API unreachable for {} s (api_outage_grace {} s): the node's state is unknown",
                    since.elapsed().as_secs(),
                    self.config.api_outage_grace.as_secs()
                );
                error!(reason, "hosts disconnected");
                let mut names: Vec<String> =
                    st.nodes.iter().filter(|(_, n)| n.connected).map(|(k, _)| k.clone()).collect();
                names.sort();
                for name in names {
                    if let Some(node) = st.nodes.get_mut(&name) {
                        node.connected = false;
                    }
                    self.send(ProviderEvent::HostDisconnected { host: name, reason: reason.clone() });
                }
            }
            return;
        }
        for (name, node) in &st.nodes {
            if node.connected {
                let _ = self.out.send(ProviderEvent::Heartbeat { host: name.clone() });
            }
        }
    }

    /// Unfinished pods on `host`: other schedulers' (other Paceline
    /// clusters' included) and Paceline's runs that have not ended.
    pub(crate) fn pods_on(&self, st: &St, host: &str) -> u64 {
        let foreign = st.foreign_pods_by_node.get(host).copied().unwrap_or(0);
        let ours = st.runs.on(host).filter(|(_, r)| r.holds_a_pod()).count() as u64;
        foreign + ours
    }

    pub(crate) fn ports_in_use(&self, st: &St, host: &str) -> BTreeSet<u16> {
        let mut used: BTreeSet<u16> =
            st.foreign.values().filter(|f| f.node == host).flat_map(|f| f.ports.iter().copied()).collect();
        for (_, r) in st.runs.on(host).filter(|(_, r)| !r.terminal) {
            used.extend(r.ports.values().copied());
        }
        used
    }
}
