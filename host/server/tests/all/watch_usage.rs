//! A task's measured use on the watch stream, through the real gRPC API:
//! the real roles over the agent provider, a fake agent speaking the agent
//! protocol (register, run, heartbeat with `usage` as `paceline agent`
//! sends it), and a watcher on `WatchService`. A change of the figures
//! reaches the watcher once; heartbeats repeating them send nothing.

use std::sync::Arc;
use std::time::Duration;

use apb::agent_message::Body as Up;
use apb::agent_service_client::AgentServiceClient;
use apb::manager_message::Body as Down;
use paceline_api::ApiConfig;
use paceline_hostmgr::{AgentConfig, AgentProvider, ManagerConfig};
use paceline_model::job::JobKind;
use paceline_proto::agent::v1 as apb;
use paceline_proto::v1 as pb;
use pb::watch_service_client::WatchServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::{provider_cluster, support};

fn register() -> apb::Register {
    apb::Register {
        protocol_version: apb::PROTOCOL_VERSION,
        agent_id: "agent-n1".into(),
        hostname: "n1".into(),
        total: Some(pb::Resources { cpu_millis: 4000, memory_mib: 8192, disk_mib: 10_000, ..Default::default() }),
        ..apb::Register::default()
    }
}

fn used(run_id: &str, cpu_millis: u64, memory_mib: u64, sampled_at_ms: u64) -> apb::RunUsage {
    apb::RunUsage { run_id: run_id.into(), cpu_millis, memory_mib, sampled_at_ms }
}

/// The next task event of the stream within `wait`, if any.
async fn next_task(events: &mut tonic::Streaming<pb::WatchEvent>, wait: Duration) -> Option<pb::Task> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let ev = tokio::time::timeout_at(deadline, events.message()).await.ok()?.expect("stream").expect("open");
        if let Some(pb::watch_event::Change::Task(t)) = ev.change {
            return Some(t);
        }
    }
}

fn figures(t: &pb::Task) -> Option<(u64, u64)> {
    t.usage.as_ref().map(|u| (u.cpu_millis, u.memory_mib))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sends_a_change_of_measured_use_once_and_nothing_for_repeated_figures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let provider = AgentProvider::new(AgentConfig { heartbeat_interval_ms: 1000, ..AgentConfig::default() });
    let agent_port = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let agent_addr = agent_port.local_addr().expect("addr");
    let (stop_agents, agents_stopped) = tokio::sync::oneshot::channel::<()>();
    let p = provider.clone();
    tokio::spawn(async move {
        let _ = p
            .serve_with_listener(agent_port, async {
                let _ = agents_stopped.await;
            })
            .await;
    });
    let store: Arc<dyn paceline_storage::Store> =
        Arc::new(paceline_storage::sqlite::SqliteStore::open(dir.path().join("paceline.sqlite")).expect("sqlite"));
    let config = ManagerConfig { tick_interval: Some(Duration::from_millis(100)), ..ManagerConfig::default() };
    let (cluster, loops) = provider_cluster::assemble(Arc::new(provider.clone()), store, config).await;
    let api_port = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let api_addr = api_port.local_addr().expect("addr");
    let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(paceline_api::serve(cluster.roles(), api_port, ApiConfig::default(), async {
        let _ = api_stopped.await;
    }));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{api_addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");

    // The agent registers.
    let mut client = AgentServiceClient::connect(format!("http://{agent_addr}")).await.expect("agent port");
    let (tx, out) = mpsc::channel(64);
    let send = async |body: Up| tx.send(apb::AgentMessage { body: Some(body) }).await.expect("agent stream");
    send(Up::Register(register())).await;
    let mut down = client.session(ReceiverStream::new(out)).await.expect("session").into_inner();
    let mut next_down = async || {
        let m = tokio::time::timeout(Duration::from_secs(10), down.message()).await.expect("a message in time");
        m.expect("stream").expect("open").body.expect("body")
    };
    assert!(matches!(next_down().await, Down::Registered(_)));

    // A watcher of the job's tasks, then the job; its run is launched on n1.
    let mut watch = WatchServiceClient::new(channel.clone());
    let request = pb::WatchRequest { from_revision: 0, job_id: "burn".into(), kinds: vec!["task".into()] };
    let mut events = watch.watch(request).await.expect("watch").into_inner();
    cluster.jobs.create("burn", support::job(JobKind::Stateless, 1)).await.expect("create");
    let run_id = loop {
        if let Down::Launch(l) = next_down().await {
            break l.run_id;
        }
    };
    for (seq, state) in [(1, apb::RunState::Starting), (2, apb::RunState::Running)] {
        send(Up::Status(apb::StatusUpdate {
            run_id: run_id.clone(),
            task_id: "burn-0".into(),
            seq,
            state: state as i32,
            reason: "TEST".into(),
            ..Default::default()
        }))
        .await;
    }
    loop {
        let t = next_task(&mut events, Duration::from_secs(10)).await.expect("the task's changes");
        assert_eq!(figures(&t), None, "nothing measured yet");
        if t.state == pb::TaskState::Running as i32 {
            break;
        }
    }
    // Past the usage poll's first look, so what follows is a change.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // The first sample reaches the watcher, with the figures.
    let sampled = 1_700_000_000_000;
    send(Up::Heartbeat(apb::Heartbeat { seq: 1, usage: vec![used(&run_id, 750, 200, sampled)] })).await;
    let t = next_task(&mut events, Duration::from_secs(5)).await.expect("a task event for the first sample");
    assert_eq!((t.instance, figures(&t)), (0, Some((750, 200))));
    assert_eq!(t.usage.as_ref().map(|u| u.sampled_at_ms), Some(sampled));
    assert!(t.reserved.is_some(), "sent as GetTask shows it: {t:?}");

    // Heartbeats repeating the figures (the same sample, then a new sample
    // with the same figures) send nothing for 3 s.
    for seq in 2..8 {
        let at = if seq < 5 { sampled } else { sampled + 5_000 };
        send(Up::Heartbeat(apb::Heartbeat { seq, usage: vec![used(&run_id, 750, 200, at)] })).await;
        if let Some(t) = next_task(&mut events, Duration::from_millis(500)).await {
            panic!("no event for unchanged figures, got {t:?}");
        }
    }

    // New figures: one event with them.
    send(Up::Heartbeat(apb::Heartbeat { seq: 8, usage: vec![used(&run_id, 300, 210, sampled + 10_000)] })).await;
    let t = next_task(&mut events, Duration::from_secs(5)).await.expect("a task event for the new figures");
    assert_eq!(figures(&t), Some((300, 210)));
    for seq in 9..11 {
        send(Up::Heartbeat(apb::Heartbeat { seq, usage: vec![used(&run_id, 300, 210, sampled + 10_000)] })).await;
    }
    assert_eq!(next_task(&mut events, Duration::from_millis(2500)).await.map(|t| figures(&t)), None);

    drop(events);
    let _ = stop_api.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
    let _ = stop_agents.send(());
    loops.abort();
}
