//! Placement engines in processes of their own (`paceline server --roles
//! placement`): the internal protocol `paceline.placement.v1` between such an
//! engine and the core (the server leading the resource manager, job manager
//! and host manager).
//!
//! - [`PeerService`]: the core's side, the same joints an in-process engine
//!   uses ([`LocalQueue`], [`HostOffers`], [`JobSink`]) behind gRPC.
//! - [`RemoteCore`]: the engine's side, implementing [`ReadyQueue`],
//!   [`OfferSource`] and [`PlacementSink`] with one call per batch (a round
//!   costs a handful of calls per job kind and group, not one per task).
//!   Marking tasks PLACED and launching them is one call (`Launch`), so a
//!   lost reply leaves tasks PLACING (which times out back to READY), never
//!   PLACED without a launch.
//!
//! Several engines, local and remote, may run at once: the host manager
//! leases each host to one engine at a time. An engine that dies mid-round
//! leaves its tasks PLACING until the resource manager's PLACING timeout
//! returns them to READY, and its leases until their TTL.

use std::sync::Arc;

use async_trait::async_trait;
use paceline_model::task::TaskSpec;
use paceline_model::view::HostView;
use paceline_model::{Constraint, Resources};
use paceline_placement::{
    Lease, LeaseRequest, LocalQueue, Need, OfferError, OfferSource, Placement, PlacementSink, ReadyQueue, Taken,
};
use paceline_plugin_sdk::types::{JobKind, UnplacedReason};
use paceline_proto::placement::v1 as pb;
use paceline_proto::placement::v1::placement_peer_client::PlacementPeerClient;
use paceline_proto::placement::v1::placement_peer_server::PlacementPeer;
use paceline_resmgr::{PoolId, ReadyTask, TaskId};
use tonic::{Request, Response, Status};
use tracing::{debug, warn};

use crate::cluster::{HostOffers, JobSink};

fn resources_pb(r: &Resources) -> pb::Resources {
    pb::Resources {
        cpu_millis: r.cpu_millis,
        memory_mib: r.memory_mib,
        disk_mib: r.disk_mib,
        gpus: r.gpus,
        ports: r.ports,
    }
}

fn resources_of(r: Option<&pb::Resources>) -> Resources {
    r.map(|r| Resources {
        cpu_millis: r.cpu_millis,
        memory_mib: r.memory_mib,
        disk_mib: r.disk_mib,
        gpus: r.gpus,
        ports: r.ports,
    })
    .unwrap_or_default()
}

fn task_pb(t: &ReadyTask) -> pb::ReadyTask {
    pb::ReadyTask {
        id: t.id.0,
        job: t.job,
        instance: t.instance,
        gang: t.gang,
        pool: t.pool.to_wire(),
        priority: t.priority,
        resources: Some(resources_pb(&t.resources)),
    }
}

fn task_of(t: &pb::ReadyTask) -> ReadyTask {
    ReadyTask {
        id: TaskId(t.id),
        job: t.job,
        instance: t.instance,
        gang: t.gang,
        pool: PoolId::from_wire(t.pool),
        priority: t.priority,
        resources: resources_of(t.resources.as_ref()),
    }
}

fn kind_name(kind: JobKind) -> &'static str {
    match kind {
        JobKind::Batch => "batch",
        JobKind::Stateless => "stateless",
        JobKind::Stateful => "stateful",
        JobKind::Daemon => "daemon",
    }
}

fn kind_of(name: &str) -> Result<JobKind, Status> {
    Ok(match name {
        "batch" => JobKind::Batch,
        "stateless" => JobKind::Stateless,
        "stateful" => JobKind::Stateful,
        "daemon" => JobKind::Daemon,
        other => return Err(Status::invalid_argument(format!("kind: `{other}` is not a job kind"))),
    })
}

