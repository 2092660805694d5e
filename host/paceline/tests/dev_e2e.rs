//! End to end through the real binary: `paceline dev` (or `paceline server`
//! with agents started here) and the `paceline` CLI, with real agents
//! running real processes.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{BIN, cli, eventually, free_port, join_args, json, ok, test_certificates};

/// A child process stopped with SIGTERM (or SIGKILL with `kill9`) when dropped.
struct Proc(Child, Option<std::path::PathBuf>);

impl Proc {
    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).stderr(Stdio::null()).status();
        let _ = self.0.wait();
        // A dev's agents leave their tasks running when dev is killed.
        if let Some(dir) = &self.1 {
            common::kill_processes_working_under(dir);
        }
    }
}

/// Starts `paceline <args>` and waits for the line that says the API is up.
fn start(args: &[&str], ready: &str) -> Proc {
    start_with_path(args, ready, None)
}

/// [`start`], with a folder put first on the child's PATH.
fn start_with_path(args: &[&str], ready: &str, path_first: Option<&Path>) -> Proc {
    let mut cmd = Command::new(BIN);
    if let Some(first) = path_first {
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", first.display()));
    }
    let mut child = cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let ready = ready.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains(&ready) {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the server came up");
    Proc(child, None)
}

fn dev(dir: &Path, api: u16) -> Proc {
    let data = dir.join("dev");
    let mut dev = start(
        &[
            "dev",
            "--agents",
            "2",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
        ],
        "API on",
    );
    dev.1 = Some(data);
    dev
}

fn examples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn example(name: &str) -> String {
    examples().join(name).to_str().expect("utf-8").to_string()
}

fn job_state(api: u16, id: &str) -> String {
    json(api, &["job", "get", id])["status"]["state"].as_str().unwrap_or_default().to_string()
}

fn tasks(api: u16, id: &str) -> Vec<serde_json::Value> {
    json(api, &["task", "list", id]).as_array().cloned().unwrap_or_default()
}

#[test]
fn hello_runs_to_success_on_two_agents_and_its_output_is_readable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = dev(dir.path(), api);
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    let created = cli(api, &["job", "create", &example("hello.yaml")]);
    let note = String::from_utf8_lossy(&created.stderr).to_string();
    let id = ok(created);
    // hello.yaml names no owner: on a cluster without tokens it is the OS user.
    let owner = json(api, &["job", "get", &id])["spec"]["owner"].as_str().unwrap_or_default().to_string();
    assert!(!owner.is_empty() && owner != "anonymous", "owner {owner:?}");
    if let Ok(user) = std::env::var("USER") {
        assert_eq!(owner, user.trim());
    }
    assert!(note.contains(&format!("owner {owner}")), "job create shows the owner: {note}");
    eventually(60, "hello SUCCEEDED", || job_state(api, &id).ends_with("SUCCEEDED"));
    let ts = tasks(api, &id);
    assert_eq!(ts.len(), 3);
    for i in 0..3 {
        let out = ok(cli(api, &["task", "logs", &id, &i.to_string()]));
        assert_eq!(out, format!("hello from instance {id}-{i}"));
    }
    // Its events: each task scheduled on an agent, the job's end.
    let table = ok(cli(api, &["job", "events", &id]));
    assert!(table.starts_with("LAST SEEN"), "{table}");
    assert_eq!(table.lines().filter(|l| l.contains("Scheduled")).count(), 3, "{table}");
    assert!(table.contains("job SUCCEEDED"), "{table}");
    let task0: serde_json::Value =
        serde_json::from_str(&ok(cli(api, &["job", "events", &id, "--task", "0", "--json"])))
            .expect("--json prints JSON");
    let rows = task0.as_array().expect("a list");
    assert!(!rows.is_empty() && rows.iter().all(|e| e["object"] == "task 0"), "{task0}");
    assert!(rows.iter().any(|e| e["reason"] == "Scheduled" && e["type"] == "Normal"), "{task0}");
}

/// Both local agents of `dev` see the machine's GPUs (here an
/// `nvidia-smi` that lists two); only the first registers them, or the
/// cluster would grant each device once per agent.
#[test]
fn dev_gives_the_machines_gpus_to_its_first_agent_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let smi = bin.join("nvidia-smi");
    std::fs::write(&smi, "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559'\necho 'NVIDIA H100 80GB HBM3, 81559'\n")
        .expect("writes nvidia-smi");
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let api = free_port();
    let data = dir.path().join("dev");
    let mut dev = start_with_path(
        &["dev", "--data-dir", data.to_str().expect("utf-8"), "--api-listen", &format!("127.0.0.1:{api}")],
        "API on",
        Some(&bin),
    );
    dev.1 = Some(data);
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    let first = json(api, &["host", "get", "dev-1"]);
    let second = json(api, &["host", "get", "dev-2"]);
    assert_eq!(first["total"]["gpu_milli"], 2000, "{first}");
    let models: Vec<_> = first["gpus"].as_array().expect("devices").iter().map(|g| g["model"].clone()).collect();
    assert_eq!(models, vec![serde_json::json!("NVIDIA H100 80GB HBM3"); 2], "{first}");
    assert_eq!(first["attributes"]["gpu_model"], "NVIDIA H100 80GB HBM3", "{first}");
    assert_eq!(second["total"]["gpu_milli"], 0, "{second}");
    assert!(second["gpus"].as_array().is_none_or(|g| g.is_empty()), "{second}");
    assert!(second["attributes"].get("gpu_model").is_none(), "a host without GPUs names no model: {second}");
}

/// Live processes (not zombies) whose command line contains every one of
/// `needles`.
fn processes_with(needles: &[&str]) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !needles.iter().all(|n| cmdline.contains(n)) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()).unwrap_or("X");
        if state != "Z" && state != "X" {
            out.push(pid);
        }
    }
    out
}

