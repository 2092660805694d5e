//! Placement engines in processes of their own (`paceline server --roles
//! placement`): both ends of the internal protocol `paceline.placement.v2`.
//!
//! - [`CoreService`]: the core's side, serving the same ports an in-process
//!   engine is handed (the job manager's [`ReadyQueue`], the host manager's
//!   [`OfferSource`]) over gRPC.
//! - [`RemoteCore`]: the engine's side, implementing those two ports with one
//!   call per batch (a round costs a handful of calls per job kind and group,
//!   not one per task).
//!
//! Every value travels as a typed message; the shared ones (`Resources`,
//! `Constraint`, `Preference`, `JobKind`) are the public API's, converted by
//! `paceline_proto::convert`. Committing is one call (`Commit`), so a lost
//! reply leaves tasks PLACING (which times out back to READY), never PLACED
//! without a launch. An engine that dies mid-round leaves its tasks PLACING
//! until the PLACING timeout and its leases until their TTL.

use std::sync::Arc;

use async_trait::async_trait;
use paceline_joints::{
    Clock, Committed, Lease, LeaseId, LeaseRequest, Need, OfferSource, Placement, PoolId, PortError, PortErrorKind,
    ReadyQueue, ReadyTask, Taken, TaskHandle,
};
use paceline_model::UnplacedReason;
use paceline_model::job::JobKind;
use paceline_proto::bearer::Bearer;
use paceline_proto::convert::{self, FieldError};
use paceline_proto::placement::v2 as pb;
use paceline_proto::placement::v2::placement_peer_client::PlacementPeerClient;
use paceline_proto::placement::v2::placement_peer_server::{PlacementPeer, PlacementPeerServer};
use tonic::{Request, Response, Status};

/// Largest message either end sends or takes (a lease of many hosts).
const MAX_MESSAGE: usize = 64 << 20;

fn ready_task_pb(t: &ReadyTask) -> pb::ReadyTask {
    pb::ReadyTask {
        id: t.id.0,
        job: t.job,
        instance: t.instance,
        gang: t.gang,
        pool: t.pool.0,
        priority: t.priority,
        resources: Some(convert::resources_pb(&t.resources)),
    }
}

fn ready_task(t: &pb::ReadyTask) -> ReadyTask {
    ReadyTask {
        id: TaskHandle(t.id),
        job: t.job,
        instance: t.instance,
        gang: t.gang,
        pool: PoolId(t.pool),
        priority: t.priority,
        resources: convert::resources(t.resources.as_ref()),
    }
}