const REASONS: [UnplacedReason; 5] = [
    UnplacedReason::InsufficientResources,
    UnplacedReason::ConstraintsUnsatisfiable,
    UnplacedReason::MaxPerHost,
    UnplacedReason::GangIncomplete,
    UnplacedReason::Deferred,
];

fn reason_of(name: &str) -> Result<UnplacedReason, Status> {
    REASONS
        .into_iter()
        .find(|r| r.as_str() == name)
        .ok_or_else(|| Status::invalid_argument(format!("reason: `{name}` is not an unplaced reason")))
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // The model's types serialize infallibly (no maps with non-string keys).
    serde_json::to_vec(value).unwrap_or_default()
}

fn from_json<T: serde::de::DeserializeOwned>(field: &str, bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{field}: {e}"))
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// The core's side of the protocol.
pub struct PeerService {
    queue: LocalQueue,
    offers: HostOffers,
    sink: JobSink,
    now_ms: Arc<dyn paceline_jobmgr::Clock>,
}

impl std::fmt::Debug for PeerService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerService").finish_non_exhaustive()
    }
}

impl PeerService {
    /// Over the cluster's roles; `now_ms` is the job manager's clock.
    pub fn new(cluster: &crate::cluster::Cluster, now_ms: Arc<dyn paceline_jobmgr::Clock>) -> PeerService {
        let sink = JobSink(cluster.jobs.clone());
        PeerService {
            queue: LocalQueue::new(cluster.resmgr.clone(), Arc::new(sink.clone())),
            offers: HostOffers(cluster.hosts.clone()),
            sink,
            now_ms,
        }
    }

    /// The gRPC service.
    pub fn into_server(self) -> pb::placement_peer_server::PlacementPeerServer<PeerService> {
        pb::placement_peer_server::PlacementPeerServer::new(self)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20)
    }
}

#[tonic::async_trait]
impl PlacementPeer for PeerService {
    async fn take_ready(
        &self,
        request: Request<pb::TakeReadyRequest>,
    ) -> Result<Response<pb::TakeReadyResponse>, Status> {
        let r = request.get_ref();
        let kind = kind_of(&r.kind)?;
        let taken = self.queue.take_ready(kind, r.max.max(1) as usize, self.now_ms.now_ms()).await;
        let ready = taken
            .ready
            .iter()
            .map(|(t, n)| pb::TakenTask {
                task: Some(task_pb(t)),
                need: Some(pb::Need {
                    job_id: n.job_id.clone(),
                    spec_json: json(&*n.spec),
                    preferred_host: n.preferred_host.clone().unwrap_or_default(),
                    host_required: n.host_required,
                    slot: n.slot.clone(),
                    avoid_host: n.avoid_host.clone().unwrap_or_default(),
                }),
            })
            .collect();
        Ok(Response::new(pb::TakeReadyResponse { ready, orphans: taken.orphans.iter().map(task_pb).collect() }))
    }

    async fn unplaced(&self, request: Request<pb::UnplacedRequest>) -> Result<Response<pb::UnplacedResponse>, Status> {
        let mut back = Vec::with_capacity(request.get_ref().tasks.len());
        for (i, t) in request.get_ref().tasks.iter().enumerate() {
            let reason =
                reason_of(&t.reason).map_err(|e| Status::invalid_argument(format!("tasks[{i}].{}", e.message())))?;
            back.push((TaskId(t.task), reason));
        }
        let returned = self.queue.unplaced(&back, self.now_ms.now_ms()).await;
        Ok(Response::new(pb::UnplacedResponse { returned: returned as u32 }))
    }

