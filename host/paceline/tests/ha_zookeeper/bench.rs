//! The failover benchmarks (ignored; docs/benchmarks.md, "Failover").

use super::*;

/// Failover benchmark (not run by default):
/// `cargo test --release -p paceline --test ha_zookeeper -- --ignored failover_bench --exact --nocapture`.
/// Three servers and two agents on their defaults (the session timeout, heartbeats,
/// the agents' redial) but for addresses and ZooKeeper's identity; per round: stop the
/// leader, then time until a job submitted right after has a task placed by the new
/// leader; the stopped server is restarted as a standby (as a supervisor would).
/// `PACELINE_FAILOVER_KILLS` rounds of SIGKILL (default 20), then
/// `PACELINE_FAILOVER_TERMS` of SIGTERM (default 5); `PACELINE_FAILOVER_SESSION_MS`
/// asks for another session timeout. Prints p50, p99 and max of each against the
/// budgets; figures only, no timing assertion.
#[test]
#[ignore = "benchmark: several minutes"]
fn failover_bench() {
    let _serial = serial();
    let zk = zookeeper();
    let cluster = unique_cluster("bench");
    let dir = bench_dir();
    let dir = dir.path();
    let data = dir.join("shared-data");
    let names = ["b1", "b2", "b3"];
    let nodes: Vec<Node> = names.iter().map(|n| bench_node(dir, n, zk, &cluster, &data)).collect();
    let all = nodes.iter().map(|n| format!("127.0.0.1:{}", n.api)).collect::<Vec<_>>().join(",");
    let managers = nodes.iter().map(|n| format!("127.0.0.1:{}", n.agent)).collect::<Vec<_>>().join(",");
    let mut servers: Vec<Proc> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let mut s = start_server(names[i], n);
        s.wait_line(if i == 0 { "leading" } else { "standby" }, 60);
        servers.push(s);
    }
    let _agents: Vec<Proc> = [("ba1", "31000-31499"), ("ba2", "31500-31999")]
        .iter()
        .map(|(n, p)| start_agent_with(dir, &data, n, &managers, p, ""))
        .collect();
    eventually(60, "agents up", || {
        try_json(&all, &["host", "list"]).and_then(|h| h.as_array().map(Vec::len)) == Some(2)
    });
    let spec = dir.join("one.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(examples().join("hello.yaml"))
            .expect("example")
            .replace("instance_count: 3", "instance_count: 1")
            .replace("echo hello from instance $PACELINE_TASK_ID", "sleep 600"),
    )
    .expect("spec");
    let (kills, terms) = bench_rounds();
    let mut killed_times = Vec::new();
    let mut termed_times = Vec::new();
    for round in 0..kills + terms {
        let sigkill = round < kills;
        let leader = leading_index(&servers).expect("a leader");
        if sigkill {
            servers[leader].kill9();
        } else {
            servers[leader].term();
        }
        let took = first_placement_after(&all, &spec, Instant::now());
        let how = if sigkill { "SIGKILL" } else { "SIGTERM" };
        eprintln!("round {round}: {how} of {} → first placement by the new leader in {took:?}", names[leader]);
        if sigkill {
            killed_times.push(took)
        } else {
            termed_times.push(took)
        }
        // The supervisor restarts the stopped server; it joins as a standby.
        servers[leader].wait_exit(30);
        let mut again = start_server(names[leader], &nodes[leader]);
        again.wait_line("standby", 60);
        servers[leader] = again;
    }
    let session = bench_session_ms().map_or("the default".to_string(), |ms| format!("{ms} ms"));
    println!("failover, session timeout {session}, three servers, two agents on their defaults:");
    print_figures(
        "  SIGKILL of the leader → first placement by the new leader",
        &mut killed_times,
        "p50 ≤ 2 s, p99 ≤ 3 s",
    );
    print_figures("  SIGTERM of the leader → first placement by the new leader", &mut termed_times, "≤ 1 s");
}

/// A failover benchmark's directory: kept, with every process's log, when
/// `PACELINE_FAILOVER_KEEP` is set (its path is printed).
fn bench_dir() -> tempfile::TempDir {
    let mut dir = tempfile::tempdir().expect("tempdir");
    if std::env::var_os("PACELINE_FAILOVER_KEEP").is_some() {
        dir.disable_cleanup(true);
        eprintln!("logs kept in {}", dir.path().display());
    }
    dir
}