#[test]
fn a_dev_killed_with_sigkill_takes_its_agents_along_and_a_new_dev_finds_their_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let agents_dir = dir.path().join("dev").join("agents");
    let agents_dir = agents_dir.to_str().expect("utf-8").to_string();
    // An agent of this dev: `paceline agent --manager … --data-dir <dir>/dev/agents/…`.
    let agents = || processes_with(&[BIN, " agent ", "--manager", &agents_dir]);
    let mut first = dev(dir.path(), api);
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    assert_eq!(agents().len(), 2, "dev started two agents");
    let spec = std::fs::read_to_string(example("hello.yaml"))
        .expect("example")
        .replace("echo hello from instance $PACELINE_TASK_ID", "sleep 300");
    let file = dir.path().join("sleepy.yaml");
    std::fs::write(&file, &spec).expect("spec");
    let id = ok(cli(api, &["job", "create", file.to_str().expect("utf-8")]));
    let running = |id: &str| {
        let ts = tasks(api, id);
        ts.len() == 3 && ts.iter().all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")))
    };
    eventually(60, "three tasks running", || running(&id));
    let runs: Vec<serde_json::Value> = tasks(api, &id).iter().map(|t| t["run_id"].clone()).collect();

    first.kill9();
    eventually(30, "no agent of the SIGKILLed dev still runs", || agents().is_empty());

    // A new dev on the same data dir starts two agents that re-adopt the runs.
    let _second = dev(dir.path(), api);
    eventually(60, "the same runs carry on under the new dev", || {
        running(&id) && tasks(api, &id).iter().map(|t| t["run_id"].clone()).collect::<Vec<_>>() == runs
    });
    assert_eq!(agents().len(), 2, "two agents, not four");
    // `job delete` never orphans a running task: refused while the tasks run
    // on the real agents, and they carry on under the same runs.
    let refused = cli(api, &["job", "delete", &id]);
    assert!(!refused.status.success(), "deleted with live tasks: {}", String::from_utf8_lossy(&refused.stdout));
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("still has 3 task(s)"), "the refusal says why: {why}");
    assert!(running(&id), "nothing was stopped by the refused delete");
    assert_eq!(tasks(api, &id).iter().map(|t| t["run_id"].clone()).collect::<Vec<_>>(), runs);
    ok(cli(api, &["job", "kill", &id]));
    eventually(30, "killed", || {
        tasks(api, &id).iter().all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("KILLED")))
    });
    // Once every task has ended the job can go, with its history.
    ok(cli(api, &["job", "delete", &id]));
    let gone = cli(api, &["job", "get", &id]);
    assert!(!gone.status.success(), "deleted: {}", String::from_utf8_lossy(&gone.stdout));
}

#[test]
fn a_service_rolls_through_an_update_in_batches_and_is_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = dev(dir.path(), api);
    let id = ok(cli(api, &["job", "create", &example("web.yaml")]));
    let running = |api: u16, id: &str, run: u64| {
        let ts = tasks(api, id);
        ts.len() == 4
            && ts
                .iter()
                .all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")) && t["run"].as_u64() == Some(run))
    };
    eventually(60, "4 instances running", || running(api, &id, 1));
    let v2 = dir.path().join("web-v2.yaml");
    let spec = std::fs::read_to_string(example("web.yaml")).expect("example");
    std::fs::write(&v2, spec.replace("--bind 127.0.0.1", "--bind 127.0.0.1 --directory /tmp")).expect("v2");
    let dry = ok(cli(api, &["job", "update", &id, v2.to_str().expect("utf-8"), "--dry-run"]));
    assert!(dry.contains("--directory /tmp"), "the dry run shows the diff: {dry}");
    assert!(running(api, &id, 1), "a dry run changes nothing");
    ok(cli(api, &["job", "update", &id, v2.to_str().expect("utf-8")]));
    // Batches of two: at no point are all four instances on the new run at
    // once before the first two are.
    let mut max_in_flight = 0;
    eventually(90, "the update rolled through", || {
        let ts = tasks(api, &id);
        let moving = ts
            .iter()
            .filter(|t| t["run"].as_u64() == Some(2) && !t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")))
            .count();
        max_in_flight = max_in_flight.max(moving);
        running(api, &id, 2)
    });
    assert!(max_in_flight <= 2, "batches of two: {max_in_flight} moving at once");
    eventually(30, "the update SUCCEEDED", || {
        json(api, &["job", "get", &id])["update"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED"))
    });
    ok(cli(api, &["job", "kill", &id]));
    eventually(30, "all KILLED", || {
        tasks(api, &id).iter().all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("KILLED")))
    });
}

/// A job file in `dir`: `instances` of `command` (through `sh -c`) in /default.
fn shell_job_file(dir: &Path, name: &str, instances: u32, command: &str, cpu_millis: u64) -> String {
    let path = dir.join(format!("{name}.yaml"));
    let body = format!(
        "name: {name}\npool: /default\ninstance_count: {instances}\ndefault_task:\n  command: sh\n  args: [\"-c\", {command:?}]\n  resources: {{cpu_millis: {cpu_millis}, memory_mib: 16}}\n"
    );
    std::fs::write(&path, body).expect("job file");
    path.to_str().expect("utf-8").to_string()
}

