//! Highly available `paceline server` on a real ZooKeeper: real server binaries sharing one
//! SQLite file (only the leader opens it), real agents given every server's address, the
//! real CLI following the leader.
//!
//! ZooKeeper: `PACELINE_ZOOKEEPER` when set (scripts/test sets it), otherwise one started
//! with deploy/zookeeper/zookeeper.sh in a temp dir on a free port. The tests run one at a
//! time (they start many processes on a small machine, and a 3 s session timeout must not
//! be starved).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{BIN, eventually, free_port, join_args, kill_processes_working_under};

const SESSION_TIMEOUT_MS: u64 = 3_000;
const EXIT_LOST_LEADERSHIP: i32 = 75;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/zookeeper/zookeeper.sh")
}

/// A ZooKeeper started by the project's script in a temp dir; stopped on drop.
struct ZkServer {
    dir: tempfile::TempDir,
    port: u16,
}

impl ZkServer {
    fn start(port: u16) -> ZkServer {
        let dir = tempfile::Builder::new().prefix("paceline-ha-zk").tempdir().expect("tempdir");
        let out = Command::new("bash")
            .arg(script())
            .arg("start")
            .arg(dir.path())
            .arg(port.to_string())
            .output()
            .expect("zookeeper.sh");
        assert!(out.status.success(), "zookeeper.sh start failed: {}", String::from_utf8_lossy(&out.stderr));
        ZkServer { dir, port }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn stop(&self) {
        let _ = Command::new("bash").arg(script()).arg("stop").arg(self.dir.path()).output();
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The ZooKeeper every test shares: `PACELINE_ZOOKEEPER`, else one of our own, stopped by a
/// watchdog when this process exits (statics are never dropped).
fn zookeeper() -> &'static str {
    static ADDR: OnceLock<String> = OnceLock::new();
    ADDR.get_or_init(|| {
        if let Ok(addr) = std::env::var("PACELINE_ZOOKEEPER")
            && !addr.trim().is_empty()
        {
            return addr;
        }
        let server = ZkServer::start(free_port());
        let addr = server.addr();
        let watchdog = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; bash '{script}' stop '{dir}' >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            script = script().display(),
            dir = server.dir.path().display(),
        );
        #[allow(clippy::zombie_processes)]
        Command::new("bash").arg("-c").arg(watchdog).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("watchdog");
        std::mem::forget(server);
        addr
    })
}

fn unique_cluster(test: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("ha-{test}-{}-{nanos}", std::process::id())
}

/// A `paceline` child process whose stdout lines are kept with the moment they arrived;
/// SIGTERM on drop.
struct Proc {
    name: String,
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    exited: Option<(Instant, Option<i32>)>,
    /// An agent's data dir: the task processes it started (which outlive an
    /// agent by design) are killed when the agent is dropped, so that the
    /// test leaves nothing running (scripts/leftovers checks).
    tasks_under: Option<PathBuf>,
    /// Where its stderr goes.
    log: PathBuf,
}

impl Proc {
    fn spawn(name: &str, cmd: &mut Command, stderr: &Path) -> Proc {
        // Appended: a restarted process's log follows its predecessor's.
        let log = std::fs::OpenOptions::new().create(true).append(true).open(stderr).expect("log file");
        let mut child = cmd.stdout(Stdio::piped()).stderr(log).spawn().expect("starts");
        let stdout = child.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap_or_else(|p| p.into_inner()).push((Instant::now(), line));
            }
        });
        Proc { name: name.to_string(), child, lines, exited: None, tasks_under: None, log: stderr.to_path_buf() }
    }

    /// When a stdout line containing `needle` arrived, if one did.
    fn line_at(&self, needle: &str) -> Option<Instant> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|(_, l)| l.contains(needle)).map(|(t, _)| *t)
    }

    fn wait_line(&mut self, needle: &str, secs: u64) -> Instant {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(t) = self.line_at(needle) {
                return t;
            }
            if !self.alive() {
                // Its stderr, so that a failure in CI says why it exited.
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect();
                panic!(
                    "{} exited ({:?}) before printing {needle:?}; its stderr ends:\n{}",
                    self.name,
                    self.exited,
                    tail.join("\n")
                );
            }
            assert!(Instant::now() < deadline, "{} did not print {needle:?} within {secs} s", self.name);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn alive(&mut self) -> bool {
        if self.exited.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.exited = Some((Instant::now(), status.code()));
        }
        self.exited.is_none()
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.exited.get_or_insert((Instant::now(), None));
    }

    /// Waits until the process has exited (at most `secs`), SIGKILLing it then.
    fn wait_exit(&mut self, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.alive() {
            self.kill9();
        }
    }

    fn term(&self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).stderr(Stdio::null()).status();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.alive() {
            self.term();
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.alive() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if self.alive() {
                self.kill9();
            }
        }
        if let Some(dir) = &self.tasks_under {
            kill_processes_working_under(dir);
        }
    }
}

/// One server of the test cluster.
struct Node {
    api: u16,
    agent: u16,
    config: PathBuf,
    log: PathBuf,
}

