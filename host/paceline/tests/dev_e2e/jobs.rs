//! Jobs through the CLI: updates, `job run --wait` and scaling, refused input, and a server
//! killed and restarted.

use super::*;

#[test]
fn a_service_rolls_through_an_update_in_batches_and_is_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = dev(dir.path(), api);
    let id = ok(cli(api, &["job", "create", &example("web.yaml")]));
    let running = |api: u16, id: &str, run: u64| {
        let ts = tasks(api, id);
        ts.len() == 4
            && ts
                .iter()
                .all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")) && t["run"].as_u64() == Some(run))
    };
    eventually(60, "4 instances running", || running(api, &id, 1));
    let v2 = dir.path().join("web-v2.yaml");
    let spec = std::fs::read_to_string(example("web.yaml")).expect("example");
    std::fs::write(&v2, spec.replace("--bind 127.0.0.1", "--bind 127.0.0.1 --directory /tmp")).expect("v2");
    let dry = ok(cli(api, &["job", "update", &id, v2.to_str().expect("utf-8"), "--dry-run"]));
    assert!(dry.contains("--directory /tmp"), "the dry run shows the diff: {dry}");
    assert!(running(api, &id, 1), "a dry run changes nothing");
    ok(cli(api, &["job", "update", &id, v2.to_str().expect("utf-8")]));
    // Batches of two: at no point are all four instances on the new run at
    // once before the first two are.
    let mut max_in_flight = 0;
    eventually(90, "the update rolled through", || {
        let ts = tasks(api, &id);
        let moving = ts
            .iter()
            .filter(|t| t["run"].as_u64() == Some(2) && !t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")))
            .count();
        max_in_flight = max_in_flight.max(moving);
        running(api, &id, 2)
    });
    assert!(max_in_flight <= 2, "batches of two: {max_in_flight} moving at once");
    eventually(30, "the update SUCCEEDED", || {
        json(api, &["job", "get", &id])["update"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED"))
    });
    ok(cli(api, &["job", "kill", &id]));
    eventually(30, "all KILLED", || {
        tasks(api, &id).iter().all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("KILLED")))
    });
}

