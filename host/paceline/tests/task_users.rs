//! Security issue 44 item 4 through the binary: how an agent runs tasks
//! (a uid per run, or the agent's own user) is decided at start, said in
//! its log and reported as the host attribute `task_user`, which `paceline
//! host get` shows. The isolation itself is tested in `paceline-agent`'s
//! `task_users` tests.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

mod common;

use common::{Dev, eventually, free_port};

const BIN: &str = env!("CARGO_BIN_EXE_paceline");

fn detect(data_dir: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(["agent", "--detect", "--hostname", "probe", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .output()
        .expect("paceline agent --detect runs")
}

#[test]
fn an_agent_reports_which_user_its_tasks_run_as() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Under a 0700 directory (a tempdir) another uid could not reach the
    // sandboxes: `auto` falls back to the agent's user and says why.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let hidden = dir.path().join("hidden");
    let out = detect(&hidden, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("\"task_user\": \"same-as-agent\""), "{text}");
    // `per-run` refuses to start without it, naming what is in the way.
    let out = detect(&hidden, &["--task-user", "per-run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "per-run started anyway: {}", String::from_utf8_lossy(&out.stdout));
    assert!(err.contains("task_user: per-run"), "{err}");
    if nix::unistd::geteuid().is_root() {
        // A data dir others can pass through, and root: a uid per run.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
        let out = detect(&dir.path().join("open"), &["--task-uids", "72000-72099"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("\"task_user\": \"per-run-uid\""), "{text}");
        assert!(text.contains("first: 72000") && text.contains("last: 72099"), "{text}");
        let out = detect(&dir.path().join("open"), &["--task-user", "agent"]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("\"task_user\": \"same-as-agent\""));
    }
}

#[test]
fn dev_runs_tasks_as_its_user_and_its_hosts_say_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let data = dir.path().join("dev");
    let _dev = Dev::spawn(
        &[
            "dev",
            "--agents",
            "1",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
        ],
        "API on",
    );
    let mut host = serde_json::Value::Null;
    eventually(30, "dev-1 registered", || {
        let out = common::cli(api, &["host", "get", "dev-1", "-o", "json"]);
        if !out.status.success() {
            return false;
        }
        host = serde_json::from_slice(&out.stdout).unwrap_or_default();
        true
    });
    assert_eq!(host["attributes"]["task_user"], "same-as-agent", "{host:#}");
    let log = std::fs::read_to_string(data.join("agents/dev-1/agent.log")).unwrap_or_default();
    assert!(
        log.contains("WARN") && log.contains("task isolation: same user as the agent"),
        "no warning in the agent log:\n{log}"
    );
}
