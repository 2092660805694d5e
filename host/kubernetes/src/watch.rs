//! The three watches (nodes; Paceline's pods; every other bound, unfinished
//! pod) and what each event does to the state. A watch that breaks lists
//! again; whatever the new list lacks is handled as deleted.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use paceline_hostmgr::provider::ProviderEvent;
use paceline_model::Resources;
use paceline_model::run::RunState;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::nodes;
use crate::pods;
use crate::state::{Foreign, Inner, Run, St, Watch, unix_ms};
use crate::status;

impl Inner {
    // ---- watch events ------------------------------------------------------

    pub(crate) fn api_ok(&self, st: &mut St) {
        if let Some(since) = st.api_down_since.take() {
            st.api_error_logged = None;
            info!(after_s = since.elapsed().as_secs(), "kubernetes API reachable again");
            // The hosts offer again (registered at the next tick).
            let names: Vec<String> = st.nodes.keys().cloned().collect();
            st.dirty.extend(names);
        }
        if std::mem::take(&mut st.outage_disconnected) {
            // A watch that resumes lists nothing again: every node is told
            // of now (registered again if Ready), not at its next change.
            let mut names: Vec<String> = st.nodes.keys().cloned().collect();
            names.sort();
            for name in names {
                self.sync_node(st, &name);
            }
        }
    }