/// The rounds of a failover benchmark: (SIGKILL, SIGTERM).
fn bench_rounds() -> (usize, usize) {
    let var = |k: &str, d: usize| std::env::var(k).ok().and_then(|s| s.parse().ok()).unwrap_or(d);
    (var("PACELINE_FAILOVER_KILLS", 20), var("PACELINE_FAILOVER_TERMS", 5))
}

/// The session timeout a failover benchmark asks for; `None`: the server's default.
fn bench_session_ms() -> Option<u64> {
    std::env::var("PACELINE_FAILOVER_SESSION_MS").ok().and_then(|s| s.parse().ok())
}

/// A server of a failover benchmark: [`node`] without the tests' shorter
/// session and heartbeat timeouts, so that it runs on the server's defaults.
fn bench_node(dir: &Path, name: &str, zk: &str, cluster: &str, data: &Path) -> Node {
    let node = node(dir, name, zk, cluster, data);
    let text = std::fs::read_to_string(&node.config).expect("config");
    let session = match bench_session_ms() {
        Some(ms) => format!("  session_timeout_ms: {ms}\n"),
        None => String::new(),
    };
    let text = text
        .replace("heartbeat_timeout_ms: 5000\nagent_heartbeat_ms: 500\n", "")
        .replace(&format!("  session_timeout_ms: {SESSION_TIMEOUT_MS}\n"), &session);
    assert!(!text.contains("heartbeat") && text.contains("membership"), "config as expected: {text}");
    std::fs::write(&node.config, text).expect("config");
    node
}

