//! Issue 7's must-holds with real processes: `paceline agent` binaries on
//! loopback, dialling a real host manager (agent provider) in the test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline_hostmgr::{
    AgentConfig, AgentProvider, ExpectedRun, HostEvent, HostEvents, HostManager, LeaseRequest, LogStream, ManagerConfig,
};
use paceline_model::Resources;
use paceline_model::run::{LaunchRequest, RunState, RunUpdate};
use paceline_model::task::TaskSpec;
use paceline_storage::Store;
use paceline_storage::sqlite::SqliteStore;
use tokio::sync::oneshot;

mod common;

/// A host manager serving agents on a loopback port.
struct Manager {
    hosts: HostManager,
    events: HostEvents,
    addr: String,
    /// `--join … --ca-hash …` for agents of this manager's CA.
    join: Vec<String>,
    stop: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<()>,
}

async fn manager(pki: &Path, store: Arc<dyn Store>, port: u16, expected: Vec<ExpectedRun>) -> Manager {
    manager_with_timeout(pki, store, port, expected, 3_000).await
}

/// A manager whose agent port has the CA in `pki/pki` (kept across managers of one test).
async fn manager_with_timeout(
    pki: &Path,
    store: Arc<dyn Store>,
    port: u16,
    expected: Vec<ExpectedRun>,
    heartbeat_timeout_ms: u64,
) -> Manager {
    let pki = pki.join("pki");
    let provider = AgentProvider::with_identity(
        AgentConfig { heartbeat_interval_ms: 200, ..AgentConfig::default() },
        Arc::new(paceline_hostmgr::pki::AgentPki::open(&pki).expect("agent CA")),
        Vec::new(),
    );
    let join = common::join_args(&pki);
    let config = ManagerConfig {
        heartbeat_timeout_ms,
        tick_interval: Some(Duration::from_millis(100)),
        ..ManagerConfig::default()
    };
    let hosts = HostManager::builder(Arc::new(provider.clone()))
        .store(store)
        .config(config)
        .start()
        .await
        .expect("host manager");
    hosts.expect_runs(expected).await;
    let events = hosts.subscribe();
    let listener = loop {
        match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => break l,
            // The previous manager's port may take a moment to free.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let addr = format!("http://{}", listener.local_addr().expect("addr"));
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let _ = provider
            .serve_with_listener(listener, async {
                let _ = stopped.await;
            })
            .await;
    });
    Manager { hosts, events, addr, join, stop: Some(stop), server }
}

