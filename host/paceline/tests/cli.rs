//! The `paceline` binary as a user runs it: plugin tools, the demo, shell
//! completion, help and logging options.

mod common;

use std::process::{Command, Output};

use paceline_plugin_artifacts as artifacts;

fn paceline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_paceline")).args(args).output().expect("paceline runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn scenario(plugin: &str, file: &str) -> String {
    format!("{}/../../plugins/{plugin}/scenarios/{file}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn validate_accepts_a_default_plugin_and_names_its_world() {
    let out = paceline(&["plugin", "validate", artifacts::SPREAD_PATH]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("world:     placement"), "{stdout}");
    let out = paceline(&["plugin", "validate", artifacts::PRIORITY_PREEMPT_PATH]);
    assert!(text(&out.stdout).contains("world:     preemption"));
}

#[test]
fn validate_refuses_bad_files_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, "hello, I am not a plugin").expect("write");
    let cases: [(Vec<&str>, &str); 4] = [
        (vec!["plugin", "validate", junk.to_str().expect("utf-8")], "not a WebAssembly file"),
        (vec!["plugin", "validate", "/nonexistent/x.wasm"], "cannot read /nonexistent/x.wasm"),
        (
            vec!["plugin", "validate", artifacts::PRIORITY_PREEMPT_PATH, "--slot", "placement/batch"],
            "does not fit slot placement/batch",
        ),
        (vec!["plugin", "validate", artifacts::GUEST_PANIC_PATH], "self-test failed"),
    ];
    for (args, message) in cases {
        let out = paceline(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: expected {message:?} in {stderr}");
    }
}

#[test]
fn run_prints_the_same_decision_in_every_process() {
    let file = scenario("binpack", "02-gang-all-or-nothing.yaml");
    let first = paceline(&["plugin", "run", artifacts::BINPACK_PATH, "--scenario", &file]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let second = paceline(&["plugin", "run", artifacts::BINPACK_PATH, "--scenario", &file]);
    assert_eq!(first.stdout, second.stdout, "byte-identical across process restarts");
    let decision: serde_json::Value = serde_json::from_slice(&first.stdout).expect("JSON");
    assert_eq!(decision["placement"]["assignments"][0]["task"], 3);
}

#[test]
fn run_exits_non_zero_when_the_decision_differs_from_the_scenario() {
    // spread on binpack's best-fit scenario gives another answer.
    let out =
        paceline(&["plugin", "run", artifacts::SPREAD_PATH, "--scenario", &scenario("binpack", "01-best-fit.yaml")]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("scenario check failed"));
}

#[test]
fn demo_places_the_sample_workload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = paceline(&["demo", "--data-dir", dir.path().to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("served by plugin binpack@"), "{stdout}");
    assert!(stdout.contains("train-3 -> host-1"), "the GPU gang lands on the GPU hosts: {stdout}");
    assert!(!stdout.contains("not placed"), "{stdout}");
    // Second run over the same directory: versions were persisted and stay active.
    let again = paceline(&["demo", "--data-dir", dir.path().to_str().expect("utf-8")]);
    assert!(text(&again.stdout).contains("already active"));
}

#[test]
fn bench_pipeline_launches_every_task_and_says_where_the_time_went() {
    // A small run: 3 jobs of 4 instances on 6 simulated hosts.
    let out = paceline(&["bench", "pipeline", "--jobs", "3", "--instances", "4", "--hosts", "6"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("pipeline: 12 tasks (3 jobs x 4) onto 6 simulated hosts"), "{stdout}");
    assert!(stdout.contains("submit -> running per task (12 measured)"), "every task reached RUNNING: {stdout}");
    assert!(stdout.contains("until all launched: creating jobs"), "{stdout}");
    // Lifecycle calls: one per job at least (its creation), and fewer than
    // one per task: a job's burst of RUNNING updates is one `on-events` call.
    let calls = |slot: &str| -> u64 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("plugin {slot} ")))
            .unwrap_or_else(|| panic!("no {slot} line: {stdout}"));
        let after = line.split("): ").nth(1).expect("calls");
        after.split(' ').next().expect("number").parse().expect("a count")
    };
    assert!((3..12).contains(&calls("lifecycle/batch")), "{stdout}");
    assert!(calls("placement/batch") >= 1, "{stdout}");
}

