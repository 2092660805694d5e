//! The whole pipeline over the `mesos` provider: job manager, resource
//! manager, placement (Wasm policies) and host manager joined by
//! `paceline_server::cluster`, with Paceline as a framework of the fake Mesos
//! master (`paceline-mesos-fake`), whose simulated agents run tasks from
//! their command line (`sleep S`, `exit N`; anything else runs until killed).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline_hostmgr::{ManagerConfig, MesosConfig, MesosProvider};
use paceline_mesos_fake::{AgentSpec, FakeConfig, FakeMaster};
use paceline_model::Resources;
use paceline_model::host::MaintenanceState;
use paceline_model::job::{JobConfig, JobKind, JobState, Sla};
use paceline_model::task::{RestartPolicy, TaskSpec, TaskState};
use paceline_server::cluster::Cluster;
use paceline_storage::Store;
use paceline_storage::sqlite::SqliteStore;

use crate::provider_cluster;

struct MesosCluster {
    cluster: Arc<Cluster>,
    fake: FakeMaster,
    provider: MesosProvider,
    loops: tokio::task::JoinHandle<()>,
}

impl Drop for MesosCluster {
    fn drop(&mut self) {
        self.loops.abort();
        self.provider.shutdown();
    }
}

async fn start(dir: &std::path::Path, agents: &[&str]) -> MesosCluster {
    start_with(dir, agents, |_| Vec::new()).await
}

/// Like [`start`]; `front` names masters tried before the fake (e.g. a
/// non-leader that redirects to it).
async fn start_with(
    dir: &std::path::Path,
    agents: &[&str],
    front: impl FnOnce(&FakeMaster) -> Vec<String>,
) -> MesosCluster {
    let fake = FakeMaster::start(FakeConfig {
        heartbeat_interval: Duration::from_millis(300),
        status_retry: Duration::from_millis(300),
        allocation_interval: Duration::from_millis(20),
        partition_aware_default: true,
    })
    .await
    .expect("fake master");
    for a in agents {
        fake.add_agent(AgentSpec::new(a, 4.0, 4096.0).attribute("zone", "a"));
    }
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.join("paceline.sqlite")).expect("sqlite"));
    let provider = MesosProvider::new(
        MesosConfig {
            masters: front(&fake).into_iter().chain([fake.url()]).collect(),
            framework_name: "paceline-e2e".into(),
            registration_delay: Duration::from_millis(100),
            host_heartbeat: Duration::from_millis(200),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
            idle_suppress: None,
            launch_offer_wait: Duration::from_secs(2),
            ..MesosConfig::default()
        },
        Some(store.clone()),
    );
    let config = ManagerConfig {
        heartbeat_timeout_ms: 3_000,
        auto_down_when_drained: false,
        tick_interval: Some(Duration::from_millis(100)),
        ..ManagerConfig::default()
    };
    let (cluster, loops) = provider_cluster::assemble(Arc::new(provider.clone()), store, config).await;
    let c = MesosCluster { cluster, fake, provider, loops };
    c.wait("agents registered", 30, async |c| {
        agents.iter().all(|a| c.cluster.hosts.host(a).is_some_and(|h| h.reachable))
    })
    .await;
    c
}

