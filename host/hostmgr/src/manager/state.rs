//! The manager's in-memory state and every rule that changes it, without
//! I/O: methods take `now` and push [`Effect`]s (provider calls, writes)
//! that the async shell in `mod.rs` carries out after the lock is dropped.
//! Events for the subscriber are sent here, under the lock, so their order
//! is the order of the changes.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use paceline_model::Resources;
use paceline_model::gpu::{self, GpuDevice, GpuGrant, GpuSlot};
use paceline_model::host::{HostRecord, MaintenanceState};
use paceline_model::run::{LaunchRequest, RunState, RunUpdate};
use paceline_model::task::TaskId;
use paceline_model::view::HostView;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::error::HostError;
use crate::event::HostEvent;
use crate::lease::{JobHosts, Lease, LeaseEntry, LeaseId, LeaseRequest};
use crate::manager::{ExpectedRun, HostInfo, ManagerConfig};
use crate::provider::{HostRegistration, MeasuredRun, MeasuredUse, ProviderEvent, RunHolding, RunUsage};

/// Work for the shell, done outside the lock.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Tell the provider an update (and all before it) is handled.
    Ack { host: String, run_id: String, seq: u64 },
    /// Stop a run the manager does not want.
    Kill { host: String, run_id: String },
    /// Write a host's durable record, as it is in memory when written.
    Persist(String),
    /// A lost host is heard from again: have it register anew (see
    /// `Provider::reregister`).
    Reregister(String),
}

/// Whether the provider reaches a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Known (from storage or expectations) but not registered since start.
    Never,
    /// Registered and heartbeating.
    Up,
    /// The provider lost its connection; runs are kept until the deadline.
    Disconnected,
    /// Past the deadline: its runs were declared LOST.
    Lost,
}

#[derive(Debug)]
pub(crate) struct HostEntry {
    /// Shared with the leases that hold it; changed through `Arc::make_mut`.
    pub view: Arc<HostView>,
    pub agent_id: Option<String>,
    pub state: MaintenanceState,
    pub liveness: Liveness,
    pub last_seen_ms: u64,
    pub registered_at_ms: u64,
    pub lease: Option<LeaseId>,
    /// Runs that hold resources here (live, or orphans being killed).
    pub runs: HashSet<Id>,
    /// How many runs carry each `key=value` label (the view keeps the set).
    label_counts: HashMap<String, u32>,
    /// From storage or a registration: worth a record.
    pub durable: bool,
    /// When a lost host that still heartbeats was last asked to register
    /// again; cleared when it registers. Asked at most once per heartbeat
    /// timeout, so the heartbeats already queued from its old stream do not
    /// end the new one too.
    reregister_asked_ms: Option<u64>,
}

#[derive(Debug)]
struct Pending {
    update: RunUpdate,
    sent_at_ms: u64,
}

#[derive(Debug)]
pub(crate) struct RunEntry {
    host: u32,
    /// Shared with `State::live_task_runs`' key.
    task_id: Id,
    resources: Resources,
    /// The GPU devices it holds on its host.
    gpu: GpuGrant,
    labels: Vec<String>,
    /// `None` until the first update: launched, not yet confirmed.
    state: Option<RunState>,
    launched_at_ms: u64,
    terminal: bool,
    /// Highest seq handled (from the provider or made up here).
    last_seq: u64,
    /// Highest seq the provider sent.
    provider_seq: u64,
    /// Highest seq the provider was told is handled.
    provider_acked: u64,
    /// Highest seq the subscriber acknowledged.
    acked_seq: u64,
    pending: VecDeque<Pending>,
    /// Reported by a host before expectations were loaded; killed unless expected.
    orphan: bool,
    /// The latest use its host measured (agents only; heartbeats carry it).
    used: Option<MeasuredUse>,
    /// Updates the host sent for an orphan before expectations were loaded,
    /// in seq order, neither delivered nor acknowledged: if the owner expects
    /// the run they are delivered at adoption. (Acknowledging them then, as
    /// for an orphan being killed, made the agent forget a RUNNING the owner
    /// never heard: a task stayed LAUNCHING for ever after a server restart.)
    held: Vec<RunUpdate>,
}

#[derive(Debug)]
pub(crate) struct State {
    pub provider: &'static str,
    pub config: ManagerConfig,
    hosts: Vec<HostEntry>,
    by_name: HashMap<String, u32>,
    /// Boxed: a hash table keeps up to twice its length in slots, and
    /// more while it grows; a slot of a boxed entry is 32 bytes instead of
    /// the entry's ~250 (a million runs: about 0.3 GB less at the peak).
    runs: HashMap<Id, Box<RunEntry>>,
    /// Task id → the run holding resources for it: a task has one live run.
    live_task_runs: HashMap<Id, Id>,
    leases: BTreeMap<LeaseId, LeaseEntry>,
    next_lease: u64,
    cursor: usize,
    expectations_loaded: bool,
    subscriber: Option<mpsc::UnboundedSender<HostEvent>>,
    /// No host that is not yet lost can be overdue before this time: `tick`
    /// scans the hosts only after it, then sets it to the earliest deadline.
    /// Lowered whenever a host is seen or created (so a clock that steps
    /// back cannot delay a loss).
    hosts_due_ms: u64,
    /// No run can time out unconfirmed, and no update is due again, before
    /// this time: `tick` scans the runs only from it on. Lowered whenever a
    /// launch is recorded or an update sent.
    runs_due_ms: u64,
    /// Job → host index → tasks of the job holding resources there: the
    /// same counts as the views' `job_counts`, indexed by job so that a lease
    /// answers "where does this job already run" without a lookup per host.
    job_hosts: HashMap<String, BTreeMap<u32, u32>>,
    /// Runs holding resources whose host measured their use: what
    /// [`State::measured_use`] walks at a metrics scrape, instead of every
    /// run. A run leaves it when its resources are freed.
    measured: HashSet<Id>,
}

