//! The `mesos` provider against the fake master (`paceline-mesos-fake`):
//! subscription, offers → inventory, launch → ACCEPT, updates acknowledged
//! only once handled, rescind, failover, agent failure, maintenance, leader
//! redirects and bad input from the master.

use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline_hostmgr::mesos::{Encoding, MesosConfig, MesosProvider, STORE_KEY};
use paceline_hostmgr::{ExpectedRun, HostEvent, HostEvents, HostManager, LeaseRequest, ManagerConfig};
use paceline_mesos_fake::{AgentSpec, FakeConfig, FakeMaster};
use paceline_model::Resources;
use paceline_model::host::MaintenanceState;
use paceline_model::run::{LaunchRequest, RunState, RunUpdate};
use paceline_model::task::TaskSpec;
use paceline_proto::mesos::v1 as mesos;
use paceline_storage::Store;
use paceline_storage::sqlite::SqliteStore;

fn fake_config() -> FakeConfig {
    FakeConfig {
        heartbeat_interval: Duration::from_millis(200),
        status_retry: Duration::from_millis(300),
        allocation_interval: Duration::from_millis(20),
        partition_aware_default: true,
    }
}

fn config(masters: Vec<String>, encoding: Encoding) -> MesosConfig {
    MesosConfig {
        masters,
        framework_name: "paceline-test".into(),
        encoding,
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
        registration_delay: Duration::from_millis(100),
        host_heartbeat: Duration::from_millis(100),
        launch_offer_wait: Duration::from_secs(3),
        idle_suppress: None,
        call_timeout: Duration::from_secs(2),
        ..MesosConfig::default()
    }
}

struct Harness {
    provider: MesosProvider,
    hosts: HostManager,
    events: HostEvents,
}

async fn harness(cfg: MesosConfig, store: Arc<dyn Store>, expected: Vec<ExpectedRun>) -> Harness {
    let provider = MesosProvider::new(cfg, Some(store.clone()));
    let mc = ManagerConfig {
        heartbeat_timeout_ms: 3_000,
        tick_interval: Some(Duration::from_millis(100)),
        ..ManagerConfig::default()
    };
    let hosts =
        HostManager::builder(Arc::new(provider.clone())).store(store).config(mc).start().await.expect("manager");
    hosts.expect_runs(expected).await;
    let events = hosts.subscribe();
    Harness { provider, hosts, events }
}

fn store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open(dir.path().join("p.sqlite")).expect("sqlite"))
}

async fn until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn run(id: &str, command: &str, args: &[&str], ports: &[&str]) -> LaunchRequest {
    LaunchRequest {
        gang: None,
        user: None,
        run_id: id.into(),
        task_id: paceline_model::RunId::task_part(id).map(str::to_string).unwrap_or_default(),
        spec: TaskSpec {
            command: command.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            resources: Resources::new(500, 256, 10, 0).with_ports(ports.len() as u64),
            ports: ports.iter().map(|s| s.to_string()).collect(),
            ..TaskSpec::default()
        },
        env: Default::default(),
        secrets: Vec::new(),
        gpu: Default::default(),
    }
}

trait WithPorts {
    fn with_ports(self, n: u64) -> Self;
}
impl WithPorts for Resources {
    fn with_ports(mut self, n: u64) -> Self {
        self.ports = n;
        self
    }
}

impl Harness {
    async fn launch_on(&self, host: &str, runs: Vec<LaunchRequest>) {
        let mut req = LeaseRequest::new(Resources::ZERO, 1, 10_000);
        req.only_hosts = vec![host.to_string()];
        let lease = self.hosts.lease(&req).expect("lease");
        assert_eq!(lease.hosts.len(), 1, "{host} leased");
        self.hosts.launch(lease.id, host, runs).await.expect("launch");
        let _ = self.hosts.release(lease.id);
    }

