//! The API of a standby server (a follower in a highly available setup).
//!
//! A standby does not run the roles, so it serves no calls. It answers
//! `grpc.health.v1.Health/Check` with `NOT_SERVING`, and every other call
//! with `UNAVAILABLE` and a message naming the leader's API address. The
//! leader's address (when known) is also in the `paceline-leader` metadata
//! entry of both answers, so clients can follow it without parsing text.

use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::task::{Context, Poll};

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
    metadata.get(LEADER_METADATA).and_then(|v| v.to_str().ok()).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
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
        None => "this paceline server is a standby and no leader is known right now (election in progress); retry shortly".to_owned(),
    };
    tonic::Status::with_metadata(tonic::Code::Unavailable, message, metadata)
}

/// Answers every method of the service named like `S` with [`standby_status`].
struct Redirect<S> {
    leader: watch::Receiver<Option<String>>,
    _service: PhantomData<fn() -> S>,
}

impl<S> Clone for Redirect<S> {
    fn clone(&self) -> Self {
        Redirect { leader: self.leader.clone(), _service: PhantomData }
    }
}

impl<S: NamedService> NamedService for Redirect<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> tonic::codegen::Service<http::Request<B>> for Redirect<S> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: http::Request<B>) -> Self::Future {
        let leader = self.leader.borrow().clone();
        std::future::ready(Ok(standby_status(leader.as_deref()).into_http()))
    }
}

fn redirect<S>(leader: &watch::Receiver<Option<String>>) -> Redirect<S> {
    Redirect { leader: leader.clone(), _service: PhantomData }
}

/// Health of a standby: `NOT_SERVING` for every service, with the leader.
struct StandbyHealth {
    leader: watch::Receiver<Option<String>>,
}

#[tonic::async_trait]
impl Health for StandbyHealth {
    async fn check(&self, _request: tonic::Request<HealthCheckRequest>) -> Result<tonic::Response<HealthCheckResponse>, tonic::Status> {
        let mut response = tonic::Response::new(HealthCheckResponse { status: ServingStatus::NotServing as i32 });
        if let Some(addr) = self.leader.borrow().clone()
            && let Ok(v) = addr.parse()
        {
            response.metadata_mut().insert(LEADER_METADATA, v);
        }
        Ok(response)
    }

    type WatchStream = futures::stream::Empty<Result<HealthCheckResponse, tonic::Status>>;

    async fn watch(&self, _request: tonic::Request<HealthCheckRequest>) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        Err(standby_status(self.leader.borrow().clone().as_deref()))
    }
}

/// Serves the standby API on `incoming` until `shutdown` completes.
/// `leader` holds the leader's API address (`host:port`) when known.
pub async fn serve_standby<I, IO, IE>(
    leader: watch::Receiver<Option<String>>,
    incoming: I,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ApiError>
where
    I: futures::Stream<Item = Result<IO, IE>>,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + tonic::transport::server::Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tonic::transport::Server::builder()
        .add_service(HealthServer::new(StandbyHealth { leader: leader.clone() }))
        .add_service(redirect::<JobServiceServer<crate::jobs::JobApi>>(&leader))
        .add_service(redirect::<TaskServiceServer<crate::tasks::TaskApi>>(&leader))
        .add_service(redirect::<PoolServiceServer<crate::pools::PoolApi>>(&leader))
        .add_service(redirect::<HostServiceServer<crate::hosts::HostApi>>(&leader))
        .add_service(redirect::<PluginServiceServer<crate::plugins::PluginApi>>(&leader))
        .add_service(redirect::<WatchServiceServer<crate::watch::WatchApi>>(&leader))
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
