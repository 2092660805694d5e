//! A plugin slot's page (shadow diff, version charts, sim reports) and a task's GPU share.
//! These stay with the binary: the reports the Simulations page lists are
//! written by `paceline sim compare` (and `sim run` refuses a bad
//! `--report-name`), and the GPU share is checked in `task get`'s and `task
//! list`'s text beside the page.

use super::*;

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