/// The `auth` lines of a membership: the digest identity `zookeeper.sh env` exports
/// (`PACELINE_ZOOKEEPER_USER`, `PACELINE_ZOOKEEPER_PASSWORD_FILE`), else the fixed test
/// identity the membership crate's tests use too. Tests sharing a ZooKeeper must agree:
/// the first member to create `/paceline` makes it that identity's alone.
fn zk_auth(dir: &Path) -> String {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let user = var("PACELINE_ZOOKEEPER_USER").unwrap_or_else(|| "paceline".into());
    let file = match var("PACELINE_ZOOKEEPER_PASSWORD_FILE") {
        Some(file) => PathBuf::from(file),
        None => {
            let file = dir.join("zk-password");
            std::fs::write(&file, "paceline-test-password\n").expect("password file");
            file
        }
    };
    format!("  auth: {{ user: {user}, password_file: {} }}\n", file.display())
}

fn node(dir: &Path, name: &str, zk: &str, cluster: &str, data: &Path) -> Node {
    let (api, agent) = (free_port(), free_port());
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &config,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:{agent}\nmember_id: {name}\n\
             heartbeat_timeout_ms: 5000\nagent_heartbeat_ms: 500\n\
             membership:\n  kind: zookeeper\n  connect: \"{zk}\"\n  cluster: {cluster}\n  session_timeout_ms: {SESSION_TIMEOUT_MS}\n{}",
            data.display(),
            zk_auth(dir)
        ),
    )
    .expect("config");
    Node { api, agent, config, log: dir.join(format!("{name}.log")) }
}

fn start_server(name: &str, n: &Node) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["server", "--config", n.config.to_str().expect("utf-8")])
        .env("PACELINE_LOG", "paceline=info,paceline_membership=info,warn");
    Proc::spawn(name, &mut cmd, &n.log)
}

/// An agent joining the CA of the servers whose shared data dir is `data`; it
/// heartbeats and redials faster than the defaults, for the tests' sake.
fn start_agent(dir: &Path, data: &Path, name: &str, managers: &str, ports: &str) -> Proc {
    let fast = "heartbeat_interval_ms: 500\nreconnect_initial_ms: 100\nreconnect_max_ms: 500\n";
    start_agent_with(dir, data, name, managers, ports, fast)
}

/// An agent with `config` as its configuration file (empty: every default).
fn start_agent_with(dir: &Path, data: &Path, name: &str, managers: &str, ports: &str, config: &str) -> Proc {
    let cfg = dir.join(format!("{name}.yaml"));
    std::fs::write(&cfg, config).expect("config");
    let mut cmd = Command::new(BIN);
    cmd.args(["agent", "--config", cfg.to_str().expect("utf-8"), "--manager", managers, "--hostname", name])
        .args([
            "--data-dir",
            dir.join(name).to_str().expect("utf-8"),
            "--cpu-millis",
            "2000",
            "--memory-mib",
            "2048",
            "--port-range",
            ports,
        ])
        .args(join_args(&data.join("pki")))
        .env("PACELINE_LOG", "paceline_agent=info,warn");
    let mut agent = Proc::spawn(name, &mut cmd, &dir.join(format!("{name}.log")));
    agent.tasks_under = Some(dir.join(name));
    agent
}

fn cli(servers: &str, args: &[&str]) -> Output {
    Command::new(BIN).args(args).env("PACELINE_SERVER", servers).output().expect("cli runs")
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn json(servers: &str, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&ok(cli(servers, &all))).expect("json output")
}

/// `json` that returns `None` on any failure (a failover in progress).
fn try_json(servers: &str, args: &[&str]) -> Option<serde_json::Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = cli(servers, &all);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
}

fn tasks(servers: &str, id: &str) -> Vec<serde_json::Value> {
    try_json(servers, &["task", "list", id]).and_then(|v| v.as_array().cloned()).unwrap_or_default()
}

