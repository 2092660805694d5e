//! The host manager in a process of its own (`paceline server --roles
//! hostmgr`): the internal protocol `paceline.hostmgr.v1` between it and the
//! job manager's process.
//!
//! - [`HostPeerService`]: the host manager's side, over its [`HostManager`],
//!   with the epoch fence (a job manager that lost its leadership is refused
//!   once its successor has subscribed).
//! - [`RemoteHosts`]: the job manager's side, a [`HostAccess`] over the
//!   network. It keeps one `Events` stream open to the leading host manager
//!   and feeds it into the [`HostEvents`] its subscriber reads; when the
//!   stream breaks (the host manager died or lost its leadership) it finds the
//!   leader again, sends the job manager's expectations afresh (the new
//!   leader reconciles its agents against them) and resubscribes (which
//!   replays every run update not acknowledged). `host`/`hosts` answer from
//!   the inventory the stream carries.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use paceline_hostmgr::{
    ExpectedRun, HostAccess, HostError, HostEvent, HostEvents, HostInfo, HostManager, Lease, LeaseId, LeaseRequest,
    LogChunk, LogStream, RemoteErrorKind,
};
use paceline_model::run::LaunchRequest;
use paceline_proto::hostmgr::v1 as pb;
use paceline_proto::hostmgr::v1::host_manager_peer_client::HostManagerPeerClient;
use paceline_proto::hostmgr::v1::host_manager_peer_server::{HostManagerPeer, HostManagerPeerServer};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};
use tracing::{info, warn};

/// How often the inventory goes down the stream when it changed without an
/// event (allocations, heartbeats).
const INVENTORY_EVERY: Duration = Duration::from_millis(500);

/// Events per streamed batch, at most.
const BATCH: usize = 4096;

fn json<T: serde::Serialize + ?Sized>(value: &T) -> Vec<u8> {
    // The model's types serialize infallibly (no maps with non-string keys).
    serde_json::to_vec(value).unwrap_or_default()
}

fn from_json<T: serde::de::DeserializeOwned>(field: &str, bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{field}: {e}"))
}

fn stream_name(s: LogStream) -> &'static str {
    match s {
        LogStream::Stdout => "stdout",
        LogStream::Stderr => "stderr",
    }
}

fn stream_of(name: &str) -> Result<LogStream, Status> {
    match name {
        "stdout" => Ok(LogStream::Stdout),
        "stderr" => Ok(LogStream::Stderr),
        other => Err(Status::invalid_argument(format!("stream: `{other}` is neither stdout nor stderr"))),
    }
}

/// The host manager's side of the protocol.
#[derive(Clone, Debug)]
pub struct HostPeerService {
    hosts: HostManager,
    /// The largest job manager epoch that subscribed; smaller ones are fenced.
    highest_epoch: Arc<AtomicU64>,
}

impl HostPeerService {
    /// Over the process's host manager.
    pub fn new(hosts: HostManager) -> HostPeerService {
        HostPeerService { hosts, highest_epoch: Arc::new(AtomicU64::new(0)) }
    }

    /// As a tonic service (64 MiB messages: an inventory of many hosts).
    pub fn into_server(self) -> HostManagerPeerServer<HostPeerService> {
        HostManagerPeerServer::new(self).max_decoding_message_size(64 << 20).max_encoding_message_size(64 << 20)
    }

    fn fence(&self, epoch: u64) -> Result<(), Status> {
        let highest = self.highest_epoch.load(Ordering::SeqCst);
        if epoch < highest {
            return Err(Status::failed_precondition(format!(
                "fenced: a job manager with epoch {highest} has subscribed since; this caller's epoch {epoch} no longer leads"
            )));
        }
        Ok(())
    }
}

fn host_status(e: HostError) -> Status {
    paceline_api::status::host(e)
}

type EventStream = Pin<Box<dyn futures::Stream<Item = Result<pb::EventBatch, Status>> + Send>>;

#[async_trait]
impl HostManagerPeer for HostPeerService {
    type EventsStream = EventStream;

