//! The agent provider over a real gRPC stream, with an in-test client that
//! speaks the protocol the way `paceline agent` does.

use std::sync::Arc;
use std::time::Duration;

use paceline_hostmgr::{AgentConfig, AgentProvider, ExpectedRun, HostEvent, HostEvents, HostManager, LeaseRequest};
use paceline_model::run::RunState;
use paceline_proto::agent::v1 as pb;
use pb::agent_message::Body as Up;
use pb::agent_service_client::AgentServiceClient;
use pb::manager_message::Body as Down;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::support::*;

async fn server() -> (AgentProvider, String, tokio::sync::oneshot::Sender<()>) {
    let provider = AgentProvider::new(AgentConfig { heartbeat_interval_ms: 1000, ..AgentConfig::default() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let p = provider.clone();
    tokio::spawn(async move {
        let _ = p
            .serve_with_listener(listener, async {
                let _ = stopped.await;
            })
            .await;
    });
    (provider, format!("http://{addr}"), stop)
}

fn register(hostname: &str, running: &[&str]) -> pb::Register {
    pb::Register {
        protocol_version: pb::PROTOCOL_VERSION,
        agent_id: format!("agent-{hostname}"),
        hostname: hostname.into(),
        total: Some(paceline_proto::v1::Resources {
            cpu_millis: 4000,
            memory_mib: 8192,
            disk_mib: 10_000,
            gpus: 0,
            ports: 0,
            gpu_milli: 0,
        }),
        attributes: [("zone".to_string(), "a".to_string())].into(),
        running: running
            .iter()
            .map(|r| pb::RunningRun {
                run_id: (*r).into(),
                task_id: paceline_model::RunId::task_part(r).unwrap_or(r).into(),
                resources: Some(paceline_proto::v1::Resources {
                    cpu_millis: 1000,
                    memory_mib: 1024,
                    ..Default::default()
                }),
                gpu: None,
            })
            .collect(),
        ..pb::Register::default()
    }
}

struct FakeAgent {
    tx: mpsc::Sender<pb::AgentMessage>,
    rx: Streaming<pb::ManagerMessage>,
}

impl FakeAgent {
    async fn connect(url: &str, reg: pb::Register) -> Result<FakeAgent, tonic::Status> {
        let mut client = AgentServiceClient::connect(url.to_string()).await.unwrap();
        let (tx, out) = mpsc::channel(64);
        tx.send(pb::AgentMessage { body: Some(Up::Register(reg)) }).await.unwrap();
        let mut rx = client.session(ReceiverStream::new(out)).await?.into_inner();
        match rx.message().await? {
            Some(pb::ManagerMessage { body: Some(Down::Registered(r)) }) => assert_eq!(r.heartbeat_interval_ms, 1000),
            other => panic!("expected Registered, got {other:?}"),
        }
        Ok(FakeAgent { tx, rx })
    }

    async fn send(&self, body: Up) {
        self.tx.send(pb::AgentMessage { body: Some(body) }).await.unwrap();
    }

    async fn status(&self, run_id: &str, seq: u64, state: pb::RunState) {
        self.send(Up::Status(pb::StatusUpdate {
            run_id: run_id.into(),
            task_id: paceline_model::RunId::task_part(run_id).unwrap_or(run_id).into(),
            seq,
            state: state as i32,
            reason: "TEST".into(),
            ..Default::default()
        }))
        .await;
    }

    async fn next(&mut self) -> Down {
        let m = tokio::time::timeout(Duration::from_secs(5), self.rx.message()).await.expect("a message within 5 s");
        m.unwrap().unwrap().body.unwrap()
    }
}

async fn next_event(events: &mut HostEvents) -> HostEvent {
    tokio::time::timeout(Duration::from_secs(5), events.recv()).await.expect("an event within 5 s").unwrap()
}

#[tokio::test]
async fn invalid_register_is_refused_naming_the_field() {
    let (_provider, url, _stop) = server().await;
    let _manager = HostManager::builder(Arc::new(_provider.clone())).config(config()).start().await.unwrap();
    type Edit = fn(&mut pb::Register);
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("empty hostname", |r| r.hostname.clear(), "hostname"),
        ("protocol", |r| r.protocol_version = 9, "protocol_version"),
        ("no cpu", |r| r.total.as_mut().into_iter().for_each(|t| t.cpu_millis = 0), "total.cpu_millis"),
        ("no total", |r| r.total = None, "total"),
        ("a hostname that is no DNS name", |r| r.hostname = "n_1".into(), "hostname"),
    ];
    for (name, edit, field) in cases {
        let mut reg = register("n1", &[]);
        edit(&mut reg);
        let status = match FakeAgent::connect(&url, reg).await {
            Ok(_) => panic!("{name}: accepted"),
            Err(s) => s,
        };
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{name}");
        assert!(status.message().starts_with(&format!("{field}:")), "{name}: {}", status.message());
    }
}

#[tokio::test]
async fn agent_session_end_to_end_with_reconciliation_and_acks() {
    let (provider, url, _stop) = server().await;
    let manager = HostManager::builder(Arc::new(provider.clone())).config(config()).start().await.unwrap();
    let mut events = manager.subscribe();
    // After a restart the owner expects one run on n1; the agent reports another.
    manager
        .expect_runs(vec![ExpectedRun {
            host: "n1".into(),
            run_id: "expected-0-1".into(),
            task_id: "expected-0".into(),
            resources: SMALL,
            gpu: Default::default(),
            last_seq: 4,
        }])
        .await;
    let mut agent = FakeAgent::connect(&url, register("n1", &["stray-0-1"])).await.unwrap();

    // The unknown run is killed, the missing one LOST after the owner's last seq.
    match agent.next().await {
        Down::Kill(k) => assert_eq!(k.run_id, "stray-0-1"),
        other => panic!("expected Kill, got {other:?}"),
    }
    let lost = loop {
        if let HostEvent::Run(u) = next_event(&mut events).await {
            break u;
        }
    };
    assert_eq!(
        (lost.run_id.as_str(), lost.state, lost.seq, lost.reason.as_str()),
        ("expected-0-1", RunState::Lost, 5, "RUN_MISSING")
    );
    manager.acknowledge("expected-0-1", 5).await;
    // The stray's end is handled quietly and acknowledged to the agent.
    agent.status("stray-0-1", 7, pb::RunState::Killed).await;
    match agent.next().await {
        Down::Ack(a) => assert_eq!((a.run_id.as_str(), a.seq), ("stray-0-1", 7)),
        other => panic!("expected Ack, got {other:?}"),
    }

    // Launch through a lease; the agent sees the Launch.
    let lease = manager.lease(&LeaseRequest::new(SMALL, 1, 60_000)).unwrap();
    assert_eq!(lease.hosts[0].name, "n1");
    assert_eq!(lease.hosts[0].attributes.get("zone").map(String::as_str), Some("a"));
    manager.launch(lease.id, "n1", vec![req("web-0-1", SMALL, &[("A", "1")])]).await.unwrap();
    match agent.next().await {
        Down::Launch(l) => {
            assert_eq!((l.run_id.as_str(), l.task_id.as_str(), l.command.as_str()), ("web-0-1", "web-0", "sleep"));
            assert_eq!(l.env.get("A").map(String::as_str), Some("1"));
            assert_eq!(l.resources.unwrap().cpu_millis, 1000);
        }
        other => panic!("expected Launch, got {other:?}"),
    }

    // Status with a duplicate: delivered once; acked to the agent only after the subscriber acks.
    agent.send(Up::Heartbeat(pb::Heartbeat { seq: 1, usage: vec![] })).await;
    agent.status("web-0-1", 1, pb::RunState::Starting).await;
    agent.status("web-0-1", 1, pb::RunState::Starting).await;
    agent.status("web-0-1", 2, pb::RunState::Running).await;
    let mut got = Vec::new();
    while got.len() < 2 {
        if let HostEvent::Run(u) = next_event(&mut events).await {
            got.push((u.seq, u.state));
        }
    }
    assert_eq!(got, vec![(1, RunState::Starting), (2, RunState::Running)]);
    manager.acknowledge("web-0-1", 2).await;
    match agent.next().await {
        Down::Ack(a) => assert_eq!((a.run_id.as_str(), a.seq), ("web-0-1", 2)),
        other => panic!("expected Ack, got {other:?}"),
    }
    // A resend of something acknowledged is acknowledged again at once.
    agent.status("web-0-1", 2, pb::RunState::Running).await;
    match agent.next().await {
        Down::Ack(a) => assert_eq!((a.run_id.as_str(), a.seq), ("web-0-1", 2)),
        other => panic!("expected Ack, got {other:?}"),
    }

    // Measured use rides on heartbeats: kept for the host's own live runs,
    // ignored for a run it does not hold.
    let used = |run_id: &str, cpu_millis| pb::RunUsage {
        run_id: run_id.into(),
        cpu_millis,
        memory_mib: 200,
        sampled_at_ms: 1_700_000_000_000,
    };
    agent.send(Up::Heartbeat(pb::Heartbeat { seq: 2, usage: vec![used("web-0-1", 750), used("other-0-1", 9)] })).await;
    // The heartbeat crosses the stream before the manager applies it.
    let mut tries = 0;
    while manager.run_holding("web-0-1").is_some_and(|h| h.used.is_none()) && tries < 200 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        manager.sync().await.unwrap();
        tries += 1;
    }
    let holding = manager.run_holding("web-0-1").unwrap();
    assert_eq!((holding.host.as_str(), holding.reserved), ("n1", SMALL));
    let m = holding.used.unwrap();
    assert_eq!((m.cpu_millis, m.memory_mib, m.sampled_at_ms), (750, 200, 1_700_000_000_000));
    assert!(manager.run_holding("other-0-1").is_none());
    let measured: Vec<(String, String, String, _)> =
        manager.measured_use().into_iter().map(|r| (r.run_id, r.task_id, r.host, r.used)).collect();
    assert_eq!(measured, vec![("web-0-1".to_owned(), "web-0".to_owned(), "n1".to_owned(), m)]);

    // Kill goes down the stream.
    manager.kill("web-0-1").await.unwrap();
    match agent.next().await {
        Down::Kill(k) => assert_eq!((k.run_id.as_str(), k.grace_period_secs), ("web-0-1", None)),
        other => panic!("expected Kill, got {other:?}"),
    }

    // Logs round-trip over the stream.
    let reader = {
        let m = manager.clone();
        tokio::spawn(async move { m.read_log("web-0-1", paceline_hostmgr::LogStream::Stderr, 3, 10).await })
    };
    let request_id = match agent.next().await {
        Down::ReadLog(r) => {
            assert_eq!((r.run_id.as_str(), r.stream.as_str(), r.offset, r.max_bytes), ("web-0-1", "stderr", 3, 10));
            r.request_id
        }
        other => panic!("expected ReadLog, got {other:?}"),
    };
    agent
        .send(Up::LogChunk(pb::LogChunk {
            request_id,
            data: b"oops".to_vec(),
            offset: 3,
            file_size: 7,
            error: String::new(),
        }))
        .await;
    let chunk = reader.await.unwrap().unwrap();
    assert_eq!((chunk.data.as_slice(), chunk.offset, chunk.file_size), (&b"oops"[..], 3, 7));

    // Reconnect: the new stream re-registers without web-0-1 → LOST; the old stream's end is not a disconnect.
    let mut again = FakeAgent::connect(&url, register("n1", &[])).await.unwrap();
    let lost = loop {
        match next_event(&mut events).await {
            HostEvent::Run(u) => break u,
            HostEvent::HostLeft { .. } => panic!("a replaced stream is not a disconnect"),
            _ => {}
        }
    };
    assert_eq!(
        (lost.run_id.as_str(), lost.state, lost.seq, lost.reason.as_str()),
        ("web-0-1", RunState::Lost, 3, "RUN_MISSING")
    );
    drop(agent);
    assert_eq!(provider.connected_hosts(), vec!["n1".to_string()]);

    // Closing the stream makes the host unreachable.
    drop(again.tx);
    let left = loop {
        if let HostEvent::HostLeft { host, .. } = next_event(&mut events).await {
            break host;
        }
    };
    assert_eq!(left, "n1");
    assert!(!manager.host("n1").unwrap().reachable);
    let _ = again.rx.message().await;
}