fn state_is(t: &serde_json::Value, s: &str) -> bool {
    t["state"].as_str().is_some_and(|x| x.ends_with(s))
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Every run sandbox (`runs/<run_id>`) on the agents, with how many agents have it.
fn sandboxes(dir: &Path, agents: &[&str]) -> std::collections::BTreeMap<String, usize> {
    let mut all = std::collections::BTreeMap::new();
    for a in agents {
        if let Ok(entries) = std::fs::read_dir(dir.join(a).join("runs")) {
            for e in entries.flatten() {
                *all.entry(e.file_name().to_string_lossy().into_owned()).or_insert(0) += 1;
            }
        }
    }
    all
}

/// Asserts that every run of `job` exists on exactly one agent and that the agents hold
/// no other run of it: nothing was launched twice.
fn assert_launched_once(dir: &Path, agents: &[&str], servers: &str, job: &str) {
    let reported: std::collections::BTreeSet<String> =
        tasks(servers, job).iter().filter_map(|t| t["run_id"].as_str().map(str::to_string)).collect();
    let on_agents = sandboxes(dir, agents);
    let mine: std::collections::BTreeMap<&String, &usize> =
        on_agents.iter().filter(|(k, _)| k.starts_with(&format!("{job}-"))).collect();
    assert!(mine.values().all(|n| **n == 1), "a run of {job} on two agents: {mine:?}");
    let mine: std::collections::BTreeSet<String> = mine.keys().map(|k| (*k).clone()).collect();
    assert_eq!(mine, reported, "{job}: the agents ran exactly the runs the server reports");
}

#[test]
fn three_servers_fail_over_without_losing_a_job_or_launching_twice() {
    let _serial = serial();
    let zk = zookeeper();
    let cluster = unique_cluster("failover");
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let data = dir.join("shared-data");
    let nodes: Vec<Node> = ["s1", "s2", "s3"].iter().map(|n| node(dir, n, zk, &cluster, &data)).collect();
    let apis =
        |order: &[usize]| order.iter().map(|i| format!("127.0.0.1:{}", nodes[*i].api)).collect::<Vec<_>>().join(",");
    let all = apis(&[2, 1, 0]);
    let managers = nodes.iter().map(|n| format!("127.0.0.1:{}", n.agent)).collect::<Vec<_>>().join(",");

    let mut servers = vec![start_server("s1", &nodes[0])];
    servers[0].wait_line("leading", 60);
    for (i, name) in [(1, "s2"), (2, "s3")] {
        let mut s = start_server(name, &nodes[i]);
        s.wait_line("standby", 60);
        servers.push(s);
    }
    let _agents: Vec<Proc> = [("a1", "32000-32499"), ("a2", "32500-32999")]
        .iter()
        .map(|(n, p)| start_agent(dir, &data, n, &managers, p))
        .collect();
    let agent_names = ["a1", "a2"];
    eventually(30, "two agents registered with the leader", || {
        try_json(&all, &["host", "list"]).and_then(|h| h.as_array().map(Vec::len)) == Some(2)
    });

    // A standby forwards every call to the leader (a client given only a
    // standby's address works), and answers health NOT_SERVING naming the
    // leader (so the CLI goes to the leader directly).
    let standby_api = format!("http://127.0.0.1:{}", nodes[1].api);
    let leader_api = format!("127.0.0.1:{}", nodes[0].api);
    let hello_config: paceline_model::job::JobConfig =
        serde_yaml::from_str(&std::fs::read_to_string(examples().join("hello.yaml")).expect("example"))
            .expect("hello.yaml");
    let through_standby_id =
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(async {
            use paceline_proto::v1 as pb;
            let channel = tonic::transport::Endpoint::from_shared(standby_api.clone())
                .expect("url")
                .connect()
                .await
                .expect("connects");
            let mut jobs = pb::job_service_client::JobServiceClient::new(channel.clone());
            let created = jobs
                .create_job(pb::CreateJobRequest { spec: Some(paceline_api::convert::job_spec_pb(&hello_config)) })
                .await
                .expect("a write through a standby reaches the leader")
                .into_inner()
                .id;
            let listed =
                jobs.query_jobs(pb::QueryJobsRequest::default()).await.expect("a read through a standby").into_inner();
            assert!(listed.jobs.iter().any(|j| j.id == created), "the leader's answer: {listed:?}");
            let health = paceline_api::tonic_health::pb::health_client::HealthClient::new(channel)
                .check(paceline_api::tonic_health::pb::HealthCheckRequest { service: String::new() })
                .await
                .expect("health answers");
            assert_eq!(
                health.get_ref().status,
                paceline_api::tonic_health::pb::health_check_response::ServingStatus::NotServing as i32
            );
            assert_eq!(
                health.metadata().get("paceline-leader").and_then(|v| v.to_str().ok()),
                Some(leader_api.as_str())
            );
            created
        });
    eventually(60, "the job created through a standby SUCCEEDED", || {
        try_json(&all, &["job", "get", &through_standby_id])
            .is_some_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });

    // Jobs submitted through a standby (the CLI follows it to the leader).
    let long = dir.join("long.yaml");
    let spec = std::fs::read_to_string(examples().join("hello.yaml"))
        .expect("example")
        .replace("instance_count: 3", "instance_count: 4")
        .replace("echo hello from instance $PACELINE_TASK_ID", "sleep 300");
    std::fs::write(&long, spec).expect("spec");
    let through_standby = format!("127.0.0.1:{}", nodes[2].api);
    let a = ok(cli(&through_standby, &["job", "create", long.to_str().expect("utf-8")]));
    eventually(60, "job a: 4 running", || {
        let ts = tasks(&all, &a);
        ts.len() == 4 && ts.iter().all(|t| state_is(t, "RUNNING"))
    });
    let runs_before: Vec<serde_json::Value> = tasks(&all, &a).iter().map(|t| t["run_id"].clone()).collect();
    // Only job a runs now: the pool holds its four tasks.
    let pool_before = json(&all, &["pool", "get", "/default"]);
    assert_eq!(pool_before["live_tasks"].as_u64(), Some(4), "{pool_before}");
    assert_eq!(
        pool_before["allocation"]["cpu_millis"].as_u64(),
        Some(400),
        "four tasks of 100 millicores: {pool_before}"
    );

    // SIGKILL the leader: a standby leads within the session timeout + 5 s.
    servers[0].kill9();
    let killed = Instant::now();
    eventually(SESSION_TIMEOUT_MS / 1000 + 5, "a new leader serves", || try_json(&all, &["job", "list"]).is_some());
    let failover = killed.elapsed();
    eprintln!("failover after SIGKILL: {failover:?}");
    let leader = if servers[1].line_at("leading").is_some() { 1 } else { 2 };
    assert!(servers[leader].line_at("leading").is_some(), "s2 or s3 leads");
    assert!(servers[3 - leader].line_at("leading").is_none(), "only one leads");

    eventually(30, "both agents back with the new leader", || {
        try_json(&all, &["host", "list"])
            .and_then(|h| h.as_array().cloned())
            .is_some_and(|h| h.len() == 2 && h.iter().all(|h| h["reachable"].as_bool() == Some(true)))
    });
    let b = ok(cli(&all, &["job", "create", examples().join("hello.yaml").to_str().expect("utf-8")]));
    eventually(60, "job b SUCCEEDED on the new leader", || {
        try_json(&all, &["job", "get", &b])
            .is_some_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });
    let jobs: Vec<String> = json(&all, &["job", "list"])
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j["id"].as_str().map(str::to_string))
        .collect();
    assert!(jobs.contains(&a) && jobs.contains(&b), "both jobs present: {jobs:?}");
    let ts = tasks(&all, &a);
    assert!(ts.iter().all(|t| state_is(t, "RUNNING")), "job a carries on: {ts:?}");
    let runs_after: Vec<serde_json::Value> = ts.iter().map(|t| t["run_id"].clone()).collect();
    assert_eq!(runs_before, runs_after, "the same runs carry on");
    // The new leader's resource manager rebuilt the pool's allocation and
    // live tasks from the recovered task states (job b has ended).
    let pool_after = json(&all, &["pool", "get", "/default"]);
    assert_eq!(pool_after["allocation"], pool_before["allocation"], "allocation rebuilt: {pool_after}");
    assert_eq!(pool_after["live_tasks"], pool_before["live_tasks"], "{pool_after}");
    assert_launched_once(dir, &agent_names, &all, &a);
    assert_launched_once(dir, &agent_names, &all, &b);

    // A clean shutdown hands over at once (well within one session timeout).
    let last = 3 - leader;
    servers[leader].term();
    let stopped = Instant::now();
    servers[last].wait_line("leading", 30);
    let handover = servers[last].line_at("leading").map(|t| t.saturating_duration_since(stopped)).unwrap_or_default();
    eprintln!("handover after SIGTERM: {handover:?}");
    assert!(
        handover < Duration::from_millis(SESSION_TIMEOUT_MS),
        "a clean shutdown hands over before a session timeout: {handover:?}"
    );
    eventually(30, "agents on the third leader", || {
        try_json(&all, &["host", "list"])
            .and_then(|h| h.as_array().cloned())
            .is_some_and(|h| h.len() == 2 && h.iter().all(|h| h["reachable"].as_bool() == Some(true)))
    });
    let c = ok(cli(&all, &["job", "create", examples().join("hello.yaml").to_str().expect("utf-8")]));
    eventually(60, "job c SUCCEEDED on the third leader", || {
        try_json(&all, &["job", "get", &c])
            .is_some_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });
    let runs_third: Vec<serde_json::Value> = tasks(&all, &a).iter().map(|t| t["run_id"].clone()).collect();
    assert_eq!(runs_before, runs_third, "still the same runs");
    for job in [&a, &b, &c] {
        assert_launched_once(dir, &agent_names, &all, job);
    }
    let _ = ok(cli(&all, &["job", "kill", &a]));
    eventually(30, "a killed", || tasks(&all, &a).iter().all(|t| state_is(t, "KILLED")));

    // Each leader claimed its election epoch in the store before writing, so
    // a handle claiming an old epoch (a paused, resumed ex-leader) is fenced.
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(async {
        use paceline_storage::Store as _;
        let store =
            paceline_storage::sqlite::SqliteStore::open(data.join("paceline.db")).expect("open the shared store");
        match store.claim_leadership(1).await {
            Err(paceline_storage::StoreError::Fenced { mine, current }) => {
                assert!(current > mine, "{current} > {mine}")
            }
            other => panic!("the leaders' epochs must fence an old one, got {other:?}"),
        }
    });
}

