//! The web UI in a real browser: `paceline dev` on simulated hosts, Debian's
//! Chromium (installed by `deploy/browser/chromium.sh`) driven through the
//! DevTools protocol by `tests/web/cdp.py`.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{BIN, Dev, eventually, free_port, tokens_file};

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

/// Runs browser steps (see tests/web/cdp.py); the evaluated values and the dialogs seen.
fn browse(steps: serde_json::Value) -> (Vec<serde_json::Value>, Vec<String>) {
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/web/cdp.py"))
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
            "name: {name}\nowner: web\npool: {pool}\nkind: batch\ninstance_count: {n}\ndefault_task:\n  command: work\n  env: {{SIM_DURATION_MS: \"600000\"}}\n  resources: {{cpu_millis: 1000, memory_mib: 64, disk_mib: 10, gpus: 0, ports: 0}}\n"
        ),
    )
    .expect("write");
    path.to_str().expect("utf-8").to_string()
}

/// A raw HTTP/1.1 request (what a browser sends), answering the status code and body.
fn http(api: u16, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", api)).expect("connect");
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

#[test]
fn the_page_shows_jobs_pools_hosts_and_plugins_and_rolls_a_plugin_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let _dev = Dev::start(dir, api, 4, &[]);
    let pool = dir.join("pool.yaml");
    std::fs::write(&pool, "reservation: {cpu: 4000, memory: 4096, disk: 1000}\n").expect("write");
    ok(cli(api, None, &["pool", "create", "/team", pool.to_str().expect("utf-8")]));
    let id = json(api, None, &["job", "create", &job_file(dir, "webjob", "/team", 4)])["id"]
        .as_str()
        .expect("id")
        .to_string();
    eventually(60, "4 running", || {
        json(api, None, &["task", "list", &id])
            .as_array()
            .is_some_and(|t| t.len() == 4 && t.iter().all(|t| t["state"] == "RUNNING"))
    });
    // A fifth core would exceed /team's reservation: it waits, and says so.
    let over =
        json(api, None, &["job", "create", &job_file(dir, "over", "/team", 1)])["id"].as_str().expect("id").to_string();
    ok(cli(api, None, &["plugin", "deploy", "placement/batch", "spread", "9", paceline_plugin_artifacts::SPREAD_PATH]));
    ok(cli(api, None, &["plugin", "activate", "placement/batch", "spread@9"]));

    let url = format!("http://127.0.0.1:{api}/ui/");
    let row = format!("tr[data-job-id=\"{id}\"]");
    let (values, dialogs) = browse(serde_json::json!([
        {"goto": url},
        {"wait": format!("document.querySelector('{row}')")},
        {"eval": format!("document.querySelector('{row} td.state').textContent")},
        {"click": row},
        {"wait": "document.querySelectorAll('#tasks-table tr[data-instance]').length === 4"},
        {"eval": "[...document.querySelectorAll('#tasks-table tr[data-instance]')].map(r => r.dataset.state)"},
        {"click": format!("tr[data-job-id=\"{over}\"]")},
        {"wait": "document.querySelector('#tasks-table tr[data-instance=\"0\"] td.reason') && document.querySelector('#tasks-table tr[data-instance=\"0\"] td.reason').textContent.includes('reservation')"},
        {"eval": "document.querySelector('#tasks-table tr[data-instance=\"0\"] td.reason').textContent"},
        {"click": "button[data-tab=\"pools\"]"},
        {"wait": "document.querySelector('[data-pool=\"/team\"]')"},
        {"eval": "[...document.querySelectorAll('[data-pool]')].map(p => [p.dataset.pool, ...['cpu', 'memory'].flatMap(k => ['entitlement', 'allocation'].map(b => parseFloat(p.querySelector(`[data-kind=${k}] .${b}`).style.width)))])"},
        {"click": "button[data-tab=\"hosts\"]"},
        {"wait": "document.querySelectorAll('#hosts-table tr[data-host]').length === 4"},
        {"eval": "[...document.querySelectorAll('#hosts-table tr[data-host]')].map(r => [r.dataset.host, Number(r.dataset.cpuUsed), parseFloat(r.querySelector('.used').style.width)])"},
        {"click": "button[data-tab=\"plugins\"]"},
        {"wait": "document.querySelector('div.slot[data-slot=\"placement/batch\"][data-active-version=\"spread@9\"]')"},
        {"click": "button.rollback[data-slot=\"placement/batch\"]"},
        {"wait": "document.querySelector('div.slot[data-slot=\"placement/batch\"]').dataset.activeVersion !== 'spread@9'"},
        {"eval": "document.querySelector('div.slot[data-slot=\"placement/batch\"]').dataset.activeVersion"},
        {"click": "button[data-tab=\"jobs\"]"},
        {"wait": format!("document.querySelector('{row}')")},
        {"click": row},
        {"wait": "document.querySelectorAll('#events-table tr[data-reason=\"Scheduled\"]').length === 4"},
        {"eval": "[...document.querySelectorAll('#events-table tr[data-reason]')].map(r => r.cells[4].textContent).sort()"},
        // The audit tab shows the rollback just clicked and the activation made with the CLI.
        {"click": "button[data-tab=\"audit\"]"},
        {"wait": "document.querySelector('#audit-table tr[data-method=\"POST /ui/api/plugins/rollback\"][data-target=\"placement/batch\"]')"},
        {"eval": "[...document.querySelectorAll('#audit-table tr[data-method=\"POST /ui/api/plugins/rollback\"]')].map(r => [r.dataset.principal, r.dataset.code])"},
        {"eval": "[...document.querySelectorAll('#audit-table tr[data-method=\"/paceline.v1.PluginService/ActivatePlugin\"]')].map(r => [r.dataset.target, r.dataset.code])"},
    ]));
    assert_eq!(
        values[6],
        serde_json::json!(["task 0", "task 1", "task 2", "task 3"]),
        "the job's events on its page, one Scheduled row per task"
    );
    let (code, text) = http(api, "GET", &format!("/ui/api/jobs/{id}"), None, "");
    assert!(code == 200 && text.contains("\"events\":") && text.contains("\"reason\":\"Scheduled\""), "{text}");
    assert_eq!(values[0], "RUNNING", "the job's state in the jobs table");
    assert_eq!(
        values[1],
        serde_json::json!(["RUNNING", "RUNNING", "RUNNING", "RUNNING"]),
        "its tasks after clicking it"
    );
    assert!(
        values[2].as_str().is_some_and(|r| r.contains("waiting on reservation") && r.contains("/team")),
        "why pending: {:?}",
        values[2]
    );
    let pools = values[3].as_array().expect("pools");
    let team = pools.iter().find(|p| p[0] == "/team").expect("the /team pool is drawn");
    let (entitled, allocated) = (team[1].as_f64().expect("width"), team[2].as_f64().expect("width"));
    // Four hosts of 8 cores: /team holds 4 cores (12.5 % of the cluster) and is entitled to at least that.
    assert!((allocated - 12.5).abs() < 0.01, "allocation bar follows the allocation: {allocated}");
    assert!(entitled >= allocated, "entitlement bar {entitled} covers the allocation {allocated}");
    assert!(pools.iter().any(|p| p[0] == "/") && pools.iter().any(|p| p[0] == "/default"), "the tree: {pools:?}");
    // Every bar of every pool is its amount over the cluster's capacity, as
    // the gRPC API reports them (demand is steady, so entitlement is too).
    let listed = json(api, None, &["pool", "list"]);
    let capacity = |k: &str| listed["capacity"][k].as_f64().expect("capacity");
    for drawn in pools {
        let pool = listed["pools"]
            .as_array()
            .expect("pools")
            .iter()
            .find(|p| p["path"] == drawn[0])
            .expect("drawn pools exist");
        let expected = [
            pool["entitlement"]["cpu_millis"].as_f64().expect("cpu") / capacity("cpu_millis"),
            pool["allocation"]["cpu_millis"].as_f64().expect("cpu") / capacity("cpu_millis"),
            pool["entitlement"]["memory_mib"].as_f64().expect("memory") / capacity("memory_mib"),
            pool["allocation"]["memory_mib"].as_f64().expect("memory") / capacity("memory_mib"),
        ];
        for (i, share) in expected.iter().enumerate() {
            let width = drawn[i + 1].as_f64().expect("width");
            assert!(
                (width - (100.0 * share).min(100.0)).abs() < 0.01,
                "bar {i} of {}: width {width}%, API {pool}",
                drawn[0]
            );
        }
    }
    let drawn_hosts = values[4].as_array().expect("hosts");
    let used: f64 = drawn_hosts.iter().filter_map(|h| h[1].as_f64()).sum();
    assert_eq!(used, 4000.0, "host utilization adds up to the four running cores");
    let hosts = json(api, None, &["host", "list"]);
    for h in drawn_hosts {
        let total = hosts.as_array().expect("hosts").iter().find(|x| x["hostname"] == h[0]).expect("a listed host")["total"]["cpu_millis"]
            .as_f64()
            .expect("total");
        let (used, width) = (h[1].as_f64().expect("used"), h[2].as_f64().expect("width"));
        assert!((width - 100.0 * used / total).abs() < 0.01, "cpu bar of {}: {width}% for {used}/{total}", h[0]);
    }
    assert_eq!(dialogs.len(), 1, "one confirmation: {dialogs:?}");
    assert!(dialogs[0].contains("placement/batch"), "{dialogs:?}");
    assert_ne!(values[5], "spread@9");
    // The rollback happened on the server, not only on the page.
    let slots = json(api, None, &["plugin", "list"]);
    let batch = slots.as_array().expect("slots").iter().find(|s| s["slot"] == "placement/batch").expect("slot").clone();
    assert_eq!(batch["active"], values[5], "{batch}");
    assert_ne!(batch["active"], "spread@9");
    assert_eq!(values[7], serde_json::json!([["anonymous", "OK"]]), "the page's rollback, audited");
    assert_eq!(values[8], serde_json::json!([["placement/batch spread@9", "OK"]]), "the CLI's activation, audited");
    // The audit route filters by job as `paceline audit --job` does.
    let (code, text) = http(api, "GET", &format!("/ui/api/audit?job_id={id}"), None, "");
    assert!(code == 200 && text.contains("CreateJob") && !text.contains("RollbackPlugin"), "{text}");

    // The routes a browser does not show: the bare address leads to the
    // page, assets carry their types, and bad requests get JSON errors with
    // a status that says why.
    let (code, text) = http(api, "GET", "/", None, "");
    assert!(code == 307 && text.to_ascii_lowercase().contains("location: /ui/"), "{text}");
    let (code, text) = http(api, "GET", "/ui/app.js", None, "");
    assert!(code == 200 && text.to_ascii_lowercase().contains("content-type: text/javascript"), "{text}");
    for (method, path, body, want) in [
        ("GET", "/ui/api/jobs/no-such-job", "", 404),
        ("POST", "/ui/api/plugins/rollback", "{not json", 400),
        ("POST", "/ui/api/plugins/rollback", "{\"slot\": \"no-slash\"}", 400),
    ] {
        let (code, text) = http(api, method, path, None, body);
        assert_eq!(code, want, "{method} {path} {body}: {text}");
        assert!(text.contains("{\"error\":"), "a JSON error: {text}");
    }
    // Rolling back past the first version is refused as a conflict.
    let mut last = (200, String::new());
    for _ in 0..10 {
        last = http(api, "POST", "/ui/api/plugins/rollback", None, "{\"slot\": \"placement/batch\"}");
        if last.0 != 200 {
            break;
        }
    }
    assert_eq!(last.0, 409, "{}", last.1);
}

