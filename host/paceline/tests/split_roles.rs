//! Roles split across processes, through the real binary: a core
//! (`--roles jobmgr,resmgr,hostmgr`, simulated hosts) and placement engines
//! in processes of their own (`--roles placement`), active-active.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{BIN, eventually, free_port, http_get, join_args, kill_processes_working_under};

/// A child process, its stdout and stderr lines kept; SIGTERM on drop.
struct Proc {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// An agent's data dir: its task processes are killed with it on drop.
    tasks_under: Option<PathBuf>,
}

impl Proc {
    fn start(args: &[&str], ready: &str) -> Proc {
        let mut child = Command::new(BIN)
            .args(args)
            .env("PACELINE_LOG", "paceline=info,warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                }
            });
        }
        let p = Proc { child, lines, tasks_under: None };
        eventually(60, &format!("`{ready}` from paceline {args:?}"), || p.said(ready) > 0);
        p
    }

    fn said(&self, needle: &str) -> usize {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|l| l.contains(needle)).count()
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).stderr(Stdio::null()).status();
        let _ = self.child.wait();
        if let Some(dir) = &self.tasks_under {
            kill_processes_working_under(dir);
        }
    }
}

fn cli(api: u16, args: &[&str]) -> Output {
    Command::new(BIN).args(args).env("PACELINE_SERVER", format!("http://127.0.0.1:{api}")).output().expect("cli runs")
}

fn json(api: u16, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = cli(api, &all);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Starts a core (`--roles jobmgr,resmgr,hostmgr`) on four simulated hosts of
/// `cores` cores each, with its data in `dir/core`.
fn core(dir: &Path, api: u16, cores: u64) -> Proc {
    let yaml = dir.join("core.yaml");
    std::fs::write(
        &yaml,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:0\nhosts: {{provider: sim, hosts: 4, resources: {{cpu_millis: {}, memory_mib: 8192, disk_mib: 100000, gpu_milli: 0, ports: 0}}, zones: 1}}\n",
            dir.join("core").display(),
            cores * 1000
        ),
    )
    .expect("write");
    Proc::start(&["server", "--config", yaml.to_str().expect("utf-8"), "--roles", "jobmgr,resmgr,hostmgr"], "API on")
}

/// Starts a placement process `name` against the core on `api`, reading the
/// core's store, with its metrics on `metrics` (0: none).
fn engine(dir: &Path, api: u16, name: &str, metrics: u16) -> Proc {
    let yaml = dir.join(format!("{name}.yaml"));
    let listen = if metrics == 0 { String::new() } else { format!("metrics_listen: 127.0.0.1:{metrics}\n") };
    std::fs::write(
        &yaml,
        format!(
            "data_dir: {}\nstorage: {{sqlite: {{path: {}}}}}\n{listen}",
            dir.join(name).display(),
            dir.join("core/paceline.db").display()
        ),
    )
    .expect("write");
    Proc::start(
        &[
            "server",
            "--roles",
            "placement",
            "--core",
            &format!("127.0.0.1:{api}"),
            "--config",
            yaml.to_str().expect("utf-8"),
        ],
        "placement engine connected",
    )
}

/// A batch job of `n` instances of one core each, running `duration_ms` on the simulator.
fn job(dir: &Path, name: &str, n: u32, duration_ms: u64) -> String {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "name: {name}\nowner: test\npool: /default\nkind: batch\ninstance_count: {n}\ndefault_task:\n  command: work\n  env: {{SIM_DURATION_MS: \"{duration_ms}\"}}\n  resources: {{cpu_millis: 1000, memory_mib: 64, disk_mib: 10, gpu_milli: 0, ports: 0}}\n"
        ),
    )
    .expect("write");
    path.to_str().expect("utf-8").to_string()
}

fn create(api: u16, spec: &str) -> String {
    json(api, &["job", "create", spec])["id"].as_str().expect("id").to_string()
}

fn tasks(api: u16, id: &str) -> Vec<serde_json::Value> {
    json(api, &["task", "list", id]).as_array().cloned().unwrap_or_default()
}

fn all_in(api: u16, id: &str, state: &str) -> bool {
    let ts = tasks(api, id);
    !ts.is_empty() && ts.iter().all(|t| t["state"].as_str().is_some_and(|s| s.ends_with(state)))
}

