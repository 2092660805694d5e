//! Task secrets: they reach their task and nowhere else; one sealed with another key.

use super::*;

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t)
                    if t.is_file()
                        && std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)) =>
                {
                    found.push(path);
                }
                _ => {}
            }
        }
    }
    found
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(s.as_bytes()))
}

/// `paceline dev` with two agents on `data`, its log (debug level) in `log`.
fn dev_logged(data: &Path, api: u16, extra: &[&str], log: &Path) -> Proc {
    let mut child = Command::new(BIN)
        .args(["dev", "--agents", "2", "--data-dir", data.to_str().expect("utf-8")])
        .args(["--api-listen", &format!("127.0.0.1:{api}")])
        .args(extra)
        .env("PACELINE_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("API on") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the server came up");
    Proc(child, Some(data.to_path_buf()))
}

#[test]
fn task_secrets_reach_their_task_and_nowhere_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (alice, alice_entry) = new_token(&["--name", "alice", "--role", "user", "--pool", "/team-a"]);
    let (bob, bob_entry) = new_token(&["--name", "bob", "--role", "user", "--pool", "/team-b"]);
    let (root, root_entry) = new_token(&["--name", "root", "--role", "admin"]);
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(&tokens, format!("version: 1\nprincipals:\n{alice_entry}{bob_entry}{root_entry}")).expect("write");
    // Two values no other part of the test writes anywhere.
    let password = format!("pw-{}", hex::encode(std::process::id().to_be_bytes())) + "-Xq7Zr2";
    let key_pem = format!("-----KEY {}-----\nk3y-m4t3r14l-Vb9\n", std::process::id());

    let api = free_port();
    let data = dir.path().join("dev");
    let log = dir.path().join("server.log");
    let _dev = dev_logged(&data, api, &["--tokens-file", tokens.to_str().expect("utf-8")], &log);
    eventually(30, "two agents up", || {
        cli_as(api, &root, &["host", "list", "-o", "json"]).status.success()
            && serde_json::from_slice::<serde_json::Value>(&cli_as(api, &root, &["host", "list", "-o", "json"]).stdout)
                .is_ok_and(|h| h.as_array().is_some_and(|h| h.len() == 2))
    });
    let pool_file = dir.path().join("pool.yaml");
    std::fs::write(&pool_file, "reservation: {cpu: 2000, memory: 4096}\n").expect("write");
    ok(cli_as(api, &root, &["pool", "create", "/team-a", pool_file.to_str().expect("utf-8")]));

    // Alice keeps two secrets in her pool: one from the environment, one from a file.
    let put = |token: &str, args: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new(BIN);
        c.args(["secret", "put"]).args(args);
        c.env("PACELINE_SERVER", format!("http://127.0.0.1:{api}")).env("PACELINE_TOKEN", token);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("cli runs")
    };
    let shown = ok(put(&alice, &["--pool", "/team-a", "db-password", "--from-env", "PW"], &[("PW", &password)]));
    assert!(shown.contains("version") && !shown.contains(&password), "{shown}");
    let key_file = dir.path().join("tls.key");
    std::fs::write(&key_file, &key_pem).expect("write");
    ok(put(&alice, &["--pool", "/team-a", "tls.key", "--from-file", key_file.to_str().expect("utf-8")], &[]));
    std::fs::remove_file(&key_file).expect("the test's own copy goes");

    // Bob's team may neither read the names nor write into the pool.
    refused(&cli_as(api, &bob, &["secret", "list", "--pool", "/team-a"]), "permission denied");
    refused(
        &put(&bob, &["--pool", "/team-a", "db-password", "--from-env", "PW"], &[("PW", "bob's")]),
        "permission denied",
    );
    // Bad input is refused naming the field, and changes nothing.
    let garbage = dir.path().join("garbage");
    for (name, pool, bytes, needle) in [
        ("Bad Name", "/team-a", b"v".as_slice(), "name:"),
        ("empty", "/team-a", b"".as_slice(), "value: must be 1 to"),
        ("binary", "/team-a", b"\xff\xfe\x00".as_slice(), "value: must be UTF-8"),
        ("nowhere", "/team-a/none", b"v".as_slice(), "pool `/team-a/none` does not exist"),
    ] {
        std::fs::write(&garbage, bytes).expect("write");
        let out = put(&alice, &["--pool", pool, name, "--from-file", garbage.to_str().expect("utf-8")], &[]);
        refused(&out, needle);
    }
    let listed = ok(cli_as(api, &alice, &["secret", "list", "--pool", "/team-a", "-o", "json"]));
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    assert_eq!(listed[0]["name"], "db-password");
    assert_eq!(listed[0]["updated_by"], "alice");

    // A task gets them as an environment variable and a 0400 file; it
    // checks their hashes, so the values never enter the job's spec.
    let script = format!(
        "set -e; test \"$(printf %s \"$DB_PASSWORD\" | sha256sum | cut -c1-64)\" = {pw}; \
         test \"$(sha256sum < \"$PACELINE_SECRETS_DIR/tls.key\" | cut -c1-64)\" = {key}; \
         test \"$(stat -c %a \"$PACELINE_SECRETS_DIR/tls.key\")\" = 400; echo secrets ok",
        pw = sha256_hex(&password),
        key = sha256_hex(&key_pem),
    );
    let job = |name: &str, secret: &str, script: &str| {
        format!(
            "name: {name}\npool: /team-a\nkind: batch\ninstance_count: 2\ndefault_task:\n  command: sh\n  args: [\"-c\", {script:?}]\n  resources: {{cpu_millis: 100, memory_mib: 32}}\n  secrets:\n    - {{name: {secret}, env: DB_PASSWORD}}\n    - {{name: tls.key, file: tls.key}}\n"
        )
    };
    let spec = dir.path().join("job.yaml");
    std::fs::write(&spec, job("uses-secrets", "db-password", &script)).expect("write");
    let id = ok(cli_as(api, &alice, &["job", "create", spec.to_str().expect("utf-8")]));
    eventually(60, "the job SUCCEEDED", || {
        serde_json::from_slice::<serde_json::Value>(&cli_as(api, &alice, &["job", "get", &id, "-o", "json"]).stdout)
            .is_ok_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });
    assert_eq!(ok(cli_as(api, &alice, &["task", "logs", &id, "1"])), "secrets ok");

    // A spec naming a secret the pool lacks is refused, and nothing is created.
    std::fs::write(&spec, job("missing", "no-such-secret", "true")).expect("write");
    refused(&cli_as(api, &alice, &["job", "create", spec.to_str().expect("utf-8")]), "no secret \"no-such-secret\"");

    // A secret a running job needs is not deleted from under it.
    std::fs::write(&spec, job("long", "db-password", "sleep 300")).expect("write");
    let long = ok(cli_as(api, &alice, &["job", "create", spec.to_str().expect("utf-8")]));
    refused(&cli_as(api, &alice, &["secret", "delete", "--pool", "/team-a", "db-password"]), "used by jobs");
    ok(cli_as(api, &alice, &["job", "kill", &long]));
    eventually(60, "the long job ended and the secret can go", || {
        cli_as(api, &alice, &["secret", "delete", "--pool", "/team-a", "db-password"]).status.success()
    });

    // The values are in no answer of the API...
    for args in [
        vec!["job", "get", &id, "-o", "json"],
        vec!["job", "list", "-o", "json"],
        vec!["task", "list", &id, "-o", "json"],
        vec!["job", "events", &id, "--json"],
        vec!["task", "events", &id, "0", "-o", "json"],
        vec!["secret", "list", "--pool", "/team-a", "-o", "json"],
        vec!["audit", "--json"],
    ] {
        let out = cli_as(api, &root, &args);
        let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{args:?}: {all}");
        assert!(!all.contains(&password) && !all.contains("k3y-m4t3r14l"), "{args:?} shows a secret: {all}");
    }
    // ...in no log line (at debug level) and in no file the server or the
    // agents keep: the store holds them sealed, and a run's secret files
    // went when the run ended.
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(logged.contains("secret set"), "the log says that secrets were set");
    assert!(!logged.contains(&password) && !logged.contains("k3y-m4t3r14l"), "a log line shows a secret");
    for needle in [password.as_bytes(), b"k3y-m4t3r14l".as_slice()] {
        let found = files_containing(dir.path(), needle);
        assert!(found.is_empty(), "files hold a secret in the clear: {found:?}");
    }
}

