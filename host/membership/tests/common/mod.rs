//! Shared helpers: a real ZooKeeper and waiting on leadership channels.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use paceline_membership::{Leadership, MemberInfo, Role, Secret, ZooKeeperAuth, ZooKeeperConfig};
use tokio::sync::watch;

pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/zookeeper/zookeeper.sh")
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("paceline_membership=info")),
        )
        .with_test_writer()
        .try_init();
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A ZooKeeper server started by the project's script; stopped on drop.
#[derive(Debug)]
pub struct ZkServer {
    pub dir: tempfile::TempDir,
    pub port: u16,
}

impl ZkServer {
    pub fn start(port: u16) -> ZkServer {
        let dir = tempfile::Builder::new().prefix("paceline-membership-zk").tempdir().unwrap();
        let out =
            Command::new("bash").arg(script()).arg("start").arg(dir.path()).arg(port.to_string()).output().unwrap();
        assert!(
            out.status.success(),
            "zookeeper.sh start failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ZkServer { dir, port }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn stop(&self) {
        let _ = Command::new("bash").arg(script()).arg("stop").arg(self.dir.path()).output();
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The ZooKeeper all tests of a binary share: `PACELINE_ZOOKEEPER` if set, otherwise one
/// started by the script on a free port. A watchdog shell stops that one when the test
/// process exits (statics are never dropped).
pub fn zookeeper() -> &'static str {
    static ADDR: OnceLock<String> = OnceLock::new();
    ADDR.get_or_init(|| {
        if let Ok(addr) = std::env::var("PACELINE_ZOOKEEPER")
            && !addr.trim().is_empty()
        {
            return addr;
        }
        let server = ZkServer::start(free_port());
        let addr = server.addr();
        let dir = server.dir.path().to_path_buf();
        let watchdog = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; bash '{script}' stop '{dir}' >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            script = script().display(),
            dir = dir.display(),
        );
        // Deliberately never waited for: it outlives this process to stop the server.
        #[allow(clippy::zombie_processes)]
        Command::new("bash")
            .arg("-c")
            .arg(watchdog)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // The watchdog owns the server and its directory from now on.
        std::mem::forget(server);
        addr
    })
}

/// A cluster name no other test (or earlier run) uses.
pub fn unique_cluster(test: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("test-{test}-{}-{nanos}", std::process::id())
}

pub fn member(id: &str, roles: &[Role]) -> MemberInfo {
    MemberInfo {
        id: id.to_string(),
        api_addr: format!("{id}.api:5000"),
        agent_addr: format!("{id}.agent:5001"),
        roles: roles.to_vec(),
    }
}

/// The digest identity every test member authenticates with: `PACELINE_ZOOKEEPER_USER` and
/// the file `PACELINE_ZOOKEEPER_PASSWORD_FILE` names (what `zookeeper.sh env` prints), else a
/// fixed test identity. Every test binary that shares a ZooKeeper must use the same one: the
/// first member to create `/paceline` makes it this identity's alone.
pub fn test_user() -> String {
    std::env::var("PACELINE_ZOOKEEPER_USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "paceline".into())
}

/// The password of [`test_user`].
pub fn test_password() -> String {
    match std::env::var("PACELINE_ZOOKEEPER_PASSWORD_FILE") {
        Ok(file) if !file.is_empty() => {
            std::fs::read_to_string(&file).unwrap().trim_end_matches(['\n', '\r']).to_string()
        }
        _ => "paceline-test-password".into(),
    }
}

pub fn test_auth() -> ZooKeeperAuth {
    ZooKeeperAuth::digest(&test_user(), Secret::new(test_password())).unwrap()
}

/// A file holding [`test_password`], for configurations that name one.
pub fn test_password_file() -> PathBuf {
    if let Ok(file) = std::env::var("PACELINE_ZOOKEEPER_PASSWORD_FILE")
        && !file.is_empty()
    {
        return PathBuf::from(file);
    }
    static FILE: OnceLock<tempfile::TempPath> = OnceLock::new();
    FILE.get_or_init(|| {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), format!("{}\n", test_password())).unwrap();
        file.into_temp_path()
    })
    .to_path_buf()
}

/// A raw client authenticated as the test identity (for setting up and inspecting nodes).
pub async fn authed_client(connect: &str) -> zookeeper_client::Client {
    let credential = format!("{}:{}", test_user(), test_password());
    zookeeper_client::Client::connector().with_auth("digest", credential.as_bytes()).connect(connect).await.unwrap()
}