impl Manager {
    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.server.abort();
        let _ = self.server.await;
    }

    /// Waits for the next run update, acknowledging it (the consumer "handled" it).
    async fn next_update(&mut self, within: Duration) -> Option<RunUpdate> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match tokio::time::timeout(left, self.events.recv()).await {
                Ok(Some(HostEvent::Run(u))) => {
                    self.hosts.acknowledge(&u.run_id, u.seq).await;
                    return Some(u);
                }
                Ok(Some(_)) => continue,
                _ => return None,
            }
        }
    }

    /// Updates until `run_id` ends; every update acknowledged.
    async fn until_end(&mut self, run_id: &str, within: Duration, seen: &mut Vec<RunUpdate>) -> Option<RunUpdate> {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let u = self.next_update(left).await?;
            seen.push(u.clone());
            if u.run_id == run_id && u.state.is_terminal() {
                return Some(u);
            }
        }
        None
    }

    async fn wait_hosts(&self, names: &[&str], within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let up: BTreeSet<String> =
                self.hosts.hosts().into_iter().filter(|h| h.reachable).map(|h| h.view.name).collect();
            if names.iter().all(|n| up.contains(*n)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Leases `host` alone and launches `runs` there.
    async fn launch_on(&self, host: &str, runs: Vec<LaunchRequest>) -> Result<(), paceline_hostmgr::HostError> {
        let mut req = LeaseRequest::new(Resources::ZERO, 1, 10_000);
        req.only_hosts = vec![host.to_string()];
        let lease = self.hosts.lease(&req)?;
        let result = self.hosts.launch(lease.id, host, runs).await;
        let _ = self.hosts.release(lease.id);
        match result?.into_iter().next() {
            Some((_, refused)) => Err(refused),
            None => Ok(()),
        }
    }
}

/// A `paceline agent` process.
struct Agent {
    child: Child,
    dir: PathBuf,
}

fn spawn_agent(m: &Manager, dir: &Path, name: &str, cpu: u64, mem: u64, extra: &[&str]) -> Agent {
    let manager = m.addr.as_str();
    let data = dir.join(name);
    std::fs::create_dir_all(&data).expect("agent dir");
    let config = data.join("agent.yaml");
    std::fs::write(&config, "heartbeat_interval_ms: 200\nreconnect_initial_ms: 50\nreconnect_max_ms: 300\n")
        .expect("config");
    let log = std::fs::OpenOptions::new().create(true).append(true).open(data.join("agent.log")).expect("log");
    let child = Command::new(env!("CARGO_BIN_EXE_paceline"))
        .args(["agent", "--config"])
        .arg(&config)
        .args(["--manager", manager, "--data-dir"])
        .arg(data.join("data"))
        .args([
            "--hostname",
            name,
            "--cpu-millis",
            &cpu.to_string(),
            "--memory-mib",
            &mem.to_string(),
            "--disk-mib",
            "10000",
        ])
        .args(extra)
        .args(&m.join)
        .env("PACELINE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("paceline agent starts");
    Agent { child, dir: data }
}

impl Agent {
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).stderr(Stdio::null()).status();
        let _ = self.child.wait();
    }
}

fn run(run_id: &str, command: &str, args: &[&str], memory_mib: u64, grace: u32) -> LaunchRequest {
    let task_id = run_id.rsplit_once('-').map(|(t, _)| t.to_string()).unwrap_or_default();
    LaunchRequest {
        gang: None,
        user: None,
        run_id: run_id.into(),
        task_id,
        spec: TaskSpec {
            command: command.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            resources: Resources::new(100, memory_mib, 10, 0),
            kill_grace_period_secs: grace,
            ..TaskSpec::default()
        },
        env: BTreeMap::new(),
        secrets: Vec::new(),
        gpu: Default::default(),
    }
}

/// Processes whose command line is `argv` (the program compared by its
/// file name: the agent starts programs by their resolved path).
fn processes(argv: &[&str]) -> usize {
    let matches = |cmdline: Vec<u8>| {
        let parts: Vec<&[u8]> = cmdline.split(|b| *b == 0).filter(|p| !p.is_empty()).collect();
        parts.len() == argv.len()
            && parts.iter().zip(argv).enumerate().all(|(i, (p, a))| {
                if i == 0 { p.rsplit(|b| *b == b'/').next() == Some(a.as_bytes()) } else { *p == a.as_bytes() }
            })
    };
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok).filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(matches)).count()
        })
        .unwrap_or(0)
}

fn sqlite(dir: &Path) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open(dir.join("hosts.sqlite")).expect("sqlite"))
}

