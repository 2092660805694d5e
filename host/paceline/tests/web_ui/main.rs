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

mod cross_origin;
mod jobs;
mod slot_and_task_pages;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{BIN, Dev, eventually, free_port};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The browser binary; installs Debian's chromium when missing (fails the
/// test with the script's reason when it cannot).
fn chromium() -> String {
    let out = Command::new("bash")
        .arg(repo().join("deploy/browser/chromium.sh"))
        .arg("path")
        .output()
        .expect("runs chromium.sh");
    assert!(
        out.status.success(),
        "a real browser is needed for the web UI tests; deploy/browser/chromium.sh could not provide one:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Where the test run saves its screenshots (under target/, never committed).
fn shot(name: &str) -> String {
    format!("{}/web-ui-screenshots/{name}.png", env!("CARGO_TARGET_TMPDIR"))
}

/// The browser driver and axe-core, kept beside the server crate's web UI tests.
fn web_dir() -> PathBuf {
    repo().join("host/server/tests/web")
}

/// axe-core, vendored from npm (host/server/tests/web/vendor): injected into the page by the driver.
fn axe() -> String {
    web_dir().join("vendor/axe-core-4.10.2/axe.min.js").to_str().expect("utf-8").to_string()
}

/// Runs browser steps (see host/server/tests/web/cdp.py); the evaluated values and the dialogs seen.
fn browse(steps: serde_json::Value) -> (Vec<serde_json::Value>, Vec<String>) {
    let out = Command::new("python3")
        .arg(web_dir().join("cdp.py"))
        .arg(chromium())
        .arg(steps.to_string())
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "browser steps failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("driver output");
    let dialogs =
        v["dialogs"].as_array().into_iter().flatten().filter_map(|d| d.as_str().map(str::to_string)).collect();
    (v["values"].as_array().cloned().unwrap_or_default(), dialogs)
}

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

/// A raw HTTP/1.1 request as the page sends it (with its `X-Paceline-Request`
/// header), answering the status code and the whole answer.
fn http(api: u16, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    raw(
        api,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}X-Paceline-Request: ui\r\nContent-Type: application/json"
        ),
        body,
    )
}

/// A raw HTTP/1.1 request: `head` is the request line and headers (without
/// the length and the closing blank line); the status code and the whole answer.
fn raw(api: u16, head: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", api)).expect("connect");
    write!(s, "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

/// A job file for a real agent: `sh -c SCRIPT`, `n` instances in /default.
fn shell_job(name: &str, n: u32, script: &str) -> String {
    format!(
        "name: {name}\npool: /default\nkind: batch\ninstance_count: {n}\ndefault_task:\n  command: sh\n  args: [\"-c\", {script:?}]\n  resources: {{cpu_millis: 100, memory_mib: 32, disk_mib: 10, gpu_milli: 0, ports: 0}}\n"
    )
}