#[test]
fn job_run_wait_exits_with_the_jobs_outcome_and_scale_sets_the_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = dev(dir.path(), api);
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));

    // A batch job that succeeds: exit 0, the job printed as it ended.
    let good = shell_job_file(dir.path(), "good", 2, "exit 0", 100);
    let out = cli(api, &["job", "run", &good, "--wait", "-o", "json"]);
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(printed["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")), "{printed}");

    // One that fails: exit 4, and the reason on stderr.
    let bad = shell_job_file(dir.path(), "bad", 1, "exit 3", 100);
    let out = cli(api, &["job", "run", &bad, "--wait"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("ended FAILED"), "{stderr}");

    // A service: the wait ends once every instance runs and passed its
    // health check.
    let out = cli(api, &["job", "run", &example("web.yaml"), "--wait", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let web: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the job as JSON");
    let id = web["id"].as_str().expect("an id").to_string();
    let ts = tasks(api, &id);
    assert_eq!(ts.len(), 4);
    for t in &ts {
        assert!(t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")), "{t}");
        assert_eq!(t["healthy"], serde_json::json!(true), "{t}");
    }

    // Scale: the count changes through an update, and the instances follow.
    let scaled = ok(cli(api, &["job", "scale", &id, "2"]));
    assert!(scaled.contains("4 → 2"), "{scaled}");
    eventually(60, "two instances left running", || {
        let running =
            tasks(api, &id).iter().filter(|t| t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING"))).count();
        running == 2 && json(api, &["job", "get", &id])["spec"]["instance_count"].as_u64() == Some(2)
    });

    // A job that cannot be placed: the wait times out with 5 and leaves it be.
    let huge = shell_job_file(dir.path(), "huge", 1, "sleep 60", 1_000_000);
    let out = cli(api, &["job", "run", &huge, "--wait", "--timeout", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("still"), "{stderr}");
    ok(cli(api, &["job", "kill", &id]));
}

#[test]
fn pool_apply_makes_the_tree_match_a_file_and_a_second_apply_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = dev(dir.path(), api);
    let file = example("pools.yaml");
    let dry = ok(cli(api, &["pool", "apply", &file, "--dry-run"]));
    assert!(dry.contains("+ /team-a would be created"), "{dry}");
    assert!(json(api, &["pool", "list"])["pools"].as_array().is_some_and(|p| p.iter().all(|p| p["path"] != "/team-a")));
    let first = ok(cli(api, &["pool", "apply", &file]));
    for path in ["/team-a", "/team-a/services", "/team-a/batch"] {
        assert!(first.contains(&format!("+ {path} created")), "{first}");
    }
    let again = ok(cli(api, &["pool", "apply", &file]));
    assert!(again.contains("nothing to change"), "idempotent: {again}");
    // One field changed in the file: only that pool, only that field.
    let changed = dir.path().join("pools.yaml");
    let text = std::fs::read_to_string(&file).expect("example").replace("share: 2 ", "share: 3 ");
    std::fs::write(&changed, text).expect("write");
    let changed = changed.to_str().expect("utf-8");
    let plan = ok(cli(api, &["pool", "apply", changed, "--dry-run", "-o", "json"]));
    let plan: serde_json::Value = serde_json::from_str(&plan).expect("json");
    let changes: Vec<(&str, &str)> = plan["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .map(|p| (p["path"].as_str().unwrap_or_default(), p["change"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(changes, vec![("/team-a", "update"), ("/team-a/services", "unchanged"), ("/team-a/batch", "unchanged")]);
    assert_eq!(json(api, &["pool", "get", "/team-a"])["spec"]["share"], 2, "a dry run sends nothing");
    let applied = ok(cli(api, &["pool", "apply", changed]));
    assert!(applied.contains("~ /team-a updated") && applied.contains("share: 2 → 3"), "{applied}");
    assert_eq!(json(api, &["pool", "get", "/team-a"])["spec"]["share"], 3);
    // A refusal names the pool and what was applied before it.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "pools:\n  - path: /team-b\n  - path: /nowhere/child\n").expect("write");
    let out = cli(api, &["pool", "apply", bad.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("/nowhere/child") && stderr.contains("applied before it: /team-b"), "{stderr}");
}

#[test]
fn a_plugin_deployed_through_the_cli_changes_placement_and_rollback_restores_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = dev(dir.path(), api);
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    let hosts_of = |id: &str| -> std::collections::BTreeSet<String> {
        tasks(api, id).iter().filter_map(|t| t["host"].as_str().filter(|h| !h.is_empty()).map(str::to_string)).collect()
    };
    let placed = |id: &str| {
        let ts = tasks(api, id);
        ts.len() == 4 && ts.iter().all(|t| t["host"].as_str().is_some_and(|h| !h.is_empty()))
    };
    // A long batch job of 4 small instances: binpack (the default) packs them on one host.
    let spec = std::fs::read_to_string(example("hello.yaml"))
        .expect("example")
        .replace("instance_count: 3", "instance_count: 4")
        .replace("echo hello from instance $PACELINE_TASK_ID", "sleep 30");
    let file = dir.path().join("packed.yaml");
    std::fs::write(&file, &spec).expect("spec");
    let packed = ok(cli(api, &["job", "create", file.to_str().expect("utf-8")]));
    eventually(30, "placed", || placed(&packed));
    assert_eq!(hosts_of(&packed).len(), 1, "binpack packs");

    ok(cli(api, &["plugin", "deploy", "placement/batch", "spread", "9", paceline_plugin_artifacts::SPREAD_PATH]));
    ok(cli(api, &["plugin", "activate", "placement/batch", "spread@9"]));
    let spread = ok(cli(api, &["job", "create", file.to_str().expect("utf-8")]));
    eventually(30, "placed", || placed(&spread));
    assert_eq!(hosts_of(&spread).len(), 2, "spread spreads from the next round on");

    ok(cli(api, &["plugin", "rollback", "placement/batch"]));
    ok(cli(api, &["job", "kill", &packed]));
    ok(cli(api, &["job", "kill", &spread]));
    eventually(30, "killed", || {
        [&packed, &spread]
            .iter()
            .all(|id| tasks(api, id).iter().all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("KILLED"))))
    });
    let again = ok(cli(api, &["job", "create", file.to_str().expect("utf-8")]));
    eventually(30, "placed", || placed(&again));
    assert_eq!(hosts_of(&again).len(), 1, "rolled back to binpack");
}

#[test]
fn bad_input_is_refused_with_a_clear_error_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = dev(dir.path(), api);
    let bad_yaml = dir.path().join("bad.yaml");
    std::fs::write(&bad_yaml, "name: x\n  owner: [oops").expect("write");
    let unknown_pool = dir.path().join("pool.yaml");
    std::fs::write(
        &unknown_pool,
        std::fs::read_to_string(example("hello.yaml")).expect("example").replace("pool: /default", "pool: /nowhere"),
    )
    .expect("write");
    let negative = dir.path().join("negative.yaml");
    std::fs::write(
        &negative,
        std::fs::read_to_string(example("hello.yaml")).expect("example").replace("cpu_millis: 100", "cpu_millis: -5"),
    )
    .expect("write");
    let not_wasm = dir.path().join("plugin.wasm");
    std::fs::write(&not_wasm, b"this is not a component").expect("write");
    for (args, needle) in [
        (vec!["job", "create", bad_yaml.to_str().expect("utf-8")], "bad.yaml"),
        (vec!["job", "create", unknown_pool.to_str().expect("utf-8")], "pool"),
        (vec!["job", "create", negative.to_str().expect("utf-8")], "cpu_millis"),
        (
            vec!["plugin", "deploy", "placement/batch", "junk", "1", not_wasm.to_str().expect("utf-8")],
            "not a WebAssembly",
        ),
    ] {
        let out = cli(api, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(err.contains("error") && err.contains(needle), "{args:?}: the error says what is wrong: {err}");
    }
    assert_eq!(json(api, &["job", "list"]).as_array().map(Vec::len), Some(0), "no job was created");
    let plugins = ok(cli(api, &["plugin", "list"]));
    assert!(!plugins.contains("junk"), "no plugin was stored: {plugins}");
}

#[test]
fn a_server_killed_and_restarted_carries_on_without_launching_anything_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, agents_port) = (free_port(), free_port());
    let data = dir.path().join("server");
    let server_args = |data: &Path| {
        vec![
            "server".to_string(),
            "--data-dir".into(),
            data.to_str().expect("utf-8").into(),
            "--api-listen".into(),
            format!("127.0.0.1:{api}"),
            "--agent-listen".into(),
            format!("127.0.0.1:{agents_port}"),
        ]
    };
    let args = server_args(&data);
    let mut server = start(&args.iter().map(String::as_str).collect::<Vec<_>>(), "API on");
    let mut agents = Vec::new();
    let join = join_args(&data.join("pki"));
    // Two agents on one machine: distinct port ranges, as on two machines, and
    // apart from the ranges `paceline dev` gives its agents (20000 up), which the
    // other tests here run beside this one (a shared range made a task fail to
    // bind its port and be relaunched: this test's one flake).
    for (name, ports) in [("a1", "42000-42499"), ("a2", "42500-42999")] {
        let cfg = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&cfg, "heartbeat_interval_ms: 500\nreconnect_initial_ms: 100\nreconnect_max_ms: 500\n")
            .expect("config");
        let child = Command::new(BIN)
            .args([
                "agent",
                "--config",
                cfg.to_str().expect("utf-8"),
                "--manager",
                &format!("http://127.0.0.1:{agents_port}"),
                "--hostname",
                name,
            ])
            .args([
                "--data-dir",
                dir.path().join(name).to_str().expect("utf-8"),
                "--cpu-millis",
                "2000",
                "--memory-mib",
                "2048",
                "--port-range",
                ports,
            ])
            .args(&join)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent");
        agents.push(Proc(child, Some(dir.path().join(name))));
    }
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    let spec = std::fs::read_to_string(example("web.yaml")).expect("example");
    let file = dir.path().join("web.yaml");
    std::fs::write(&file, spec).expect("spec");
    let id = ok(cli(api, &["job", "create", file.to_str().expect("utf-8")]));
    let all_running_run1 = |api: u16| {
        let ts = tasks(api, &id);
        ts.len() == 4
            && ts
                .iter()
                .all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")) && t["run"].as_u64() == Some(1))
    };
    eventually(60, "4 running", || all_running_run1(api));
    let before: Vec<serde_json::Value> = tasks(api, &id).iter().map(|t| t["run_id"].clone()).collect();

    server.kill9();
    std::thread::sleep(Duration::from_secs(1));
    let _server = start(&args.iter().map(String::as_str).collect::<Vec<_>>(), "API on");
    eventually(30, "agents back", || {
        json(api, &["host", "list"])
            .as_array()
            .is_some_and(|h| h.len() == 2 && h.iter().all(|h| h["reachable"].as_bool() == Some(true)))
    });
    // Give reconciliation and the loops time to act, then check nothing moved.
    std::thread::sleep(Duration::from_secs(3));
    assert!(all_running_run1(api), "the same runs carry on: {:?}", tasks(api, &id));
    let after: Vec<serde_json::Value> = tasks(api, &id).iter().map(|t| t["run_id"].clone()).collect();
    assert_eq!(before, after, "nothing launched twice");
    let job = json(api, &["job", "get", &id]);
    assert!(job["status"]["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")), "{job}");
    // And it still works: a new job runs.
    let hello = ok(cli(api, &["job", "create", &example("hello.yaml")]));
    eventually(60, "hello SUCCEEDED after the restart", || job_state(api, &hello).ends_with("SUCCEEDED"));
    ok(cli(api, &["job", "kill", &id]));
    eventually(30, "killed", || {
        tasks(api, &id).iter().all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("KILLED")))
    });
    drop(agents);
}