    /// The next run update, not acknowledged.
    async fn next_update(&mut self, secs: u64) -> RunUpdate {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.checked_duration_since(Instant::now()).expect("an update in time");
            match tokio::time::timeout(left, self.events.recv()).await {
                Ok(Some(HostEvent::Run(u))) => return u,
                Ok(Some(_)) => continue,
                _ => panic!("no update within {secs} s"),
            }
        }
    }

    /// Updates of `run_id` until it ends, each acknowledged.
    async fn until_end(&mut self, run_id: &str, secs: u64) -> Vec<RunUpdate> {
        let mut seen = Vec::new();
        loop {
            let u = self.next_update(secs).await;
            self.hosts.acknowledge(&u.run_id, u.seq).await;
            let end = u.run_id == run_id && u.state.is_terminal();
            seen.push(u);
            if end {
                return seen;
            }
        }
    }

    fn reachable(&self, host: &str) -> bool {
        self.hosts.host(host).is_some_and(|h| h.reachable)
    }
}

async fn fake_with(agents: &[&str]) -> FakeMaster {
    let fake = FakeMaster::start(fake_config()).await.expect("fake master");
    for a in agents {
        fake.add_agent(AgentSpec::new(a, 4.0, 8192.0).attribute("zone", "z1"));
    }
    fake
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offers_become_inventory_and_the_framework_id_is_kept() {
    for encoding in [Encoding::Protobuf, Encoding::Json] {
        let dir = tempfile::tempdir().expect("dir");
        let store = store(&dir);
        let fake = fake_with(&["h1", "h2"]).await;
        let h = harness(config(vec![fake.url()], encoding), store.clone(), vec![]).await;
        until("both hosts registered", 10, || h.reachable("h1") && h.reachable("h2")).await;
        let info = h.hosts.host("h1").expect("h1");
        assert_eq!(
            info.view.total,
            Resources { cpu_millis: 4000, memory_mib: 8192, disk_mib: 10_000, gpu_milli: 0, ports: 100 }
        );
        assert_eq!(info.view.attributes.get("zone").map(String::as_str), Some("z1"));
        assert_eq!(info.agent_id, fake.agent_id("h1"));
        let id = fake.framework_id().expect("subscribed");
        assert_eq!(store.get_provider_id(STORE_KEY).await.expect("store"), Some(id.clone()), "{encoding:?}");
        assert_eq!(h.provider.framework_id(), Some(id));
        // Implicit reconciliation right after SUBSCRIBED.
        until("a RECONCILE", 5, || fake.count_calls("RECONCILE") >= 1).await;
        // Hosts stay reachable on the provider's heartbeats.
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        assert!(h.reachable("h1"), "{encoding:?}");
        h.provider.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_accepts_the_offer_and_updates_are_acknowledged_only_once_handled() {
    let dir = tempfile::tempdir().expect("dir");
    let fake = fake_with(&["h1"]).await;
    let mut h = harness(config(vec![fake.url()], Encoding::Protobuf), store(&dir), vec![]).await;
    until("h1", 10, || h.reachable("h1")).await;
    h.launch_on("h1", vec![run("job-0-1", "sleep", &["0.5"], &["http"])]).await;

    let first = h.next_update(10).await;
    assert_eq!((first.run_id.as_str(), first.seq, first.state), ("job-0-1", 1, RunState::Starting));
    assert_eq!(first.ports.get("http"), Some(&31_000), "the port carved from the offer");
    // Not handled yet: the master keeps re-sending it, and sends nothing after it.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(fake.unacked_updates() >= 1);
    assert_eq!(fake.count_calls("ACKNOWLEDGE"), 0, "nothing acknowledged before the subscriber did");
    h.hosts.acknowledge("job-0-1", 1).await;
    let rest = h.until_end("job-0-1", 10).await;
    let states: Vec<(u64, RunState)> = rest.iter().filter(|u| u.seq > 1).map(|u| (u.seq, u.state)).collect();
    assert_eq!(states, vec![(2, RunState::Running), (3, RunState::Succeeded)], "{rest:?}");
    assert_eq!(rest.last().and_then(|u| u.exit_code), Some(0));
    until("every update acknowledged", 5, || fake.unacked_updates() == 0).await;
    // Each of the three updates acknowledged. A copy the master resent while
    // the first acknowledgement was on its way is acknowledged again (as
    // Mesos expects of a duplicate), so the calls may number more than three.
    let acked: std::collections::BTreeSet<Vec<u8>> = fake
        .calls()
        .into_iter()
        .filter(|c| c.kind == "ACKNOWLEDGE")
        .filter_map(|c| c.call.acknowledge.map(|a| a.uuid))
        .collect();
    assert_eq!(acked.len(), 3, "three distinct updates acknowledged");

    // The ACCEPT launched one task with resources shrunk to the run's.
    let accept = fake.calls().into_iter().find(|c| c.kind == "ACCEPT").expect("ACCEPT").call;
    let a = accept.accept.expect("accept");
    let task = &a.operations[0].launch.as_ref().expect("launch").task_infos[0];
    let amount = |n: &str| {
        task.resources.iter().filter(|r| r.name == n).filter_map(|r| r.scalar.as_ref()).map(|s| s.value).sum::<f64>()
    };
    assert_eq!((amount("cpus"), amount("mem"), amount("disk")), (0.5, 256.0, 10.0));
    assert_eq!(fake.task_script("job-0-1").as_deref(), Some("sleep 0.5"));
    let env = task.command.as_ref().and_then(|c| c.environment.as_ref()).expect("env");
    assert!(env.variables.iter().any(|v| v.name == "PORT_HTTP" && v.value.as_deref() == Some("31000")));
    // The host's allocation is free again and the rest was offered anew.
    until("resources freed", 5, || h.hosts.host("h1").is_some_and(|i| i.view.allocated == Resources::ZERO)).await;
    until("offered again", 5, || h.provider.held_offers() == 1).await;
    h.provider.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_tasks_invalid_launches_and_kills_map_to_run_states() {
    let dir = tempfile::tempdir().expect("dir");
    let fake = fake_with(&["h1"]).await;
    let mut h = harness(config(vec![fake.url()], Encoding::Json), store(&dir), vec![]).await;
    until("h1", 10, || h.reachable("h1")).await;
    h.launch_on("h1", vec![run("bad-0-1", "exit", &["3"], &[])]).await;
    let seen = h.until_end("bad-0-1", 10).await;
    let end = seen.last().expect("end");
    assert_eq!((end.state, end.exit_code, end.reason.as_str()), (RunState::Failed, Some(3), "EXITED"));

    until("offered again", 5, || h.provider.held_offers() == 1).await;
    h.launch_on("h1", vec![run("svc-0-1", "serve", &[], &[])]).await;
    let u = h.next_update(10).await;
    h.hosts.acknowledge(&u.run_id, u.seq).await;
    let u = h.next_update(10).await;
    h.hosts.acknowledge(&u.run_id, u.seq).await;
    assert_eq!(u.state, RunState::Running);
    h.hosts.kill_with_grace("svc-0-1", Some(Duration::from_millis(100))).await.expect("kill");
    let seen = h.until_end("svc-0-1", 10).await;
    assert_eq!(
        seen.last().map(|u| (u.state, u.reason.as_str())),
        Some((RunState::Killed, "KILLED_BY_REQUEST")),
        "{seen:?}"
    );
    h.provider.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescinded_offers_are_dropped_and_a_launch_waits_for_a_new_one() {
    let dir = tempfile::tempdir().expect("dir");
    let fake = fake_with(&["h1"]).await;
    let mut h = harness(config(vec![fake.url()], Encoding::Protobuf), store(&dir), vec![]).await;
    until("h1", 10, || h.reachable("h1") && h.provider.held_offers() == 1).await;
    fake.rescind_all(Duration::from_secs(30));
    until("offer dropped", 5, || h.provider.held_offers() == 0).await;
    // The host stays in the inventory; a launch revives offers and waits.
    h.launch_on("h1", vec![run("w-0-1", "serve", &[], &[])]).await;
    let u = h.next_update(10).await;
    assert_eq!((u.run_id.as_str(), u.state), ("w-0-1", RunState::Starting));
    assert!(fake.count_calls("REVIVE") >= 1);
    h.provider.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_agent_loses_its_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let fake = fake_with(&["h1", "h2"]).await;
    let mut h = harness(config(vec![fake.url()], Encoding::Protobuf), store(&dir), vec![]).await;
    until("hosts", 10, || h.reachable("h1") && h.reachable("h2")).await;
    h.launch_on("h1", vec![run("a-0-1", "serve", &[], &[])]).await;
    for _ in 0..2 {
        let u = h.next_update(10).await;
        h.hosts.acknowledge(&u.run_id, u.seq).await;
    }
    fake.fail_agent(&fake.agent_id("h1").expect("agent"));
    let seen = h.until_end("a-0-1", 10).await;
    let end = seen.last().expect("end");
    assert_eq!((end.state, end.reason.as_str()), (RunState::Lost, "AGENT_FAILED"));
    until("h1 unreachable", 5, || !h.reachable("h1")).await;
    assert!(h.reachable("h2"));
    h.provider.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_keeps_the_framework_reconciles_and_launches_nothing_twice() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir);
    let fake = fake_with(&["h1"]).await;
    let mut a = harness(config(vec![fake.url()], Encoding::Protobuf), store.clone(), vec![]).await;
    until("h1", 10, || a.reachable("h1")).await;
    a.launch_on("h1", vec![run("svc-0-1", "serve", &[], &[])]).await;
    for _ in 0..2 {
        let u = a.next_update(10).await;
        a.hosts.acknowledge(&u.run_id, u.seq).await;
    }
    let id = fake.framework_id().expect("id");

    // The stream drops: same framework, a new stream, explicit reconciliation.
    let stream = fake.stream_id();
    fake.close_stream();
    until("resubscribed", 10, || fake.subscriptions() == 2 && a.provider.is_subscribed()).await;
    assert_ne!(fake.stream_id(), stream);
    assert_eq!(fake.framework_id().as_deref(), Some(id.as_str()));
    let resub = fake.calls().into_iter().filter(|c| c.kind == "SUBSCRIBE").nth(1).expect("second SUBSCRIBE").call;
    assert_eq!(resub.framework_id.as_ref().map(|f| f.value.as_str()), Some(id.as_str()), "Call.framework_id");
    let info = resub.subscribe.expect("subscribe").framework_info;
    assert_eq!(info.id.as_ref().map(|f| f.value.as_str()), Some(id.as_str()), "FrameworkInfo.id");
    assert!(info.failover_timeout.is_some_and(|t| t > 0.0));
    let explicit = |fake: &FakeMaster| {
        fake.calls()
            .iter()
            .filter(|c| c.kind == "RECONCILE" && c.call.reconcile.as_ref().is_some_and(|r| !r.tasks.is_empty()))
            .count()
    };
    until("explicit reconciliation", 5, || explicit(&fake) >= 1).await;

    // A second Paceline (a restarted control plane) takes over with the stored id.
    let expected = vec![ExpectedRun {
        host: "h1".into(),
        run_id: "svc-0-1".into(),
        task_id: "svc-0".into(),
        resources: Resources::new(500, 256, 10, 0),
        gpu: Default::default(),
        last_seq: 2,
    }];
    let mut b = harness(config(vec![fake.url()], Encoding::Protobuf), store.clone(), expected).await;
    until("b subscribed", 10, || b.provider.is_subscribed()).await;
    assert_eq!(b.provider.framework_id().as_deref(), Some(id.as_str()), "the stored framework id");
    // The old instance hears ERROR and stays away (no ping-pong).
    until("a stopped", 5, || !a.provider.is_subscribed()).await;
    until("h1 on b", 10, || b.reachable("h1")).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(fake.subscriptions(), 3, "a did not resubscribe after failing over");
    let info = b.hosts.host("h1").expect("h1");
    assert_eq!(info.runs, vec!["svc-0-1".to_string()], "the run is adopted, not lost");
    // What b hears of the run (reconciliation answers, a re-sent update) is
    // handled and acknowledged like any update; none says it was lost.
    while let Some(ev) = b.events.try_recv() {
        if let HostEvent::Run(u) = ev {
            assert_ne!(u.state, RunState::Lost, "{u:?}");
            b.hosts.acknowledge(&u.run_id, u.seq).await;
        }
    }
    assert_eq!(fake.launches("svc-0-1"), 1, "launched once");
    assert_eq!(fake.count_calls("ACCEPT"), 1);
    // b still controls it.
    b.hosts.kill_with_grace("svc-0-1", Some(Duration::ZERO)).await.expect("kill");
    let seen = b.until_end("svc-0-1", 10).await;
    assert_eq!(seen.last().map(|u| u.state), Some(RunState::Killed));
    a.provider.shutdown();
    b.provider.shutdown();
    drop(a.events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_from_the_master_restarts_the_stream_without_harm() {
    let dir = tempfile::tempdir().expect("dir");
    let fake = fake_with(&["h1"]).await;
    let h = harness(config(vec![fake.url()], Encoding::Json), store(&dir), vec![]).await;
    until("h1", 10, || h.reachable("h1")).await;
    let bad: &[(&str, &[u8], bool)] = &[
        ("truncated record", b"100\n{\"type\":\"HEART", true),
        ("zero-length record", b"0\n", false),
        ("bad length", b"abc\n{}", false),
        ("malformed JSON", b"12\n{not json!!", false),
        ("unknown event type", b"23\n{\"type\":\"SOMETHING_NEW\"}", false),
        ("event without payload", b"17\n{\"type\":\"OFFERS\"}", false),
    ];
    for (i, (what, bytes, close)) in bad.iter().enumerate() {
        let before = fake.subscriptions();
        fake.inject_raw(bytes, *close);
        until(what, 10, || fake.subscriptions() > before && h.provider.is_subscribed()).await;
        assert_eq!(fake.subscriptions() as usize, i + 2, "{what}");
    }
    // Silence: no heartbeats for 5× the interval → resubscribe.
    let before = fake.subscriptions();
    fake.pause_heartbeats(true);
    until("watchdog resubscription", 10, || fake.subscriptions() > before).await;
    fake.pause_heartbeats(false);
    until("subscribed", 10, || h.provider.is_subscribed()).await;
    assert!(h.reachable("h1"), "the host never went away");
    h.provider.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_leader_redirects_to_the_leader() {
    let dir = tempfile::tempdir().expect("dir");
    let leader = fake_with(&["h1"]).await;
    let follower = FakeMaster::start(fake_config()).await.expect("fake");
    follower.redirect_to(Some(leader.url()));
    let mut h = harness(config(vec![follower.url()], Encoding::Protobuf), store(&dir), vec![]).await;
    until("h1 via the leader", 10, || h.reachable("h1")).await;
    assert_eq!(leader.subscriptions(), 1);
    assert_eq!(follower.subscriptions(), 0);
    assert!(follower.calls().is_empty() || follower.calls().iter().all(|c| c.status == 307));
    h.launch_on("h1", vec![run("r-0-1", "true", &[], &[])]).await;
    let seen = h.until_end("r-0-1", 10).await;
    assert_eq!(seen.last().map(|u| u.state), Some(RunState::Succeeded));
    h.provider.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inverse_offer_drains_the_host_and_is_accepted_once_empty() {
    let dir = tempfile::tempdir().expect("dir");
    let fake = fake_with(&["h1"]).await;
    let mut h = harness(config(vec![fake.url()], Encoding::Protobuf), store(&dir), vec![]).await;
    until("h1", 10, || h.reachable("h1")).await;
    h.launch_on("h1", vec![run("m-0-1", "serve", &[], &[])]).await;
    for _ in 0..2 {
        let u = h.next_update(10).await;
        h.hosts.acknowledge(&u.run_id, u.seq).await;
    }
    let io = fake.schedule_maintenance(&fake.agent_id("h1").expect("agent"));
    until("draining", 5, || h.hosts.host("h1").is_some_and(|i| i.state == MaintenanceState::Draining)).await;
    assert!(fake.inverse_offer_responses().is_empty(), "not while our run is there");
    h.hosts.kill("m-0-1").await.expect("kill");
    h.until_end("m-0-1", 15).await;
    until("drained", 5, || h.hosts.host("h1").is_some_and(|i| i.state == MaintenanceState::Drained)).await;
    until("inverse offer accepted", 5, || fake.inverse_offer_responses() == vec![(io.clone(), true)]).await;
    h.provider.shutdown();
}

/// The exact bodies the provider sends, in JSON and protobuf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_call_bodies() {
    let dir = tempfile::tempdir().expect("dir");
    let fake = fake_with(&["h1"]).await;
    let mut cfg = config(vec![fake.url()], Encoding::Json);
    cfg.failover_timeout = Duration::from_secs(3600);
    let h = harness(cfg, store(&dir), vec![]).await;
    until("h1", 10, || h.reachable("h1")).await;
    let calls = fake.calls();
    let sub = calls.iter().find(|c| c.kind == "SUBSCRIBE").expect("subscribe");
    assert_eq!(sub.content_type, "application/json");
    assert_eq!(
        std::str::from_utf8(&sub.body).expect("utf8"),
        concat!(
            r#"{"type":"SUBSCRIBE","subscribe":{"framework_info":{"user":"root","name":"paceline-test","failover_timeout":3600.0,"#,
            r#""checkpoint":true,"roles":["*"],"capabilities":[{"type":"MULTI_ROLE"},{"type":"PARTITION_AWARE"},"#,
            r#"{"type":"GPU_RESOURCES"},{"type":"TASK_KILLING_STATE"}]}}}"#
        )
    );
    let rec = calls.iter().find(|c| c.kind == "RECONCILE").expect("reconcile");
    let fid = fake.framework_id().expect("fid");
    assert_eq!(
        std::str::from_utf8(&rec.body).expect("utf8"),
        format!(r#"{{"framework_id":{{"value":"{fid}"}},"type":"RECONCILE","reconcile":{{}}}}"#)
    );
    h.provider.shutdown();

    // Protobuf: field numbers and wire types as Mesos has them.
    use prost::Message;
    let ack = mesos::scheduler::Call {
        framework_id: Some(mesos::FrameworkId { value: "f".into() }),
        r#type: Some(mesos::scheduler::call::Type::Acknowledge as i32),
        acknowledge: Some(mesos::scheduler::call::Acknowledge {
            agent_id: mesos::AgentId { value: "a".into() },
            task_id: mesos::TaskId { value: "t".into() },
            uuid: vec![0xAB],
        }),
        ..Default::default()
    };
    let hex: String = ack.encode_to_vec().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, "0a030a01661008420d0a030a016112030a01741a01ab");
    let json =
        String::from_utf8(paceline_hostmgr::mesos::encode_call(&ack, Encoding::Json).expect("json")).expect("utf8");
    assert_eq!(
        json,
        r#"{"framework_id":{"value":"f"},"type":"ACKNOWLEDGE","acknowledge":{"agent_id":{"value":"a"},"task_id":{"value":"t"},"uuid":"qw=="}}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_offers_are_declined_idle_suppresses_and_a_launch_revives() {
    let dir = tempfile::tempdir().expect("dir");
    let fake = fake_with(&["h1"]).await;
    let mut cfg = config(vec![fake.url()], Encoding::Protobuf);
    cfg.offer_hold = Duration::from_millis(300);
    cfg.decline_refuse = Duration::from_secs(30);
    cfg.idle_suppress = Some(Duration::from_millis(800));
    let mut h = harness(cfg, store(&dir), vec![]).await;
    until("h1", 10, || h.reachable("h1")).await;
    until("a DECLINE", 5, || fake.count_calls("DECLINE") >= 1).await;
    let decline =
        fake.calls().into_iter().find(|c| c.kind == "DECLINE").expect("decline").call.decline.expect("decline");
    assert_eq!(decline.filters.and_then(|f| f.refuse_seconds), Some(30.0));
    until("suppressed", 5, || fake.suppressed()).await;
    assert_eq!(h.provider.held_offers(), 0);
    // Demand: the launch revives offers (clearing the 30 s filter) and waits for one.
    h.launch_on("h1", vec![run("late-0-1", "true", &[], &[])]).await;
    let seen = h.until_end("late-0-1", 10).await;
    assert_eq!(seen.last().map(|u| u.state), Some(RunState::Succeeded));
    assert!(fake.count_calls("REVIVE") >= 1);
    assert!(h.reachable("h1"));
    h.provider.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offer_bench_runs() {
    let fake = FakeMaster::start(fake_config()).await.expect("fake");
    let cfg = config(vec![fake.url()], Encoding::Protobuf);
    let n = 500;
    let f = paceline_hostmgr::bench::mesos_offers(cfg, n, || async {
        fake.add_agents((0..n).map(|i| AgentSpec::new(&format!("b{i}"), 8.0, 8192.0)));
    })
    .await
    .expect("bench");
    assert_eq!((f.hosts, f.offers), (n, n as u64));
    assert!(f.offers_per_sec > 0.0);
}

/// A real ZooKeeper: `PACELINE_ZOOKEEPER` (scripts/test starts one), or one
/// started here by the project's script and stopped when the test ends.
struct Zk {
    addr: String,
    dir: Option<tempfile::TempDir>,
}

impl Zk {
    fn get() -> Zk {
        if let Ok(addr) = std::env::var("PACELINE_ZOOKEEPER")
            && !addr.trim().is_empty()
        {
            return Zk { addr, dir: None };
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let dir = tempfile::tempdir().expect("dir");
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/zookeeper/zookeeper.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg("start")
            .arg(dir.path())
            .arg(port.to_string())
            .output()
            .expect("script");
        assert!(out.status.success(), "zookeeper.sh start: {}", String::from_utf8_lossy(&out.stderr));
        Zk { addr: format!("127.0.0.1:{port}"), dir: Some(dir) }
    }
}

impl Drop for Zk {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/zookeeper/zookeeper.sh");
            let _ = std::process::Command::new("bash").arg(&script).arg("stop").arg(dir.path()).output();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_url_finds_the_leading_master() {
    use zookeeper_client as zkc;
    let zk = Zk::get();
    let fake = fake_with(&["h1"]).await;
    let client = zkc::Client::connect(&zk.addr).await.expect("zookeeper");
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos();
    let group = format!("/mesos-test-{nanos}");
    let persistent = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
    client.create(&group, b"", &persistent).await.expect("group");
    let contender = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    let prefix = format!("{group}/json.info_");
    // Lowest: not a MasterInfo (skipped with a warning); then the leader; then
    // a standby that nothing answers at; and a node of another kind.
    client.create(&prefix, b"garbage", &contender).await.expect("malformed node");
    let port =
        fake.url().rsplit(':').next().and_then(|p| p.trim_end_matches('/').parse::<u32>().ok()).expect("fake port");
    let leader =
        format!(r#"{{"address":{{"hostname":"127.0.0.1","ip":"127.0.0.1","port":{port}}},"id":"m1","port":{port}}}"#);
    client.create(&prefix, leader.as_bytes(), &contender).await.expect("leader node");
    client.create(&prefix, br#"{"address":{"ip":"127.0.0.1","port":1}}"#, &contender).await.expect("standby node");
    client.create(&format!("{group}/log_replicas"), b"", &persistent).await.expect("other node");

    let dir = tempfile::tempdir().expect("dir");
    let h = harness(config(vec![format!("zk://{}{group}", zk.addr)], Encoding::Protobuf), store(&dir), vec![]).await;
    until("subscribed through ZooKeeper", 20, || h.provider.is_subscribed() && h.reachable("h1")).await;
    assert_eq!(fake.subscriptions(), 1);
    h.provider.shutdown();

    // No master registered: the provider keeps retrying and never subscribes.
    let empty = format!("/mesos-empty-{nanos}");
    client.create(&empty, b"", &persistent).await.expect("empty group");
    let dir2 = tempfile::tempdir().expect("dir");
    let h2 = harness(config(vec![format!("zk://{}{empty}", zk.addr)], Encoding::Protobuf), store(&dir2), vec![]).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!h2.provider.is_subscribed());
    assert_eq!(fake.subscriptions(), 1, "nothing reached the master");
    h2.provider.shutdown();
}
