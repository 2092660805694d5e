//! [`KubernetesProvider`]: the state it keeps (nodes, Paceline's runs,
//! what other pods hold), the three watches that feed it, and the
//! [`Provider`] calls.
//!
//! Every event for the host manager is queued, in order, while the state
//! lock is held, and one task forwards the queue to the manager's channel:
//! so one run's updates cannot overtake each other, and no call
//! ([`Provider::acknowledge`] above all) ever waits on that channel.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use paceline_hostmgr::error::ProviderError;
use paceline_hostmgr::provider::{HostRegistration, LogChunk, LogStream, Provider, ProviderEvent, RunningRun};
use paceline_model::Resources;
use paceline_model::gpu::GpuGrant;
use paceline_model::run::{LaunchRequest, RunState, RunUpdate};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::config::{KUBECONFIG_ENV, KubernetesConfig};
use crate::error::KubernetesError;
use crate::nodes::{self, NodeView};
use crate::pods::{self, MANAGED_BY, MANAGED_SELECTOR};
use crate::status::{self, Observed};

const NAME: &str = "kubernetes";

/// One node as the provider knows it.
#[derive(Debug, Default)]
struct NodeEntry {
    /// The node as last read; `None` while it cannot be read (`error` says why).
    view: Option<NodeView>,
    error: Option<String>,
    /// The manager has it as a live host (registered, not disconnected since).
    connected: bool,
    /// Total and attributes last registered.
    registered: Option<(Resources, paceline_model::Labels)>,
    /// A drain was asked for since it was last cordoned.
    drain_sent: bool,
}

/// One of Paceline's runs, from its launch (or its pod's adoption) until
/// its end is acknowledged.
#[derive(Debug)]
struct Run {
    pod: String,
    host: String,
    task_id: String,
    resources: Resources,
    gpu: GpuGrant,
    ports: BTreeMap<String, u16>,
    seq: u64,
    /// State and health last reported.
    last: Option<(RunState, Option<bool>)>,
    terminal: bool,
    kill_requested: bool,
    /// Found as a pod, not launched by this process.
    adopted: bool,
    /// What the pod showed before the manager could be told (start-up).
    latest: Option<Observed>,
    pod_gone: bool,
    unacked: VecDeque<(RunUpdate, Instant)>,
}

impl Run {
    /// Reported among the host's runs at registration: live, or adopted
    /// with an end the manager has not acknowledged (so that it can hold
    /// the end until it knows whether it expects the run).
    fn reported(&self) -> bool {
        !self.terminal || (self.adopted && !self.unacked.is_empty())
    }
}

/// A pod of another scheduler (or bound by hand) on a node.
#[derive(Debug)]
struct Foreign {
    node: String,
    usage: Resources,
    ports: Vec<u16>,
}

/// The three watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Watch {
    Nodes = 0,
    Pods = 1,
    Foreign = 2,
}

#[derive(Debug, Default)]
struct St {
    nodes: HashMap<String, NodeEntry>,
    runs: HashMap<String, Run>,
    /// Pod name → run id, for Paceline's pods.
    by_pod: HashMap<String, String>,
    /// Pods whose run ended and was acknowledged → when to delete them.
    finished: HashMap<String, Instant>,
    foreign: HashMap<String, Foreign>,
    foreign_by_node: HashMap<String, Resources>,
    /// Each watch has listed everything once.
    synced: [bool; 3],
    /// Keys seen since a watch (re)started listing.
    listing: [Option<HashSet<String>>; 3],
    /// The manager has been told of the nodes (after the three first lists).
    started: bool,
    /// Nodes whose registration may have changed (other pods came or went).
    dirty: HashSet<String>,
    api_down_since: Option<Instant>,
    api_error_logged: Option<Instant>,
}

