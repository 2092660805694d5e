//! Highly available `paceline server` on a real ZooKeeper: real server binaries sharing one
//! SQLite file (only the leader opens it), real agents given every server's address, the
//! real CLI following the leader.
//!
//! ZooKeeper: `PACELINE_ZOOKEEPER` when set (scripts/test sets it), otherwise one started
//! with deploy/zookeeper/zookeeper.sh in a temp dir on a free port. The tests run one at a
//! time (they start many processes on a small machine, and a 3 s session timeout must not
//! be starved).
//!
//! One binary (`cargo test --test ha_zookeeper`); this file holds ZooKeeper, the processes
//! and the CLI helpers every test uses; `failover` the failover tests, `faults` what goes
//! wrong around ZooKeeper, `bench` the failover benchmarks (ignored by default).

#[path = "../common/mod.rs"]
mod common;

mod bench;
mod deposed;
mod failover;
mod faults;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{BIN, eventually, free_port, join_args, kill_processes_working_under, ok};

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
    node_with(dir, name, zk, cluster, data, "")
}

/// A server of the test cluster with `extra` (whole YAML lines) added to its
/// configuration: another store, a shared agent CA.
fn node_with(dir: &Path, name: &str, zk: &str, cluster: &str, data: &Path, extra: &str) -> Node {
    let (api, agent) = (free_port(), free_port());
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &config,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:{agent}\nmember_id: {name}\n\
             heartbeat_timeout_ms: 5000\nagent_heartbeat_ms: 500\n{extra}\
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

fn start_with_roles(name: &str, n: &Node, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(BIN);
    cmd.args(["server", "--config", n.config.to_str().expect("utf-8")])
        .args(extra)
        .env("PACELINE_LOG", "paceline=info,paceline_membership=info,warn");
    Proc::spawn(name, &mut cmd, &n.log)
}
