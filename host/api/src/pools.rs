//! `PoolService`: the pool tree on the wire. Reads come from the resource
//! manager; changes go through the cluster's one
//! [`PoolManager`](paceline_jobmgr::PoolManager), which applies, stores and
//! undoes them (the web UI uses the same one). This module translates specs
//! and errors, and warns of reservations above the cluster's capacity.

use std::sync::{Arc, Mutex, MutexGuard};

use paceline_jobmgr::{PoolChangeError, PoolManager};
use paceline_model::pending::human;
use paceline_model::pool::{PerKind, PoolSpec, PoolType, QueuePolicy, ResourceKind, UNLIMITED};
use paceline_model::resources::GPU_MILLI;
use paceline_proto::v1 as pb;
use paceline_proto::v1::pool_service_server::PoolService;
use paceline_resmgr::ResourceManager;
use tonic::{Request, Response, Status};

use crate::convert::{FieldError, resources_pb};
use crate::status;

/// Per-kind values to the wire; amounts carry GPU both as whole devices
/// (`gpu`, rounded down) and as milli-GPUs (`gpu_milli`).
fn kinds_pb(p: &PerKind<u64>, unlimited_as_zero: bool, amounts: bool) -> pb::PerKind {
    let f = |v: u64| if unlimited_as_zero && v == UNLIMITED { 0 } else { v };
    let (gpu, gpu_milli) =
        if amounts { (if p.gpu == UNLIMITED { f(p.gpu) } else { p.gpu / GPU_MILLI }, f(p.gpu)) } else { (f(p.gpu), 0) };
    pb::PerKind { cpu: f(p.cpu), memory: f(p.memory), disk: f(p.disk), gpu, gpu_milli }
}

/// Per-kind values from the wire; for amounts, GPU from `gpu_milli` when
/// set, else whole `gpu` devices.
fn kinds(p: Option<&pb::PerKind>, unset: u64, zero_means: u64, amounts: bool) -> PerKind<u64> {
    match p {
        None => PerKind::splat(unset),
        Some(p) => {
            let f = |v: u64| if v == 0 { zero_means } else { v };
            let gpu = match (amounts, p.gpu_milli) {
                (true, m) if m > 0 => m,
                (true, _) => match f(p.gpu) {
                    UNLIMITED => UNLIMITED,
                    whole => whole.saturating_mul(GPU_MILLI),
                },
                (false, _) => f(p.gpu),
            };
            PerKind { cpu: f(p.cpu), memory: f(p.memory), disk: f(p.disk), gpu }
        }
    }
}

/// A kind by its wire name (`cpu`) or its unit name (`cpu_millis`).
fn kind_named(name: &str) -> Option<ResourceKind> {
    ResourceKind::ALL.into_iter().find(|k| k.as_str() == name || k.field() == name)
}

/// The kinds named in a list field, each once.
fn kinds_listed(field: &str, names: &[String]) -> Result<Vec<ResourceKind>, FieldError> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            kind_named(name).ok_or_else(|| FieldError {
                field: format!("{field}[{i}]"),
                reason: format!("unknown kind `{name}` (cpu, memory, disk or gpu)"),
            })
        })
        .collect()
}

/// A pool spec from the wire. Proto3 cannot tell 0 from unset: 0 in a
/// share means the default weight 1; 0 in a limit means unlimited unless
/// `limited_kinds` is set, which then names every kind with a limit.
pub fn pool_spec(field: &str, s: &pb::PoolSpec) -> Result<PoolSpec, FieldError> {
    let mut pool_type = PerKind::splat(PoolType::Elastic);
    for kind in kinds_listed(&format!("{field}.static_kinds"), &s.static_kinds)? {
        pool_type = set(pool_type, kind, PoolType::Static);
    }
    let queue_policy = match s.queue_policy.as_str() {
        "" | "priority_fifo" => QueuePolicy::PriorityFifo,
        "fifo" => QueuePolicy::Fifo,
        other => {
            return Err(FieldError {
                field: format!("{field}.queue_policy"),
                reason: format!("unknown policy `{other}` (priority_fifo or fifo)"),
            });
        }
    };
    let limited = kinds_listed(&format!("{field}.limited_kinds"), &s.limited_kinds)?;
    let limit = if limited.is_empty() {
        kinds(s.limit.as_ref(), UNLIMITED, UNLIMITED, true)
    } else {
        let given = kinds(s.limit.as_ref(), 0, 0, true);
        PerKind::from_array(ResourceKind::ALL.map(|k| if limited.contains(&k) { given.get(k) } else { UNLIMITED }))
    };
    let spec = PoolSpec {
        reservation: kinds(s.reservation.as_ref(), 0, 0, true),
        limit,
        share: kinds(s.share.as_ref(), 1, 1, false),
        pool_type,
        slack_limit: kinds(s.slack_limit.as_ref(), 0, 0, true),
        queue_policy,
        controller_limit_percent: match s.controller_limit_percent {
            None => None,
            Some(p) => Some(u8::try_from(p).ok().filter(|&p| p <= 100).ok_or_else(|| FieldError {
                field: format!("{field}.controller_limit_percent"),
                reason: format!("{p} is not a percent from 0 to 100"),
            })?),
        },
        task_users: s.task_users.clone(),
        max_live_jobs: s.max_live_jobs,
        max_live_tasks: s.max_live_tasks,
    };
    spec.check().map_err(|e| FieldError { field: format!("{field}.{}", e.field()), reason: e.to_string() })?;
    Ok(spec)
}

