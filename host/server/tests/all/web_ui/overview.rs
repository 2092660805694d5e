//! The overview: jobs, pools, hosts and plugins on one page, followed live (reconnecting).

use super::*;

#[test]
fn the_page_shows_jobs_pools_hosts_and_plugins_and_rolls_a_plugin_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start(dir.path(), 4, None);
    let api = dev.api;
    create_pool(&dev, None, "/team", (4000, 4096, 1000));
    let id = create_running(&dev, "webjob", "/team", 4);
    // A fifth core would exceed /team's reservation: it waits, and says so.
    let over = create(&dev, None, &job_file("over", "/team", 1));
    deploy(&dev, "placement/batch", "spread", "9", paceline_plugin_artifacts::SPREAD_PATH);
    activate(&dev, "placement/batch", "spread@9");

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
    let listed = super::pools(&dev);
    let capacity = listed.capacity.expect("capacity");
    let (cpu, memory) = (capacity.cpu_millis as f64, capacity.memory_mib as f64);
    for drawn in pools {
        let pool = listed.pools.iter().find(|p| drawn[0] == p.path.as_str()).expect("drawn pools exist");
        let (entitlement, allocation) = (pool.entitlement.expect("entitlement"), pool.allocation.expect("allocation"));
        let expected = [
            entitlement.cpu as f64 / cpu,
            allocation.cpu as f64 / cpu,
            entitlement.memory as f64 / memory,
            allocation.memory as f64 / memory,
        ];
        for (i, share) in expected.iter().enumerate() {
            let width = drawn[i + 1].as_f64().expect("width");
            assert!(
                (width - (100.0 * share).min(100.0)).abs() < 0.01,
                "bar {i} of {}: width {width}%, API {pool:?}",
                drawn[0]
            );
        }
    }
    let drawn_hosts = values[4].as_array().expect("hosts");
    let used: f64 = drawn_hosts.iter().filter_map(|h| h[1].as_f64()).sum();
    assert_eq!(used, 4000.0, "host utilization adds up to the four running cores");
    let hosts = hosts(&dev, None);
    for h in drawn_hosts {
        let listed = hosts.iter().find(|x| h[0] == x.hostname.as_str()).expect("a listed host");
        let total = listed.total.as_ref().expect("total").cpu_millis as f64;
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
    let team = super::pools(&dev).pools.into_iter().find(|p| p.path == "/team").expect("/team");
    let said = format!(
        "CPU (millicores): allocation {} of entitlement {} now",
        team.allocation.as_ref().expect("allocation").cpu,
        team.entitlement.as_ref().expect("entitlement").cpu
    );
    assert!(charted[0].as_str().is_some_and(|l| l.starts_with(&said)), "{charted:?} against {said}");
    assert!(charted[1].as_u64().is_some_and(|n| n >= 1), "{charted:?}");
    assert_eq!(dialogs.len(), 1, "one confirmation: {dialogs:?}");
    assert!(dialogs[0].contains("placement/batch"), "{dialogs:?}");
    assert_ne!(values[5], "spread@9");
    // The rollback happened on the server, not only on the page.
    let batch = plugin_slot(&dev, "placement/batch");
    assert_eq!(serde_json::json!(batch.active), values[5], "{batch:?}");
    assert_ne!(batch.active, "spread@9");
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
    let batch = plugin_slot(&dev, "placement/batch");
    assert!(batch.versions.iter().any(|v| v.id == "spread@10"), "the uploaded version is on the server: {batch:?}");
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

#[test]
fn a_lost_connection_is_shown_and_the_page_reconnects_and_catches_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path().to_path_buf();
    let dev = Dev::start(&dir, 2, None);
    let api = dev.api;
    let first = create(&dev, None, &job_file("before", "/default", 1));
    // The server goes away once the page is live, and comes back (same data,
    // same port) once the page says the connection is lost; then a job is
    // created, which the page must show without a reload.
    let stop = when_shot("live-before-restart", move || drop(dev));
    let (dir2, restarted) = (dir.clone(), std::sync::Arc::new(std::sync::Mutex::new(None)));
    let keep = restarted.clone();
    let start = when_shot("connection-lost", move || {
        let dev = Dev::start_on(&dir2, 2, api);
        let id = create(&dev, None, &job_file("after", "/default", 1));
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