#[tokio::test]
async fn silent_agent_times_out_launches_and_loses_its_host() {
    let (provider, url, _stop) = server().await;
    let c = paceline_hostmgr::ManagerConfig { heartbeat_timeout_ms: 1_000, launch_timeout_ms: 100, ..config() };
    let manager = HostManager::builder(Arc::new(provider.clone())).config(c).start().await.unwrap();
    manager.expect_runs(Vec::new()).await;
    let mut events = manager.subscribe();
    let mut agent = FakeAgent::connect(&url, register("n2", &[])).await.unwrap();
    let lease = manager.lease(&LeaseRequest::new(SMALL, 1, 60_000)).unwrap();
    manager.launch(lease.id, "n2", vec![req("mute-0-1", SMALL, &[]), req("live-0-1", SMALL, &[])]).await.unwrap();
    assert!(matches!(agent.next().await, Down::Launch(_)));
    assert!(matches!(agent.next().await, Down::Launch(_)));
    agent.status("live-0-1", 1, pb::RunState::Running).await;
    let u = loop {
        if let HostEvent::Run(u) = next_event(&mut events).await {
            break u;
        }
    };
    assert_eq!(u.run_id, "live-0-1");

    // No update for mute-0-1 within the launch timeout.
    tokio::time::sleep(Duration::from_millis(150)).await;
    agent.send(Up::Heartbeat(pb::Heartbeat { seq: 1, usage: vec![] })).await;
    manager.tick().await;
    let u = loop {
        if let HostEvent::Run(u) = next_event(&mut events).await {
            break u;
        }
    };
    assert_eq!((u.run_id.as_str(), u.state, u.reason.as_str()), ("mute-0-1", RunState::Lost, "LAUNCH_TIMEOUT"));

    // Then the agent falls silent (stream still open): the host is lost with its run.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    manager.tick().await;
    let mut left = false;
    let u = loop {
        match next_event(&mut events).await {
            HostEvent::Run(u) => break u,
            HostEvent::HostLeft { host, .. } => left |= host == "n2",
            _ => {}
        }
    };
    assert!(left);
    assert_eq!((u.run_id.as_str(), u.state, u.seq, u.reason.as_str()), ("live-0-1", RunState::Lost, 2, "HOST_LOST"));
    assert_eq!(manager.host("n2").unwrap().view.allocated, paceline_model::Resources::ZERO);
}