fn set<T: Copy>(p: PerKind<T>, kind: ResourceKind, v: T) -> PerKind<T> {
    let mut a = p.to_array();
    a[kind.index()] = v;
    PerKind::from_array(a)
}

/// A pool spec to the wire.
pub fn pool_spec_pb(s: &PoolSpec) -> pb::PoolSpec {
    let named = |f: &dyn Fn(ResourceKind) -> bool| -> Vec<String> {
        ResourceKind::ALL.into_iter().filter(|k| f(*k)).map(|k| k.as_str().to_string()).collect()
    };
    pb::PoolSpec {
        reservation: Some(kinds_pb(&s.reservation, false, true)),
        limit: Some(kinds_pb(&s.limit, true, true)),
        share: Some(kinds_pb(&s.share, false, false)),
        static_kinds: named(&|k| s.pool_type.get(k) == PoolType::Static),
        slack_limit: Some(kinds_pb(&s.slack_limit, false, true)),
        queue_policy: match s.queue_policy {
            QueuePolicy::PriorityFifo => "priority_fifo",
            QueuePolicy::Fifo => "fifo",
        }
        .to_string(),
        limited_kinds: named(&|k| s.limit.get(k) != UNLIMITED),
        controller_limit_percent: s.controller_limit_percent.map(u32::from),
        task_users: s.task_users.clone(),
        max_live_jobs: s.max_live_jobs,
        max_live_tasks: s.max_live_tasks,
    }
}

fn per_kind(r: &paceline_model::Resources) -> pb::PerKind {
    pb::PerKind {
        cpu: r.cpu_millis,
        memory: r.memory_mib,
        disk: r.disk_mib,
        gpu: r.whole_gpus(),
        gpu_milli: r.gpu_milli,
    }
}

/// The pool service.
#[derive(Clone)]
pub struct PoolApi {
    resmgr: Arc<Mutex<ResourceManager>>,
    pools: Arc<PoolManager>,
}

impl std::fmt::Debug for PoolApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolApi").finish_non_exhaustive()
    }
}

impl PoolApi {
    /// Reading the cluster's resource manager, changing through its pool manager.
    pub fn new(resmgr: Arc<Mutex<ResourceManager>>, pools: Arc<PoolManager>) -> PoolApi {
        PoolApi { resmgr, pools }
    }

    fn rm(&self) -> Result<MutexGuard<'_, ResourceManager>, Status> {
        self.resmgr.lock().map_err(|_| Status::internal("resource manager lock poisoned"))
    }

    fn pool_pb(rm: &ResourceManager, path: &str) -> Option<pb::Pool> {
        let s = rm.pool_status(path)?;
        let tree = rm.tree();
        let children = tree
            .id(path)
            .map(|id| tree.children(id).filter_map(|c| tree.path(c).map(str::to_string)).collect())
            .unwrap_or_default();
        Some(pb::Pool {
            path: s.path.clone(),
            spec: Some(pool_spec_pb(&s.spec)),
            entitlement: Some(per_kind(&s.entitlement)),
            allocation: Some(per_kind(&s.allocation)),
            demand: Some(per_kind(&s.demand)),
            queued_gangs: u32::try_from(s.queued_gangs).unwrap_or(u32::MAX),
            live_tasks: u32::try_from(s.live_tasks).unwrap_or(u32::MAX),
            children,
        })
    }

    /// Every pool, parents first (a walk from the root).
    fn all(rm: &ResourceManager) -> Vec<pb::Pool> {
        let tree = rm.tree();
        let mut out = Vec::new();
        let mut todo: std::collections::VecDeque<_> = tree.id("/").into_iter().collect();
        while let Some(id) = todo.pop_front() {
            if let Some(p) = tree.path(id).and_then(|path| Self::pool_pb(rm, path)) {
                out.push(p);
            }
            todo.extend(tree.children(id));
        }
        out
    }
}

