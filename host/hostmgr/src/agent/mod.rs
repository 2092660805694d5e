//! The `agent` provider: the gRPC server that `paceline agent` dials.
//!
//! Each agent keeps one bidirectional `Session` stream open (see
//! `proto/paceline/agent/v1/agent.proto` for the delivery rules). This
//! module validates `Register` (an invalid one closes the stream with
//! INVALID_ARGUMENT naming the field), answers `Registered`, turns
//! heartbeats, status updates and launch rejections into
//! [`ProviderEvent`]s, and sends launches, kills, acks and log reads down
//! the stream. A reconnect is a new `Register`; the newer stream replaces
//! the older one, and only the current stream's end counts as a disconnect.
//! A host the manager declared lost that heartbeats again has its stream
//! ended ([`Provider::reregister`]) so that it reconnects and registers.
//! A `LogChunk` answers a log read only from the host the read was sent to.
//!
//! Duplicates are dropped here by `(run_id, seq)`: an update at or below
//! the acknowledged seq is acknowledged again at once; one already
//! forwarded but not yet acknowledged is dropped (the manager has it).
//!
//! Identity: with an [`AgentPki`] ([`AgentProvider::with_identity`]) the
//! port serves TLS only, `Join` hands out client certificates for join
//! tokens, and `Session` requires a client certificate of the cluster CA
//! whose host name is the one `Register` claims (see
//! docs/decisions/0029-agent-identity.md). Without one (in-process tests and
//! the fuzz target only) the port is plaintext and `Join` is refused.

mod convert;
pub(crate) mod fuzz;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use paceline_model::run::LaunchRequest;
use paceline_proto::agent::v1 as pb;
use pb::agent_service_server::{AgentService, AgentServiceServer};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, warn};

use crate::error::ProviderError;
use crate::pki::{AgentPki, CertError, JoinError};
use crate::provider::{HostRegistration, LogChunk, LogStream, Provider, ProviderEvent, RunningRun};

const NAME: &str = "agent";

/// Agent provider settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    /// Told to agents in `Registered`; the manager's heartbeat timeout
    /// should be a few of these.
    pub heartbeat_interval_ms: u64,
    /// How long `read_log` waits for the agent's answer.
    pub log_timeout: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig { heartbeat_interval_ms: 5_000, log_timeout: Duration::from_secs(10) }
    }
}

type Outbound = mpsc::UnboundedSender<Result<pb::ManagerMessage, Status>>;

#[derive(Debug)]
struct Session {
    id: u64,
    tx: Outbound,
    /// The agent delivers `Launch.secrets` (`Register.features`).
    secrets: bool,
    /// The agent honours `Launch.gang` (`Register.features`).
    gang: bool,
}

#[derive(Debug, Default)]
struct RunSeq {
    forwarded: u64,
    acked: u64,
    terminal_seq: Option<u64>,
}

#[derive(Debug, Default)]
struct AgentHost {
    session: Option<Session>,
    runs: HashMap<String, RunSeq>,
}

#[derive(Debug)]
struct Inner {
    config: AgentConfig,
    events: Mutex<Option<mpsc::Sender<ProviderEvent>>>,
    hosts: Mutex<HashMap<String, AgentHost>>,
    /// Log reads waiting for their answer, by request id, each with the
    /// host it was sent to: only that host's session may answer it.
    logs: Mutex<HashMap<u64, LogWaiter>>,
    next_session: AtomicU64,
    next_request: AtomicU64,
    identity: Option<Identity>,
}

/// A `read_log` waiting for its `LogChunk`.
#[derive(Debug)]
struct LogWaiter {
    /// The host asked; a chunk from any other is not the answer.
    host: String,
    tx: oneshot::Sender<pb::LogChunk>,
}

/// The PKI that `Session` and `Join` use, and the names the port's certificate carries.
#[derive(Debug)]
struct Identity {
    pki: Arc<AgentPki>,
    names: Vec<String>,
}

/// The agent provider. Cheap to clone; clones share the sessions.
#[derive(Clone, Debug)]
pub struct AgentProvider {
    inner: Arc<Inner>,
}