    async fn launch(&self, request: Request<pb::LaunchRequest>) -> Result<Response<pb::LaunchResponse>, Status> {
        let r = request.into_inner();
        let placements: Vec<Placement> = r
            .placements
            .iter()
            .map(|p| Placement { task: task_of(&p.task.clone().unwrap_or_default()), host: p.host.clone() })
            .collect();
        // PLACED and launched in one call (see the protocol): a task no longer
        // PLACING was killed or preempted meanwhile and is not launched.
        let ids: Vec<TaskId> = placements.iter().map(|p| p.task.id).collect();
        let still = self.queue.placed(&ids, self.now_ms.now_ms()).await;
        let launch: Vec<Placement> = placements.into_iter().zip(still).filter(|(_, ok)| *ok).map(|(p, _)| p).collect();
        let launched = launch.len() as u32;
        if !launch.is_empty() {
            self.sink.placed(&r.lease_id, launch).await;
        }
        Ok(Response::new(pb::LaunchResponse { launched }))
    }

    async fn lease(&self, request: Request<pb::LeaseRequest>) -> Result<Response<pb::LeaseResponse>, Status> {
        let r = request.get_ref();
        let constraints: Vec<Constraint> = if r.constraints_json.is_empty() {
            Vec::new()
        } else {
            from_json("constraints_json", &r.constraints_json).map_err(Status::invalid_argument)?
        };
        let req = LeaseRequest {
            min_free: resources_of(r.min_free.as_ref()),
            constraints,
            include_hosts: r.include_hosts.clone(),
            only_hosts: r.only_hosts.clone(),
            max_hosts: r.max_hosts as usize,
        };
        let lease = self.offers.lease(&req).await.map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(pb::LeaseResponse { id: lease.id, hosts_json: json(&lease.hosts) }))
    }

    async fn release(&self, request: Request<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseResponse>, Status> {
        self.offers.release(&request.get_ref().lease_id).await;
        Ok(Response::new(pb::ReleaseResponse {}))
    }
}

/// The engine's side: the core's joints over gRPC.
#[derive(Clone, Debug)]
pub struct RemoteCore {
    client: PlacementPeerClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>>,
}

/// Adds the engine's token to every call (a core with a tokens file needs an admin token).
#[derive(Clone, Debug)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

impl Bearer {
    /// `authorization: Bearer <token>` on every call; nothing without a token.
    pub fn new(token: Option<&str>) -> Result<Bearer, String> {
        Ok(match token.map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) => Bearer(Some(
                format!("Bearer {t}").parse().map_err(|_| "the token is not a valid header value".to_string())?,
            )),
            None => Bearer(None),
        })
    }
}

impl RemoteCore {
    /// Over a channel to the core, with an optional bearer token.
    pub fn new(channel: tonic::transport::Channel, token: Option<&str>) -> Result<RemoteCore, String> {
        let bearer = Bearer::new(token)?;
        let client = PlacementPeerClient::with_interceptor(channel, bearer)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        Ok(RemoteCore { client })
    }
}

#[async_trait]
impl ReadyQueue for RemoteCore {
    async fn take_ready(&self, kind: JobKind, max: usize, _now_ms: u64) -> Taken {
        let request = pb::TakeReadyRequest { kind: kind_name(kind).into(), max: max.min(u32::MAX as usize) as u32 };
        let answer = match self.client.clone().take_ready(request).await {
            Ok(a) => a.into_inner(),
            Err(e) => {
                warn!(error = %e, "take-ready from the core failed; nothing taken this round");
                return Taken::default();
            }
        };
        let mut taken = Taken {
            ready: Vec::with_capacity(answer.ready.len()),
            orphans: answer.orphans.iter().map(task_of).collect(),
        };
        for t in answer.ready {
            let task = task_of(&t.task.unwrap_or_default());
            let need = t.need.unwrap_or_default();
            match from_json::<TaskSpec>("spec_json", &need.spec_json) {
                Ok(spec) => taken.ready.push((
                    task,
                    Need {
                        job_id: need.job_id,
                        spec: Arc::new(spec),
                        preferred_host: non_empty(&need.preferred_host),
                        host_required: need.host_required,
                        slot: need.slot,
                        avoid_host: non_empty(&need.avoid_host),
                    },
                )),
                Err(e) => {
                    // A spec this build cannot read (a newer core?): send it back.
                    warn!(task = task.id.0, error = %e, "unreadable task spec from the core");
                    taken.orphans.push(task);
                }
            }
        }
        taken
    }

