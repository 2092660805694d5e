//! The host manager in a process of its own: its peer protocol carries a
//! launch's per-run refusals to the job manager's side.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use paceline_hostmgr::LeaseRequest;
use paceline_hostmgr::peer::{HostPeerService, LocateLeader, RemoteHosts};
use paceline_joints::{Launcher, RunRefused};

use crate::support::{SMALL, config, req, sim_manager};

/// One host manager at a fixed address.
struct At(String);

#[async_trait]
impl LocateLeader for At {
    async fn channel(&self) -> Result<tonic::transport::Channel, String> {
        let endpoint =
            tonic::transport::Endpoint::from_shared(format!("http://{}", self.0)).map_err(|e| e.to_string())?;
        endpoint.connect().await.map_err(|e| e.to_string())
    }

    fn describe(&self) -> String {
        self.0.clone()
    }
}

#[tokio::test]
async fn a_run_refused_alone_comes_back_over_the_peer_protocol_and_its_batch_mate_launches() {
    let (_sim, manager, _events) = sim_manager(1, config()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = HostPeerService::new(manager.clone()).into_server();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(paceline_proto::incoming::tcp(listener)),
    );
    let remote = RemoteHosts::connect(Arc::new(At(addr.to_string())), None, 1, Duration::from_secs(10)).await.unwrap();

    let lease = manager.lease(&LeaseRequest::new(SMALL, 1, 60_000)).unwrap();
    let host = lease.hosts[0].name.clone();
    let accepted = remote.launch(lease.id, &host, vec![req("p-0-1", SMALL, &[])]).await.unwrap();
    assert!(accepted.is_empty());
    let refused =
        remote.launch(lease.id, &host, vec![req("p-0-2", SMALL, &[]), req("q-0-1", SMALL, &[])]).await.unwrap();
    assert_eq!(
        refused,
        [RunRefused { run_id: "p-0-2".into(), reason: "task p-0: already has the live run p-0-1".into() }]
    );
    assert!(manager.run_holding("q-0-1").is_some(), "the batch-mate launched");
    let err = remote.launch(lease.id, &host, vec![req("p-0-3", SMALL, &[])]).await.unwrap_err();
    assert!(err.to_string().contains("already has the live run p-0-1"), "every run refused is an error: {err}");
    remote.stop().await;
    server.abort();
}