/// What CreatePool and UpdatePool warn of: each kind in which `spec`
/// reserves more than the cluster's hosts have now (`capacity`). Accepted
/// all the same: hosts may join later, and refusing would make applying a
/// pool file depend on which hosts have registered.
pub fn reservation_warnings(path: &str, spec: &PoolSpec, capacity: &paceline_model::Resources) -> Vec<String> {
    ResourceKind::ALL
        .into_iter()
        .filter_map(|kind| {
            let reserved = spec.reservation.get(kind);
            let has = match kind {
                ResourceKind::Cpu => capacity.cpu_millis,
                ResourceKind::Memory => capacity.memory_mib,
                ResourceKind::Disk => capacity.disk_mib,
                ResourceKind::Gpu => capacity.gpu_milli,
            };
            (reserved != UNLIMITED && reserved > has).then(|| {
                format!(
                    "pool {path}: reservation.{field} ({reserved}) is more than the cluster has ({has}, the hosts \
                     that take work now): accepted, as hosts may join, but until they do the pool cannot be given \
                     all of it",
                    field = kind.field(),
                    reserved = human(kind, reserved),
                    has = human(kind, has),
                )
            })
        })
        .collect()
}

/// Logs what a pool change was accepted with and returns it for the answer.
fn warned(path: &str, warnings: Vec<String>) -> Vec<String> {
    for w in &warnings {
        tracing::warn!(pool = %path, warning = %w, "pool accepted with a warning");
    }
    warnings
}

fn path_of(path: &str) -> Result<(), Status> {
    status::required("path", path)
}

/// A spec for a pool being created or changed: consistent on its own
/// ([`pool_spec`]) and able to run tasks ([`PoolSpec::check_usable`]).
fn spec_in(spec: Option<&pb::PoolSpec>) -> Result<PoolSpec, Status> {
    let spec = spec.ok_or_else(|| Status::invalid_argument("spec: must be set"))?;
    let spec = pool_spec("spec", spec)?;
    spec.check_usable().map_err(|e| FieldError { field: format!("spec.{}", e.field()), reason: e.to_string() })?;
    Ok(spec)
}

/// A refused or failed pool change, as the API answers it (the store's
/// failure is UNAVAILABLE: the change was undone and may be tried again).
fn change(e: PoolChangeError) -> Status {
    match e {
        PoolChangeError::Refused(e) => status::pool(e),
        PoolChangeError::NotFound(path) => Status::not_found(format!("path: no pool {path}")),
        PoolChangeError::Encode { .. } => Status::internal(e.to_string()),
        PoolChangeError::Store { .. } => Status::unavailable(e.to_string()),
    }
}

#[tonic::async_trait]
impl PoolService for PoolApi {
    async fn create_pool(
        &self,
        request: Request<pb::CreatePoolRequest>,
    ) -> Result<Response<pb::CreatePoolResponse>, Status> {
        let r = request.get_ref();
        path_of(&r.path)?;
        let spec = spec_in(r.spec.as_ref())?;
        let capacity = self.pools.create(&r.path, spec.clone()).await.map_err(change)?;
        let warnings = warned(&r.path, reservation_warnings(&r.path, &spec, &capacity));
        Ok(Response::new(pb::CreatePoolResponse { warnings }))
    }

    async fn get_pool(&self, request: Request<pb::GetPoolRequest>) -> Result<Response<pb::GetPoolResponse>, Status> {
        let path = &request.get_ref().path;
        path_of(path)?;
        let pool =
            Self::pool_pb(&*self.rm()?, path).ok_or_else(|| Status::not_found(format!("path: no pool {path}")))?;
        Ok(Response::new(pb::GetPoolResponse { pool: Some(pool) }))
    }

    async fn update_pool(
        &self,
        request: Request<pb::UpdatePoolRequest>,
    ) -> Result<Response<pb::UpdatePoolResponse>, Status> {
        let r = request.get_ref();
        path_of(&r.path)?;
        let spec = spec_in(r.spec.as_ref())?;
        let capacity = self.pools.update(&r.path, spec.clone()).await.map_err(change)?;
        let warnings = warned(&r.path, reservation_warnings(&r.path, &spec, &capacity));
        Ok(Response::new(pb::UpdatePoolResponse { warnings }))
    }

    async fn delete_pool(
        &self,
        request: Request<pb::DeletePoolRequest>,
    ) -> Result<Response<pb::DeletePoolResponse>, Status> {
        let path = &request.get_ref().path;
        path_of(path)?;
        self.pools.delete(path).await.map_err(change)?;
        Ok(Response::new(pb::DeletePoolResponse {}))
    }

