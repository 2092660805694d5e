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

/// Where the test run saves its screenshots (under target/, never committed).
fn shot(name: &str) -> String {
    format!("{}/web-ui-screenshots/{name}.png", env!("CARGO_TARGET_TMPDIR"))
}

/// axe-core, vendored from npm (tests/web/vendor): injected into the page by the driver.
fn axe() -> String {
    format!("{}/tests/web/vendor/axe-core-4.10.2/axe.min.js", env!("CARGO_MANIFEST_DIR"))
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

#[test]
fn the_page_shows_jobs_pools_hosts_and_plugins_and_rolls_a_plugin_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let _dev = Dev::start(dir, api, 4, &[]);
    let pool = dir.join("pool.yaml");
    std::fs::write(&pool, "reservation: {cpu: 4000, memory: 4096, disk: 1000}\n").expect("write");
    ok(cli(api, None, &["pool", "create", "/team", pool.to_str().expect("utf-8")]));
    let id = create_running(api, dir, "webjob", "/team", 4);
    // A fifth core would exceed /team's reservation: it waits, and says so.
    let over =
        json(api, None, &["job", "create", &job_file(dir, "over", "/team", 1)])["id"].as_str().expect("id").to_string();
    ok(cli(api, None, &["plugin", "deploy", "placement/batch", "spread", "9", paceline_plugin_artifacts::SPREAD_PATH]));
    ok(cli(api, None, &["plugin", "activate", "placement/batch", "spread@9"]));

    let url = format!("http://127.0.0.1:{api}/ui/");
    let row = format!("tr[data-job-id=\"{id}\"]");
    let section = |s: &str| format!("#nav a[data-section=\"{s}\"]");
    let (values, dialogs) = browse(serde_json::json!([
        {"goto": url},
        {"wait": format!("document.querySelector('{row}')")},
        {"eval": format!("document.querySelector('{row} td.state').textContent")},
        {"screenshot": shot("jobs")},
        {"click": format!("{row} a")},
        {"wait": "document.querySelectorAll('#tasks-table tr[data-instance]').length === 4"},
        {"eval": "[...document.querySelectorAll('#tasks-table tr[data-instance]')].map(r => r.dataset.state)"},
        {"goto": format!("{url}#/jobs/{over}")},
        {"wait": "document.querySelector('#tasks-table tr[data-instance=\"0\"] td.reason') && document.querySelector('#tasks-table tr[data-instance=\"0\"] td.reason').textContent.includes('reservation')"},
        {"eval": "document.querySelector('#tasks-table tr[data-instance=\"0\"] td.reason').textContent"},
        {"click": section("pools")},
        {"wait": "document.querySelector('[data-pool=\"/team\"]')"},
        {"eval": "[...document.querySelectorAll('[data-pool]')].map(p => [p.dataset.pool, ...['cpu', 'memory'].flatMap(k => ['entitlement', 'allocation'].map(b => parseFloat(p.querySelector(`[data-kind=${k}] .${b}`).style.width)))])"},
        {"screenshot": shot("pools")},
        {"click": section("hosts")},
        {"wait": "document.querySelectorAll('#hosts-table tr[data-host]').length === 4"},
        {"eval": "[...document.querySelectorAll('#hosts-table tr[data-host]')].map(r => [r.dataset.host, Number(r.dataset.cpuUsed), parseFloat(r.querySelector('.used').style.width)])"},
        {"click": section("plugins")},
        {"wait": "document.querySelector('.slot[data-slot=\"placement/batch\"][data-active-version=\"spread@9\"]')"},
        {"click": "button.rollback[data-slot=\"placement/batch\"]"},
        {"wait": "document.querySelector('.slot[data-slot=\"placement/batch\"]').dataset.activeVersion !== 'spread@9'"},
        {"eval": "document.querySelector('.slot[data-slot=\"placement/batch\"]').dataset.activeVersion"},
        {"click": section("jobs")},
        {"wait": format!("document.querySelector('{row}')")},
        {"click": format!("{row} a")},
        {"wait": "document.querySelectorAll('#events-table tr[data-reason=\"Scheduled\"]').length === 4"},
        {"eval": "[...document.querySelectorAll('#events-table tr[data-reason]')].map(r => r.cells[4].textContent).sort()"},
        // The audit page shows the rollback just clicked and the activation made with the CLI.
        {"click": section("audit")},
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
    // Every page, saved as a picture and checked by axe-core (WCAG 2 A and AA):
    // no serious or critical violation.
    let mut steps = Vec::new();
    for (name, route, ready) in [
        ("jobs", "#/jobs".to_string(), "#jobs-table tbody tr".to_string()),
        ("job", format!("#/jobs/{id}"), "#events-table tbody tr".to_string()),
        ("job-pending", format!("#/jobs/{over}"), "#tasks-table tbody tr".to_string()),
        ("task", format!("#/jobs/{id}/tasks/0"), "#task-events tbody tr".to_string()),
        ("submit", "#/submit".to_string(), "#job-yaml".to_string()),
        ("pool", "#/pools/team".to_string(), "#pool-detail .figures".to_string()),
        ("hosts", "#/hosts".to_string(), "#hosts-table tbody tr".to_string()),
        ("plugins", "#/plugins".to_string(), ".slot".to_string()),
        ("plugin-slot", "#/plugins/placement/batch".to_string(), ".slot table".to_string()),
        ("audit", "#/audit".to_string(), "#audit-table tbody tr".to_string()),
    ] {
        steps.push(serde_json::json!({"goto": format!("{url}{route}")}));
        steps.push(serde_json::json!({"wait": format!("document.body.dataset.view === '{route}' && document.querySelector('{ready}')")}));
        steps.push(serde_json::json!({"screenshot": shot(name)}));
        steps.push(serde_json::json!({"axe": axe()}));
        steps.push(serde_json::json!({"eval": format!("'{name}'")}));
    }
    let (checked, _) = browse(serde_json::Value::Array(steps));
    for pair in checked.chunks(2) {
        assert_eq!(pair[0], serde_json::json!([]), "axe-core on the {} page: serious violations", pair[1]);
    }
    // A pool's allocation against its entitlement over the last hour: the
    // server samples every pool from its start (every 30 s), the page adds
    // the figures of now.
    let (code, text) = http(api, "GET", "/ui/api/pools/history?path=/default", None, "");
    assert_eq!(code, 200, "{text}");
    assert!(
        text.contains(r#""samples":[{"allocation":{"cpu":"#) && text.contains(r#""entitlement":{"cpu":"#),
        "{text}"
    );
    let (charted, _) = browse(serde_json::json!([
        {"goto": format!("{url}#/pools/team")},
        {"wait": "document.querySelector('#history-cpu polyline.allocation')"},
        {"eval": "document.getElementById('history-cpu').getAttribute('aria-label')"},
        {"eval": "Number(document.querySelector('#history-memory polyline.entitlement').dataset.points)"},
    ]));
    let team = json(api, None, &["pool", "get", "/team"]);
    let said = format!(
        "CPU (millicores): allocation {} of entitlement {} now",
        team["allocation"]["cpu_millis"], team["entitlement"]["cpu_millis"]
    );
    assert!(charted[0].as_str().is_some_and(|l| l.starts_with(&said)), "{charted:?} against {said}");
    assert!(charted[1].as_u64().is_some_and(|n| n >= 1), "{charted:?}");
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
    // Activate and shadow from the slot's page: a version chosen in its list.
    let (values, dialogs) = browse(serde_json::json!([
        {"goto": format!("{url}#/plugins/placement/batch")},
        {"wait": "document.body.dataset.view === '#/plugins/placement/batch' && document.querySelector('.slot')"},
        {"type": ["#version-placement-batch", "spread@9"]},
        {"click": "button.activate[data-slot=\"placement/batch\"]"},
        {"wait": "document.querySelector('.slot').dataset.activeVersion === 'spread@9'"},
        {"click": "button.rollback[data-slot=\"placement/batch\"]"},
        {"wait": "document.querySelector('.slot').dataset.activeVersion !== 'spread@9'"},
        {"type": ["#version-placement-batch", "spread@9"]},
        {"click": "button.shadow[data-slot=\"placement/batch\"]"},
        {"wait": "document.querySelector('.shadow-report p')"},
        // Still there after the re-read that follows the action.
        {"wait": "window.paceline.refreshes > 0 && document.querySelector('.slot tr[data-version=\"spread@9\"]').cells[1].textContent === 'shadow'"},
        {"eval": "document.querySelector('.shadow-report p').textContent"},
        {"screenshot": shot("plugin-shadow")},
        // Deploy a version from a .wasm file chosen in the page.
        {"file": ["#wasm-file", paceline_plugin_artifacts::SPREAD_PATH]},
        {"type": ["#wasm-name", "spread"]},
        {"type": ["#wasm-version", "10"]},
        {"click": "#deploy-plugin"},
        {"wait": "document.querySelector('.slot tr[data-version=\"spread@10\"]')", "timeout": 60},
        {"eval": "document.getElementById('deploy-result') ? document.getElementById('deploy-result').textContent : ''"},
    ]));
    assert!(values[0].as_str().is_some_and(|t| t.starts_with("Compared")), "the shadow report: {values:?}");
    assert_eq!(dialogs.len(), 4, "activate, roll back, shadow, deploy: each confirmed: {dialogs:?}");
    let slots = json(api, None, &["plugin", "list"]);
    let batch = slots.as_array().expect("slots").iter().find(|s| s["slot"] == "placement/batch").expect("slot").clone();
    assert!(
        batch["versions"].as_array().expect("versions").iter().any(|v| v["id"] == "spread@10"),
        "the uploaded version is on the server: {batch}"
    );
    // Its audit record names the slot and the version (from the upload's query).
    let (code, text) = http(api, "GET", "/ui/api/audit?method=POST%20/ui/api/plugins/deploy", None, "");
    assert!(code == 200 && text.contains(r#""target":"placement/batch spread@10""#), "{text}");
    // The audit route filters by job as `paceline audit --job` does.
    let (code, text) = http(api, "GET", &format!("/ui/api/audit?job_id={id}"), None, "");
    assert!(code == 200 && text.contains("CreateJob") && !text.contains("RollbackPlugin"), "{text}");

    // The routes a browser does not show: the bare address leads to the
    // page, assets carry their types, and bad requests get JSON errors with
    // a status that says why.
    let (code, text) = http(api, "GET", "/", None, "");
    assert!(code == 307 && text.to_ascii_lowercase().contains("location: /ui/"), "{text}");
    for file in ["app.js", "api.js", "dom.js", "lists.js", "job.js", "cluster.js"] {
        let (code, text) = http(api, "GET", &format!("/ui/{file}"), None, "");
        assert!(code == 200 && text.to_ascii_lowercase().contains("content-type: text/javascript"), "{file}: {text}");
    }
    assert_eq!(http(api, "GET", "/ui/secrets.txt", None, "").0, 404, "only the embedded files are served");
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

/// A tokens file admitting several principals (each `paceline auth token`'s
/// arguments); their tokens, in order.
fn tokens_for(path: &Path, principals: &[&[&str]]) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut entries = String::new();
    for args in principals {
        tokens.push(tokens_file(path, args));
        let one = std::fs::read_to_string(path).expect("read");
        entries.push_str(one.strip_prefix("version: 1\nprincipals:\n").expect("one principal"));
    }
    std::fs::write(path, format!("version: 1\nprincipals:\n{entries}")).expect("write");
    tokens
}

#[test]
fn with_a_tokens_file_the_data_needs_a_token_and_the_page_asks_for_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let tokens = dir.join("tokens.yaml");
    let all = tokens_for(
        &tokens,
        &[&["--name", "ann", "--role", "user", "--pool", "/default"], &["--name", "root", "--role", "admin"]],
    );
    let (token, root) = (all[0].clone(), all[1].clone());
    let api = free_port();
    let _dev = Dev::start(dir, api, 4, &["--tokens-file", tokens.to_str().expect("utf-8")]);
    let id = json(api, Some(&token), &["job", "create", &job_file(dir, "secret", "/default", 1)])["id"]
        .as_str()
        .expect("id")
        .to_string();
    // Another team's job, in a pool ann has no grant for.
    let pool = dir.join("pool.yaml");
    std::fs::write(&pool, "reservation: {cpu: 1000, memory: 1024, disk: 100}\n").expect("write");
    ok(cli(api, Some(&root), &["pool", "create", "/other", pool.to_str().expect("utf-8")]));
    let theirs = json(api, Some(&root), &["job", "create", &job_file(dir, "theirs", "/other", 1)])["id"]
        .as_str()
        .expect("id")
        .to_string();

    // The page is open; its data is not.
    assert_eq!(http(api, "GET", "/ui/", None, "").0, 200);
    let (code, body) = http(api, "GET", "/ui/api/jobs", None, "");
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("\"error\""), "a JSON error: {body}");
    assert_eq!(http(api, "GET", "/ui/api/jobs", Some(&token), "").0, 200);
    assert_eq!(http(api, "GET", "/ui/api/events", None, "").0, 401, "the live stream needs the token too");
    // A user may not roll plugins back, drain hosts, or kill another team's job.
    let (code, body) = http(api, "POST", "/ui/api/plugins/rollback", Some(&token), "{\"slot\":\"placement/batch\"}");
    assert_eq!(code, 403, "{body}");
    let host = json(api, Some(&root), &["host", "list"])[0]["hostname"].as_str().expect("a host").to_string();
    assert_eq!(http(api, "POST", &format!("/ui/api/hosts/{host}/drain"), Some(&token), "").0, 403);
    let (code, body) = http(api, "POST", &format!("/ui/api/jobs/{theirs}/kill"), Some(&token), "");
    assert!(code == 403 && body.contains("may not change jobs in pool /other"), "{code} {body}");
    // Nor read its log, and its task's events are withheld.
    let (code, body) = http(api, "GET", &format!("/ui/api/tasks/{theirs}/0/logs?follow=true"), Some(&token), "");
    assert!(code == 403 && body.contains("may not read task logs or events"), "{code} {body}");
    let (code, body) = http(api, "GET", &format!("/ui/api/tasks/{theirs}/0"), Some(&token), "");
    assert!(code == 200 && body.contains("\"events\":[]") && body.contains("may not read"), "{body}");

    let url = format!("http://127.0.0.1:{api}/ui/");
    let (values, dialogs) = browse(serde_json::json!([
        {"goto": url},
        {"wait": "!document.getElementById('error').hidden"},
        {"eval": "document.getElementById('error').textContent"},
        // The user types the token into the field and signs in.
        {"type": ["#token", token]},
        {"click": "#token-form button[type=submit]"},
        {"wait": format!("document.querySelector('tr[data-job-id=\"{id}\"]')")},
        {"eval": "document.getElementById('error').hidden"},
        // It is kept in this browser: after a reload the data comes without typing it again.
        {"reload": true},
        {"wait": format!("document.querySelector('tr[data-job-id=\"{id}\"]')")},
        {"eval": "document.getElementById('token').value"},
        {"wait": "window.paceline.live === 'live'"},
        {"eval": "[document.getElementById('principal').dataset.name, document.getElementById('principal').dataset.role]"},
        // Another team's job: its actions are off, and the server refuses them anyway.
        {"goto": format!("{url}#/jobs/{theirs}")},
        {"wait": "document.getElementById('kill-job')"},
        {"eval": "['kill-job', 'restart-job', 'scale-job'].map(b => document.getElementById(b).disabled)"},
        {"eval": format!("fetch('/ui/api/jobs/{theirs}/kill', {{method: 'POST', headers: {{Authorization: 'Bearer ' + localStorage.getItem('paceline-token')}}}}).then(r => r.status)")},
        {"goto": format!("{url}#/hosts")},
        {"wait": "document.querySelectorAll('#hosts-table tr[data-host]').length === 4"},
        {"eval": "[...document.querySelectorAll('button[data-host-action]')].every(b => b.disabled)"},
        // Ann's own job: she may scale it, then kill it; the page follows both.
        {"goto": format!("{url}#/jobs/{id}")},
        {"wait": "document.getElementById('kill-job') && !document.getElementById('kill-job').disabled"},
        {"type": ["#scale-count", "2"]},
        {"click": "#scale-job"},
        {"wait": "document.querySelectorAll('#tasks-table tr[data-instance]').length === 2", "timeout": 30},
        {"eval": "window.__samePage = true"},
        {"click": "#kill-job"},
        {"wait": "document.querySelector('#job-state[data-state=\"KILLED\"]')", "timeout": 30},
        {"eval": "window.__samePage === true"},
    ]));
    assert!(values[0].as_str().is_some_and(|t| t.contains("Not allowed")), "the page says why: {values:?}");
    assert_eq!(values[1], true, "with the token the error is gone");
    assert_eq!(values[2], token.as_str(), "the token field shows the kept token");
    assert_eq!(values[3], serde_json::json!(["ann", "user"]), "the principal is shown");
    assert_eq!(values[4], serde_json::json!([true, true, true]), "another team's job: actions disabled");
    assert_eq!(values[5], 403, "and refused by the server when sent anyway");
    assert_eq!(values[6], true, "a user's drain buttons are disabled");
    assert_eq!(values[8], true, "KILLED shown without a reload");
    assert_eq!(dialogs.len(), 2, "confirmations for ann's scale and kill: {dialogs:?}");
    assert_eq!(json(api, Some(&root), &["job", "get", &id])["spec"]["instance_count"], 2, "scaled on the server");
    let state =
        |job: &str| json(api, Some(&root), &["job", "get", job])["status"]["state"].as_str().unwrap_or("").to_string();
    assert!(state(&id).ends_with("KILLED"), "ann's job was killed on the server: {}", state(&id));
    assert!(!state(&theirs).contains("KILL"), "the other team's job was not: {}", state(&theirs));
}

/// A job file for a real agent: `sh -c SCRIPT`, `n` instances in /default.
fn shell_job(name: &str, n: u32, script: &str) -> String {
    format!(
        "name: {name}\npool: /default\nkind: batch\ninstance_count: {n}\ndefault_task:\n  command: sh\n  args: [\"-c\", {script:?}]\n  resources: {{cpu_millis: 100, memory_mib: 32, disk_mib: 10, gpu_milli: 0, ports: 0}}\n"
    )
}

#[test]
fn an_operator_submits_a_job_follows_its_log_and_drains_a_host_from_the_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let data = dir.join("dev");
    let listen = format!("127.0.0.1:{api}");
    let _dev = Dev::spawn(
        &["dev", "--agents", "2", "--data-dir", data.to_str().expect("utf-8"), "--api-listen", &listen],
        "API on",
    );
    struct Reap(PathBuf);
    impl Drop for Reap {
        fn drop(&mut self) {
            common::kill_processes_working_under(&self.0);
        }
    }
    let _reap = Reap(data.clone());
    eventually(30, "two agents up", || json(api, None, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));

    // A task that prints one line, then a second once the page shows the first.
    let go = dir.join("go");
    let trigger = shot("task-first-line");
    let _ = std::fs::remove_file(&trigger);
    let script = format!(
        "echo first line; while [ ! -e {} ]; do sleep 0.1; done; echo line after the page opened",
        go.display()
    );
    let file = dir.join("log.yaml");
    std::fs::write(&file, shell_job("logger", 1, &script)).expect("write");
    let logger = ok(cli(api, None, &["job", "create", file.to_str().expect("utf-8")]));
    // The driver saves a screenshot once the first line is on the page; then the task goes on.
    let (trigger_seen, go_file) = (PathBuf::from(&trigger), go.clone());
    std::thread::spawn(move || {
        for _ in 0..600 {
            if trigger_seen.exists() {
                let _ = std::fs::write(&go_file, "");
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    });

    let url = format!("http://127.0.0.1:{api}/ui/");
    let bad = shell_job("hello", 2, "echo hi").replace("command: sh", "command: \"\"");
    let good = shell_job("hello", 2, "echo hello from the page");
    let host = json(api, None, &["host", "list"])[0]["hostname"].as_str().expect("a host").to_string();
    let (values, dialogs) = browse(serde_json::json!([
        // Submit from the form: a mistake is shown at its line, nothing is sent.
        {"goto": format!("{url}#/submit")},
        {"wait": "document.getElementById('job-yaml')"},
        {"type": ["#job-yaml", bad]},
        {"click": "#submit-job"},
        {"wait": "!document.getElementById('yaml-error').hidden"},
        {"eval": "[document.getElementById('yaml-error').dataset.line, document.getElementById('yaml-error').textContent, document.getElementById('job-yaml').getAttribute('aria-invalid')]"},
        {"type": ["#job-yaml", good]},
        {"eval": "window.__samePage = true"},
        {"click": "#submit-job"},
        {"wait": "location.hash.startsWith('#/jobs/') && document.getElementById('job-state')"},
        // Followed live to its end: no reload, no polling.
        {"wait": "document.querySelector('#job-state[data-state=\"SUCCEEDED\"]')", "timeout": 60},
        {"eval": "[location.hash.slice('#/jobs/'.length), window.__samePage === true, window.paceline.events > 0, window.paceline.live]"},
        {"screenshot": shot("job-submitted")},
        // A deep link survives a reload; back and forward move between views.
        {"reload": true},
        {"wait": "document.querySelector('#job-state[data-state=\"SUCCEEDED\"]')"},
        {"eval": "[location.hash.startsWith('#/jobs/'), window.__samePage === undefined]"},
        {"eval": "history.back()"},
        {"wait": "location.hash === '#/submit' && document.getElementById('job-yaml')"},
        {"eval": "history.forward()"},
        {"wait": "document.querySelector('#job-state[data-state=\"SUCCEEDED\"]')"},
        // The log, live: the second line is printed only after the page shows the first.
        {"goto": format!("{url}#/jobs/{logger}/tasks/0")},
        {"wait": "document.getElementById('log').textContent.includes('first line')", "timeout": 60},
        {"eval": "document.getElementById('log').textContent.includes('after the page opened')"},
        {"screenshot": trigger},
        {"wait": "document.getElementById('log').textContent.includes('line after the page opened')", "timeout": 30},
        {"eval": "document.getElementById('log').textContent"},
        {"screenshot": shot("task-log")},
        {"axe": axe()},
        // Drain a host.
        {"goto": format!("{url}#/hosts")},
        {"wait": "document.querySelectorAll('#hosts-table tr[data-host]').length === 2"},
        {"click": format!("button[data-host-action=\"drain\"][data-host=\"{host}\"]")},
        {"wait": format!("['DRAINING', 'DRAINED'].includes(document.querySelector('tr[data-host=\"{host}\"]').dataset.state)")},
        {"screenshot": shot("hosts-drained")},
        // The keyboard reaches every control: Tab from the top to the Submit link, Enter opens it.
        {"goto": format!("{url}#/jobs")},
        {"wait": "document.querySelector('#jobs-table tbody tr')"},
        {"eval": "document.querySelector('.skip').focus(), document.activeElement.textContent"},
        {"key": "Tab"}, {"key": "Tab"}, {"key": "Tab"},
        {"eval": "document.activeElement.textContent"},
        {"key": "Enter"},
        {"wait": "location.hash === '#/submit' && document.getElementById('job-yaml')"},
        {"eval": "document.activeElement.id"},
    ]));
    let line = values[0][0].as_str().expect("a line").to_string();
    assert_eq!(line, "6", "the error points at `command:` (line 6): {:?}", values[0]);
    assert!(values[0][1].as_str().is_some_and(|t| t.contains("command")), "{:?}", values[0]);
    assert_eq!(values[0][2], "true", "the field is marked invalid");
    let submitted = values[2][0].as_str().expect("job id").to_string();
    assert_eq!(values[2][1], true, "SUCCEEDED reached without a reload");
    assert_eq!(values[2][2], true, "through the change stream");
    assert_eq!(values[2][3], "live");
    assert_eq!(values[3], serde_json::json!([true, true]), "the deep link reloads to the same view");
    assert!(
        json(api, None, &["job", "get", &submitted])["status"]["state"]
            .as_str()
            .is_some_and(|s| s.ends_with("SUCCEEDED"))
    );
    assert_eq!(ok(cli(api, None, &["task", "logs", &submitted, "1"])), "hello from the page");
    assert_eq!(values[6], false, "the second line was not printed before the page showed the first");
    assert!(
        values[7].as_str().is_some_and(|l| l.contains("first line\nline after the page opened")),
        "{:?}",
        values[7]
    );
    assert_eq!(values[8], serde_json::json!([]), "axe-core on the task page");
    let hosts = json(api, None, &["host", "list"]);
    let drained =
        hosts.as_array().expect("hosts").iter().find(|h| h["hostname"] == host.as_str()).expect("host").clone();
    assert!(drained["state"].as_str().is_some_and(|s| s.contains("DRAIN")), "drained on the server: {drained}");
    assert_eq!(values[9], "Skip to content");
    assert_eq!(values[10], "Submit", "three Tabs: the title link, Jobs, Submit");
    assert_eq!(values[11], "view", "the new view takes the focus");
    assert_eq!(dialogs.len(), 2, "confirmations: submit and drain: {dialogs:?}");
    assert!(dialogs[0].contains("Submit job hello") && dialogs[1].contains(&host), "{dialogs:?}");
}

#[test]
fn the_jobs_list_pages_filters_and_sorts_from_its_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let _dev = Dev::start(dir, api, 2, &[]);
    // 205 jobs through the page's own submit route (a job file's YAML):
    // three pages of the list. Every seventh is named `odd-…`.
    for i in 0..205 {
        let name = if i % 7 == 0 { format!("odd-{i:03}") } else { format!("bulk-{i:03}") };
        let spec = format!(
            "name: {name}\npool: /default\nkind: batch\ninstance_count: 1\nlabels: {{tier: t{}}}\ndefault_task:\n  command: work\n  env: {{SIM_DURATION_MS: \"600000\"}}\n  resources: {{cpu_millis: 10, memory_mib: 8, disk_mib: 1, gpu_milli: 0, ports: 0}}\n",
            i % 2
        );
        let (code, text) = http(api, "POST", "/ui/api/jobs", None, &spec);
        assert_eq!(code, 200, "{text}");
    }
    // A bad file is refused with its line, and creates nothing.
    let (code, text) = http(api, "POST", "/ui/api/jobs", None, "name: x\nkind: [\n");
    assert!(code == 400 && text.contains("\"line\":"), "{text}");
    let (code, text) = http(
        api,
        "POST",
        "/ui/api/jobs/validate",
        None,
        "name: x\npool: /default\nkind: batch\ninstance_count: 1\ndefault_task:\n  command: \"\"\n  resources: {cpu_millis: 10, memory_mib: 8, disk_mib: 1, gpu_milli: 0, ports: 0}\n",
    );
    assert!(code == 400 && text.contains("\"line\":6"), "the line of `command:`: {text}");

    let url = format!("http://127.0.0.1:{api}/ui/");
    let rows = "[...document.querySelectorAll('#jobs-table tbody tr')]";
    let (values, _) = browse(serde_json::json!([
        {"goto": format!("{url}#/jobs")},
        {"wait": "document.querySelectorAll('#jobs-table tbody tr').length === 100"},
        {"eval": "!!document.getElementById('next-page')"},
        {"click": "#next-page"},
        {"wait": "document.body.dataset.view.includes('page=') && document.querySelectorAll('#jobs-table tbody tr').length === 100"},
        {"eval": format!("{rows}.map(r => r.dataset.jobId)")},
        {"click": "#next-page"},
        {"wait": "document.body.dataset.view.includes('page=') && document.querySelectorAll('#jobs-table tbody tr').length === 5"},
        {"eval": "!!document.getElementById('next-page')"},
        // The page is in the address: a reload stays on it.
        {"reload": true},
        {"wait": "document.querySelectorAll('#jobs-table tbody tr').length === 5"},
        // Search by name, sorted by name descending, from the form.
        {"goto": format!("{url}#/jobs")},
        {"wait": "document.querySelectorAll('#jobs-table tbody tr').length === 100"},
        {"type": ["#f-q", "odd-"]},
        {"click": "#job-filters button[type=submit]"},
        {"wait": "document.body.dataset.view.includes('q=odd-')"},
        {"click": "a[data-sort=\"name\"]"},
        {"wait": "document.body.dataset.view.includes('sort=name')"},
        {"click": "a[data-sort=\"name\"]"},
        {"wait": "document.body.dataset.view.includes('sort=-name')"},
        {"eval": format!("{rows}.map(r => r.cells[1].textContent)")},
        {"eval": "document.querySelector('th[aria-sort=\"descending\"]').textContent"},
        // A label filter.
        {"goto": format!("{url}#/jobs?q=odd-&label=tier=t1")},
        {"wait": "document.body.dataset.view === '#/jobs?q=odd-&label=tier=t1'"},
        {"eval": format!("{rows}.map(r => r.cells[1].textContent)")},
        {"eval": "window.paceline.refreshes"},
    ]));
    assert_eq!(values[0], true, "205 jobs: a second page");
    let second = values[1].as_array().expect("ids");
    assert_eq!(second.len(), 100);
    assert_eq!(values[2], false, "no page after the third");
    let odd: Vec<String> = (0..205).filter(|i| i % 7 == 0).map(|i| format!("odd-{i:03}")).rev().collect();
    assert_eq!(values[3], serde_json::json!(odd), "searched and sorted by name, descending");
    assert!(values[4].as_str().is_some_and(|t| t.starts_with("Name")), "{:?}", values[4]);
    let odd_t1: Vec<String> = (0..205).filter(|i| i % 7 == 0 && i % 2 == 1).map(|i| format!("odd-{i:03}")).collect();
    let mut shown: Vec<String> =
        values[5].as_array().expect("names").iter().filter_map(|n| n.as_str().map(str::to_string)).collect();
    shown.sort();
    assert_eq!(shown, odd_t1, "the label filter");
}

/// Waits (in a thread) for the driver to save the screenshot `name`, then runs `then`.
fn when_shot(name: &str, then: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
    let path = PathBuf::from(shot(name));
    let _ = std::fs::remove_file(&path);
    std::thread::spawn(move || {
        for _ in 0..1200 {
            if path.exists() {
                then();
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    })
}

#[test]
fn a_lost_connection_is_shown_and_the_page_reconnects_and_catches_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path().to_path_buf();
    let api = free_port();
    let dev = Dev::start(&dir, api, 2, &[]);
    let first = json(api, None, &["job", "create", &job_file(&dir, "before", "/default", 1)])["id"]
        .as_str()
        .expect("id")
        .to_string();
    // The server goes away once the page is live, and comes back (same data,
    // same port) once the page says the connection is lost; then a job is
    // created, which the page must show without a reload.
    let stop = when_shot("live-before-restart", move || drop(dev));
    let (dir2, restarted) = (dir.clone(), std::sync::Arc::new(std::sync::Mutex::new(None)));
    let keep = restarted.clone();
    let start = when_shot("connection-lost", move || {
        let dev = Dev::start(&dir2, api, 2, &[]);
        let id = json(api, None, &["job", "create", &job_file(&dir2, "after", "/default", 1)])["id"]
            .as_str()
            .expect("id")
            .to_string();
        *keep.lock().expect("lock") = Some((dev, id));
    });
    let url = format!("http://127.0.0.1:{api}/ui/");
    let (values, _) = browse(serde_json::json!([
        {"goto": format!("{url}#/jobs")},
        {"wait": format!("document.querySelector('tr[data-job-id=\"{first}\"]') && window.paceline.live === 'live'")},
        {"eval": "window.__samePage = true"},
        {"screenshot": shot("live-before-restart")},
        {"wait": "document.getElementById('live').dataset.live === 'reconnecting'", "timeout": 30},
        {"eval": "document.getElementById('live').textContent"},
        {"screenshot": shot("connection-lost")},
        {"wait": "window.paceline.live === 'live' && document.querySelectorAll('tr[data-job-id^=\"after-\"]').length === 1", "timeout": 60},
        {"eval": "window.__samePage === true"},
    ]));
    stop.join().expect("stopped");
    start.join().expect("restarted");
    assert!(values[1].as_str().is_some_and(|t| t.contains("connection lost")), "{values:?}");
    assert_eq!(values[2], true, "the new job came through the new stream, without a reload");
    assert!(restarted.lock().expect("lock").is_some(), "the server came back");
    // The pool chart's samples survived the restart: the first server's
    // (taken at its start) and the second's.
    let (code, text) = http(api, "GET", "/ui/api/pools/history?path=/default", None, "");
    let history: serde_json::Value =
        serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap_or_default();
    let samples = history["samples"].as_array().map_or(0, Vec::len);
    assert!(code == 200 && samples >= 2, "samples from before and after the restart: {text}");
}

#[test]
fn an_update_is_followed_and_resumed_or_aborted_from_the_job_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let _dev = Dev::start(dir, api, 2, &[]);
    let file = job_file(dir, "rolling", "/default", 2);
    let id = json(api, None, &["job", "create", &file])["id"].as_str().expect("id").to_string();
    eventually(60, "2 running", || {
        json(api, None, &["task", "list", &id])
            .as_array()
            .is_some_and(|t| t.len() == 2 && t.iter().all(|t| t["state"] == "RUNNING"))
    });
    // A new command, rolled out one instance at a time, created paused.
    let changed = std::fs::read_to_string(&file).expect("read").replace("command: work", "command: work2");
    let v2 = dir.join("v2.yaml");
    std::fs::write(&v2, &changed).expect("write");
    ok(cli(api, None, &["job", "update", &id, v2.to_str().expect("utf-8"), "--paused", "--batch-size", "1"]));
    let url = format!("http://127.0.0.1:{api}/ui/");
    let state = "document.getElementById('job-update') && document.getElementById('job-update').dataset.updateState";
    let (values, dialogs) = browse(serde_json::json!([
        {"goto": format!("{url}#/jobs/{id}")},
        {"wait": format!("{state} === 'PAUSED'")},
        {"screenshot": shot("job-update-paused")},
        {"click": "button[data-update-action=\"resume\"]"},
        {"wait": format!("{state} !== 'PAUSED'"), "timeout": 30},
        {"wait": format!("{state} === 'SUCCEEDED'"), "timeout": 60},
        {"eval": "document.querySelector('#job-update progress').value"},
    ]));
    assert_eq!(values[0], 2, "both instances updated");
    assert_eq!(dialogs.len(), 1, "{dialogs:?}");
    assert!(dialogs[0].starts_with("Resume update"), "{dialogs:?}");
    // A second update, paused, aborted from the page.
    let v3 = dir.join("v3.yaml");
    std::fs::write(&v3, changed.replace("command: work2", "command: work3")).expect("write");
    ok(cli(api, None, &["job", "update", &id, v3.to_str().expect("utf-8"), "--paused"]));
    let (_, dialogs) = browse(serde_json::json!([
        {"goto": format!("{url}#/jobs/{id}")},
        {"wait": format!("{state} === 'PAUSED'")},
        {"click": "button[data-update-action=\"abort\"]"},
        {"wait": format!("{state} === 'ABORTED'"), "timeout": 30},
    ]));
    assert_eq!(dialogs.len(), 1, "{dialogs:?}");
    let job = json(api, None, &["job", "get", &id]);
    assert!(job["update"]["state"].as_str().is_some_and(|s| s.contains("ABORTED")), "{job}");
    assert_eq!(job["status"]["latest_config_version"], 3, "{job}");
    // The job's history: version 1 read from the page and rolled back to
    // (an update to its spec, which becomes version 4).
    let select = "document.getElementById('version-select')";
    let (values, dialogs) = browse(serde_json::json!([
        {"goto": format!("{url}#/jobs/{id}")},
        {"wait": format!("{select} && {select}.options.length === 3")},
        {"eval": format!("(s => {{ s.value = '1'; s.dispatchEvent(new Event('change')); return s.value; }})({select})")},
        {"wait": "(t => t.includes('command: work') && !t.includes('command: work2'))(document.getElementById('version-spec').textContent)"},
        // Its changes against version 2, line by line.
        {"eval": "(s => { s.value = '2'; s.dispatchEvent(new Event('change')); return s.value; })(document.getElementById('version-compare'))"},
        {"wait": "document.querySelector('#version-spec .removed')"},
        {"eval": "[...document.querySelectorAll('#version-spec .removed')].map(s => s.textContent.trim()).join('|')"},
        {"eval": "[...document.querySelectorAll('#version-spec .added')].map(s => s.textContent.trim()).join('|')"},
        {"eval": "document.getElementById('rollback-job').textContent"},
        {"screenshot": shot("job-versions")},
        {"click": "#rollback-job"},
        {"wait": format!("{state} === 'SUCCEEDED'"), "timeout": 60},
        {"wait": format!("{select}.options.length === 4"), "timeout": 30},
    ]));
    assert_eq!(values[0], "1");
    assert_eq!(values[1], "2");
    assert_eq!(values[2], "-   command: work2", "only the command differs");
    assert_eq!(values[3], "+   command: work");
    assert_eq!(values[4], "Roll back to version 1");
    assert_eq!(dialogs.len(), 1, "{dialogs:?}");
    assert!(dialogs[0].starts_with(&format!("Roll job {id} back to config version 1")), "{dialogs:?}");
    let job = json(api, None, &["job", "get", &id]);
    assert_eq!(job["status"]["desired_config_version"], 4, "{job}");
    assert_eq!(job["spec"]["default_task"]["command"], "work", "{job}");
    let v2 = json(api, None, &["job", "get", &id, "--config-version", "2"]);
    assert_eq!(v2["spec"]["default_task"]["command"], "work2", "{v2}");
    let missing = cli(api, None, &["job", "get", &id, "--config-version", "9"]);
    assert!(!missing.status.success(), "a version the job never had is refused");
}

/// Two hosts' worth of a trace for `paceline sim compare`: one job of four
/// one-core tasks, which binpack and spread place differently.
const SMALL_TRACE: &str = r#"{"format":"paceline-trace","version":1,"name":"small","source":"hand","duration_ms":120000}
{"at":0,"event":"pool","pool":{"path":"/p","reservation":{"cpu":16000,"memory":65536}}}
{"at":0,"event":"host","name":"h0","resources":{"cpu_millis":8000,"memory_mib":32768},"attributes":{"zone":"a"}}
{"at":0,"event":"host","name":"h1","resources":{"cpu_millis":8000,"memory_mib":32768},"attributes":{"zone":"b"}}
{"at":0,"event":"job","id":"small","spec":{"name":"small","owner":"t","pool":"/p","instance_count":4,"default_task":{"command":"x","resources":{"cpu_millis":1000,"memory_mib":1024}}},"run":{"ms":60000}}
{"at":120000,"event":"end"}
"#;

#[test]
fn the_slot_page_shows_the_shadow_diff_and_version_charts_and_sim_reports_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let _dev = Dev::start(dir, api, 3, &[]);
    // Binpack serves; spread is shadowed beside it: four tasks on three
    // empty hosts go to one host under binpack and to several under spread.
    ok(cli(
        api,
        None,
        &["plugin", "deploy", "placement/batch", "binpack", "1", paceline_plugin_artifacts::BINPACK_PATH],
    ));
    ok(cli(api, None, &["plugin", "deploy", "placement/batch", "spread", "1", paceline_plugin_artifacts::SPREAD_PATH]));
    ok(cli(api, None, &["plugin", "activate", "placement/batch", "binpack@1"]));
    let started = json(api, None, &["plugin", "shadow", "placement/batch", "spread@1"]);
    assert_eq!(started["candidate"], "spread@1", "{started}");
    let id = create_running(api, dir, "shadowed", "/default", 4);
    // The report so far, as `plugin list` has it (the run goes on).
    eventually(30, "a disagreement in the report", || {
        let slots = json(api, None, &["plugin", "list"]);
        slots.as_array().into_iter().flatten().any(|s| {
            s["slot"] == "placement/batch" && s["shadow"]["disagreements"].as_array().is_some_and(|d| !d.is_empty())
        })
    });
    let hosts: Vec<String> = json(api, None, &["host", "list"])
        .as_array()
        .expect("hosts")
        .iter()
        .filter_map(|h| h["hostname"].as_str().map(str::to_string))
        .collect();

    // (Sim reports) A comparison written where this server lists reports.
    let trace = dir.join("small.jsonl");
    std::fs::write(&trace, SMALL_TRACE).expect("write");
    let reports = dir.join("dev").join("sim-reports");
    ok(cli(
        api,
        None,
        &[
            "sim",
            "compare",
            trace.to_str().expect("utf-8"),
            "--a",
            "placement=binpack",
            "--b",
            "placement=spread",
            "--report-dir",
            reports.to_str().expect("utf-8"),
            "--report-name",
            "small-compare",
            "-o",
            "none",
        ],
    ));
    let bad = cli(
        api,
        None,
        &["sim", "run", trace.to_str().expect("utf-8"), "--report-dir", "/tmp", "--report-name", "../x"],
    );
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--report-name"), "{bad:?}");

    let url = format!("http://127.0.0.1:{api}/ui/");
    let (values, _) = browse(serde_json::json!([
        {"goto": format!("{url}#/plugins/placement/batch")},
        {"wait": "document.querySelector('#shadow-diff tbody tr') && document.querySelector('#plugin-figures li[data-version=\"binpack@1\"]')"},
        {"eval": "[...document.querySelectorAll('#shadow-diff tbody tr')].map(r => [r.dataset.task, r.dataset.active, r.dataset.shadow])"},
        {"eval": "[...document.querySelectorAll('#plugin-figures li')].map(l => [l.dataset.version, Number(l.dataset.calls), Number(l.dataset.p50), Number(l.dataset.p99), Number(l.dataset.faults)])"},
        {"eval": "Number(document.querySelector('#plugin-history-calls polyline[data-version=\"binpack@1\"]').dataset.latest)"},
        {"eval": "document.getElementById('plugin-history-p99').getAttribute('aria-label')"},
        {"screenshot": shot("plugin-slot-shadow")},
        {"axe": axe()},
        {"goto": format!("{url}#/simulate")},
        {"wait": "document.querySelector('#sim-table tr[data-report=\"small-compare.html\"]')"},
        {"eval": "[...document.querySelectorAll('#sim-table tr[data-report]')].map(r => r.dataset.report).sort()"},
        {"screenshot": shot("simulations")},
        {"axe": axe()},
        {"click": "#sim-table tr[data-report=\"small-compare.html\"] a"},
        {"wait": "document.body.dataset.view === '#/simulate/small-compare.html' && document.getElementById('sim-frame')"},
        {"eval": "[document.getElementById('sim-frame').getAttribute('sandbox'), document.getElementById('sim-frame').srcdoc.includes('Content-Security-Policy'), document.getElementById('sim-frame').srcdoc.includes('binpack')]"},
        {"screenshot": shot("simulation-report")},
        {"axe": axe()},
    ]));
    // The diff: rows naming this job's tasks, each with two different hosts of the cluster.
    let rows = values[0].as_array().expect("rows");
    let differing = rows.iter().find(|r| {
        let (task, active, shadow) =
            (r[0].as_str().unwrap_or(""), r[1].as_str().unwrap_or(""), r[2].as_str().unwrap_or(""));
        task.starts_with(&format!("{id}/"))
            && active != shadow
            && hosts.iter().any(|h| h == active)
            && hosts.iter().any(|h| h == shadow)
    });
    assert!(differing.is_some(), "a task placed on two different hosts: {rows:?} (hosts {hosts:?})");
    // The charts' latest figures are the API's.
    let slots = json(api, None, &["plugin", "list"]);
    let batch = slots.as_array().expect("slots").iter().find(|s| s["slot"] == "placement/batch").expect("slot").clone();
    for drawn in values[1].as_array().expect("figures") {
        let v = batch["versions"].as_array().expect("versions").iter().find(|v| v["id"] == drawn[0]).expect("listed");
        let faults: u64 = v["errors"].as_object().expect("errors").values().filter_map(|n| n.as_u64()).sum();
        assert_eq!(
            drawn,
            &serde_json::json!([v["id"], v["calls"], v["p50_us"], v["p99_us"], faults]),
            "the page's figures against `plugin list`: {batch}"
        );
    }
    let drawn: Vec<&str> = values[1].as_array().expect("figures").iter().filter_map(|f| f[0].as_str()).collect();
    assert!(drawn.contains(&"binpack@1") && drawn.contains(&"spread@1"), "a series per version: {drawn:?}");
    let binpack =
        batch["versions"].as_array().expect("versions").iter().find(|v| v["id"] == "binpack@1").expect("binpack");
    assert_eq!(values[2], binpack["calls"], "the calls chart ends at the listed calls");
    assert!(binpack["calls"].as_u64().is_some_and(|n| n >= 1), "{binpack}");
    assert!(
        values[3].as_str().is_some_and(|l| l.contains(&format!("binpack@1 {}", binpack["p99_us"]))),
        "the chart says its figures: {:?}",
        values[3]
    );
    assert_eq!(values[4], serde_json::json!([]), "axe-core on the slot page with its diff and charts");
    assert_eq!(values[5], serde_json::json!(["small-compare.html", "small-compare.json"]));
    assert_eq!(values[6], serde_json::json!([]), "axe-core on the Simulations page");
    assert_eq!(values[7], serde_json::json!(["", true, true]), "the report in a sandboxed frame, under a policy");
    assert_eq!(values[8], serde_json::json!([]), "axe-core on a report's page");
    let (code, text) = http(api, "GET", "/ui/api/plugins/history?slot=placement/batch", None, "");
    assert!(code == 200 && text.contains(r#""interval_ms":30000"#) && text.contains(r#""versions":["#), "{text}");

    // `plugin shadow --stop`: the final report, its disagreements with it.
    let stopped = json(api, None, &["plugin", "shadow", "placement/batch", "spread@1", "--stop"]);
    let rows = stopped["disagreements"].as_array().expect("disagreements");
    assert!(
        rows.iter().any(|d| d["kind"] == "placement"
            && d["task"].as_str().is_some_and(|t| t.starts_with(&id))
            && d["active"] != d["shadow"]),
        "{stopped}"
    );
    assert!(stopped["differed"].as_u64().is_some_and(|n| n >= 1), "{stopped}");
    let text = ok(cli(api, None, &["plugin", "shadow", "placement/batch", "spread@1", "--stop"]));
    assert!(text.contains("compared"), "{text}");

    // Reports are served with a strict policy; names cannot leave the directory.
    let (code, text) = http(api, "GET", "/ui/api/sim-reports/small-compare.html", None, "");
    let lower = text.to_ascii_lowercase();
    assert!(
        code == 200 && lower.contains("content-security-policy: default-src 'none'"),
        "{}",
        &text[..text.len().min(600)]
    );
    assert!(lower.contains("content-type: text/html"));
    std::fs::write(dir.join("dev").join("outside.html"), "OUTSIDE-CONTENT-7").expect("write");
    for (path, want) in [
        ("/ui/api/sim-reports/..%2Foutside.html", 400),
        ("/ui/api/sim-reports/%2e%2e%2fpaceline.db.json", 400),
        ("/ui/api/sim-reports/..%2F..%2Fetc%2Fpasswd", 400),
        ("/ui/api/sim-reports/.hidden.html", 400),
        ("/ui/api/sim-reports/missing.html", 404),
    ] {
        let (code, text) = http(api, "GET", path, None, "");
        assert_eq!(code, want, "{path}: {text}");
        assert!(!text.contains("OUTSIDE-CONTENT-7") && text.contains(r#"{"error":"#), "{path}: {text}");
    }
}

/// GPU shares (issue 28): a task's page names its devices and share, and a
/// host's page gives GPU in GPUs with a share as a fraction; `task get` and
/// `task list` say the same. One simulated host with two GPUs runs two tasks
/// of half a GPU each.
#[test]
fn a_task_page_shows_its_gpu_share_and_devices() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let config = dir.join("server.yaml");
    std::fs::write(
        &config,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:0\nhosts: {{provider: sim, hosts: 1, resources: {{cpu_millis: 8000, memory_mib: 8192, disk_mib: 100000, gpu_milli: 2000, ports: 0}}, zones: 1}}\n",
            dir.join("server").display()
        ),
    )
    .expect("write");
    let _server = Dev::spawn(&["server", "--config", config.to_str().expect("utf-8")], "API on");
    let pool = dir.join("pool.yaml");
    std::fs::write(&pool, "reservation: {cpu_millis: 4000, memory_mib: 4096, disk_mib: 1000, gpus: 2}\n")
        .expect("write");
    ok(cli(api, None, &["pool", "create", "/gpu", pool.to_str().expect("utf-8")]));
    let job = dir.join("shares.yaml");
    std::fs::write(
        &job,
        "name: shares\nowner: web\npool: /gpu\nkind: batch\ninstance_count: 2\ndefault_task:\n  command: work\n  env: {SIM_DURATION_MS: \"600000\"}\n  resources: {cpu_millis: 500, memory_mib: 64, disk_mib: 10, gpu_milli: 500, ports: 0}\n",
    )
    .expect("write");
    let id = json(api, None, &["job", "create", job.to_str().expect("utf-8")])["id"].as_str().expect("id").to_string();
    eventually(60, "2 running", || {
        json(api, None, &["task", "list", &id])
            .as_array()
            .is_some_and(|t| t.len() == 2 && t.iter().all(|t| t["state"] == "RUNNING"))
    });
    let task = json(api, None, &["task", "get", &id, "0"]);
    assert_eq!(task["gpu"]["milli_each"], 500, "{task}");
    let device = task["gpu_device_indices"][0].as_u64().expect("a device index");
    let text = ok(cli(api, None, &["task", "get", &id, "0"]));
    assert!(text.contains(&format!("0.5 GPU on device {device}")), "{text}");
    let list = ok(cli(api, None, &["task", "list", &id]));
    assert!(list.contains("GPU") && list.contains(&format!("0.5@{device}")), "{list}");
    // Simulated hosts measure nothing: what the task reserved, and says so.
    let unmeasured = "reserved cpu 500 millicores, memory 64 MiB (use not measured)";
    assert!(text.contains(unmeasured) && task["usage"].is_null(), "{text}");
    let host = task["host"].as_str().expect("host").to_string();

    let url = format!("http://127.0.0.1:{api}/ui/");
    let (values, _) = browse(serde_json::json!([
        {"goto": format!("{url}#/jobs/{id}/tasks/0")},
        {"wait": "document.querySelector('#task-gpu') && document.querySelector('#task-gpu').textContent !== ''"},
        {"eval": "document.querySelector('#task-gpu').textContent"},
        {"eval": "document.querySelector('#task-usage').textContent"},
        {"screenshot": shot("task-gpu")},
        {"goto": format!("{url}#/hosts/{host}")},
        {"wait": "document.querySelector('#host-resources tr[data-kind=\"gpu\"]')"},
        {"eval": "[...document.querySelector('#host-resources tr[data-kind=\"gpu\"]').cells].map(c => c.textContent)"},
    ]));
    assert_eq!(values[0], serde_json::json!(format!("0.5 GPU on device {device}")), "{values:?}");
    assert_eq!(values[1], serde_json::json!(unmeasured), "{values:?}");
    // Two halves: one GPU of two allocated, one available.
    assert_eq!(values[2], serde_json::json!(["gpu", "2", "1", "1"]), "{values:?}");
}

/// A job file whose task would run `id` on the host (issue 44's drive-by).
fn drive_by_job(name: &str) -> String {
    format!(
        "name: {name}\npool: /default\nkind: batch\ninstance_count: 1\ndefault_task:\n  command: id\n  resources: {{cpu_millis: 10, memory_mib: 8, disk_mib: 1, gpu_milli: 0, ports: 0}}\n"
    )
}

/// A gRPC message frame of `CreateJobRequest` for the job file `yaml`.
fn grpc_frame(yaml: &str) -> Vec<u8> {
    use prost::Message;
    let mut config: paceline_model::job::JobConfig = serde_yaml::from_str(yaml).expect("job file");
    config.owner = "web".into();
    let request = paceline_proto::v1::CreateJobRequest { spec: Some(paceline_proto::convert::job_spec_pb(&config)) };
    let message = request.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend((message.len() as u32).to_be_bytes());
    frame.extend(message);
    frame
}

/// Serves `page` (HTML) to every request on a loopback port of its own
/// (another origin than the API's); the port. The thread lives as long as
/// the test process.
fn serve_page(page: String) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            // The request's head; its body (none for a GET) is not needed.
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    port
}

/// Issue 44: in the open mode (`paceline dev`, no tokens file) any page a
/// developer opens could post a job to the API from their browser, with a
/// no-cors fetch or a form (`text/plain`, so no CORS preflight), and the
/// job ran `id` on the host. Neither creates a job now; the server's own
/// page still does.
#[test]
fn a_page_of_another_origin_cannot_create_jobs_in_the_open_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let _dev = Dev::start(dir, api, 1, &[]);
    let target = format!("http://127.0.0.1:{api}/ui/api/jobs");
    let page = format!(
        r##"<!doctype html><html><body><iframe name="sink"></iframe>
<form id="f" method="POST" action="{target}" enctype="text/plain" target="sink"><input type="hidden" name="x" value=""></form>
<script>
const fetched = {fetch_job};
fetch({target:?}, {{method: "POST", mode: "no-cors", body: fetched}})
  .then(() => {{ document.body.dataset.fetch = "sent"; }}, (e) => {{ document.body.dataset.fetch = "failed: " + e; }});
// The gRPC method itself, over HTTP/1.1 with a text/plain body (a framed CreateJobRequest).
fetch({grpc:?}, {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body: new Uint8Array({grpc_body})}})
  .then(() => {{ document.body.dataset.grpc = "sent"; }}, (e) => {{ document.body.dataset.grpc = "failed: " + e; }});
// A text/plain form sends `name=value`: the job file is the name, `#=` a YAML comment.
document.querySelector("#f input").name = {form_job} + "#";
document.getElementById("f").submit();
document.body.dataset.form = "sent";
</script></body></html>"##,
        fetch_job = serde_json::json!(drive_by_job("drive-by-fetch")),
        grpc = format!("http://127.0.0.1:{api}/paceline.v1.JobService/CreateJob"),
        grpc_body = serde_json::json!(grpc_frame(&drive_by_job("drive-by-grpc"))),
        form_job = serde_json::json!(drive_by_job("drive-by-form")),
    );
    let attacker = serve_page(page);
    let (values, _) = browse(serde_json::json!([
        {"goto": format!("http://127.0.0.1:{attacker}/")},
        {"wait": "document.body && document.body.dataset.fetch && document.body.dataset.form && document.body.dataset.grpc"},
        {"eval": "document.body.dataset.fetch"},
        {"eval": "document.body.dataset.grpc"},
        // Time for the form's post to arrive and be handled.
        {"wait": "new Promise((r) => setTimeout(() => r(true), 3000))", "timeout": 20},
    ]));
    assert_eq!(values[0], "sent", "the browser sent the no-cors post (its answer is opaque to the page)");
    assert_eq!(values[1], "sent", "and the one to the gRPC path");
    let jobs = ok(cli(api, None, &["job", "list", "-o", "json"]));
    assert!(!jobs.contains("drive-by"), "a page of another origin created a job: {jobs}");

    // The server's own page still submits jobs (with its X-Paceline-Request header).
    let own = drive_by_job("own-page");
    let (values, _) = browse(serde_json::json!([
        {"goto": format!("http://127.0.0.1:{api}/ui/")},
        {"wait": "document.querySelector('#nav')"},
        {"eval": format!("import('/ui/api.js').then((m) => m.postText('jobs', {})).then((r) => r.id)", serde_json::json!(own))},
    ]));
    let id = values[0].as_str().expect("the page's post answers the new job's id");
    assert_eq!(json(api, None, &["job", "get", id])["spec"]["name"], "own-page");
    let jobs = ok(cli(api, None, &["job", "list", "-o", "json"]));
    assert!(!jobs.contains("drive-by"), "{jobs}");
}

/// `paceline <args>` with its log (stderr) in `log`; killed when dropped.
struct Logged(std::process::Child);

impl Logged {
    fn spawn(args: &[&str], log: &Path) -> Logged {
        use std::io::BufRead;
        let mut child = Command::new(BIN)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(log).expect("log file"))
            .spawn()
            .expect("starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("API on") {
                    let _ = tx.send(());
                }
            }
        });
        let process = Logged(child);
        rx.recv_timeout(std::time::Duration::from_secs(60)).expect("paceline dev came up");
        process
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// Issue 44 over plain HTTP: a request must name the server by an IP
/// address, localhost, its hostname or a name from `--api-allowed-host`
/// (DNS rebinding); a change needs `X-Paceline-Request` and may not come
/// from another origin; `/ui` answers may not be framed; `/favicon.ico` is
/// answered without a refusal in the log (issue 43).
#[test]
fn plain_http_requests_must_name_the_server_and_changes_need_the_ui_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let log = dir.join("dev.log");
    let data = dir.join("dev");
    let _dev = Logged::spawn(
        &[
            "dev",
            "--sim-hosts",
            "1",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
            "--api-allowed-host",
            "paceline.test",
        ],
        &log,
    );
    let get = |host: &str, path: &str| raw(api, &format!("GET {path} HTTP/1.1\r\nHost: {host}"), "");
    for path in ["/ui/", "/ui/api/jobs", "/metrics", "/"] {
        let (code, text) = get("attacker.example", path);
        assert!(code == 403 && text.contains("api_allowed_hosts"), "{path}: {text}");
    }
    let (code, text) = raw(
        api,
        "POST /ui/api/jobs HTTP/1.1\r\nHost: attacker.example:80\r\nX-Paceline-Request: ui\r\nContent-Type: text/plain",
        &drive_by_job("rebound"),
    );
    assert!(code == 403 && text.contains("api_allowed_hosts"), "{text}");
    for host in
        [format!("127.0.0.1:{api}"), "localhost".into(), format!("localhost:{api}"), format!("paceline.test:{api}")]
    {
        let (code, text) = get(&host, "/ui/api/jobs");
        assert_eq!(code, 200, "{host}: {text}");
    }
    // The page and every other /ui answer refuse to be framed and sniffed.
    let (code, text) = get(&format!("127.0.0.1:{api}"), "/ui/");
    let lower = text.to_ascii_lowercase();
    assert_eq!(code, 200, "{text}");
    for header in
        ["content-security-policy: frame-ancestors 'none'", "x-frame-options: deny", "x-content-type-options: nosniff"]
    {
        assert!(lower.contains(header), "{header} in {text}");
    }
    assert!(get(&format!("127.0.0.1:{api}"), "/ui/api/jobs").1.to_ascii_lowercase().contains("x-frame-options: deny"));

    // A change without the UI's header, or from another origin, is refused.
    let post = |headers: &str, name: &str| {
        raw(
            api,
            &format!("POST /ui/api/jobs HTTP/1.1\r\nHost: 127.0.0.1:{api}\r\nContent-Type: text/plain{headers}"),
            &drive_by_job(name),
        )
    };
    let (code, text) = post("", "no-header");
    assert!(code == 403 && text.contains("X-Paceline-Request: ui"), "{text}");
    let (code, text) = post("\r\nX-Paceline-Request: ui\r\nOrigin: http://evil.example", "evil-origin");
    assert!(code == 403 && text.contains("http://evil.example"), "{text}");
    let (code, text) = post("\r\nX-Paceline-Request: ui\r\nSec-Fetch-Site: cross-site", "cross-site");
    assert!(code == 403 && text.contains("Sec-Fetch-Site"), "{text}");
    let (code, text) = post(&format!("\r\nX-Paceline-Request: ui\r\nOrigin: http://127.0.0.1:{api}"), "scripted");
    assert_eq!(code, 200, "{text}");
    let jobs = ok(cli(api, None, &["job", "list", "-o", "json"]));
    assert!(jobs.contains("scripted"), "{jobs}");
    for refused in ["rebound", "no-header", "evil-origin", "cross-site"] {
        assert!(!jobs.contains(refused), "{refused}: {jobs}");
    }

    // Browsers ask for /favicon.ico on every page load: no content, no refusal logged.
    let (code, text) = get(&format!("127.0.0.1:{api}"), "/favicon.ico");
    assert_eq!(code, 204, "{text}");
    // Something else is refused after it, so the log has caught up when that line is there.
    assert_eq!(get("attacker.example", "/ui/").0, 403);
    eventually(10, "the refusal logged", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("attacker.example"))
    });
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(!text.contains("favicon"), "a refusal of /favicon.ico was logged:\n{text}");
}
