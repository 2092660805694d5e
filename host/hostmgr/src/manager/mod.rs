//! [`HostManager`]: the async shell around the state in `state`.
//!
//! One task drains the provider's event channel and applies each event
//! under a short lock; API calls take the same lock. Provider calls and
//! store writes happen outside it. The loop prefers provider events over
//! its own commands, so [`HostManager::sync`] returns only once everything
//! a provider had sent before the call has been applied.

mod state;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use paceline_model::host::MaintenanceState;
use paceline_model::run::LaunchRequest;
use paceline_model::view::HostView;
use paceline_storage::Store;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use crate::error::HostError;
use crate::event::HostEvents;
use crate::lease::{Lease, LeaseId, LeaseRequest};
use crate::provider::{LogChunk, LogStream, Provider};
use paceline_joints::{Clock, SystemClock};
use state::{Effect, State};

/// Manager settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagerConfig {
    /// A host silent this long (ms of the manager's clock) is lost and its runs LOST.
    pub heartbeat_timeout_ms: u64,
    /// A launched run with no update this long is LOST (reason LAUNCH_TIMEOUT).
    pub launch_timeout_ms: u64,
    /// An unacknowledged update is sent to the subscriber again after this long.
    pub redeliver_after_ms: u64,
    /// A drained host goes DOWN by itself.
    pub auto_down_when_drained: bool,
    /// How often the manager checks deadlines on its own; `None`: only on
    /// [`HostManager::tick`] (tests and simulations that drive time).
    pub tick_interval: Option<Duration>,
    /// Capacity of the provider → manager channel.
    pub event_buffer: usize,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            heartbeat_timeout_ms: 15_000,
            launch_timeout_ms: 60_000,
            redeliver_after_ms: 30_000,
            auto_down_when_drained: false,
            tick_interval: Some(Duration::from_secs(1)),
            event_buffer: 65_536,
        }
    }
}

pub use paceline_joints::ExpectedRun;

/// A host as the inventory sees it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostInfo {
    /// Name, capacity, allocation, attributes, labels and job counts.
    pub view: HostView,
    /// The provider's agent id.
    pub agent_id: Option<String>,
    /// Maintenance state.
    pub state: MaintenanceState,
    /// Registered and within its heartbeat deadline.
    pub reachable: bool,
    /// Last heartbeat (or registration), on the manager's clock.
    pub last_heartbeat_ms: u64,
    /// The lease holding it, if any.
    pub lease: Option<LeaseId>,
    /// Runs holding resources on it, sorted.
    pub runs: Vec<String>,
}

#[derive(Debug)]
enum Command {
    Sync(oneshot::Sender<()>),
}

#[derive(Debug)]
struct Inner {
    provider: Arc<dyn Provider>,
    store: Option<Arc<dyn Store>>,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    commands: mpsc::UnboundedSender<Command>,
    /// Serialises maintenance changes so each write matches memory.
    maintenance: tokio::sync::Mutex<()>,
}

/// Builds a [`HostManager`].
#[derive(Debug)]
pub struct HostManagerBuilder {
    provider: Arc<dyn Provider>,
    store: Option<Arc<dyn Store>>,
    clock: Arc<dyn Clock>,
    config: ManagerConfig,
}