#[test]
fn bench_pipeline_compares_metrics_off_and_on_and_bench_metrics_reports_a_scrape() {
    let out =
        paceline(&["bench", "pipeline", "--jobs", "2", "--instances", "3", "--hosts", "4", "--metrics-compare", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.matches("pipeline: 6 tasks (2 jobs x 3) onto 4 simulated hosts").count(), 2, "{stdout}");
    assert!(stdout.contains("metrics overhead: "), "{stdout}");
    assert!(stdout.contains("without, median of 1 runs each"), "{stdout}");

    let out = paceline(&["bench", "metrics", "--hosts", "20", "--pools", "30", "--scrapes", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    // 30 pools asked for, plus the root.
    assert!(stdout.contains("metrics scrape: 20 hosts, 31 pools (root included)"), "{stdout}");
    assert!(stdout.contains(" bytes ("), "{stdout}");
}

#[test]
fn completion_scripts_cover_the_commands_and_bash_loads_its_own() {
    for (shell, marker) in [("bash", "_paceline()"), ("zsh", "#compdef paceline"), ("fish", "complete -c paceline")] {
        let out = paceline(&["completion", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}: {marker} missing");
        for word in ["job", "pool", "completion", "log-format", "tokens-file"] {
            assert!(script.contains(word), "{shell}: completes {word}");
        }
    }
    // bash itself takes the script and registers the completion.
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("paceline.bash");
    std::fs::write(&script, paceline(&["completion", "bash"]).stdout).expect("write");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p paceline", script.display()))
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("paceline"), "{}", text(&out.stdout));
    let bad = paceline(&["completion", "cmd.exe"]);
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("invalid value 'cmd.exe'"), "{}", text(&bad.stderr));
}

#[test]
fn help_ends_with_examples_at_every_level() {
    for args in [vec!["--help"], vec!["pool", "--help"], vec!["pool", "create", "--help"], vec!["dev", "--help"]] {
        let out = paceline(&args);
        assert!(out.status.success(), "{args:?}");
        let help = text(&out.stdout);
        assert!(help.contains("Examples:\n  paceline "), "{args:?}: {help}");
    }
}

#[test]
fn log_lines_are_readable_text_or_json() {
    // `agent --detect` logs what it detected at info: one line of text…
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_str().expect("utf-8");
    let run = |format: &str| {
        Command::new(env!("CARGO_BIN_EXE_paceline"))
            .args(["agent", "--data-dir", data, "--log-format", format, "--manager", "http://127.0.0.1:1"])
            // Not joined yet: with a token it keeps trying to reach the manager until stdin closes.
            .args(["--join", "id.secret", "--ca-hash", &format!("sha256:{}", "0".repeat(64))])
            .env("PACELINE_LOG", "info")
            .env_remove("PACELINE_LOG_FORMAT")
            .stdin(std::process::Stdio::null())
            .arg("--stop-when-stdin-closes")
            .output()
            .expect("runs")
    };
    let out = run("text");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stderr);
    let line = log.lines().find(|l| l.contains("agent host")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("INFO") && line.contains("hostname="), "{line}");
    assert!(!line.contains('\u{1b}'), "no colour codes when stderr is not a terminal: {line:?}");
    // …or one JSON object.
    let out = run("json");
    let log = text(&out.stderr);
    let line = log.lines().find(|l| l.contains("agent host")).unwrap_or_else(|| panic!("{log}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["level"], "INFO");
    assert_eq!(v["fields"]["message"], "agent host");
}

/// The unauthenticated scrape listener does not start on a routable
/// address by mistake: the server and the agent refuse before listening.
#[test]
fn a_scrape_listener_off_loopback_is_refused_without_the_acknowledgement() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let out = paceline(&[
        "server",
        "--data-dir",
        data.to_str().expect("utf-8"),
        "--api-listen",
        "127.0.0.1:0",
        "--agent-listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "0.0.0.0:0",
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("0.0.0.0:0 is not a loopback address") && stderr.contains("--metrics-listen-public"),
        "{stderr}"
    );
    let out = paceline(&["agent", "--manager", "http://127.0.0.1:1", "--metrics-listen", "0.0.0.0:0"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--metrics-listen-public"), "{}", text(&out.stderr));
}

/// Secure by default: an API without a tokens file serves only loopback;
/// anything else needs a tokens file or the loudly named acknowledgement.
#[test]
fn a_server_on_a_routable_address_without_tokens_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let out = paceline(&[
        "server",
        "--data-dir",
        data.to_str().expect("utf-8"),
        "--api-listen",
        "0.0.0.0:0",
        "--agent-listen",
        "127.0.0.1:0",
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("0.0.0.0:0 is not a loopback address and there is no tokens file")
            && stderr.contains("--tokens-file")
            && stderr.contains("--insecure-no-auth"),
        "{stderr}"
    );
    assert!(!data.join("paceline.db").exists(), "refused before the store was opened");
    // `paceline dev` has no such acknowledgement: open only on loopback.
    let data = dir.path().join("dev-data");
    let out = paceline(&[
        "dev",
        "--sim-hosts",
        "1",
        "--data-dir",
        data.to_str().expect("utf-8"),
        "--api-listen",
        "0.0.0.0:0",
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("is not a loopback address"), "{stderr}");
    // Issue 43: it suggested --insecure-no-auth, a flag `dev` does not have.
    assert!(stderr.contains("--tokens-file") && !stderr.contains("--insecure-no-auth"), "{stderr}");
    assert!(!data.exists(), "refused before anything was created");
}

/// Issue 43: `dev` on a taken API port made its CA, secrets key, store and
/// plugins, then said "Address already in use" twice without naming the
/// flag. It refuses first, in one line naming --api-listen.
#[test]
fn dev_on_a_taken_port_says_so_in_one_line_before_creating_anything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out =
        paceline(&["dev", "--sim-hosts", "1", "--data-dir", data.to_str().expect("utf-8"), "--api-listen", &addr]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("--api-listen") && stderr.contains(&addr) && stderr.contains("already in use"), "{stderr}");
    assert!(!data.exists(), "nothing created: {:?}", std::fs::read_dir(&data).map(|d| d.count()));
}

/// A client command with no server to talk to says which address it tried
/// and what to check, not only "Connection refused".
#[test]
fn a_client_without_a_server_names_the_address_and_what_to_check() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let server = format!("http://127.0.0.1:{port}");
    let out = Command::new(env!("CARGO_BIN_EXE_paceline"))
        .args(["job", "list"])
        .env("PACELINE_SERVER", &server)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    for part in [server.as_str(), "paceline dev", "PACELINE_SERVER", "hint:"] {
        assert!(stderr.contains(part), "{part:?} not in: {stderr}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_paceline"))
        .args(["job", "list", "--server", &server])
        .env_remove("PACELINE_SERVER")
        .output()
        .expect("runs");
    assert!(text(&out.stderr).contains("from --server"), "{}", text(&out.stderr));
}

/// Issue 43: `paceline host list -o json | head -1` panicked with a
/// backtrace hint when `head` closed the pipe. The command ends quietly.
#[test]
fn a_closed_output_pipe_ends_the_command_quietly() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().expect("tempdir");
    let api = common::free_port();
    let _dev = common::Dev::start(dir.path(), api, 3, &[]);
    let run = |args: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_paceline"))
            .args(args)
            .env("PACELINE_SERVER", format!("http://127.0.0.1:{api}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("runs");
        // The reader goes away before anything is written: the first write fails.
        drop(child.stdout.take());
        child.wait_with_output().expect("waits")
    };
    for args in [&["host", "list", "-o", "json"][..], &["host", "list"], &["completion", "bash"]] {
        let out = run(args);
        let stderr = text(&out.stderr);
        assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "{args:?}: {stderr}");
        assert!(stderr.trim().is_empty(), "{args:?}: nothing on stderr: {stderr}");
        assert!(matches!(out.status.code(), Some(0 | 141)), "{args:?}: {:?}", out.status);
    }
}