fn need_pb(n: &Need) -> pb::Need {
    pb::Need {
        job_id: n.job_id.clone(),
        constraints: n.constraints.iter().map(convert::constraint_pb).collect(),
        preferences: n.preferences.iter().map(convert::preference_pb).collect(),
        preferred_host: n.preferred_host.clone().unwrap_or_default(),
        host_required: n.host_required,
        slot: n.slot.clone(),
        avoid_host: n.avoid_host.clone().unwrap_or_default(),
        gpu_models: n.gpu_models.clone(),
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn need(field: &str, n: &pb::Need) -> Result<Need, FieldError> {
    Ok(Need {
        job_id: n.job_id.clone(),
        constraints: n
            .constraints
            .iter()
            .enumerate()
            .map(|(i, c)| convert::constraint(&format!("{field}.constraints[{i}]"), c))
            .collect::<Result<_, _>>()?,
        preferences: n.preferences.iter().map(convert::preference).collect(),
        preferred_host: non_empty(&n.preferred_host),
        host_required: n.host_required,
        slot: n.slot.clone(),
        avoid_host: non_empty(&n.avoid_host),
        gpu_models: n.gpu_models.clone(),
    })
}

fn reason_pb(r: UnplacedReason) -> pb::UnplacedReason {
    match r {
        UnplacedReason::InsufficientResources => pb::UnplacedReason::InsufficientResources,
        UnplacedReason::ConstraintsUnsatisfiable => pb::UnplacedReason::ConstraintsUnsatisfiable,
        UnplacedReason::MaxPerHost => pb::UnplacedReason::MaxPerHost,
        UnplacedReason::GangIncomplete => pb::UnplacedReason::GangIncomplete,
        // DEFERRED is how a core older than `host_manager_unreachable` reads it.
        UnplacedReason::Deferred | UnplacedReason::HostManagerUnreachable => pb::UnplacedReason::Deferred,
    }
}

fn reason(field: &str, r: i32) -> Result<UnplacedReason, FieldError> {
    let wire = pb::UnplacedReason::try_from(r).map_err(|_| FieldError::new(field, format!("unknown reason {r}")))?;
    UnplacedReason::ALL.into_iter().find(|m| reason_pb(*m) == wire).ok_or_else(|| FieldError::new(field, "must be set"))
}

fn unplaced_task_pb(task: TaskHandle, r: UnplacedReason) -> pb::UnplacedTask {
    pb::UnplacedTask {
        task: task.0,
        reason: reason_pb(r) as i32,
        host_manager_unreachable: r == UnplacedReason::HostManagerUnreachable,
    }
}

/// A task sent back, as the core reads it: `reason` must be valid even when
/// the flag overrides it (an engine of this build sends DEFERRED with it).
fn unplaced_task(field: &str, t: &pb::UnplacedTask) -> Result<(TaskHandle, UnplacedReason), FieldError> {
    let r = reason(field, t.reason)?;
    let r = if t.host_manager_unreachable { UnplacedReason::HostManagerUnreachable } else { r };
    Ok((TaskHandle(t.task), r))
}

fn lease_request_pb(r: &LeaseRequest) -> pb::LeaseRequest {
    pb::LeaseRequest {
        min_free: Some(convert::resources_pb(&r.min_free)),
        constraints: r.constraints.iter().map(convert::constraint_pb).collect(),
        prefer_hosts: r.prefer_hosts.clone(),
        only_hosts: r.only_hosts.clone(),
        max_hosts: u32::try_from(r.max_hosts).unwrap_or(u32::MAX),
        ttl_ms: r.ttl_ms,
    }
}

fn lease_request(r: &pb::LeaseRequest) -> Result<LeaseRequest, FieldError> {
    let mut out =
        LeaseRequest::new(convert::resources(r.min_free.as_ref()), (r.max_hosts as usize).max(1), r.ttl_ms.max(1));
    out.constraints = r
        .constraints
        .iter()
        .enumerate()
        .map(|(i, c)| convert::constraint(&format!("constraints[{i}]"), c))
        .collect::<Result<_, _>>()?;
    out.prefer_hosts = r.prefer_hosts.clone();
    out.only_hosts = r.only_hosts.clone();
    Ok(out)
}

fn port_status(e: PortError) -> Status {
    match e.kind {
        PortErrorKind::Unavailable => Status::unavailable(e.message),
        PortErrorKind::Refused => Status::failed_precondition(e.message),
    }
}

fn status_port(s: &Status, what: &str) -> PortError {
    let message = format!("{what} through the core: {}", s.message());
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled | tonic::Code::Unknown => {
            PortError::unavailable(message)
        }
        _ => PortError::refused(message),
    }
}

/// The core's side of the protocol: the ports of this process behind gRPC.
pub struct CoreService {
    queue: Arc<dyn ReadyQueue>,
    offers: Arc<dyn OfferSource>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for CoreService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreService").finish_non_exhaustive()
    }
}

impl CoreService {
    /// Over the job manager's ready queue and the host manager's offers; the
    /// queue's calls use `clock` (the job manager's).
    pub fn new(queue: Arc<dyn ReadyQueue>, offers: Arc<dyn OfferSource>, clock: Arc<dyn Clock>) -> CoreService {
        CoreService { queue, offers, clock }
    }

    /// The gRPC service.
    pub fn into_server(self) -> PlacementPeerServer<CoreService> {
        PlacementPeerServer::new(self).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE)
    }
}

#[tonic::async_trait]
impl PlacementPeer for CoreService {
    async fn take_ready(
        &self,
        request: Request<pb::TakeReadyRequest>,
    ) -> Result<Response<pb::TakeReadyResponse>, Status> {
        let r = request.get_ref();
        let kind = convert::job_kind("kind", r.kind)?;
        let taken =
            self.queue.take_ready(kind, r.max.max(1) as usize, self.clock.now_ms()).await.map_err(port_status)?;
        let ready = taken
            .ready
            .iter()
            .map(|(t, n)| pb::TakenTask { task: Some(ready_task_pb(t)), need: Some(need_pb(n)) })
            .collect();
        Ok(Response::new(pb::TakeReadyResponse { ready, orphans: taken.orphans.iter().map(ready_task_pb).collect() }))
    }