async fn free_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    l.local_addr().expect("addr").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_run_real_processes_to_every_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut m = manager(dir.path(), sqlite(dir.path()), free_port().await, Vec::new()).await;
    let _a = spawn_agent(&m, dir.path(), "h1", 2_000, 2_048, &[]);
    let _b = spawn_agent(&m, dir.path(), "h2", 4_000, 4_096, &["--attribute", "zone=b"]);
    let _c = spawn_agent(&m, dir.path(), "h3", 1_000, 1_024, &[]);
    assert!(m.wait_hosts(&["h1", "h2", "h3"], Duration::from_secs(30)).await, "three agents registered");
    let totals: BTreeMap<String, u64> =
        m.hosts.hosts().into_iter().map(|h| (h.view.name, h.view.total.cpu_millis)).collect();
    assert_eq!(totals, BTreeMap::from([("h1".into(), 2_000), ("h2".into(), 4_000), ("h3".into(), 1_000)]));
    let h2 = m.hosts.host("h2").expect("h2");
    assert_eq!(h2.view.attributes.get("zone").map(String::as_str), Some("b"));
    let isolation = h2.view.attributes.get("isolation").cloned().unwrap_or_default();
    println!("isolation path on this machine: {isolation}");

    let mut seen = Vec::new();
    // Output, exit 0 → SUCCEEDED, output readable through the manager.
    m.launch_on("h1", vec![run("ok-0-1", "sh", &["-c", "echo hello from paceline; exit 0"], 64, 5)])
        .await
        .expect("launch");
    let end = m.until_end("ok-0-1", Duration::from_secs(20), &mut seen).await.expect("ends");
    assert_eq!(end.state, RunState::Succeeded);
    let states: Vec<RunState> = seen.iter().filter(|u| u.run_id == "ok-0-1").map(|u| u.state).collect();
    assert_eq!(states, vec![RunState::Starting, RunState::Running, RunState::Succeeded]);
    let log = m.hosts.read_log_on("h1", "ok-0-1", LogStream::Stdout, 0, 4096).await.expect("log");
    assert_eq!(String::from_utf8_lossy(&log.data), "hello from paceline\n");

    // The agent's allocator asks for no transparent huge pages, but must
    // not turn them off for the process: that flag is inherited, and a
    // task would lose them (decision 0070; `MIMALLOC_ALLOW_THP=0` fails this).
    m.launch_on("h1", vec![run("thp-0-1", "sh", &["-c", "grep THP_enabled /proc/self/status || true"], 64, 5)])
        .await
        .expect("launch");
    let end = m.until_end("thp-0-1", Duration::from_secs(20), &mut seen).await.expect("ends");
    assert_eq!(end.state, RunState::Succeeded);
    let log = m.hosts.read_log_on("h1", "thp-0-1", LogStream::Stdout, 0, 4096).await.expect("log");
    let thp = String::from_utf8_lossy(&log.data).to_string();
    println!("a task's view of transparent huge pages: {thp:?}");
    assert!(!thp.contains("THP_enabled:\t0"), "the task inherited THP disabled: {thp:?}");

    // A failing command → FAILED with its exit code.
    m.launch_on("h2", vec![run("bad-0-1", "sh", &["-c", "exit 7"], 64, 5)]).await.expect("launch");
    let end = m.until_end("bad-0-1", Duration::from_secs(20), &mut seen).await.expect("ends");
    assert_eq!((end.state, end.exit_code), (RunState::Failed, Some(7)));

    // A long task killed → KILLED within its grace period.
    m.launch_on("h3", vec![run("long-0-1", "sleep", &["60"], 64, 3)]).await.expect("launch");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = Instant::now();
    m.hosts.kill("long-0-1").await.expect("kill");
    let end = m.until_end("long-0-1", Duration::from_secs(20), &mut seen).await.expect("ends");
    assert_eq!(end.state, RunState::Killed);
    assert!(t0.elapsed() < Duration::from_secs(3), "ended within the grace: {:?}", t0.elapsed());

    // A task that ignores SIGTERM → SIGKILL after the grace.
    m.launch_on("h1", vec![run("stubborn-0-1", "sh", &["-c", "trap '' TERM; while true; do sleep 1; done"], 64, 1)])
        .await
        .expect("launch");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = Instant::now();
    m.hosts.kill("stubborn-0-1").await.expect("kill");
    let end = m.until_end("stubborn-0-1", Duration::from_secs(20), &mut seen).await.expect("ends");
    assert_eq!(end.state, RunState::Killed);
    assert!(t0.elapsed() >= Duration::from_secs(1), "waited the grace: {:?}", t0.elapsed());
    assert_eq!(end.signal, Some(9), "SIGKILL ended it: {end:?}");

    // Over its memory limit → stopped.
    let hog =
        "import sys\nblocks = [bytearray(16 * 1024 * 1024) for _ in range(32)]\nprint('allocated', len(blocks))\n";
    m.launch_on("h2", vec![run("hog-0-1", "python3", &["-c", hog], 64, 1)]).await.expect("launch");
    let end = m.until_end("hog-0-1", Duration::from_secs(30), &mut seen).await.expect("ends");
    assert_eq!(end.state, RunState::Failed, "stopped over its 64 MiB limit ({isolation}): {end:?}");
    let out = m.hosts.read_log_on("h2", "hog-0-1", LogStream::Stdout, 0, 4096).await.expect("log");
    assert!(!String::from_utf8_lossy(&out.data).contains("allocated"), "it never got its 512 MiB");

    // Each run's updates arrived once each, in order.
    let mut per_run: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for u in &seen {
        per_run.entry(u.run_id.as_str()).or_default().push(u.seq);
    }
    for (run, seqs) in per_run {
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{run}: in order, no duplicates: {seqs:?}");
    }
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_and_restarted_loses_no_update_and_repeats_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The agent is away 3 s, well within the heartbeat timeout: its runs are
    // not declared lost, so their real ends must come through.
    let mut m = manager_with_timeout(dir.path(), sqlite(dir.path()), free_port().await, Vec::new(), 15_000).await;
    let mut agent = spawn_agent(&m, dir.path(), "h1", 2_000, 2_048, &[]);
    assert!(m.wait_hosts(&["h1"], Duration::from_secs(30)).await);
    let mut seen = Vec::new();
    // One run that outlives the restart, one that ends while the agent is down.
    m.launch_on(
        "h1",
        vec![run("stay-0-1", "sleep", &["60"], 64, 1), run("ends-0-1", "sh", &["-c", "sleep 2; exit 4"], 64, 1)],
    )
    .await
    .expect("launch");
    // Both running (STARTING and RUNNING of each) before the kill.
    while seen.iter().filter(|u: &&RunUpdate| u.state == RunState::Running).count() < 2 {
        seen.push(m.next_update(Duration::from_secs(20)).await.expect("update"));
    }
    agent.kill9();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _agent = spawn_agent(&m, dir.path(), "h1", 2_000, 2_048, &[]);
    // The run that ended while the agent was down reports its real end.
    let end = m.until_end("ends-0-1", Duration::from_secs(30), &mut seen).await.expect("its end arrives");
    assert_eq!((end.state, end.exit_code), (RunState::Failed, Some(4)), "{end:?}");
    // The one still running was found again: killing it works and ends it KILLED.
    assert!(m.hosts.host("h1").is_some_and(|h| h.runs.contains(&"stay-0-1".to_string())), "re-adopted");
    m.hosts.kill("stay-0-1").await.expect("kill");
    let end = m.until_end("stay-0-1", Duration::from_secs(20), &mut seen).await.expect("ends");
    assert_eq!(end.state, RunState::Killed);
    // Nothing more comes: every update was delivered once.
    assert!(m.next_update(Duration::from_secs(2)).await.is_none(), "no repeats after acknowledgement");
    let mut keys = BTreeSet::new();
    for u in &seen {
        assert!(keys.insert((u.run_id.clone(), u.seq)), "delivered twice: {u:?}");
    }
    for run in ["stay-0-1", "ends-0-1"] {
        let seqs: Vec<u64> = seen.iter().filter(|u| u.run_id == run).map(|u| u.seq).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{run}: none lost: {seqs:?}");
    }
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_host_manager_reconciles_with_its_agents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = sqlite(dir.path());
    let port = free_port().await;
    let mut m = manager(dir.path(), store.clone(), port, Vec::new()).await;
    let _a = spawn_agent(&m, dir.path(), "h1", 2_000, 2_048, &[]);
    let _b = spawn_agent(&m, dir.path(), "h2", 2_000, 2_048, &[]);
    assert!(m.wait_hosts(&["h1", "h2"], Duration::from_secs(30)).await);
    m.launch_on("h1", vec![run("known-0-1", "sleep", &["60"], 64, 1)]).await.expect("launch");
    // A command line no other test (or earlier run) uses, to find the process.
    let orphan_arg = format!("61.{}", std::process::id());
    m.launch_on("h2", vec![run("orphan-0-1", "sleep", &[&orphan_arg], 64, 1)]).await.expect("launch");
    let mut running = BTreeSet::new();
    while running.len() < 2 {
        let u = m.next_update(Duration::from_secs(20)).await.expect("update");
        if u.state == RunState::Running {
            running.insert(u.run_id);
        }
    }
    // RUNNING is reported once the run is started; under load its `exec`
    // can come a moment later, so look for the process for a while.
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes(&["sleep", &orphan_arg]) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(processes(&["sleep", &orphan_arg]), 1, "the orphan runs before the restart");
    m.shutdown().await;

    // The new manager expects `known` (as the job manager's storage would
    // say) and a run that no agent has; it knows nothing of `orphan`.
    let expected = vec![
        ExpectedRun {
            host: "h1".into(),
            run_id: "known-0-1".into(),
            task_id: "known-0".into(),
            resources: Resources::new(100, 64, 10, 0),
            gpu: Default::default(),
            last_seq: 2,
        },
        ExpectedRun {
            host: "h2".into(),
            run_id: "ghost-0-1".into(),
            task_id: "ghost-0".into(),
            resources: Resources::new(100, 64, 10, 0),
            gpu: Default::default(),
            last_seq: 2,
        },
    ];
    let mut m = manager(dir.path(), store, port, expected).await;
    assert!(m.wait_hosts(&["h1", "h2"], Duration::from_secs(30)).await, "agents reconnected");
    let mut ends = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while ends.len() < 2 && Instant::now() < deadline {
        if let Some(u) = m.next_update(Duration::from_secs(1)).await
            && u.state.is_terminal()
        {
            ends.insert(u.run_id.clone(), (u.state, u.reason.clone()));
        }
    }
    assert_eq!(ends.get("ghost-0-1").map(|e| e.0), Some(RunState::Lost), "the missing run is LOST: {ends:?}");
    assert!(!ends.contains_key("known-0-1"), "the expected run keeps running");
    // The run nobody expects is killed on its host (its end is nobody's
    // business upstream, so it is not forwarded).
    let deadline = Instant::now() + Duration::from_secs(15);
    while processes(&["sleep", &orphan_arg]) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(processes(&["sleep", &orphan_arg]), 0, "the orphan's process is gone");
    let h1 = m.hosts.host("h1").expect("h1");
    assert_eq!(h1.runs, vec!["known-0-1".to_string()], "converged: h1 holds exactly the known run");
    assert!(m.hosts.host("h2").expect("h2").runs.is_empty(), "converged: h2 holds nothing");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_launches_and_a_bad_registration_get_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = manager(dir.path(), sqlite(dir.path()), free_port().await, Vec::new()).await;
    let _a = spawn_agent(&m, dir.path(), "h1", 1_000, 1_024, &[]);
    assert!(m.wait_hosts(&["h1"], Duration::from_secs(30)).await);

    let too_big = run("big-0-1", "sleep", &["1"], 1_000_000, 1);
    let e = m.launch_on("h1", vec![too_big]).await.expect_err("over capacity");
    assert!(e.to_string().contains("memory"), "names the resource: {e}");

    let mut req = LeaseRequest::new(Resources::ZERO, 1, 10_000);
    req.only_hosts = vec!["h1".into()];
    let lease = m.hosts.lease(&req).expect("lease");
    let e =
        m.hosts.launch(lease.id, "nowhere", vec![run("x-0-1", "true", &[], 64, 1)]).await.expect_err("unknown host");
    assert!(e.to_string().contains("nowhere"), "{e}");
    let _ = m.hosts.release(lease.id);

    m.launch_on("h1", vec![run("dup-0-1", "sleep", &["30"], 64, 1)]).await.expect("first launch");
    let e = m.launch_on("h1", vec![run("dup-0-1", "sleep", &["30"], 64, 1)]).await.expect_err("duplicate run id");
    assert!(e.to_string().contains("dup-0-1"), "{e}");
    // A second live run of the same task (dup-0) is refused too, on any host.
    let e = m.launch_on("h1", vec![run("dup-0-2", "sleep", &["30"], 64, 1)]).await.expect_err("duplicate task id");
    assert!(e.to_string().contains("task dup-0") && e.to_string().contains("dup-0-1"), "{e}");

    // An agent whose report is invalid (no CPU) is refused and says why.
    let mut bad = spawn_agent(&m, dir.path(), "h0", 0, 1_024, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = bad.child.try_wait().expect("wait") {
            break Some(s);
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let log = bad.log();
    assert!(status.is_some_and(|s| !s.success()), "the agent stops with an error; log:\n{log}");
    assert!(log.contains("cpu"), "the error names the field; log:\n{log}");
    assert!(m.hosts.host("h0").is_none(), "never registered");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_away_past_the_heartbeat_timeout_has_its_runs_lost_and_their_processes_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut m = manager_with_timeout(dir.path(), sqlite(dir.path()), free_port().await, Vec::new(), 1_000).await;
    let mut agent = spawn_agent(&m, dir.path(), "h1", 2_000, 2_048, &[]);
    assert!(m.wait_hosts(&["h1"], Duration::from_secs(30)).await);
    // A command line no other test (or earlier run) uses.
    let arg = format!("62.{}", std::process::id());
    m.launch_on("h1", vec![run("away-0-1", "sleep", &[&arg], 64, 1)]).await.expect("launch");
    let mut seen = Vec::new();
    while !seen.iter().any(|u: &RunUpdate| u.state == RunState::Running) {
        seen.push(m.next_update(Duration::from_secs(20)).await.expect("update"));
    }
    agent.kill9();
    let end = m.until_end("away-0-1", Duration::from_secs(20), &mut seen).await.expect("declared lost");
    assert_eq!((end.state, end.reason.as_str()), (RunState::Lost, "HOST_LOST"));
    assert_eq!(processes(&["sleep", &arg]), 1, "the process itself outlived its agent");
    let _agent = spawn_agent(&m, dir.path(), "h1", 2_000, 2_048, &[]);
    assert!(m.wait_hosts(&["h1"], Duration::from_secs(30)).await, "back");
    // Its run was given up for lost (and may run elsewhere by now): the
    // re-registered agent is told to stop it.
    let deadline = Instant::now() + Duration::from_secs(15);
    while processes(&["sleep", &arg]) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(processes(&["sleep", &arg]), 0, "the lost run's process was stopped");
    assert!(m.hosts.host("h1").is_some_and(|h| h.runs.is_empty()), "nothing held on h1");
    m.shutdown().await;
}

/// Security issue 44: a host declared lost while its stream stayed open
/// came back only when its agent was restarted (its heartbeats were
/// ignored). Here the agent is stopped (SIGSTOP) past the heartbeat
/// timeout, which from the manager's side looks like the stalled server of
/// the report, then continued: its first heartbeat ends its stream, it
/// redials and registers by itself, and the run declared LOST is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_paused_past_the_heartbeat_timeout_comes_back_without_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut m = manager_with_timeout(dir.path(), sqlite(dir.path()), free_port().await, Vec::new(), 1_000).await;
    let agent = spawn_agent(&m, dir.path(), "h1", 2_000, 2_048, &[]);
    assert!(m.wait_hosts(&["h1"], Duration::from_secs(30)).await);
    // A command line no other test (or earlier run) uses.
    let arg = format!("63.{}", std::process::id());
    m.launch_on("h1", vec![run("paused-0-1", "sleep", &[&arg], 64, 1)]).await.expect("launch");
    let mut seen = Vec::new();
    while !seen.iter().any(|u: &RunUpdate| u.state == RunState::Running) {
        seen.push(m.next_update(Duration::from_secs(20)).await.expect("update"));
    }
    let signal = |sig: &str| {
        let sent = Command::new("kill").arg(sig).arg(agent.child.id().to_string()).status().expect("kill runs");
        assert!(sent.success(), "kill {sig}");
    };
    signal("-STOP");
    let end = m.until_end("paused-0-1", Duration::from_secs(20), &mut seen).await.expect("declared lost");
    signal("-CONT");
    assert_eq!((end.state, end.reason.as_str()), (RunState::Lost, "HOST_LOST"));
    assert!(m.wait_hosts(&["h1"], Duration::from_secs(30)).await, "back without a restart of its agent");
    // The run given up for lost is stopped by the re-registered agent.
    let deadline = Instant::now() + Duration::from_secs(15);
    while processes(&["sleep", &arg]) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(processes(&["sleep", &arg]), 0, "the lost run's process was stopped");
    assert!(m.hosts.host("h1").is_some_and(|h| h.runs.is_empty()), "nothing held on h1");
    assert!(agent.log().contains("register again"), "the agent was told why: {}", agent.log());
    m.launch_on("h1", vec![run("paused-0-2", "true", &[], 64, 1)]).await.expect("h1 takes launches again");
    m.shutdown().await;
}

