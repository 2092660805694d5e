//! Paceline's runs as the provider tracks them ([`Run`]), kept in [`Runs`]:
//! by run id, and indexed by host, so that what a node holds (its
//! registration's runs, its unfinished pods, its ports in use) is read from
//! that node's runs, not from a scan of every run on every node.
//!
//! A run's host is set when it is added and never changes (a pod bound to a
//! node stays there): [`Run::host`] has no setter, so the index cannot go
//! stale through [`Runs::get_mut`]. Adding a run under an id that exists
//! replaces it (its host too, if it differs).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Instant;

use paceline_model::Resources;
use paceline_model::gpu::GpuGrant;
use paceline_model::run::{RunState, RunUpdate};

use crate::status::Observed;

/// One of Paceline's runs, from its launch (or its pod's adoption) until
/// its end is acknowledged.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) pod: String,
    /// The namespace of a pod Paceline bound but did not create (pod
    /// scheduler, decision 0055); `None`: a pod of the task namespace.
    pub(crate) namespace: Option<String>,
    /// Private: the index by host is keyed by it.
    host: String,
    pub(crate) task_id: String,
    pub(crate) resources: Resources,
    pub(crate) gpu: GpuGrant,
    pub(crate) ports: BTreeMap<String, u16>,
    pub(crate) seq: u64,
    /// State and health last reported.
    pub(crate) last: Option<(RunState, Option<bool>)>,
    pub(crate) terminal: bool,
    pub(crate) kill_requested: bool,
    /// Found as a pod, not launched by this process.
    pub(crate) adopted: bool,
    /// What the pod showed before the manager could be told (start-up).
    pub(crate) latest: Option<Observed>,
    pub(crate) pod_gone: bool,
    pub(crate) unacked: VecDeque<(RunUpdate, Instant)>,
}

impl Run {
    /// A run of pod `pod` on `host`, nothing reported yet; the callers set
    /// what differs (ports, GPUs, an adopted run's seq and state).
    pub(crate) fn new(
        pod: String,
        namespace: Option<String>,
        host: String,
        task_id: String,
        resources: Resources,
    ) -> Self {
        Run {
            pod,
            namespace,
            host,
            task_id,
            resources,
            gpu: GpuGrant::default(),
            ports: BTreeMap::new(),
            seq: 0,
            last: None,
            terminal: false,
            kill_requested: false,
            adopted: false,
            latest: None,
            pod_gone: false,
            unacked: VecDeque::new(),
        }
    }

    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// Reported among the host's runs at registration: live, or adopted
    /// with an end the manager has not acknowledged (so that it can hold
    /// the end until it knows whether it expects the run).
    pub(crate) fn reported(&self) -> bool {
        !self.terminal || (self.adopted && !self.unacked.is_empty())
    }

    /// An unfinished pod on its node (the kubelet's pod limit counts it).
    pub(crate) fn holds_a_pod(&self) -> bool {
        !self.terminal && !self.pod_gone
    }
}

/// The runs by id, with an index by host.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    by_id: HashMap<String, Run>,
    by_host: HashMap<String, HashSet<String>>,
}

impl Runs {
    /// Adds `run` under `id`, replacing (and returning) a run of that id.
    pub(crate) fn insert(&mut self, id: String, run: Run) -> Option<Run> {
        self.by_host.entry(run.host.clone()).or_default().insert(id.clone());
        let old = self.by_id.insert(id.clone(), run)?;
        if self.by_id.get(&id).is_some_and(|r| r.host != old.host) {
            self.unindex(&old.host, &id);
        }
        Some(old)
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<Run> {
        let run = self.by_id.remove(id)?;
        self.unindex(&run.host, id);
        Some(run)
    }

    fn unindex(&mut self, host: &str, id: &str) {
        if let Entry::Occupied(mut e) = self.by_host.entry(host.to_string()) {
            e.get_mut().remove(id);
            if e.get().is_empty() {
                e.remove();
            }
        }
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Run> {
        self.by_id.get(id)
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut Run> {
        self.by_id.get_mut(id)
    }

    pub(crate) fn contains_key(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(crate) fn ids(&self) -> impl Iterator<Item = &String> {
        self.by_id.keys()
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Run> {
        self.by_id.values_mut()
    }

    /// The runs on `host`, by id (in no order).
    pub(crate) fn on<'a>(&'a self, host: &str) -> impl Iterator<Item = (&'a String, &'a Run)> + 'a {
        self.by_host.get(host).into_iter().flatten().filter_map(|id| self.by_id.get_key_value(id))
    }

    /// The ids of the runs on `host`, sorted.
    pub(crate) fn ids_on(&self, host: &str) -> Vec<String> {
        let mut ids: Vec<String> = self.on(host).map(|(id, _)| id.clone()).collect();
        ids.sort();
        ids
    }

    /// Whether the index agrees with the runs (each run under its host,
    /// nothing else there): the tests check it after every change.
    #[cfg(test)]
    pub(crate) fn index_agrees(&self) -> Result<(), String> {
        let mut scanned: HashMap<&str, Vec<&str>> = HashMap::new();
        for (id, r) in &self.by_id {
            scanned.entry(r.host.as_str()).or_default().push(id.as_str());
        }
        let mut indexed: HashMap<&str, Vec<&str>> = HashMap::new();
        for (host, ids) in &self.by_host {
            if ids.is_empty() {
                return Err(format!("host {host}: an empty entry left in the index"));
            }
            indexed.insert(host.as_str(), ids.iter().map(String::as_str).collect());
        }
        for v in scanned.values_mut().chain(indexed.values_mut()) {
            v.sort_unstable();
        }
        if scanned == indexed { Ok(()) } else { Err(format!("a full scan {scanned:?}, the index {indexed:?}")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(host: &str) -> Run {
        Run::new("p".into(), None, host.into(), "t".into(), Resources::ZERO)
    }

    #[test]
    fn the_index_by_host_agrees_with_a_full_scan_after_adds_moves_and_removals() {
        let mut runs = Runs::default();
        for i in 0..30 {
            runs.insert(format!("r{i}"), run(&format!("n{}", i % 4)));
            runs.index_agrees().expect("after an add");
        }
        assert_eq!(runs.ids_on("n1"), ["r1", "r13", "r17", "r21", "r25", "r29", "r5", "r9"]);
        // The same id added again on another host (a run re-registered
        // elsewhere, an adoption over a launch): it moves.
        for i in (0..30).step_by(3) {
            let old = runs.insert(format!("r{i}"), run("n9"));
            assert!(old.is_some());
            runs.index_agrees().expect("after a move");
        }
        assert!(runs.ids_on("n9").contains(&"r3".to_string()));
        assert!(!runs.ids_on("n3").contains(&"r3".to_string()), "no longer under its old host");
        // Added again on the same host: once.
        runs.insert("r1".into(), run("n1"));
        assert_eq!(runs.on("n1").filter(|(id, _)| *id == "r1").count(), 1);
        runs.index_agrees().expect("after a re-add");
        for i in (0..30).step_by(2) {
            runs.remove(&format!("r{i}"));
            runs.index_agrees().expect("after a removal");
        }
        assert!(runs.remove("r0").is_none(), "removed twice: nothing");
        for i in 0..30 {
            runs.remove(&format!("r{i}"));
        }
        runs.index_agrees().expect("all removed");
        assert_eq!(runs.len(), 0);
        assert!(runs.on("n1").next().is_none());
    }
}