#[test]
fn pools_share_by_their_rules_and_an_underserved_pool_preempts_borrowed_capacity() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, agents_port) = (free_port(), free_port());
    let config = dir.path().join("server.yaml");
    std::fs::write(
        &config,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:{agents_port}\ndefault_pool: false\n",
            dir.path().join("server").display()
        ),
    )
    .expect("config");
    let _server = start(&["server", "--config", config.to_str().expect("utf-8")], "API on");
    let mut agents = Vec::new();
    let join = join_args(&dir.path().join("server").join("pki"));
    for (name, ports) in [("p1", "43000-43499"), ("p2", "43500-43999")] {
        let child = Command::new(BIN)
            .args([
                "agent",
                "--manager",
                &format!("http://127.0.0.1:{agents_port}"),
                "--hostname",
                name,
                "--port-range",
                ports,
            ])
            .args([
                "--data-dir",
                dir.path().join(name).to_str().expect("utf-8"),
                "--cpu-millis",
                "1000",
                "--memory-mib",
                "2048",
            ])
            .args(&join)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent");
        agents.push(Proc(child, Some(dir.path().join(name))));
    }
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    // Two pools, one core reserved each, equal shares.
    let pool = dir.path().join("pool.yaml");
    std::fs::write(&pool, "reservation: {cpu_millis: 1000, memory_mib: 1024, disk_mib: 1000}\nshare: 1\n")
        .expect("pool");
    for p in ["/a", "/b"] {
        ok(cli(api, &["pool", "create", p, pool.to_str().expect("utf-8")]));
    }
    let job = |name: &str, pool: &str, n: u32, priority: u32, preemptible: bool| {
        let spec = format!(
            "name: {name}\nowner: t\npool: {pool}\nkind: batch\ninstance_count: {n}\nsla: {{priority: {priority}, preemptible: {preemptible}}}\n\
             default_task:\n  command: sleep\n  args: [\"300\"]\n  resources: {{cpu_millis: 500, memory_mib: 64, disk_mib: 10, gpu_milli: 0, ports: 0}}\n  kill_grace_period_secs: 1\n"
        );
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, spec).expect("spec");
        ok(cli(api, &["job", "create", file.to_str().expect("utf-8")]))
    };
    let running = |id: &str| {
        tasks(api, id).iter().filter(|t| t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING"))).count()
    };
    let entitlement = |path: &str| -> u64 {
        let pools = json(api, &["pool", "list"]);
        pools["pools"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["path"] == path)
            .map(|p| p["entitlement"]["cpu_millis"].as_u64().unwrap_or(0))
            .unwrap_or(0)
    };
    // /a borrows /b's idle core: four half-core tasks run.
    let borrower = job("borrower", "/a", 4, 1, true);
    eventually(60, "the borrower runs on both cores", || running(&borrower) == 4);
    assert_eq!(entitlement("/a"), 2000, "/a is entitled to the idle core of /b");
    // /b wants its reservation back: its high-priority job preempts what /a borrowed.
    let owner = job("owner", "/b", 2, 100, false);
    eventually(60, "the owner runs", || running(&owner) == 2);
    eventually(30, "the borrower gave back one core", || running(&borrower) == 2);
    assert_eq!((entitlement("/a"), entitlement("/b")), (1000, 1000), "equal shares once both pools want more");
    let events: Vec<String> = (0..4)
        .flat_map(|i| json(api, &["task", "events", &borrower, &i.to_string()]).as_array().cloned().unwrap_or_default())
        .filter_map(|e| e["to"].as_str().map(str::to_string))
        .collect();
    assert!(
        events.iter().any(|s| s.ends_with("PREEMPTING") || s.ends_with("KILLED") || s.ends_with("PENDING")),
        "preemption shows in the history: {events:?}"
    );
    let job_events = json(api, &["job", "events", &borrower]);
    assert!(
        job_events.as_array().into_iter().flatten().any(|e| e["reason"] == "Preempted" && e["type"] == "Warning"),
        "a Preempted event: {job_events}"
    );
    drop(agents);
}