/// After a server restart an agent may register, and send a run's RUNNING,
/// before the job manager has said which runs it expects. That update must
/// reach the job manager once the run is adopted, and the agent must not be
/// told it was handled before then (found by scripts/torture: the agent
/// forgot the RUNNING, and the task stayed LAUNCHING for ever).
#[tokio::test]
async fn an_update_for_a_run_reported_before_expectations_reaches_the_owner_at_adoption() {
    let (provider, url, _stop) = server().await;
    let manager = HostManager::builder(Arc::new(provider.clone())).config(config()).start().await.unwrap();
    let mut events = manager.subscribe();
    let mut agent = FakeAgent::connect(&url, register("n1", &["web-0-2"])).await.unwrap();
    agent.status("web-0-2", 1, pb::RunState::Running).await;
    // Not acknowledged while nobody has said whether the run is wanted.
    let quiet = tokio::time::timeout(Duration::from_millis(500), async {
        loop {
            if let Down::Ack(a) = agent.next().await {
                break a;
            }
        }
    })
    .await;
    assert!(quiet.is_err(), "acknowledged before the owner heard it: {quiet:?}");

    manager
        .expect_runs(vec![ExpectedRun {
            host: "n1".into(),
            run_id: "web-0-2".into(),
            task_id: "web-0".into(),
            resources: SMALL,
            gpu: Default::default(),
            last_seq: 0,
        }])
        .await;
    let delivered = loop {
        if let HostEvent::Run(u) = next_event(&mut events).await {
            break u;
        }
    };
    assert_eq!((delivered.run_id.as_str(), delivered.seq, delivered.state), ("web-0-2", 1, RunState::Running));
    manager.acknowledge("web-0-2", 1).await;
    loop {
        if let Down::Ack(a) = agent.next().await {
            assert_eq!((a.run_id.as_str(), a.seq), ("web-0-2", 1));
            break;
        }
    }
}