fn start_with_roles(name: &str, n: &Node, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["server", "--config", n.config.to_str().expect("utf-8")])
        .args(extra)
        .env("PACELINE_LOG", "paceline=info,paceline_membership=info,warn");
    Proc::spawn(name, &mut cmd, &n.log)
}

/// The host manager, the job manager and a placement engine in processes of
/// their own, the two managers each with a standby (one job manager given the
/// host managers' addresses, the other, like the engine, finding leaders in
/// ZooKeeper): killing either leader with SIGKILL costs a session timeout,
/// not a run. The host manager's standby leads and the agents
/// re-register with it; the job manager's standby leads and subscribes to
/// the host manager with a larger epoch; every run carries on under its id.
#[test]
fn host_and_job_managers_in_separate_processes_fail_over_each_on_its_own() {
    let _serial = serial();
    let zk = zookeeper();
    let cluster = unique_cluster("split");
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let hm: Vec<Node> = ["hm1", "hm2"].iter().map(|n| node(dir, n, zk, &cluster, &dir.join("hm-data"))).collect();
    let jm: Vec<Node> = ["jm1", "jm2"].iter().map(|n| node(dir, n, zk, &cluster, &dir.join("jm-data"))).collect();
    let list = |nodes: &[Node]| nodes.iter().map(|n| format!("127.0.0.1:{}", n.api)).collect::<Vec<_>>().join(",");
    let (hm_apis, jm_apis) = (list(&hm), list(&jm));
    let jobs_roles = ["--roles", "jobmgr,resmgr", "--hostmgr", hm_apis.as_str()];

    let mut hms = vec![start_with_roles("hm1", &hm[0], &["--roles", "hostmgr"])];
    hms[0].wait_line("leading", 60);
    hms.push(start_with_roles("hm2", &hm[1], &["--roles", "hostmgr"]));
    hms[1].wait_line("standby", 60);
    let mut jms = vec![start_with_roles("jm1", &jm[0], &jobs_roles)];
    jms[0].wait_line("leading", 60);
    // The second job manager is given no host manager addresses: it finds
    // the host manager's leader in ZooKeeper when it comes to lead.
    jms.push(start_with_roles("jm2", &jm[1], &["--roles", "jobmgr,resmgr"]));
    jms[1].wait_line("standby", 60);
    // The placement engine, in a process of its own, finds the job
    // manager's leader in ZooKeeper too (no --core), and reads plugin
    // versions from the job managers' store.
    let pl = node(dir, "pl", zk, &cluster, &dir.join("jm-data"));
    let mut engine = start_with_roles("pl", &pl, &["--roles", "placement"]);
    engine.wait_line("placement engine for the core leading in ZooKeeper", 30);
    // Agents dial the host managers, not the job managers.
    let managers = hm.iter().map(|n| format!("127.0.0.1:{}", n.agent)).collect::<Vec<_>>().join(",");
    let _agents: Vec<Proc> = [("a1", "35000-35499"), ("a2", "35500-35999")]
        .iter()
        .map(|(n, p)| start_agent(dir, &dir.join("hm-data"), n, &managers, p))
        .collect();
    let agent_names = ["a1", "a2"];
    let both_reachable = || {
        try_json(&jm_apis, &["host", "list"])
            .and_then(|h| h.as_array().cloned())
            .is_some_and(|h| h.len() == 2 && h.iter().all(|h| h["reachable"].as_bool() == Some(true)))
    };
    eventually(30, "two agents, seen through the job manager", both_reachable);

    let long = dir.join("long.yaml");
    let spec = std::fs::read_to_string(examples().join("hello.yaml"))
        .expect("example")
        .replace("instance_count: 3", "instance_count: 4")
        .replace("echo hello from instance $PACELINE_TASK_ID", "sleep 300");
    std::fs::write(&long, spec).expect("spec");
    let a = ok(cli(&jm_apis, &["job", "create", long.to_str().expect("utf-8")]));
    eventually(60, "job a: 4 running", || {
        let ts = tasks(&jm_apis, &a);
        ts.len() == 4 && ts.iter().all(|t| state_is(t, "RUNNING"))
    });
    let runs: Vec<serde_json::Value> = tasks(&jm_apis, &a).iter().map(|t| t["run_id"].clone()).collect();
    let hello = examples().join("hello.yaml");
    let hello = hello.to_str().expect("utf-8");

    // 1. The host manager's leader dies.
    hms[0].kill9();
    let killed = Instant::now();
    let led = hms[1].wait_line("leading", SESSION_TIMEOUT_MS / 1000 + 5);
    eprintln!("host manager failover after SIGKILL: {:?}", led.saturating_duration_since(killed));
    eventually(30, "both agents back, with the new host manager", both_reachable);
    let b = ok(cli(&jm_apis, &["job", "create", hello]));
    eventually(60, "job b SUCCEEDED through the new host manager", || {
        try_json(&jm_apis, &["job", "get", &b])
            .is_some_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });
    eprintln!("host manager failover, SIGKILL to a job placed and run: {:?}", killed.elapsed());
    let ts = tasks(&jm_apis, &a);
    assert!(ts.iter().all(|t| state_is(t, "RUNNING")), "job a carries on: {ts:?}");
    assert_eq!(runs, ts.iter().map(|t| t["run_id"].clone()).collect::<Vec<_>>(), "the same runs carry on");
    assert!(jms[0].alive() && jms[0].line_at("leading").is_some(), "the job manager kept its leadership");

    // 2. The job manager's leader dies.
    jms[0].kill9();
    let killed = Instant::now();
    let led = jms[1].wait_line("leading", SESSION_TIMEOUT_MS / 1000 + 5);
    eprintln!("job manager failover after SIGKILL: {:?}", led.saturating_duration_since(killed));
    let c = ok(cli(&jm_apis, &["job", "create", hello]));
    eventually(60, "job c SUCCEEDED on the new job manager", || {
        try_json(&jm_apis, &["job", "get", &c])
            .is_some_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });
    let ts = tasks(&jm_apis, &a);
    assert!(ts.iter().all(|t| state_is(t, "RUNNING")), "job a carries on: {ts:?}");
    assert_eq!(runs, ts.iter().map(|t| t["run_id"].clone()).collect::<Vec<_>>(), "still the same runs");
    assert!(hms[1].alive(), "the host manager kept its leadership");
    assert!(engine.alive(), "the placement engine followed the new job manager");
    // The log has colour codes around `=`: compare without them.
    let jm2_log: String = std::fs::read_to_string(&jm[1].log)
        .unwrap_or_default()
        .split('\x1b')
        .map(|p| p.split_once('m').map_or(p, |(_, rest)| rest))
        .collect();
    assert!(
        jm2_log.contains("host manager reached servers= discovered=true"),
        "jm2 found the host manager through ZooKeeper: {jm2_log}"
    );
    for job in [&a, &b, &c] {
        assert_launched_once(dir, &agent_names, &jm_apis, job);
    }
}

