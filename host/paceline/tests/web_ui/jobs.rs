//! Jobs from the page: submit, follow a log and drain a host. This test
//! stays with the binary: its tasks run on `paceline dev`'s local agents
//! (`paceline agent` processes), whose log lines the page follows. (The jobs
//! list's address and updates: host/server/tests/all/web_ui/jobs.rs.)

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
    // The watch outlasts every step before that one (CI once took over a minute to get there,
    // when this watch gave up after 60 s and the second line never came).
    let (trigger_seen, go_file) = (PathBuf::from(&trigger), go.clone());
    std::thread::spawn(move || {
        for _ in 0..6_000 {
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