#[test]
fn job_run_wait_exits_with_the_jobs_outcome_and_scale_sets_the_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = dev(dir.path(), api);
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));

    // A batch job that succeeds: exit 0, the job printed as it ended.
    let good = shell_job_file(dir.path(), "good", 2, "exit 0", 100);
    let out = cli(api, &["job", "run", &good, "--wait", "-o", "json"]);
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(printed["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")), "{printed}");

    // One that fails: exit 4, and the reason on stderr.
    let bad = shell_job_file(dir.path(), "bad", 1, "exit 3", 100);
    let out = cli(api, &["job", "run", &bad, "--wait"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("ended FAILED"), "{stderr}");

    // A service: the wait ends once every instance runs and passed its
    // health check.
    let out = cli(api, &["job", "run", &example("web.yaml"), "--wait", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let web: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the job as JSON");
    let id = web["id"].as_str().expect("an id").to_string();
    let ts = tasks(api, &id);
    assert_eq!(ts.len(), 4);
    for t in &ts {
        assert!(t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")), "{t}");
        assert_eq!(t["healthy"], serde_json::json!(true), "{t}");
    }

    // Scale: the count changes through an update, and the instances follow.
    let scaled = ok(cli(api, &["job", "scale", &id, "2"]));
    assert!(scaled.contains("4 → 2"), "{scaled}");
    eventually(60, "two instances left running", || {
        let running =
            tasks(api, &id).iter().filter(|t| t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING"))).count();
        running == 2 && json(api, &["job", "get", &id])["spec"]["instance_count"].as_u64() == Some(2)
    });

    // A job that cannot be placed: the wait times out with 5 and leaves it be.
    let huge = shell_job_file(dir.path(), "huge", 1, "sleep 60", 1_000_000);
    let out = cli(api, &["job", "run", &huge, "--wait", "--timeout", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("still"), "{stderr}");
    ok(cli(api, &["job", "kill", &id]));
}

#[test]
fn bad_input_is_refused_with_a_clear_error_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = dev(dir.path(), api);
    let bad_yaml = dir.path().join("bad.yaml");
    std::fs::write(&bad_yaml, "name: x\n  owner: [oops").expect("write");
    let unknown_pool = dir.path().join("pool.yaml");
    std::fs::write(
        &unknown_pool,
        std::fs::read_to_string(example("hello.yaml")).expect("example").replace("pool: /default", "pool: /nowhere"),
    )
    .expect("write");
    let negative = dir.path().join("negative.yaml");
    std::fs::write(
        &negative,
        std::fs::read_to_string(example("hello.yaml")).expect("example").replace("cpu_millis: 100", "cpu_millis: -5"),
    )
    .expect("write");
    let not_wasm = dir.path().join("plugin.wasm");
    std::fs::write(&not_wasm, b"this is not a component").expect("write");
    for (args, needle) in [
        (vec!["job", "create", bad_yaml.to_str().expect("utf-8")], "bad.yaml"),
        (vec!["job", "create", unknown_pool.to_str().expect("utf-8")], "pool"),
        (vec!["job", "create", negative.to_str().expect("utf-8")], "cpu_millis"),
        (
            vec!["plugin", "deploy", "placement/batch", "junk", "1", not_wasm.to_str().expect("utf-8")],
            "not a WebAssembly",
        ),
    ] {
        let out = cli(api, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(err.contains("error") && err.contains(needle), "{args:?}: the error says what is wrong: {err}");
    }
    assert_eq!(json(api, &["job", "list"]).as_array().map(Vec::len), Some(0), "no job was created");
    let plugins = ok(cli(api, &["plugin", "list"]));
    assert!(!plugins.contains("junk"), "no plugin was stored: {plugins}");
}

#[test]
fn a_server_killed_and_restarted_carries_on_without_launching_anything_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, agents_port) = (free_port(), free_port());
    let data = dir.path().join("server");
    let server_args = |data: &Path| {
        vec![
            "server".to_string(),
            "--data-dir".into(),
            data.to_str().expect("utf-8").into(),
            "--api-listen".into(),
            format!("127.0.0.1:{api}"),
            "--agent-listen".into(),
            format!("127.0.0.1:{agents_port}"),
        ]
    };
    let args = server_args(&data);
    let mut server = start(&args.iter().map(String::as_str).collect::<Vec<_>>(), "API on");
    let mut agents = Vec::new();
    let join = join_args(&data.join("pki"));
    // Two agents on one machine: distinct port ranges, as on two machines, and
    // apart from the ranges `paceline dev` gives its agents (20000 up), which the
    // other tests here run beside this one (a shared range made a task fail to
    // bind its port and be relaunched: this test's one flake).
    for (name, ports) in [("a1", "27000-27499"), ("a2", "27500-27999")] {
        let cfg = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&cfg, "heartbeat_interval_ms: 500\nreconnect_initial_ms: 100\nreconnect_max_ms: 500\n")
            .expect("config");
        let child = Command::new(BIN)
            .args([
                "agent",
                "--config",
                cfg.to_str().expect("utf-8"),
                "--manager",
                &format!("http://127.0.0.1:{agents_port}"),
                "--hostname",
                name,
            ])
            .args([
                "--data-dir",
                dir.path().join(name).to_str().expect("utf-8"),
                "--cpu-millis",
                "2000",
                "--memory-mib",
                "2048",
                "--port-range",
                ports,
            ])
            .args(&join)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent");
        agents.push(Proc(child, Some(dir.path().join(name))));
    }
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    let spec = std::fs::read_to_string(example("web.yaml")).expect("example");
    let file = dir.path().join("web.yaml");
    std::fs::write(&file, spec).expect("spec");
    let id = ok(cli(api, &["job", "create", file.to_str().expect("utf-8")]));
    let all_running_run1 = |api: u16| {
        let ts = tasks(api, &id);
        ts.len() == 4
            && ts
                .iter()
                .all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")) && t["run"].as_u64() == Some(1))
    };
    eventually(60, "4 running", || all_running_run1(api));
    let before: Vec<serde_json::Value> = tasks(api, &id).iter().map(|t| t["run_id"].clone()).collect();

    server.kill9();
    std::thread::sleep(Duration::from_secs(1));
    let _server = start(&args.iter().map(String::as_str).collect::<Vec<_>>(), "API on");
    eventually(30, "agents back", || {
        json(api, &["host", "list"])
            .as_array()
            .is_some_and(|h| h.len() == 2 && h.iter().all(|h| h["reachable"].as_bool() == Some(true)))
    });
    // Give reconciliation and the loops time to act, then check nothing moved.
    std::thread::sleep(Duration::from_secs(3));
    assert!(all_running_run1(api), "the same runs carry on: {:?}", tasks(api, &id));
    let after: Vec<serde_json::Value> = tasks(api, &id).iter().map(|t| t["run_id"].clone()).collect();
    assert_eq!(before, after, "nothing launched twice");
    let job = json(api, &["job", "get", &id]);
    assert!(job["status"]["state"].as_str().is_some_and(|s| s.ends_with("RUNNING")), "{job}");
    // And it still works: a new job runs.
    let hello = ok(cli(api, &["job", "create", &example("hello.yaml")]));
    eventually(60, "hello SUCCEEDED after the restart", || job_state(api, &hello).ends_with("SUCCEEDED"));
    ok(cli(api, &["job", "kill", &id]));
    eventually(30, "killed", || {
        tasks(api, &id).iter().all(|t| t["state"].as_str().is_some_and(|s| s.ends_with("KILLED")))
    });
    drop(agents);
}