impl HostManagerBuilder {
    /// Persists the inventory (maintenance state, attributes) here and restores it at start.
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The clock for deadlines and leases (default: the wall clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Settings.
    pub fn config(mut self, config: ManagerConfig) -> Self {
        self.config = config;
        self
    }

    /// Loads the stored inventory, starts the provider and the event loop.
    /// Needs a Tokio runtime.
    pub async fn start(self) -> Result<HostManager, HostError> {
        let now = self.clock.now_ms();
        let provider_name = self.provider.name();
        let mut state = State::new(provider_name, self.config.clone());
        if let Some(store) = &self.store {
            for r in store.list_hosts().await? {
                if r.provider == provider_name {
                    state.load_record(r, now);
                }
            }
        }
        let (events_tx, mut events_rx) = mpsc::channel(self.config.event_buffer.max(1));
        let (cmd_tx, mut cmd_rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            provider: self.provider,
            store: self.store,
            clock: self.clock,
            state: Mutex::new(state),
            commands: cmd_tx,
            maintenance: tokio::sync::Mutex::new(()),
        });
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let mut fx = Vec::new();
            loop {
                tokio::select! {
                    biased;
                    ev = events_rx.recv() => {
                        let (Some(ev), Some(inner)) = (ev, weak.upgrade()) else { break };
                        {
                            let now = inner.clock.now_ms();
                            inner.lock().apply(ev, now, &mut fx);
                        }
                        inner.run_effects(&mut fx).await;
                    }
                    cmd = cmd_rx.recv() => match cmd {
                        Some(Command::Sync(done)) => { let _ = done.send(()); }
                        None => break,
                    },
                }
            }
        });
        let manager = HostManager { inner };
        if let Some(period) = self.config.tick_interval {
            let weak = Arc::downgrade(&manager.inner);
            tokio::spawn(async move {
                let mut every = tokio::time::interval(period);
                loop {
                    every.tick().await;
                    let Some(inner) = weak.upgrade() else { break };
                    HostManager { inner }.tick().await;
                }
            });
        }
        manager.inner.provider.start(events_tx).await?;
        Ok(manager)
    }
}

/// The host manager: inventory, leases, launches, the status pipeline,
/// host loss, reconciliation and maintenance over one provider. Cheap to
/// clone; clones share everything. The background tasks stop when the last
/// clone is dropped.
#[derive(Clone, Debug)]
pub struct HostManager {
    inner: Arc<Inner>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // State is plain data; a panic elsewhere must not wedge the cluster.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn run_effects(&self, fx: &mut Vec<Effect>) {
        for e in fx.drain(..) {
            match e {
                Effect::Ack { host, run_id, seq } => {
                    if let Err(e) = self.provider.acknowledge(&host, &run_id, seq).await {
                        warn!(host, run_id, seq, error = %e, "acknowledgement not delivered; the update will come again");
                    }
                }
                Effect::Kill { host, run_id } => {
                    // Spawned: a kill may wait on the event channel this loop drains.
                    let provider = self.provider.clone();
                    tokio::spawn(async move {
                        if let Err(e) = provider.kill(&host, &run_id, None).await {
                            warn!(host, run_id, error = %e, "kill failed");
                        }
                    });
                }
                Effect::Reregister(host) => {
                    if let Err(e) = self.provider.reregister(&host).await {
                        warn!(host, error = %e, "a lost host was not asked to register again");
                    }
                }
                Effect::Persist(host) => {
                    let Some(store) = &self.store else { continue };
                    // Under the maintenance lock and from memory as it is now,
                    // so a stale record never overwrites a newer one.
                    let _serial = self.maintenance.lock().await;
                    let record = self.lock().record_of(&host, self.clock.now_ms());
                    if let Some(record) = record
                        && let Err(e) = store.put_host(&record).await
                    {
                        warn!(host, error = %e, "host record not written");
                    }
                }
            }
        }
    }
}

impl HostManager {
    /// A manager over `provider`; see [`HostManagerBuilder`].
    pub fn builder(provider: Arc<dyn Provider>) -> HostManagerBuilder {
        HostManagerBuilder { provider, store: None, clock: Arc::new(SystemClock), config: ManagerConfig::default() }
    }

    /// A manager over simulated hosts, on the simulator's virtual clock.
    pub fn with_sim(sim: &crate::sim::SimProvider) -> HostManagerBuilder {
        HostManager::builder(Arc::new(sim.clone())).clock(Arc::new(sim.clock()))
    }

    fn now(&self) -> u64 {
        self.inner.clock.now_ms()
    }

    /// Waits until every event the provider sent before this call is applied.
    pub async fn sync(&self) -> Result<(), HostError> {
        let (tx, rx) = oneshot::channel();
        self.inner.commands.send(Command::Sync(tx)).map_err(|_| HostError::Stopped)?;
        rx.await.map_err(|_| HostError::Stopped)
    }

    /// Checks deadlines now: expired leases, silent hosts (their runs become
    /// LOST), unconfirmed launches, updates due for redelivery. Runs on its
    /// own every `tick_interval`; call it when driving a virtual clock.
    pub async fn tick(&self) {
        let _ = self.sync().await;
        let mut fx = Vec::new();
        self.inner.lock().tick(self.now(), &mut fx);
        self.inner.run_effects(&mut fx).await;
    }