#[test]
fn placement_engines_in_their_own_processes_place_for_a_core_without_overcommitting_a_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    // Four hosts of four cores: sixteen one-core tasks fill them exactly.
    let _core = core(dir, api, 4);
    // The core places nothing itself: before any engine runs, job a waits.
    let a = create(api, &job(dir, "a", 8, 600_000));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        tasks(api, &a).iter().all(|t| t["host"].as_str().unwrap_or_default().is_empty()),
        "placed with no engine: {:?}",
        tasks(api, &a)
    );

    let mut first = engine(dir, api, "p1", 0);
    let second_metrics = free_port();
    let second = engine(dir, api, "p2", second_metrics);
    eventually(60, "job a: 8 running", || all_in(api, &a, "RUNNING"));

    // One engine dies; the other keeps placing.
    first.kill9();
    let rounds_before = second.said("placement round");
    let b = create(api, &job(dir, "b", 8, 600_000));
    eventually(60, "job b: 8 running with one engine left", || all_in(api, &b, "RUNNING"));
    // The engine's log is read by a thread of this test: wait for the line
    // rather than assume it was read the moment job b runs.
    eventually(30, "the surviving engine placed job b", || second.said("placement round") > rounds_before);
    // Its own figures, on its scrape listener (an engine serves no API).
    let (code, body) = http_get(second_metrics, "/metrics", None);
    assert_eq!(code, 200, "{body}");
    let value = |line_start: &str| -> Option<f64> {
        body.lines().find(|l| l.starts_with(line_start)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    assert!(value("paceline_placement_tasks_placed_total").is_some_and(|n| n >= 8.0), "{body}");
    assert_eq!(value("paceline_membership_role_leading{role=\"placement\"}"), Some(1.0), "{body}");
    assert!(body.contains("paceline_plugin_calls_total{slot=\"placement/batch\""), "{body}");
    assert!(!body.contains("paceline_pool_"), "pools are the core's figures, not an engine's: {body}");

    // Sixteen slots, sixteen tasks: every host exactly full, none over.
    let mut per_host = std::collections::BTreeMap::<String, usize>::new();
    for t in tasks(api, &a).into_iter().chain(tasks(api, &b)) {
        *per_host.entry(t["host"].as_str().expect("placed on a host").to_string()).or_default() += 1;
    }
    assert_eq!(per_host.len(), 4, "{per_host:?}");
    assert!(per_host.values().all(|n| *n == 4), "no host holds more than its four cores: {per_host:?}");

    // A seventeenth task waits, with the engine's reason.
    let c = create(api, &job(dir, "c", 1, 500));
    std::thread::sleep(Duration::from_secs(2));
    assert!(!all_in(api, &c, "RUNNING"), "no room: job c must wait");

    // Freeing room lets it run to the end, as in the all-in-one server.
    let killed = cli(api, &["job", "kill", &a]);
    assert!(killed.status.success(), "{}", String::from_utf8_lossy(&killed.stderr));
    eventually(60, "job c SUCCEEDED once job a is gone", || {
        json(api, &["job", "get", &c])["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED"))
    });
}

