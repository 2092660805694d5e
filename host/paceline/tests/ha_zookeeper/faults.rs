//! What goes wrong around ZooKeeper: a leader cut off from it, an ensemble unreachable at
//! start or later, and a configuration that names only some roles.

use super::*;

/// A TCP proxy in front of ZooKeeper that can be cut: from then on it forwards nothing and
/// answers nothing (a partition), keeping every socket open.
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let port = listener.local_addr().expect("addr").port();
        let cut = Arc::new(AtomicBool::new(false));
        let flag = cut.clone();
        std::thread::spawn(move || {
            let held = Arc::new(Mutex::new(Vec::new()));
            for client in listener.incoming().flatten() {
                if flag.load(Ordering::SeqCst) {
                    held.lock().unwrap_or_else(|p| p.into_inner()).push(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else { continue };
                for (mut from, mut to) in [
                    (client.try_clone().expect("clone"), server.try_clone().expect("clone")),
                    (server.try_clone().expect("clone"), client.try_clone().expect("clone")),
                ] {
                    let flag = flag.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            if !flag.load(Ordering::SeqCst) && to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        // Cut: never close, so the peer sees silence, not a reset.
                        while flag.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_secs(1));
                        }
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
                held.lock().unwrap_or_else(|p| p.into_inner()).push(client);
                held.lock().unwrap_or_else(|p| p.into_inner()).push(server);
            }
        });
        Proxy { port, cut }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_leader_cut_off_from_zookeeper_exits_before_a_successor_serves() {
    let _serial = serial();
    let zk = zookeeper();
    let proxy = Proxy::start(zk.to_string());
    let cluster = unique_cluster("partition");
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let data = dir.join("shared-data");
    let via_proxy = format!("127.0.0.1:{}", proxy.port);
    let n1 = node(dir, "p1", &via_proxy, &cluster, &data);
    let n2 = node(dir, "p2", zk, &cluster, &data);
    let mut p1 = start_server("p1", &n1);
    p1.wait_line("leading", 60);
    let mut p2 = start_server("p2", &n2);
    p2.wait_line("standby", 60);
    let all = format!("127.0.0.1:{},127.0.0.1:{}", n1.api, n2.api);
    let id = ok(cli(&all, &["job", "create", examples().join("hello.yaml").to_str().expect("utf-8")]));

    proxy.cut();
    let cut = Instant::now();
    let deadline = cut + Duration::from_millis(SESSION_TIMEOUT_MS) + Duration::from_secs(10);
    while p1.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (exited, code) = p1.exited.expect("the cut-off leader exited");
    assert_eq!(code, Some(EXIT_LOST_LEADERSHIP), "exit code of a lost leadership");
    let served = p2.wait_line("leading", SESSION_TIMEOUT_MS / 1000 + 10);
    eprintln!("leader exited {:?} after the cut; successor served {:?} after the cut", exited - cut, served - cut);
    assert!(exited < served, "the old leader exited before the successor served");
    let log = std::fs::read_to_string(&n1.log).unwrap_or_default();
    assert!(log.contains("lost leadership"), "the reason is logged: {log}");
    // The job submitted before is there on the successor.
    let jobs = json(&all, &["job", "list"]);
    assert!(jobs.as_array().into_iter().flatten().any(|j| j["id"].as_str() == Some(id.as_str())), "{jobs}");
}

#[test]
fn an_unreachable_zookeeper_at_start_is_retried_and_losing_it_ends_leadership() {
    let _serial = serial();
    let port = free_port();
    let cluster = unique_cluster("late");
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let n = node(dir, "late", &format!("127.0.0.1:{port}"), &cluster, &dir.join("data"));
    let mut server = start_server("late", &n);
    server.wait_line("standby", 60);
    std::thread::sleep(Duration::from_secs(3));
    assert!(server.alive(), "the server keeps retrying");
    let log = std::fs::read_to_string(&n.log).unwrap_or_default();
    assert!(log.contains("cannot reach ZooKeeper"), "the error is logged: {log}");
    let api = format!("127.0.0.1:{}", n.api);
    let out = cli(&api, &["job", "list"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("standby") && err.contains("no leader"), "{err}");

    let zk = ZkServer::start(port);
    server.wait_line("leading", 30);
    ok(cli(&api, &["job", "list"]));
    // ZooKeeper going away ends the leadership: the server exits for its supervisor.
    zk.stop();
    let deadline = Instant::now() + Duration::from_millis(SESSION_TIMEOUT_MS) + Duration::from_secs(10);
    while server.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.exited.and_then(|(_, c)| c), Some(EXIT_LOST_LEADERSHIP));
}

#[test]
fn a_subset_of_roles_is_refused_with_a_clear_error() {
    let out = Command::new(BIN).args(["server", "--roles", "jobmgr,hostmgr"]).output().expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not supported") && err.contains("jobmgr,resmgr,hostmgr"), "{err}");
    let out = Command::new(BIN).args(["server", "--roles", "jobmgr,scheduler"]).output().expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown role"));
}
