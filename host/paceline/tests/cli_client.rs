//! The client commands as a user runs them, where no server is needed: bad
//! input fails with a clear message and exit code 2 before any connection,
//! every command has help, and an unreachable server is one clear error.
//!
//! Every bad-input case points `--server` at a closed port: had the command
//! tried to connect first, it would fail with "cannot connect" and code 1
//! instead, so the assertions also prove the check happens before connecting.
//! (End-to-end tests against `paceline dev` live elsewhere.)

use std::path::PathBuf;
use std::process::{Command, Output};

const CLOSED: &str = "http://127.0.0.1:1";

fn paceline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_paceline"))
        .args(args)
        .env_remove("PACELINE_SERVER")
        .output()
        .expect("paceline runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn example(name: &str) -> String {
    format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Writes `body` to a file in `dir` and returns its path as a string.
fn file(dir: &tempfile::TempDir, name: &str, body: &[u8]) -> String {
    let p: PathBuf = dir.path().join(name);
    std::fs::write(&p, body).expect("write");
    p.to_str().expect("utf-8").to_owned()
}

const GOOD_JOB: &str = "name: t\nowner: me\npool: /default\ninstance_count: 1\ndefault_task:\n  command: \"true\"\n  resources: {cpu_millis: 100, memory_mib: 16}\n";

#[test]
fn bad_job_specs_fail_with_code_2_and_name_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: Vec<(&str, String, &str)> = vec![
        ("invalid YAML", "name: [unclosed\n".into(), "invalid job spec"),
        ("unknown field", format!("{GOOD_JOB}colour: blue\n"), "unknown field `colour`"),
        ("unknown nested field", GOOD_JOB.replace("command:", "comand:"), "comand"),
        ("negative resources", GOOD_JOB.replace("cpu_millis: 100", "cpu_millis: -5"), "cpu_millis"),
        ("non-numeric resources", GOOD_JOB.replace("memory_mib: 16", "memory_mib: lots"), "memory_mib"),
        ("empty name", GOOD_JOB.replace("name: t", "name: \"\""), "`name` must not be empty"),
        ("pool not a path", GOOD_JOB.replace("/default", "default"), "pool"),
        ("gang too big", format!("{GOOD_JOB}sla: {{min_running_instances: 3}}\n"), "sla.min_running_instances"),
        ("ports mismatch", GOOD_JOB.replace("memory_mib: 16", "memory_mib: 16, ports: 1"), "resources.ports"),
    ];
    for (what, body, needle) in cases {
        let path = file(&dir, "job.yaml", body.as_bytes());
        for args in [vec!["job", "create", &path], vec!["job", "update", "some-id", &path, "--dry-run"]] {
            let mut args = args;
            args.extend(["--server", CLOSED]);
            let out = paceline(&args);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{what}: {args:?}: {stderr}");
            assert!(stderr.starts_with("error: "), "{what}: {stderr}");
            assert!(stderr.contains(needle), "{what}: expected {needle:?} in {stderr}");
            assert!(stderr.contains("job.yaml"), "{what}: names the file: {stderr}");
            assert!(!stderr.contains("cannot connect"), "{what}: connected first: {stderr}");
        }
    }
}

#[test]
fn a_missing_job_file_is_bad_input() {
    let out = paceline(&["job", "create", "/nonexistent/job.yaml", "--server", CLOSED]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read /nonexistent/job.yaml"), "{}", text(&out.stderr));
}

#[test]
fn bad_flags_and_filters_fail_before_connecting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = file(&dir, "pool.yaml", b"reservation: {cpu: 10}\nlimit: {cpu: 5}\n");
    let cases: [(Vec<&str>, &str); 7] = [
        (vec!["job", "list", "--state", "sleeping"], "unknown job state \"sleeping\""),
        (vec!["task", "list", "j1", "--state", "dancing"], "unknown task state \"dancing\""),
        (vec!["job", "kill", "j1", "--instances", "0,x"], "invalid value 'x'"),
        (vec!["job", "list", "-o", "xml"], "invalid value 'xml'"),
        (vec!["pool", "create", "/a", &pool], "reservation.cpu_millis (10) is above limit.cpu_millis (5)"),
        (vec!["pool", "create", "relative", &pool], "must start with /"),
        (vec!["watch", "--kind", "host"], "invalid value 'host'"),
    ];
    for (mut args, needle) in cases {
        args.extend(["--server", CLOSED]);
        let out = paceline(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: expected {needle:?} in {stderr}");
    }
}

#[test]
fn plugin_deploy_refuses_a_file_that_is_not_a_component() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = file(&dir, "junk.wasm", b"hello, I am not a plugin");
    let core = file(&dir, "core.wasm", b"\0asm\x01\0\0\0");
    for (path, needle) in [(&junk, "is not a WebAssembly file"), (&core, "not a component")] {
        let out = paceline(&["plugin", "deploy", "placement/batch", "p", "1", path, "--server", CLOSED]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle), "expected {needle:?} in {stderr}");
    }
}