#[test]
fn a_placement_process_without_a_core_or_with_an_unsupported_subset_says_so() {
    let out =
        Command::new(BIN).args(["server", "--roles", "placement"]).env_remove("PACELINE_CORE").output().expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--core"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(BIN).args(["server", "--roles", "jobmgr,placement"]).output().expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not supported"), "{}", String::from_utf8_lossy(&out.stderr));
    // The job and resource managers without a host manager to reach.
    let out = Command::new(BIN)
        .args(["server", "--roles", "jobmgr,resmgr"])
        .env_remove("PACELINE_HOSTMGR")
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hostmgr"), "{}", String::from_utf8_lossy(&out.stderr));
    // A host manager that is not there: a clear error, after a wait, not a hang.
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN)
        .args([
            "server",
            "--roles",
            "jobmgr,resmgr",
            "--hostmgr",
            &format!("127.0.0.1:{}", free_port()),
            "--api-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no host manager at"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_plugin_activated_on_the_core_reaches_a_placement_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let _core = core(dir, api, 8);
    let engine = engine(dir, api, "p", 0);
    let hosts_of = |id: &str| -> std::collections::BTreeSet<String> {
        tasks(api, id).iter().filter_map(|t| t["host"].as_str().filter(|h| !h.is_empty()).map(str::to_string)).collect()
    };
    let packed = create(api, &job(dir, "packed", 4, 600_000));
    eventually(60, "packed running", || all_in(api, &packed, "RUNNING"));
    assert_eq!(hosts_of(&packed).len(), 1, "binpack (the built-in) packs");

    let deploy =
        cli(api, &["plugin", "deploy", "placement/batch", "spread", "9", paceline_plugin_artifacts::SPREAD_PATH]);
    assert!(deploy.status.success(), "{}", String::from_utf8_lossy(&deploy.stderr));
    let activate = cli(api, &["plugin", "activate", "placement/batch", "spread@9"]);
    assert!(activate.status.success(), "{}", String::from_utf8_lossy(&activate.stderr));
    eventually(30, "the engine reloads its plugins", || engine.said("reloading plugins") > 0);
    eventually(30, "the engine is back", || engine.said("placement engine connected") > 1);
    let spread = create(api, &job(dir, "spread", 4, 600_000));
    eventually(60, "spread running", || all_in(api, &spread, "RUNNING"));
    assert!(hosts_of(&spread).len() >= 2, "spread spreads once the engine reloaded: {:?}", hosts_of(&spread));
}

#[test]
fn hello_runs_on_real_agents_with_placement_in_its_own_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let (api, agents) = (free_port(), free_port());
    let core_dir = dir.join("core");
    let _core = Proc::start(
        &[
            "server",
            "--roles",
            "jobmgr,resmgr,hostmgr",
            "--data-dir",
            core_dir.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
            "--agent-listen",
            &format!("127.0.0.1:{agents}"),
        ],
        "API on",
    );
    let _agents =
        [agent(dir, &core_dir, "a1", agents, "21000-21499"), agent(dir, &core_dir, "a2", agents, "21500-21999")];
    let _engine = engine(dir, api, "p", 0);
    eventually(30, "two agents registered", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello.yaml");
    let id = create(api, hello.to_str().expect("utf-8"));
    eventually(60, "hello SUCCEEDED", || {
        json(api, &["job", "get", &id])["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED"))
    });
    let logs = cli(api, &["task", "logs", &id, "1"]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("hello from instance"),
        "{}",
        String::from_utf8_lossy(&logs.stdout)
    );
}

// ---- the host manager in a process of its own ----------------------------

/// Starts `--roles hostmgr` on `api` with its data in `dir/<name>`; `hosts`
/// is the YAML of its provider.
fn host_manager(dir: &Path, name: &str, api: u16, agents: u16, hosts: &str) -> Proc {
    let yaml = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &yaml,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:{agents}\nheartbeat_timeout_ms: 10000\nagent_heartbeat_ms: 500\nmetrics_per_host: true\nhosts: {hosts}\n",
            dir.join(name).display()
        ),
    )
    .expect("write");
    Proc::start(&["server", "--config", yaml.to_str().expect("utf-8"), "--roles", "hostmgr"], "host manager; API on")
}

/// Starts `--roles jobmgr,resmgr,placement` on `api` against the host manager on `hostmgr`.
fn job_manager(dir: &Path, api: u16, hostmgr: u16) -> Proc {
    Proc::start(
        &[
            "server",
            "--roles",
            "jobmgr,resmgr,placement",
            "--hostmgr",
            &format!("127.0.0.1:{hostmgr}"),
            "--data-dir",
            dir.join("jobs").to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
        ],
        "hosts from the host manager",
    )
}

fn sim_hosts(n: usize, cores: u64) -> String {
    format!(
        "{{provider: sim, hosts: {n}, resources: {{cpu_millis: {}, memory_mib: 8192, disk_mib: 100000, gpu_milli: 0, ports: 0}}, zones: 1}}",
        cores * 1000
    )
}

fn runs_of(api: u16, id: &str) -> std::collections::BTreeSet<String> {
    tasks(api, id).iter().filter_map(|t| t["run_id"].as_str().filter(|r| !r.is_empty()).map(str::to_string)).collect()
}