#[test]
fn with_a_tokens_file_the_data_needs_a_token_and_the_page_asks_for_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let tokens = dir.join("tokens.yaml");
    let token = tokens_file(&tokens, &["--name", "ann", "--role", "user", "--pool", "/default"]);
    let api = free_port();
    let _dev = Dev::start(dir, api, 4, &["--tokens-file", tokens.to_str().expect("utf-8")]);
    let id = json(api, Some(&token), &["job", "create", &job_file(dir, "secret", "/default", 1)])["id"]
        .as_str()
        .expect("id")
        .to_string();

    // The page is open; its data is not.
    assert_eq!(http(api, "GET", "/ui/", None, "").0, 200);
    let (code, body) = http(api, "GET", "/ui/api/jobs", None, "");
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("\"error\""), "a JSON error: {body}");
    assert_eq!(http(api, "GET", "/ui/api/jobs", Some(&token), "").0, 200);
    // A user may not roll plugins back.
    let (code, body) = http(api, "POST", "/ui/api/plugins/rollback", Some(&token), "{\"slot\":\"placement/batch\"}");
    assert_eq!(code, 403, "{body}");

    let url = format!("http://127.0.0.1:{api}/ui/");
    let (values, _) = browse(serde_json::json!([
        {"goto": url},
        {"wait": "!document.getElementById('error').hidden"},
        {"eval": "document.getElementById('error').textContent"},
        // The user types the token into the field and presses Use.
        {"type": ["#token", token]},
        {"click": "#token-form button[type=submit]"},
        {"wait": format!("document.querySelector('tr[data-job-id=\"{id}\"]')")},
        {"eval": "document.getElementById('error').hidden"},
        // It is kept in this browser: after a reload the data comes without typing it again.
        {"reload": true},
        {"wait": format!("document.querySelector('tr[data-job-id=\"{id}\"]')")},
        {"eval": "document.getElementById('token').value"},
    ]));
    assert!(values[0].as_str().is_some_and(|t| t.contains("Not allowed")), "the page says why: {values:?}");
    assert_eq!(values[1], true, "with the token the error is gone");
    assert_eq!(values[2], token.as_str(), "the token field shows the kept token");
}