/// The other way round: a run the host reported, and saw end, before the
/// owner said what it expects, and that the owner does not expect. The held
/// end must be handled when the owner answers, freeing the run and its task
/// (found by scripts/torture: the agent had nothing left to kill and nothing
/// new to say, and every relaunch of the task was refused with "already has
/// the live run").
#[tokio::test]
async fn an_unexpected_run_that_ended_before_expectations_is_released_not_held() {
    let (provider, url, _stop) = server().await;
    let manager = HostManager::builder(Arc::new(provider.clone())).config(config()).start().await.unwrap();
    let mut agent = FakeAgent::connect(&url, register("n1", &["stray-0-1"])).await.unwrap();
    agent.status("stray-0-1", 1, pb::RunState::Running).await;
    agent.status("stray-0-1", 2, pb::RunState::Succeeded).await;
    let quiet = tokio::time::timeout(Duration::from_millis(500), agent.next()).await;
    assert!(quiet.is_err(), "answered before the owner said what it expects: {quiet:?}");

    manager.expect_runs(Vec::new()).await;
    let mut acked = Vec::new();
    while acked.last() != Some(&2) {
        match agent.next().await {
            Down::Ack(a) if a.run_id == "stray-0-1" => acked.push(a.seq),
            Down::Kill(k) => panic!("a run that had ended was killed: {k:?}"),
            _ => {}
        }
    }
    assert_eq!(acked, vec![1, 2], "both held updates acknowledged, in order");
    assert!(manager.host("n1").unwrap().runs.is_empty(), "the ended run is released");
    assert_eq!(manager.host("n1").unwrap().view.allocated, paceline_model::Resources::ZERO);

    // The task can run again.
    let lease = manager.lease(&LeaseRequest::new(SMALL, 1, 60_000)).unwrap();
    manager.launch(lease.id, "n1", vec![req("stray-0-2", SMALL, &[])]).await.unwrap();
    loop {
        if let Down::Launch(l) = agent.next().await {
            assert_eq!(l.run_id, "stray-0-2");
            break;
        }
    }
}