    async fn unplaced(&self, request: Request<pb::UnplacedRequest>) -> Result<Response<pb::UnplacedResponse>, Status> {
        let back = request
            .get_ref()
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| unplaced_task(&format!("tasks[{i}].reason"), t))
            .collect::<Result<Vec<_>, FieldError>>()?;
        let returned = self.queue.unplaced(&back, self.clock.now_ms()).await.map_err(port_status)?;
        Ok(Response::new(pb::UnplacedResponse { returned: u32::try_from(returned).unwrap_or(u32::MAX) }))
    }

    async fn commit(&self, request: Request<pb::CommitRequest>) -> Result<Response<pb::CommitResponse>, Status> {
        let r = request.into_inner();
        let placements = r
            .placements
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let task =
                    p.task.as_ref().ok_or_else(|| FieldError::new(format!("placements[{i}].task"), "missing"))?;
                let gpu = convert::gpu_grant(p.gpu.as_ref());
                Ok(Placement { task: ready_task(task), host: p.host.clone(), gpu })
            })
            .collect::<Result<Vec<_>, FieldError>>()?;
        let c = self.queue.commit(LeaseId(r.lease_id), placements, self.clock.now_ms()).await.map_err(port_status)?;
        Ok(Response::new(pb::CommitResponse { launched: c.launched, refused: c.refused, dropped: c.dropped }))
    }

    async fn lease(&self, request: Request<pb::LeaseRequest>) -> Result<Response<pb::LeaseResponse>, Status> {
        let req = lease_request(request.get_ref())?;
        let lease = self.offers.lease(&req).await.map_err(port_status)?;
        Ok(Response::new(pb::LeaseResponse {
            id: lease.id.0,
            expires_at_ms: lease.expires_at_ms,
            hosts: lease.hosts.iter().map(|h| convert::host_view_pb(h)).collect(),
        }))
    }

    async fn release(&self, request: Request<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseResponse>, Status> {
        self.offers.release(LeaseId(request.get_ref().lease_id)).await.map_err(port_status)?;
        Ok(Response::new(pb::ReleaseResponse {}))
    }
}

type Client = PlacementPeerClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>>;

/// The engine's side: the core's ports over gRPC.
#[derive(Clone, Debug)]
pub struct RemoteCore {
    client: Client,
}

impl RemoteCore {
    /// Over a channel to the core, with the bearer token of an admin (a core
    /// with a tokens file refuses anything less).
    pub fn new(channel: tonic::transport::Channel, bearer: Bearer) -> RemoteCore {
        let client = PlacementPeerClient::with_interceptor(channel, bearer)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        RemoteCore { client }
    }
}

#[async_trait]
impl ReadyQueue for RemoteCore {
    async fn take_ready(&self, kind: JobKind, max: usize, _now_ms: u64) -> Result<Taken, PortError> {
        let request = pb::TakeReadyRequest {
            kind: convert::job_kind_pb(kind) as i32,
            max: u32::try_from(max).unwrap_or(u32::MAX),
        };
        let answer =
            self.client.clone().take_ready(request).await.map_err(|s| status_port(&s, "take-ready"))?.into_inner();
        let mut taken = Taken {
            ready: Vec::with_capacity(answer.ready.len()),
            orphans: answer.orphans.iter().map(ready_task).collect(),
        };
        for (i, t) in answer.ready.iter().enumerate() {
            let task = ready_task(t.task.as_ref().unwrap_or(&pb::ReadyTask::default()));
            match t.need.as_ref().map(|n| need(&format!("ready[{i}].need"), n)) {
                Some(Ok(n)) => taken.ready.push((task, n)),
                // A need this build cannot read (a newer core?): send it back.
                Some(Err(e)) => {
                    tracing::warn!(task = task.id.0, error = %e, "unreadable need from the core");
                    taken.orphans.push(task);
                }
                None => taken.orphans.push(task),
            }
        }
        Ok(taken)
    }

