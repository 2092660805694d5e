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

mod codec;
mod convert;
pub mod recordio;
pub mod zk;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use paceline_model::Resources;
use paceline_model::run::{LaunchRequest, RunState, RunUpdate};
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{Call, Event, call, event};
use paceline_storage::Store;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

pub use codec::{Encoding, decode_event, encode_call};

use crate::error::ProviderError;
use crate::provider::{HostRegistration, LogChunk, LogStream, Provider, ProviderEvent, RunningRun};

const NAME: &str = "mesos";
/// The key of the framework id in the store.
pub const STORE_KEY: &str = "mesos";
/// Path of the scheduler API on a master.
pub const API_PATH: &str = "/api/v1/scheduler";

/// Settings of the `mesos` provider.
#[derive(Clone, Debug, PartialEq)]
pub struct MesosConfig {
    /// Master base URLs (`http://host:5050`), tried in turn; a redirect wins.
    /// An entry `zk://host:2181[,host:2181…]/mesos` is resolved through
    /// ZooKeeper to the leading master (the lowest `json.info_` node) each
    /// time the provider subscribes.
    pub masters: Vec<String>,
    /// `FrameworkInfo.name`.
    pub framework_name: String,
    /// `FrameworkInfo.user`: the user tasks run as.
    pub user: String,
    /// The one role we subscribe with (MULTI_ROLE); offers of other roles are not used.
    pub role: String,
    /// `FrameworkInfo.principal`, if any.
    pub principal: Option<String>,
    /// How long the master keeps our tasks while we are away.
    pub failover_timeout: Duration,
    /// Wire encoding.
    pub encoding: Encoding,
    /// First and largest pause between subscription attempts.
    pub backoff_initial: Duration,
    /// Largest pause between subscription attempts.
    pub backoff_max: Duration,
    /// After each SUBSCRIBED, hosts are (re)registered only after this long.
    pub registration_delay: Duration,
    /// How often live agents are reported alive to the manager.
    pub host_heartbeat: Duration,
    /// Implicit reconciliation period.
    pub reconcile_interval: Duration,
    /// A launch waits this long for an offer of its agent, then is rejected.
    pub launch_offer_wait: Duration,
    /// An unused offer is declined after this long.
    pub offer_hold: Duration,
    /// `refuse_seconds` of declines.
    pub decline_refuse: Duration,
    /// Suppress offers after this long without a launch (`None`: never).
    pub idle_suppress: Option<Duration>,
    /// Limit of one call (and of reading the subscription's response head).
    pub call_timeout: Duration,
}

impl Default for MesosConfig {
    fn default() -> Self {
        MesosConfig {
            masters: vec!["http://127.0.0.1:5050".into()],
            framework_name: "paceline".into(),
            user: "root".into(),
            role: "*".into(),
            principal: None,
            failover_timeout: Duration::from_secs(7 * 24 * 3600),
            encoding: Encoding::Protobuf,
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_secs(10),
            registration_delay: Duration::from_secs(1),
            host_heartbeat: Duration::from_secs(2),
            reconcile_interval: Duration::from_secs(600),
            launch_offer_wait: Duration::from_secs(10),
            offer_hold: Duration::from_secs(60),
            decline_refuse: Duration::from_secs(5),
            idle_suppress: Some(Duration::from_secs(300)),
            call_timeout: Duration::from_secs(10),
        }
    }
}

