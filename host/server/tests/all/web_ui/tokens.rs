//! With a tokens file: the data needs a token and the page asks for one.

use paceline_api::auth::Role;

use super::*;

#[test]
fn with_a_tokens_file_the_data_needs_a_token_and_the_page_asks_for_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.yaml");
    let all =
        crate::dev_server::tokens_file(&tokens, &[("ann", Role::User, &["/default"]), ("root", Role::Admin, &[])]);
    let (token, root) = (all[0].clone(), all[1].clone());
    let dev = Dev::start(dir.path(), 4, Some(&tokens));
    let api = dev.api;
    let id = create(&dev, Some(&token), &job_file("secret", "/default", 1));
    // Another team's job, in a pool ann has no grant for.
    create_pool(&dev, Some(&root), "/other", (1000, 1024, 100));
    let theirs = create(&dev, Some(&root), &job_file("theirs", "/other", 1));

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
    let host = hosts(&dev, Some(&root))[0].hostname.clone();
    assert_eq!(http(api, "POST", &format!("/ui/api/hosts/{host}/drain"), Some(&token), "").0, 403);
    let (code, body) = http(api, "POST", &format!("/ui/api/jobs/{theirs}/kill"), Some(&token), "");
    assert!(code == 403 && body.contains("may not change jobs in pool /other"), "{code} {body}");
    // Nor read it, its task or its log (decision 0059).
    for path in [
        format!("/ui/api/jobs/{theirs}"),
        format!("/ui/api/tasks/{theirs}/0"),
        format!("/ui/api/tasks/{theirs}/0/logs?follow=true"),
    ] {
        let (code, body) = http(api, "GET", &path, Some(&token), "");
        assert!(code == 403 && body.contains("may not read jobs in pool /other"), "{path}: {code} {body}");
    }

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
        // Another team's job: the page says it may not be read, and the server refuses a kill anyway.
        {"goto": format!("{url}#/jobs/{theirs}")},
        {"wait": "!document.getElementById('error').hidden"},
        {"eval": "document.getElementById('error').textContent"},
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
    assert!(
        values[4].as_str().is_some_and(|t| t.contains("Not allowed") && t.contains("may not read jobs in pool /other")),
        "another team's job is not shown: {values:?}"
    );
    assert_eq!(values[5], 403, "and refused by the server when sent anyway");
    assert_eq!(values[6], true, "a user's drain buttons are disabled");
    assert_eq!(values[8], true, "KILLED shown without a reload");
    assert_eq!(dialogs.len(), 2, "confirmations for ann's scale and kill: {dialogs:?}");
    let scaled = get_job(&dev, Some(&root), &id, None).expect("job get");
    assert_eq!(scaled.spec.as_ref().map(|s| s.instance_count), Some(2), "scaled on the server");
    let state = |job: &str| job_state(&get_job(&dev, Some(&root), job, None).expect("job get"));
    assert!(state(&id).ends_with("KILLED"), "ann's job was killed on the server: {}", state(&id));
    assert!(!state(&theirs).contains("KILL"), "the other team's job was not: {}", state(&theirs));
}