#[test]
fn pool_specs_mean_what_they_say_in_files_tables_and_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let data = dir.path().join("dev");
    let listen = format!("127.0.0.1:{api}");
    let args = ["dev", "--sim-hosts", "2", "--data-dir", data.to_str().expect("utf-8"), "--api-listen", &listen];
    let dev = start(&args, "API on");
    // No bound is `unlimited`, never 2^64-1, 2^40 or 0.
    let table = ok(cli(api, &["pool", "list"]));
    assert!(table.contains("unlimited") && table.contains("LIMIT") && table.contains("SHARE"), "{table}");
    for number in ["18446744073709551615", "1099511627776"] {
        assert!(!table.contains(number), "{table}");
    }
    let listed = json(api, &["pool", "list"]);
    let default = listed["pools"].as_array().into_iter().flatten().find(|p| p["path"] == "/default").expect("/default");
    assert_eq!(default["spec"]["reservation"]["cpu_millis"], "unlimited", "{default}");
    assert_eq!(default["spec"]["limit"]["memory_mib"], "unlimited", "{default}");
    assert_eq!(default["spec"]["share"], 1, "{default}");
    assert_eq!(default["spec"]["type"], "elastic", "{default}");

    // A plain share, the old kind names, and a GPU limit of 0 that stays 0.
    let write = |name: &str, text: &str| {
        let f = dir.path().join(name);
        std::fs::write(&f, text).expect("write");
        f.to_str().expect("utf-8").to_string()
    };
    let no_gpus = write("no-gpus.yaml", "reservation: {cpu: 1000, memory: 1024}\nlimit: {gpus: 0}\nshare: 2\n");
    ok(cli(api, &["pool", "create", "/no-gpus", &no_gpus]));
    let got = json(api, &["pool", "get", "/no-gpus"]);
    assert_eq!(got["spec"]["limit"]["gpus"], 0, "a limit of 0 is zero: {got}");
    assert_eq!(got["spec"]["limit"]["cpu_millis"], "unlimited", "{got}");
    assert_eq!(got["spec"]["share"], 2, "{got}");
    assert_eq!(got["spec"]["reservation"]["cpu_millis"], 1000, "{got}");
    // What `pool get -o yaml` prints is a pool file.
    let shown = ok(cli(api, &["pool", "get", "/no-gpus", "-o", "yaml"]));
    let again = write("again.yaml", &shown);
    ok(cli(api, &["pool", "update", "/no-gpus", &again]));
    assert_eq!(json(api, &["pool", "get", "/no-gpus"])["spec"], got["spec"], "applied back unchanged");

    // Specs no task could run in are refused, naming the field; nothing is created.
    for (file, needle) in [
        (write("zero.yaml", "limit: {cpu: 0}\n"), "limit.cpu_millis"),
        (write("static.yaml", "type: static\nreservation: {cpu_millis: 2000}\n"), "type.memory_mib"),
    ] {
        let out = cli(api, &["pool", "create", "/useless", &file]);
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle) && err.contains("could ever run"), "{err}");
    }
    let out = cli(api, &["pool", "get", "/useless"]);
    assert_eq!(out.status.code(), Some(3), "not created");

    // A data dir whose /default an earlier version made (2^40 reserved):
    // after a restart it reads as today's, `unlimited`.
    let old = write(
        "old-default.yaml",
        "reservation: {cpu: 1099511627776, memory: 1099511627776, disk: 1099511627776, gpu: 1048576}\n",
    );
    ok(cli(api, &["pool", "update", "/default", &old]));
    assert_eq!(json(api, &["pool", "get", "/default"])["spec"]["reservation"]["cpu_millis"], 1099511627776u64);
    drop(dev);
    let _dev = start(&args, "API on");
    let default = json(api, &["pool", "get", "/default"]);
    assert_eq!(default["spec"]["reservation"]["cpu_millis"], "unlimited", "{default}");
    assert_eq!(default["spec"]["reservation"]["gpus"], "unlimited", "{default}");
}

/// `paceline auth token` for one principal: (the token, its tokens-file entry).
fn new_token(args: &[&str]) -> (String, String) {
    let mut all = vec!["auth", "token"];
    all.extend(args);
    let out = ok(Command::new(BIN).args(&all).output().expect("runs"));
    let token = out.lines().find_map(|l| l.strip_prefix("token: ")).expect("a token line").to_string();
    let entry: String = out.lines().filter(|l| l.starts_with("  ")).map(|l| format!("{l}\n")).collect();
    (token, entry)
}

fn cli_as(api: u16, token: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("PACELINE_SERVER", format!("http://127.0.0.1:{api}"))
        .env("PACELINE_TOKEN", token)
        .output()
        .expect("cli runs")
}

fn refused(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must be refused: {}", String::from_utf8_lossy(&out.stdout));
    assert!(err.contains(needle), "the error says `{needle}`: {err}");
}

#[test]
fn tokens_decide_who_may_do_what_and_a_refused_call_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (alice, alice_entry) = new_token(&["--name", "alice", "--role", "user", "--pool", "/team-a"]);
    let (ops, ops_entry) = new_token(&["--name", "ops", "--role", "operator"]);
    let (root, root_entry) = new_token(&["--name", "root", "--role", "admin"]);
    assert_ne!(alice, ops, "tokens are random");
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(&tokens, format!("version: 1\nprincipals:\n{alice_entry}{ops_entry}{root_entry}")).expect("write");
    assert!(!std::fs::read_to_string(&tokens).expect("read").contains(&alice), "the file holds hashes, not tokens");

    let api = free_port();
    let data = dir.path().join("dev");
    let _dev = start(
        &[
            "dev",
            "--sim-hosts",
            "4",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
            "--tokens-file",
            tokens.to_str().expect("utf-8"),
        ],
        "API on",
    );

    // No token, or a wrong one: unauthenticated, even for reads.
    refused(&cli(api, &["job", "list"]), "unauthenticated");
    refused(&cli_as(api, "not-a-token", &["job", "list"]), "not known");

    // Pools are the admin's; an operator and a user are refused by role.
    let pool_file = dir.path().join("pool.yaml");
    std::fs::write(&pool_file, "reservation: {cpu: 2000, memory: 4096}\n").expect("write");
    let pool_file = pool_file.to_str().expect("utf-8");
    refused(&cli_as(api, &ops, &["pool", "create", "/team-a", pool_file]), "needs role admin");
    refused(&cli_as(api, &alice, &["pool", "create", "/team-a", pool_file]), "permission denied");
    ok(cli_as(api, &root, &["pool", "create", "/team-a", pool_file]));

    // Alice may run jobs in /team-a only.
    let hello = std::fs::read_to_string(example("hello.yaml")).expect("example");
    let in_team_a = dir.path().join("team-a.yaml");
    std::fs::write(&in_team_a, hello.replace("pool: /default", "pool: /team-a")).expect("write");
    let created = ok(cli_as(api, &alice, &["job", "create", in_team_a.to_str().expect("utf-8"), "-o", "json"]));
    let created: serde_json::Value = serde_json::from_str(&created).expect("json");
    assert_eq!(created["owner"], "alice", "a spec without an owner is the token's principal's");
    let id = created["id"].as_str().expect("id").to_string();
    refused(&cli_as(api, &alice, &["job", "create", &example("hello.yaml")]), "may not change jobs in pool /default");
    let listed = ok(cli_as(api, &alice, &["job", "list", "-o", "json"]));
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "the refused job was not created: {listed}");

    // A job root created in /default is beyond alice's reach; an operator may kill it.
    let other = ok(cli_as(api, &root, &["job", "create", &example("hello.yaml"), "-o", "json"]));
    let other =
        serde_json::from_str::<serde_json::Value>(&other).expect("json")["id"].as_str().expect("id").to_string();
    refused(&cli_as(api, &alice, &["job", "kill", &other]), "permission denied");
    refused(&cli_as(api, &alice, &["task", "restart", &other, "0"]), "permission denied");
    ok(cli_as(api, &ops, &["job", "kill", &other]));
    ok(cli_as(api, &alice, &["job", "kill", &id]));

    // Hosts and plugins need an operator.
    let hosts = ok(cli_as(api, &alice, &["host", "list", "-o", "json"]));
    let host = serde_json::from_str::<serde_json::Value>(&hosts).expect("json")[0]["hostname"]
        .as_str()
        .expect("a host")
        .to_string();
    refused(&cli_as(api, &alice, &["host", "drain", &host]), "needs role operator");
    refused(&cli_as(api, &alice, &["plugin", "rollback", "placement/batch"]), "needs role operator");
    ok(cli_as(api, &ops, &["host", "drain", &host]));
}