    async fn list_pools(
        &self,
        _request: Request<pb::ListPoolsRequest>,
    ) -> Result<Response<pb::ListPoolsResponse>, Status> {
        let rm = self.rm()?;
        Ok(Response::new(pb::ListPoolsResponse { pools: Self::all(&rm), capacity: Some(resources_pb(&rm.capacity())) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_spec_survives_the_round_trip() {
        let spec = PoolSpec {
            reservation: PerKind { cpu: 1000, memory: 10, disk: 0, gpu: 1 },
            limit: PerKind { cpu: 2000, memory: UNLIMITED, disk: UNLIMITED, gpu: 2 },
            pool_type: PerKind { cpu: PoolType::Static, ..PerKind::splat(PoolType::Elastic) },
            queue_policy: QueuePolicy::Fifo,
            controller_limit_percent: Some(20),
            ..PoolSpec::default()
        };
        assert_eq!(pool_spec("spec", &pool_spec_pb(&spec)), Ok(spec));
        assert_eq!(pool_spec("spec", &pb::PoolSpec::default()), Ok(PoolSpec::default()));
    }

    #[test]
    fn a_reservation_above_the_clusters_capacity_is_warned_of_per_kind() {
        let spec = PoolSpec {
            reservation: PerKind { cpu: 20_000, memory: 8_192, disk: 0, gpu: 2_000 },
            ..PoolSpec::default()
        };
        let capacity = paceline_model::Resources::new(8_000, 16_384, 200_000, 1_000);
        assert_eq!(
            reservation_warnings("/team-a", &spec, &capacity),
            vec![
                "pool /team-a: reservation.cpu_millis (20 cpu) is more than the cluster has (8 cpu, the hosts that \
                 take work now): accepted, as hosts may join, but until they do the pool cannot be given all of it"
                    .to_string(),
                "pool /team-a: reservation.gpus (2 gpu) is more than the cluster has (1 gpu, the hosts that take \
                 work now): accepted, as hosts may join, but until they do the pool cannot be given all of it"
                    .to_string(),
            ]
        );
        let within = PoolSpec { reservation: PerKind { cpu: 8_000, ..PerKind::default() }, ..PoolSpec::default() };
        assert!(reservation_warnings("/team-a", &within, &capacity).is_empty(), "equal to the capacity is fine");
    }

    #[test]
    fn bad_specs_name_the_field() {
        let wire = pb::PoolSpec {
            reservation: Some(pb::PerKind { cpu: 10, ..Default::default() }),
            limit: Some(pb::PerKind { cpu: 5, ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(pool_spec("spec", &wire).map_err(|e| e.field), Err("spec.reservation.cpu_millis".to_string()));
        let wire = pb::PoolSpec { static_kinds: vec!["cpu".into(), "tpu".into()], ..Default::default() };
        assert_eq!(pool_spec("spec", &wire).map_err(|e| e.field), Err("spec.static_kinds[1]".to_string()));
        let wire = pb::PoolSpec { limited_kinds: vec!["gpus".into(), "tpu".into()], ..Default::default() };
        assert_eq!(pool_spec("spec", &wire).map_err(|e| e.field), Err("spec.limited_kinds[1]".to_string()));
        for bad in [101, 300] {
            let wire = pb::PoolSpec { controller_limit_percent: Some(bad), ..Default::default() };
            assert_eq!(
                pool_spec("spec", &wire).map_err(|e| e.field),
                Err("spec.controller_limit_percent".to_string()),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_limit_of_zero_is_zero_when_the_kind_is_named_and_unlimited_for_old_clients() {
        let old_client =
            pb::PoolSpec { limit: Some(pb::PerKind { cpu: 4000, ..Default::default() }), ..Default::default() };
        let spec = pool_spec("spec", &old_client).expect("old rule");
        assert_eq!((spec.limit.cpu, spec.limit.gpu), (4000, UNLIMITED));
        let new_client = pb::PoolSpec {
            limit: Some(pb::PerKind { cpu: 4000, ..Default::default() }),
            limited_kinds: vec!["cpu".into(), "gpu".into()],
            ..Default::default()
        };
        let spec = pool_spec("spec", &new_client).expect("named kinds");
        assert_eq!((spec.limit.cpu, spec.limit.memory, spec.limit.gpu), (4000, UNLIMITED, 0));
        assert_eq!(pool_spec_pb(&spec).limited_kinds, vec!["cpu".to_string(), "gpu".to_string()]);
        let zero_cpu = pb::PoolSpec { limited_kinds: vec!["cpu".into()], ..Default::default() };
        let refused = spec_in(Some(&zero_cpu)).expect_err("no task could run");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(refused.message().starts_with("spec.limit.cpu_millis: "), "{}", refused.message());
        let static_cpu_only = pb::PoolSpec {
            reservation: Some(pb::PerKind { cpu: 2000, ..Default::default() }),
            static_kinds: vec!["cpu".into(), "memory".into(), "disk".into(), "gpu".into()],
            ..Default::default()
        };
        let refused = spec_in(Some(&static_cpu_only)).expect_err("static at 0 memory");
        assert!(refused.message().starts_with("spec.type.memory_mib: "), "{}", refused.message());
    }
}