async fn until_reachable(manager: &HostManager, host: &str, reachable: bool) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while manager.host(host).is_none_or(|h| h.reachable != reachable) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{host} reachable={reachable} within 5 s"));
}

/// A host declared lost while its stream stayed open (the manager stalled,
/// its heartbeats came late) used to stay lost, its heartbeats ignored,
/// until its agent was restarted. Heartbeating again now ends the stream
/// so the agent registers anew, as after any lost stream, and the host is
/// back with its resources.
#[tokio::test]
async fn a_lost_host_that_heartbeats_again_registers_again_and_offers_resources() {
    let (provider, url, _stop) = server().await;
    let c = paceline_hostmgr::ManagerConfig { heartbeat_timeout_ms: 300, ..config() };
    let manager = HostManager::builder(Arc::new(provider.clone())).config(c).start().await.unwrap();
    manager.expect_runs(Vec::new()).await;
    let mut events = manager.subscribe();
    let mut agent = FakeAgent::connect(&url, register("n3", &[])).await.unwrap();
    until_reachable(&manager, "n3", true).await;

    // No heartbeat within the timeout: lost, with nothing to offer.
    tokio::time::sleep(Duration::from_millis(400)).await;
    manager.tick().await;
    loop {
        if let HostEvent::HostLeft { host, .. } = next_event(&mut events).await {
            assert_eq!(host, "n3");
            break;
        }
    }
    assert!(!manager.host("n3").unwrap().reachable);
    assert!(manager.lease(&LeaseRequest::new(SMALL, 1, 60_000)).unwrap().hosts.is_empty());

    // Its heartbeats resume on the same stream: the stream is ended, naming why.
    agent.send(Up::Heartbeat(pb::Heartbeat { seq: 1, usage: vec![] })).await;
    agent.send(Up::Heartbeat(pb::Heartbeat { seq: 2, usage: vec![] })).await;
    let ended = tokio::time::timeout(Duration::from_secs(5), agent.rx.message())
        .await
        .expect("the stream of a lost host that heartbeats again is ended");
    let status = ended.expect_err("ended with a status");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(status.message().contains("register again"), "{}", status.message());

    // The agent redials and registers, as `paceline agent` does when its stream ends.
    let again = FakeAgent::connect(&url, register("n3", &[])).await.unwrap();
    until_reachable(&manager, "n3", true).await;
    let lease = manager.lease(&LeaseRequest::new(SMALL, 1, 60_000)).expect("the host offers resources again");
    assert_eq!(lease.hosts[0].name, "n3");
    // The old stream's queued heartbeat does not end the new one.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(provider.connected_hosts(), vec!["n3".to_string()]);
    again.send(Up::Heartbeat(pb::Heartbeat { seq: 1, usage: vec![] })).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(manager.host("n3").unwrap().reachable);
}