/// A member configuration with a 2 s session, authenticated as the test identity.
pub fn zk_config(connect: &str, cluster: &str, id: &str, roles: &[Role]) -> ZooKeeperConfig {
    zk_config_no_auth(connect, cluster, id, roles).with_auth(test_auth())
}

/// A member configuration as before 0028: no authentication, nodes open to anyone.
pub fn zk_config_no_auth(connect: &str, cluster: &str, id: &str, roles: &[Role]) -> ZooKeeperConfig {
    let mut config = ZooKeeperConfig::new(connect, cluster, member(id, roles), roles.to_vec());
    config.session_timeout = Duration::from_secs(2);
    config
}

/// Waits until `rx` holds a value matching `pred`; panics with the last value after `timeout`.
pub async fn wait_for(
    rx: &mut watch::Receiver<Leadership>,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&Leadership) -> bool,
) -> Leadership {
    let deadline = Instant::now() + timeout;
    loop {
        {
            let current = rx.borrow_and_update();
            if pred(&current) {
                return current.clone();
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("{what}: channel closed at {:?}", *rx.borrow()),
            Err(_) => panic!("{what}: not reached within {timeout:?}; last {:?}", *rx.borrow()),
        }
    }
}

/// Records every value a channel takes, with the instant it was seen.
pub fn record(mut rx: watch::Receiver<Leadership>) -> std::sync::Arc<std::sync::Mutex<Vec<(Instant, Leadership)>>> {
    let log = std::sync::Arc::new(std::sync::Mutex::new(vec![(Instant::now(), rx.borrow_and_update().clone())]));
    let out = log.clone();
    tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let value = rx.borrow_and_update().clone();
            log.lock().unwrap().push((Instant::now(), value));
        }
    });
    out
}

/// Watches every channel; each time one becomes leader, reads the others' current values
/// and records a violation if any of them is leader too. The returned list must stay empty.
pub fn detect_two_leaders(channels: Vec<watch::Receiver<Leadership>>) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let violations = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..channels.len() {
        let mut rx = channels[i].clone();
        let others: Vec<(usize, watch::Receiver<Leadership>)> =
            channels.iter().enumerate().filter(|(j, _)| *j != i).map(|(j, r)| (j, r.clone())).collect();
        let out = violations.clone();
        tokio::spawn(async move {
            loop {
                if rx.borrow_and_update().is_leader() {
                    for (j, other) in &others {
                        if other.borrow().is_leader() {
                            out.lock().unwrap().push(format!("member {i} became leader while member {j} led"));
                        }
                    }
                }
                if rx.changed().await.is_err() {
                    break;
                }
            }
        });
    }
    violations
}

/// A TCP proxy in front of ZooKeeper that can cut its clients off: `cut`
/// drops every connection through it and refuses new ones (a network
/// partition as the client sees it), `restore` lets connections through again.
pub struct Proxy {
    pub addr: String,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// While `true`, bytes are read but not passed on (a ZooKeeper that answers late).
    held: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: &str) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> = Default::default();
        let held = std::sync::Arc::new(tokio::sync::watch::Sender::new(false));
        let (target, cut2, conns2, held2) = (target.to_string(), cut.clone(), conns.clone(), held.clone());
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if cut2.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection close
                }
                let (target, held) = (target.clone(), held2.clone());
                let task = tokio::spawn(async move {
                    if let Ok(outbound) = tokio::net::TcpStream::connect(&target).await {
                        let (in_read, in_write) = inbound.into_split();
                        let (out_read, out_write) = outbound.into_split();
                        tokio::join!(pump(in_read, out_write, &held), pump(out_read, in_write, &held));
                    }
                });
                conns2.lock().unwrap().push(task);
            }
        });
        Proxy { addr, cut, held, conns, accept }
    }

    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Holds every byte in both directions until [`Proxy::release`]: connections stay open
    /// and nothing is lost, it only arrives late.
    pub fn hold(&self) {
        self.held.send_replace(true);
    }

    pub fn release(&self) {
        self.held.send_replace(false);
    }
}

/// Copies `from` to `to`, waiting while `held`.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    held: &tokio::sync::watch::Sender<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut held = held.subscribe();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if held.wait_for(|h| !*h).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}
