//! Measured use end to end: `paceline dev` with a real agent runs a task
//! that keeps a core busy and holds 200 MiB; its agent samples the run
//! (/proc or its cgroup), the heartbeat carries the figures, and `task
//! get`, `task list`, the web UI (in a real browser, as `web_ui/`) and
//! `/metrics` show them beside what the task reserved.

mod common;

use std::path::{Path, PathBuf};

use common::{Dev, cli, eventually, free_port, http_get, json, ok};

/// Kills what the agent's tasks left (they outlive `dev` by design) even
/// when the test fails.
struct Leftovers(PathBuf);

impl Drop for Leftovers {
    fn drop(&mut self) {
        common::kill_processes_working_under(&self.0);
    }
}

fn job_file(dir: &Path) -> String {
    // The shell keeps a core busy; its child, in the run's process group,
    // holds 200 MiB of written (so resident) bytes.
    let command = "python3 -c 'import time; b = b\"x\" * (200 << 20); time.sleep(300)' & while :; do :; done";
    let body = format!(
        "name: burn\npool: /default\ninstance_count: 1\ndefault_task:\n  command: sh\n  args: [\"-c\", {command:?}]\n  resources: {{cpu_millis: 1000, memory_mib: 512}}\n"
    );
    let path = dir.join("burn.yaml");
    std::fs::write(&path, body).expect("job file");
    path.to_str().expect("utf-8").to_string()
}

/// Runs browser steps through host/server/tests/web/cdp.py and Debian's Chromium
/// (`deploy/browser/chromium.sh`, as `web_ui/` does); the evaluated values.
fn browse(steps: serde_json::Value) -> Vec<serde_json::Value> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let chromium = std::process::Command::new("bash")
        .arg(manifest.join("../../deploy/browser/chromium.sh"))
        .arg("path")
        .output()
        .expect("runs chromium.sh");
    assert!(chromium.status.success(), "no browser: {}", String::from_utf8_lossy(&chromium.stderr));
    let out = std::process::Command::new("python3")
        .arg(manifest.join("../server/tests/web/cdp.py"))
        .arg(String::from_utf8_lossy(&chromium.stdout).trim())
        .arg(steps.to_string())
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "browser steps failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("driver output");
    v["values"].as_array().cloned().unwrap_or_default()
}

/// The value of the first sample line of `name` whose labels contain all of `labels`.
fn sample(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

#[test]
fn a_busy_task_shows_its_measured_cpu_and_memory_beside_what_it_reserved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("dev");
    let _leftovers = Leftovers(data.clone());
    let api = free_port();
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
    eventually(30, "the agent up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 1));
    let id = ok(cli(api, &["job", "create", &job_file(dir.path())]));
    let mut last = serde_json::Value::Null;
    eventually(60, "measured use of a busy 200 MiB task", || {
        last = json(api, &["task", "get", &id, "0"]);
        let cpu = last["usage"]["cpu_millis"].as_u64().unwrap_or(0);
        let mem = last["usage"]["memory_mib"].as_u64().unwrap_or(0);
        cpu >= 300 && mem >= 150
    });
    eprintln!("measured: {}", last["usage"]);
    assert_eq!(last["reserved"]["cpu_millis"], 1000, "{last}");
    assert_eq!(last["reserved"]["memory_mib"], 512, "{last}");
    let sampled = last["usage"]["sampled_at_ms"].as_u64().unwrap_or(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    assert!(
        sampled > 0 && sampled <= now + 1_000 && now - sampled.min(now) < 30_000,
        "sampled at {sampled}, now {now}"
    );
    // A person reads it beside the reservation.
    let text = ok(cli(api, &["task", "get", &id, "0"]));
    let line = text.lines().find(|l| l.contains("used cpu")).unwrap_or_else(|| panic!("no use in:\n{text}"));
    assert!(line.contains("of 1000 millicores") && line.contains("of 512 MiB"), "{line}");
    let table = ok(cli(api, &["task", "list", &id]));
    assert!(table.contains("USED/RESERVED") && table.contains("/1000m "), "{table}");
    // /metrics: per pool (the pool and the root), beside pool_allocation.
    let (code, metrics) = http_get(api, "/metrics", None);
    assert_eq!(code, 200);
    let cpu = sample(&metrics, "paceline_pool_used", &["pool=\"/default\"", "kind=\"cpu\""]).unwrap_or(0.0);
    let mem = sample(&metrics, "paceline_pool_used", &["pool=\"/default\"", "kind=\"memory\""]).unwrap_or(0.0);
    // The CPU figure moves with the machine's load (the busy loop shares
    // the cores); it is there and summed, the memory one is steady.
    assert!(cpu > 0.0 && mem >= 150.0, "pool_used cpu {cpu} memory {mem}");
    assert_eq!(sample(&metrics, "paceline_pool_tasks_measured", &["pool=\"/default\""]), Some(1.0));
    assert!(sample(&metrics, "paceline_pool_used", &["pool=\"/\"", "kind=\"memory\""]).is_some_and(|m| m >= 150.0));
    // The web UI: the task page and the job's task table.
    let url = format!("http://127.0.0.1:{api}/ui/");
    let values = browse(serde_json::json!([
        {"goto": format!("{url}#/jobs/{id}/tasks/0")},
        {"wait": "document.querySelector('#task-usage[data-measured=\"true\"]')"},
        {"eval": "document.querySelector('#task-usage').textContent"},
        {"goto": format!("{url}#/jobs/{id}")},
        {"wait": "document.querySelector('#tasks-table tr[data-instance=\"0\"] td.usage') && document.querySelector('#tasks-table tr[data-instance=\"0\"] td.usage').textContent !== ''"},
        {"eval": "document.querySelector('#tasks-table tr[data-instance=\"0\"] td.usage').textContent"},
    ]));
    let page = values.first().and_then(|v| v.as_str()).unwrap_or_default();
    assert!(
        page.starts_with("cpu ") && page.contains(" of 1000 millicores, memory ") && page.ends_with(" of 512 MiB"),
        "{values:?}"
    );
    let cell = values.get(1).and_then(|v| v.as_str()).unwrap_or_default();
    assert!(cell.contains("/1000m ") && cell.ends_with("/512Mi"), "{values:?}");
    // Killed: nothing is measured any more, nothing is reserved.
    ok(cli(api, &["job", "kill", &id]));
    eventually(30, "the task killed and its use gone", || {
        let t = json(api, &["task", "get", &id, "0"]);
        t["state"] == "KILLED" && t["usage"].is_null() && t["reserved"].is_null()
    });
}