impl MesosCluster {
    async fn wait(&self, what: &str, secs: u64, mut f: impl AsyncFnMut(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !f(self).await {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn state(&self, job: &str) -> JobState {
        self.cluster.jobs.get(job).await.expect("job").runtime.state
    }

    async fn running_by_host(&self, job: &str) -> BTreeMap<String, usize> {
        let info = self.cluster.jobs.get(job).await.expect("job");
        info.tasks.iter().filter(|t| t.state == TaskState::Running).filter_map(|t| t.host.clone()).fold(
            BTreeMap::new(),
            |mut m, h| {
                *m.entry(h).or_default() += 1;
                m
            },
        )
    }
}

fn job(kind: JobKind, n: u32, command: &str, args: &[&str]) -> JobConfig {
    JobConfig {
        name: "job".into(),
        owner: "team".into(),
        pool: "/team".into(),
        kind,
        instance_count: n,
        default_task: TaskSpec {
            command: command.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            resources: Resources::new(500, 256, 10, 0),
            kill_grace_period_secs: 0,
            ..TaskSpec::default()
        },
        ..JobConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_job_runs_to_success_on_mesos_agents() {
    let dir = tempfile::tempdir().expect("dir");
    let c = start(dir.path(), &["m1", "m2"]).await;
    c.cluster.jobs.create("batch", job(JobKind::Batch, 4, "sleep", &["0.3"])).await.expect("create");
    c.wait("the job ended", 60, async |c| c.state("batch").await.is_terminal()).await;
    let info = c.cluster.jobs.get("batch").await.expect("job");
    assert_eq!(info.runtime.state, JobState::Succeeded);
    assert!(info.tasks.iter().all(|t| t.state == TaskState::Succeeded && t.run == 1), "{:?}", info.tasks);
    assert!(info.tasks.iter().all(|t| t.host.as_deref().is_some_and(|h| h == "m1" || h == "m2")));
    for (i, t) in info.tasks.iter().enumerate() {
        let run_id = format!("batch-{i}-{}", t.run);
        assert_eq!(c.fake.launches(&run_id), 1, "{run_id} launched once");
    }
    c.wait("updates acknowledged", 10, async |c| c.fake.unacked_updates() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_job_spends_its_budget_and_fails() {
    let dir = tempfile::tempdir().expect("dir");
    let c = start(dir.path(), &["m1"]).await;
    let mut spec = job(JobKind::Batch, 2, "exit", &["3"]);
    spec.default_task.restart_policy =
        RestartPolicy { on_failure: true, max_restarts: Some(1), ..RestartPolicy::default() };
    c.cluster.jobs.create("doomed", spec).await.expect("create");
    c.wait("the job ended", 60, async |c| c.state("doomed").await.is_terminal()).await;
    let info = c.cluster.jobs.get("doomed").await.expect("job");
    assert_eq!(info.runtime.state, JobState::Failed);
    assert!(info.tasks.iter().any(|t| t.failure_count >= 2), "{:?}", info.tasks);
    let events = c.cluster.jobs.task_events("doomed", 0).await.expect("events");
    assert!(events.iter().any(|e| e.to == TaskState::Failed), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_job_is_killed() {
    let dir = tempfile::tempdir().expect("dir");
    let c = start(dir.path(), &["m1", "m2"]).await;
    let mut spec = job(JobKind::Stateless, 3, "serve", &[]);
    spec.update.batch_size = 0;
    c.cluster.jobs.create("svc", spec).await.expect("create");
    c.wait("3 running", 60, async |c| c.running_by_host("svc").await.values().sum::<usize>() == 3).await;
    assert_eq!(c.fake.live_tasks().len(), 3);
    c.cluster.jobs.kill("svc", None).await.expect("kill");
    c.wait("killed", 60, async |c| c.state("svc").await == JobState::Killed).await;
    c.wait("no task left on the agents", 10, async |c| c.fake.live_tasks().is_empty()).await;
    let info = c.cluster.jobs.get("svc").await.expect("job");
    assert!(info.tasks.iter().all(|t| t.state == TaskState::Killed), "{:?}", info.tasks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesos_maintenance_drains_a_host_and_its_instances_move() {
    let dir = tempfile::tempdir().expect("dir");
    let c = start(dir.path(), &["m1"]).await;
    let mut spec = job(JobKind::Stateless, 2, "serve", &[]);
    spec.sla = Sla { max_unavailable_instances: Some(1), ..Sla::default() };
    c.cluster.jobs.create("web", spec).await.expect("create");
    c.wait("2 running on m1", 60, async |c| c.running_by_host("web").await.get("m1") == Some(&2)).await;
    c.fake.add_agent(AgentSpec::new("m2", 4.0, 4096.0).attribute("zone", "a"));
    c.wait("m2 registered", 30, async |c| c.cluster.hosts.host("m2").is_some_and(|h| h.reachable)).await;
    let io = c.fake.schedule_maintenance(&c.fake.agent_id("m1").expect("agent"));
    c.wait("moved to m2", 60, async |c| {
        let m = c.running_by_host("web").await;
        m.get("m2") == Some(&2) && !m.contains_key("m1")
    })
    .await;
    c.wait("m1 drained", 20, async |c| {
        c.cluster.hosts.host("m1").is_some_and(|h| h.state == MaintenanceState::Drained)
    })
    .await;
    c.wait("inverse offer accepted", 10, async |c| c.fake.inverse_offer_responses() == vec![(io.clone(), true)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_config_selects_the_mesos_provider() {
    let dir = tempfile::tempdir().expect("dir");
    let fake = FakeMaster::start(FakeConfig::default()).await.expect("fake");
    fake.add_agent(AgentSpec::new("s1", 2.0, 2048.0));
    let yaml = format!(
        "data_dir: {}\napi_listen: 127.0.0.1:0\nagent_listen: 127.0.0.1:0\nhosts:\n  provider: mesos\n  masters: [\"{}\"]\n  framework_name: pl\n",
        dir.path().display(),
        fake.url()
    );
    let config: paceline_server::ServerConfig = serde_yaml::from_str(&yaml).expect("config");
    assert_eq!(
        config.hosts,
        paceline_server::HostsConfig::Mesos {
            masters: vec![fake.url()],
            framework_name: "pl".into(),
            role: "*".into(),
            failover_timeout_secs: 604_800
        }
    );
    let server = paceline_server::Server::start(config).await.expect("server");
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.cluster.hosts.host("s1").is_none_or(|h| !h.reachable) {
        assert!(Instant::now() < deadline, "s1 registered through the server's mesos provider");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(server.cluster.hosts.provider_name(), "mesos");
    let id = fake.framework_id().expect("framework");
    server.shutdown().await;
    let store = SqliteStore::open(dir.path().join("paceline.db")).expect("sqlite");
    assert_eq!(store.get_provider_id("mesos").await.expect("read"), Some(id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_agent_loses_its_tasks_and_the_lifecycle_replaces_them() {
    let dir = tempfile::tempdir().expect("dir");
    let c = start(dir.path(), &["m1", "m2"]).await;
    let mut spec = job(JobKind::Stateless, 2, "serve", &[]);
    spec.update.batch_size = 0;
    c.cluster.jobs.create("web", spec).await.expect("create");
    c.wait("2 running", 60, async |c| c.running_by_host("web").await.values().sum::<usize>() == 2).await;
    let before = c.cluster.jobs.get("web").await.expect("job");
    let victim = before.tasks[0].host.clone().expect("host");
    let survivor = if victim == "m1" { "m2" } else { "m1" };
    let on_victim: Vec<usize> =
        before.tasks.iter().enumerate().filter(|(_, t)| t.host.as_deref() == Some(&victim)).map(|(i, _)| i).collect();
    c.fake.fail_agent(&c.fake.agent_id(&victim).expect("agent"));
    c.wait("both running on the survivor", 60, async |c| c.running_by_host("web").await.get(survivor) == Some(&2))
        .await;
    let after = c.cluster.jobs.get("web").await.expect("job");
    for i in on_victim {
        assert_eq!(after.tasks[i].run, before.tasks[i].run + 1, "instance {i} started a new run");
        let events = c.cluster.jobs.task_events("web", i as u32).await.expect("events");
        assert!(
            events.iter().any(|e| e.to == TaskState::Lost && e.run == before.tasks[i].run),
            "instance {i}: {events:?}"
        );
    }
    assert!(c.cluster.hosts.host(&victim).is_some_and(|h| !h.reachable), "the failed agent is unreachable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_failover_behind_a_redirect_loses_and_launches_nothing_twice() {
    let dir = tempfile::tempdir().expect("dir");
    // The first master in the list is not the leader: it redirects (307).
    let standby = FakeMaster::start(FakeConfig::default()).await.expect("standby master");
    let c = start_with(dir.path(), &["m1", "m2"], |leader| {
        standby.redirect_to(Some(leader.url()));
        vec![standby.url()]
    })
    .await;
    assert!(standby.redirects() >= 1, "the provider asked the first master and followed its redirect");
    let mut spec = job(JobKind::Stateless, 3, "serve", &[]);
    spec.update.batch_size = 0;
    c.cluster.jobs.create("svc", spec).await.expect("create");
    c.wait("3 running", 60, async |c| c.running_by_host("svc").await.values().sum::<usize>() == 3).await;
    let id = c.fake.framework_id().expect("framework id");
    let stream = c.fake.stream_id();

    // The leader's stream goes away, as when masters fail over.
    c.fake.close_stream();
    c.wait("resubscribed", 30, async |c| c.fake.subscriptions() == 2 && c.provider.is_subscribed()).await;
    assert_ne!(c.fake.stream_id(), stream, "a new stream");
    assert_eq!(c.fake.framework_id().as_deref(), Some(id.as_str()), "the same framework");
    c.wait("explicit reconciliation", 10, async |c| {
        c.fake
            .calls()
            .iter()
            .filter(|r| r.kind == "RECONCILE" && r.call.reconcile.as_ref().is_some_and(|x| !x.tasks.is_empty()))
            .count()
            >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let info = c.cluster.jobs.get("svc").await.expect("job");
    for (i, t) in info.tasks.iter().enumerate() {
        assert_eq!((t.state, t.run), (TaskState::Running, 1), "instance {i}: {t:?}");
        assert_eq!(c.fake.launches(&format!("svc-{i}-1")), 1, "instance {i} launched once");
        let events = c.cluster.jobs.task_events("svc", i as u32).await.expect("events");
        assert!(events.iter().all(|e| e.to != TaskState::Lost), "instance {i}: {events:?}");
    }
    assert_eq!(c.fake.live_tasks().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescinded_offer_sends_the_task_to_another_host() {
    let dir = tempfile::tempdir().expect("dir");
    let c = start(dir.path(), &["m1"]).await;
    // Another framework takes m1: its offer is rescinded, and none comes back
    // for a minute. The host manager still counts m1 free, so placement picks it.
    c.fake.take_agent(&c.fake.agent_id("m1").expect("m1"), Duration::from_secs(60));
    c.cluster.jobs.create("etl", job(JobKind::Batch, 1, "sleep", &["0.2"])).await.expect("create");
    c.wait("placed on m1", 30, async |c| {
        c.cluster.jobs.get("etl").await.expect("job").tasks[0].host.as_deref() == Some("m1")
    })
    .await;
    // m2 is larger: a best-fit policy would pick m1 again if it were not avoided.
    c.fake.add_agent(AgentSpec::new("m2", 8.0, 8192.0).attribute("zone", "a"));
    c.wait("the job ended", 60, async |c| c.state("etl").await.is_terminal()).await;
    let info = c.cluster.jobs.get("etl").await.expect("job");
    assert_eq!(info.runtime.state, JobState::Succeeded);
    let t = &info.tasks[0];
    assert_eq!((t.run, t.host.as_deref()), (2, Some("m2")), "the second run went elsewhere: {t:?}");
    let events = c.cluster.jobs.task_events("etl", 0).await.expect("events");
    assert!(events.iter().any(|e| (e.run == 1 || e.run == 2) && e.reason == "LAUNCH_FAILED"), "{events:?}");
    assert_eq!(c.fake.launches("etl-0-1"), 0, "nothing was launched without an offer");
    assert_eq!(c.fake.launches("etl-0-2"), 1);
}