    pub(crate) fn api_error(&self, st: &mut St, watch: Watch, e: &watcher::Error) {
        let now = Instant::now();
        let unreachable = match e {
            watcher::Error::InitialListFailed(k)
            | watcher::Error::WatchStartFailed(k)
            | watcher::Error::WatchFailed(k) => !matches!(k, kube::Error::Api(_)),
            watcher::Error::WatchError(_) | watcher::Error::NoResourceVersion => false,
        };
        if !unreachable {
            // The API answered (a refusal, an expired resource version): the
            // watch lists again; not an outage.
            if st.api_error_logged.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(30)) {
                st.api_error_logged = Some(now);
                warn!(?watch, error = %e, "kubernetes watch refused; retrying");
            }
            return;
        }
        if st.api_down_since.is_none() {
            // The hosts offer nothing until it answers (registered at the next tick).
            let names: Vec<String> = st.nodes.keys().cloned().collect();
            st.dirty.extend(names);
        }
        let since = *st.api_down_since.get_or_insert(now);
        // Once at the start, then every 30 s: the watches retry far more often.
        if st.api_error_logged.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(30)) {
            st.api_error_logged = Some(now);
            let left = self.config.api_outage_grace.saturating_sub(now.duration_since(since));
            warn!(
                ?watch,
                error = %e,
                down_s = now.duration_since(since).as_secs(),
                "kubernetes API unreachable: retrying; hosts stay up {} s more (api_outage_grace); the hosts \
                 offer nothing meanwhile (nothing is launched)",
                left.as_secs()
            );
        }
    }

    /// Applies one watch event in a hold of its own (the tests' way; the
    /// watches apply theirs in batches, see [`watch_loop`]).
    #[cfg(test)]
    pub(crate) fn on_event<K>(
        &self,
        watch: Watch,
        ev: Event<K>,
        apply: impl Fn(&Self, &mut St, K),
        gone: impl Fn(&Self, &mut St, &str, Option<K>),
        key: impl Fn(&K) -> String,
    ) {
        let mut st = self.st();
        self.on_event_held(&mut st, watch, ev, apply, gone, key);
    }

    /// Applies one watch event with the state already held (a batch of a
    /// watch's events is applied in one hold); `key` names the object for
    /// relists.
    pub(crate) fn on_event_held<K>(
        &self,
        st: &mut St,
        watch: Watch,
        ev: Event<K>,
        apply: impl Fn(&Self, &mut St, K),
        gone: impl Fn(&Self, &mut St, &str, Option<K>),
        key: impl Fn(&K) -> String,
    ) {
        self.api_ok(st);
        let w = watch as usize;
        match ev {
            Event::Init => st.listing[w] = Some(HashSet::new()),
            Event::InitApply(obj) => {
                if let Some(seen) = st.listing[w].as_mut() {
                    seen.insert(key(&obj));
                }
                apply(self, st, obj);
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
                        gone(self, st, &k, None);
                    }
                }
                st.synced[w] = true;
                if !st.started && st.synced.iter().all(|&s| s) {
                    self.begin(st);
                }
            }
            Event::Apply(obj) => apply(self, st, obj),
            Event::Delete(obj) => {
                let k = key(&obj);
                gone(self, st, &k, Some(obj));
            }
        }
    }

    /// Every watch has listed: the manager hears of the nodes, with the
    /// runs found on them, then of what those runs did meanwhile.
    pub(crate) fn begin(&self, st: &mut St) {
        st.started = true;
        let mut names: Vec<String> = st.nodes.keys().cloned().collect();
        names.sort();
        for name in &names {
            self.sync_node(st, name);
        }
        let ids: Vec<String> = st.runs.ids().cloned().collect();
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

    pub(crate) fn node_apply(&self, st: &mut St, node: Node) {
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

    pub(crate) fn node_gone(&self, st: &mut St, name: &str, _last: Option<Node>) {
        let Some(node) = st.nodes.remove(name) else { return };
        if st.started && node.connected {
            info!(node = name, "node deleted; its runs are lost");
            self.send(ProviderEvent::HostDisconnected { host: name.to_string(), reason: "node deleted".into() });
        }
        for id in st.runs.ids_on(name) {
            let Some(run) = st.runs.get_mut(&id).filter(|r| !r.terminal) else { continue };
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

    pub(crate) fn pod_apply(&self, st: &mut St, pod: Pod) {
        let Some(name) = pod.metadata.name.clone() else { return };
        if !pods::is_ours(&self.config, &pod) {
            // The watch selects this cluster's pods; anything else is another's.
            return;
        }
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
                let mut run = Run::new(name.clone(), None, host.clone(), meta.task_id, meta.resources);
                run.gpu = meta.gpu;
                run.ports = meta.ports;
                // Past any seq an earlier process gave it (those started at 1).
                run.seq = unix_ms();
                // The registration reports it running.
                run.last = Some((RunState::Running, None));
                run.adopted = true;
                st.add_run(meta.run_id.clone(), run);
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
        self.observed(started, &run_id, run, o);
    }

    pub(crate) fn pod_gone(&self, st: &mut St, name: &str, last: Option<Pod>) {
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
            self.observed(started, &run_id, run, o);
            return;
        }
        if !started {
            // Deleted before the manager heard of it: it is not reported.
            st.forget_run(&run_id);
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

    pub(crate) fn foreign_key(pod: &Pod) -> String {
        format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""))
    }

    pub(crate) fn foreign_apply(&self, st: &mut St, pod: Pod) {
        let key = Self::foreign_key(&pod);
        if self.external_apply(st, &pod, &key) {
            // Bound by the pod scheduler: the host manager accounts for it.
            self.uncount(st, &key);
            return;
        }
        // Ours are the pods watch's; another Paceline cluster's are counted here.
        let labelled = pods::is_ours(&self.config, &pod);
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        if labelled || node.is_empty() || phase == "Succeeded" || phase == "Failed" {
            self.uncount(st, &key);
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
        self.count(st, key, node, usage, ports);
    }

    /// Counts a pod against its node (instead of what it was counted as).
    pub(crate) fn count(&self, st: &mut St, key: String, node: String, usage: Resources, ports: Vec<u16>) {
        self.uncount(st, &key);
        let sum = st.foreign_by_node.entry(node.clone()).or_insert(Resources::ZERO);
        *sum = sum.saturating_add(&usage);
        *st.foreign_pods_by_node.entry(node.clone()).or_insert(0) += 1;
        st.dirty.insert(node.clone());
        st.foreign.insert(key, Foreign { node, usage, ports });
    }

    pub(crate) fn foreign_gone(&self, st: &mut St, key: &str, _last: Option<Pod>) {
        self.external_gone(st, key);
        self.uncount(st, key);
    }

    /// Stops counting a pod against its node.
    pub(crate) fn uncount(&self, st: &mut St, key: &str) {
        let Some(old) = st.foreign.remove(key) else { return };
        if let Some(sum) = st.foreign_by_node.get_mut(&old.node) {
            *sum = sum.saturating_sub(&old.usage);
            if *sum == Resources::ZERO {
                st.foreign_by_node.remove(&old.node);
            }
        }
        if let Some(n) = st.foreign_pods_by_node.get_mut(&old.node) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.foreign_pods_by_node.remove(&old.node);
            }
        }
        st.dirty.insert(old.node);
    }
}

// ---- watches ---------------------------------------------------------------

pub(crate) async fn watch_loop<K>(
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
    WatchReader::start(api, config)
        .for_each_batch(|items| {
            let mut st = inner.st();
            for item in items {
                match item {
                    Ok(ev) => inner.on_event_held(&mut st, watch, ev, apply, gone, key),
                    Err(e) => inner.api_error(&mut st, watch, &e),
                }
            }
        })
        .await;
}

/// The most events of one watch applied in one hold of the state.
const WATCH_BATCH: usize = 1024;

/// A watch read on a task of its own, its events handed on in batches.
///
/// Why: the API server closes a watch whose reader falls behind (its
/// buffer for the watcher fills), and while one watcher blocks, the API
/// server's cache waits on it before it dispatches the next event to every
/// other watcher too (kwok's, a scheduler's). A watch polled by the code
/// that applies its events stops being read whenever that code waits for
/// the provider's state; read apart, it is drained as fast as it arrives
/// and each batch is applied in one hold. Unbounded: the events are already
/// decoded in memory either way, and the API server bounds their rate.
/// Dropping the reader stops the watch.
pub(crate) struct WatchReader<K> {
    rx: mpsc::UnboundedReceiver<Result<Event<K>, watcher::Error>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> WatchReader<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    pub(crate) fn start(api: Api<K>, config: watcher::Config) -> WatchReader<K> {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut stream = watcher::watcher(api, config).default_backoff().boxed();
            while let Some(item) = stream.next().await {
                if tx.send(item).is_err() {
                    break;
                }
            }
        });
        WatchReader { rx, task }
    }

    /// Waits for at least one event, then takes every one waiting (at most
    /// [`WATCH_BATCH`]) into `batch`; 0 once the watch has ended.
    pub(crate) async fn next_batch(&mut self, batch: &mut Vec<Result<Event<K>, watcher::Error>>) -> usize {
        self.rx.recv_many(batch, WATCH_BATCH).await
    }

    /// Hands each batch to `apply` (which takes the state once for all of
    /// it) until the watch ends.
    pub(crate) async fn for_each_batch(
        mut self,
        mut apply: impl FnMut(std::vec::Drain<'_, Result<Event<K>, watcher::Error>>),
    ) {
        let mut batch = Vec::new();
        while self.next_batch(&mut batch).await > 0 {
            apply(batch.drain(..));
        }
    }

    #[cfg(test)]
    pub(crate) fn abort_handle(&self) -> tokio::task::AbortHandle {
        self.task.abort_handle()
    }
}

impl<K> Drop for WatchReader<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) fn name_of<K: kube::Resource>(k: &K) -> String {
    k.meta().name.clone().unwrap_or_default()
}