    async fn events(&self, request: Request<pb::EventsRequest>) -> Result<Response<EventStream>, Status> {
        let r = request.into_inner();
        let previous = self.highest_epoch.fetch_max(r.epoch, Ordering::SeqCst);
        if r.epoch < previous {
            return Err(Status::failed_precondition(format!(
                "fenced: a job manager with epoch {previous} has subscribed; epoch {} no longer leads",
                r.epoch
            )));
        }
        if !r.expected_runs_json.is_empty() {
            let expected: Vec<ExpectedRun> =
                from_json("expected_runs_json", &r.expected_runs_json).map_err(Status::invalid_argument)?;
            info!(runs = expected.len(), epoch = r.epoch, "job manager subscribed with its expectations");
            self.hosts.expect_runs(expected).await;
        }
        let mut events = self.hosts.subscribe();
        let hosts = self.hosts.clone();
        let provider = hosts.provider_name().to_string();
        let (tx, rx) = mpsc::channel::<Result<pb::EventBatch, Status>>(16);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(INVENTORY_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The first batch always carries the inventory.
            let mut last: Option<Vec<HostInfo>> = None;
            loop {
                let mut batch: Vec<HostEvent> = Vec::new();
                let mut inventory_due = last.is_none();
                tokio::select! {
                    ev = events.recv() => match ev {
                        // Another subscriber replaced this one (or the manager stopped).
                        None => return,
                        Some(ev) => {
                            batch.push(ev);
                            while batch.len() < BATCH {
                                match events.try_recv() {
                                    Some(ev) => batch.push(ev),
                                    None => break,
                                }
                            }
                        }
                    },
                    _ = every.tick() => inventory_due = true,
                    () = tx.closed() => return,
                }
                inventory_due |= batch.iter().any(|e| !matches!(e, HostEvent::Run(_)));
                let mut hosts_json = Vec::new();
                if inventory_due {
                    let now = hosts.hosts();
                    if last.as_ref() != Some(&now) {
                        hosts_json = json(&now);
                        last = Some(now);
                    }
                }
                if batch.is_empty() && hosts_json.is_empty() {
                    continue;
                }
                let message = pb::EventBatch { events_json: json(&batch), hosts_json, provider: provider.clone() };
                if tx.send(Ok(message)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn acknowledge(
        &self,
        request: Request<pb::AcknowledgeRequest>,
    ) -> Result<Response<pb::AcknowledgeResponse>, Status> {
        let r = request.into_inner();
        self.fence(r.epoch)?;
        for ack in &r.acks {
            self.hosts.acknowledge(&ack.run_id, ack.seq).await;
        }
        Ok(Response::new(pb::AcknowledgeResponse {}))
    }

    async fn lease(&self, request: Request<pb::LeaseRequest>) -> Result<Response<pb::LeaseResponse>, Status> {
        let r = request.into_inner();
        self.fence(r.epoch)?;
        let req: LeaseRequest = from_json("request_json", &r.request_json).map_err(Status::invalid_argument)?;
        let lease = self.hosts.lease(&req).map_err(host_status)?;
        Ok(Response::new(pb::LeaseResponse { lease_json: json(&lease) }))
    }

    async fn release(&self, request: Request<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseResponse>, Status> {
        let r = request.into_inner();
        self.fence(r.epoch)?;
        self.hosts.release(LeaseId(r.lease_id)).map_err(host_status)?;
        Ok(Response::new(pb::ReleaseResponse {}))
    }

    async fn launch(&self, request: Request<pb::LaunchRequest>) -> Result<Response<pb::LaunchResponse>, Status> {
        let r = request.into_inner();
        self.fence(r.epoch)?;
        let runs: Vec<LaunchRequest> = from_json("runs_json", &r.runs_json).map_err(Status::invalid_argument)?;
        self.hosts.launch(LeaseId(r.lease_id), &r.host, runs).await.map_err(host_status)?;
        Ok(Response::new(pb::LaunchResponse {}))
    }

    async fn kill(&self, request: Request<pb::KillRequest>) -> Result<Response<pb::KillResponse>, Status> {
        let r = request.into_inner();
        self.fence(r.epoch)?;
        let grace = r.grace_secs.map(|s| Duration::from_secs(u64::from(s)));
        self.hosts.kill_with_grace(&r.run_id, grace).await.map_err(host_status)?;
        Ok(Response::new(pb::KillResponse {}))
    }

    async fn read_log(&self, request: Request<pb::ReadLogRequest>) -> Result<Response<pb::ReadLogResponse>, Status> {
        let r = request.into_inner();
        let stream = stream_of(&r.stream)?;
        let chunk =
            self.hosts.read_log_on(&r.host, &r.run_id, stream, r.offset, r.max_bytes).await.map_err(host_status)?;
        Ok(Response::new(pb::ReadLogResponse { data: chunk.data, offset: chunk.offset, file_size: chunk.file_size }))
    }

    async fn inventory(
        &self,
        _request: Request<pb::InventoryRequest>,
    ) -> Result<Response<pb::InventoryResponse>, Status> {
        Ok(Response::new(pb::InventoryResponse {
            hosts_json: json(&self.hosts.hosts()),
            provider: self.hosts.provider_name().to_string(),
        }))
    }
}

/// A gRPC answer as a [`HostError`], keeping its class.
fn remote_error(status: &Status) -> HostError {
    let kind = match status.code() {
        tonic::Code::NotFound => RemoteErrorKind::NotFound,
        tonic::Code::InvalidArgument | tonic::Code::OutOfRange => RemoteErrorKind::InvalidRequest,
        tonic::Code::FailedPrecondition => RemoteErrorKind::FailedPrecondition,
        tonic::Code::Unimplemented => RemoteErrorKind::Unsupported,
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled | tonic::Code::Unknown => {
            RemoteErrorKind::Unavailable
        }
        _ => RemoteErrorKind::Other,
    };
    HostError::Remote { kind, message: status.message().to_string() }
}

fn unavailable(message: impl Into<String>) -> HostError {
    HostError::Remote { kind: RemoteErrorKind::Unavailable, message: message.into() }
}

/// Computes the job manager's expectations afresh at each (re)subscription;
/// `None` when the job manager is gone.
pub type Expectations = Arc<dyn Fn() -> Option<Vec<ExpectedRun>> + Send + Sync>;

type Client = HostManagerPeerClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, crate::placement_peer::Bearer>,
>;

struct Shared {
    servers: String,
    /// Finds the host manager's leader in ZooKeeper instead of `servers`.
    discovery: Option<Arc<dyn paceline_membership::Membership>>,
    ca_cert: Option<std::path::PathBuf>,
    bearer: crate::placement_peer::Bearer,
    epoch: u64,
    channel: tokio::sync::Mutex<Option<tonic::transport::Channel>>,
    inventory: RwLock<Vec<HostInfo>>,
    provider: RwLock<String>,
    /// Set by `expect_runs` (at assembly); replaced by `expectations` once the
    /// job manager is up.
    expected: Mutex<Vec<ExpectedRun>>,
    expectations: Mutex<Option<Expectations>>,
    events_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// The job manager's side: a [`HostAccess`] over `paceline.hostmgr.v1`.
#[derive(Clone)]
pub struct RemoteHosts {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RemoteHosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteHosts")
            .field("servers", &self.shared.servers)
            .field("epoch", &self.shared.epoch)
            .finish_non_exhaustive()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(t) = self.events_task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }
}

impl RemoteHosts {
    /// Towards the host managers at `servers` (comma-separated API
    /// addresses; the leader is found and followed), calling with `epoch`.
    /// Connects now: fails when no host manager leads within `wait`.
    ///
    /// With `discovery`, `servers` may be empty: the leader of the `hostmgr`
    /// role is looked up in the membership (its published API address) each
    /// time a connection is needed.
    pub async fn connect(
        servers: &str,
        discovery: Option<Arc<dyn paceline_membership::Membership>>,
        token: Option<&str>,
        ca_cert: Option<std::path::PathBuf>,
        epoch: u64,
        wait: Duration,
    ) -> Result<RemoteHosts, String> {
        let bearer = crate::placement_peer::Bearer::new(token)?;
        let remote = RemoteHosts {
            shared: Arc::new(Shared {
                servers: servers.to_string(),
                discovery,
                ca_cert,
                bearer,
                epoch,
                channel: tokio::sync::Mutex::new(None),
                inventory: RwLock::new(Vec::new()),
                provider: RwLock::new(String::new()),
                expected: Mutex::new(Vec::new()),
                expectations: Mutex::new(None),
                events_task: Mutex::new(None),
            }),
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match remote.refresh_inventory().await {
                Ok(()) => return Ok(remote),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    let at = if remote.shared.discovery.is_some() && servers.is_empty() {
                        "leading in ZooKeeper"
                    } else {
                        servers
                    };
                    return Err(format!("no host manager at {at}: {e}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// Stops following the host manager (the event stream ends) and closes
    /// the discovery session, if any.
    pub async fn stop(&self) {
        if let Some(t) = self.shared.events_task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
        if let Some(m) = &self.shared.discovery {
            m.shutdown().await;
        }
    }

    /// From now on each resubscription sends `expectations()` (the job
    /// manager's live runs), not the list given at assembly.
    pub fn set_expectations(&self, expectations: Expectations) {
        *self.shared.expectations.lock().unwrap_or_else(|p| p.into_inner()) = Some(expectations);
    }

    /// The leading host manager's client, connecting (and finding the leader) when needed.
    async fn channel(&self) -> Result<tonic::transport::Channel, HostError> {
        let mut slot = self.shared.channel.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let servers = match (&self.shared.discovery, self.shared.servers.is_empty()) {
            (Some(membership), true) => match membership.leader_of(paceline_membership::Role::Hostmgr).await {
                Ok(Some(leader)) => leader.api_addr,
                Ok(None) => return Err(unavailable("no host manager leads right now (election in progress)")),
                Err(e) => return Err(unavailable(format!("asking who leads hostmgr: {e}"))),
            },
            _ => self.shared.servers.clone(),
        };
        let channel = crate::leader::leading_channel(&servers, self.shared.ca_cert.as_deref())
            .await
            .map_err(|e| unavailable(format!("finding the leading host manager: {e}")))?;
        *slot = Some(channel.clone());
        Ok(channel)
    }

    async fn client(&self) -> Result<Client, HostError> {
        Ok(HostManagerPeerClient::with_interceptor(self.channel().await?, self.shared.bearer.clone())
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20))
    }

    /// Forgets the connection after a failure that may mean "not the leader any more".
    async fn forget(&self, status: &Status) {
        if matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled) {
            *self.shared.channel.lock().await = None;
        }
    }

    async fn call<T, F, Fut>(&self, f: F) -> Result<T, HostError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = Result<Response<T>, Status>>,
    {
        let client = self.client().await?;
        match f(client).await {
            Ok(r) => Ok(r.into_inner()),
            Err(status) => {
                self.forget(&status).await;
                Err(remote_error(&status))
            }
        }
    }

    async fn refresh_inventory(&self) -> Result<(), HostError> {
        let answer = self.call(|mut c| async move { c.inventory(pb::InventoryRequest {}).await }).await?;
        let hosts: Vec<HostInfo> = from_json("hosts_json", &answer.hosts_json)
            .map_err(|e| HostError::Remote { kind: RemoteErrorKind::Other, message: e })?;
        *self.shared.inventory.write().unwrap_or_else(|p| p.into_inner()) = hosts;
        *self.shared.provider.write().unwrap_or_else(|p| p.into_inner()) = answer.provider;
        Ok(())
    }

    /// The runs to send with a subscription; `None` once the job manager is
    /// gone (shutting down): then nothing is sent, since an empty list would
    /// tell a freshly started host manager to kill every run its agents report.
    fn expectations_now(&self) -> Option<Vec<ExpectedRun>> {
        let hook = self.shared.expectations.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match hook {
            Some(f) => f(),
            None => Some(self.shared.expected.lock().unwrap_or_else(|p| p.into_inner()).clone()),
        }
    }

    /// Keeps one `Events` stream open and forwards what it carries to `tx`
    /// until `tx`'s receiver is gone.
    async fn pump_events(self, tx: mpsc::UnboundedSender<HostEvent>) {
        let mut failures = 0u32;
        loop {
            if tx.is_closed() {
                return;
            }
            let Some(expected) = self.expectations_now() else { return };
            let request = pb::EventsRequest { epoch: self.shared.epoch, expected_runs_json: json(&expected) };
            let opened = self.call(|mut c| async move { c.events(request).await }).await;
            let mut stream = match opened {
                Ok(s) => {
                    if failures > 0 {
                        info!(servers = %self.shared.servers, "subscribed to the host manager again");
                    }
                    failures = 0;
                    s
                }
                Err(e) => {
                    if failures == 0 {
                        warn!(error = %e, "cannot subscribe to the host manager; retrying");
                    }
                    failures += 1;
                    *self.shared.channel.lock().await = None;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
            };
            loop {
                match stream.message().await {
                    Ok(Some(batch)) => {
                        if !batch.hosts_json.is_empty() {
                            match from_json::<Vec<HostInfo>>("hosts_json", &batch.hosts_json) {
                                Ok(hosts) => *self.shared.inventory.write().unwrap_or_else(|p| p.into_inner()) = hosts,
                                Err(e) => warn!(error = %e, "unreadable inventory from the host manager"),
                            }
                            *self.shared.provider.write().unwrap_or_else(|p| p.into_inner()) = batch.provider;
                        }
                        match from_json::<Vec<HostEvent>>("events_json", &batch.events_json) {
                            Ok(events) => {
                                for ev in events {
                                    if tx.send(ev).is_err() {
                                        return;
                                    }
                                }
                            }
                            // Unacknowledged updates come again on the next subscription.
                            Err(e) => warn!(error = %e, "unreadable events from the host manager"),
                        }
                    }
                    Ok(None) => {
                        warn!(
                            "the host manager ended the event stream (it stopped, or lost its leadership); resubscribing"
                        );
                        break;
                    }
                    Err(status) => {
                        warn!(error = %status, "the event stream from the host manager broke; resubscribing");
                        break;
                    }
                }
            }
            *self.shared.channel.lock().await = None;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[async_trait]
impl HostAccess for RemoteHosts {
    fn provider_name(&self) -> String {
        self.shared.provider.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn host(&self, name: &str) -> Option<HostInfo> {
        self.shared.inventory.read().unwrap_or_else(|p| p.into_inner()).iter().find(|h| h.view.name == name).cloned()
    }

    fn hosts(&self) -> Vec<HostInfo> {
        self.shared.inventory.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    async fn sync(&self) -> Result<(), HostError> {
        self.refresh_inventory().await
    }

    async fn tick(&self) {}

    fn subscribe(&self) -> HostEvents {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(self.clone().pump_events(tx));
        if let Some(old) = self.shared.events_task.lock().unwrap_or_else(|p| p.into_inner()).replace(task) {
            old.abort();
        }
        HostEvents::from_channel(rx)
    }

    async fn acknowledge_all(&self, updates: &[(String, u64)]) {
        if updates.is_empty() {
            return;
        }
        let request = pb::AcknowledgeRequest {
            epoch: self.shared.epoch,
            acks: updates.iter().map(|(run_id, seq)| pb::Ack { run_id: run_id.clone(), seq: *seq }).collect(),
        };
        if let Err(e) = self.call(|mut c| async move { c.acknowledge(request).await }).await {
            warn!(error = %e, updates = updates.len(), "acknowledgements not delivered; the updates will come again");
        }
    }

    async fn lease(&self, request: &LeaseRequest) -> Result<Lease, HostError> {
        let request = pb::LeaseRequest { epoch: self.shared.epoch, request_json: json(request) };
        let answer = self.call(|mut c| async move { c.lease(request).await }).await?;
        from_json("lease_json", &answer.lease_json)
            .map_err(|e| HostError::Remote { kind: RemoteErrorKind::Other, message: e })
    }

    async fn release(&self, lease: LeaseId) -> Result<(), HostError> {
        let request = pb::ReleaseRequest { epoch: self.shared.epoch, lease_id: lease.0 };
        self.call(|mut c| async move { c.release(request).await }).await.map(|_| ())
    }

    async fn launch(&self, lease: LeaseId, host: &str, runs: Vec<LaunchRequest>) -> Result<(), HostError> {
        let request = pb::LaunchRequest {
            epoch: self.shared.epoch,
            lease_id: lease.0,
            host: host.to_string(),
            runs_json: json(&runs),
        };
        self.call(|mut c| async move { c.launch(request).await }).await.map(|_| ())
    }

    async fn kill_with_grace(&self, run_id: &str, grace: Option<Duration>) -> Result<(), HostError> {
        let request = pb::KillRequest {
            epoch: self.shared.epoch,
            run_id: run_id.to_string(),
            grace_secs: grace.map(|g| u32::try_from(g.as_secs()).unwrap_or(u32::MAX)),
        };
        self.call(|mut c| async move { c.kill(request).await }).await.map(|_| ())
    }

    async fn read_log_on(
        &self,
        host: &str,
        run_id: &str,
        stream: LogStream,
        offset: u64,
        max_bytes: u64,
    ) -> Result<LogChunk, HostError> {
        let request = pb::ReadLogRequest {
            host: host.to_string(),
            run_id: run_id.to_string(),
            stream: stream_name(stream).into(),
            offset,
            max_bytes,
        };
        let answer = self.call(|mut c| async move { c.read_log(request).await }).await?;
        Ok(LogChunk { data: answer.data, offset: answer.offset, file_size: answer.file_size })
    }

    /// Kept and sent with the next subscription (which follows at once at
    /// assembly), so that reconciliation and the event stream start together.
    async fn expect_runs(&self, runs: Vec<ExpectedRun>) {
        *self.shared.expected.lock().unwrap_or_else(|p| p.into_inner()) = runs;
    }

    async fn drain(&self, host: &str) -> Result<(), HostError> {
        self.maintenance(host, "drain").await
    }

    async fn down(&self, host: &str) -> Result<(), HostError> {
        self.maintenance(host, "down").await
    }

    async fn up(&self, host: &str) -> Result<(), HostError> {
        self.maintenance(host, "up").await
    }
}

impl RemoteHosts {
    /// Maintenance goes through the host manager's public `HostService` (the
    /// same call an operator makes), then the inventory is read again so
    /// that an answer right after shows the new state.
    async fn maintenance(&self, host: &str, action: &str) -> Result<(), HostError> {
        use paceline_proto::v1::host_service_client::HostServiceClient;
        let mut hosts = HostServiceClient::with_interceptor(self.channel().await?, self.shared.bearer.clone());
        let reference = paceline_proto::v1::HostRef { hostname: host.to_string() };
        let answer = match action {
            "drain" => hosts
                .drain_host(paceline_proto::v1::DrainHostRequest { hostname: host.to_string(), then_down: false })
                .await
                .map(|_| ()),
            "down" => hosts.down_host(reference).await.map(|_| ()),
            _ => hosts.up_host(reference).await.map(|_| ()),
        };
        if let Err(status) = answer {
            self.forget(&status).await;
            return Err(remote_error(&status));
        }
        self.refresh_inventory().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_keep_their_class() {
        let cases = [
            (Status::not_found("x"), RemoteErrorKind::NotFound),
            (Status::invalid_argument("x"), RemoteErrorKind::InvalidRequest),
            (Status::failed_precondition("fenced"), RemoteErrorKind::FailedPrecondition),
            (Status::unimplemented("x"), RemoteErrorKind::Unsupported),
            (Status::unavailable("x"), RemoteErrorKind::Unavailable),
            (Status::internal("x"), RemoteErrorKind::Other),
        ];
        for (status, kind) in cases {
            match remote_error(&status) {
                HostError::Remote { kind: k, message } => {
                    assert_eq!(k, kind);
                    assert_eq!(message, status.message());
                }
                other => panic!("{other:?}"),
            }
            // And back to the same gRPC code at the job manager's API.
            assert_eq!(paceline_api::status::host(remote_error(&status)).code(), status.code());
        }
    }

    #[test]
    fn log_streams_survive_the_wire() {
        for s in [LogStream::Stdout, LogStream::Stderr] {
            assert_eq!(stream_of(stream_name(s)).expect("known"), s);
        }
        assert_eq!(stream_of("stdin").expect_err("unknown").code(), tonic::Code::InvalidArgument);
    }
}