    /// Answers "all still placing" without a call: the core marks them
    /// PLACED inside [`PlacementSink::placed`] (the `Launch` call) and skips
    /// the ones killed meanwhile, so that the two steps cannot be separated
    /// by a lost reply.
    async fn placed(&self, tasks: &[TaskId], _now_ms: u64) -> Vec<bool> {
        vec![true; tasks.len()]
    }

    async fn unplaced(&self, tasks: &[(TaskId, UnplacedReason)], _now_ms: u64) -> usize {
        let request = pb::UnplacedRequest {
            tasks: tasks.iter().map(|(t, r)| pb::UnplacedTask { task: t.0, reason: r.as_str().into() }).collect(),
        };
        match self.client.clone().unplaced(request).await {
            Ok(a) => a.get_ref().returned as usize,
            Err(e) => {
                warn!(error = %e, "unplaced failed; the core's PLACING timeout will return these tasks");
                0
            }
        }
    }
}

#[async_trait]
impl OfferSource for RemoteCore {
    async fn lease(&self, request: &LeaseRequest) -> Result<Lease, OfferError> {
        let r = pb::LeaseRequest {
            min_free: Some(resources_pb(&request.min_free)),
            constraints_json: if request.constraints.is_empty() { Vec::new() } else { json(&request.constraints) },
            include_hosts: request.include_hosts.clone(),
            only_hosts: request.only_hosts.clone(),
            max_hosts: request.max_hosts.min(u32::MAX as usize) as u32,
        };
        let answer = self
            .client
            .clone()
            .lease(r)
            .await
            .map_err(|e| OfferError(format!("lease from the core: {}", e.message())))?
            .into_inner();
        let hosts: Vec<HostView> = from_json("hosts_json", &answer.hosts_json).map_err(OfferError)?;
        Ok(Lease { id: answer.id, hosts })
    }

    async fn release(&self, lease_id: &str) {
        if let Err(e) = self.client.clone().release(pb::ReleaseRequest { lease_id: lease_id.into() }).await {
            warn!(lease_id, error = %e, "release failed; the lease expires on its own");
        }
    }
}

#[async_trait]
impl PlacementSink for RemoteCore {
    async fn placed(&self, lease_id: &str, placements: Vec<Placement>) {
        let request = pb::LaunchRequest {
            lease_id: lease_id.into(),
            placements: placements
                .iter()
                .map(|p| pb::Placement { task: Some(task_pb(&p.task)), host: p.host.clone() })
                .collect(),
        };
        match self.client.clone().launch(request).await {
            Ok(a) if (a.get_ref().launched as usize) < placements.len() => {
                debug!(
                    lease_id,
                    launched = a.get_ref().launched,
                    placed = placements.len(),
                    "some tasks were killed while being placed"
                );
            }
            Ok(_) => {}
            Err(e) => {
                warn!(lease_id, error = %e, "launch through the core failed; unlaunched tasks return to READY after the PLACING timeout")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_reasons_and_kinds_survive_the_wire() {
        let t = ReadyTask {
            id: TaskId(7),
            job: 3,
            instance: 2,
            gang: 9,
            pool: PoolId::from_wire(4),
            priority: 5,
            resources: Resources { cpu_millis: 250, memory_mib: 512, disk_mib: 1, gpus: 1, ports: 2 },
        };
        assert_eq!(task_of(&task_pb(&t)), t);
        for r in REASONS {
            assert_eq!(reason_of(r.as_str()).expect("known"), r);
        }
        assert!(reason_of("bored").is_err());
        for k in [JobKind::Batch, JobKind::Stateless, JobKind::Stateful, JobKind::Daemon] {
            assert_eq!(kind_of(kind_name(k)).expect("known"), k);
        }
        assert_eq!(kind_of("cron").expect_err("unknown").code(), tonic::Code::InvalidArgument);
    }
}