/// The tonic service behind [`AgentProvider::into_service`].
#[derive(Clone, Debug)]
pub struct AgentSessionService {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain maps; a panic elsewhere must not take every session down.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn msg(body: pb::manager_message::Body) -> Result<pb::ManagerMessage, Status> {
    Ok(pb::ManagerMessage { body: Some(body) })
}

impl AgentProvider {
    /// A provider with no agents yet and no identity: its port is
    /// plaintext and admits any `Register` (in-process tests and the fuzz
    /// target). Servers use [`AgentProvider::with_identity`].
    pub fn new(config: AgentConfig) -> Self {
        AgentProvider {
            inner: Arc::new(Inner {
                config,
                events: Mutex::new(None),
                hosts: Mutex::new(HashMap::new()),
                logs: Mutex::new(HashMap::new()),
                next_session: AtomicU64::new(1),
                next_request: AtomicU64::new(1),
                identity: None,
            }),
        }
    }

    /// A provider whose port serves TLS with a certificate of `pki`'s CA
    /// for `names` (besides `localhost`, `127.0.0.1` and the bound address),
    /// hands out certificates for join tokens, and admits only agents with
    /// a certificate for the host name they register.
    pub fn with_identity(config: AgentConfig, pki: Arc<AgentPki>, names: Vec<String>) -> Self {
        let p = Self::new(config);
        let mut inner = Arc::into_inner(p.inner).unwrap_or_else(|| unreachable!("a new provider has one owner"));
        inner.identity = Some(Identity { pki, names });
        AgentProvider { inner: Arc::new(inner) }
    }

