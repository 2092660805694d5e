//! The web UI in a real browser, for the tests that need the `paceline`
//! binary itself: `paceline dev`'s local agents (a task's log followed
//! live), the server's log on stderr (what a refusal logs), `paceline sim
//! compare`'s reports and the CLI's task text beside the page. Debian's
//! Chromium (installed by `deploy/browser/chromium.sh`) is driven through the
//! DevTools protocol by host/server/tests/web/cdp.py. The other web UI tests
//! run the server in their own process: host/server/tests/all/web_ui.
//!
//! One binary (`cargo test --test web_ui`); this file holds the helpers every
//! test uses, each module a part of the UI.

#[path = "../common/mod.rs"]
mod common;

#[path = "../../../server/tests/web/browser.rs"]
mod browser;
use browser::*;

mod cross_origin;
mod jobs;
mod slot_and_task_pages;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{BIN, Dev, eventually, free_port};

fn cli(api: u16, token: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args).env("PACELINE_SERVER", format!("http://127.0.0.1:{api}")).env_remove("PACELINE_TOKEN");
    if let Some(t) = token {
        c.env("PACELINE_TOKEN", t);
    }
    c.output().expect("cli runs")
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn json(api: u16, token: Option<&str>, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&ok(cli(api, token, &all))).expect("json")
}

/// A long batch job of `n` one-core instances in `pool`.
fn job_file(dir: &Path, name: &str, pool: &str, n: u32) -> String {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "name: {name}\npool: {pool}\nkind: batch\ninstance_count: {n}\ndefault_task:\n  command: work\n  env: {{SIM_DURATION_MS: \"600000\"}}\n  resources: {{cpu_millis: 1000, memory_mib: 64, disk_mib: 10, gpu_milli: 0, ports: 0}}\n"
        ),
    )
    .expect("write");
    path.to_str().expect("utf-8").to_string()
}

/// Creates the job of [`job_file`] as the admin and waits until its `n`
/// tasks run; its id.
fn create_running(api: u16, dir: &Path, name: &str, pool: &str, n: u32) -> String {
    let id = json(api, None, &["job", "create", &job_file(dir, name, pool, n)])["id"].as_str().expect("id").to_string();
    eventually(60, &format!("{n} running"), || {
        json(api, None, &["task", "list", &id])
            .as_array()
            .is_some_and(|t| t.len() == n as usize && t.iter().all(|t| t["state"] == "RUNNING"))
    });
    id
}

/// A job file for a real agent: `sh -c SCRIPT`, `n` instances in /default.
fn shell_job(name: &str, n: u32, script: &str) -> String {
    format!(
        "name: {name}\npool: /default\nkind: batch\ninstance_count: {n}\ndefault_task:\n  command: sh\n  args: [\"-c\", {script:?}]\n  resources: {{cpu_millis: 100, memory_mib: 32, disk_mib: 10, gpu_milli: 0, ports: 0}}\n"
    )
}