#[test]
fn a_broken_tokens_file_stops_the_server_before_it_listens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(&tokens, "version: 1\nprincipals:\n  - {name: a, role: user, token_sha256: short}\n")
        .expect("write");
    let out = Command::new(BIN)
        .args(["dev", "--sim-hosts", "1", "--api-listen", &format!("127.0.0.1:{}", free_port()), "--tokens-file"])
        .arg(&tokens)
        .arg("--data-dir")
        .arg(dir.path().join("dev"))
        .output()
        .expect("runs");
    assert!(!out.status.success(), "the server must not start");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("principals[0].token_sha256"), "the error names the entry: {err}");
}

#[test]
fn the_api_over_tls_serves_clients_that_trust_its_authority_and_no_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = test_certificates(dir.path());
    let api = free_port();
    let config = dir.path().join("server.yaml");
    std::fs::write(
        &config,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:0\nhosts: {{provider: sim, hosts: 2, resources: {{cpu_millis: 4000, memory_mib: 8192, disk_mib: 10000, gpus: 0}}, zones: 1}}\ntls: {{cert_file: {cert}, key_file: {key}}}\n",
            dir.path().join("data").display()
        ),
    )
    .expect("write");
    let _server = start(&["server", "--config", config.to_str().expect("utf-8")], "API on https://");
    let https = format!("https://localhost:{api}");
    let run = |args: &[&str], ca: Option<&str>| {
        let mut c = Command::new(BIN);
        c.args(args).env("PACELINE_SERVER", &https).env_remove("PACELINE_CA_CERT");
        if let Some(ca) = ca {
            c.env("PACELINE_CA_CERT", ca);
        }
        c.output().expect("cli runs")
    };
    // Trusting the authority: the whole API works.
    let created = ok(run(&["job", "create", &example("hello.yaml"), "-o", "json"], Some(&ca)));
    let id = serde_json::from_str::<serde_json::Value>(&created).expect("json")["id"].as_str().expect("id").to_string();
    eventually(60, "the job runs over TLS", || {
        let out = run(&["job", "get", &id, "-o", "json"], Some(&ca));
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("\"state\"")
    });
    // No authority given, or the wrong one, or plain HTTP: refused with a clear error.
    refused(&run(&["job", "list"], None), "--ca-cert");
    let (other_ca, _, _) = test_certificates(&{
        let d = dir.path().join("other");
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    });
    refused(&run(&["job", "list"], Some(&other_ca)), "cannot connect");
    let plain = Command::new(BIN)
        .args(["job", "list"])
        .env("PACELINE_SERVER", format!("http://127.0.0.1:{api}"))
        .output()
        .expect("runs");
    assert!(!plain.status.success(), "plain HTTP/2 is not served on a TLS port");
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t)
                    if t.is_file()
                        && std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) =>
                {
                    found.push(path);
                }
                _ => {}
            }
        }
    }
    found
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}

/// `paceline dev` with two agents on `data`, its log (debug level) in `log`.
fn dev_logged(data: &Path, api: u16, extra: &[&str], log: &Path) -> Proc {
    let mut child = Command::new(BIN)
        .args(["dev", "--agents", "2", "--data-dir", data.to_str().expect("utf-8")])
        .args(["--api-listen", &format!("127.0.0.1:{api}")])
        .args(extra)
        .env("PACELINE_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("API on") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the server came up");
    Proc(child, Some(data.to_path_buf()))
}