/// A TCP proxy in front of ZooKeeper that can be cut: from then on it forwards nothing and
/// answers nothing (a partition), keeping every socket open.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let port = listener.local_addr().expect("addr").port();
        let cut = Arc::new(AtomicBool::new(false));
        let flag = cut.clone();
        std::thread::spawn(move || {
            let held = Arc::new(Mutex::new(Vec::new()));
            for client in listener.incoming().flatten() {
                if flag.load(Ordering::SeqCst) {
                    held.lock().unwrap_or_else(|p| p.into_inner()).push(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else { continue };
                for (mut from, mut to) in [
                    (client.try_clone().expect("clone"), server.try_clone().expect("clone")),
                    (server.try_clone().expect("clone"), client.try_clone().expect("clone")),
                ] {
                    let flag = flag.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            if !flag.load(Ordering::SeqCst) && to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        // Cut: never close, so the peer sees silence, not a reset.
                        while flag.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_secs(1));
                        }
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
                held.lock().unwrap_or_else(|p| p.into_inner()).push(client);
                held.lock().unwrap_or_else(|p| p.into_inner()).push(server);
            }
        });
        Proxy { port, cut }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_leader_cut_off_from_zookeeper_exits_before_a_successor_serves() {
    let _serial = serial();
    let zk = zookeeper();
    let proxy = Proxy::start(zk.to_string());
    let cluster = unique_cluster("partition");
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let data = dir.join("shared-data");
    let via_proxy = format!("127.0.0.1:{}", proxy.port);
    let n1 = node(dir, "p1", &via_proxy, &cluster, &data);
    let n2 = node(dir, "p2", zk, &cluster, &data);
    let mut p1 = start_server("p1", &n1);
    p1.wait_line("leading", 60);
    let mut p2 = start_server("p2", &n2);
    p2.wait_line("standby", 60);
    let all = format!("127.0.0.1:{},127.0.0.1:{}", n1.api, n2.api);
    let id = ok(cli(&all, &["job", "create", examples().join("hello.yaml").to_str().expect("utf-8")]));

    proxy.cut();
    let cut = Instant::now();
    let deadline = cut + Duration::from_millis(SESSION_TIMEOUT_MS) + Duration::from_secs(10);
    while p1.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (exited, code) = p1.exited.expect("the cut-off leader exited");
    assert_eq!(code, Some(EXIT_LOST_LEADERSHIP), "exit code of a lost leadership");
    let served = p2.wait_line("leading", SESSION_TIMEOUT_MS / 1000 + 10);
    eprintln!("leader exited {:?} after the cut; successor served {:?} after the cut", exited - cut, served - cut);
    assert!(exited < served, "the old leader exited before the successor served");
    let log = std::fs::read_to_string(&n1.log).unwrap_or_default();
    assert!(log.contains("lost leadership"), "the reason is logged: {log}");
    // The job submitted before is there on the successor.
    let jobs = json(&all, &["job", "list"]);
    assert!(jobs.as_array().into_iter().flatten().any(|j| j["id"].as_str() == Some(id.as_str())), "{jobs}");
}

#[test]
fn an_unreachable_zookeeper_at_start_is_retried_and_losing_it_ends_leadership() {
    let _serial = serial();
    let port = free_port();
    let cluster = unique_cluster("late");
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let n = node(dir, "late", &format!("127.0.0.1:{port}"), &cluster, &dir.join("data"));
    let mut server = start_server("late", &n);
    server.wait_line("standby", 60);
    std::thread::sleep(Duration::from_secs(3));
    assert!(server.alive(), "the server keeps retrying");
    let log = std::fs::read_to_string(&n.log).unwrap_or_default();
    assert!(log.contains("cannot reach ZooKeeper"), "the error is logged: {log}");
    let api = format!("127.0.0.1:{}", n.api);
    let out = cli(&api, &["job", "list"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("standby") && err.contains("no leader"), "{err}");

    let zk = ZkServer::start(port);
    server.wait_line("leading", 30);
    ok(cli(&api, &["job", "list"]));
    // ZooKeeper going away ends the leadership: the server exits for its supervisor.
    zk.stop();
    let deadline = Instant::now() + Duration::from_millis(SESSION_TIMEOUT_MS) + Duration::from_secs(10);
    while server.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.exited.and_then(|(_, c)| c), Some(EXIT_LOST_LEADERSHIP));
}

#[test]
fn a_subset_of_roles_is_refused_with_a_clear_error() {
    let out = Command::new(BIN).args(["server", "--roles", "jobmgr,hostmgr"]).output().expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not supported") && err.contains("jobmgr,resmgr,hostmgr"), "{err}");
    let out = Command::new(BIN).args(["server", "--roles", "jobmgr,scheduler"]).output().expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown role"));
}

/// Failover benchmark (not run by default):
/// `cargo test --release -p paceline --test ha_zookeeper -- --ignored failover_bench --exact --nocapture`.
/// Three servers and two agents on their defaults (the session timeout, heartbeats,
/// the agents' redial) but for addresses and ZooKeeper's identity; per round: stop the
/// leader, then time until a job submitted right after has a task placed by the new
/// leader; the stopped server is restarted as a standby (as a supervisor would).
/// `PACELINE_FAILOVER_KILLS` rounds of SIGKILL (default 20), then
/// `PACELINE_FAILOVER_TERMS` of SIGTERM (default 5); `PACELINE_FAILOVER_SESSION_MS`
/// asks for another session timeout. Prints p50, p99 and max of each against the
/// budgets; figures only, no timing assertion.
#[test]
#[ignore = "benchmark: several minutes"]
fn failover_bench() {
    let _serial = serial();
    let zk = zookeeper();
    let cluster = unique_cluster("bench");
    let dir = bench_dir();
    let dir = dir.path();
    let data = dir.join("shared-data");
    let names = ["b1", "b2", "b3"];
    let nodes: Vec<Node> = names.iter().map(|n| bench_node(dir, n, zk, &cluster, &data)).collect();
    let all = nodes.iter().map(|n| format!("127.0.0.1:{}", n.api)).collect::<Vec<_>>().join(",");
    let managers = nodes.iter().map(|n| format!("127.0.0.1:{}", n.agent)).collect::<Vec<_>>().join(",");
    let mut servers: Vec<Proc> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let mut s = start_server(names[i], n);
        s.wait_line(if i == 0 { "leading" } else { "standby" }, 60);
        servers.push(s);
    }
    let _agents: Vec<Proc> = [("ba1", "34000-34499"), ("ba2", "34500-34999")]
        .iter()
        .map(|(n, p)| start_agent_with(dir, &data, n, &managers, p, ""))
        .collect();
    eventually(60, "agents up", || {
        try_json(&all, &["host", "list"]).and_then(|h| h.as_array().map(Vec::len)) == Some(2)
    });
    let spec = dir.join("one.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(examples().join("hello.yaml"))
            .expect("example")
            .replace("instance_count: 3", "instance_count: 1")
            .replace("echo hello from instance $PACELINE_TASK_ID", "sleep 600"),
    )
    .expect("spec");
    let (kills, terms) = bench_rounds();
    let mut killed_times = Vec::new();
    let mut termed_times = Vec::new();
    for round in 0..kills + terms {
        let sigkill = round < kills;
        let leader = leading_index(&servers).expect("a leader");
        if sigkill {
            servers[leader].kill9();
        } else {
            servers[leader].term();
        }
        let took = first_placement_after(&all, &spec, Instant::now());
        let how = if sigkill { "SIGKILL" } else { "SIGTERM" };
        eprintln!("round {round}: {how} of {} → first placement by the new leader in {took:?}", names[leader]);
        if sigkill {
            killed_times.push(took)
        } else {
            termed_times.push(took)
        }
        // The supervisor restarts the stopped server; it joins as a standby.
        servers[leader].wait_exit(30);
        let mut again = start_server(names[leader], &nodes[leader]);
        again.wait_line("standby", 60);
        servers[leader] = again;
    }
    let session = bench_session_ms().map_or("the default".to_string(), |ms| format!("{ms} ms"));
    println!("failover, session timeout {session}, three servers, two agents on their defaults:");
    print_figures(
        "  SIGKILL of the leader → first placement by the new leader",
        &mut killed_times,
        "p50 ≤ 2 s, p99 ≤ 3 s",
    );
    print_figures("  SIGTERM of the leader → first placement by the new leader", &mut termed_times, "≤ 1 s");
}

