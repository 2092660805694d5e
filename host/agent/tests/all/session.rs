//! The gRPC session against a throwaway in-test manager: register, launch,
//! statuses, acks, logs, rejection, and resending after a broken stream.

use std::time::Duration;

use paceline_agent::AgentConfig;
use paceline_agent::session::Agent;
use paceline_proto::agent::v1 as pb;
use paceline_proto::agent::v1::agent_message::Body as FromAgent;
use paceline_proto::agent::v1::agent_service_server::{AgentService, AgentServiceServer};
use paceline_proto::agent::v1::manager_message::Body as ToAgent;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

use crate::common::port_range;

struct Conn {
    inbound: Streaming<pb::AgentMessage>,
    outbound: mpsc::Sender<Result<pb::ManagerMessage, Status>>,
}

impl Conn {
    async fn send(&self, body: ToAgent) {
        self.outbound.send(Ok(pb::ManagerMessage { body: Some(body) })).await.unwrap();
    }

    /// The next message that is not a heartbeat.
    async fn next(&mut self) -> FromAgent {
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(15), self.inbound.message())
                .await
                .expect("agent silent")
                .unwrap()
                .expect("stream ended");
            match msg.body.unwrap() {
                FromAgent::Heartbeat(_) => continue,
                other => return other,
            }
        }
    }

    async fn next_status(&mut self) -> pb::StatusUpdate {
        match self.next().await {
            FromAgent::Status(u) => u,
            other => panic!("expected a status, got {other:?}"),
        }
    }
}

struct FakeManager {
    conns: mpsc::UnboundedSender<Conn>,
}

#[tonic::async_trait]
impl AgentService for FakeManager {
    type SessionStream = ReceiverStream<Result<pb::ManagerMessage, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let (tx, rx) = mpsc::channel(64);
        let _ = self.conns.send(Conn { inbound: request.into_inner(), outbound: tx });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn join(&self, _request: Request<pb::JoinRequest>) -> Result<Response<pb::JoinResponse>, Status> {
        Err(Status::unimplemented("this test's agent holds its certificate already"))
    }
}