#[test]
fn task_secrets_reach_their_task_and_nowhere_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (alice, alice_entry) = new_token(&["--name", "alice", "--role", "user", "--pool", "/team-a"]);
    let (bob, bob_entry) = new_token(&["--name", "bob", "--role", "user", "--pool", "/team-b"]);
    let (root, root_entry) = new_token(&["--name", "root", "--role", "admin"]);
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(&tokens, format!("version: 1\nprincipals:\n{alice_entry}{bob_entry}{root_entry}")).expect("write");
    // Two values no other part of the test writes anywhere.
    let password = format!("pw-{}", hex::encode(std::process::id().to_be_bytes())) + "-Xq7Zr2";
    let key_pem = format!("-----KEY {}-----\nk3y-m4t3r14l-Vb9\n", std::process::id());

    let api = free_port();
    let data = dir.path().join("dev");
    let log = dir.path().join("server.log");
    let _dev = dev_logged(&data, api, &["--tokens-file", tokens.to_str().expect("utf-8")], &log);
    eventually(30, "two agents up", || {
        cli_as(api, &root, &["host", "list", "-o", "json"]).status.success()
            && serde_json::from_slice::<serde_json::Value>(&cli_as(api, &root, &["host", "list", "-o", "json"]).stdout)
                .is_ok_and(|h| h.as_array().is_some_and(|h| h.len() == 2))
    });
    let pool_file = dir.path().join("pool.yaml");
    std::fs::write(&pool_file, "reservation: {cpu: 2000, memory: 4096}\n").expect("write");
    ok(cli_as(api, &root, &["pool", "create", "/team-a", pool_file.to_str().expect("utf-8")]));

    // Alice keeps two secrets in her pool: one from the environment, one from a file.
    let put = |token: &str, args: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new(BIN);
        c.args(["secret", "put"]).args(args);
        c.env("PACELINE_SERVER", format!("http://127.0.0.1:{api}")).env("PACELINE_TOKEN", token);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("cli runs")
    };
    let shown = ok(put(&alice, &["--pool", "/team-a", "db-password", "--from-env", "PW"], &[("PW", &password)]));
    assert!(shown.contains("version") && !shown.contains(&password), "{shown}");
    let key_file = dir.path().join("tls.key");
    std::fs::write(&key_file, &key_pem).expect("write");
    ok(put(&alice, &["--pool", "/team-a", "tls.key", "--from-file", key_file.to_str().expect("utf-8")], &[]));
    std::fs::remove_file(&key_file).expect("the test's own copy goes");

    // Bob's team may neither read the names nor write into the pool.
    refused(&cli_as(api, &bob, &["secret", "list", "--pool", "/team-a"]), "permission denied");
    refused(
        &put(&bob, &["--pool", "/team-a", "db-password", "--from-env", "PW"], &[("PW", "bob's")]),
        "permission denied",
    );
    // Bad input is refused naming the field, and changes nothing.
    let garbage = dir.path().join("garbage");
    for (name, pool, bytes, needle) in [
        ("Bad Name", "/team-a", b"v".as_slice(), "name:"),
        ("empty", "/team-a", b"".as_slice(), "value: must be 1 to"),
        ("binary", "/team-a", b"\xff\xfe\x00".as_slice(), "value: must be UTF-8"),
        ("nowhere", "/team-a/none", b"v".as_slice(), "pool `/team-a/none` does not exist"),
    ] {
        std::fs::write(&garbage, bytes).expect("write");
        let out = put(&alice, &["--pool", pool, name, "--from-file", garbage.to_str().expect("utf-8")], &[]);
        refused(&out, needle);
    }
    let listed = ok(cli_as(api, &alice, &["secret", "list", "--pool", "/team-a", "-o", "json"]));
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    assert_eq!(listed[0]["name"], "db-password");
    assert_eq!(listed[0]["updated_by"], "alice");

    // A task gets them as an environment variable and a 0400 file; it
    // checks their hashes, so the values never enter the job's spec.
    let script = format!(
        "set -e; test \"$(printf %s \"$DB_PASSWORD\" | sha256sum | cut -c1-64)\" = {pw}; \
         test \"$(sha256sum < \"$PACELINE_SECRETS_DIR/tls.key\" | cut -c1-64)\" = {key}; \
         test \"$(stat -c %a \"$PACELINE_SECRETS_DIR/tls.key\")\" = 400; echo secrets ok",
        pw = sha256_hex(&password),
        key = sha256_hex(&key_pem),
    );
    let job = |name: &str, secret: &str, script: &str| {
        format!(
            "name: {name}\npool: /team-a\nkind: batch\ninstance_count: 2\ndefault_task:\n  command: sh\n  args: [\"-c\", {script:?}]\n  resources: {{cpu_millis: 100, memory_mib: 32}}\n  secrets:\n    - {{name: {secret}, env: DB_PASSWORD}}\n    - {{name: tls.key, file: tls.key}}\n"
        )
    };
    let spec = dir.path().join("job.yaml");
    std::fs::write(&spec, job("uses-secrets", "db-password", &script)).expect("write");
    let id = ok(cli_as(api, &alice, &["job", "create", spec.to_str().expect("utf-8")]));
    eventually(60, "the job SUCCEEDED", || {
        serde_json::from_slice::<serde_json::Value>(&cli_as(api, &alice, &["job", "get", &id, "-o", "json"]).stdout)
            .is_ok_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });
    assert_eq!(ok(cli_as(api, &alice, &["task", "logs", &id, "1"])), "secrets ok");

    // A spec naming a secret the pool lacks is refused, and nothing is created.
    std::fs::write(&spec, job("missing", "no-such-secret", "true")).expect("write");
    refused(&cli_as(api, &alice, &["job", "create", spec.to_str().expect("utf-8")]), "no secret \"no-such-secret\"");

    // A secret a running job needs is not deleted from under it.
    std::fs::write(&spec, job("long", "db-password", "sleep 300")).expect("write");
    let long = ok(cli_as(api, &alice, &["job", "create", spec.to_str().expect("utf-8")]));
    refused(&cli_as(api, &alice, &["secret", "delete", "--pool", "/team-a", "db-password"]), "used by jobs");
    ok(cli_as(api, &alice, &["job", "kill", &long]));
    eventually(60, "the long job ended and the secret can go", || {
        cli_as(api, &alice, &["secret", "delete", "--pool", "/team-a", "db-password"]).status.success()
    });

    // The values are in no answer of the API...
    for args in [
        vec!["job", "get", &id, "-o", "json"],
        vec!["job", "list", "-o", "json"],
        vec!["task", "list", &id, "-o", "json"],
        vec!["job", "events", &id, "--json"],
        vec!["task", "events", &id, "0", "-o", "json"],
        vec!["secret", "list", "--pool", "/team-a", "-o", "json"],
        vec!["audit", "--json"],
    ] {
        let out = cli_as(api, &root, &args);
        let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{args:?}: {all}");
        assert!(!all.contains(&password) && !all.contains("k3y-m4t3r14l"), "{args:?} shows a secret: {all}");
    }
    // ...in no log line (at debug level) and in no file the server or the
    // agents keep: the store holds them sealed, and a run's secret files
    // went when the run ended.
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(logged.contains("secret set"), "the log says that secrets were set");
    assert!(!logged.contains(&password) && !logged.contains("k3y-m4t3r14l"), "a log line shows a secret");
    for needle in [password.as_bytes(), b"k3y-m4t3r14l".as_slice()] {
        let found = files_containing(dir.path(), needle);
        assert!(found.is_empty(), "files hold a secret in the clear: {found:?}");
    }
}

#[test]
fn a_secret_sealed_with_another_key_keeps_its_runs_from_starting_not_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("dev");
    let api = free_port();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "old-key-value").expect("write");
    {
        let _dev = dev_logged(&data, api, &[], &dir.path().join("first.log"));
        ok(cli(api, &["secret", "put", "--pool", "/default", "db", "--from-file", pw.to_str().expect("utf-8")]));
    }
    // Another key, as a second server with a data dir of its own would have.
    std::fs::write(data.join("secrets.key"), format!("{}\n", "ab".repeat(32))).expect("write");
    let log = dir.path().join("second.log");
    let _dev = dev_logged(&data, api, &[], &log);
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(logged.contains("sealed with another key"), "the start says so: {logged}");
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    let spec = dir.path().join("job.yaml");
    std::fs::write(
        &spec,
        "name: needs-db\npool: /default\nkind: batch\ninstance_count: 1\ndefault_task:\n  command: \"true\"\n  resources: {cpu_millis: 100, memory_mib: 32}\n  secrets: [{name: db, env: DB}]\n",
    )
    .expect("write");
    let id = ok(cli(api, &["job", "create", spec.to_str().expect("utf-8")]));
    eventually(30, "the launch refused, with the reason in the task's events", || {
        ok(cli(api, &["task", "events", &id, "0"])).contains("sealed with key")
    });
    // It never ran, and the server still answers.
    let task = &tasks(api, &id)[0];
    assert!(!task["state"].as_str().unwrap_or_default().contains("SUCCEEDED"), "{task}");
    assert!(json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
}

