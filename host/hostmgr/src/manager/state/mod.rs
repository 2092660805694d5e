//! The manager's in-memory state and every rule that changes it, without
//! I/O: methods take `now` and push [`Effect`]s (provider calls, writes)
//! that the async shell in `manager/mod.rs` carries out after the lock is
//! dropped. Events for the subscriber are sent here, under the lock, so their
//! order is the order of the changes.
//!
//! Here: the tables and their entries. One submodule per responsibility,
//! each an `impl State` block: `inventory` (hosts, records, the subscriber,
//! usage, reads, maintenance), `runs` (resources held and freed, the status
//! pipeline), `provider` (provider events, expectations after a restart),
//! `liveness` (the tick, host loss), `leases` (leases and launches).

mod inventory;
mod leases;
mod liveness;
mod provider;
mod runs;

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
    /// Its maintenance state was last changed by the provider's drain
    /// request (not by an operator): the provider may take it back. Not
    /// stored: after a restart only `paceline host up` brings it back.
    provider_drained: bool,
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
