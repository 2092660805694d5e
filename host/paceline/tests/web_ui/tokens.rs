//! With a tokens file: the data needs a token and the page asks for one.

use super::*;

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