/// A failover benchmark's directory: kept, with every process's log, when
/// `PACELINE_FAILOVER_KEEP` is set (its path is printed).
fn bench_dir() -> tempfile::TempDir {
    let mut dir = tempfile::tempdir().expect("tempdir");
    if std::env::var_os("PACELINE_FAILOVER_KEEP").is_some() {
        dir.disable_cleanup(true);
        eprintln!("logs kept in {}", dir.path().display());
    }
    dir
}

/// The rounds of a failover benchmark: (SIGKILL, SIGTERM).
fn bench_rounds() -> (usize, usize) {
    let var = |k: &str, d: usize| std::env::var(k).ok().and_then(|s| s.parse().ok()).unwrap_or(d);
    (var("PACELINE_FAILOVER_KILLS", 20), var("PACELINE_FAILOVER_TERMS", 5))
}

/// The session timeout a failover benchmark asks for; `None`: the server's default.
fn bench_session_ms() -> Option<u64> {
    std::env::var("PACELINE_FAILOVER_SESSION_MS").ok().and_then(|s| s.parse().ok())
}

/// A server of a failover benchmark: [`node`] without the tests' shorter
/// session and heartbeat timeouts, so that it runs on the server's defaults.
fn bench_node(dir: &Path, name: &str, zk: &str, cluster: &str, data: &Path) -> Node {
    let node = node(dir, name, zk, cluster, data);
    let text = std::fs::read_to_string(&node.config).expect("config");
    let session = match bench_session_ms() {
        Some(ms) => format!("  session_timeout_ms: {ms}\n"),
        None => String::new(),
    };
    let text = text
        .replace("heartbeat_timeout_ms: 5000\nagent_heartbeat_ms: 500\n", "")
        .replace(&format!("  session_timeout_ms: {SESSION_TIMEOUT_MS}\n"), &session);
    assert!(!text.contains("heartbeat") && text.contains("membership"), "config as expected: {text}");
    std::fs::write(&node.config, text).expect("config");
    node
}

