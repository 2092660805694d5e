//! The API of a standby server (a follower in a highly available setup).
//!
//! A standby does not run the roles. It answers
//! `grpc.health.v1.Health/Check` with `NOT_SERVING` (so that clients that can
//! look for the leader, like the CLI, go to it directly) and **forwards every
//! other call to the leader**, unchanged (headers, bearer token, streams), so
//! that any client may be given any server. When no leader is known, or the
//! leader cannot be reached, or the API is served over TLS (a standby holds
//! no authority to check the leader's certificate with), the call is
//! answered `UNAVAILABLE` with a message naming the leader's API address
//! instead. The leader's address (when known) is also in the
//! `paceline-leader` metadata entry of those answers and of the health
//! answer, so clients can follow it without parsing text.

use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use paceline_proto::v1 as pb;
use pb::host_service_server::HostServiceServer;
use pb::job_service_server::JobServiceServer;
use pb::plugin_service_server::PluginServiceServer;
use pb::pool_service_server::PoolServiceServer;
use pb::task_service_server::TaskServiceServer;
use pb::watch_service_server::WatchServiceServer;
use tokio::sync::watch;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse, health_check_response::ServingStatus};

use crate::ApiError;

/// Metadata key (and HTTP/2 trailer) naming the leader's API address,
/// `host:port`, on a standby's answers.
pub const LEADER_METADATA: &str = "paceline-leader";

/// The leader's API address a standby's answer names, if any.
pub fn leader_of_status(status: &tonic::Status) -> Option<String> {
    leader_of_metadata(status.metadata())
}

/// The leader's API address in `metadata`, if any.
pub fn leader_of_metadata(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    metadata
        .get(LEADER_METADATA)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The answer to every call on a standby.
pub fn standby_status(leader: Option<&str>) -> tonic::Status {
    let mut metadata = tonic::metadata::MetadataMap::new();
    let message = match leader {
        Some(addr) => {
            if let Ok(v) = addr.parse() {
                metadata.insert(LEADER_METADATA, v);
            }
            format!("this paceline server is a standby; the leader's API is at {addr}")
        }
        None => {
            "this paceline server is a standby and no leader is known right now (election in progress); retry shortly"
                .to_owned()
        }
    };
    tonic::Status::with_metadata(tonic::Code::Unavailable, message, metadata)
}

/// The connection to the current leader, made when first needed and
/// replaced when the leader changes. Shared by every forwarded service.
#[derive(Clone)]
struct LeaderLink {
    leader: watch::Receiver<Option<String>>,
    /// Forward at all (off over TLS: see the module comment).
    forward: bool,
    channel: Arc<Mutex<Option<(String, tonic::transport::Channel)>>>,
}

impl LeaderLink {
    /// The leader's address and a channel to it, if one is known.
    fn channel(&self) -> (Option<String>, Option<tonic::transport::Channel>) {
        let Some(addr) = self.leader.borrow().clone() else { return (None, None) };
        if !self.forward {
            return (Some(addr), None);
        }
        let mut slot = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((known, channel)) = slot.as_ref()
            && *known == addr
        {
            return (Some(addr), Some(channel.clone()));
        }
        let endpoint = match tonic::transport::Endpoint::from_shared(format!("http://{addr}")) {
            Ok(e) => e.connect_timeout(Duration::from_secs(2)),
            Err(_) => return (Some(addr), None),
        };
        let channel = endpoint.connect_lazy();
        *slot = Some((addr.clone(), channel.clone()));
        (Some(addr), Some(channel))
    }

    fn forget(&self, addr: &str) {
        let mut slot = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|(known, _)| known == addr) {
            *slot = None;
        }
    }
}

/// Forwards every method of the service named like `S` to the leader, or
/// answers [`standby_status`] when it cannot.
struct Forward<S> {
    link: LeaderLink,
    _service: PhantomData<fn() -> S>,
}