/// The fake manager's TLS (a server certificate of a real cluster CA, client
/// certificates of that CA required) and the identity of an agent called
/// `hostname` that joined it, stored in `data_dir` as `paceline agent` keeps it.
fn tls_and_identity(
    pki_dir: &std::path::Path,
    data_dir: &std::path::Path,
    hostname: &str,
) -> tonic::transport::ServerTlsConfig {
    let pki = paceline_hostmgr::pki::AgentPki::open(pki_dir).unwrap();
    let token = pki.create_token(Duration::from_secs(60), Some(1), "").unwrap();
    let (key_pem, csr_pem) = paceline_agent::identity::new_key_and_csr(hostname).unwrap();
    let cert_pem = pki.join(&token.token, hostname, &csr_pem).unwrap();
    paceline_agent::Identity::from_parts(cert_pem, key_pem, pki.ca_pem().to_owned(), hostname.to_owned())
        .store(data_dir)
        .unwrap();
    let (chain, key) = pki.server_identity(&["127.0.0.1".to_owned()]).unwrap();
    tonic::transport::ServerTlsConfig::new()
        .identity(tonic::transport::Identity::from_pem(chain, key))
        .client_ca_root(tonic::transport::Certificate::from_pem(pki.ca_pem()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_registers_launches_acks_and_resends_after_a_broken_stream() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (conns_tx, mut conns) = mpsc::unbounded_channel();
    let dir = tempfile::tempdir().unwrap();
    let pki_dir = tempfile::tempdir().unwrap();
    let tls = tls_and_identity(pki_dir.path(), dir.path(), "test-host");
    tokio::spawn(
        tonic::transport::Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(AgentServiceServer::new(FakeManager { conns: conns_tx }))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );

    let range = port_range();
    let config = AgentConfig {
        manager: format!("http://{addr}"),
        data_dir: dir.path().to_owned(),
        hostname: Some("test-host".into()),
        port_range_first: range.0,
        port_range_last: range.1,
        reconnect_initial_ms: 50,
        reconnect_max_ms: 200,
        attributes: [("zone".to_owned(), "z1".to_owned())].into_iter().collect(),
        ..AgentConfig::default()
    };
    let agent = Agent::start(config).await.unwrap();
    let sup = agent.supervisor().clone();
    let agent_id = agent.agent_id().to_owned();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let agent_task = tokio::spawn(agent.serve(async {
        let _ = stop_rx.await;
    }));

    // Stream 1: register.
    let mut c1 = tokio::time::timeout(Duration::from_secs(15), conns.recv()).await.unwrap().unwrap();
    let FromAgent::Register(reg) = c1.next().await else { panic!("first message must be Register") };
    assert_eq!(reg.protocol_version, pb::PROTOCOL_VERSION);
    assert_eq!(reg.hostname, "test-host");
    assert_eq!(reg.agent_id, agent_id);
    assert_eq!(reg.attributes["zone"], "z1");
    assert!(reg.attributes.contains_key("isolation"));
    assert_ne!(reg.isolation, pb::IsolationMode::Unspecified as i32);
    assert_eq!((reg.port_range_first, reg.port_range_last), (u32::from(range.0), u32::from(range.1)));
    assert!(reg.total.unwrap().cpu_millis > 0);
    c1.send(ToAgent::Registered(pb::Registered { heartbeat_interval_ms: 100 })).await;

    // A heartbeat arrives.
    let hb = tokio::time::timeout(Duration::from_secs(5), c1.inbound.message()).await.unwrap().unwrap().unwrap();
    assert!(matches!(hb.body, Some(FromAgent::Heartbeat(_))), "{hb:?}");

    // Launch, then follow the statuses.
    c1.send(ToAgent::Launch(pb::Launch {
        run_id: "sess-1".into(),
        task_id: "sess".into(),
        command: "sh".into(),
        args: vec!["-c".into(), "echo hi from session".into()],
        resources: Some(paceline_proto::v1::Resources { cpu_millis: 100, memory_mib: 64, ..Default::default() }),
        ..Default::default()
    }))
    .await;
    let mut got = Vec::new();
    while got.len() < 3 {
        let u = c1.next_status().await;
        assert_eq!(u.run_id, "sess-1");
        got.push((u.seq, u.state));
    }
    assert_eq!(
        got,
        vec![
            (1, pb::RunState::Starting as i32),
            (2, pb::RunState::Running as i32),
            (3, pb::RunState::Succeeded as i32)
        ]
    );

    // Logs, and a rejected launch.
    c1.send(ToAgent::ReadLog(pb::ReadLog {
        request_id: 42,
        run_id: "sess-1".into(),
        stream: "stdout".into(),
        offset: 0,
        max_bytes: 0,
    }))
    .await;
    let FromAgent::LogChunk(chunk) = c1.next().await else { panic!("expected a log chunk") };
    assert_eq!((chunk.request_id, chunk.data.as_slice(), chunk.error.as_str()), (42, &b"hi from session\n"[..], ""));
    c1.send(ToAgent::Launch(pb::Launch { run_id: "bad-1".into(), task_id: "bad".into(), ..Default::default() })).await;
    let FromAgent::LaunchRejected(rej) = c1.next().await else { panic!("expected a rejection") };
    assert_eq!(rej.run_id, "bad-1");
    assert!(rej.error.starts_with("command:"), "{}", rej.error);

    // Acknowledge up to 2, then break the stream.
    c1.send(ToAgent::Ack(pb::Ack { run_id: "sess-1".into(), seq: 2 })).await;
    for _ in 0..200 {
        if sup.outbox().acked("sess-1") == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(sup.outbox().acked("sess-1"), 2);
    drop(c1);

    // Stream 2: the agent redials, re-registers and resends only seq 3.
    let mut c2 = tokio::time::timeout(Duration::from_secs(15), conns.recv()).await.unwrap().unwrap();
    let FromAgent::Register(reg) = c2.next().await else { panic!("first message must be Register") };
    // The run is over but its end is not acknowledged: it is listed, so the
    // manager does not call it missing before the resent end arrives.
    let listed: Vec<&str> = reg.running.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(listed, vec!["sess-1"]);
    c2.send(ToAgent::Registered(pb::Registered { heartbeat_interval_ms: 1000 })).await;
    let u = c2.next_status().await;
    assert_eq!((u.run_id.as_str(), u.seq, u.state), ("sess-1", 3, pb::RunState::Succeeded as i32));
    c2.send(ToAgent::Ack(pb::Ack { run_id: "sess-1".into(), seq: 3 })).await;
    for _ in 0..200 {
        if sup.outbox().pending_len() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(sup.outbox().pending_len(), 0);

    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), agent_task).await.unwrap().unwrap().unwrap();
}