    /// The TLS settings of the port (`None`: plaintext), for a listener bound to `bound`.
    fn tls(&self, bound: SocketAddr) -> Result<Option<tonic::transport::ServerTlsConfig>, ProviderError> {
        let Some(id) = &self.inner.identity else { return Ok(None) };
        let mut names = id.names.clone();
        names.extend(["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()]);
        if !bound.ip().is_unspecified() {
            names.push(bound.ip().to_string());
        }
        let (chain, key) = id.pki.server_identity(&names).map_err(|e| ProviderError::Remote {
            host: "agent port".into(),
            message: format!("making the agent port's certificate: {e}"),
        })?;
        Ok(Some(
            tonic::transport::ServerTlsConfig::new()
                .identity(tonic::transport::Identity::from_pem(chain, key))
                .client_ca_root(tonic::transport::Certificate::from_pem(id.pki.ca_pem()))
                // `Join` is called before the agent has a certificate; `Session` checks for one.
                .client_auth_optional(true),
        ))
    }

    /// The gRPC service, to mount on a tonic server.
    pub fn into_service(&self) -> AgentServiceServer<AgentSessionService> {
        AgentServiceServer::new(AgentSessionService { inner: self.inner.clone() })
    }

    /// Serves agents on a bound listener until `shutdown` completes (tests
    /// bind port 0): TLS when the provider has an identity.
    pub async fn serve_with_listener(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), ProviderError> {
        let bound = listener.local_addr().map_err(|e| ProviderError::Remote {
            host: "agent port".into(),
            message: format!("reading the bound address: {e}"),
        })?;
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = self.tls(bound)? {
            builder = builder.tls_config(tls).map_err(|e| ProviderError::Remote {
                host: "agent port".into(),
                message: format!("TLS settings: {e}"),
            })?;
        }
        builder
            .add_service(self.into_service())
            .serve_with_incoming_shutdown(paceline_proto::incoming::tcp(listener), shutdown)
            .await
            .map_err(|e| ProviderError::Remote { host: "agent port".into(), message: e.to_string() })
    }

    /// Hosts with an open session now.
    pub fn connected_hosts(&self) -> Vec<String> {
        let mut v: Vec<String> =
            lock(&self.inner.hosts).iter().filter(|(_, h)| h.session.is_some()).map(|(n, _)| n.clone()).collect();
        v.sort();
        v
    }

    fn send(&self, host: &str, body: pb::manager_message::Body) -> Result<(), ProviderError> {
        let hosts = lock(&self.inner.hosts);
        let tx = hosts
            .get(host)
            .and_then(|h| h.session.as_ref())
            .ok_or_else(|| ProviderError::HostNotConnected { provider: NAME, host: host.to_string() })?;
        tx.tx.send(msg(body)).map_err(|_| ProviderError::HostNotConnected { provider: NAME, host: host.to_string() })
    }
}

impl Inner {
    fn events(&self) -> Option<mpsc::Sender<ProviderEvent>> {
        lock(&self.events).clone()
    }

    /// One agent's session. Generic over the inbound stream (tonic's
    /// `Streaming` in service, a plain stream in the fuzz target) so the
    /// fuzz target drives this very code.
    /// `certified`: the host name the client certificate stands for, which
    /// `Register` must claim (`None` only without an identity).
    async fn run_session<S>(self: Arc<Self>, mut inbound: S, tx: Outbound, certified: Option<String>)
    where
        S: futures::Stream<Item = Result<pb::AgentMessage, Status>> + Unpin,
    {
        use futures::StreamExt;
        let first = match inbound.next().await.transpose() {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(e) => {
                debug!(error = %e, "agent stream failed before registering");
                return;
            }
        };
        let mut reg = match first.body {
            Some(pb::agent_message::Body::Register(r)) => r,
            _ => {
                let _ = tx.send(Err(Status::invalid_argument("register: the first message must be Register")));
                return;
            }
        };
        if let Err(why) = convert::validate_register(&reg) {
            warn!(hostname = reg.hostname.get(..64.min(reg.hostname.len())).unwrap_or(""), why, "registration refused");
            let _ = tx.send(Err(Status::invalid_argument(why)));
            return;
        }
        // One spelling per host, with or without a certificate: `NODE-A.`
        // and `node-a` are one host (the join issues certificates for the
        // canonical name; an agent port without identities must not let
        // two spellings register as two hosts).
        match paceline_model::host::canonical_hostname(&reg.hostname) {
            Ok(canonical) => reg.hostname = canonical,
            Err(why) => {
                warn!(
                    hostname = reg.hostname.get(..64.min(reg.hostname.len())).unwrap_or(""),
                    why, "registration refused"
                );
                let _ = tx.send(Err(Status::invalid_argument(format!("hostname: {why}"))));
                return;
            }
        }
        if let Some(name) =
            certified.filter(|name| !name.strip_suffix('.').unwrap_or(name).eq_ignore_ascii_case(&reg.hostname))
        {
            warn!(
                certified = name,
                claimed = reg.hostname.get(..64.min(reg.hostname.len())).unwrap_or(""),
                "registration refused: the certificate is for another host"
            );
            let _ = tx.send(Err(Status::permission_denied(format!(
                "hostname: this agent's certificate is for host {name:?}, not {:?}",
                reg.hostname
            ))));
            return;
        }
        let Some(events) = self.events() else {
            let _ = tx.send(Err(Status::unavailable("host manager not started")));
            return;
        };
        let host = reg.hostname.clone();
        let id = self.next_session.fetch_add(1, Ordering::Relaxed);
        if tx
            .send(msg(pb::manager_message::Body::Registered(pb::Registered {
                heartbeat_interval_ms: self.config.heartbeat_interval_ms,
            })))
            .is_err()
        {
            return;
        }
        {
            // The newer stream wins; dropping the old sender ends the old response stream.
            let mut hosts = lock(&self.hosts);
            let h = hosts.entry(host.clone()).or_default();
            let secrets = reg.features.iter().any(|f| f == pb::FEATURE_SECRETS);
            let gang = reg.features.iter().any(|f| f == pb::FEATURE_GANG);
            if h.session.replace(Session { id, tx, secrets, gang }).is_some() {
                info!(host, "agent reconnected; replacing its previous stream");
            }
        }
        info!(host, agent_id = reg.agent_id, runs = reg.running.len(), "agent registered");
        let registration = HostRegistration {
            hostname: host.clone(),
            agent_id: reg.agent_id,
            total: paceline_proto::convert::resources(reg.total.as_ref()),
            attributes: reg.attributes.into_iter().collect(),
            running: reg
                .running
                .into_iter()
                .map(|r| RunningRun {
                    resources: paceline_proto::convert::resources(r.resources.as_ref()),
                    gpu: paceline_proto::convert::gpu_grant(r.gpu.as_ref()),
                    run_id: r.run_id,
                    task_id: r.task_id,
                })
                .collect(),
            gpus: reg.gpus.iter().map(paceline_proto::convert::gpu_device).collect(),
        };
        if events.send(ProviderEvent::HostRegistered(registration)).await.is_err() {
            return;
        }
        loop {
            let m = match inbound.next().await.transpose() {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => {
                    debug!(host, error = %e, "agent stream failed");
                    break;
                }
            };
            let ev = match m.body {
                Some(pb::agent_message::Body::Heartbeat(hb)) => {
                    // The measured use rides on the heartbeat; it goes first
                    // so that liveness stays its own event.
                    if !hb.usage.is_empty() {
                        let usage = hb.usage.into_iter().map(convert::run_usage).collect();
                        if events.send(ProviderEvent::Usage { host: host.clone(), usage }).await.is_err() {
                            break;
                        }
                    }
                    ProviderEvent::Heartbeat { host: host.clone() }
                }
                Some(pb::agent_message::Body::Status(u)) => match self.admit(&host, u) {
                    Some(ev) => ev,
                    None => continue,
                },
                Some(pb::agent_message::Body::LaunchRejected(r)) => {
                    ProviderEvent::LaunchRejected { host: host.clone(), run_id: r.run_id, error: r.error }
                }
                Some(pb::agent_message::Body::LogChunk(c)) => {
                    self.answer_log(&host, c);
                    continue;
                }
                Some(pb::agent_message::Body::Register(_)) => {
                    warn!(host, "second Register on one stream ignored; reconnect to re-register");
                    continue;
                }
                None => continue,
            };
            if events.send(ev).await.is_err() {
                break;
            }
        }
        let current = {
            let mut hosts = lock(&self.hosts);
            match hosts.get_mut(&host) {
                Some(h) if h.session.as_ref().is_some_and(|s| s.id == id) => {
                    h.session = None;
                    true
                }
                _ => false,
            }
        };
        if current {
            info!(host, "agent stream closed");
            let _ = events.send(ProviderEvent::HostDisconnected { host, reason: "agent stream closed".into() }).await;
        }
    }

    /// Hands a `LogChunk` to the `read_log` waiting for it, if `host` is the
    /// one that was asked. Request ids are sequential, so any agent could
    /// guess another host's: a chunk from another host neither completes
    /// nor fails that read (it would forge the log, or make reads fail).
    fn answer_log(&self, host: &str, c: pb::LogChunk) {
        let mut logs = lock(&self.logs);
        match logs.get(&c.request_id) {
            Some(w) if w.host == host => {
                if let Some(w) = logs.remove(&c.request_id) {
                    let _ = w.tx.send(c);
                }
            }
            Some(w) => warn!(
                host,
                asked = w.host,
                request_id = c.request_id,
                "log chunk for a read sent to another host; dropped"
            ),
            None => debug!(host, request_id = c.request_id, "log chunk for no waiting read (timed out?); dropped"),
        }
    }

    /// Duplicate suppression by (run_id, seq); returns the event to forward.
    fn admit(&self, host: &str, u: pb::StatusUpdate) -> Option<ProviderEvent> {
        let mut hosts = lock(&self.hosts);
        let h = hosts.get_mut(host)?;
        let seqs = h.runs.entry(u.run_id.clone()).or_default();
        if u.seq <= seqs.acked {
            if let Some(s) = &h.session {
                let _ = s.tx.send(msg(pb::manager_message::Body::Ack(pb::Ack { run_id: u.run_id, seq: u.seq })));
            }
            return None;
        }
        if u.seq <= seqs.forwarded {
            return None;
        }
        let Some(update) = convert::run_update(host, u) else {
            warn!(host, "status update with an unknown state dropped");
            return None;
        };
        seqs.forwarded = update.seq;
        if update.state.is_terminal() {
            seqs.terminal_seq = Some(update.seq);
        }
        Some(ProviderEvent::RunUpdate(update))
    }
}

#[async_trait]
impl AgentService for AgentSessionService {
    type SessionStream = UnboundedReceiverStream<Result<pb::ManagerMessage, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let certified = match &self.inner.identity {
            None => None,
            Some(id) => {
                let der = request.peer_certs().and_then(|c| c.first().map(|c| c.to_vec())).ok_or_else(|| {
                    warn!(peer = ?request.remote_addr(), "agent session without a client certificate refused");
                    Status::unauthenticated(
                        "a client certificate is required: join the cluster first (`paceline agent --join TOKEN --ca-hash …`)",
                    )
                })?;
                let pki = id.pki.clone();
                let name = tokio::task::spawn_blocking(move || pki.session_hostname(&der))
                    .await
                    .map_err(|_| Status::internal("checking the client certificate"))?
                    .map_err(|e| match e {
                        CertError::Refused(why) => {
                            warn!(peer = ?request.remote_addr(), why, "agent session refused");
                            Status::permission_denied(why)
                        }
                        CertError::Pki(e) => {
                            tracing::error!(error = %e, "reading the agent PKI state");
                            Status::unavailable("the host manager cannot read its certificate records")
                        }
                    })?;
                Some(name)
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        // Answer at once and read Register in the session task, so the agent
        // may send it before or after it awaits the response headers.
        tokio::spawn(self.inner.clone().run_session(request.into_inner(), tx, certified));
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }

    async fn join(&self, request: Request<pb::JoinRequest>) -> Result<Response<pb::JoinResponse>, Status> {
        let Some(id) = &self.inner.identity else {
            return Err(Status::failed_precondition("this agent port has no certificate authority"));
        };
        let peer = request.remote_addr();
        let req = request.into_inner();
        let hostname = req.hostname.clone();
        let pki = id.pki.clone();
        let result = tokio::task::spawn_blocking(move || pki.join(&req.token, &req.hostname, &req.csr_pem))
            .await
            .map_err(|_| Status::internal("signing the certificate"))?;
        let shown = hostname.get(..64.min(hostname.len())).unwrap_or("");
        match result {
            Ok(cert_pem) => {
                info!(host = shown, ?peer, "agent joined; certificate issued");
                Ok(Response::new(pb::JoinResponse { cert_pem, ca_pem: id.pki.ca_pem().to_owned() }))
            }
            Err(e) => {
                warn!(host = shown, ?peer, error = %e, "join refused");
                Err(match e {
                    JoinError::BadToken => Status::unauthenticated(e.to_string()),
                    JoinError::Expired(_) | JoinError::Revoked(_) | JoinError::UsedUp(_) => {
                        Status::permission_denied(e.to_string())
                    }
                    JoinError::HostnameTaken(_) => Status::already_exists(e.to_string()),
                    JoinError::BadHostname(_) | JoinError::BadCsr(_) => Status::invalid_argument(e.to_string()),
                    JoinError::Pki(p) => {
                        tracing::error!(error = %p, "agent PKI");
                        Status::internal("the host manager could not sign the certificate")
                    }
                })
            }
        }
    }
}

#[async_trait]
impl Provider for AgentProvider {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn start(&self, events: mpsc::Sender<ProviderEvent>) -> Result<(), ProviderError> {
        *lock(&self.inner.events) = Some(events);
        Ok(())
    }

    async fn launch(&self, host: &str, runs: Vec<LaunchRequest>) -> Result<(), ProviderError> {
        let hosts = lock(&self.inner.hosts);
        let s = hosts
            .get(host)
            .and_then(|h| h.session.as_ref())
            .ok_or_else(|| ProviderError::HostNotConnected { provider: NAME, host: host.to_string() })?;
        // Checked for the whole batch first, so a refusal starts nothing.
        if !s.secrets && runs.iter().any(|r| !r.secrets.is_empty()) {
            return Err(ProviderError::Remote {
                host: host.to_string(),
                message: "this agent does not deliver task secrets (an older version): upgrade it".into(),
            });
        }
        for mut r in runs {
            if !s.gang && r.gang.take().is_some() {
                // An older agent picks the ports itself and writes no peers
                // file; the member still gets its PACELINE_GANG_* variables
                // (its peers' ports are missing only when this agent reports
                // no `port_range`, which an older one does not).
                tracing::debug!(host, run_id = r.run_id, "agent without the gang feature: no peers file");
            }
            s.tx.send(msg(pb::manager_message::Body::Launch(convert::launch(r))))
                .map_err(|_| ProviderError::HostNotConnected { provider: NAME, host: host.to_string() })?;
        }
        Ok(())
    }

    async fn kill(&self, host: &str, run_id: &str, grace_override: Option<Duration>) -> Result<(), ProviderError> {
        self.send(
            host,
            pb::manager_message::Body::Kill(pb::Kill {
                run_id: run_id.to_string(),
                grace_period_secs: grace_override.map(|g| g.as_secs().min(u64::from(u32::MAX)) as u32),
            }),
        )
    }

    async fn acknowledge(&self, host: &str, run_id: &str, seq: u64) -> Result<(), ProviderError> {
        let mut hosts = lock(&self.inner.hosts);
        let Some(h) = hosts.get_mut(host) else { return Ok(()) };
        if let Some(seqs) = h.runs.get_mut(run_id) {
            seqs.acked = seqs.acked.max(seq);
            if seqs.terminal_seq.is_some_and(|t| seqs.acked >= t) {
                h.runs.remove(run_id);
            }
        }
        // Not connected: the agent re-sends on its next stream and is acknowledged then.
        if let Some(s) = &h.session {
            let _ = s.tx.send(msg(pb::manager_message::Body::Ack(pb::Ack { run_id: run_id.to_string(), seq })));
        }
        Ok(())
    }

    async fn reconcile(&self, _host: &str, _expected_run_ids: Vec<String>) -> Result<(), ProviderError> {
        // Agents report every run they supervise in `Register`; the manager
        // reconciles against that list, so there is nothing to ask here.
        Ok(())
    }

    /// Ends the host's stream (UNAVAILABLE, naming why): the agent redials
    /// at once and registers, reporting its runs, as after any lost
    /// stream. A second `Register` on the same stream is not part of the
    /// protocol, and heartbeats alone cannot say what the host runs.
    async fn reregister(&self, host: &str) -> Result<(), ProviderError> {
        let session = lock(&self.inner.hosts).get_mut(host).and_then(|h| h.session.take());
        // No stream: its next one registers anyway.
        let Some(session) = session else { return Ok(()) };
        info!(host, "ending the stream of a host declared lost so that it registers again");
        let _ = session.tx.send(Err(Status::unavailable(format!(
            "host {host} was declared lost (its heartbeats came too late): register again"
        ))));
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
        let request_id = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.logs).insert(request_id, LogWaiter { host: host.to_string(), tx });
        let sent = self.send(
            host,
            pb::manager_message::Body::ReadLog(pb::ReadLog {
                request_id,
                run_id: run_id.to_string(),
                stream: stream.as_str().to_string(),
                offset,
                max_bytes,
            }),
        );
        if let Err(e) = sent {
            lock(&self.inner.logs).remove(&request_id);
            return Err(e);
        }
        let timeout = self.inner.config.log_timeout;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(c)) if c.error.is_empty() => Ok(LogChunk { data: c.data, offset: c.offset, file_size: c.file_size }),
            Ok(Ok(c)) => Err(ProviderError::Remote { host: host.to_string(), message: c.error }),
            Ok(Err(_)) | Err(_) => {
                lock(&self.inner.logs).remove(&request_id);
                Err(ProviderError::Timeout { host: host.to_string(), timeout_ms: timeout.as_millis() as u64 })
            }
        }
    }
}