#[test]
fn an_unreachable_server_is_one_clear_error() {
    let hello = example("hello.yaml");
    let cases: [Vec<&str>; 7] = [
        vec!["job", "list"],
        vec!["job", "create", &hello],
        vec!["task", "list", "j1"],
        vec!["pool", "list"],
        vec!["host", "list"],
        vec!["watch"],
        vec!["plugin", "list"],
    ];
    for mut args in cases {
        args.extend(["--server", CLOSED]);
        let out = paceline(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: cannot connect to http://127.0.0.1:1"), "{args:?}: {stderr}");
        assert!(stderr.to_lowercase().contains("refused"), "{args:?}: says why: {stderr}");
    }
}

#[test]
fn the_server_comes_from_the_environment_and_the_default_is_7400() {
    let out = Command::new(env!("CARGO_BIN_EXE_paceline"))
        .args(["host", "list"])
        .env("PACELINE_SERVER", CLOSED)
        .output()
        .expect("runs");
    assert!(text(&out.stderr).contains("cannot connect to http://127.0.0.1:1"), "{}", text(&out.stderr));
    let help = text(&paceline(&["job", "list", "--help"]).stdout);
    assert!(help.contains("http://127.0.0.1:7400") && help.contains("PACELINE_SERVER"), "{help}");
    let out = paceline(&["job", "list", "--server", "not a url"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn every_client_command_has_help() {
    let commands: &[&[&str]] = &[
        &["job"],
        &["job", "create"],
        &["job", "get"],
        &["job", "list"],
        &["job", "kill"],
        &["job", "restart"],
        &["job", "update"],
        &["job", "delete"],
        &["job", "pause"],
        &["job", "resume"],
        &["job", "abort"],
        &["task"],
        &["task", "list"],
        &["task", "get"],
        &["task", "kill"],
        &["task", "restart"],
        &["task", "logs"],
        &["task", "events"],
        &["pool"],
        &["pool", "create"],
        &["pool", "get"],
        &["pool", "update"],
        &["pool", "delete"],
        &["pool", "list"],
        &["host"],
        &["host", "list"],
        &["host", "get"],
        &["host", "drain"],
        &["host", "down"],
        &["host", "up"],
        &["watch"],
        &["plugin"],
        &["plugin", "deploy"],
        &["plugin", "list"],
        &["plugin", "activate"],
        &["plugin", "rollback"],
        &["plugin", "shadow"],
        &["plugin", "validate"],
    ];
    for c in commands {
        let mut args = c.to_vec();
        args.push("--help");
        let out = paceline(&args);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(stdout.contains("Usage: paceline"), "{args:?}: {stdout}");
    }
    let flags = [
        (&["job", "update", "--help"][..], &["--dry-run", "--batch-size", "--max-failures", "--paused"][..]),
        (&["task", "logs", "--help"], &["--stderr", "--follow", "--run", "--offset"]),
        (&["host", "drain", "--help"], &["--then-down"]),
        (&["plugin", "deploy", "--help"], &["--skip-self-test", "--server", "--output"]),
        (&["plugin", "shadow", "--help"], &["--stop"]),
        (&["watch", "--help"], &["--job", "--kind", "--from-revision", "--output"]),
    ];
    for (args, wanted) in flags {
        let help = text(&paceline(args).stdout);
        for w in wanted {
            assert!(help.contains(w), "{args:?} lacks {w}: {help}");
        }
    }
}

#[test]
fn global_flags_go_before_or_after_the_subcommand() {
    for args in
        [vec!["job", "-o", "json", "--server", CLOSED, "list"], vec!["job", "list", "-o", "yaml", "--server", CLOSED]]
    {
        let out = paceline(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("cannot connect"), "{args:?}");
    }
}

#[test]
fn local_plugin_commands_still_work() {
    let out = paceline(&["plugin", "validate", paceline_plugin_artifacts::SPREAD_PATH]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("world:     placement"));
}