impl<S> Clone for Forward<S> {
    fn clone(&self) -> Self {
        Forward { link: self.link.clone(), _service: PhantomData }
    }
}

impl<S: NamedService> NamedService for Forward<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tonic::codegen::Service<http::Request<tonic::body::Body>> for Forward<S> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let link = self.link.clone();
        Box::pin(async move {
            let (addr, channel) = link.channel();
            let (Some(addr), Some(mut channel)) = (addr.clone(), channel) else {
                return Ok(standby_status(addr.as_deref()).into_http());
            };
            // The channel sets the leader as the request's origin; the path,
            // headers (the bearer token among them) and body go unchanged.
            let forwarded = async {
                tower::ServiceExt::ready(&mut channel).await?;
                tonic::codegen::Service::call(&mut channel, request).await
            };
            match forwarded.await {
                Ok(response) => Ok(response),
                Err(e) => {
                    tracing::warn!(leader = %addr, error = %e, "forwarding to the leader failed; answering with its address");
                    link.forget(&addr);
                    Ok(standby_status(Some(&addr)).into_http())
                }
            }
        })
    }
}

fn forward<S>(link: &LeaderLink) -> Forward<S> {
    Forward { link: link.clone(), _service: PhantomData }
}

/// Health of a standby: `NOT_SERVING` for every service, with the leader.
struct StandbyHealth {
    leader: watch::Receiver<Option<String>>,
}

#[tonic::async_trait]
impl Health for StandbyHealth {
    async fn check(
        &self,
        _request: tonic::Request<HealthCheckRequest>,
    ) -> Result<tonic::Response<HealthCheckResponse>, tonic::Status> {
        let mut response = tonic::Response::new(HealthCheckResponse { status: ServingStatus::NotServing as i32 });
        if let Some(addr) = self.leader.borrow().clone()
            && let Ok(v) = addr.parse()
        {
            response.metadata_mut().insert(LEADER_METADATA, v);
        }
        Ok(response)
    }

    type WatchStream = futures::stream::Empty<Result<HealthCheckResponse, tonic::Status>>;

    async fn watch(
        &self,
        _request: tonic::Request<HealthCheckRequest>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        Err(standby_status(self.leader.borrow().clone().as_deref()))
    }
}

/// Serves the standby API on `incoming` until `shutdown` completes.
/// `leader` holds the leader's API address (`host:port`) when known.
/// `forward`: forward calls to the leader (plain HTTP/2 only); otherwise
/// every call is answered with the leader's address.
pub async fn serve_standby<I, IO, IE>(
    leader: watch::Receiver<Option<String>>,
    forward_calls: bool,
    incoming: I,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ApiError>
where
    I: futures::Stream<Item = Result<IO, IE>>,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + tonic::transport::server::Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let link = LeaderLink { leader: leader.clone(), forward: forward_calls, channel: Arc::new(Mutex::new(None)) };
    tonic::transport::Server::builder()
        .add_service(HealthServer::new(StandbyHealth { leader: leader.clone() }))
        .add_service(forward::<JobServiceServer<crate::jobs::JobApi>>(&link))
        .add_service(forward::<TaskServiceServer<crate::tasks::TaskApi>>(&link))
        .add_service(forward::<PoolServiceServer<crate::pools::PoolApi>>(&link))
        .add_service(forward::<HostServiceServer<crate::hosts::HostApi>>(&link))
        .add_service(forward::<PluginServiceServer<crate::plugins::PluginApi>>(&link))
        .add_service(forward::<WatchServiceServer<crate::watch::WatchApi>>(&link))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_names_the_leader() {
        let s = standby_status(Some("10.0.0.1:7400"));
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert!(s.message().contains("10.0.0.1:7400"));
        assert_eq!(leader_of_status(&s).as_deref(), Some("10.0.0.1:7400"));
        let none = standby_status(None);
        assert_eq!(leader_of_status(&none), None);
        assert!(none.message().contains("no leader"));
    }
}