#[test]
fn a_job_manager_schedules_on_a_host_manager_in_another_process_and_survives_its_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let (hm_api, jm_api) = (free_port(), free_port());
    let mut hm = host_manager(dir, "hm", hm_api, 0, &sim_hosts(4, 4));
    let _jm = job_manager(dir, jm_api, hm_api);

    // The job manager's API lists the host manager's hosts.
    eventually(30, "four sim hosts through the job manager", || {
        json(jm_api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 4)
    });
    // Maintenance through the job manager's API reaches the host manager,
    // and the answer already shows the new state.
    let host = "sim-z0-00003";
    let drained = json(jm_api, &["host", "drain", host]);
    assert!(drained.to_string().contains("DRAIN"), "{drained}");
    assert!(json(hm_api, &["host", "get", host])["state"].as_str().is_some_and(|s| s.contains("DRAIN")));
    let up = cli(jm_api, &["host", "up", host]);
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    assert_eq!(json(hm_api, &["host", "get", host])["state"].as_str(), Some("UP"));

    // Restarted when lost (as when its host manager and simulated hosts die).
    let spec = job(dir, "a", 8, 600_000);
    let text = std::fs::read_to_string(&spec).expect("read")
        + "  restart_policy: {on_failure: true, max_restarts: 3, backoff_secs: 1}\n";
    std::fs::write(&spec, text).expect("write");
    let a = create(jm_api, &spec);
    eventually(60, "job a: 8 running", || all_in(jm_api, &a, "RUNNING"));
    // Both APIs see the allocation the launches made (8 of 16 cores).
    let allocated = |api: u16| -> u64 {
        json(api, &["host", "list"])
            .as_array()
            .map(|hs| hs.iter().filter_map(|h| h["allocated"]["cpu_millis"].as_u64()).sum())
            .unwrap_or(0)
    };
    eventually(10, "8 cores allocated on the host manager", || allocated(hm_api) == 8_000);
    eventually(10, "and as the job manager sees it", || allocated(jm_api) == 8_000);
    let a_runs = runs_of(jm_api, &a);
    assert_eq!(a_runs.len(), 8, "{a_runs:?}");
    // The host manager serves its own figures on its API port.
    let (code, body) = http_get(hm_api, "/metrics", None);
    assert_eq!(code, 200, "{body}");
    for line in [
        "paceline_host_runs 8",
        "paceline_hosts{state=\"up\",reachable=\"true\"} 4",
        "paceline_membership_role_leading{role=\"hostmgr\"} 1",
    ] {
        assert!(body.lines().any(|l| l == line), "{line} in\n{body}");
    }
    assert!(body.contains("paceline_api_requests_total{"), "the job manager's calls are counted: {body}");
    assert!(body.contains("paceline_store_op_seconds"), "{body}");
    assert!(!body.contains("paceline_pool_"), "pools are the job manager's figures: {body}");
    // Asked for (`metrics_per_host: true`): each host's figures, by name.
    let per_host: Vec<&str> = body.lines().filter(|l| l.starts_with("paceline_host_allocated{host=")).collect();
    assert_eq!(per_host.len(), 4 * 4, "4 hosts × 4 kinds: {per_host:?}");
    let cpu_allocated: f64 = per_host
        .iter()
        .filter(|l| l.contains("kind=\"cpu\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(cpu_allocated, 8_000.0, "job a's 8 cores: {per_host:?}");
    // Not asked for on the job manager: no label names a host there.
    let (_, jm_body) = http_get(jm_api, "/metrics", None);
    assert!(jm_body.contains("paceline_hosts{") && !jm_body.contains("host=\""), "{jm_body}");

    // The host manager dies; its simulated hosts and their runs die with it.
    // A new one starts on the same port: the job manager resubscribes with
    // its expectations, the new host manager reports the runs it does not
    // have LOST, and the job manager runs them again.
    hm.kill9();
    let _hm2 = host_manager(dir, "hm", hm_api, 0, &sim_hosts(4, 4));
    eventually(60, "job a running again on the new host manager", || {
        let runs = runs_of(jm_api, &a);
        all_in(jm_api, &a, "RUNNING") && runs.len() == 8 && runs.is_disjoint(&a_runs)
    });
    // Each first run was reported LOST by the new host manager (it did not
    // have it), not forgotten: the task's history says so.
    let history = json(jm_api, &["task", "events", &a, "0"]);
    assert!(history.to_string().contains("RUN_MISSING"), "{history}");
    eventually(10, "its hosts hold job a's new runs", || allocated(hm_api) == 8_000);
    let b = create(jm_api, &job(dir, "b", 4, 500));
    eventually(60, "job b SUCCEEDED after the restart", || {
        json(jm_api, &["job", "get", &b])["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED"))
    });
}

/// An agent joining the host manager whose data dir is `hm_data`.
fn agent(dir: &Path, hm_data: &Path, name: &str, agents: u16, ports: &str) -> Proc {
    let join = join_args(&hm_data.join("pki"));
    let join: Vec<&str> = join.iter().map(String::as_str).collect();
    let mut agent = Proc::start(
        &[
            "agent",
            join[0],
            join[1],
            join[2],
            join[3],
            "--manager",
            &format!("http://127.0.0.1:{agents}"),
            "--hostname",
            name,
            "--data-dir",
            dir.join(name).to_str().expect("utf-8"),
            "--cpu-millis",
            "2000",
            "--memory-mib",
            "2048",
            "--port-range",
            ports,
            "--usage-interval-ms",
            "500",
        ],
        "registered with the host manager",
    );
    agent.tasks_under = Some(dir.join(name));
    agent
}

