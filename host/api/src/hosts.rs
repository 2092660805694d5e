//! `HostService`: the inventory and maintenance (drain, down, up) over
//! the host manager ([`HostAccess`]: in this process, or in one of its own).

use std::sync::Arc;
use std::time::Duration;

use paceline_hostmgr::{HostAccess, HostInfo};
use paceline_model::host::MaintenanceState;
use paceline_proto::v1 as pb;
use paceline_proto::v1::host_service_server::HostService;
use tonic::{Request, Response, Status};

use crate::convert::resources_pb;
use crate::status;

/// How often a drain with `then_down` checks whether the host is drained.
const DRAINED_POLL: Duration = Duration::from_millis(500);

/// The host service.
#[derive(Clone, Debug)]
pub struct HostApi {
    hosts: Arc<dyn HostAccess>,
}

impl HostApi {
    /// Over the cluster's host manager.
    pub fn new(hosts: Arc<dyn HostAccess>) -> HostApi {
        HostApi { hosts }
    }

    fn host_pb(&self, h: &HostInfo) -> pb::Host {
        pb::Host {
            hostname: h.view.name.clone(),
            provider: self.hosts.provider_name(),
            state: state_pb(h.state) as i32,
            reachable: h.reachable,
            total: Some(resources_pb(&h.view.total)),
            allocated: Some(resources_pb(&h.view.allocated)),
            available: Some(resources_pb(&h.view.free())),
            attributes: h.view.attributes.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            runs: u32::try_from(h.runs.len()).unwrap_or(u32::MAX),
            last_heartbeat_ms: h.last_heartbeat_ms,
            gpus: h.view.gpus.iter().map(paceline_proto::convert::gpu_slot_pb).collect(),
        }
    }

    fn get(&self, name: &str) -> Result<pb::Host, Status> {
        status::required("hostname", name)?;
        self.hosts
            .host(name)
            .map(|h| self.host_pb(&h))
            .ok_or_else(|| Status::not_found(format!("hostname: no host {name}")))
    }
}

/// A maintenance state to the wire.
pub fn state_pb(s: MaintenanceState) -> pb::HostState {
    match s {
        MaintenanceState::Up => pb::HostState::Up,
        MaintenanceState::Draining => pb::HostState::Draining,
        MaintenanceState::Drained => pb::HostState::Drained,
        MaintenanceState::Down => pb::HostState::Down,
    }
}

#[tonic::async_trait]
impl HostService for HostApi {
    async fn list_hosts(
        &self,
        _request: Request<pb::ListHostsRequest>,
    ) -> Result<Response<pb::ListHostsResponse>, Status> {
        let mut hosts: Vec<pb::Host> = self.hosts.hosts().iter().map(|h| self.host_pb(h)).collect();
        hosts.sort_by(|a, b| a.hostname.cmp(&b.hostname));
        Ok(Response::new(pb::ListHostsResponse { hosts }))
    }

    async fn get_host(&self, request: Request<pb::GetHostRequest>) -> Result<Response<pb::GetHostResponse>, Status> {
        Ok(Response::new(pb::GetHostResponse { host: Some(self.get(&request.get_ref().hostname)?) }))
    }

    async fn drain_host(
        &self,
        request: Request<pb::DrainHostRequest>,
    ) -> Result<Response<pb::DrainHostResponse>, Status> {
        let r = request.get_ref();
        self.get(&r.hostname)?;
        self.hosts.drain(&r.hostname).await.map_err(status::host)?;
        if r.then_down {
            // The host manager has no "then down" of its own: watch the host
            // until the drain ends, and take it down only if it ended DRAINED
            // (an operator's `up` meanwhile cancels the wait).
            let (hosts, name) = (self.hosts.clone(), r.hostname.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(DRAINED_POLL).await;
                    match hosts.host(&name).map(|h| h.state) {
                        Some(MaintenanceState::Draining) => continue,
                        Some(MaintenanceState::Drained) => {
                            if let Err(e) = hosts.down(&name).await {
                                tracing::warn!(host = %name, error = %e, "drained host could not go down");
                            }
                            return;
                        }
                        _ => return,
                    }
                }
            });
        }
        Ok(Response::new(pb::DrainHostResponse { host: Some(self.get(&r.hostname)?) }))
    }

    async fn down_host(&self, request: Request<pb::HostRef>) -> Result<Response<pb::DrainHostResponse>, Status> {
        let name = &request.get_ref().hostname;
        self.get(name)?;
        self.hosts.down(name).await.map_err(status::host)?;
        Ok(Response::new(pb::DrainHostResponse { host: Some(self.get(name)?) }))
    }

    async fn up_host(&self, request: Request<pb::HostRef>) -> Result<Response<pb::DrainHostResponse>, Status> {
        let name = &request.get_ref().hostname;
        self.get(name)?;
        self.hosts.up(name).await.map_err(status::host)?;
        Ok(Response::new(pb::DrainHostResponse { host: Some(self.get(name)?) }))
    }
}
