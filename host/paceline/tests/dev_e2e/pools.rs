//! Pools: `pool apply` from a file, sharing by their rules with preemption, specs as shown.

use super::*;

#[test]
fn pool_apply_makes_the_tree_match_a_file_and_a_second_apply_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = dev(dir.path(), api);
    let file = example("pools.yaml");
    let dry = ok(cli(api, &["pool", "apply", &file, "--dry-run"]));
    assert!(dry.contains("+ /team-a would be created"), "{dry}");
    assert!(json(api, &["pool", "list"])["pools"].as_array().is_some_and(|p| p.iter().all(|p| p["path"] != "/team-a")));
    let first = ok(cli(api, &["pool", "apply", &file]));
    for path in ["/team-a", "/team-a/services", "/team-a/batch"] {
        assert!(first.contains(&format!("+ {path} created")), "{first}");
    }
    let again = ok(cli(api, &["pool", "apply", &file]));
    assert!(again.contains("nothing to change"), "idempotent: {again}");
    // One field changed in the file: only that pool, only that field.
    let changed = dir.path().join("pools.yaml");
    let text = std::fs::read_to_string(&file).expect("example").replace("share: 2 ", "share: 3 ");
    std::fs::write(&changed, text).expect("write");
    let changed = changed.to_str().expect("utf-8");
    let plan = ok(cli(api, &["pool", "apply", changed, "--dry-run", "-o", "json"]));
    let plan: serde_json::Value = serde_json::from_str(&plan).expect("json");
    let changes: Vec<(&str, &str)> = plan["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .map(|p| (p["path"].as_str().unwrap_or_default(), p["change"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(changes, vec![("/team-a", "update"), ("/team-a/services", "unchanged"), ("/team-a/batch", "unchanged")]);
    assert_eq!(json(api, &["pool", "get", "/team-a"])["spec"]["share"], 2, "a dry run sends nothing");
    let applied = ok(cli(api, &["pool", "apply", changed]));
    assert!(applied.contains("~ /team-a updated") && applied.contains("share: 2 → 3"), "{applied}");
    assert_eq!(json(api, &["pool", "get", "/team-a"])["spec"]["share"], 3);
    // A refusal names the pool and what was applied before it.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "pools:\n  - path: /team-b\n  - path: /nowhere/child\n").expect("write");
    let out = cli(api, &["pool", "apply", bad.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("/nowhere/child") && stderr.contains("applied before it: /team-b"), "{stderr}");
}

#[test]
fn pools_share_by_their_rules_and_an_underserved_pool_preempts_borrowed_capacity() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (api, agents_port) = (free_port(), free_port());
    let config = dir.path().join("server.yaml");
    std::fs::write(
        &config,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:{agents_port}\ndefault_pool: false\n",
            dir.path().join("server").display()
        ),
    )
    .expect("config");
    let _server = start(&["server", "--config", config.to_str().expect("utf-8")], "API on");
    let mut agents = Vec::new();
    let join = join_args(&dir.path().join("server").join("pki"));
    for (name, ports) in [("p1", "28000-28499"), ("p2", "28500-28999")] {
        let child = Command::new(BIN)
            .args([
                "agent",
                "--manager",
                &format!("http://127.0.0.1:{agents_port}"),
                "--hostname",
                name,
                "--port-range",
                ports,
            ])
            .args([
                "--data-dir",
                dir.path().join(name).to_str().expect("utf-8"),
                "--cpu-millis",
                "1000",
                "--memory-mib",
                "2048",
            ])
            .args(&join)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agent");
        agents.push(Proc(child, Some(dir.path().join(name))));
    }
    eventually(30, "two agents up", || json(api, &["host", "list"]).as_array().is_some_and(|h| h.len() == 2));
    // Two pools, one core reserved each, equal shares.
    let pool = dir.path().join("pool.yaml");
    std::fs::write(&pool, "reservation: {cpu_millis: 1000, memory_mib: 1024, disk_mib: 1000}\nshare: 1\n")
        .expect("pool");
    for p in ["/a", "/b"] {
        ok(cli(api, &["pool", "create", p, pool.to_str().expect("utf-8")]));
    }
    let job = |name: &str, pool: &str, n: u32, priority: u32, preemptible: bool| {
        let spec = format!(
            "name: {name}\nowner: t\npool: {pool}\nkind: batch\ninstance_count: {n}\nsla: {{priority: {priority}, preemptible: {preemptible}}}\n\
             default_task:\n  command: sleep\n  args: [\"300\"]\n  resources: {{cpu_millis: 500, memory_mib: 64, disk_mib: 10, gpu_milli: 0, ports: 0}}\n  kill_grace_period_secs: 1\n"
        );
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, spec).expect("spec");
        ok(cli(api, &["job", "create", file.to_str().expect("utf-8")]))
    };
    let running = |id: &str| {
        tasks(api, id).iter().filter(|t| t["state"].as_str().is_some_and(|s| s.ends_with("RUNNING"))).count()
    };
    let entitlement = |path: &str| -> u64 {
        let pools = json(api, &["pool", "list"]);
        pools["pools"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["path"] == path)
            .map(|p| p["entitlement"]["cpu_millis"].as_u64().unwrap_or(0))
            .unwrap_or(0)
    };
    // /a borrows /b's idle core: four half-core tasks run.
    let borrower = job("borrower", "/a", 4, 1, true);
    eventually(60, "the borrower runs on both cores", || running(&borrower) == 4);
    assert_eq!(entitlement("/a"), 2000, "/a is entitled to the idle core of /b");
    // /b wants its reservation back: its high-priority job preempts what /a borrowed.
    let owner = job("owner", "/b", 2, 100, false);
    eventually(60, "the owner runs", || running(&owner) == 2);
    eventually(30, "the borrower gave back one core", || running(&borrower) == 2);
    assert_eq!((entitlement("/a"), entitlement("/b")), (1000, 1000), "equal shares once both pools want more");
    let events: Vec<String> = (0..4)
        .flat_map(|i| json(api, &["task", "events", &borrower, &i.to_string()]).as_array().cloned().unwrap_or_default())
        .filter_map(|e| e["to"].as_str().map(str::to_string))
        .collect();
    assert!(
        events.iter().any(|s| s.ends_with("PREEMPTING") || s.ends_with("KILLED") || s.ends_with("PENDING")),
        "preemption shows in the history: {events:?}"
    );
    let job_events = json(api, &["job", "events", &borrower]);
    assert!(
        job_events.as_array().into_iter().flatten().any(|e| e["reason"] == "Preempted" && e["type"] == "Warning"),
        "a Preempted event: {job_events}"
    );
    drop(agents);
}

