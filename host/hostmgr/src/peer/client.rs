//! The job manager's side of `paceline.hostmgr.v1`: a [`HostAccess`] over the network.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use paceline_joints::{Launcher, OfferSource, PortError, RunRefused};
use paceline_model::run::LaunchRequest;
use paceline_proto::bearer::Bearer;
use paceline_proto::hostmgr::v1 as pb;
use paceline_proto::hostmgr::v1::host_manager_peer_client::HostManagerPeerClient;
use tokio::sync::mpsc;
use tonic::{Response, Status};
use tracing::{info, warn};

use super::{from_json, json, stream_name};
use crate::{
    ExpectedRun, HostAccess, HostError, HostEvent, HostEvents, HostInfo, Lease, LeaseId, LeaseRequest, LogChunk,
    LogStream, RemoteErrorKind,
};

/// Computes the job manager's expectations afresh at each (re)subscription;
/// `None` when the job manager is gone.
pub type Expectations = Arc<dyn Fn() -> Option<Vec<ExpectedRun>> + Send + Sync>;

type Client = HostManagerPeerClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>>;

/// How the job manager's side finds the leading host manager: given
/// addresses (following a standby to the leader it names), or the leader of
/// the `hostmgr` role in the membership. Provided by the wiring, so that this
/// crate knows neither.
#[async_trait]
pub trait LocateLeader: Send + Sync {
    /// A channel to the host manager that leads now.
    async fn channel(&self) -> Result<tonic::transport::Channel, String>;
    /// Where it looks, for messages (`127.0.0.1:7070,…` or `the hostmgr leader in ZooKeeper`).
    fn describe(&self) -> String;
    /// Closes what it holds (a membership session); called once, at stop.
    async fn shutdown(&self) {}
}