/// A run or task id, shared by the tables that name it (a run's id is in
/// three of them, its task's in two): one allocation each, not five.
type Id = Arc<str>;

/// The job of a task id `<job>-<instance>` ([`TaskId::split`]); a malformed
/// one (from a provider) is its own job.
fn job_of(task_id: &str) -> &str {
    TaskId::split(task_id).map_or(task_id, |(job, _)| job)
}

/// The first resource kind in which `need` exceeds `free`.
fn over(need: &Resources, free: &Resources) -> Option<(&'static str, u64, u64)> {
    [
        ("cpu_millis", need.cpu_millis, free.cpu_millis),
        ("memory_mib", need.memory_mib, free.memory_mib),
        ("disk_mib", need.disk_mib, free.disk_mib),
        ("gpu_milli", need.gpu_milli, free.gpu_milli),
        ("ports", need.ports, free.ports),
    ]
    .into_iter()
    .find(|(_, n, f)| n > f)
}

impl State {
    pub fn new(provider: &'static str, config: ManagerConfig) -> Self {
        State {
            provider,
            config,
            hosts: Vec::new(),
            by_name: HashMap::new(),
            runs: HashMap::new(),
            live_task_runs: HashMap::new(),
            leases: BTreeMap::new(),
            next_lease: 1,
            cursor: 0,
            expectations_loaded: false,
            subscriber: None,
            hosts_due_ms: 0,
            runs_due_ms: 0,
            job_hosts: HashMap::new(),
            measured: HashSet::new(),
        }
    }

    // ---- inventory ---------------------------------------------------------

    fn host_slot(&mut self, name: &str, now: u64) -> u32 {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let i = self.hosts.len() as u32;
        self.by_name.insert(name.to_string(), i);
        self.hosts.push(HostEntry {
            view: Arc::new(HostView::new(name, Resources::ZERO)),
            agent_id: None,
            state: MaintenanceState::Up,
            liveness: Liveness::Never,
            last_seen_ms: now,
            registered_at_ms: now,
            lease: None,
            runs: HashSet::new(),
            label_counts: HashMap::new(),
            durable: false,
            reregister_asked_ms: None,
        });
        self.seen_at(now);
        i
    }

    /// Loads a stored record (at start, before any registration).
    pub fn load_record(&mut self, r: HostRecord, now: u64) {
        let i = self.host_slot(&r.hostname, now);
        let h = &mut self.hosts[i as usize];
        let view = Arc::make_mut(&mut h.view);
        view.total = r.total;
        view.attributes = r.attributes;
        h.agent_id = r.agent_id;
        h.state = r.state;
        h.registered_at_ms = r.registered_at_ms;
        h.durable = true;
        self.set_devices(i, &r.gpus);
    }

    /// Sets host `i`'s GPU devices (the listed ones, or devices 0..n of its
    /// total and `gpu_model` attribute) and what its live runs hold of them.
    fn set_devices(&mut self, i: u32, listed: &[GpuDevice]) {
        let h = &self.hosts[i as usize];
        let devices = gpu::devices_of(&h.view.total, listed, h.view.attributes.get("gpu_model").map(String::as_str));
        let unchanged =
            h.view.gpus.len() == devices.len() && h.view.gpus.iter().zip(&devices).all(|(s, d)| s.device == *d);
        if unchanged {
            return;
        }
        let mut slots: Vec<GpuSlot> = devices.into_iter().map(|device| GpuSlot { device, used_milli: 0 }).collect();
        for run in &h.runs {
            if let Some(r) = self.runs.get(run) {
                gpu::apply(&mut slots, &r.gpu, false);
            }
        }
        let h = &mut self.hosts[i as usize];
        Arc::make_mut(&mut h.view).gpus = slots;
    }

    /// The durable record of a host as it is now.
    pub fn record_of(&self, host: &str, now: u64) -> Option<HostRecord> {
        self.by_name.get(host).map(|&i| self.record(i, now))
    }

    fn record(&self, i: u32, now: u64) -> HostRecord {
        let h = &self.hosts[i as usize];
        HostRecord {
            hostname: h.view.name.clone(),
            provider: self.provider.to_string(),
            agent_id: h.agent_id.clone(),
            address: None,
            total: h.view.total,
            attributes: h.view.attributes.clone(),
            gpus: h.view.gpus.iter().map(|s| s.device.clone()).collect(),
            state: h.state,
            registered_at_ms: h.registered_at_ms,
            updated_at_ms: now,
        }
    }

    fn emit(&mut self, ev: HostEvent) {
        if let Some(tx) = &self.subscriber
            && tx.send(ev).is_err()
        {
            self.subscriber = None;
        }
    }