#[test]
fn pool_specs_mean_what_they_say_in_files_tables_and_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let data = dir.path().join("dev");
    let listen = format!("127.0.0.1:{api}");
    let args = ["dev", "--sim-hosts", "2", "--data-dir", data.to_str().expect("utf-8"), "--api-listen", &listen];
    let dev = start(&args, "API on");
    // No bound is `unlimited`, never 2^64-1, 2^40 or 0.
    let table = ok(cli(api, &["pool", "list"]));
    assert!(table.contains("unlimited") && table.contains("LIMIT") && table.contains("SHARE"), "{table}");
    for number in ["18446744073709551615", "1099511627776"] {
        assert!(!table.contains(number), "{table}");
    }
    let listed = json(api, &["pool", "list"]);
    let default = listed["pools"].as_array().into_iter().flatten().find(|p| p["path"] == "/default").expect("/default");
    assert_eq!(default["spec"]["reservation"]["cpu_millis"], "unlimited", "{default}");
    assert_eq!(default["spec"]["limit"]["memory_mib"], "unlimited", "{default}");
    assert_eq!(default["spec"]["share"], 1, "{default}");
    assert_eq!(default["spec"]["type"], "elastic", "{default}");

    // A plain share, the old kind names, and a GPU limit of 0 that stays 0.
    let write = |name: &str, text: &str| {
        let f = dir.path().join(name);
        std::fs::write(&f, text).expect("write");
        f.to_str().expect("utf-8").to_string()
    };
    let no_gpus = write("no-gpus.yaml", "reservation: {cpu: 1000, memory: 1024}\nlimit: {gpus: 0}\nshare: 2\n");
    ok(cli(api, &["pool", "create", "/no-gpus", &no_gpus]));
    let got = json(api, &["pool", "get", "/no-gpus"]);
    assert_eq!(got["spec"]["limit"]["gpus"], 0, "a limit of 0 is zero: {got}");
    assert_eq!(got["spec"]["limit"]["cpu_millis"], "unlimited", "{got}");
    assert_eq!(got["spec"]["share"], 2, "{got}");
    assert_eq!(got["spec"]["reservation"]["cpu_millis"], 1000, "{got}");
    // What `pool get -o yaml` prints is a pool file.
    let shown = ok(cli(api, &["pool", "get", "/no-gpus", "-o", "yaml"]));
    let again = write("again.yaml", &shown);
    ok(cli(api, &["pool", "update", "/no-gpus", &again]));
    assert_eq!(json(api, &["pool", "get", "/no-gpus"])["spec"], got["spec"], "applied back unchanged");

    // Specs no task could run in are refused, naming the field; nothing is created.
    for (file, needle) in [
        (write("zero.yaml", "limit: {cpu: 0}\n"), "limit.cpu_millis"),
        (write("static.yaml", "type: static\nreservation: {cpu_millis: 2000}\n"), "type.memory_mib"),
    ] {
        let out = cli(api, &["pool", "create", "/useless", &file]);
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle) && err.contains("could ever run"), "{err}");
    }
    let out = cli(api, &["pool", "get", "/useless"]);
    assert_eq!(out.status.code(), Some(3), "not created");

    // A data dir whose /default an earlier version made (2^40 reserved):
    // after a restart it reads as today's, `unlimited`.
    let old = write(
        "old-default.yaml",
        "reservation: {cpu: 1099511627776, memory: 1099511627776, disk: 1099511627776, gpu: 1048576}\n",
    );
    ok(cli(api, &["pool", "update", "/default", &old]));
    assert_eq!(json(api, &["pool", "get", "/default"])["spec"]["reservation"]["cpu_millis"], 1099511627776u64);
    drop(dev);
    let _dev = start(&args, "API on");
    let default = json(api, &["pool", "get", "/default"]);
    assert_eq!(default["spec"]["reservation"]["cpu_millis"], "unlimited", "{default}");
    assert_eq!(default["spec"]["reservation"]["gpus"], "unlimited", "{default}");
}
