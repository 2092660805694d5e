//! The `mesos` provider: Paceline as a Mesos framework, over the v1
//! scheduler HTTP API (`POST /api/v1/scheduler`).
//!
//! - **Subscription**: one long-lived `SUBSCRIBE` request whose response is
//!   a RecordIO stream of events ([`recordio`]). The framework id is kept in
//!   the store (`put_provider_id("mesos", id)`) and sent again (in the call
//!   and in `FrameworkInfo.id`) on every resubscription, with
//!   `failover_timeout`, so a restarted Paceline takes its tasks back. The
//!   stream is dropped and resubscribed, with exponential backoff over the
//!   configured masters, when it ends, when a record is not RecordIO or not
//!   an event we can read (bad master input never crashes anything), or
//!   when no event (heartbeats included) came for 5× the heartbeat interval.
//!   A `307` is followed to the `Location` (the leading master).
//! - **Calls**: every other call carries `Mesos-Stream-Id`; they are sent in
//!   order by one task. A `307` or `403` on a call makes the provider
//!   resubscribe (the leader changed or our subscription is gone).
//! - **Offers → inventory**: an agent becomes a host when it is first
//!   offered (after `registration_delay` following each SUBSCRIBED, so that
//!   reconciliation has said which of our tasks run there). Its capacity is
//!   what its offers hold (non-revocable, our role or `*`) plus what our
//!   runs on it hold; attributes become labels. Offers are held until a
//!   launch uses them, `offer_hold` passes (DECLINE with `refuse_seconds`),
//!   or the master rescinds them.
//! - **Launch**: ACCEPT of every held offer of the agent with one LAUNCH of
//!   command tasks whose resources are carved from the offers and shrunk to
//!   what each run needs (ports assigned from the offered ranges). Without a
//!   held offer the launch waits (REVIVE) up to `launch_offer_wait`, then is
//!   rejected. Demand: every launch REVIVEs when suppressed; with
//!   `idle_suppress` set, no launch for that long SUPPRESSes offers.
//! - **Updates**: each `UPDATE` becomes a [`RunUpdate`] with the run's next
//!   `seq`; an update with a `uuid` is ACKNOWLEDGEd only once
//!   [`Provider::acknowledge`] covers its seq (a re-sent update keeps its seq).
//! - **Reconciliation**: after each SUBSCRIBED an implicit RECONCILE and an
//!   explicit one for every run we know, repeated with backoff until each
//!   has answered; implicit again every `reconcile_interval`.
//! - **Agents**: FAILURE of an agent (no executor id) → the host
//!   disconnects and its runs are LOST (reason `AGENT_FAILED`); INVERSE_OFFERS
//!   → [`ProviderEvent::HostDrainRequested`], and the inverse offer is
//!   accepted once none of our runs is left on the agent.
//!
//! # Layout
//! - `mod.rs`: [`MesosProvider`] and the state it shares between its
//!   tasks (`Inner`, `St`: agents, offers, runs, pending launches).
//! - `config`: [`MesosConfig`]; `error`: [`MesosError`].
//! - `subscription`: SUBSCRIBE, the event stream, resubscription.
//! - `calls`: every other call, sent in order by one task.
//! - `offers`: held offers, host registration, ACCEPT of a launch.
//! - `updates`: task status updates and their seqs.
//! - `agents`: agent failure and maintenance (inverse offers).
//! - `reconcile`: explicit reconciliation with backoff.
//! - `ticker`: periodic work (heartbeats, expiries, declines, suppression).
//! - `provider`: the [`Provider`] impl.
//! - `codec`, `convert`, [`recordio`], [`zk`]: wire encoding, Mesos ↔
//!   Paceline types, RecordIO framing, finding the leading master.
//!
//! [`RunUpdate`]: paceline_model::run::RunUpdate
//! [`Provider`]: crate::provider::Provider
//! [`Provider::acknowledge`]: crate::provider::Provider::acknowledge

mod agents;
mod calls;
mod codec;
mod config;
mod convert;
mod error;
pub(crate) mod fuzz;
mod offers;
mod provider;
mod reconcile;
pub mod recordio;
mod subscription;
mod ticker;
mod updates;
pub mod zk;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use paceline_model::Resources;
use paceline_model::run::{LaunchRequest, RunState};
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{Call, call};
use paceline_storage::Store;
use tokio::sync::mpsc;

pub use codec::{Encoding, decode_event, encode_call};
pub use config::MesosConfig;
pub use error::MesosError;

use crate::provider::ProviderEvent;

const NAME: &str = "mesos";
/// The key of the framework id in the store.
pub const STORE_KEY: &str = "mesos";
/// Path of the scheduler API on a master.
pub const API_PATH: &str = "/api/v1/scheduler";

/// One held offer.
#[derive(Debug)]
struct HeldOffer {
    offer: mesos::Offer,
    at: Instant,
}

#[derive(Debug)]
struct Agent {
    hostname: String,
    attributes: paceline_model::Labels,
    offers: BTreeMap<String, HeldOffer>,
    /// The capacity last registered with the manager (since start or failure).
    registered_total: Option<Resources>,
    alive: bool,
    /// Outstanding inverse offers (maintenance).
    inverse_offers: Vec<String>,
}

#[derive(Debug)]
struct Run {
    agent_id: String,
    task_id: String,
    resources: Resources,
    ports: BTreeMap<String, u16>,
    /// Last seq given to an update of this run.
    seq: u64,
    /// Last state forwarded.
    state: Option<RunState>,
    terminal: bool,
    /// (seq, uuid) of forwarded updates not yet acknowledged to the master.
    unacked: VecDeque<(u64, Vec<u8>)>,
    /// The last uuids acknowledged: one coming again (our ACK was lost) is
    /// acknowledged again, not forwarded.
    acked: VecDeque<Vec<u8>>,
}