/// Issue 24: an agent joins once with a token and keeps its certificate; it
/// restarts without the token (even once every token is revoked), and an
/// agent with neither a certificate nor a token stops saying how to join.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_agent_restarts_without_its_token_and_one_never_joined_stops_saying_how() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut m = manager_with_timeout(dir.path(), sqlite(dir.path()), free_port().await, Vec::new(), 1_000).await;
    let mut agent = spawn_agent(&m, dir.path(), "h1", 1_000, 1_024, &[]);
    assert!(m.wait_hosts(&["h1"], Duration::from_secs(30)).await, "joined and registered");
    let identity = dir.path().join("h1").join("data").join("identity");
    let mode = std::fs::metadata(identity.join("agent.key")).expect("a key kept").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key is private");
    assert!(identity.join("agent.crt").exists() && identity.join("ca.crt").exists());

    // No token is usable any more; the agent comes back without one.
    let pki = paceline_hostmgr::pki::AgentPki::open(dir.path().join("pki")).expect("pki");
    for t in pki.list_tokens().expect("tokens") {
        pki.revoke_token(&t.id).expect("revoke");
    }
    agent.kill9();
    assert!(m.wait_hosts(&[], Duration::from_secs(1)).await);
    let deadline = Instant::now() + Duration::from_secs(20);
    while m.hosts.host("h1").is_some_and(|h| h.reachable) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(m.hosts.host("h1").is_some_and(|h| !h.reachable), "the killed agent was noticed");
    m.join.clear();
    let again = spawn_agent(&m, dir.path(), "h1", 1_000, 1_024, &[]);
    assert!(m.wait_hosts(&["h1"], Duration::from_secs(30)).await, "back with its certificate; log:\n{}", again.log());

    // Never joined, no token: it stops and says how to join.
    let mut lost = spawn_agent(&m, dir.path(), "h2", 1_000, 1_024, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = lost.child.try_wait().expect("wait") {
            break Some(s);
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let log = lost.log();
    assert!(status.is_some_and(|s| !s.success()), "it stops with an error; log:\n{log}");
    assert!(log.contains("--join"), "the error says how to join; log:\n{log}");
    assert!(m.hosts.host("h2").is_none(), "never registered");
    m.shutdown().await;
}