/// Prints p50, p99 (nearest rank) and max of `times` with `budget`.
fn print_figures(what: &str, times: &mut [Duration], budget: &str) {
    if times.is_empty() {
        return;
    }
    times.sort();
    let rank = |p: f64| times[((p * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1];
    println!(
        "{what}, {} rounds: p50 {:.2} s, p99 {:.2} s, max {:.2} s (budget {budget})",
        times.len(),
        rank(0.50).as_secs_f64(),
        rank(0.99).as_secs_f64(),
        times[times.len() - 1].as_secs_f64()
    );
}

/// Submits `spec` through `servers` until one accepts it, then waits until a
/// task of it is placed on a host; the time since `killed`.
fn first_placement_after(servers: &str, spec: &Path, killed: Instant) -> Duration {
    let id = loop {
        let out = cli(servers, &["job", "create", spec.to_str().expect("utf-8")]);
        if out.status.success() {
            break String::from_utf8_lossy(&out.stdout).trim().to_string();
        }
        assert!(killed.elapsed() < Duration::from_secs(60), "no leader within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    let accepted = killed.elapsed();
    while !tasks(servers, &id).iter().any(|t| t["host"].as_str().is_some_and(|h| !h.is_empty())) {
        assert!(killed.elapsed() < Duration::from_secs(60), "nothing placed within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let placed = killed.elapsed();
    eprintln!("  job accepted after {accepted:.2?}, a task placed after {placed:.2?}");
    placed
}

/// The index of the process among `procs` whose latest standby/leading line says it leads.
fn leading_index(procs: &[Proc]) -> Option<usize> {
    (0..procs.len()).find(|i| {
        let lines = procs[*i].lines.lock().unwrap_or_else(|p| p.into_inner());
        lines
            .iter()
            .rev()
            .find(|(_, l)| l.contains("standby") || l.contains("leading"))
            .is_some_and(|(_, l)| l.contains("leading"))
    })
}

/// Failover benchmark of each role when the host manager and the job manager
/// run in processes of their own (not run by default):
/// `cargo test --release -p paceline --test ha_zookeeper -- --ignored failover_bench_split --exact --nocapture`.
/// Two `--roles hostmgr` and two `--roles jobmgr,resmgr,placement` processes and
/// two agents on their defaults, as in [`failover_bench`]; rounds alternate
/// between stopping the host manager's leader and the job manager's; each times
/// the stop → a job submitted right after has a task placed (which needs both
/// roles led); the stopped process is restarted as a standby.
/// `PACELINE_FAILOVER_KILLS` SIGKILLs of each (default 20), then
/// `PACELINE_FAILOVER_TERMS` SIGTERMs of each (default 5). Figures only.
#[test]
#[ignore = "benchmark: several minutes"]
fn failover_bench_split() {
    let _serial = serial();
    let zk = zookeeper();
    let cluster = unique_cluster("bench-split");
    let dir = bench_dir();
    let dir = dir.path();
    let make = |name: &str, data: &str| bench_node(dir, name, zk, &cluster, &dir.join(data));
    let hm = [make("bh1", "hm-data"), make("bh2", "hm-data")];
    let jm = [make("bj1", "jm-data"), make("bj2", "jm-data")];
    let hm_apis = hm.iter().map(|n| format!("127.0.0.1:{}", n.api)).collect::<Vec<_>>().join(",");
    let jm_apis = jm.iter().map(|n| format!("127.0.0.1:{}", n.api)).collect::<Vec<_>>().join(",");
    let hm_args: Vec<String> = vec!["--roles".into(), "hostmgr".into()];
    let jm_args: Vec<String> =
        vec!["--roles".into(), "jobmgr,resmgr,placement".into(), "--hostmgr".into(), hm_apis.clone()];
    let start = |name: &str, n: &Node, args: &[String], first: bool| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut p = start_with_roles(name, n, &args);
        p.wait_line(if first { "leading" } else { "standby" }, 60);
        p
    };
    let mut hms = vec![start("bh1", &hm[0], &hm_args, true), start("bh2", &hm[1], &hm_args, false)];
    let mut jms = vec![start("bj1", &jm[0], &jm_args, true), start("bj2", &jm[1], &jm_args, false)];
    let managers = hm.iter().map(|n| format!("127.0.0.1:{}", n.agent)).collect::<Vec<_>>().join(",");
    let _agents: Vec<Proc> = [("bsa1", "36000-36499"), ("bsa2", "36500-36999")]
        .iter()
        .map(|(n, p)| start_agent_with(dir, &dir.join("hm-data"), n, &managers, p, ""))
        .collect();
    eventually(60, "agents up", || {
        try_json(&jm_apis, &["host", "list"]).and_then(|h| h.as_array().map(Vec::len)) == Some(2)
    });
    let spec = dir.join("one.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(examples().join("hello.yaml"))
            .expect("example")
            .replace("instance_count: 3", "instance_count: 1")
            .replace("echo hello from instance $PACELINE_TASK_ID", "sleep 600")
            .replace("cpu_millis: 100", "cpu_millis: 10"),
    )
    .expect("spec");
    let (kills, terms) = bench_rounds();
    // [hostmgr, jobmgr] × [SIGKILL, SIGTERM]
    let mut times: [[Vec<Duration>; 2]; 2] = Default::default();
    for round in 0..(kills + terms) * 2 {
        let host_round = round % 2 == 0;
        let sigkill = round / 2 < kills;
        let (procs, nodes, args, names) = if host_round {
            (&mut hms, &hm, &hm_args, ["bh1", "bh2"])
        } else {
            (&mut jms, &jm, &jm_args, ["bj1", "bj2"])
        };
        let leader = leading_index(procs).expect("a leader");
        if sigkill {
            procs[leader].kill9();
        } else {
            procs[leader].term();
        }
        let took = first_placement_after(&jm_apis, &spec, Instant::now());
        let role = if host_round { "hostmgr" } else { "jobmgr" };
        let how = if sigkill { "SIGKILL" } else { "SIGTERM" };
        eprintln!("round {round}: {how} of the {role} leader {} → first placement in {took:?}", names[leader]);
        times[usize::from(!host_round)][usize::from(!sigkill)].push(took);
        procs[leader].wait_exit(30);
        procs[leader] = start(names[leader], &nodes[leader], args, false);
    }
    let session = bench_session_ms().map_or("the default".to_string(), |ms| format!("{ms} ms"));
    println!("failover of each role in its own processes, session timeout {session}, two agents on their defaults:");
    for (i, role) in ["hostmgr", "jobmgr + resmgr + placement"].iter().enumerate() {
        let [killed, termed] = &mut times[i];
        print_figures(&format!("  SIGKILL of the {role} leader → first placement"), killed, "p50 ≤ 2 s, p99 ≤ 3 s");
        print_figures(&format!("  SIGTERM of the {role} leader → first placement"), termed, "≤ 1 s");
    }
}