struct Shared {
    locate: Arc<dyn LocateLeader>,
    bearer: Bearer,
    epoch: u64,
    channel: tokio::sync::Mutex<Option<tonic::transport::Channel>>,
    inventory: RwLock<Vec<HostInfo>>,
    provider: RwLock<String>,
    /// The live runs the host manager's hosts measured, by run id (from
    /// `EventBatch.measured_json`).
    measured: RwLock<std::collections::HashMap<String, crate::MeasuredRun>>,
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
            .field("leader", &self.shared.locate.describe())
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
    /// Towards the host manager that `locate` finds (each time a connection
    /// is needed), calling with `epoch` and the bearer `token`. Connects now:
    /// fails when no host manager leads within `wait`.
    pub async fn connect(
        locate: Arc<dyn LocateLeader>,
        token: Option<&str>,
        epoch: u64,
        wait: Duration,
    ) -> Result<RemoteHosts, String> {
        let bearer = Bearer::new(token).map_err(|e| e.to_string())?;
        let remote = RemoteHosts {
            shared: Arc::new(Shared {
                locate,
                bearer,
                epoch,
                channel: tokio::sync::Mutex::new(None),
                inventory: RwLock::new(Vec::new()),
                measured: RwLock::new(Default::default()),
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
                    return Err(format!("no host manager at {}: {e}", remote.shared.locate.describe()));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// Stops following the host manager (the event stream ends) and closes
    /// what the locator holds.
    pub async fn stop(&self) {
        if let Some(t) = self.shared.events_task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
        self.shared.locate.shutdown().await;
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
        let channel = self
            .shared
            .locate
            .channel()
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
                        info!(leader = %self.shared.locate.describe(), "subscribed to the host manager again");
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
                        if !batch.measured_json.is_empty() {
                            match from_json::<Vec<crate::MeasuredRun>>("measured_json", &batch.measured_json) {
                                Ok(runs) => {
                                    *self.shared.measured.write().unwrap_or_else(|p| p.into_inner()) =
                                        runs.into_iter().map(|r| (r.run_id.clone(), r)).collect();
                                }
                                Err(e) => warn!(error = %e, "unreadable measured use from the host manager"),
                            }
                        }
                        if !batch.hosts_json.is_empty() {
                            match from_json::<Vec<HostInfo>>("hosts_json", &batch.hosts_json) {
                                Ok(hosts) => {
                                    let mut inventory =
                                        self.shared.inventory.write().unwrap_or_else(|p| p.into_inner());
                                    let joined = newly_reachable(&inventory, &hosts);
                                    *inventory = hosts;
                                    drop(inventory);
                                    for ev in joined {
                                        if tx.send(ev).is_err() {
                                            return;
                                        }
                                    }
                                }
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

/// `HostJoined` for each host reachable in `new` that was not in `old`: a
/// host that registered with a new host manager's leader before this
/// client subscribed to it joined without an event on this stream, and the
/// job manager retries tasks waiting out a placement backoff on a join.
fn newly_reachable(old: &[HostInfo], new: &[HostInfo]) -> Vec<HostEvent> {
    let before: std::collections::HashSet<&str> =
        old.iter().filter(|h| h.reachable).map(|h| h.view.name.as_str()).collect();
    new.iter()
        .filter(|h| h.reachable && !before.contains(h.view.name.as_str()))
        .map(|h| HostEvent::HostJoined {
            host: h.view.name.clone(),
            total: h.view.total,
            attributes: h.view.attributes.clone(),
        })
        .collect()
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

    /// Only runs their hosts measured: the peer protocol carries no other
    /// run's holding (so `Task.reserved` stays unset for those).
    fn run_holding(&self, run_id: &str) -> Option<crate::RunHolding> {
        let measured = self.shared.measured.read().unwrap_or_else(|p| p.into_inner());
        measured.get(run_id).map(|r| crate::RunHolding {
            host: r.host.clone(),
            reserved: r.reserved,
            used: Some(r.used),
        })
    }

    fn measured_use(&self) -> Vec<crate::MeasuredRun> {
        self.shared.measured.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
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

#[async_trait]
impl OfferSource for RemoteHosts {
    async fn lease(&self, request: &LeaseRequest) -> Result<Lease, PortError> {
        let request = pb::LeaseRequest { epoch: self.shared.epoch, request_json: json(request) };
        let answer = self.call(|mut c| async move { c.lease(request).await }).await?;
        Ok(from_json("lease_json", &answer.lease_json)
            .map_err(|e| HostError::Remote { kind: RemoteErrorKind::Other, message: e })?)
    }

    async fn release(&self, lease: LeaseId) -> Result<(), PortError> {
        let request = pb::ReleaseRequest { epoch: self.shared.epoch, lease_id: lease.0 };
        self.call(|mut c| async move { c.release(request).await }).await?;
        Ok(())
    }
}

#[async_trait]
impl Launcher for RemoteHosts {
    async fn launch(&self, lease: LeaseId, host: &str, runs: Vec<LaunchRequest>) -> Result<Vec<RunRefused>, PortError> {
        let request = pb::LaunchRequest {
            epoch: self.shared.epoch,
            lease_id: lease.0,
            host: host.to_string(),
            runs_json: json(&runs),
        };
        let response = self.call(|mut c| async move { c.launch(request).await }).await?;
        Ok(response.refused.into_iter().map(|r| RunRefused { run_id: r.run_id, reason: r.reason }).collect())
    }

    async fn kill(&self, run_id: &str, grace: Option<Duration>) -> Result<(), PortError> {
        let request = pb::KillRequest {
            epoch: self.shared.epoch,
            run_id: run_id.to_string(),
            grace_secs: grace.map(|g| u32::try_from(g.as_secs()).unwrap_or(u32::MAX)),
        };
        self.call(|mut c| async move { c.kill(request).await }).await?;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, reachable: bool) -> HostInfo {
        HostInfo {
            view: paceline_model::view::HostView { name: name.into(), ..Default::default() },
            agent_id: None,
            state: paceline_model::host::MaintenanceState::Up,
            reachable,
            last_heartbeat_ms: 0,
            lease: None,
            runs: Vec::new(),
        }
    }

    #[test]
    fn hosts_that_became_reachable_between_inventories_joined() {
        let old = [host("a", true), host("b", false)];
        let new = [host("a", true), host("b", true), host("c", true), host("d", false)];
        let joined: Vec<String> = newly_reachable(&old, &new)
            .into_iter()
            .map(|e| match e {
                HostEvent::HostJoined { host, .. } => host,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(joined, ["b", "c"], "b came back, c is new; a was there, d is not reachable");
        assert!(newly_reachable(&new, &new).is_empty(), "the same inventory again: nothing joined");
    }

    #[test]
    fn statuses_keep_their_class_there_and_back() {
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
            assert_eq!(Status::from(remote_error(&status)).code(), status.code());
        }
    }
}