/// What went wrong talking to a master.
#[derive(Debug, thiserror::Error)]
pub enum MesosError {
    /// No master is configured.
    #[error("masters: none configured")]
    NoMaster,
    /// The URL of a master is not usable.
    #[error("master URL {0:?}: {1}")]
    BadUrl(String, String),
    /// The HTTP exchange failed.
    #[error("HTTP: {0}")]
    Http(String),
    /// The master answered with an unexpected status.
    #[error("master answered {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The body, as text.
        body: String,
    },
    /// The master is not the leader; the leader is at this URL.
    #[error("redirected to {0}")]
    Redirect(String),
    /// A call or event could not be encoded or decoded.
    #[error("decode: {0}")]
    Decode(String),
    /// The stream is not RecordIO.
    #[error(transparent)]
    RecordIo(#[from] recordio::RecordIoError),
    /// An event we do not understand.
    #[error("unknown event type {0}")]
    UnknownEvent(i32),
    /// An event of a known type without its payload.
    #[error("event {0} has no payload")]
    MissingPayload(&'static str),
    /// No event within the deadline.
    #[error("no event within {0:?}")]
    Silent(Duration),
    /// The stream ended.
    #[error("the master closed the stream")]
    Closed,
    /// The master sent ERROR.
    #[error("the master says: {0}")]
    Master(String),
    /// The provider was told to stop.
    #[error("stopped")]
    Stopped,
    /// A call on the stream was refused (307, 403): subscribe again.
    #[error("the master refused a call on this stream; resubscribing")]
    Resubscribe,
}

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

/// Base URL (`http://host:port`) of a `Location` header (Mesos sends `//host:port/path`).
fn base_of_location(location: &str) -> String {
    let abs =
        if let Some(rest) = location.strip_prefix("//") { format!("http://{rest}") } else { location.to_string() };
    match abs.find("://").map(|i| i + 3) {
        Some(start) => {
            let end = abs[start..].find('/').map_or(abs.len(), |i| start + i);
            abs[..end].to_string()
        }
        None => format!("http://{}", abs.split('/').next().unwrap_or_default()),
    }
}

impl MesosProvider {
    /// A provider for `config`; with a store, the framework id survives restarts.
    pub fn new(config: MesosConfig, store: Option<Arc<dyn Store>>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let client = Client::builder(TokioExecutor::new()).build_http();
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

    fn request(
        &self,
        base: &str,
        body: Vec<u8>,
        stream_id: Option<&str>,
    ) -> Result<hyper::Request<Full<Bytes>>, MesosError> {
        let url = format!("{base}{API_PATH}");
        let mut b = hyper::Request::post(&url)
            .header(hyper::header::CONTENT_TYPE, self.config.encoding.media_type())
            .header(hyper::header::ACCEPT, self.config.encoding.media_type());
        if let Some(id) = stream_id {
            b = b.header("Mesos-Stream-Id", id);
        }
        b.body(Full::new(Bytes::from(body))).map_err(|e| MesosError::BadUrl(url, e.to_string()))
    }

    /// Sends one call (not SUBSCRIBE) to the leader with the stream id.
    /// Returns the stream id the call was sent with, and its outcome.
    async fn send_call(&self, c: Call) -> (Option<String>, Result<(), MesosError>) {
        let stream = self.st().stream_id.clone();
        (stream, self.send_call_inner(c).await)
    }

    async fn send_call_inner(&self, mut c: Call) -> Result<(), MesosError> {
        let (base, stream_id, framework_id) = {
            let st = self.st();
            if !st.subscribed {
                return Err(MesosError::Closed);
            }
            (st.leader.clone().ok_or(MesosError::NoMaster)?, st.stream_id.clone(), st.framework_id.clone())
        };
        c.framework_id = framework_id.map(|value| mesos::FrameworkId { value });
        let body = encode_call(&c, self.config.encoding)?;
        let req = self.request(&base, body, stream_id.as_deref())?;
        let resp = tokio::time::timeout(self.config.call_timeout, self.client.request(req))
            .await
            .map_err(|_| MesosError::Http(format!("no answer within {:?}", self.config.call_timeout)))?
            .map_err(|e| MesosError::Http(e.to_string()))?;
        let status = resp.status().as_u16();
        if status == 202 || status == 200 {
            return Ok(());
        }
        let location = resp.headers().get(hyper::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_string);
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let body = String::from_utf8_lossy(&body).into_owned();
        match (status, location) {
            (307, Some(loc)) => Err(MesosError::Redirect(base_of_location(&loc))),
            _ => Err(MesosError::Status { status, body }),
        }
    }

    /// The call sender: one call at a time, in order.
    async fn run_calls(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Outgoing>) {
        while let Some(out) = rx.recv().await {
            let kind = out.call.r#type.and_then(|t| call::Type::try_from(t).ok()).unwrap_or(call::Type::Unknown);
            match self.send_call(out.call).await {
                (_, Ok(())) => {}
                (stream, Err(e)) => {
                    warn!(call = kind.as_str_name(), error = %e, "call to the master failed");
                    if matches!(e, MesosError::Redirect(_) | MesosError::Status { status: 403, .. }) && stream.is_some()
                    {
                        let mut st = self.st();
                        if st.stream_id == stream {
                            if let MesosError::Redirect(leader) = &e {
                                st.leader = Some(leader.clone());
                            }
                            st.restart_stream = stream;
                            drop(st);
                            self.restart.notify_one();
                        }
                    }
                    if !out.reject_on_failure.is_empty() {
                        let evs = self.reject(out.reject_on_failure, &format!("{} failed: {e}", kind.as_str_name()));
                        self.emit(evs).await;
                    }
                }
            }
        }
    }

    /// Forgets runs that never started and says so.
    fn reject(&self, runs: Vec<(String, String)>, why: &str) -> Vec<ProviderEvent> {
        let mut st = self.st();
        let mut out = Vec::new();
        for (host, run_id) in runs {
            if st.runs.get(&run_id).is_some_and(|r| r.seq == 0) {
                st.runs.remove(&run_id);
                out.push(ProviderEvent::LaunchRejected { host, run_id, error: why.to_string() });
            }
        }
        out
    }

    fn subscribe_call(&self) -> Call {
        let st = self.st();
        let id = st.framework_id.clone().map(|value| mesos::FrameworkId { value });
        use mesos::framework_info::capability::Type as Cap;
        let caps = [Cap::MultiRole, Cap::PartitionAware, Cap::GpuResources, Cap::TaskKillingState];
        #[allow(deprecated)]
        let info = mesos::FrameworkInfo {
            role: None,
            user: self.config.user.clone(),
            name: self.config.framework_name.clone(),
            id: id.clone(),
            failover_timeout: Some(self.config.failover_timeout.as_secs_f64()),
            checkpoint: Some(true),
            roles: vec![self.config.role.clone()],
            hostname: None,
            principal: self.config.principal.clone(),
            webui_url: None,
            capabilities: caps.iter().map(|c| mesos::framework_info::Capability { r#type: Some(*c as i32) }).collect(),
            labels: None,
        };
        Call {
            framework_id: id,
            r#type: Some(call::Type::Subscribe as i32),
            subscribe: Some(call::Subscribe { framework_info: info, suppressed_roles: Vec::new() }),
            ..Call::default()
        }
    }

    /// The subscription loop: subscribe, read events, resubscribe with backoff.
    async fn run_driver(self: Arc<Self>) {
        let mut backoff = self.config.backoff_initial;
        let mut next_master = 0usize;
        loop {
            if self.st().stopped {
                return;
            }
            let base = {
                let st = self.st();
                match st.leader.clone() {
                    Some(l) => l,
                    None if self.config.masters.is_empty() => {
                        warn!("mesos: no masters configured");
                        return;
                    }
                    None => {
                        self.config.masters[next_master % self.config.masters.len()].trim_end_matches('/').to_string()
                    }
                }
            };
            // `zk://hosts/path`: ask ZooKeeper which master leads.
            let base = match zk::ZkUrl::parse(&base) {
                None => base,
                Some(parsed) => {
                    let found = match parsed {
                        Ok(url) => zk::leading_master(&url, self.config.backoff_max.max(Duration::from_secs(5))).await,
                        Err(e) => Err(e),
                    };
                    match found {
                        Ok(leader) => {
                            info!(from = base, master = leader, "mesos: ZooKeeper names the leading master");
                            leader
                        }
                        Err(e) => {
                            warn!(master = base, error = e, "mesos: cannot find the leading master; retrying");
                            next_master += 1;
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(self.config.backoff_max);
                            continue;
                        }
                    }
                }
            };
            let result = self.subscription(&base).await;
            let was_subscribed = {
                let mut st = self.st();
                let was = st.subscribed;
                if was {
                    st.disconnected_at = Some(Instant::now());
                }
                st.subscribed = false;
                st.stream_id = None;
                st.registration_open = false;
                st.register_after = None;
                for a in st.agents.values_mut() {
                    // The master rescinds a disconnected framework's offers.
                    a.offers.clear();
                }
                was
            };
            match result {
                Err(MesosError::Redirect(leader)) => {
                    info!(from = base, to = leader, "mesos: following the redirect to the leading master");
                    self.st().leader = Some(leader);
                    continue;
                }
                Err(MesosError::Master(msg)) => {
                    warn!(message = msg, "mesos: the master ended our subscription; not resubscribing");
                    self.st().stopped = true;
                    return;
                }
                Err(MesosError::Stopped) => return,
                Err(MesosError::Resubscribe) => {
                    // To the leader a 307 named, if one did; at once.
                    info!("mesos: resubscribing after a refused call");
                    tokio::time::sleep(self.config.backoff_initial).await;
                    continue;
                }
                Err(e) => {
                    warn!(master = base, error = %e, "mesos: subscription ended; resubscribing");
                    // Try another master next time (a leader we were sent to may be gone).
                    self.st().leader = None;
                    next_master += 1;
                }
                Ok(()) => {}
            }
            if was_subscribed {
                backoff = self.config.backoff_initial;
            }
            let jitter = Duration::from_millis(fastrand::u64(0..=backoff.as_millis() as u64 / 4 + 1));
            tokio::time::sleep(backoff + jitter).await;
            backoff = (backoff * 2).min(self.config.backoff_max);
        }
    }

    /// One subscription, until it ends.
    async fn subscription(&self, base: &str) -> Result<(), MesosError> {
        let body = encode_call(&self.subscribe_call(), self.config.encoding)?;
        let req = self.request(base, body, None)?;
        let resp = tokio::time::timeout(self.config.call_timeout, self.client.request(req))
            .await
            .map_err(|_| MesosError::Http(format!("no answer within {:?}", self.config.call_timeout)))?
            .map_err(|e| MesosError::Http(e.to_string()))?;
        let status = resp.status().as_u16();
        if status == 307 {
            let loc = resp.headers().get(hyper::header::LOCATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
            return Err(MesosError::Redirect(base_of_location(loc)));
        }
        if status != 200 {
            let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            return Err(MesosError::Status { status, body: String::from_utf8_lossy(&body).into_owned() });
        }
        let stream_id = resp.headers().get("Mesos-Stream-Id").and_then(|v| v.to_str().ok()).map(str::to_string);
        {
            let mut st = self.st();
            st.leader = Some(base.to_string());
            st.stream_id = stream_id;
        }
        let mut body = resp.into_body();
        let mut decoder = recordio::Decoder::new();
        loop {
            // Pending records first.
            while let Some(record) = decoder.next_record()? {
                let at = Instant::now();
                let ev = decode_event(&record, self.config.encoding)?;
                if ev.offers.is_some() {
                    self.st().first_offers_at.get_or_insert(at);
                }
                self.on_event(ev).await?;
            }
            let silence = {
                let st = self.st();
                if st.stopped {
                    return Err(MesosError::Stopped);
                }
                st.heartbeat_interval.map_or(self.config.call_timeout * 3, |h| h * 5)
            };
            tokio::select! {
                frame = tokio::time::timeout(silence, body.frame()) => match frame {
                    Err(_) => return Err(MesosError::Silent(silence)),
                    Ok(None) => {
                        decoder.finish()?;
                        return Err(MesosError::Closed);
                    }
                    Ok(Some(Err(e))) => return Err(MesosError::Http(e.to_string())),
                    Ok(Some(Ok(frame))) => {
                        if let Ok(data) = frame.into_data() {
                            decoder.push(&data);
                        }
                    }
                },
                () = self.restart.notified() => {
                    let mut st = self.st();
                    if st.restart_stream.is_some() && st.restart_stream == st.stream_id {
                        st.restart_stream = None;
                        return Err(MesosError::Resubscribe);
                    }
                }
            }
        }
    }

    async fn on_event(&self, ev: Event) -> Result<(), MesosError> {
        let kind = ev.r#type.and_then(|t| event::Type::try_from(t).ok()).unwrap_or(event::Type::Unknown);
        match kind {
            event::Type::Subscribed => {
                let s = ev.subscribed.ok_or(MesosError::MissingPayload("SUBSCRIBED"))?;
                self.on_subscribed(s).await;
            }
            event::Type::Heartbeat => {}
            event::Type::Offers => {
                let o = ev.offers.ok_or(MesosError::MissingPayload("OFFERS"))?;
                let out = self.on_offers(o.offers);
                self.emit(out).await;
            }
            event::Type::Rescind => {
                let r = ev.rescind.ok_or(MesosError::MissingPayload("RESCIND"))?;
                let mut st = self.st();
                for a in st.agents.values_mut() {
                    a.offers.remove(&r.offer_id.value);
                }
            }
            event::Type::Update => {
                let u = ev.update.ok_or(MesosError::MissingPayload("UPDATE"))?;
                let out = self.on_update(u.status);
                self.emit(out).await;
            }
            event::Type::Failure => {
                let f = ev.failure.ok_or(MesosError::MissingPayload("FAILURE"))?;
                let out = self.on_failure(f);
                self.emit(out).await;
            }
            event::Type::InverseOffers => {
                let io = ev.inverse_offers.ok_or(MesosError::MissingPayload("INVERSE_OFFERS"))?;
                let out = self.on_inverse_offers(io.inverse_offers);
                self.emit(out).await;
            }
            event::Type::RescindInverseOffer => {
                let r = ev.rescind_inverse_offer.ok_or(MesosError::MissingPayload("RESCIND_INVERSE_OFFER"))?;
                let mut st = self.st();
                for a in st.agents.values_mut() {
                    a.inverse_offers.retain(|id| *id != r.inverse_offer_id.value);
                }
            }
            event::Type::Error => {
                let msg = ev.error.map(|e| e.message).unwrap_or_default();
                return Err(MesosError::Master(msg));
            }
            event::Type::Message | event::Type::UpdateOperationStatus => {
                debug!(kind = kind.as_str_name(), "mesos: event ignored");
            }
            event::Type::Unknown => return Err(MesosError::UnknownEvent(ev.r#type.unwrap_or(0))),
        }
        Ok(())
    }

    async fn on_subscribed(&self, s: event::Subscribed) {
        let id = s.framework_id.value;
        let changed = {
            let mut st = self.st();
            let changed = st.framework_id.as_deref() != Some(id.as_str());
            st.framework_id = Some(id.clone());
            st.subscribed = true;
            st.heartbeat_interval = s
                .heartbeat_interval_seconds
                .filter(|h| h.is_finite() && *h > 0.0)
                .map(|h| Duration::from_secs_f64(h.min(3600.0)));
            let now = Instant::now();
            st.last_subscribed = Some(now);
            st.register_after = Some(now + self.config.registration_delay);
            st.next_implicit = Some(now + self.config.reconcile_interval);
            st.suppressed = false;
            // Every run the master should know: launched (ACCEPT sent) and not ended.
            let queued: HashSet<&str> =
                st.pending.values().flat_map(|p| p.runs.iter().map(|r| r.run_id.as_str())).collect();
            let runs: HashSet<String> = st
                .runs
                .iter()
                .filter(|(id, r)| !r.terminal && !queued.contains(id.as_str()))
                .map(|(id, _)| id.clone())
                .collect();
            st.reconciling = Some(Reconciling { runs, next_at: now, backoff: Duration::from_secs(1) });
            changed
        };
        info!(framework_id = id, "mesos: subscribed");
        if changed
            && let Some(store) = &self.store
            && let Err(e) = store.put_provider_id(STORE_KEY, &id).await
        {
            warn!(error = %e, "mesos: framework id not stored; a restart will register a new framework");
        }
        // Implicit reconciliation: the master reports every task it knows of ours.
        let mut c = call_of(call::Type::Reconcile);
        c.reconcile = Some(call::Reconcile { tasks: Vec::new() });
        self.queue(c);
        self.reconcile_due();
    }

    /// Sends the explicit reconciliation if it is due.
    fn reconcile_due(&self) {
        let now = Instant::now();
        let c = {
            let mut st = self.st();
            if !st.subscribed {
                return;
            }
            let St { reconciling, runs, .. } = &mut *st;
            let Some(r) = reconciling else { return };
            r.runs.retain(|id| runs.get(id).is_some_and(|run| !run.terminal));
            if r.runs.is_empty() {
                *reconciling = None;
                return;
            }
            if r.next_at > now {
                return;
            }
            r.next_at = now + r.backoff;
            r.backoff = (r.backoff * 2).min(Duration::from_secs(60));
            let tasks = r
                .runs
                .iter()
                .map(|id| call::reconcile::Task {
                    task_id: mesos::TaskId { value: id.clone() },
                    agent_id: runs.get(id).map(|run| agent_id(&run.agent_id)),
                })
                .collect();
            let mut c = call_of(call::Type::Reconcile);
            c.reconcile = Some(call::Reconcile { tasks });
            c
        };
        self.queue(c);
    }

    fn registration(st: &St, agent_id: &str, total: Resources) -> Option<HostRegistration> {
        let a = st.agents.get(agent_id)?;
        Some(HostRegistration {
            hostname: a.hostname.clone(),
            agent_id: agent_id.to_string(),
            total,
            attributes: a.attributes.clone(),
            running: st
                .runs
                .iter()
                .filter(|(_, r)| r.agent_id == agent_id && !r.terminal)
                .map(|(id, r)| RunningRun { run_id: id.clone(), task_id: r.task_id.clone(), resources: r.resources })
                .collect(),
        })
    }

    /// Capacity of an agent: what its held offers hold plus what our runs hold.
    fn capacity(st: &St, agent_id: &str, role: &str) -> Resources {
        let Some(a) = st.agents.get(agent_id) else { return Resources::ZERO };
        let mut total = Resources::ZERO;
        for o in a.offers.values() {
            total = total.saturating_add(&convert::offer_resources(&o.offer, role));
        }
        for r in st.runs.values().filter(|r| r.agent_id == agent_id && !r.terminal) {
            total = total.saturating_add(&r.resources);
        }
        total
    }

    /// (Re)registers an agent whose capacity changed, once registration is open.
    fn maybe_register(&self, st: &mut St, agent_id: &str, out: &mut Vec<ProviderEvent>) {
        if !st.registration_open {
            return;
        }
        let total = Self::capacity(st, agent_id, &self.config.role);
        let Some(a) = st.agents.get_mut(agent_id) else { return };
        if !a.alive || a.offers.is_empty() || a.registered_total == Some(total) {
            return;
        }
        a.registered_total = Some(total);
        if let Some(reg) = Self::registration(st, agent_id, total) {
            out.push(ProviderEvent::HostRegistered(reg));
        }
    }

    fn on_offers(&self, offers: Vec<mesos::Offer>) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let mut touched: Vec<String> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let now = Instant::now();
        let mut st = self.st();
        st.offers_seen += offers.len() as u64;
        for offer in offers {
            let aid = offer.agent_id.value.clone();
            if offer.hostname.is_empty() || aid.is_empty() {
                warn!(offer = offer.id.value, "mesos: offer without agent id or hostname ignored");
                continue;
            }
            if let Some(previous) = st.by_host.get(&offer.hostname)
                && *previous != aid
            {
                // The agent restarted with a new id: the host's old runs are gone with it.
                info!(host = offer.hostname, old = previous.as_str(), new = aid.as_str(), "mesos: agent id changed");
            }
            st.by_host.insert(offer.hostname.clone(), aid.clone());
            st.known_hostnames.insert(aid.clone(), offer.hostname.clone());
            let attrs = convert::attributes(&offer.attributes);
            let a = st.agents.entry(aid.clone()).or_insert_with(|| Agent {
                hostname: offer.hostname.clone(),
                attributes: attrs.clone(),
                offers: BTreeMap::new(),
                registered_total: None,
                alive: true,
                inverse_offers: Vec::new(),
            });
            if a.attributes != attrs || a.hostname != offer.hostname {
                a.attributes = attrs;
                a.hostname = offer.hostname.clone();
                a.registered_total = None;
            }
            if !a.alive {
                a.alive = true;
                a.registered_total = None;
            }
            a.offers.insert(offer.id.value.clone(), HeldOffer { offer, at: now });
            if seen.insert(aid.clone()) {
                touched.push(aid);
            }
        }
        for aid in &touched {
            self.maybe_register(&mut st, aid, &mut out);
        }
        // Launches waiting for these agents.
        let waiting: Vec<String> = touched.into_iter().filter(|a| st.pending.contains_key(a)).collect();
        for aid in waiting {
            if let Some(p) = st.pending.remove(&aid) {
                match self.build_accept(&mut st, &aid, &p.runs) {
                    Some(c) => {
                        let reject = p.runs.iter().map(|r| (p.host.clone(), r.run_id.clone())).collect();
                        let _ = self.calls.send(Outgoing { call: c, reject_on_failure: reject });
                    }
                    None => {
                        st.pending.insert(aid, p);
                    }
                }
            }
        }
        out
    }

    /// ACCEPT of every held offer of `agent_id` launching `runs`, if they fit.
    /// Takes the offers and records the runs' resources and ports.
    fn build_accept(&self, st: &mut St, agent_id: &str, runs: &[LaunchRequest]) -> Option<Call> {
        let a = st.agents.get(agent_id)?;
        if a.offers.is_empty() {
            return None;
        }
        let mut carver = convert::Carver::new(a.offers.values().map(|h| &h.offer), &self.config.role);
        let mut infos = Vec::with_capacity(runs.len());
        let mut ports = Vec::with_capacity(runs.len());
        for r in runs {
            let carved = carver.carve(&r.spec.resources)?;
            let (info, p) = convert::task_info(r, agent_id, carved);
            infos.push(info);
            ports.push(p);
        }
        let a = st.agents.get_mut(agent_id)?;
        let offer_ids: Vec<mesos::OfferId> =
            std::mem::take(&mut a.offers).into_keys().map(|value| mesos::OfferId { value }).collect();
        for (r, p) in runs.iter().zip(ports) {
            if let Some(run) = st.runs.get_mut(&r.run_id) {
                run.ports = p;
            }
        }
        let mut c = call_of(call::Type::Accept);
        c.accept = Some(call::Accept {
            offer_ids,
            operations: vec![mesos::offer::Operation {
                r#type: Some(mesos::offer::operation::Type::Launch as i32),
                launch: Some(mesos::offer::operation::Launch { task_infos: infos }),
            }],
            // The rest of the offers comes back at the next allocation.
            filters: filters(Duration::ZERO),
        });
        Some(c)
    }

    fn on_update(&self, status: mesos::TaskStatus) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let mut st = self.st();
        let run_id = status.task_id.value.clone();
        let aid = status.agent_id.as_ref().map(|a| a.value.clone());
        let Some(aid) = aid.or_else(|| st.runs.get(&run_id).map(|r| r.agent_id.clone())) else {
            debug!(run_id, "mesos: update without an agent for an unknown run; dropped");
            return out;
        };
        let Some(host) =
            st.agents.get(&aid).map(|a| a.hostname.clone()).or_else(|| st.known_hostnames.get(&aid).cloned())
        else {
            // It comes again (re-sent until acknowledged, or asked for by reconciliation).
            debug!(run_id, agent_id = aid, "mesos: update from an agent not offered yet; dropped");
            return out;
        };
        if let Some(r) = &mut st.reconciling {
            r.runs.remove(&run_id);
        }
        let mstate = mesos::TaskState::try_from(status.state).unwrap_or(mesos::TaskState::TaskUnknown);
        let state = convert::run_state(mstate);
        let run = st.runs.entry(run_id.clone()).or_insert_with(|| Run {
            agent_id: aid.clone(),
            task_id: convert::task_of_run(&run_id),
            resources: Resources::ZERO,
            ports: BTreeMap::new(),
            // A run we did not launch in this process (we restarted): its seqs
            // start past any an earlier process gave it (those began at its
            // own start time, or at 1 for runs it launched).
            seq: unix_ms(),
            state: None,
            terminal: false,
            unacked: VecDeque::new(),
            acked: VecDeque::new(),
        });
        let uuid = status.uuid.clone().filter(|u| !u.is_empty());
        if let Some(u) = &uuid
            && run.acked.contains(u)
        {
            let mut c = call_of(call::Type::Acknowledge);
            c.acknowledge =
                Some(call::Acknowledge { agent_id: agent_id(&aid), task_id: status.task_id.clone(), uuid: u.clone() });
            self.queue(c);
            return out;
        }
        // A re-sent update keeps its seq.
        if let Some(u) = &uuid
            && let Some(&(seq, _)) = run.unacked.iter().find(|(_, x)| x == u)
        {
            out.push(ProviderEvent::RunUpdate(convert::run_update(&host, &run.task_id, seq, &status, &run.ports)));
            return out;
        }
        if run.terminal && !state.is_terminal() {
            // We gave the run up (LOST) and it is back: Paceline has replaced it.
            info!(run_id, "mesos: a run given up as lost is alive again; killing it");
            let mut c = call_of(call::Type::Kill);
            c.kill =
                Some(call::Kill { task_id: status.task_id.clone(), agent_id: Some(agent_id(&aid)), kill_policy: None });
            self.queue(c);
        }
        if uuid.is_none() && run.state == Some(state) && run.terminal == state.is_terminal() {
            // A reconciliation answer that says nothing new.
            return out;
        }
        run.seq += 1;
        let seq = run.seq;
        run.state = Some(state);
        run.terminal |= state.is_terminal();
        run.agent_id = aid.clone();
        if let Some(u) = uuid {
            run.unacked.push_back((seq, u));
        }
        let update = convert::run_update(&host, &run.task_id, seq, &status, &run.ports);
        let ended = run.terminal;
        out.push(ProviderEvent::RunUpdate(update));
        if ended {
            self.maybe_accept_inverse(&mut st, &aid);
        }
        out
    }

    /// An update we make up (no uuid: nothing to acknowledge to the master).
    fn synth(
        st: &mut St,
        run_id: &str,
        host: &str,
        state: RunState,
        reason: &str,
        message: &str,
    ) -> Option<ProviderEvent> {
        let run = st.runs.get_mut(run_id)?;
        if run.terminal {
            return None;
        }
        run.seq += 1;
        run.state = Some(state);
        run.terminal |= state.is_terminal();
        Some(ProviderEvent::RunUpdate(RunUpdate {
            host: host.to_string(),
            run_id: run_id.to_string(),
            task_id: run.task_id.clone(),
            seq: run.seq,
            state,
            healthy: None,
            exit_code: None,
            signal: None,
            reason: reason.to_string(),
            message: message.to_string(),
            at_ms: unix_ms(),
            ports: run.ports.clone(),
        }))
    }

    fn on_failure(&self, f: event::Failure) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let Some(aid) = f.agent_id.map(|a| a.value) else { return out };
        if f.executor_id.is_some() {
            // An executor ended; its tasks' own updates follow.
            return out;
        }
        let mut st = self.st();
        let Some(a) = st.agents.get_mut(&aid) else { return out };
        a.alive = false;
        a.offers.clear();
        a.registered_total = None;
        let host = a.hostname.clone();
        warn!(host, agent_id = aid, "mesos: agent failed; its runs are lost");
        out.push(ProviderEvent::HostDisconnected { host: host.clone(), reason: "mesos agent failed".into() });
        let runs: Vec<String> =
            st.runs.iter().filter(|(_, r)| r.agent_id == aid && !r.terminal).map(|(id, _)| id.clone()).collect();
        for id in runs {
            out.extend(Self::synth(
                &mut st,
                &id,
                &host,
                RunState::Lost,
                "AGENT_FAILED",
                "the Mesos master reported the agent failed",
            ));
        }
        out
    }

    fn on_inverse_offers(&self, ios: Vec<mesos::InverseOffer>) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let mut st = self.st();
        for io in ios {
            let Some(aid) = io.agent_id.map(|a| a.value) else { continue };
            let Some(a) = st.agents.get_mut(&aid) else {
                // Not a host of ours: nothing of ours runs there.
                let mut c = call_of(call::Type::AcceptInverseOffers);
                c.accept_inverse_offers =
                    Some(call::AcceptInverseOffers { inverse_offer_ids: vec![io.id], filters: None });
                self.queue(c);
                continue;
            };
            a.inverse_offers.push(io.id.value.clone());
            info!(host = a.hostname, "mesos: maintenance scheduled (inverse offer); draining");
            out.push(ProviderEvent::HostDrainRequested {
                host: a.hostname.clone(),
                reason: format!("Mesos maintenance from {} ns", io.unavailability.start.nanoseconds),
            });
            self.maybe_accept_inverse(&mut st, &aid);
        }
        out
    }

    /// Accepts an agent's inverse offers once none of our runs is left there.
    fn maybe_accept_inverse(&self, st: &mut St, aid: &str) {
        let busy = st.runs.values().any(|r| r.agent_id == aid && !r.terminal);
        let Some(a) = st.agents.get_mut(aid) else { return };
        if busy || a.inverse_offers.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut a.inverse_offers);
        let mut c = call_of(call::Type::AcceptInverseOffers);
        c.accept_inverse_offers = Some(call::AcceptInverseOffers {
            inverse_offer_ids: ids.into_iter().map(|value| mesos::OfferId { value }).collect(),
            filters: None,
        });
        self.queue(c);
    }

    /// Periodic work: registrations after the delay, heartbeats, expired
    /// launches, old offers, idle suppression, reconciliation.
    async fn run_ticker(self: Arc<Self>) {
        let period = Duration::from_millis(50);
        let mut every = tokio::time::interval(period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let out = self.tick(Instant::now());
            self.emit(out).await;
            self.reconcile_due();
        }
    }

    fn tick(&self, now: Instant) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let mut calls = Vec::new();
        {
            let mut st = self.st();
            if st.stopped {
                return out;
            }
            // Registrations open once reconciliation had its chance.
            if st.subscribed && !st.registration_open && st.register_after.is_some_and(|t| t <= now) {
                st.registration_open = true;
                let agents: Vec<String> = st.agents.keys().cloned().collect();
                for aid in agents {
                    self.maybe_register(&mut st, &aid, &mut out);
                }
            }
            // Agents alive as far as the master says, while we are subscribed
            // or away for less than the failover timeout (our tasks live on).
            let within_failover = st.subscribed
                || st.disconnected_at.is_some_and(|t| now.duration_since(t) < self.config.failover_timeout);
            if within_failover && st.last_heartbeat.is_none_or(|t| now.duration_since(t) >= self.config.host_heartbeat)
            {
                st.last_heartbeat = Some(now);
                for a in st.agents.values().filter(|a| a.alive && a.registered_total.is_some()) {
                    out.push(ProviderEvent::Heartbeat { host: a.hostname.clone() });
                }
            }
            // Launches that found no offer in time.
            let expired: Vec<String> =
                st.pending.iter().filter(|(_, p)| p.deadline <= now).map(|(a, _)| a.clone()).collect();
            for aid in expired {
                if let Some(p) = st.pending.remove(&aid) {
                    for r in p.runs {
                        if st.runs.get(&r.run_id).is_some_and(|x| x.seq == 0) {
                            st.runs.remove(&r.run_id);
                            out.push(ProviderEvent::LaunchRejected {
                                host: p.host.clone(),
                                run_id: r.run_id,
                                error: format!(
                                    "resources: no offer of agent {aid} held them within {} ms",
                                    self.config.launch_offer_wait.as_millis()
                                ),
                            });
                        }
                    }
                }
            }
            if st.subscribed {
                // Unused offers go back.
                let hold = self.config.offer_hold;
                let St { agents, pending, .. } = &mut *st;
                let mut declined = Vec::new();
                for (aid, a) in agents.iter_mut() {
                    if pending.contains_key(aid) {
                        continue;
                    }
                    let old: Vec<String> = a
                        .offers
                        .iter()
                        .filter(|(_, o)| now.duration_since(o.at) >= hold)
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in old {
                        a.offers.remove(&id);
                        declined.push(mesos::OfferId { value: id });
                    }
                }
                if !declined.is_empty() {
                    let mut c = call_of(call::Type::Decline);
                    c.decline =
                        Some(call::Decline { offer_ids: declined, filters: filters(self.config.decline_refuse) });
                    calls.push(c);
                }
                // No demand for a while: stop offers until a launch revives them.
                if let Some(idle) = self.config.idle_suppress
                    && !st.suppressed
                    && st.pending.is_empty()
                    && st.last_demand.is_none_or(|t| now.duration_since(t) >= idle)
                    && st.last_subscribed.is_some_and(|t| now.duration_since(t) >= idle)
                {
                    st.suppressed = true;
                    let mut c = call_of(call::Type::Suppress);
                    c.suppress = Some(call::Suppress { roles: vec![self.config.role.clone()] });
                    calls.push(c);
                }
                if st.next_implicit.is_some_and(|t| t <= now) {
                    st.next_implicit = Some(now + self.config.reconcile_interval);
                    let mut c = call_of(call::Type::Reconcile);
                    c.reconcile = Some(call::Reconcile { tasks: Vec::new() });
                    calls.push(c);
                }
            }
        }
        for c in calls {
            self.queue(c);
        }
        out
    }
}

#[async_trait]
impl Provider for MesosProvider {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn start(&self, events: mpsc::Sender<ProviderEvent>) -> Result<(), ProviderError> {
        *lock(&self.inner.events) = Some(events);
        if let Some(store) = &self.inner.store {
            match store.get_provider_id(STORE_KEY).await {
                Ok(id) => self.inner.st().framework_id = id,
                Err(e) => warn!(error = %e, "mesos: stored framework id not read; registering anew"),
            }
            if let Ok(hosts) = store.list_hosts().await {
                let mut st = self.inner.st();
                for h in hosts.into_iter().filter(|h| h.provider == NAME) {
                    if let Some(aid) = h.agent_id {
                        st.known_hostnames.insert(aid, h.hostname);
                    }
                }
            }
        }
        let Some(rx) = lock(&self.inner.calls_rx).take() else {
            return Err(ProviderError::NotRunning(NAME));
        };
        let mut tasks = lock(&self.inner.tasks);
        tasks.push(tokio::spawn(self.inner.clone().run_calls(rx)));
        tasks.push(tokio::spawn(self.inner.clone().run_driver()));
        tasks.push(tokio::spawn(self.inner.clone().run_ticker()));
        Ok(())
    }

    async fn launch(&self, host: &str, runs: Vec<LaunchRequest>) -> Result<(), ProviderError> {
        let mut rejected = Vec::new();
        let (accept, reject_on_failure) = {
            let mut st = self.inner.st();
            if !st.subscribed {
                return Err(ProviderError::NotRunning(NAME));
            }
            let aid = st
                .by_host
                .get(host)
                .cloned()
                .filter(|a| st.agents.get(a).is_some_and(|a| a.alive))
                .ok_or_else(|| ProviderError::HostNotConnected { provider: NAME, host: host.to_string() })?;
            st.last_demand = Some(Instant::now());
            let mut fresh = Vec::with_capacity(runs.len());
            for r in runs {
                if st.runs.contains_key(&r.run_id) {
                    continue; // idempotent by run id
                }
                if let Err(error) = convert::check_launch(&r) {
                    rejected.push(ProviderEvent::LaunchRejected { host: host.to_string(), run_id: r.run_id, error });
                    continue;
                }
                if r.spec.health_check.is_some() {
                    debug!(
                        run_id = r.run_id,
                        "mesos: health checks are not passed to Mesos; RUNNING counts as healthy"
                    );
                }
                st.runs.insert(
                    r.run_id.clone(),
                    Run {
                        agent_id: aid.clone(),
                        task_id: r.task_id.clone(),
                        resources: r.spec.resources,
                        ports: BTreeMap::new(),
                        seq: 0,
                        state: None,
                        terminal: false,
                        unacked: VecDeque::new(),
                        acked: VecDeque::new(),
                    },
                );
                fresh.push(r);
            }
            if fresh.is_empty() {
                (None, Vec::new())
            } else if let Some(c) = self.inner.build_accept(&mut st, &aid, &fresh) {
                let reject: Vec<(String, String)> =
                    fresh.iter().map(|r| (host.to_string(), r.run_id.clone())).collect();
                (Some(c), reject)
            } else {
                // Wait for an offer; ask for one.
                let deadline = Instant::now() + self.inner.config.launch_offer_wait;
                st.pending
                    .entry(aid)
                    .or_insert_with(|| PendingLaunch { host: host.to_string(), runs: Vec::new(), deadline })
                    .runs
                    .extend(fresh);
                st.suppressed = false;
                let mut c = call_of(call::Type::Revive);
                c.revive = Some(call::Revive { roles: vec![self.inner.config.role.clone()] });
                self.inner.queue(c);
                (None, Vec::new())
            }
        };
        self.inner.emit(rejected).await;
        if let Some(c) = accept {
            // In order with the other calls; a failure rejects the runs.
            let _ = self.inner.calls.send(Outgoing { call: c, reject_on_failure });
        }
        Ok(())
    }

    async fn kill(&self, host: &str, run_id: &str, grace_override: Option<Duration>) -> Result<(), ProviderError> {
        let mut synthesized = Vec::new();
        let c = {
            let mut st = self.inner.st();
            let mut was_pending = false;
            for p in st.pending.values_mut() {
                let before = p.runs.len();
                p.runs.retain(|r| r.run_id != run_id);
                was_pending |= p.runs.len() != before;
            }
            st.pending.retain(|_, p| !p.runs.is_empty());
            if was_pending {
                // It never reached Mesos: it ends here.
                synthesized.extend(Inner::synth(
                    &mut st,
                    run_id,
                    host,
                    RunState::Killed,
                    "KILLED_BY_REQUEST",
                    "killed before an offer came",
                ));
                None
            } else if !st.subscribed {
                return Err(ProviderError::NotRunning(NAME));
            } else {
                let aid = st.runs.get(run_id).map(|r| r.agent_id.clone()).or_else(|| st.by_host.get(host).cloned());
                let mut c = call_of(call::Type::Kill);
                c.kill = Some(call::Kill {
                    task_id: mesos::TaskId { value: run_id.to_string() },
                    agent_id: aid.map(|a| agent_id(&a)),
                    kill_policy: grace_override.map(|g| mesos::KillPolicy {
                        grace_period: Some(mesos::DurationInfo {
                            nanoseconds: g.as_nanos().min(i64::MAX as u128) as i64,
                        }),
                    }),
                });
                Some(c)
            }
        };
        self.inner.emit(synthesized).await;
        if let Some(c) = c {
            self.inner.queue(c);
        }
        Ok(())
    }

    async fn acknowledge(&self, _host: &str, run_id: &str, seq: u64) -> Result<(), ProviderError> {
        let mut acks = Vec::new();
        {
            let mut st = self.inner.st();
            let Some(run) = st.runs.get_mut(run_id) else { return Ok(()) };
            while run.unacked.front().is_some_and(|(s, _)| *s <= seq) {
                if let Some((_, uuid)) = run.unacked.pop_front() {
                    if run.acked.len() >= 8 {
                        run.acked.pop_front();
                    }
                    run.acked.push_back(uuid.clone());
                    acks.push((run.agent_id.clone(), uuid));
                }
            }
            if run.terminal && run.unacked.is_empty() && run.seq <= seq {
                st.runs.remove(run_id);
            }
        }
        for (aid, uuid) in acks {
            let mut c = call_of(call::Type::Acknowledge);
            c.acknowledge = Some(call::Acknowledge {
                agent_id: agent_id(&aid),
                task_id: mesos::TaskId { value: run_id.to_string() },
                uuid,
            });
            self.inner.queue(c);
        }
        Ok(())
    }

    async fn reconcile(&self, _host: &str, expected_run_ids: Vec<String>) -> Result<(), ProviderError> {
        let mut st = self.inner.st();
        let now = Instant::now();
        let r = st.reconciling.get_or_insert_with(|| Reconciling {
            runs: HashSet::new(),
            next_at: now,
            backoff: Duration::from_secs(1),
        });
        r.runs.extend(expected_run_ids);
        r.next_at = now;
        Ok(())
    }

    async fn read_log(
        &self,
        _host: &str,
        _run_id: &str,
        _stream: LogStream,
        _offset: u64,
        _max_bytes: u64,
    ) -> Result<LogChunk, ProviderError> {
        Err(ProviderError::Unsupported { provider: NAME, what: "read_log (the agent's /files API is not used)" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_become_base_urls() {
        assert_eq!(base_of_location("//10.0.0.2:5050/api/v1/scheduler"), "http://10.0.0.2:5050");
        assert_eq!(base_of_location("http://m2:5050/api/v1/scheduler"), "http://m2:5050");
        assert_eq!(base_of_location("m3:5050"), "http://m3:5050");
    }
}