/// Prints p50, p99 (nearest rank) and max of `times` with `budget`.
fn print_figures(what: &str, times: &mut [Duration], budget: &str) {
    if times.is_empty() {
        return;
    }
    times.sort();
    let rank = |p: f64| times[((p * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1];
    println!(
        "{what}, {} rounds: p50 {:.2} s, p99 {:.2} s, max {:.2} s (budget {budget})",
        times.len(),
        rank(0.50).as_secs_f64(),
        rank(0.99).as_secs_f64(),
        times[times.len() - 1].as_secs_f64()
    );
}

/// Submits `spec` through `servers` until one accepts it, then waits until a
/// task of it is placed on a host; the time since `killed`.
fn first_placement_after(servers: &str, spec: &Path, killed: Instant) -> Duration {
    let id = loop {
        let out = cli(servers, &["job", "create", spec.to_str().expect("utf-8")]);
        if out.status.success() {
            break String::from_utf8_lossy(&out.stdout).trim().to_string();
        }
        assert!(killed.elapsed() < Duration::from_secs(60), "no leader within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    let accepted = killed.elapsed();
    while !tasks(servers, &id).iter().any(|t| t["host"].as_str().is_some_and(|h| !h.is_empty())) {
        assert!(killed.elapsed() < Duration::from_secs(60), "nothing placed within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let placed = killed.elapsed();
    eprintln!("  job accepted after {accepted:.2?}, a task placed after {placed:.2?}");
    placed
}

/// The index of the process among `procs` whose latest standby/leading line says it leads.
fn leading_index(procs: &[Proc]) -> Option<usize> {
    (0..procs.len()).find(|i| {
        let lines = procs[*i].lines.lock().unwrap_or_else(|p| p.into_inner());
        lines
            .iter()
            .rev()
            .find(|(_, l)| l.contains("standby") || l.contains("leading"))
            .is_some_and(|(_, l)| l.contains("leading"))
    })
}

/// Failover benchmark of each role when the host manager and the job manager
/// run in processes of their own (not run by default):
/// `cargo test --release -p paceline --test ha_zookeeper -- --ignored bench::failover_bench_split --exact --nocapture`.
/// Two `--roles hostmgr` and two `--roles jobmgr,resmgr,placement` processes and
/// two agents on their defaults, as in [`failover_bench`]; rounds alternate
/// between stopping the host manager's leader and the job manager's; each times
/// the stop → a job submitted right after has a task placed (which needs both
/// roles led); the stopped process is restarted as a standby.
/// `PACELINE_FAILOVER_KILLS` SIGKILLs of each (default 20), then
/// `PACELINE_FAILOVER_TERMS` SIGTERMs of each (default 5). Figures only.
#[test]
#[ignore = "benchmark: several minutes"]
fn failover_bench_split() {
    let _serial = serial();
    let zk = zookeeper();
    let cluster = unique_cluster("bench-split");
    let dir = bench_dir();
    let dir = dir.path();
    let make = |name: &str, data: &str| bench_node(dir, name, zk, &cluster, &dir.join(data));
    let hm = [make("bh1", "hm-data"), make("bh2", "hm-data")];
    let jm = [make("bj1", "jm-data"), make("bj2", "jm-data")];
    let hm_apis = hm.iter().map(|n| format!("127.0.0.1:{}", n.api)).collect::<Vec<_>>().join(",");
    let jm_apis = jm.iter().map(|n| format!("127.0.0.1:{}", n.api)).collect::<Vec<_>>().join(",");
    let hm_args: Vec<String> = vec!["--roles".into(), "hostmgr".into()];
    let jm_args: Vec<String> =
        vec!["--roles".into(), "jobmgr,resmgr,placement".into(), "--hostmgr".into(), hm_apis.clone()];
    let start = |name: &str, n: &Node, args: &[String], first: bool| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut p = start_with_roles(name, n, &args);
        p.wait_line(if first { "leading" } else { "standby" }, 60);
        p
    };
    let mut hms = vec![start("bh1", &hm[0], &hm_args, true), start("bh2", &hm[1], &hm_args, false)];
    let mut jms = vec![start("bj1", &jm[0], &jm_args, true), start("bj2", &jm[1], &jm_args, false)];
    let managers = hm.iter().map(|n| format!("127.0.0.1:{}", n.agent)).collect::<Vec<_>>().join(",");
    let _agents: Vec<Proc> = [("bsa1", "20000-20499"), ("bsa2", "20500-20999")]
        .iter()
        .map(|(n, p)| start_agent_with(dir, &dir.join("hm-data"), n, &managers, p, ""))
        .collect();
    eventually(60, "agents up", || {
        try_json(&jm_apis, &["host", "list"]).and_then(|h| h.as_array().map(Vec::len)) == Some(2)
    });
    let spec = dir.join("one.yaml");
    std::fs::write(
        &spec,
        std::fs::read_to_string(examples().join("hello.yaml"))
            .expect("example")
            .replace("instance_count: 3", "instance_count: 1")
            .replace("echo hello from instance $PACELINE_TASK_ID", "sleep 600")
            .replace("cpu_millis: 100", "cpu_millis: 10"),
    )
    .expect("spec");
    let (kills, terms) = bench_rounds();
    // [hostmgr, jobmgr] × [SIGKILL, SIGTERM]
    let mut times: [[Vec<Duration>; 2]; 2] = Default::default();
    for round in 0..(kills + terms) * 2 {
        let host_round = round % 2 == 0;
        let sigkill = round / 2 < kills;
        let (procs, nodes, args, names) = if host_round {
            (&mut hms, &hm, &hm_args, ["bh1", "bh2"])
        } else {
            (&mut jms, &jm, &jm_args, ["bj1", "bj2"])
        };
        let leader = leading_index(procs).expect("a leader");
        if sigkill {
            procs[leader].kill9();
        } else {
            procs[leader].term();
        }
        let took = first_placement_after(&jm_apis, &spec, Instant::now());
        let role = if host_round { "hostmgr" } else { "jobmgr" };
        let how = if sigkill { "SIGKILL" } else { "SIGTERM" };
        eprintln!("round {round}: {how} of the {role} leader {} → first placement in {took:?}", names[leader]);
        times[usize::from(!host_round)][usize::from(!sigkill)].push(took);
        procs[leader].wait_exit(30);
        procs[leader] = start(names[leader], &nodes[leader], args, false);
    }
    let session = bench_session_ms().map_or("the default".to_string(), |ms| format!("{ms} ms"));
    println!("failover of each role in its own processes, session timeout {session}, two agents on their defaults:");
    for (i, role) in ["hostmgr", "jobmgr + resmgr + placement"].iter().enumerate() {
        let [killed, termed] = &mut times[i];
        print_figures(&format!("  SIGKILL of the {role} leader → first placement"), killed, "p50 ≤ 2 s, p99 ≤ 3 s");
        print_figures(&format!("  SIGTERM of the {role} leader → first placement"), termed, "≤ 1 s");
    }
}