#[test]
fn real_agents_keep_their_runs_when_the_host_manager_or_the_job_manager_is_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let (hm_api, hm_agents, jm_api) = (free_port(), free_port(), free_port());
    let mut hm = host_manager(dir, "hm", hm_api, hm_agents, "{provider: agent}");
    let mut jm = job_manager(dir, jm_api, hm_api);
    let hm_data = dir.join("hm");
    let _agents =
        [agent(dir, &hm_data, "a1", hm_agents, "22000-22499"), agent(dir, &hm_data, "a2", hm_agents, "22500-22999")];
    eventually(30, "two agents through the job manager", || {
        json(jm_api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2)
    });

    // The end-to-end scenario of the all-in-one server: hello, and its logs.
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello.yaml");
    let id = create(jm_api, hello.to_str().expect("utf-8"));
    eventually(60, "hello SUCCEEDED", || {
        json(jm_api, &["job", "get", &id])["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED"))
    });
    let logs = cli(jm_api, &["task", "logs", &id, "1"]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("hello from instance"),
        "{}",
        String::from_utf8_lossy(&logs.stdout)
    );

    // Long runs, then each manager is killed in turn: the runs stay where
    // they are, under the same run ids, and nothing is launched twice.
    let sleeper = dir.join("sleeper.yaml");
    std::fs::write(
        &sleeper,
        "name: sleeper\nowner: test\npool: /default\nkind: batch\ninstance_count: 4\ndefault_task:\n  command: sleep\n  args: [\"600\"]\n  resources: {cpu_millis: 200, memory_mib: 32, disk_mib: 10, gpu_milli: 0, ports: 0}\n",
    )
    .expect("write");
    let s = create(jm_api, sleeper.to_str().expect("utf-8"));
    eventually(60, "sleepers running", || all_in(jm_api, &s, "RUNNING"));
    let runs = runs_of(jm_api, &s);
    assert_eq!(runs.len(), 4);
    // What the agents measured crosses paceline.hostmgr.v1 to the job
    // manager's API, beside what each run reserved.
    eventually(30, "measured use through the job manager", || {
        let ts = tasks(jm_api, &s);
        ts.len() == 4 && ts.iter().all(|t| t["usage"].is_object() && t["reserved"]["cpu_millis"] == 200)
    });

    hm.kill9();
    let _hm2 = host_manager(dir, "hm", hm_api, hm_agents, "{provider: agent}");
    eventually(30, "both agents back with the new host manager", || {
        json(hm_api, &["host", "list"])
            .as_array()
            .is_some_and(|h| h.len() == 2 && h.iter().all(|h| h["reachable"].as_bool() == Some(true)))
    });
    // Runs adopted, not lost: the job manager keeps them RUNNING, same ids.
    std::thread::sleep(Duration::from_secs(3));
    assert!(all_in(jm_api, &s, "RUNNING"), "{:?}", tasks(jm_api, &s));
    assert_eq!(runs_of(jm_api, &s), runs, "the same runs, none relaunched");
    eventually(10, "the new host manager holds them", || {
        json(hm_api, &["host", "list"]).as_array().map(|hs| hs.iter().filter_map(|h| h["runs"].as_u64()).sum::<u64>())
            == Some(4)
    });

    jm.kill9();
    let _jm2 = job_manager(dir, jm_api, hm_api);
    std::thread::sleep(Duration::from_secs(3));
    assert!(all_in(jm_api, &s, "RUNNING"), "{:?}", tasks(jm_api, &s));
    assert_eq!(runs_of(jm_api, &s), runs, "the same runs after the job manager's restart");
    // And it still schedules: a second hello succeeds through both new processes.
    let again = create(jm_api, hello.to_str().expect("utf-8"));
    eventually(60, "hello SUCCEEDED again", || {
        json(jm_api, &["job", "get", &again])["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED"))
    });
    // Each run of the sleepers exists once, on one agent.
    let mut sandboxes = std::collections::BTreeMap::<String, usize>::new();
    for a in ["a1", "a2"] {
        for e in std::fs::read_dir(dir.join(a).join("runs")).expect("runs dir").flatten() {
            *sandboxes.entry(e.file_name().to_string_lossy().into_owned()).or_default() += 1;
        }
    }
    let mine: std::collections::BTreeSet<String> = sandboxes
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{s}-")))
        .map(|(k, n)| {
            assert_eq!(*n, 1, "{k} on two agents");
            k.clone()
        })
        .collect();
    assert_eq!(mine, runs, "the agents ran exactly the runs the job manager reports");
}