/// Log reads' request ids are sequential, so any certified agent can guess
/// another host's: its answer must not be taken (forged bytes, or an error
/// that fails the read). Only the host asked answers.
#[tokio::test]
async fn a_log_chunk_from_another_host_does_not_answer_a_read() {
    use paceline_hostmgr::Provider;
    let (provider, url, _stop) = server().await;
    let manager = HostManager::builder(Arc::new(provider.clone())).config(config()).start().await.unwrap();
    manager.expect_runs(Vec::new()).await;
    let mut a = FakeAgent::connect(&url, register("a1", &[])).await.unwrap();
    let b = FakeAgent::connect(&url, register("b1", &[])).await.unwrap();
    until_reachable(&manager, "a1", true).await;
    until_reachable(&manager, "b1", true).await;

    let reader = {
        let p = provider.clone();
        tokio::spawn(async move { p.read_log("a1", "web-0-1", paceline_hostmgr::LogStream::Stdout, 0, 100).await })
    };
    let request_id = match a.next().await {
        Down::ReadLog(r) => r.request_id,
        other => panic!("expected ReadLog, got {other:?}"),
    };
    // Host b answers a's read: forged bytes, then an error.
    let forged = pb::LogChunk { request_id, data: b"forged".to_vec(), offset: 0, file_size: 6, error: String::new() };
    b.send(Up::LogChunk(forged)).await;
    b.send(Up::LogChunk(pb::LogChunk { request_id, error: "no such run".into(), ..Default::default() })).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!reader.is_finished(), "another host's chunk answered the read: {:?}", reader.await);

    a.send(Up::LogChunk(pb::LogChunk {
        request_id,
        data: b"real".to_vec(),
        offset: 0,
        file_size: 4,
        error: String::new(),
    }))
    .await;
    let chunk = tokio::time::timeout(Duration::from_secs(5), reader).await.expect("answered").unwrap().unwrap();
    assert_eq!((chunk.data.as_slice(), chunk.file_size), (&b"real"[..], 4));
}

/// Without a certificate (an agent port with no identities) a host still
/// has one spelling: `N4.` registers as `n4`, and a second agent naming
/// it `n4` is the same host, not a second one (issue 44).
#[tokio::test]
async fn spellings_of_one_hostname_are_one_host_without_a_certificate() {
    let (provider, url, _stop) = server().await;
    let manager = HostManager::builder(Arc::new(provider.clone())).config(config()).start().await.unwrap();
    manager.expect_runs(Vec::new()).await;
    let _first = FakeAgent::connect(&url, register("N4.", &[])).await.unwrap();
    until_reachable(&manager, "n4", true).await;
    let _second = FakeAgent::connect(&url, register("n4", &[])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(provider.connected_hosts(), vec!["n4".to_string()]);
    assert!(manager.host("N4.").is_none(), "no host under the spelling sent");
}
