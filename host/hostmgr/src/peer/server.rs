//! The host manager's side of `paceline.hostmgr.v1`.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use paceline_model::run::LaunchRequest;
use paceline_proto::hostmgr::v1 as pb;
use paceline_proto::hostmgr::v1::host_manager_peer_server::{HostManagerPeer, HostManagerPeerServer};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};
use tracing::info;

use super::{BATCH, INVENTORY_EVERY, from_json, json, stream_of};
use crate::{ExpectedRun, HostEvent, HostInfo, HostManager, LeaseId, LeaseRequest};

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
            let mut last_measured: Option<Vec<crate::MeasuredRun>> = None;
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
                let mut measured_json = Vec::new();
                if inventory_due {
                    let now = hosts.hosts();
                    if last.as_ref() != Some(&now) {
                        hosts_json = json(&now);
                        last = Some(now);
                    }
                    // Measured use moves with every heartbeat, never with an
                    // event: it goes with the inventory's tick, when changed.
                    let mut measured = hosts.measured_use();
                    measured.sort_by(|a, b| a.run_id.cmp(&b.run_id));
                    if last_measured.as_ref() != Some(&measured) {
                        measured_json = json(&measured);
                        last_measured = Some(measured);
                    }
                }
                if batch.is_empty() && hosts_json.is_empty() && measured_json.is_empty() {
                    continue;
                }
                let message =
                    pb::EventBatch { events_json: json(&batch), hosts_json, provider: provider.clone(), measured_json };
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
        let lease = self.hosts.lease(&req).map_err(Status::from)?;
        Ok(Response::new(pb::LeaseResponse { lease_json: json(&lease) }))
    }

    async fn release(&self, request: Request<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseResponse>, Status> {
        let r = request.into_inner();
        self.fence(r.epoch)?;
        self.hosts.release(LeaseId(r.lease_id)).map_err(Status::from)?;
        Ok(Response::new(pb::ReleaseResponse {}))
    }

    async fn launch(&self, request: Request<pb::LaunchRequest>) -> Result<Response<pb::LaunchResponse>, Status> {
        let r = request.into_inner();
        self.fence(r.epoch)?;
        let runs: Vec<LaunchRequest> = from_json("runs_json", &r.runs_json).map_err(Status::invalid_argument)?;
        let refused = self.hosts.launch(LeaseId(r.lease_id), &r.host, runs).await.map_err(Status::from)?;
        let refused =
            refused.into_iter().map(|(run_id, why)| pb::RefusedRun { run_id, reason: why.to_string() }).collect();
        Ok(Response::new(pb::LaunchResponse { refused }))
    }

    async fn kill(&self, request: Request<pb::KillRequest>) -> Result<Response<pb::KillResponse>, Status> {
        let r = request.into_inner();
        self.fence(r.epoch)?;
        let grace = r.grace_secs.map(|s| Duration::from_secs(u64::from(s)));
        self.hosts.kill_with_grace(&r.run_id, grace).await.map_err(Status::from)?;
        Ok(Response::new(pb::KillResponse {}))
    }

    async fn read_log(&self, request: Request<pb::ReadLogRequest>) -> Result<Response<pb::ReadLogResponse>, Status> {
        let r = request.into_inner();
        let stream = stream_of(&r.stream)?;
        let chunk =
            self.hosts.read_log_on(&r.host, &r.run_id, stream, r.offset, r.max_bytes).await.map_err(Status::from)?;
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