struct Inner {
    config: KubernetesConfig,
    client: kube::Client,
    pods: Api<Pod>,
    secrets: Api<Secret>,
    st: Mutex<St>,
    out: mpsc::UnboundedSender<ProviderEvent>,
    out_rx: Mutex<Option<mpsc::UnboundedReceiver<ProviderEvent>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
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

/// The `kubernetes` provider. Cheap to clone; clones share the state.
#[derive(Clone, Debug)]
pub struct KubernetesProvider {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn rank(s: RunState) -> u8 {
    match s {
        RunState::Starting => 0,
        RunState::Running => 1,
        _ => 2,
    }
}

/// What the API server said, in one line.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

fn is_status(e: &kube::Error, f: fn(&kube::core::Status) -> bool) -> bool {
    matches!(e, kube::Error::Api(s) if f(s))
}

impl KubernetesProvider {
    /// Connects to the cluster `config` names (the kubeconfig setting,
    /// `PACELINE_KUBECONFIG`, or the pod's ServiceAccount) and checks that
    /// it may list pods in the task namespace, so that a wrong address or
    /// missing permission stops the start with a clear message.
    pub async fn connect(config: KubernetesConfig) -> Result<Self, KubernetesError> {
        // kube's rustls takes the process's default provider. The workspace
        // builds rustls with ring only, but a binary that also linked
        // aws-lc would have two and no default: rustls would then panic on
        // the first connection. Installing ring first (a no-op when a
        // default exists) rules that out.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let path = config.kubeconfig.clone().or_else(|| std::env::var_os(KUBECONFIG_ENV).map(Into::into));
        let kube_config = match &path {
            Some(path) => {
                let kc = kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| KubernetesError::Kubeconfig { path: path.clone(), message: e.to_string() })?;
                let options = kube::config::KubeConfigOptions { context: config.context.clone(), ..Default::default() };
                kube::Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(|e| KubernetesError::Kubeconfig { path: path.clone(), message: e.to_string() })?
            }
            None => kube::Config::incluster().map_err(|e| KubernetesError::NoConfig(e.to_string()))?,
        };
        let client = kube::Client::try_from(kube_config).map_err(|e| KubernetesError::Client(e.to_string()))?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &config.namespace);
        let probe = kube::api::ListParams::default().labels(MANAGED_SELECTOR).limit(1);
        tokio::time::timeout(config.call_timeout, pods.list_metadata(&probe))
            .await
            .map_err(|_| KubernetesError::Api {
                what: format!("list pods in namespace {}", config.namespace),
                message: format!("no answer within {} s", config.call_timeout.as_secs()),
            })?
            .map_err(|e| KubernetesError::Api {
                what: format!("list pods in namespace {}", config.namespace),
                message: api_message(&e),
            })?;
        let secrets = Api::namespaced(client.clone(), &config.namespace);
        let (out, out_rx) = mpsc::unbounded_channel();
        Ok(KubernetesProvider {
            inner: Arc::new(Inner {
                config,
                client,
                pods,
                secrets,
                st: Mutex::new(St::default()),
                out,
                out_rx: Mutex::new(Some(out_rx)),
                tasks: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Whether every watch has listed once and the manager was told of the nodes.
    pub fn is_synced(&self) -> bool {
        lock(&self.inner.st).started
    }

    /// Nodes known now (readable or not).
    pub fn node_count(&self) -> usize {
        lock(&self.inner.st).nodes.len()
    }

    /// Runs tracked now (live, or ended and not yet acknowledged).
    pub fn run_count(&self) -> usize {
        lock(&self.inner.st).runs.len()
    }

    /// What pods of other schedulers hold on `node`.
    pub fn foreign_usage(&self, node: &str) -> Resources {
        lock(&self.inner.st).foreign_by_node.get(node).copied().unwrap_or(Resources::ZERO)
    }

    /// Stops the watches and the forwarder (pods keep running).
    pub fn shutdown(&self) {
        for t in lock(&self.inner.tasks).drain(..) {
            t.abort();
        }
    }

    /// A guard that calls [`KubernetesProvider::shutdown`] when dropped.
    pub fn stop_on_drop(&self) -> StopGuard {
        StopGuard(self.clone())
    }
}

/// Stops a [`KubernetesProvider`] when dropped.
#[derive(Debug)]
pub struct StopGuard(KubernetesProvider);

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

// ---- state ---------------------------------------------------------------

impl Inner {
    fn st(&self) -> MutexGuard<'_, St> {
        lock(&self.st)
    }

    fn send(&self, ev: ProviderEvent) {
        // The receiver lives as long as the forwarder; after it, nobody listens.
        let _ = self.out.send(ev);
    }

    /// The registration of a node, if it can be a host now.
    fn registration(&self, st: &St, name: &str) -> Option<HostRegistration> {
        let node = st.nodes.get(name)?;
        let view = node.view.as_ref().filter(|v| v.ready)?;
        let foreign = st.foreign_by_node.get(name).copied().unwrap_or(Resources::ZERO);
        let total = if view.offers() { view.allocatable.saturating_sub(&foreign) } else { Resources::ZERO };
        let running = st
            .runs
            .iter()
            .filter(|(_, r)| r.host == name && r.reported())
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
    fn sync_node(&self, st: &mut St, name: &str) {
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
                    node.drain_sent = false;
                    info!(
                        node = name,
                        "node uncordoned; the host stays in its maintenance state until `paceline host up` (docs/kubernetes.md)"
                    );
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
    fn update(
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
        run.terminal |= state.is_terminal();
        let u = RunUpdate {
            host: run.host.clone(),
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

    /// Moves a run forward to what its pod shows (never backward).
    fn progress(&self, run_id: &str, run: &mut Run, mut o: Observed) {
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

    fn spawn_delete(&self, pod: String, grace: Option<u32>) {
        let pods = self.pods.clone();
        tokio::spawn(async move {
            let dp = DeleteParams { grace_period_seconds: grace, ..DeleteParams::default() };
            match pods.delete(&pod, &dp).await {
                Ok(_) => debug!(pod, "pod deleted"),
                Err(e) if is_status(&e, kube::core::Status::is_not_found) => {}
                Err(e) => warn!(pod, error = api_message(&e), "pod not deleted; it is tried again at the next start"),
            }
        });
    }

    // ---- watch events ------------------------------------------------------

    fn api_ok(&self, st: &mut St) {
        if let Some(since) = st.api_down_since.take() {
            info!(after_s = since.elapsed().as_secs(), "kubernetes API reachable again");
        }
    }

    fn api_error(&self, st: &mut St, watch: Watch, e: &watcher::Error) {
        let now = Instant::now();
        st.api_down_since.get_or_insert(now);
        if st.api_error_logged.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(30)) {
            st.api_error_logged = Some(now);
            warn!(?watch, error = %e, "kubernetes watch failed; retrying (hosts stay up for {} s)",
                self.config.api_outage_grace.as_secs());
        }
    }

    /// Applies one watch event; `key` names the object for relists.
    fn on_event<K>(
        &self,
        watch: Watch,
        ev: Event<K>,
        apply: impl Fn(&Self, &mut St, K),
        gone: impl Fn(&Self, &mut St, &str, Option<K>),
        key: impl Fn(&K) -> String,
    ) {
        let mut st = self.st();
        self.api_ok(&mut st);
        let w = watch as usize;
        match ev {
            Event::Init => st.listing[w] = Some(HashSet::new()),
            Event::InitApply(obj) => {
                if let Some(seen) = st.listing[w].as_mut() {
                    seen.insert(key(&obj));
                }
                apply(self, &mut st, obj);
            }
            Event::InitDone => {
                // Whatever was not listed is gone (deleted while we were not watching).
                if let Some(seen) = st.listing[w].take() {
                    let known: Vec<String> = match watch {
                        Watch::Nodes => st.nodes.keys().cloned().collect(),
                        Watch::Pods => st.by_pod.keys().cloned().collect(),
                        Watch::Foreign => st.foreign.keys().cloned().collect(),
                    };
                    for k in known.into_iter().filter(|k| !seen.contains(k)) {
                        gone(self, &mut st, &k, None);
                    }
                }
                st.synced[w] = true;
                if !st.started && st.synced.iter().all(|&s| s) {
                    self.begin(&mut st);
                }
            }
            Event::Apply(obj) => apply(self, &mut st, obj),
            Event::Delete(obj) => {
                let k = key(&obj);
                gone(self, &mut st, &k, Some(obj));
            }
        }
    }

    /// Every watch has listed: the manager hears of the nodes, with the
    /// runs found on them, then of what those runs did meanwhile.
    fn begin(&self, st: &mut St) {
        st.started = true;
        let mut names: Vec<String> = st.nodes.keys().cloned().collect();
        names.sort();
        for name in &names {
            self.sync_node(st, name);
        }
        let ids: Vec<String> = st.runs.keys().cloned().collect();
        for id in &ids {
            let Some(run) = st.runs.get_mut(id) else { continue };
            if let Some(o) = run.latest.take() {
                self.progress(id, run, o);
            }
        }
        let offered = st.nodes.values().filter(|n| n.connected).count();
        info!(
            nodes = st.nodes.len(),
            offered,
            adopted_runs = st.runs.len(),
            other_pods = st.foreign.len(),
            "kubernetes: nodes and pods listed; hosts registered"
        );
    }

    fn node_apply(&self, st: &mut St, node: Node) {
        let Some(name) = node.metadata.name.clone() else { return };
        let entry = st.nodes.entry(name.clone()).or_default();
        match nodes::node_view(&node, &self.config) {
            Ok(v) => {
                entry.view = Some(v);
                entry.error = None;
            }
            Err(e) => {
                if entry.error.as_deref() != Some(e.as_str()) {
                    warn!(node = name, error = e, "node not offered: it cannot be read");
                }
                entry.view = None;
                entry.error = Some(e);
            }
        }
        self.sync_node(st, &name);
    }

    fn node_gone(&self, st: &mut St, name: &str, _last: Option<Node>) {
        let Some(node) = st.nodes.remove(name) else { return };
        if st.started && node.connected {
            info!(node = name, "node deleted; its runs are lost");
            self.send(ProviderEvent::HostDisconnected { host: name.to_string(), reason: "node deleted".into() });
        }
        let ids: Vec<String> =
            st.runs.iter().filter(|(_, r)| r.host == name && !r.terminal).map(|(id, _)| id.clone()).collect();
        for id in ids {
            let Some(run) = st.runs.get_mut(&id) else { continue };
            if st.started {
                self.update(
                    &id,
                    run,
                    RunState::Lost,
                    None,
                    None,
                    None,
                    "NODE_DELETED",
                    format!("node {name} was deleted"),
                );
            }
            run.terminal = true;
            if !run.pod_gone {
                // A pod bound to a node that is gone never runs again.
                self.spawn_delete(run.pod.clone(), Some(0));
            }
        }
    }

    fn pod_apply(&self, st: &mut St, pod: Pod) {
        let Some(name) = pod.metadata.name.clone() else { return };
        if st.finished.contains_key(&name) {
            return;
        }
        let run_id = match st.by_pod.get(&name) {
            Some(id) => id.clone(),
            None => {
                let Some(meta) = pods::run_meta(&pod) else {
                    debug!(pod = name, "a pod labelled as Paceline's without a run id; left alone");
                    return;
                };
                let Some(host) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else { return };
                if st.runs.contains_key(&meta.run_id) {
                    return;
                }
                // Launched by an earlier process (or a launch that failed on
                // our side after the server created the pod): the manager
                // decides whether it is expected, from the registration.
                info!(pod = name, run_id = meta.run_id, node = host, "found a Paceline pod; reporting it");
                let run = Run {
                    pod: name.clone(),
                    host: host.clone(),
                    task_id: meta.task_id,
                    resources: meta.resources,
                    gpu: meta.gpu,
                    ports: meta.ports,
                    // Past any seq an earlier process gave it (those started at 1).
                    seq: unix_ms(),
                    // The registration reports it running.
                    last: Some((RunState::Running, None)),
                    terminal: false,
                    kill_requested: false,
                    adopted: true,
                    latest: None,
                    pod_gone: false,
                    unacked: VecDeque::new(),
                };
                st.by_pod.insert(name.clone(), meta.run_id.clone());
                st.runs.insert(meta.run_id.clone(), run);
                if st.started
                    && let Some(node) = st.nodes.get_mut(&host)
                {
                    // Registered again, with it among its runs, before its updates.
                    node.connected = false;
                    self.sync_node(st, &host);
                }
                meta.run_id
            }
        };
        let Some(o) = status::observe(&pod) else { return };
        let started = st.started;
        let Some(run) = st.runs.get_mut(&run_id) else { return };
        if started {
            self.progress(&run_id, run, o);
        } else {
            run.latest = Some(o);
        }
    }

    fn pod_gone(&self, st: &mut St, name: &str, last: Option<Pod>) {
        st.finished.remove(name);
        let Some(run_id) = st.by_pod.remove(name) else { return };
        let started = st.started;
        let Some(run) = st.runs.get_mut(&run_id) else { return };
        run.pod_gone = true;
        if run.terminal {
            return;
        }
        // It may have ended before it went.
        if let Some(o) = last.as_ref().and_then(status::observe).filter(|o| o.state.is_terminal()) {
            if started {
                self.progress(&run_id, run, o);
            } else {
                run.latest = Some(o);
            }
            return;
        }
        if !started {
            // Deleted before the manager heard of it: it is not reported.
            st.runs.remove(&run_id);
            return;
        }
        if run.kill_requested {
            self.update(&run_id, run, RunState::Killed, None, None, None, "KILLED_BY_REQUEST", String::new());
        } else {
            let why = last
                .as_ref()
                .and_then(|p| p.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
                .map(|c| format!(" ({}: {})", c.reason.as_deref().unwrap_or(""), c.message.as_deref().unwrap_or("")))
                .unwrap_or_default();
            let message = format!(
                "pod {}/{name} was deleted outside Paceline (a user, a controller or another scheduler){why}",
                self.config.namespace
            );
            warn!(run_id, message, "run lost");
            self.update(&run_id, run, RunState::Lost, None, None, None, "POD_DELETED", message);
        }
    }

    fn foreign_key(pod: &Pod) -> String {
        format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""))
    }

    fn foreign_apply(&self, st: &mut St, pod: Pod) {
        let key = Self::foreign_key(&pod);
        let labelled = pod.metadata.labels.as_ref().is_some_and(|l| l.get(MANAGED_BY).is_some_and(|v| v == "paceline"));
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        if labelled || node.is_empty() || phase == "Succeeded" || phase == "Failed" {
            self.foreign_gone(st, &key, None);
            return;
        }
        let usage = match nodes::pod_usage(&pod, self.config.port_range) {
            Ok(u) => u,
            Err(e) => {
                // Counted as nothing rather than stopping the node: say so.
                warn!(pod = key, error = e, "a pod's requests cannot be read; it is not counted against its node");
                Resources::ZERO
            }
        };
        let ports = nodes::host_ports(&pod);
        if let Some(old) = st.foreign.get(&key)
            && old.node == node
            && old.usage == usage
            && old.ports == ports
        {
            return;
        }
        self.foreign_gone(st, &key, None);
        let sum = st.foreign_by_node.entry(node.clone()).or_insert(Resources::ZERO);
        *sum = sum.saturating_add(&usage);
        st.dirty.insert(node.clone());
        st.foreign.insert(key, Foreign { node, usage, ports });
    }

    fn foreign_gone(&self, st: &mut St, key: &str, _last: Option<Pod>) {
        let Some(old) = st.foreign.remove(key) else { return };
        if let Some(sum) = st.foreign_by_node.get_mut(&old.node) {
            *sum = sum.saturating_sub(&old.usage);
            if *sum == Resources::ZERO {
                st.foreign_by_node.remove(&old.node);
            }
        }
        st.dirty.insert(old.node);
    }

    // ---- periodic ------------------------------------------------------------

    /// Re-registers nodes other pods changed, re-sends unacknowledged
    /// updates, deletes finished pods that were kept for their logs.
    fn tick(&self) {
        let now = Instant::now();
        let mut st = self.st();
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

    fn heartbeat(&self) {
        let st = self.st();
        if !st.started {
            return;
        }
        if let Some(since) = st.api_down_since
            && since.elapsed() > self.config.api_outage_grace
        {
            // Nothing vouches for the nodes any more: let the manager lose them.
            return;
        }
        for (name, node) in &st.nodes {
            if node.connected {
                let _ = self.out.send(ProviderEvent::Heartbeat { host: name.clone() });
            }
        }
    }

    fn ports_in_use(&self, st: &St, host: &str) -> BTreeSet<u16> {
        let mut used: BTreeSet<u16> =
            st.foreign.values().filter(|f| f.node == host).flat_map(|f| f.ports.iter().copied()).collect();
        for r in st.runs.values().filter(|r| r.host == host && !r.terminal) {
            used.extend(r.ports.values().copied());
        }
        used
    }
}

// ---- watches ---------------------------------------------------------------

async fn watch_loop<K>(
    inner: Arc<Inner>,
    api: Api<K>,
    config: watcher::Config,
    watch: Watch,
    apply: fn(&Inner, &mut St, K),
    gone: fn(&Inner, &mut St, &str, Option<K>),
    key: fn(&K) -> String,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    loop {
        match stream.try_next().await {
            Ok(Some(ev)) => inner.on_event(watch, ev, apply, gone, key),
            Ok(None) => break,
            Err(e) => {
                let mut st = inner.st();
                inner.api_error(&mut st, watch, &e);
            }
        }
    }
}

fn name_of<K: kube::Resource>(k: &K) -> String {
    k.meta().name.clone().unwrap_or_default()
}

// ---- the provider calls ------------------------------------------------------

#[async_trait]
impl Provider for KubernetesProvider {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn start(&self, events: mpsc::Sender<ProviderEvent>) -> Result<(), ProviderError> {
        let Some(mut rx) = lock(&self.inner.out_rx).take() else {
            return Err(ProviderError::NotRunning(NAME));
        };
        let inner = &self.inner;
        let mut tasks = lock(&inner.tasks);
        tasks.push(tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                if events.send(ev).await.is_err() {
                    break;
                }
            }
        }));
        let client = inner.client.clone();
        let mut nodes_config = watcher::Config::default();
        if let Some(sel) = &inner.config.node_selector {
            nodes_config = nodes_config.labels(sel);
        }
        tasks.push(tokio::spawn(watch_loop(
            inner.clone(),
            Api::<Node>::all(client.clone()),
            nodes_config,
            Watch::Nodes,
            Inner::node_apply,
            Inner::node_gone,
            name_of,
        )));
        tasks.push(tokio::spawn(watch_loop(
            inner.clone(),
            inner.pods.clone(),
            watcher::Config::default().labels(MANAGED_SELECTOR),
            Watch::Pods,
            Inner::pod_apply,
            Inner::pod_gone,
            name_of,
        )));
        // Other pods: bound, not finished, not ours (in any namespace).
        tasks.push(tokio::spawn(watch_loop(
            inner.clone(),
            Api::<Pod>::all(client),
            watcher::Config::default()
                .labels(&format!("{MANAGED_BY}!=paceline"))
                .fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"),
            Watch::Foreign,
            Inner::foreign_apply,
            Inner::foreign_gone,
            Inner::foreign_key,
        )));
        let ticker = inner.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_heartbeat = Instant::now();
            loop {
                tick.tick().await;
                ticker.tick();
                if last_heartbeat.elapsed() >= ticker.config.heartbeat_interval {
                    last_heartbeat = Instant::now();
                    ticker.heartbeat();
                }
            }
        }));
        Ok(())
    }

    async fn launch(&self, host: &str, runs: Vec<LaunchRequest>) -> Result<(), ProviderError> {
        let inner = &self.inner;
        let mut work = Vec::new();
        {
            let mut st = inner.st();
            let node = st.nodes.get(host).filter(|n| n.connected);
            let Some(view) = node.and_then(|n| n.view.clone()) else {
                return Err(ProviderError::HostNotConnected { provider: NAME, host: host.to_string() });
            };
            let mut used = if runs.iter().any(|r| !r.spec.ports.is_empty()) {
                inner.ports_in_use(&st, host)
            } else {
                BTreeSet::new()
            };
            for req in runs {
                if st.runs.contains_key(&req.run_id) {
                    continue; // idempotent by run id
                }
                let reject = |error: String| ProviderEvent::LaunchRejected {
                    host: host.to_string(),
                    run_id: req.run_id.clone(),
                    error,
                };
                if !view.offers() {
                    let e = format!(
                        "node {host} has taints Paceline does not tolerate: {}",
                        view.blocking_taints.join(", ")
                    );
                    inner.send(reject(e));
                    continue;
                }
                // A gang member's ports were chosen by the job manager (decision 0051): exactly those.
                if let Some(gang) = &req.gang {
                    let taken: Vec<u16> = gang.ports.values().copied().filter(|p| used.contains(p)).collect();
                    if !taken.is_empty() {
                        inner.send(reject(format!("node {host}: gang ports {taken:?} are taken")));
                        continue;
                    }
                }
                let mut ports = req.gang.as_ref().map(|g| g.ports.clone()).unwrap_or_default();
                used.extend(ports.values().copied());
                let (lo, hi) = inner.config.port_range;
                let missing: Vec<String> = req.spec.ports.iter().filter(|n| !ports.contains_key(*n)).cloned().collect();
                let mut free = (lo..=hi).filter(|p| !used.contains(p));
                let mut short = false;
                for name in missing {
                    match free.next() {
                        Some(p) => {
                            ports.insert(name, p);
                        }
                        None => short = true,
                    }
                }
                drop(free);
                if short {
                    inner.send(reject(format!("node {host}: no free host port in {lo}-{hi}")));
                    continue;
                }
                used.extend(ports.values().copied());
                let (pod, secret) = match pods::build_pod(&inner.config, &req, host, &ports) {
                    Ok(p) => p,
                    Err(e) => {
                        inner.send(reject(e));
                        continue;
                    }
                };
                let name = pods::pod_name(&req.run_id);
                st.by_pod.insert(name.clone(), req.run_id.clone());
                st.runs.insert(
                    req.run_id.clone(),
                    Run {
                        pod: name,
                        host: host.to_string(),
                        task_id: req.task_id.clone(),
                        resources: req.spec.resources,
                        gpu: req.gpu.clone(),
                        ports,
                        seq: 0,
                        last: None,
                        terminal: false,
                        kill_requested: false,
                        adopted: false,
                        latest: None,
                        pod_gone: false,
                        unacked: VecDeque::new(),
                    },
                );
                work.push((req.run_id, pod, secret));
            }
        }
        if work.is_empty() {
            return Ok(());
        }
        let total = work.len();
        let results: Vec<(String, Result<(), kube::Error>)> = futures::stream::iter(work)
            .map(|(run_id, pod, secret)| async move { (run_id, inner.create(pod, secret).await) })
            .buffer_unordered(inner.config.max_concurrent_calls.max(1))
            .collect()
            .await;
        let mut unreachable = 0;
        let mut first_error = None;
        let mut st = inner.st();
        for (run_id, result) in results {
            match result {
                Ok(()) => {
                    if let Some(run) = st.runs.get_mut(&run_id)
                        && run.last.is_none()
                    {
                        // Created bound to its node: starting.
                        inner.update(&run_id, run, RunState::Starting, None, None, None, "", String::new());
                    }
                }
                Err(e) => {
                    let message = api_message(&e);
                    if !matches!(e, kube::Error::Api(_)) {
                        unreachable += 1;
                    }
                    first_error.get_or_insert_with(|| message.clone());
                    if let Some(run) = st.runs.get(&run_id)
                        && run.last.is_none()
                    {
                        let pod = run.pod.clone();
                        st.runs.remove(&run_id);
                        st.by_pod.remove(&pod);
                        if unreachable < total {
                            inner.send(ProviderEvent::LaunchRejected {
                                host: host.to_string(),
                                run_id,
                                error: format!("creating pod {}/{pod}: {message}", inner.config.namespace),
                            });
                        }
                    }
                }
            }
        }
        if unreachable == total {
            // Nothing was created: the manager takes the launch back.
            return Err(ProviderError::Remote {
                host: host.to_string(),
                message: format!("kubernetes API: {}", first_error.unwrap_or_default()),
            });
        }
        Ok(())
    }

    async fn kill(&self, host: &str, run_id: &str, grace_override: Option<Duration>) -> Result<(), ProviderError> {
        let inner = &self.inner;
        let pod = {
            let mut st = inner.st();
            match st.runs.get_mut(run_id) {
                Some(run) if run.terminal || run.pod_gone => return Ok(()),
                Some(run) => {
                    run.kill_requested = true;
                    run.pod.clone()
                }
                None => pods::pod_name(run_id),
            }
        };
        let dp = DeleteParams {
            grace_period_seconds: grace_override.map(|g| g.as_secs().min(u64::from(u32::MAX)) as u32),
            ..DeleteParams::default()
        };
        match tokio::time::timeout(inner.config.call_timeout, inner.pods.delete(&pod, &dp)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if is_status(&e, kube::core::Status::is_not_found) => {
                let mut st = inner.st();
                if let Some(run) = st.runs.get_mut(run_id)
                    && !run.terminal
                {
                    run.pod_gone = true;
                    inner.update(
                        run_id,
                        run,
                        RunState::Killed,
                        None,
                        None,
                        None,
                        "KILLED_BY_REQUEST",
                        "the pod was already gone".into(),
                    );
                }
                Ok(())
            }
            Ok(Err(e)) => Err(ProviderError::Remote {
                host: host.to_string(),
                message: format!("deleting pod {}/{pod}: {}", inner.config.namespace, api_message(&e)),
            }),
            Err(_) => Err(ProviderError::Timeout {
                host: host.to_string(),
                timeout_ms: inner.config.call_timeout.as_millis() as u64,
            }),
        }
    }

    async fn acknowledge(&self, _host: &str, run_id: &str, seq: u64) -> Result<(), ProviderError> {
        let keep = self.inner.config.keep_finished_pods;
        let mut st = self.inner.st();
        let Some(run) = st.runs.get_mut(run_id) else { return Ok(()) };
        while run.unacked.front().is_some_and(|(u, _)| u.seq <= seq) {
            run.unacked.pop_front();
        }
        if run.terminal && run.unacked.is_empty() {
            let pod = run.pod.clone();
            let gone = run.pod_gone;
            st.runs.remove(run_id);
            if !gone && st.by_pod.get(&pod).is_some_and(|id| id == run_id) {
                // Kept a while so that its log can be read, then deleted.
                st.finished.insert(pod, Instant::now() + keep);
            }
        }
        Ok(())
    }

    async fn reconcile(&self, host: &str, expected_run_ids: Vec<String>) -> Result<(), ProviderError> {
        let inner = &self.inner;
        let mut st = inner.st();
        if !st.started {
            return Ok(());
        }
        for id in expected_run_ids {
            match st.runs.get_mut(&id) {
                Some(run) => {
                    for (u, sent) in run.unacked.iter_mut() {
                        *sent = Instant::now();
                        inner.send(ProviderEvent::RunUpdate(u.clone()));
                    }
                }
                None => {
                    // No pod of ours says anything of it: it is gone.
                    let mut run = Run {
                        pod: pods::pod_name(&id),
                        host: host.to_string(),
                        task_id: pods::task_of(&id).to_string(),
                        resources: Resources::ZERO,
                        gpu: GpuGrant::default(),
                        ports: BTreeMap::new(),
                        seq: unix_ms(),
                        last: None,
                        terminal: false,
                        kill_requested: false,
                        adopted: false,
                        latest: None,
                        pod_gone: true,
                        unacked: VecDeque::new(),
                    };
                    let message = format!("no pod of run {id} in namespace {}", inner.config.namespace);
                    inner.update(&id, &mut run, RunState::Lost, None, None, None, "RUN_MISSING", message);
                    st.runs.insert(id, run);
                }
            }
        }
        Ok(())
    }

    async fn reregister(&self, host: &str) -> Result<(), ProviderError> {
        let inner = &self.inner;
        let mut st = inner.st();
        if let Some(node) = st.nodes.get_mut(host) {
            node.connected = false;
        }
        inner.sync_node(&mut st, host);
        Ok(())
    }

    async fn read_log(
        &self,
        host: &str,
        run_id: &str,
        stream: LogStream,
        offset: u64,
        max_bytes: u64,
    ) -> Result<LogChunk, ProviderError> {
        if stream == LogStream::Stderr {
            // Kubernetes keeps one log per container, both streams in it: all of it is stdout here.
            return Ok(LogChunk { data: Vec::new(), offset, file_size: 0 });
        }
        let pod = {
            let st = self.inner.st();
            st.runs.get(run_id).map(|r| r.pod.clone()).unwrap_or_else(|| pods::pod_name(run_id))
        };
        let lp = LogParams {
            container: Some(pods::CONTAINER.into()),
            limit_bytes: Some(i64::try_from(offset.saturating_add(max_bytes)).unwrap_or(i64::MAX)),
            ..LogParams::default()
        };
        let text = match tokio::time::timeout(self.inner.config.call_timeout, self.inner.pods.logs(&pod, &lp)).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                return Err(ProviderError::Remote {
                    host: host.to_string(),
                    message: format!("log of pod {}/{pod}: {}", self.inner.config.namespace, api_message(&e)),
                });
            }
            Err(_) => {
                return Err(ProviderError::Timeout {
                    host: host.to_string(),
                    timeout_ms: self.inner.config.call_timeout.as_millis() as u64,
                });
            }
        };
        let bytes = text.into_bytes();
        let size = bytes.len() as u64;
        let from = offset.min(size) as usize;
        let to = offset.saturating_add(max_bytes).min(size) as usize;
        Ok(LogChunk { data: bytes[from..to].to_vec(), offset, file_size: size })
    }
}