/// A `dev` in a process group of its own, as a shell runs a foreground
/// command, with its stdout collected; [`DevGroup::interrupt`] is Ctrl-C in
/// its terminal (SIGINT to the whole group).
struct DevGroup {
    child: Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    data: std::path::PathBuf,
}

impl DevGroup {
    fn start(data: &Path, api: u16, extra: &[&str]) -> DevGroup {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(BIN)
            .args(["dev", "--agents", "2", "--data-dir", data.to_str().expect("utf-8")])
            .args(["--api-listen", &format!("127.0.0.1:{api}")])
            .args(extra)
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starts");
        let stdout = child.stdout.take().expect("stdout");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                seen.lock().expect("lines").push(line);
            }
        });
        let dev = DevGroup { child, lines, data: data.to_path_buf() };
        eventually(60, "dev is up", || dev.output().contains("API on"));
        dev
    }

    fn output(&self) -> String {
        self.lines.lock().expect("lines").join("\n")
    }

    /// Ctrl-C: SIGINT to the group; waits for `dev` to exit.
    fn interrupt(&mut self) -> String {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-INT", "--", &group]).stderr(Stdio::null()).status();
        let started = std::time::Instant::now();
        while self.child.try_wait().expect("wait").is_none() {
            assert!(started.elapsed() < Duration::from_secs(45), "dev did not exit after Ctrl-C");
            std::thread::sleep(Duration::from_millis(100));
        }
        // The reader thread has the last lines once the pipe closed.
        std::thread::sleep(Duration::from_millis(200));
        self.output()
    }
}

impl Drop for DevGroup {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).stderr(Stdio::null()).status();
        let _ = self.child.wait();
        common::kill_processes_working_under(&self.data);
    }
}

/// Issue 43: Ctrl-C on `dev` left its tasks running (and Ctrl-C reached the
/// agents too, which detached before `dev` could ask). Now `dev` stops them
/// with their own stop signal and says so; `--keep-tasks-on-exit` leaves
/// them for the next `dev` on the same data dir, which takes them over.
#[test]
fn ctrl_c_on_dev_stops_its_tasks_unless_told_to_keep_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("dev");
    let api = free_port();
    // The task processes themselves (their launch wrappers name the command too).
    let sleeps = || {
        processes_with(&["sleep 3171"])
            .into_iter()
            .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\x003171")))
            .count()
    };
    let running = |id: &str| {
        let ts = tasks(api, id);
        ts.len() == 2 && ts.iter().all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")))
    };

    // Kept: the tasks outlive dev, and the next dev takes them over.
    let mut first = DevGroup::start(&data, api, &["--keep-tasks-on-exit"]);
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    let file = shell_job_file(dir.path(), "sleepy", 2, "exec sleep 3171", 100);
    let id = ok(cli(api, &["job", "create", &file]));
    eventually(60, "two tasks running", || running(&id) && sleeps() == 2);
    let runs: Vec<serde_json::Value> = tasks(api, &id).iter().map(|t| t["run_id"].clone()).collect();
    let out = first.interrupt();
    assert!(out.contains("left 2 task(s) of 1 job(s) running (--keep-tasks-on-exit)"), "{out}");
    assert_eq!(sleeps(), 2, "kept running after dev exited");

    let mut second = DevGroup::start(&data, api, &[]);
    eventually(60, "the same runs carry on under the new dev", || {
        running(&id) && tasks(api, &id).iter().map(|t| t["run_id"].clone()).collect::<Vec<_>>() == runs
    });

    // Default: Ctrl-C stops them, and dev says what it stopped.
    let out = second.interrupt();
    assert!(out.contains("stopping 2 task(s) of 1 job(s)"), "{out}");
    assert!(out.contains(&format!("stopped 2 task(s) of {id}")), "{out}");
    assert!(!out.contains("still running"), "{out}");
    eventually(10, "no task process left", || sleeps() == 0);
}

/// Issue 43: the built-in policies could not be named in `plugin deploy` or
/// `plugin shadow` (`spread@builtin-0.1.0` was "not found" in placement/batch,
/// whose default is binpack); their only files were under target/. They are
/// in the binary: `--builtin NAME`, `builtin:NAME`, `NAME@builtin-<version>`.
#[test]
fn built_in_policies_can_be_deployed_and_shadowed_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let data = dir.path().join("dev");
    let _dev = start(
        &[
            "dev",
            "--sim-hosts",
            "1",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
        ],
        "API on",
    );
    let version = format!("builtin-{}", env!("CARGO_PKG_VERSION"));
    let list = ok(cli(api, &["plugin", "list"]));
    assert!(list.contains("built-in policies") && list.contains("binpack, spread"), "{list}");

    // Shadowing spread in placement/batch deploys it there first.
    let shadow = ok(cli(api, &["plugin", "shadow", "placement/batch", &format!("spread@{version}")]));
    assert!(shadow.contains(&format!("spread@{version} in placement/batch")), "{shadow}");
    let slots = json(api, &["plugin", "list"]);
    let batch = slots.as_array().and_then(|s| s.iter().find(|s| s["slot"] == "placement/batch")).cloned();
    let ids: Vec<String> = batch
        .and_then(|b| b["versions"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v["id"].as_str().map(str::to_string))
        .collect();
    assert!(ids.contains(&format!("spread@{version}")), "{ids:?}");
    ok(cli(api, &["plugin", "shadow", "placement/batch", "builtin:spread", "--stop"]));

    // deploy --builtin, and builtin:NAME where the file goes.
    let deployed = ok(cli(api, &["plugin", "deploy", "placement/stateful", "--builtin", "spread"]));
    assert!(deployed.contains(&format!("spread@{version}")), "{deployed}");
    ok(cli(api, &["plugin", "deploy", "placement/stateful", "gang", "1", "builtin:gang-gpu"]));
    let unknown = cli(api, &["plugin", "deploy", "placement/stateful", "--builtin", "nope"]);
    assert!(!unknown.status.success());
    let why = String::from_utf8_lossy(&unknown.stderr);
    assert!(why.contains("not a built-in policy") && why.contains("binpack, spread"), "{why}");
}