#[derive(Debug)]
struct PendingLaunch {
    host: String,
    runs: Vec<LaunchRequest>,
    deadline: Instant,
}

#[derive(Debug)]
struct Reconciling {
    runs: HashSet<String>,
    next_at: Instant,
    backoff: Duration,
}

#[derive(Debug, Default)]
struct St {
    framework_id: Option<String>,
    stream_id: Option<String>,
    /// The leader we last reached or were sent to.
    leader: Option<String>,
    subscribed: bool,
    heartbeat_interval: Option<Duration>,
    /// When hosts may be registered (set at SUBSCRIBED).
    register_after: Option<Instant>,
    registration_open: bool,
    last_subscribed: Option<Instant>,
    /// When the last subscription ended (the master keeps our tasks for `failover_timeout` from then).
    disconnected_at: Option<Instant>,
    agents: HashMap<String, Agent>,
    by_host: HashMap<String, String>,
    /// Agent id → hostname from the store (before the agent is offered).
    known_hostnames: HashMap<String, String>,
    runs: HashMap<String, Run>,
    pending: HashMap<String, PendingLaunch>,
    reconciling: Option<Reconciling>,
    next_implicit: Option<Instant>,
    suppressed: bool,
    last_demand: Option<Instant>,
    last_heartbeat: Option<Instant>,
    /// Offers taken from the stream into the inventory (for the bench).
    offers_seen: u64,
    /// When the first OFFERS event since the last `take_offer_clock` began decoding.
    first_offers_at: Option<Instant>,
    stopped: bool,
    /// A call on this stream was refused (307/403): resubscribe if it is still current.
    restart_stream: Option<String>,
}

/// A call waiting for the sender task, with the runs to reject if it fails.
#[derive(Debug)]
struct Outgoing {
    call: Call,
    reject_on_failure: Vec<(String, String)>,
}

#[derive(Debug)]
struct Inner {
    config: MesosConfig,
    store: Option<Arc<dyn Store>>,
    client: Client<HttpConnector, Full<Bytes>>,
    st: Mutex<St>,
    events: Mutex<Option<mpsc::Sender<ProviderEvent>>>,
    calls: mpsc::UnboundedSender<Outgoing>,
    calls_rx: Mutex<Option<mpsc::UnboundedReceiver<Outgoing>>>,
    restart: tokio::sync::Notify,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// The Mesos provider. Cheap to clone; clones share the subscription.
#[derive(Clone, Debug)]
pub struct MesosProvider {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn call_of(kind: call::Type) -> Call {
    Call { r#type: Some(kind as i32), ..Call::default() }
}

fn agent_id(v: &str) -> mesos::AgentId {
    mesos::AgentId { value: v.to_string() }
}

fn filters(refuse: Duration) -> Option<mesos::Filters> {
    Some(mesos::Filters { refuse_seconds: Some(refuse.as_secs_f64()) })
}

impl MesosProvider {
    /// A provider for `config`; with a store, the framework id survives restarts.
    pub fn new(config: MesosConfig, store: Option<Arc<dyn Store>>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        // Nagle's algorithm off: calls are small writes that must not wait
        // on the master's delayed ACK.
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        MesosProvider {
            inner: Arc::new(Inner {
                config,
                store,
                client,
                st: Mutex::new(St::default()),
                events: Mutex::new(None),
                calls: tx,
                calls_rx: Mutex::new(Some(rx)),
                restart: tokio::sync::Notify::new(),
                tasks: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The framework id, once subscribed (or loaded from the store).
    pub fn framework_id(&self) -> Option<String> {
        lock(&self.inner.st).framework_id.clone()
    }

    /// Whether a subscription is open now.
    pub fn is_subscribed(&self) -> bool {
        lock(&self.inner.st).subscribed
    }

    /// Offers taken from the event stream into the inventory so far.
    pub fn offers_seen(&self) -> u64 {
        lock(&self.inner.st).offers_seen
    }

    /// When the first OFFERS event since the last call began decoding (for
    /// timing the path from the stream into the inventory); resets it.
    pub fn take_offer_clock(&self) -> Option<Instant> {
        self.inner.st().first_offers_at.take()
    }

    /// Offers held now, over all agents.
    pub fn held_offers(&self) -> usize {
        lock(&self.inner.st).agents.values().map(|a| a.offers.len()).sum()
    }

    /// A guard that calls [`MesosProvider::shutdown`] when dropped (for
    /// owners that stop by dropping or aborting a task).
    pub fn stop_on_drop(&self) -> StopGuard {
        StopGuard(self.clone())
    }

    /// Stops the subscription and every background task (a process that
    /// goes away; the master keeps our tasks for `failover_timeout`).
    pub fn shutdown(&self) {
        lock(&self.inner.st).stopped = true;
        for t in lock(&self.inner.tasks).drain(..) {
            t.abort();
        }
    }
}

/// Stops a [`MesosProvider`] when dropped; see [`MesosProvider::stop_on_drop`].
#[derive(Debug)]
pub struct StopGuard(MesosProvider);

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

impl Inner {
    fn st(&self) -> MutexGuard<'_, St> {
        lock(&self.st)
    }

    fn events(&self) -> Option<mpsc::Sender<ProviderEvent>> {
        lock(&self.events).clone()
    }

    async fn emit(&self, out: Vec<ProviderEvent>) {
        if out.is_empty() {
            return;
        }
        let Some(tx) = self.events() else { return };
        for ev in out {
            if tx.send(ev).await.is_err() {
                return;
            }
        }
    }

    fn queue(&self, call: Call) {
        let _ = self.calls.send(Outgoing { call, reject_on_failure: Vec::new() });
    }
}