    /// The one subscriber's stream of [`crate::HostEvent`]s. A new call
    /// replaces (ends) the previous stream and first replays every update
    /// not yet acknowledged.
    pub fn subscribe(&self) -> HostEvents {
        let now = self.now();
        HostEvents { rx: self.inner.lock().subscribe(now) }
    }

    /// The subscriber has durably handled `run_id`'s updates up to `seq`;
    /// only now is the provider (and through it the agent) acknowledged.
    pub async fn acknowledge(&self, run_id: &str, seq: u64) {
        // The hot path of the pipeline: no effect list, one string copy.
        let upstream = self.inner.lock().acknowledge(run_id, seq);
        if let Some((host, seq)) = upstream
            && let Err(e) = self.inner.provider.acknowledge(&host, run_id, seq).await
        {
            warn!(host, run_id, seq, error = %e, "acknowledgement not delivered; the update will come again");
        }
    }

    /// Leases up to `max_hosts` hosts that are reachable, UP, in no other
    /// lease, have `min_free` free and pass the hard constraints. A lease
    /// with no offers is not kept.
    pub fn lease(&self, request: &LeaseRequest) -> Result<Lease, HostError> {
        let now = self.now();
        self.inner.lock().lease(request, now)
    }

    /// Returns a lease's remaining hosts.
    pub fn release(&self, lease: LeaseId) -> Result<(), HostError> {
        self.inner.lock().release(lease)
    }

    /// What a live run holds on its host and the use its host last
    /// measured; `None` for a run not launched or ended.
    pub fn run_holding(&self, run_id: &str) -> Option<crate::RunHolding> {
        self.inner.lock().run_holding(run_id)
    }

    /// Every live run whose host measured its use, for the metrics and a
    /// host manager's peers.
    pub fn measured_use(&self) -> Vec<crate::MeasuredRun> {
        self.inner.lock().measured_use()
    }

    /// Launches `runs` on `host`, which must be in `lease`. Checks the lease
    /// (live, holds the host), the host (reachable, UP), the request (runs,
    /// ids non-empty and distinct) and capacity, each fault refusing every
    /// run (`Err`); then each run against what the manager holds (its run id
    /// new, its task without a live run, a GPU device for it), refusing only
    /// that run (`Ok`, with the run ids refused and why; `Err` when every run
    /// is). Holds the resources of the rest and hands them to the provider.
    pub async fn launch(
        &self,
        lease: LeaseId,
        host: &str,
        mut runs: Vec<LaunchRequest>,
    ) -> Result<Vec<(String, HostError)>, HostError> {
        let now = self.now();
        let refused = self.inner.lock().begin_launch(lease, host, &mut runs, now)?;
        // The caller is told each refusal and why, and the job manager
        // logs it at warn: a second warn here would print every refusal
        // twice in an all-in-one server.
        for (run, why) in &refused {
            tracing::debug!(%host, %run, error = %why, "run refused; the rest of its batch launches");
        }
        let ids: Vec<String> = runs.iter().map(|r| r.run_id.clone()).collect();
        if let Err(e) = self.inner.provider.launch(host, runs).await {
            let mut fx = Vec::new();
            self.inner.lock().abort_launch(&ids, &mut fx);
            self.inner.run_effects(&mut fx).await;
            return Err(e.into());
        }
        Ok(refused)
    }

    /// Stops a run (with the grace period it was launched with). A run that
    /// already ended is left alone.
    pub async fn kill(&self, run_id: &str) -> Result<(), HostError> {
        self.kill_with_grace(run_id, None).await
    }

    /// Stops a run, overriding its grace period when `grace` is set.
    pub async fn kill_with_grace(&self, run_id: &str, grace: Option<Duration>) -> Result<(), HostError> {
        let host = self.inner.lock().run_host(run_id)?;
        if let Some(host) = host {
            self.inner.provider.kill(&host, run_id, grace).await?;
        }
        Ok(())
    }

    /// Reads part of a run's log from its host.
    pub async fn read_log(
        &self,
        run_id: &str,
        stream: LogStream,
        offset: u64,
        max_bytes: u64,
    ) -> Result<LogChunk, HostError> {
        let host = self.inner.lock().run_host(run_id)?.ok_or_else(|| HostError::UnknownRun(run_id.to_string()))?;
        Ok(self.inner.provider.read_log(&host, run_id, stream, offset, max_bytes).await?)
    }