impl Inner {
    /// Creates the run's Secret (if any), then its pod, then makes the pod
    /// the Secret's owner so that the Secret goes with it. Objects that
    /// exist already are fine (a launch sent twice).
    async fn create(&self, pod: Pod, secret: Option<Secret>) -> Result<(), kube::Error> {
        let pp = PostParams::default();
        let timeout = self.config.call_timeout;
        let timed = |what: &'static str| {
            move |_| kube::Error::Service(format!("{what}: no answer within {} s", timeout.as_secs()).into())
        };
        if let Some(s) = &secret {
            match tokio::time::timeout(timeout, self.secrets.create(&pp, s)).await.map_err(timed("create secret"))? {
                Ok(_) => {}
                Err(e) if is_status(&e, kube::core::Status::is_already_exists) => {}
                Err(e) => return Err(e),
            }
        }
        let created =
            match tokio::time::timeout(timeout, self.pods.create(&pp, &pod)).await.map_err(timed("create pod"))? {
                Ok(p) => Some(p),
                Err(e) if is_status(&e, kube::core::Status::is_already_exists) => None,
                Err(e) => return Err(e),
            };
        if let (Some(s), Some(p)) = (&secret, created) {
            let name = s.metadata.name.clone().unwrap_or_default();
            let patch = serde_json::json!({"metadata": {"ownerReferences": [{
                "apiVersion": "v1", "kind": "Pod",
                "name": p.metadata.name.clone().unwrap_or_default(),
                "uid": p.metadata.uid.clone().unwrap_or_default(),
            }]}});
            if let Err(e) = self.secrets.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                warn!(
                    secret = name,
                    error = api_message(&e),
                    "the run's Secret is not owned by its pod; it outlives it"
                );
            }
        }
        Ok(())
    }
}