#[test]
fn a_secret_sealed_with_another_key_keeps_its_runs_from_starting_not_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("dev");
    let api = free_port();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "old-key-value").expect("write");
    {
        let _dev = dev_logged(&data, api, &[], &dir.path().join("first.log"));
        ok(cli(api, &["secret", "put", "--pool", "/default", "db", "--from-file", pw.to_str().expect("utf-8")]));
    }
    // Another key, as a second server with a data dir of its own would have.
    std::fs::write(data.join("secrets.key"), format!("{}\n", "ab".repeat(32))).expect("write");
    let log = dir.path().join("second.log");
    let _dev = dev_logged(&data, api, &[], &log);
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(logged.contains("sealed with another key"), "the start says so: {logged}");
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    let spec = dir.path().join("job.yaml");
    std::fs::write(
        &spec,
        "name: needs-db\npool: /default\nkind: batch\ninstance_count: 1\ndefault_task:\n  command: \"true\"\n  resources: {cpu_millis: 100, memory_mib: 32}\n  secrets: [{name: db, env: DB}]\n",
    )
    .expect("write");
    let id = ok(cli(api, &["job", "create", spec.to_str().expect("utf-8")]));
    eventually(30, "the launch refused, with the reason in the task's events", || {
        ok(cli(api, &["task", "events", &id, "0"])).contains("sealed with key")
    });
    // Refused again and again, it waits longer before each try (1 s, 2 s,
    // 4 s…) rather than trying again every few milliseconds with four store
    // writes each: a handful of runs in four more seconds, not hundreds.
    std::thread::sleep(Duration::from_secs(4));
    let task = &tasks(api, &id)[0];
    let run = task["run"].as_u64().or_else(|| task["run"].as_str().and_then(|r| r.parse().ok())).unwrap_or(0);
    assert!((2..=8).contains(&run), "runs of a launch refused for good: {run}\n{task}");
    // It never ran, and the server still answers.
    assert!(!task["state"].as_str().unwrap_or_default().contains("SUCCEEDED"), "{task}");
    assert!(json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
}
