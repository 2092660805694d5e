//! [`KubernetesProvider`]: connecting, and the [`Provider`] calls (launch
//! as pods created bound to their node, kill as deletion, acknowledgement,
//! reconciliation, logs). The state is in `state`, the watches in `watch`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use paceline_hostmgr::error::ProviderError;
use paceline_hostmgr::provider::{LogChunk, LogStream, Provider, ProviderEvent};
use paceline_model::Resources;
use paceline_model::run::{LaunchRequest, RunState};
use tokio::sync::mpsc;
use tracing::warn;

use crate::config::{KUBECONFIG_ENV, KubernetesConfig};
use crate::error::KubernetesError;
use crate::pods;
use crate::state::{Inner, Run, St, Watch, api_message, is_status, lock, unix_ms};
use crate::watch::{name_of, watch_loop};

pub(crate) const NAME: &str = "kubernetes";

/// The `kubernetes` provider. Cheap to clone; clones share the state.
#[derive(Clone, Debug)]
pub struct KubernetesProvider {
    inner: Arc<Inner>,
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
        if !crate::config::valid_cluster_id(&config.cluster_id) {
            return Err(KubernetesError::ClusterId(config.cluster_id.clone()));
        }
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
        let probe = kube::api::ListParams::default().labels(&pods::our_selector(&config)).limit(1);
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
        let (provider, out_rx) = Self::over(config, client);
        *lock(&provider.inner.out_rx) = Some(out_rx);
        Ok(provider)
    }

    /// The provider over `client`, and the receiver of its events (which
    /// [`Provider::start`] forwards to the host manager).
    fn over(config: KubernetesConfig, client: kube::Client) -> (Self, mpsc::UnboundedReceiver<ProviderEvent>) {
        let pods = Api::namespaced(client.clone(), &config.namespace);
        let secrets = Api::namespaced(client.clone(), &config.namespace);
        let (out, out_rx) = mpsc::unbounded_channel();
        let calls = Arc::new(tokio::sync::Semaphore::new(config.max_concurrent_calls.max(1)));
        let inner = Inner {
            config,
            client,
            pods,
            secrets,
            st: Mutex::new(St::default()),
            out,
            out_rx: Mutex::new(None),
            tasks: Mutex::new(Vec::new()),
            ended_on: Mutex::new(Vec::new()),
            pod_jobs: Mutex::new(HashMap::new()),
            calls,
        };
        (KubernetesProvider { inner: Arc::new(inner) }, out_rx)
    }

    /// A provider over a client that is never used (nothing listens at its
    /// address), for tests of the state: events come out of the receiver.
    #[cfg(test)]
    pub(crate) fn offline(config: KubernetesConfig) -> (Self, mpsc::UnboundedReceiver<ProviderEvent>) {
        let uri = "http://127.0.0.1:9".parse().expect("a URI");
        let client = kube::Client::try_from(kube::Config::new(uri)).expect("a client");
        Self::over(config, client)
    }

    #[cfg(test)]
    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
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

    /// The client (the pod scheduler's watches and reports use it).
    pub(crate) fn client(&self) -> kube::Client {
        self.inner.client.clone()
    }

    /// Records the pods job `job`'s instances bind (the pod scheduler's).
    pub(crate) fn set_pod_job(&self, job: &str, pods: Vec<crate::podsched::PodRef>) {
        lock(&self.inner.pod_jobs).insert(job.to_string(), pods);
    }

    /// Forgets a job of the pod scheduler's.
    pub(crate) fn forget_pod_job(&self, job: &str) {
        lock(&self.inner.pod_jobs).remove(job);
    }

    /// Whether a run binds (or bound) pod `namespace/name` now.
    pub fn binds(&self, key: &str) -> bool {
        lock(&self.inner.st).external.contains_key(key)
    }

    /// The node attributes of the taints nodes have that the provider lets
    /// through (`tolerate_taints`): the pod scheduler keeps pods that do not
    /// tolerate one off those nodes.
    pub(crate) fn taint_attributes(&self) -> Vec<String> {
        let st = lock(&self.inner.st);
        let mut out: Vec<String> = st
            .nodes
            .values()
            .filter_map(|n| n.view.as_ref())
            .flat_map(|v| v.attributes.keys())
            .filter(|k| k.starts_with(crate::podsched::translate::TAINT_ATTRIBUTE))
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        out
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
            watcher::Config::default().labels(&pods::our_selector(&inner.config)),
            Watch::Pods,
            Inner::pod_apply,
            Inner::pod_gone,
            name_of,
        )));
        // Other pods: bound, not finished, not ours (in any namespace);
        // other Paceline clusters' pods among them (a label that is not
        // there matches `!=`).
        tasks.push(tokio::spawn(watch_loop(
            inner.clone(),
            Api::<Pod>::all(client),
            watcher::Config::default()
                .labels(&format!("{}!={}", pods::CLUSTER, inner.config.cluster_id))
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
                ticker.read_external_ends();
                if last_heartbeat.elapsed() >= ticker.config.heartbeat_interval {
                    last_heartbeat = Instant::now();
                    ticker.heartbeat();
                }
            }
        }));
        // While the API is unreachable, ask it once a second whether it is
        // back: a watch that resumes reports nothing until something
        // changes, and the hosts offer nothing until the API is known back.
        let prober = inner.clone();
        tasks.push(tokio::spawn(async move {
            let probe = kube::api::ListParams::default().labels(&pods::our_selector(&prober.config)).limit(1);
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if lock(&prober.st).api_down_since.is_none() {
                    continue;
                }
                let answered = tokio::time::timeout(Duration::from_secs(2), prober.pods.list_metadata(&probe)).await;
                if matches!(answered, Ok(Ok(_))) {
                    let mut st = prober.st();
                    prober.api_ok(&mut st);
                }
            }
        }));
        Ok(())
    }

    async fn launch(&self, host: &str, launched: Vec<LaunchRequest>) -> Result<(), ProviderError> {
        let inner = &self.inner;
        // Runs of the pod scheduler bind a pod that exists; the rest create one.
        let mut runs = Vec::with_capacity(launched.len());
        let mut bind = Vec::new();
        for req in launched {
            match inner.pod_of(&req.task_id) {
                None => runs.push(req),
                Some(Ok(pod)) => bind.push((req, pod)),
                Some(Err(error)) => {
                    inner.send(ProviderEvent::LaunchRejected { host: host.to_string(), run_id: req.run_id, error })
                }
            }
        }
        if !bind.is_empty() {
            let offers = {
                let st = inner.st();
                st.nodes.get(host).filter(|n| n.connected).and_then(|n| n.view.as_ref()).map(|v| v.offers())
            };
            match offers {
                None => return Err(ProviderError::HostNotConnected { provider: NAME, host: host.to_string() }),
                Some(false) => {
                    for (req, _) in bind {
                        let error = format!("node {host} has taints Paceline does not tolerate");
                        inner.send(ProviderEvent::LaunchRejected { host: host.to_string(), run_id: req.run_id, error });
                    }
                }
                // The Bindings go on in a task of their own: the launch
                // answers once its runs are taken on, so the next placement
                // round is not held back by this one's API calls (decision
                // 0062). How each binding went comes as the run's updates,
                // as it did before.
                Some(true) => {
                    let work = inner.take_binds(host, bind);
                    if !work.is_empty() {
                        let (inner, host) = (self.inner.clone(), host.to_string());
                        tokio::spawn(async move { inner.bind_runs(&host, work).await });
                    }
                }
            }
            if runs.is_empty() {
                return Ok(());
            }
        }
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
            // The kubelet admits `allocatable.pods` unfinished pods; what
            // is past it would be refused there (OutOfpods), so it is here.
            let mut on_node = view.max_pods.map(|_| inner.pods_on(&st, host));
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
                if let (Some(n), Some(max)) = (on_node, view.max_pods)
                    && n >= max
                {
                    inner.send(reject(format!("node {host} has {n} unfinished pods, its allocatable pods: no more")));
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
                on_node = on_node.map(|n| n + 1);
                let mut run = Run::new(
                    pods::pod_name(&req.run_id),
                    None,
                    host.to_string(),
                    req.task_id.clone(),
                    req.spec.resources,
                );
                run.gpu = req.gpu.clone();
                run.ports = ports;
                st.add_run(req.run_id.clone(), run);
                work.push((req.run_id, pod, secret));
            }
            if view.max_pods.is_some() {
                // Full now? The next tick registers it again if so.
                st.dirty.insert(host.to_string());
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
                Ok(()) => match st.runs.get_mut(&run_id) {
                    // Killed while it was being created (the delete found
                    // nothing): the pod just made must not run on.
                    Some(run) if run.kill_requested && run.terminal => {
                        inner.spawn_delete(run.pod.clone(), Some(0));
                    }
                    Some(run) if run.last.is_none() => {
                        // Created bound to its node: starting.
                        inner.update(&run_id, run, RunState::Starting, None, None, None, "", String::new());
                    }
                    _ => {}
                },
                Err(e) => {
                    let message = api_message(&e);
                    if !matches!(e, kube::Error::Api(_)) {
                        unreachable += 1;
                    }
                    first_error.get_or_insert_with(|| message.clone());
                    if st.runs.get(&run_id).is_some_and(|r| r.last.is_none())
                        && let Some(Run { pod, .. }) = st.forget_run(&run_id)
                    {
                        st.dirty.insert(host.to_string());
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
        // A pod Paceline bound but did not create is its owner's: evicted
        // (the Eviction API, which honours its PodDisruptionBudgets), never
        // deleted outright.
        let (pod, evict) = {
            let mut st = inner.st();
            match st.runs.get_mut(run_id) {
                Some(run) if run.terminal || run.pod_gone => return Ok(()),
                Some(run) if run.namespace.is_some() => (run.pod.clone(), run.namespace.clone()),
                Some(run) => {
                    run.kill_requested = true;
                    (run.pod.clone(), None)
                }
                None => (pods::pod_name(run_id), None),
            }
        };
        if let Some(ns) = evict {
            return inner.evict(host, run_id, &ns, &pod, grace_override).await;
        }
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
            if let Some(ns) = run.namespace.clone() {
                // Never deleted (its owner's); the watch counts it as
                // another scheduler's pod when it next sees it.
                let run = st.forget_run(run_id);
                if let Some(run) = run.filter(|_| !gone) {
                    // Still on its node (its owner keeps it): another
                    // scheduler's pod from now on.
                    let host = run.host().to_string();
                    self.inner.count(&mut st, format!("{ns}/{pod}"), host, run.resources, Vec::new());
                }
                return Ok(());
            }
            // Its pod's name stays in `by_pod` until the pod is gone, so
            // that the watch does not take the finished pod for one to adopt.
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
                    let mut run = Run::new(
                        pods::pod_name(&id),
                        None,
                        host.to_string(),
                        pods::task_of(&id).to_string(),
                        Resources::ZERO,
                    );
                    run.seq = unix_ms();
                    run.pod_gone = true;
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
        let (pod, namespace) = {
            let st = self.inner.st();
            st.runs
                .get(run_id)
                .map(|r| (r.pod.clone(), r.namespace.clone()))
                .unwrap_or_else(|| (pods::pod_name(run_id), None))
        };
        let api = match &namespace {
            Some(ns) => Api::namespaced(self.inner.client.clone(), ns),
            None => self.inner.pods.clone(),
        };
        let lp = LogParams {
            // A pod Paceline bound but did not create: its first container's.
            container: namespace.is_none().then(|| pods::CONTAINER.into()),
            limit_bytes: Some(i64::try_from(offset.saturating_add(max_bytes)).unwrap_or(i64::MAX)),
            ..LogParams::default()
        };
        let text = match tokio::time::timeout(self.inner.config.call_timeout, api.logs(&pod, &lp)).await {
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
        if let Some(s) = &secret {
            match self.call("create secret", || self.secrets.create(&pp, s)).await {
                Ok(_) => {}
                Err(e) if is_status(&e, kube::core::Status::is_already_exists) => {}
                Err(e) => return Err(e),
            }
        }
        let created = match self.call("create pod", || self.pods.create(&pp, &pod)).await {
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
            let (pp, patch) = (PatchParams::default(), Patch::Merge(&patch));
            if let Err(e) = self.call("patch secret", || self.secrets.patch(&name, &pp, &patch)).await {
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
