//! Jobs from the page: the jobs list's address, updates followed, resumed,
//! aborted and rolled back. (Submitting a job, following its log and
//! draining a host, on real agents: host/paceline/tests/web_ui/jobs.rs.)

use super::*;

#[test]
fn the_jobs_list_pages_filters_and_sorts_from_its_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start(dir.path(), 2, None);
    let api = dev.api;
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
    let dev = Dev::start(dir.path(), 2, None);
    let api = dev.api;
    let file = job_file("rolling", "/default", 2);
    let id = create_running(&dev, "rolling", "/default", 2);
    // A new command, rolled out one instance at a time, created paused.
    let changed = file.replace("command: work", "command: work2");
    update(&dev, &id, &changed, Some(1));
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
    update(&dev, &id, &changed.replace("command: work2", "command: work3"), None);
    let (_, dialogs) = browse(serde_json::json!([
        {"goto": format!("{url}#/jobs/{id}")},
        {"wait": format!("{state} === 'PAUSED'")},
        {"click": "button[data-update-action=\"abort\"]"},
        {"wait": format!("{state} === 'ABORTED'"), "timeout": 30},
    ]));
    assert_eq!(dialogs.len(), 1, "{dialogs:?}");
    let got = job(&dev, &id);
    let update_state = got.update.as_ref().map_or(0, |u| u.state);
    assert_eq!(update_state, pb::UpdateState::Aborted as i32, "{got:?}");
    assert_eq!(got.status.as_ref().map(|s| s.latest_config_version), Some(3), "{got:?}");
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
    let command = |j: &pb::Job| j.spec.as_ref().and_then(|s| s.default_task.as_ref()).map(|t| t.command.clone());
    let got = job(&dev, &id);
    assert_eq!(got.status.as_ref().map(|s| s.desired_config_version), Some(4), "{got:?}");
    assert_eq!(command(&got).as_deref(), Some("work"), "{got:?}");
    let v2 = get_job(&dev, None, &id, Some(2)).expect("version 2");
    assert_eq!(command(&v2).as_deref(), Some("work2"), "{v2:?}");
    let missing = get_job(&dev, None, &id, Some(9));
    assert!(missing.is_err(), "a version the job never had is refused");
}

/// `job update <id> <file> --paused [--batch-size N]`.
fn update(dev: &Dev, id: &str, yaml: &str, batch_size: Option<u32>) {
    let config: paceline_model::job::JobConfig = serde_yaml::from_str(yaml).expect("a job file");
    let mut u = config.update.clone();
    u.batch_size = batch_size.unwrap_or(u.batch_size);
    u.start_paused = true;
    let request = pb::UpdateJobRequest {
        id: id.into(),
        spec: Some(paceline_proto::convert::job_spec_pb(&config)),
        update: Some(paceline_proto::convert::update_spec_pb(&u)),
        dry_run: false,
    };
    let client = dev.client(None);
    dev.block_on(async move { JobServiceClient::new(client).update_job(request).await }).expect("job update");
}
