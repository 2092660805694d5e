//! Jobs from the page: submit, follow a log, drain a host, the jobs list's address, updates.

use super::*;

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