    /// Reads part of a run's log on a named host: for runs that have ended
    /// (the manager forgets a run once it ends, the host keeps its sandbox
    /// until its garbage collection). The caller knows the host from the
    /// task's record.
    pub async fn read_log_on(
        &self,
        host: &str,
        run_id: &str,
        stream: LogStream,
        offset: u64,
        max_bytes: u64,
    ) -> Result<LogChunk, HostError> {
        if self.host(host).is_none() {
            return Err(HostError::UnknownHost(host.to_string()));
        }
        Ok(self.inner.provider.read_log(host, run_id, stream, offset, max_bytes).await?)
    }

    /// Tells the manager which runs its owner expects (after a restart, from
    /// the job manager's storage). Until the first call, runs a host reports
    /// that the manager does not know are held, not killed; from then on:
    /// reported but not expected → killed; expected but not reported by a
    /// registered host → LOST (reason RUN_MISSING); expected on a host that
    /// does not register within the heartbeat deadline → LOST (HOST_LOST).
    /// A fresh cluster calls it once with nothing.
    pub async fn expect_runs(&self, runs: Vec<ExpectedRun>) {
        let _ = self.sync().await;
        let mut fx = Vec::new();
        let now = self.now();
        self.inner.lock().expect_runs(runs, now, &mut fx);
        self.inner.run_effects(&mut fx).await;
    }

    /// UP → DRAINING: no new leases; the event lists the runs to move. Goes
    /// on to DRAINED when the last run ends (and DOWN, if configured).
    pub async fn drain(&self, host: &str) -> Result<(), HostError> {
        self.set_maintenance(host, MaintenanceState::Draining).await
    }

    /// DRAINED → DOWN.
    pub async fn down(&self, host: &str) -> Result<(), HostError> {
        self.set_maintenance(host, MaintenanceState::Down).await
    }

    /// DOWN, DRAINING or DRAINED → UP.
    pub async fn up(&self, host: &str) -> Result<(), HostError> {
        self.set_maintenance(host, MaintenanceState::Up).await
    }

    async fn set_maintenance(&self, host: &str, to: MaintenanceState) -> Result<(), HostError> {
        let _serial = self.inner.maintenance.lock().await;
        let now = self.now();
        let mut fx = Vec::new();
        let before = self.inner.lock().set_maintenance(host, to, &mut fx)?;
        if before.is_none() {
            return Ok(());
        }
        // The write is the commit point: on failure memory goes back.
        fx.retain(|e| !matches!(e, Effect::Persist(_)));
        if let Some(store) = &self.inner.store {
            let record = self.inner.lock().record_of(host, now);
            if let Some(record) = record
                && let Err(err) = store.put_host(&record).await
            {
                if let Some(b) = before {
                    self.inner.lock().restore_maintenance(host, b);
                }
                return Err(err.into());
            }
        }
        self.inner.run_effects(&mut fx).await;
        Ok(())
    }

    /// One host.
    pub fn host(&self, name: &str) -> Option<HostInfo> {
        self.inner.lock().host_info(name)
    }

    /// Every host as "why pending" counts them; the views are the
    /// manager's own, shared.
    pub fn census(&self) -> Vec<paceline_model::pending::CensusHost> {
        self.inner.lock().census()
    }

    /// Whether `pred` holds for some host, stopping at the first; under the
    /// manager's lock, copying nothing.
    pub fn any_host(
        &self,
        pred: &mut dyn FnMut(&paceline_model::view::HostView, MaintenanceState, bool) -> bool,
    ) -> bool {
        self.inner.lock().any_host(pred)
    }

    /// Runs the manager tracks (launched and not yet ended and
    /// acknowledged): a count, without copying any host.
    pub fn run_count(&self) -> usize {
        self.inner.lock().run_count()
    }

    /// Every host, in the order they became known.
    pub fn hosts(&self) -> Vec<HostInfo> {
        self.inner.lock().hosts_info()
    }

    /// The provider's name.
    pub fn provider_name(&self) -> &'static str {
        self.inner.provider.name()
    }
}