    pub fn subscribe(&mut self, now: u64) -> mpsc::UnboundedReceiver<HostEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        // Everything not yet acknowledged goes to the new subscriber first.
        let mut replay: Vec<&Pending> = self.runs.values().flat_map(|r| r.pending.iter()).collect();
        replay.sort_by(|a, b| {
            (a.sent_at_ms, &a.update.run_id, a.update.seq).cmp(&(b.sent_at_ms, &b.update.run_id, b.update.seq))
        });
        for p in replay {
            let _ = tx.send(HostEvent::Run(p.update.clone()));
        }
        for r in self.runs.values_mut() {
            for p in &mut r.pending {
                p.sent_at_ms = now;
            }
        }
        self.runs_due_by(now.saturating_add(self.config.redeliver_after_ms));
        self.subscriber = Some(tx);
        rx
    }

    pub fn census(&self) -> Vec<paceline_model::pending::CensusHost> {
        self.hosts
            .iter()
            .map(|h| paceline_model::pending::CensusHost {
                view: h.view.clone(),
                state: h.state,
                reachable: h.liveness == Liveness::Up,
            })
            .collect()
    }

    pub fn any_host(
        &self,
        pred: &mut dyn FnMut(&paceline_model::view::HostView, paceline_model::host::MaintenanceState, bool) -> bool,
    ) -> bool {
        self.hosts.iter().any(|h| pred(&h.view, h.state, h.liveness == Liveness::Up))
    }

    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// Keeps the use a host measured of its runs; a run id that is not a
    /// live run on that host is ignored (a host speaks for its own runs).
    fn record_usage(&mut self, host: u32, usage: Vec<RunUsage>) {
        for u in usage {
            if let Some((id, r)) = self.runs.get_key_value(u.run_id.as_str())
                && r.host == host
                && !r.terminal
                && self.hosts[host as usize].runs.contains(id)
            {
                let id = id.clone();
                if let Some(r) = self.runs.get_mut(&id) {
                    r.used = Some(u.used);
                }
                self.measured.insert(id);
            }
        }
    }

    /// Every live run whose host measured its use.
    pub fn measured_use(&self) -> Vec<MeasuredRun> {
        self.measured
            .iter()
            .filter_map(|id| {
                let r = self.runs.get(id).filter(|r| !r.terminal)?;
                Some(MeasuredRun {
                    run_id: id.to_string(),
                    task_id: r.task_id.to_string(),
                    host: self.hosts[r.host as usize].view.name.clone(),
                    reserved: r.resources,
                    used: r.used?,
                })
            })
            .collect()
    }

    /// What a live run holds on its host and its latest measured use.
    pub fn run_holding(&self, run_id: &str) -> Option<RunHolding> {
        let r = self.runs.get(run_id).filter(|r| !r.terminal)?;
        Some(RunHolding { host: self.hosts[r.host as usize].view.name.clone(), reserved: r.resources, used: r.used })
    }

    pub fn host_info(&self, name: &str) -> Option<HostInfo> {
        self.by_name.get(name).map(|&i| self.info(i))
    }

    pub fn hosts_info(&self) -> Vec<HostInfo> {
        (0..self.hosts.len() as u32).map(|i| self.info(i)).collect()
    }

    fn info(&self, i: u32) -> HostInfo {
        let h = &self.hosts[i as usize];
        let mut runs: Vec<String> = h.runs.iter().map(|id| id.to_string()).collect();
        runs.sort();
        HostInfo {
            view: HostView::clone(&h.view),
            agent_id: h.agent_id.clone(),
            state: h.state,
            reachable: h.liveness == Liveness::Up,
            last_heartbeat_ms: h.last_seen_ms,
            lease: h.lease,
            runs,
        }
    }

    pub fn run_host(&self, run_id: &str) -> Result<Option<String>, HostError> {
        let r = self.runs.get(run_id).ok_or_else(|| HostError::UnknownRun(run_id.to_string()))?;
        if r.terminal {
            return Ok(None);
        }
        let h = &self.hosts[r.host as usize];
        if h.liveness != Liveness::Up {
            return Err(HostError::HostUnreachable(h.view.name.clone()));
        }
        Ok(Some(h.view.name.clone()))
    }

    // ---- allocation --------------------------------------------------------

    fn hold(&mut self, run_id: &str) {
        let Some((id, r)) = self.runs.get_key_value(run_id) else { return };
        self.live_task_runs.insert(r.task_id.clone(), id.clone());
        let h = &mut self.hosts[r.host as usize];
        h.runs.insert(id.clone());
        if h.liveness == Liveness::Never {
            // A host never seen becomes one that can be lost (see `tick`).
            self.hosts_due_ms = 0;
        }
        // Copies the view only if a lease still holds this one.
        let view = Arc::make_mut(&mut h.view);
        view.allocated = view.allocated.saturating_add(&r.resources);
        gpu::apply(&mut view.gpus, &r.gpu, false);
        let job = r.job();
        *view.job_counts.entry(job.to_string()).or_insert(0) += 1;
        *self.job_hosts.entry(job.to_string()).or_default().entry(r.host).or_insert(0) += 1;
        for l in &r.labels {
            let n = h.label_counts.entry(l.clone()).or_insert(0);
            *n += 1;
            if *n == 1 {
                view.task_labels.insert(l.clone());
            }
        }
    }

    /// Gives a run's resources back; moves a draining host on once it is empty.
    fn free(&mut self, run_id: &str, fx: &mut Vec<Effect>) {
        let Some(r) = self.runs.get(run_id) else { return };
        let i = r.host;
        let h = &mut self.hosts[i as usize];
        if !h.runs.remove(run_id) {
            return;
        }
        self.measured.remove(run_id);
        if self.live_task_runs.get(&r.task_id).is_some_and(|live| &**live == run_id) {
            self.live_task_runs.remove(&r.task_id);
        }
        let h = &mut self.hosts[i as usize];
        let view = Arc::make_mut(&mut h.view);
        view.allocated = view.allocated.saturating_sub(&r.resources);
        gpu::apply(&mut view.gpus, &r.gpu, true);
        if let Some(n) = view.job_counts.get_mut(r.job()) {
            *n -= 1;
            if *n == 0 {
                view.job_counts.remove(r.job());
            }
        }
        if let Some(on) = self.job_hosts.get_mut(r.job()) {
            if let Some(n) = on.get_mut(&i) {
                *n -= 1;
                if *n == 0 {
                    on.remove(&i);
                }
            }
            if on.is_empty() {
                self.job_hosts.remove(r.job());
            }
        }
        for l in &r.labels {
            if let Some(n) = h.label_counts.get_mut(l) {
                *n -= 1;
                if *n == 0 {
                    h.label_counts.remove(l);
                    view.task_labels.remove(l);
                }
            }
        }
        if h.state == MaintenanceState::Draining && h.runs.is_empty() {
            self.drained(i, fx);
        }
    }

    fn drained(&mut self, i: u32, fx: &mut Vec<Effect>) {
        self.change_state(i, MaintenanceState::Drained, fx);
        if self.config.auto_down_when_drained {
            self.change_state(i, MaintenanceState::Down, fx);
        }
    }

    fn change_state(&mut self, i: u32, to: MaintenanceState, fx: &mut Vec<Effect>) {
        let h = &mut self.hosts[i as usize];
        let from = h.state;
        h.state = to;
        let host = h.view.name.clone();
        let mut runs: Vec<String> = if to == MaintenanceState::Draining {
            h.runs.iter().map(|id| id.to_string()).collect()
        } else {
            Vec::new()
        };
        runs.sort();
        info!(host, %from, %to, "maintenance state changed");
        fx.push(Effect::Persist(host.clone()));
        self.emit(HostEvent::HostStateChanged { host, from, to, runs });
    }

    // ---- run updates -------------------------------------------------------

    /// Records an update, frees resources when it ends the run, and sends it on.
    fn deliver(&mut self, update: RunUpdate, now: u64, fx: &mut Vec<Effect>) {
        let Some(r) = self.runs.get_mut(update.run_id.as_str()) else { return };
        r.last_seq = update.seq;
        r.state = Some(update.state);
        let ended = update.state.is_terminal() && !r.terminal;
        r.terminal |= update.state.is_terminal();
        r.pending.push_back(Pending { update: update.clone(), sent_at_ms: now });
        self.runs_due_by(now.saturating_add(self.config.redeliver_after_ms));
        let id = update.run_id.clone();
        self.emit(HostEvent::Run(update));
        if ended {
            self.free(&id, fx);
        }
    }

    /// An update the manager makes up (LOST, launch rejected): next seq of the run.
    fn synthesize(
        &mut self,
        run_id: &str,
        state: RunState,
        reason: &str,
        message: String,
        now: u64,
        fx: &mut Vec<Effect>,
    ) {
        let Some(r) = self.runs.get(run_id) else { return };
        if r.terminal {
            return;
        }
        let update = RunUpdate {
            host: self.hosts[r.host as usize].view.name.clone(),
            run_id: run_id.to_string(),
            task_id: r.task_id.to_string(),
            seq: r.last_seq + 1,
            state,
            healthy: None,
            exit_code: None,
            signal: None,
            reason: reason.to_string(),
            message,
            at_ms: now,
            ports: BTreeMap::new(),
        };
        debug!(run_id, reason, "synthesized {state}");
        self.deliver(update, now, fx);
    }

    fn on_run_update(&mut self, u: RunUpdate, now: u64, fx: &mut Vec<Effect>) {
        let ack = |fx: &mut Vec<Effect>, u: &RunUpdate| {
            fx.push(Effect::Ack { host: u.host.clone(), run_id: u.run_id.clone(), seq: u.seq })
        };
        let Some(r) = self.runs.get_mut(u.run_id.as_str()) else {
            // Finished and acknowledged, or never ours: nobody is waiting for it.
            ack(fx, &u);
            return;
        };
        if self.hosts[r.host as usize].view.name != u.host {
            warn!(run_id = u.run_id, host = u.host, "update from a host the run is not on; dropped");
            ack(fx, &u);
            return;
        }
        r.provider_seq = r.provider_seq.max(u.seq);
        // Any word from a host shows it is alive.
        let h = &mut self.hosts[r.host as usize];
        if h.liveness == Liveness::Up {
            h.last_seen_ms = now;
            self.hosts_due_ms = self.hosts_due_ms.min(now.saturating_add(self.config.heartbeat_timeout_ms));
        }
        if u.seq <= r.last_seq {
            // A duplicate: acknowledge again if the subscriber already has.
            if u.seq <= r.acked_seq {
                r.provider_acked = r.provider_acked.max(u.seq);
                ack(fx, &u);
            }
            return;
        }
        if r.orphan && !self.expectations_loaded {
            // Held until the owner says whether it expects the run (see `expect_runs`).
            if r.held.last().is_none_or(|h| h.seq < u.seq) {
                r.held.push(u);
            }
            return;
        }
        if r.orphan || r.terminal {
            // An orphan being killed, or a run already declared LOST: not the subscriber's business.
            r.last_seq = u.seq;
            r.provider_acked = u.seq;
            ack(fx, &u);
            if u.state.is_terminal() {
                let id = u.run_id.clone();
                self.free(&id, fx);
                if self.runs.get(id.as_str()).is_some_and(|r| r.pending.is_empty()) {
                    self.runs.remove(id.as_str());
                }
            }
            return;
        }
        self.deliver(u, now, fx);
    }

    /// Returns the host and seq to acknowledge to the provider, if any.
    pub fn acknowledge(&mut self, run_id: &str, seq: u64) -> Option<(String, u64)> {
        let r = self.runs.get_mut(run_id)?;
        while r.pending.front().is_some_and(|p| p.update.seq <= seq) {
            r.pending.pop_front();
        }
        r.acked_seq = r.acked_seq.max(seq);
        let to_provider = seq.min(r.provider_seq);
        let upstream = if to_provider > r.provider_acked {
            r.provider_acked = to_provider;
            Some((self.hosts[r.host as usize].view.name.clone(), to_provider))
        } else {
            None
        };
        if r.terminal && r.pending.is_empty() {
            self.runs.remove(run_id);
        } else if r.pending.is_empty() {
            // A running task keeps no capacity for updates it no longer
            // holds: about 800 bytes a run, 0.8 GB at a million runs.
            r.pending = VecDeque::new();
        }
        upstream
    }

    // ---- provider events ---------------------------------------------------

    pub fn apply(&mut self, ev: ProviderEvent, now: u64, fx: &mut Vec<Effect>) {
        match ev {
            ProviderEvent::RunUpdate(u) => self.on_run_update(u, now, fx),
            ProviderEvent::Usage { host, usage } => {
                if let Some(&i) = self.by_name.get(&host) {
                    self.record_usage(i, usage);
                }
            }
            ProviderEvent::Heartbeat { host } => {
                let Some(&i) = self.by_name.get(&host) else { return };
                let timeout = self.config.heartbeat_timeout_ms;
                let h = &mut self.hosts[i as usize];
                match h.liveness {
                    Liveness::Up => {
                        h.last_seen_ms = now;
                        self.seen_at(now);
                    }
                    // Its heartbeats were late, not gone (a stalled manager,
                    // a slow network): the connection stayed open. Its runs
                    // were declared LOST, so taking it back needs what it
                    // runs now, which only a registration reports: it is
                    // asked to register again, as a reconnecting agent does.
                    Liveness::Lost => {
                        if h.reregister_asked_ms.is_none_or(|at| now.saturating_sub(at) >= timeout) {
                            h.reregister_asked_ms = Some(now);
                            info!(host, "a lost host heartbeats again; asking it to register again");
                            fx.push(Effect::Reregister(host));
                        }
                    }
                    Liveness::Never | Liveness::Disconnected => {}
                }
            }
            ProviderEvent::HostRegistered(r) => self.on_register(r, now, fx),
            ProviderEvent::HostDisconnected { host, reason } => {
                let Some(&i) = self.by_name.get(&host) else { return };
                if self.hosts[i as usize].liveness != Liveness::Up {
                    return;
                }
                self.hosts[i as usize].liveness = Liveness::Disconnected;
                self.unlease(i);
                info!(host, reason, "host disconnected");
                self.emit(HostEvent::HostLeft { host, reason });
            }
            ProviderEvent::LaunchRejected { host, run_id, error } => {
                if self.runs.get(run_id.as_str()).is_some_and(|r| r.state.is_none()) {
                    warn!(host, run_id, error, "launch rejected");
                    self.synthesize(&run_id, RunState::Failed, "LAUNCH_REJECTED", error, now, fx);
                }
            }
            ProviderEvent::HostDrainRequested { host, reason } => {
                let up = self.by_name.get(&host).is_some_and(|&i| self.hosts[i as usize].state == MaintenanceState::Up);
                if up {
                    info!(host, reason, "the provider asks for a drain");
                    if let Err(e) = self.set_maintenance(&host, MaintenanceState::Draining, fx) {
                        warn!(host, error = %e, "drain requested by the provider not applied");
                    }
                }
            }
        }
    }

    fn on_register(&mut self, r: HostRegistration, now: u64, fx: &mut Vec<Effect>) {
        let i = self.host_slot(&r.hostname, now);
        let h = &mut self.hosts[i as usize];
        let changed = !h.durable
            || h.view.total != r.total
            || h.view.attributes != r.attributes
            || h.agent_id.as_deref() != Some(r.agent_id.as_str());
        if !h.durable {
            h.registered_at_ms = now;
        }
        let view = Arc::make_mut(&mut h.view);
        view.total = r.total;
        view.attributes = r.attributes;
        h.agent_id = Some(r.agent_id);
        h.liveness = Liveness::Up;
        h.reregister_asked_ms = None;
        h.last_seen_ms = now;
        h.durable = true;
        let before: Vec<GpuDevice> = self.hosts[i as usize].view.gpus.iter().map(|s| s.device.clone()).collect();
        self.set_devices(i, &r.gpus);
        let changed = changed || self.hosts[i as usize].view.gpus.iter().map(|s| &s.device).ne(before.iter());
        if changed {
            fx.push(Effect::Persist(r.hostname.clone()));
        }
        self.seen_at(now);
        let host = r.hostname;
        self.emit(HostEvent::HostJoined {
            host: host.clone(),
            total: self.hosts[i as usize].view.total,
            attributes: self.hosts[i as usize].view.attributes.clone(),
        });

        // Reconcile: what the host runs against what the manager expects there.
        let mut reported: HashSet<&str> = HashSet::with_capacity(r.running.len());
        for run in &r.running {
            reported.insert(run.run_id.as_str());
            match self.runs.get(run.run_id.as_str()) {
                Some(e) if e.host == i && !e.terminal => {}
                Some(_) => fx.push(Effect::Kill { host: host.clone(), run_id: run.run_id.clone() }),
                None if self.expectations_loaded => {
                    info!(host, run_id = run.run_id, "host runs a run the manager does not expect; killing it");
                    fx.push(Effect::Kill { host: host.clone(), run_id: run.run_id.clone() });
                }
                None => {
                    // Held until the owner says what it expects (see `expect_runs`).
                    let mut e = RunEntry::new(i, &run.task_id, run.resources, run.gpu.clone(), Vec::new(), now, true);
                    e.state = Some(RunState::Running);
                    self.runs.insert(Id::from(run.run_id.as_str()), Box::new(e));
                    self.hold(&run.run_id);
                }
            }
        }
        let missing: Vec<String> = self.hosts[i as usize]
            .runs
            .iter()
            .filter(|&id| !reported.contains(&**id))
            .filter(|&id| self.runs.get(&**id).is_some_and(|e| !e.orphan && e.state.is_some()))
            .map(|id| id.to_string())
            .collect();
        for id in missing {
            self.synthesize(
                &id,
                RunState::Lost,
                "RUN_MISSING",
                format!("host {host} does not report the run"),
                now,
                fx,
            );
        }
    }

    // ---- time --------------------------------------------------------------

    pub fn tick(&mut self, now: u64, fx: &mut Vec<Effect>) {
        let expired: Vec<LeaseId> =
            self.leases.iter().filter(|(_, l)| l.expires_at_ms <= now).map(|(id, _)| *id).collect();
        for id in expired {
            debug!(%id, "lease expired");
            self.drop_lease(id);
        }
        let deadline = self.config.heartbeat_timeout_ms;
        // Skipped until some host could be overdue: on a large cluster this
        // scan every second was a tenth of a replay's time.
        let scan_hosts = now > self.hosts_due_ms;
        let mut next_due = u64::MAX;
        for i in 0..if scan_hosts { self.hosts.len() as u32 } else { 0 } {
            let h = &self.hosts[i as usize];
            let overdue = h.last_seen_ms.saturating_add(deadline) < now;
            let lose = match h.liveness {
                Liveness::Up | Liveness::Disconnected => overdue,
                // Never seen since start: only matters when runs are expected there.
                Liveness::Never => overdue && !h.runs.is_empty(),
                Liveness::Lost => false,
            };
            if lose {
                self.lose_host(i, now, fx);
            } else {
                let h = &self.hosts[i as usize];
                // A lost host, or one never seen that holds no runs, cannot be
                // lost by waiting; `seen_at` and `hold` bring it back in.
                let can_be_lost = match h.liveness {
                    Liveness::Up | Liveness::Disconnected => true,
                    Liveness::Never => !h.runs.is_empty(),
                    Liveness::Lost => false,
                };
                if can_be_lost {
                    next_due = next_due.min(h.last_seen_ms.saturating_add(deadline));
                }
            }
        }
        if scan_hosts {
            self.hosts_due_ms = next_due;
        }
        let timeout = self.config.launch_timeout_ms;
        let redeliver = self.config.redeliver_after_ms;
        let mut unconfirmed = Vec::new();
        let mut resend = Vec::new();
        // Skipped until some run could be due: with thousands of runs this
        // scan every second was a seventh of a replay's time.
        if now >= self.runs_due_ms {
            let mut next_due = u64::MAX;
            for (id, r) in &mut self.runs {
                if r.state.is_none() {
                    let times_out = r.launched_at_ms.saturating_add(timeout);
                    if times_out < now {
                        unconfirmed.push(id.clone());
                    } else {
                        next_due = next_due.min(times_out.saturating_add(1));
                    }
                }
                for p in &mut r.pending {
                    if p.sent_at_ms.saturating_add(redeliver) <= now {
                        p.sent_at_ms = now;
                        resend.push(p.update.clone());
                    }
                    next_due = next_due.min(p.sent_at_ms.saturating_add(redeliver));
                }
            }
            self.runs_due_ms = next_due;
        }
        for u in resend {
            self.emit(HostEvent::Run(u));
        }
        for id in unconfirmed {
            self.synthesize(
                &id,
                RunState::Lost,
                "LAUNCH_TIMEOUT",
                format!("no update within {timeout} ms of launch"),
                now,
                fx,
            );
        }
    }

    /// Something in the runs may be due at `at` (see `tick`).
    fn runs_due_by(&mut self, at: u64) {
        self.runs_due_ms = self.runs_due_ms.min(at);
    }

    /// A host was created or heard from at `now`.
    fn seen_at(&mut self, now: u64) {
        self.hosts_due_ms = self.hosts_due_ms.min(now.saturating_add(self.config.heartbeat_timeout_ms));
    }

    fn lose_host(&mut self, i: u32, now: u64, fx: &mut Vec<Effect>) {
        let was = self.hosts[i as usize].liveness;
        self.hosts[i as usize].liveness = Liveness::Lost;
        self.unlease(i);
        let host = self.hosts[i as usize].view.name.clone();
        warn!(host, "host lost: no heartbeat within {} ms", self.config.heartbeat_timeout_ms);
        if was == Liveness::Up {
            self.emit(HostEvent::HostLeft { host: host.clone(), reason: "missed heartbeats".into() });
        }
        let mut runs: Vec<String> = self.hosts[i as usize].runs.iter().map(|id| id.to_string()).collect();
        runs.sort();
        for id in runs {
            if self.runs.get(id.as_str()).is_some_and(|r| r.orphan) {
                self.free(&id, fx);
                self.runs.remove(id.as_str());
                continue;
            }
            self.synthesize(&id, RunState::Lost, "HOST_LOST", format!("host {host} missed its heartbeats"), now, fx);
        }
    }

    // ---- expectations --------------------------------------------------------

    pub fn expect_runs(&mut self, expected: Vec<ExpectedRun>, now: u64, fx: &mut Vec<Effect>) {
        self.expectations_loaded = true;
        let mut wanted: HashSet<String> = HashSet::with_capacity(expected.len());
        for e in expected {
            wanted.insert(e.run_id.clone());
            let i = self.host_slot(&e.host, now);
            if let Some(r) = self.runs.get_mut(e.run_id.as_str()) {
                if r.orphan && r.host == i {
                    // The host reported it before we knew: adopt it, then hand
                    // the owner what the host said meanwhile and it has not seen.
                    r.orphan = false;
                    r.task_id = Id::from(e.task_id);
                    r.state = Some(RunState::Running);
                    r.last_seq = r.last_seq.max(e.last_seq);
                    r.acked_seq = r.acked_seq.max(e.last_seq);
                    let held = std::mem::take(&mut r.held);
                    for u in held {
                        self.on_run_update(u, now, fx);
                    }
                }
                continue;
            }
            let mut r = RunEntry::new(i, &e.task_id, e.resources, e.gpu.clone(), Vec::new(), now, false);
            r.state = Some(RunState::Running);
            r.last_seq = e.last_seq;
            r.acked_seq = e.last_seq;
            self.runs.insert(Id::from(e.run_id.as_str()), Box::new(r));
            self.hold(&e.run_id);
            if self.hosts[i as usize].liveness == Liveness::Up {
                // Registered already, and did not report it.
                self.synthesize(
                    &e.run_id,
                    RunState::Lost,
                    "RUN_MISSING",
                    format!("host {} does not report the run", e.host),
                    now,
                    fx,
                );
            }
        }
        let orphans: Vec<(String, String)> = self
            .runs
            .iter()
            .filter(|&(id, r)| r.orphan && !wanted.contains(&**id))
            .map(|(id, r)| (self.hosts[r.host as usize].view.name.clone(), id.to_string()))
            .collect();
        for (host, run_id) in orphans {
            info!(host, run_id, "run not expected by the owner; killing it");
            fx.push(Effect::Kill { host, run_id });
        }
    }

    // ---- leases ------------------------------------------------------------

    fn unlease(&mut self, i: u32) {
        if let Some(id) = self.hosts[i as usize].lease.take()
            && let Some(l) = self.leases.get_mut(&id)
        {
            l.hosts.retain(|&h| h != i);
        }
    }

    fn drop_lease(&mut self, id: LeaseId) -> bool {
        let Some(l) = self.leases.remove(&id) else { return false };
        for i in l.hosts {
            let h = &mut self.hosts[i as usize];
            if h.lease == Some(id) {
                h.lease = None;
            }
        }
        true
    }

    pub fn lease(&mut self, req: &LeaseRequest, now: u64) -> Result<Lease, HostError> {
        if req.max_hosts == 0 {
            return Err(HostError::InvalidRequest { field: "max_hosts", reason: "must be at least 1".into() });
        }
        if req.ttl_ms == 0 {
            return Err(HostError::InvalidRequest { field: "ttl_ms", reason: "must be at least 1".into() });
        }
        let expired: Vec<LeaseId> =
            self.leases.iter().filter(|(_, l)| l.expires_at_ms <= now).map(|(id, _)| *id).collect();
        for id in expired {
            self.drop_lease(id);
        }
        let id = LeaseId(self.next_lease);
        let eligible = |h: &HostEntry| {
            h.liveness == Liveness::Up
                && h.state.accepts_tasks()
                && h.lease.is_none()
                && req.min_free.fits_in(&h.view.free())
                && req.constraints.iter().all(|c| c.admits(&h.view) != Some(false))
        };
        let mut picked: Vec<u32> = Vec::new();
        // Preferred hosts first (few: checked against each other linearly),
        // then the pinned set or the whole cluster.
        let only: Vec<u32> = req.only_hosts.iter().filter_map(|n| self.by_name.get(n).copied()).collect();
        for name in &req.prefer_hosts {
            if let Some(&i) = self.by_name.get(name)
                && (req.only_hosts.is_empty() || only.contains(&i))
                && picked.len() < req.max_hosts
                && !picked.contains(&i)
                && eligible(&self.hosts[i as usize])
            {
                picked.push(i);
            }
        }
        let preferred = picked.len();
        if !req.only_hosts.is_empty() {
            for &i in &only {
                if picked.len() < req.max_hosts && !picked.contains(&i) && eligible(&self.hosts[i as usize]) {
                    picked.push(i);
                }
            }
        } else {
            // Round-robin start so that successive leases spread over the cluster.
            let n = self.hosts.len();
            let start = if n == 0 { 0 } else { self.cursor % n };
            let mut last = start;
            for k in 0..n {
                if picked.len() >= req.max_hosts {
                    break;
                }
                let i = (start + k) % n;
                if eligible(&self.hosts[i]) && !picked[..preferred].contains(&(i as u32)) {
                    picked.push(i as u32);
                    last = i;
                }
            }
            self.cursor = last + 1;
        }
        let expires_at_ms = now.saturating_add(req.ttl_ms);
        let offers = picked.iter().map(|&i| Arc::clone(&self.hosts[i as usize].view)).collect();
        if !picked.is_empty() {
            self.next_lease += 1;
            for &i in &picked {
                self.hosts[i as usize].lease = Some(id);
            }
        }
        let job_hosts = Some(self.job_hosts_among(&req.jobs, &picked));
        if !picked.is_empty() {
            self.leases.insert(id, LeaseEntry { expires_at_ms, hosts: picked });
        }
        Ok(Lease { id, expires_at_ms, hosts: offers, job_hosts })
    }

    /// For each of `jobs`, the hosts of `picked` already running its tasks,
    /// as indices into `picked`: from the job index, so the cost follows the
    /// jobs' tasks, not the size of the lease.
    fn job_hosts_among(&self, jobs: &[String], picked: &[u32]) -> Vec<JobHosts> {
        let running: Vec<(&String, &BTreeMap<u32, u32>)> =
            jobs.iter().filter_map(|j| self.job_hosts.get(j).map(|on| (j, on))).collect();
        if running.is_empty() {
            return Vec::new();
        }
        // Host index → position in the lease; u32::MAX for hosts not in it.
        let mut position = vec![u32::MAX; self.hosts.len()];
        for (k, &i) in picked.iter().enumerate() {
            position[i as usize] = k as u32;
        }
        running
            .into_iter()
            .map(|(job, on)| {
                let mut hosts: Vec<(u32, u32)> = on
                    .iter()
                    .filter_map(|(&i, &n)| position.get(i as usize).filter(|&&k| k != u32::MAX).map(|&k| (k, n)))
                    .collect();
                hosts.sort_unstable();
                JobHosts { job: job.clone(), hosts }
            })
            .filter(|j| !j.hosts.is_empty())
            .collect()
    }

    pub fn release(&mut self, id: LeaseId) -> Result<(), HostError> {
        if self.drop_lease(id) { Ok(()) } else { Err(HostError::UnknownLease(id)) }
    }

    /// Checks a launch and, if it passes, takes the host out of the lease,
    /// records the runs and holds their resources.
    pub fn begin_launch(
        &mut self,
        lease: LeaseId,
        host: &str,
        runs: &mut [LaunchRequest],
        now: u64,
    ) -> Result<(), HostError> {
        let l = self.leases.get(&lease).ok_or(HostError::UnknownLease(lease))?;
        if l.expires_at_ms <= now {
            self.drop_lease(lease);
            return Err(HostError::LeaseExpired(lease));
        }
        let &i = self.by_name.get(host).ok_or_else(|| HostError::UnknownHost(host.to_string()))?;
        if !l.hosts.contains(&i) {
            return Err(HostError::HostNotInLease { host: host.to_string(), lease });
        }
        let h = &self.hosts[i as usize];
        if h.liveness != Liveness::Up {
            return Err(HostError::HostUnreachable(host.to_string()));
        }
        if !h.state.accepts_tasks() {
            return Err(HostError::HostNotAcceptingTasks { host: host.to_string(), state: h.state });
        }
        if runs.is_empty() {
            return Err(HostError::InvalidRequest { field: "runs", reason: "no runs to launch".into() });
        }
        let mut need = Resources::ZERO;
        let mut seen: HashSet<&str> = HashSet::with_capacity(runs.len());
        let mut tasks: HashSet<&str> = HashSet::with_capacity(runs.len());
        for r in runs.iter() {
            if r.run_id.is_empty() {
                return Err(HostError::InvalidRequest { field: "run_id", reason: "must not be empty".into() });
            }
            if !seen.insert(r.run_id.as_str()) || self.runs.contains_key(r.run_id.as_str()) {
                return Err(HostError::DuplicateRunId(r.run_id.clone()));
            }
            if r.task_id.is_empty() {
                return Err(HostError::InvalidRequest { field: "task_id", reason: "must not be empty".into() });
            }
            if !tasks.insert(r.task_id.as_str()) {
                return Err(HostError::DuplicateTaskId { task: r.task_id.clone(), live_run: r.run_id.clone() });
            }
            if let Some(live) = self.live_task_runs.get(r.task_id.as_str()) {
                return Err(HostError::DuplicateTaskId { task: r.task_id.clone(), live_run: live.to_string() });
            }
            need = need.saturating_add(&r.spec.resources);
        }
        if let Some((field, requested, free)) = over(&need, &h.view.free()) {
            return Err(HostError::OverCapacity { host: host.to_string(), field, requested, free });
        }
        // GPU devices: each run's grant (the host's default choice for a
        // launch that names none) must fit what the devices have left,
        // counting the grants before it.
        let mut slots = h.view.gpus.clone();
        for r in runs.iter_mut() {
            if r.gpu.is_empty() && r.spec.resources.gpu_milli > 0 {
                r.gpu = gpu::pick(&slots, &r.spec.resources, &r.spec.gpu_models).ok_or_else(|| {
                    HostError::InvalidRequest {
                        field: "gpu",
                        reason: format!("no GPU device of host {host} takes {} milli-GPU", r.spec.resources.gpu_milli),
                    }
                })?;
            }
            if r.spec.resources.gpu_milli > 0 || !r.gpu.is_empty() {
                gpu::check_grant(&slots, &r.spec.resources, &r.spec.gpu_models, &r.gpu)
                    .map_err(|e| HostError::InvalidRequest { field: "gpu", reason: format!("host {host}: {e}") })?;
                gpu::apply(&mut slots, &r.gpu, false);
            }
        }
        // The host stays in the lease until it is released or expires: the
        // job manager may launch several groups of one placement round on it
        // (one per job), each checked against what is still free.
        for r in runs.iter() {
            let labels = r.spec.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let entry = RunEntry::new(i, &r.task_id, r.spec.resources, r.gpu.clone(), labels, now, false);
            self.runs.insert(Id::from(r.run_id.as_str()), Box::new(entry));
            self.hold(&r.run_id);
        }
        // Unconfirmed after the launch timeout is LOST (see `tick`).
        self.runs_due_by(now.saturating_add(self.config.launch_timeout_ms).saturating_add(1));
        Ok(())
    }

    /// Undoes `begin_launch` when the provider refused the launch outright.
    pub fn abort_launch(&mut self, run_ids: &[String], fx: &mut Vec<Effect>) {
        for id in run_ids {
            if self.runs.get(id.as_str()).is_some_and(|e| e.state.is_none()) {
                self.free(id, fx);
                self.runs.remove(id.as_str());
            }
        }
    }

    // ---- maintenance ---------------------------------------------------------

    /// Moves a host to `to`; returns the previous state (for an undo) or
    /// `None` when nothing changed.
    pub fn set_maintenance(
        &mut self,
        host: &str,
        to: MaintenanceState,
        fx: &mut Vec<Effect>,
    ) -> Result<Option<MaintenanceState>, HostError> {
        let &i = self.by_name.get(host).ok_or_else(|| HostError::UnknownHost(host.to_string()))?;
        let from = self.hosts[i as usize].state;
        if from == to {
            return Ok(None);
        }
        if !from.can_transition(to) {
            return Err(HostError::InvalidTransition { host: host.to_string(), from, to });
        }
        if !to.accepts_tasks() {
            self.unlease(i);
        }
        self.change_state(i, to, fx);
        if to == MaintenanceState::Draining && self.hosts[i as usize].runs.is_empty() {
            self.drained(i, fx);
        }
        Ok(Some(from))
    }

    /// Puts a host back in `state` after a failed write, telling the
    /// subscriber (which saw the change) that it is undone.
    pub fn restore_maintenance(&mut self, host: &str, state: MaintenanceState) {
        let Some(&i) = self.by_name.get(host) else { return };
        let from = self.hosts[i as usize].state;
        self.hosts[i as usize].state = state;
        if from != state {
            self.emit(HostEvent::HostStateChanged { host: host.to_string(), from, to: state, runs: Vec::new() });
        }
    }
}

impl RunEntry {
    /// The run's job id (its task id without the instance).
    fn job(&self) -> &str {
        job_of(&self.task_id)
    }

    fn new(
        host: u32,
        task_id: &str,
        resources: Resources,
        gpu: GpuGrant,
        labels: Vec<String>,
        now: u64,
        orphan: bool,
    ) -> Self {
        RunEntry {
            host,
            task_id: Id::from(task_id),
            resources,
            gpu,
            labels,
            state: None,
            launched_at_ms: now,
            terminal: false,
            last_seq: 0,
            provider_seq: 0,
            provider_acked: 0,
            acked_seq: 0,
            pending: VecDeque::new(),
            orphan,
            used: None,
            held: Vec::new(),
        }
    }
}
