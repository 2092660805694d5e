//! Failover: three servers, and the host and job managers in processes of their own.

use super::*;

#[test]
fn three_servers_fail_over_without_losing_a_job_or_launching_twice() {
    let _serial = serial();
    let zk = zookeeper();
    let cluster = unique_cluster("failover");
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let data = dir.join("shared-data");
    let nodes: Vec<Node> = ["s1", "s2", "s3"].iter().map(|n| node(dir, n, zk, &cluster, &data)).collect();
    let apis =
        |order: &[usize]| order.iter().map(|i| format!("127.0.0.1:{}", nodes[*i].api)).collect::<Vec<_>>().join(",");
    let all = apis(&[2, 1, 0]);
    let managers = nodes.iter().map(|n| format!("127.0.0.1:{}", n.agent)).collect::<Vec<_>>().join(",");

    let mut servers = vec![start_server("s1", &nodes[0])];
    servers[0].wait_line("leading", 60);
    for (i, name) in [(1, "s2"), (2, "s3")] {
        let mut s = start_server(name, &nodes[i]);
        s.wait_line("standby", 60);
        servers.push(s);
    }
    let _agents: Vec<Proc> = [("a1", "29000-29499"), ("a2", "29500-29999")]
        .iter()
        .map(|(n, p)| start_agent(dir, &data, n, &managers, p))
        .collect();
    let agent_names = ["a1", "a2"];
    eventually(30, "two agents registered with the leader", || {
        try_json(&all, &["host", "list"]).and_then(|h| h.as_array().map(Vec::len)) == Some(2)
    });

    // A standby forwards every call to the leader (a client given only a
    // standby's address works), and answers health NOT_SERVING naming the
    // leader (so the CLI goes to the leader directly).
    let standby_api = format!("http://127.0.0.1:{}", nodes[1].api);
    let leader_api = format!("127.0.0.1:{}", nodes[0].api);
    let hello_config: paceline_model::job::JobConfig =
        serde_yaml::from_str(&std::fs::read_to_string(examples().join("hello.yaml")).expect("example"))
            .expect("hello.yaml");
    let through_standby_id =
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(async {
            use paceline_proto::v1 as pb;
            let channel = tonic::transport::Endpoint::from_shared(standby_api.clone())
                .expect("url")
                .connect()
                .await
                .expect("connects");
            let mut jobs = pb::job_service_client::JobServiceClient::new(channel.clone());
            let created = jobs
                .create_job(pb::CreateJobRequest { spec: Some(paceline_api::convert::job_spec_pb(&hello_config)) })
                .await
                .expect("a write through a standby reaches the leader")
                .into_inner()
                .id;
            let listed =
                jobs.query_jobs(pb::QueryJobsRequest::default()).await.expect("a read through a standby").into_inner();
            assert!(listed.jobs.iter().any(|j| j.id == created), "the leader's answer: {listed:?}");
            let health = paceline_api::tonic_health::pb::health_client::HealthClient::new(channel)
                .check(paceline_api::tonic_health::pb::HealthCheckRequest { service: String::new() })
                .await
                .expect("health answers");
            assert_eq!(
                health.get_ref().status,
                paceline_api::tonic_health::pb::health_check_response::ServingStatus::NotServing as i32
            );
            assert_eq!(
                health.metadata().get("paceline-leader").and_then(|v| v.to_str().ok()),
                Some(leader_api.as_str())
            );
            created
        });
    eventually(60, "the job created through a standby SUCCEEDED", || {
        try_json(&all, &["job", "get", &through_standby_id])
            .is_some_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });

    // Jobs submitted through a standby (the CLI follows it to the leader).
    let long = dir.join("long.yaml");
    let spec = std::fs::read_to_string(examples().join("hello.yaml"))
        .expect("example")
        .replace("instance_count: 3", "instance_count: 4")
        .replace("echo hello from instance $PACELINE_TASK_ID", "sleep 300");
    std::fs::write(&long, spec).expect("spec");
    let through_standby = format!("127.0.0.1:{}", nodes[2].api);
    let a = ok(cli(&through_standby, &["job", "create", long.to_str().expect("utf-8")]));
    eventually(60, "job a: 4 running", || {
        let ts = tasks(&all, &a);
        ts.len() == 4 && ts.iter().all(|t| state_is(t, "RUNNING"))
    });
    let runs_before: Vec<serde_json::Value> = tasks(&all, &a).iter().map(|t| t["run_id"].clone()).collect();
    // Only job a runs now: the pool holds its four tasks.
    let pool_before = json(&all, &["pool", "get", "/default"]);
    assert_eq!(pool_before["live_tasks"].as_u64(), Some(4), "{pool_before}");
    assert_eq!(
        pool_before["allocation"]["cpu_millis"].as_u64(),
        Some(400),
        "four tasks of 100 millicores: {pool_before}"
    );

    // SIGKILL the leader: a standby leads within the session timeout + 5 s.
    servers[0].kill9();
    let killed = Instant::now();
    eventually(SESSION_TIMEOUT_MS / 1000 + 5, "a new leader serves", || try_json(&all, &["job", "list"]).is_some());
    let failover = killed.elapsed();
    eprintln!("failover after SIGKILL: {failover:?}");
    let leader = if servers[1].line_at("leading").is_some() { 1 } else { 2 };
    assert!(servers[leader].line_at("leading").is_some(), "s2 or s3 leads");
    assert!(servers[3 - leader].line_at("leading").is_none(), "only one leads");

    eventually(30, "both agents back with the new leader", || {
        try_json(&all, &["host", "list"])
            .and_then(|h| h.as_array().cloned())
            .is_some_and(|h| h.len() == 2 && h.iter().all(|h| h["reachable"].as_bool() == Some(true)))
    });
    let b = ok(cli(&all, &["job", "create", examples().join("hello.yaml").to_str().expect("utf-8")]));
    eventually(60, "job b SUCCEEDED on the new leader", || {
        try_json(&all, &["job", "get", &b])
            .is_some_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });
    let jobs: Vec<String> = json(&all, &["job", "list"])
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j["id"].as_str().map(str::to_string))
        .collect();
    assert!(jobs.contains(&a) && jobs.contains(&b), "both jobs present: {jobs:?}");
    let ts = tasks(&all, &a);
    assert!(ts.iter().all(|t| state_is(t, "RUNNING")), "job a carries on: {ts:?}");
    let runs_after: Vec<serde_json::Value> = ts.iter().map(|t| t["run_id"].clone()).collect();
    assert_eq!(runs_before, runs_after, "the same runs carry on");
    // The new leader's resource manager rebuilt the pool's allocation and
    // live tasks from the recovered task states (job b has ended).
    let pool_after = json(&all, &["pool", "get", "/default"]);
    assert_eq!(pool_after["allocation"], pool_before["allocation"], "allocation rebuilt: {pool_after}");
    assert_eq!(pool_after["live_tasks"], pool_before["live_tasks"], "{pool_after}");
    assert_launched_once(dir, &agent_names, &all, &a);
    assert_launched_once(dir, &agent_names, &all, &b);

    // A clean shutdown hands over at once (well within one session timeout).
    let last = 3 - leader;
    servers[leader].term();
    let stopped = Instant::now();
    servers[last].wait_line("leading", 30);
    let handover = servers[last].line_at("leading").map(|t| t.saturating_duration_since(stopped)).unwrap_or_default();
    eprintln!("handover after SIGTERM: {handover:?}");
    assert!(
        handover < Duration::from_millis(SESSION_TIMEOUT_MS),
        "a clean shutdown hands over before a session timeout: {handover:?}"
    );
    eventually(30, "agents on the third leader", || {
        try_json(&all, &["host", "list"])
            .and_then(|h| h.as_array().cloned())
            .is_some_and(|h| h.len() == 2 && h.iter().all(|h| h["reachable"].as_bool() == Some(true)))
    });
    let c = ok(cli(&all, &["job", "create", examples().join("hello.yaml").to_str().expect("utf-8")]));
    eventually(60, "job c SUCCEEDED on the third leader", || {
        try_json(&all, &["job", "get", &c])
            .is_some_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });
    let runs_third: Vec<serde_json::Value> = tasks(&all, &a).iter().map(|t| t["run_id"].clone()).collect();
    assert_eq!(runs_before, runs_third, "still the same runs");
    for job in [&a, &b, &c] {
        assert_launched_once(dir, &agent_names, &all, job);
    }
    let _ = ok(cli(&all, &["job", "kill", &a]));
    eventually(30, "a killed", || tasks(&all, &a).iter().all(|t| state_is(t, "KILLED")));

    // Each leader claimed its election epoch in the store before writing, so
    // a handle claiming an old epoch (a paused, resumed ex-leader) is fenced.
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(async {
        use paceline_storage::Store as _;
        let store =
            paceline_storage::sqlite::SqliteStore::open(data.join("paceline.db")).expect("open the shared store");
        match store.claim_leadership(1).await {
            Err(paceline_storage::StoreError::Fenced { mine, current }) => {
                assert!(current > mine, "{current} > {mine}")
            }
            other => panic!("the leaders' epochs must fence an old one, got {other:?}"),
        }
    });
}
/// The host manager, the job manager and a placement engine in processes of
/// their own, the two managers each with a standby (one job manager given the
/// host managers' addresses, the other, like the engine, finding leaders in
/// ZooKeeper): killing either leader with SIGKILL costs a session timeout,
/// not a run. The host manager's standby leads and the agents
/// re-register with it; the job manager's standby leads and subscribes to
/// the host manager with a larger epoch; every run carries on under its id.
#[test]
fn host_and_job_managers_in_separate_processes_fail_over_each_on_its_own() {
    let _serial = serial();
    let zk = zookeeper();
    let cluster = unique_cluster("split");
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let hm: Vec<Node> = ["hm1", "hm2"].iter().map(|n| node(dir, n, zk, &cluster, &dir.join("hm-data"))).collect();
    let jm: Vec<Node> = ["jm1", "jm2"].iter().map(|n| node(dir, n, zk, &cluster, &dir.join("jm-data"))).collect();
    let list = |nodes: &[Node]| nodes.iter().map(|n| format!("127.0.0.1:{}", n.api)).collect::<Vec<_>>().join(",");
    let (hm_apis, jm_apis) = (list(&hm), list(&jm));
    let jobs_roles = ["--roles", "jobmgr,resmgr", "--hostmgr", hm_apis.as_str()];

    let mut hms = vec![start_with_roles("hm1", &hm[0], &["--roles", "hostmgr"])];
    hms[0].wait_line("leading", 60);
    hms.push(start_with_roles("hm2", &hm[1], &["--roles", "hostmgr"]));
    hms[1].wait_line("standby", 60);
    let mut jms = vec![start_with_roles("jm1", &jm[0], &jobs_roles)];
    jms[0].wait_line("leading", 60);
    // The second job manager is given no host manager addresses: it finds
    // the host manager's leader in ZooKeeper when it comes to lead.
    jms.push(start_with_roles("jm2", &jm[1], &["--roles", "jobmgr,resmgr"]));
    jms[1].wait_line("standby", 60);
    // The placement engine, in a process of its own, finds the job
    // manager's leader in ZooKeeper too (no --core), and reads plugin
    // versions from the job managers' store.
    let pl = node(dir, "pl", zk, &cluster, &dir.join("jm-data"));
    let mut engine = start_with_roles("pl", &pl, &["--roles", "placement"]);
    engine.wait_line("placement engine for the core leading in ZooKeeper", 30);
    // Agents dial the host managers, not the job managers.
    let managers = hm.iter().map(|n| format!("127.0.0.1:{}", n.agent)).collect::<Vec<_>>().join(",");
    let _agents: Vec<Proc> = [("a1", "30000-30499"), ("a2", "30500-30999")]
        .iter()
        .map(|(n, p)| start_agent(dir, &dir.join("hm-data"), n, &managers, p))
        .collect();
    let agent_names = ["a1", "a2"];
    let both_reachable = || {
        try_json(&jm_apis, &["host", "list"])
            .and_then(|h| h.as_array().cloned())
            .is_some_and(|h| h.len() == 2 && h.iter().all(|h| h["reachable"].as_bool() == Some(true)))
    };
    eventually(30, "two agents, seen through the job manager", both_reachable);

    let long = dir.join("long.yaml");
    let spec = std::fs::read_to_string(examples().join("hello.yaml"))
        .expect("example")
        .replace("instance_count: 3", "instance_count: 4")
        .replace("echo hello from instance $PACELINE_TASK_ID", "sleep 300");
    std::fs::write(&long, spec).expect("spec");
    let a = ok(cli(&jm_apis, &["job", "create", long.to_str().expect("utf-8")]));
    eventually(60, "job a: 4 running", || {
        let ts = tasks(&jm_apis, &a);
        ts.len() == 4 && ts.iter().all(|t| state_is(t, "RUNNING"))
    });
    let runs: Vec<serde_json::Value> = tasks(&jm_apis, &a).iter().map(|t| t["run_id"].clone()).collect();
    let hello = examples().join("hello.yaml");
    let hello = hello.to_str().expect("utf-8");

    // 1. The host manager's leader dies.
    hms[0].kill9();
    let killed = Instant::now();
    let led = hms[1].wait_line("leading", SESSION_TIMEOUT_MS / 1000 + 5);
    eprintln!("host manager failover after SIGKILL: {:?}", led.saturating_duration_since(killed));
    eventually(30, "both agents back, with the new host manager", both_reachable);
    let b = ok(cli(&jm_apis, &["job", "create", hello]));
    eventually(60, "job b SUCCEEDED through the new host manager", || {
        try_json(&jm_apis, &["job", "get", &b])
            .is_some_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });
    eprintln!("host manager failover, SIGKILL to a job placed and run: {:?}", killed.elapsed());
    let ts = tasks(&jm_apis, &a);
    assert!(ts.iter().all(|t| state_is(t, "RUNNING")), "job a carries on: {ts:?}");
    assert_eq!(runs, ts.iter().map(|t| t["run_id"].clone()).collect::<Vec<_>>(), "the same runs carry on");
    assert!(jms[0].alive() && jms[0].line_at("leading").is_some(), "the job manager kept its leadership");

    // 2. The job manager's leader dies.
    jms[0].kill9();
    let killed = Instant::now();
    let led = jms[1].wait_line("leading", SESSION_TIMEOUT_MS / 1000 + 5);
    eprintln!("job manager failover after SIGKILL: {:?}", led.saturating_duration_since(killed));
    let c = ok(cli(&jm_apis, &["job", "create", hello]));
    eventually(60, "job c SUCCEEDED on the new job manager", || {
        try_json(&jm_apis, &["job", "get", &c])
            .is_some_and(|j| j["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED")))
    });
    let ts = tasks(&jm_apis, &a);
    assert!(ts.iter().all(|t| state_is(t, "RUNNING")), "job a carries on: {ts:?}");
    assert_eq!(runs, ts.iter().map(|t| t["run_id"].clone()).collect::<Vec<_>>(), "still the same runs");
    assert!(hms[1].alive(), "the host manager kept its leadership");
    assert!(engine.alive(), "the placement engine followed the new job manager");
    // The log has colour codes around `=`: compare without them.
    let jm2_log: String = std::fs::read_to_string(&jm[1].log)
        .unwrap_or_default()
        .split('\x1b')
        .map(|p| p.split_once('m').map_or(p, |(_, rest)| rest))
        .collect();
    assert!(
        jm2_log.contains("host manager reached servers= discovered=true"),
        "jm2 found the host manager through ZooKeeper: {jm2_log}"
    );
    for job in [&a, &b, &c] {
        assert_launched_once(dir, &agent_names, &jm_apis, job);
    }
}