    async fn unplaced(&self, tasks: &[(TaskHandle, UnplacedReason)], _now_ms: u64) -> Result<usize, PortError> {
        let request = pb::UnplacedRequest { tasks: tasks.iter().map(|(t, r)| unplaced_task_pb(*t, *r)).collect() };
        let answer = self.client.clone().unplaced(request).await.map_err(|s| status_port(&s, "unplaced"))?;
        Ok(answer.get_ref().returned as usize)
    }

    async fn commit(&self, lease: LeaseId, placements: Vec<Placement>, _now_ms: u64) -> Result<Committed, PortError> {
        let request = pb::CommitRequest {
            lease_id: lease.0,
            placements: placements
                .iter()
                .map(|p| pb::Placement {
                    task: Some(ready_task_pb(&p.task)),
                    host: p.host.clone(),
                    gpu: convert::gpu_grant_pb(&p.gpu),
                })
                .collect(),
        };
        let a = self.client.clone().commit(request).await.map_err(|s| status_port(&s, "commit"))?.into_inner();
        Ok(Committed { launched: a.launched, refused: a.refused, dropped: a.dropped })
    }
}

#[async_trait]
impl OfferSource for RemoteCore {
    async fn lease(&self, request: &LeaseRequest) -> Result<Lease, PortError> {
        let answer = self
            .client
            .clone()
            .lease(lease_request_pb(request))
            .await
            .map_err(|s| status_port(&s, "lease"))?
            .into_inner();
        Ok(Lease {
            id: LeaseId(answer.id),
            expires_at_ms: answer.expires_at_ms,
            hosts: answer.hosts.iter().map(|h| Arc::new(convert::host_view(h))).collect(),
            // placement.v2 carries no job index: the engine reads each host's
            // job counts instead.
            job_hosts: None,
        })
    }

    async fn release(&self, lease: LeaseId) -> Result<(), PortError> {
        self.client
            .clone()
            .release(pb::ReleaseRequest { lease_id: lease.0 })
            .await
            .map_err(|s| status_port(&s, "release"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use paceline_model::{Constraint, Preference, Resources};

    use super::*;

    #[test]
    fn tasks_needs_reasons_and_lease_requests_survive_the_wire() {
        let t = ReadyTask {
            id: TaskHandle(7),
            job: 3,
            instance: 2,
            gang: 9,
            pool: PoolId(4),
            priority: 5,
            resources: Resources { cpu_millis: 250, memory_mib: 512, disk_mib: 1, gpu_milli: 1000, ports: 2 },
        };
        assert_eq!(ready_task(&ready_task_pb(&t)), t);
        let n = Need {
            job_id: "web".into(),
            constraints: vec![
                Constraint::AttributeEquals { key: "zone".into(), value: "a".into() },
                Constraint::MaxPerHost { max: 2 },
            ],
            preferences: vec![Preference { key: "rack".into(), value: "r1".into(), weight: -3 }],
            preferred_host: Some("h1".into()),
            host_required: true,
            slot: "placement/stateless".into(),
            avoid_host: None,
            gpu_models: vec!["V100M16".into(), "V100M32".into()],
        };
        assert_eq!(need("need", &need_pb(&n)), Ok(n.clone()));
        for r in UnplacedReason::ALL {
            assert_eq!(unplaced_task("reason", &unplaced_task_pb(TaskHandle(3), r)), Ok((TaskHandle(3), r)));
        }
        // An older core reads only `reason`: an unreachable host manager is DEFERRED to it.
        let sent = unplaced_task_pb(TaskHandle(3), UnplacedReason::HostManagerUnreachable);
        assert_eq!(reason("reason", sent.reason), Ok(UnplacedReason::Deferred));
        // An older engine never sets the flag: its reasons read as they always did.
        let old = pb::UnplacedTask { task: 3, reason: pb::UnplacedReason::Deferred as i32, ..Default::default() };
        assert_eq!(unplaced_task("reason", &old), Ok((TaskHandle(3), UnplacedReason::Deferred)));
        assert_eq!(reason("tasks[0].reason", 0).map_err(|e| e.field), Err("tasks[0].reason".to_string()));
        let mut req = LeaseRequest::new(Resources::new(100, 200, 0, 0), 50, 30_000);
        req.constraints = n.constraints.clone();
        req.prefer_hosts = vec!["h1".into()];
        req.only_hosts = vec!["h2".into()];
        assert_eq!(lease_request(&lease_request_pb(&req)), Ok(req));
    }
}
