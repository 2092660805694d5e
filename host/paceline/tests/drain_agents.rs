//! Draining a host that runs a stateless job's instances, with every role
//! joined (`paceline::cluster`) over real `paceline agent` processes.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline::cluster::{AssembleConfig, Cluster};
use paceline_hostmgr::{AgentConfig, AgentProvider, HostManager, ManagerConfig};
use paceline_model::Resources;
use paceline_model::host::MaintenanceState;
use paceline_model::job::{JobConfig, JobKind, Sla};
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::task::{TaskSpec, TaskState};
use paceline_plugin::{MemoryStore, PluginRuntime, Registry, RuntimeConfig};
use paceline_storage::Store;
use paceline_storage::sqlite::SqliteStore;

mod common;

/// An agent process and its data dir; on drop the agent is stopped and the
/// task processes it started (which outlive it by design) are killed, so
/// that the test leaves nothing running (`scripts/leftovers`).
struct Agent(Child, std::path::PathBuf);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).stderr(Stdio::null()).status();
        let _ = self.0.wait();
        let Ok(entries) = std::fs::read_dir("/proc") else { return };
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            if std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(&self.1)) {
                let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).stderr(Stdio::null()).status();
            }
        }
    }
}

/// A `paceline agent` dialling `manager`, joining the CA in `dir/pki`.
fn agent(manager: &str, dir: &Path, name: &str) -> Agent {
    let data = dir.join(name);
    std::fs::create_dir_all(&data).expect("dir");
    let config = data.join("agent.yaml");
    std::fs::write(&config, "heartbeat_interval_ms: 200\nreconnect_initial_ms: 50\nreconnect_max_ms: 300\n")
        .expect("config");
    let log = std::fs::File::create(data.join("agent.log")).expect("log");
    let child = Command::new(env!("CARGO_BIN_EXE_paceline"))
        .args(["agent", "--config"])
        .arg(&config)
        .args(["--manager", manager, "--data-dir"])
        .arg(data.join("data"))
        .args(["--hostname", name, "--cpu-millis", "4000", "--memory-mib", "4096", "--disk-mib", "10000"])
        .args(common::join_args(&dir.join("pki")))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("agent");
    Agent(child, data)
}

/// Instances of `job` running, by host.
async fn running_by_host(cluster: &Cluster, job: &str) -> BTreeMap<String, usize> {
    let info = cluster.jobs.get(job).await.expect("job");
    info.tasks.iter().filter(|t| t.state == TaskState::Running).filter_map(|t| t.host.clone()).fold(
        BTreeMap::new(),
        |mut m, h| {
            *m.entry(h).or_default() += 1;
            m
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_a_host_moves_its_instances_within_max_unavailable_and_ends_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("paceline.sqlite")).expect("sqlite"));
    let provider = AgentProvider::with_identity(
        AgentConfig { heartbeat_interval_ms: 200, ..AgentConfig::default() },
        Arc::new(paceline_hostmgr::pki::AgentPki::open(dir.path().join("pki")).expect("agent CA")),
        Vec::new(),
    );
    let config = ManagerConfig {
        heartbeat_timeout_ms: 3_000,
        auto_down_when_drained: true,
        tick_interval: Some(Duration::from_millis(100)),
        ..ManagerConfig::default()
    };
    let hosts = HostManager::builder(Arc::new(provider.clone()))
        .store(store.clone())
        .config(config)
        .start()
        .await
        .expect("hosts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move {
        let _ = provider.serve_with_listener(listener, std::future::pending()).await;
    });
    let runtime = Arc::new(PluginRuntime::new(RuntimeConfig::default()).expect("runtime"));
    let registry = Arc::new(Registry::open(runtime, Arc::new(MemoryStore::default())).expect("registry"));
    let cluster = Cluster::assemble(
        store,
        registry,
        hosts,
        Arc::new(paceline_jobmgr::SystemClock),
        AssembleConfig { install_default_plugins: true, ..AssembleConfig::default() },
        |rm| {
            rm.set_capacity(Resources::new(1_000_000, 1 << 30, 1 << 30, 0));
            let big = PerKind { cpu: 1_000_000, memory: 1 << 30, disk: 1 << 30, gpu: 0 };
            rm.create_pool("/team", PoolSpec { reservation: big, ..PoolSpec::default() }).expect("pool");
        },
    )
    .await
    .expect("cluster");
    let loops = cluster.spawn(Duration::from_millis(50));

    // Only h1 at first, so all three instances land there.
    let _h1 = agent(&addr, dir.path(), "h1");
    let spec = JobConfig {
        name: "web".into(),
        owner: "team".into(),
        pool: "/team".into(),
        kind: JobKind::Stateless,
        instance_count: 3,
        sla: Sla { max_unavailable_instances: Some(1), ..Sla::default() },
        default_task: TaskSpec {
            command: "sleep".into(),
            args: vec!["3600".into()],
            resources: Resources::new(500, 64, 10, 0),
            kill_grace_period_secs: 1,
            ..TaskSpec::default()
        },
        ..JobConfig::default()
    };
    let wait = async |what: &str, secs: u64, f: &mut dyn FnMut(&BTreeMap<String, usize>) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let by_host = running_by_host(&cluster, "web").await;
            if f(&by_host) {
                return by_host;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}: {by_host:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.hosts.host("h1").is_none_or(|h| !h.reachable) {
        assert!(Instant::now() < deadline, "h1 registered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.jobs.create("web", spec).await.expect("create");
    wait("3 running on h1", 30, &mut |m| m.get("h1") == Some(&3)).await;

    let _h2 = agent(&addr, dir.path(), "h2");
    let _h3 = agent(&addr, dir.path(), "h3");
    let deadline = Instant::now() + Duration::from_secs(30);
    while ["h2", "h3"].iter().any(|h| cluster.hosts.host(h).is_none_or(|h| !h.reachable)) {
        assert!(Instant::now() < deadline, "h2 and h3 registered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.hosts.drain("h1").await.expect("drain");
    // Never more than one instance down while they move.
    let mut fewest = 3;
    let moved = wait("all moved off h1", 60, &mut |m| {
        fewest = fewest.min(m.values().sum::<usize>());
        !m.contains_key("h1") && m.values().sum::<usize>() == 3
    })
    .await;
    assert!(fewest >= 2, "at most one instance unavailable at a time (fewest running seen: {fewest})");
    assert_eq!(moved.values().sum::<usize>(), 3, "{moved:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster.hosts.host("h1").is_none_or(|h| h.state != MaintenanceState::Down) {
        assert!(Instant::now() < deadline, "h1 went DOWN: {:?}", cluster.hosts.host("h1").map(|h| h.state));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.jobs.kill("web", None).await.expect("kill");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !running_by_host(&cluster, "web").await.is_empty() {
        assert!(Instant::now() < deadline, "the job stopped");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loops.abort();
    server.abort();
}
