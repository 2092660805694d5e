//! Helpers shared by the tests that run the real `paceline` binary
//! (`clients.rs`, `dev_e2e/`, `ha_zookeeper/`, `prometheus.rs`, `sim_record.rs`, `split_roles.rs`, `task_usage.rs`,
//! `web_ui/`). Each test binary uses a part of them.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// SIGKILLs every process whose working directory is under `dir`: the task
/// processes an agent started, which outlive the agent by design, so that a
/// test leaves nothing running (`scripts/leftovers` checks at the end of
/// `scripts/test`) even when it fails.
pub fn kill_processes_working_under(dir: &Path) {
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)) {
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).stderr(Stdio::null()).status();
        }
    }
}

/// `GET path` over HTTP/1.1: (status code, body).
pub fn http_get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n").expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body)
}

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_paceline");

/// Task ports of `paceline dev`'s agents (`DEV_TASK_PORTS_FROM` in
/// cmd/server.rs), for four agents: [`free_port`] stays out of them.
const DEV_TASK_PORTS: (u16, u16) = (20_000, 24_000);

/// A port nothing listens on right now, below the kernel's ephemeral range
/// and outside [`DEV_TASK_PORTS`].
/// A port the kernel hands out (bind to 0) can be given again as the source
/// port of any outgoing connection while the process meant to listen on it
/// is not up yet or stands by, and its bind then fails (a standby job
/// manager of `ha_zookeeper` exited so in CI).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32768);
    let (from, to) = (low.saturating_sub(20_000).max(10_000), low.saturating_sub(1));
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
        ^ (u64::from(std::process::id()) << 32);
    for _ in 0..200 {
        // splitmix64 of a per-process counter: spread over the range.
        let mut x = seed.wrapping_add(NEXT.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed));
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^= x >> 31;
        if to <= from {
            break;
        }
        let port = (from + x % (to - from)) as u16;
        // Not where `paceline dev` gives its agents task ports (20000 up, a
        // thousand an agent; the tests start at most a few agents): a dev of
        // another test would bind it for a task later.
        if (DEV_TASK_PORTS.0..DEV_TASK_PORTS.1).contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// Polls `f` every 200 ms until it returns true; panics naming `what` after `secs`.
pub fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out: {what}");
}

/// A `paceline` process (`dev` or `server`), stopped with SIGTERM on drop.
pub struct Dev(Child);

impl Dev {
    /// `paceline dev` on `sim_hosts` simulated hosts, on `api`, with data in
    /// `dir/dev`; returns once it says "API on".
    pub fn start(dir: &Path, api: u16, sim_hosts: usize, extra: &[&str]) -> Dev {
        let mut args = vec!["dev".to_string(), "--sim-hosts".into(), sim_hosts.to_string()];
        args.extend(["--data-dir".into(), dir.join("dev").to_str().expect("utf-8").to_string()]);
        args.extend(["--api-listen".into(), format!("127.0.0.1:{api}")]);
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Dev::spawn(&args, "API on")
    }

    /// `paceline <args>`; returns once a line of its stdout contains `ready`.
    pub fn spawn(args: &[&str], ready: &str) -> Dev {
        let mut child =
            Command::new(BIN).args(args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        let ready = ready.to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains(&ready) {
                    let _ = tx.send(());
                }
            }
        });
        let process = Dev(child);
        rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("paceline {args:?} did not come up"));
        process
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// `paceline agent-token create` on the PKI directory `pki_dir` (a server's
/// `<data_dir>/pki`): the flags an agent joins with, `--join TOKEN --ca-hash HASH`.
pub fn join_args(pki_dir: &Path) -> Vec<String> {
    let out = Command::new(BIN)
        .args(["agent-token", "create", "--ttl", "1h", "--pki-dir"])
        .arg(pki_dir)
        .output()
        .expect("runs");
    assert!(out.status.success(), "agent-token create: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {text}"))
            .to_string()
    };
    vec!["--join".into(), line("token: "), "--ca-hash".into(), line("ca-hash: ")]
}

/// `paceline auth token` for one principal: the token and a tokens file
/// (`version: 1`) admitting only it, written to `path`.
pub fn tokens_file(path: &Path, args: &[&str]) -> String {
    let mut all = vec!["auth", "token"];
    all.extend(args);
    let out = Command::new(BIN).args(&all).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let token = text.lines().find_map(|l| l.strip_prefix("token: ")).expect("a token line").to_string();
    let entry: String = text.lines().filter(|l| l.starts_with("  ")).map(|l| format!("{l}\n")).collect();
    std::fs::write(path, format!("version: 1\nprincipals:\n{entry}")).expect("write the tokens file");
    token
}

/// A certificate authority and a `localhost` server certificate it signed,
/// made with the `openssl` command line in `dir` (created if missing):
/// (ca.pem, cert.pem, key.pem).
pub fn test_certificates(dir: &Path) -> (String, String, String) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let p = |name: &str| dir.join(name).to_str().expect("utf-8").to_string();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().expect("openssl runs (Debian's openssl package)");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &p("ca.key")]);
    openssl(&[
        "req",
        "-x509",
        "-new",
        "-key",
        &p("ca.key"),
        "-days",
        "2",
        "-subj",
        "/CN=paceline test CA",
        "-out",
        &p("ca.pem"),
    ]);
    openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &p("server.key")]);
    openssl(&["pkcs8", "-topk8", "-nocrypt", "-in", &p("server.key"), "-out", &p("key.pem")]);
    openssl(&["req", "-new", "-key", &p("key.pem"), "-subj", "/CN=localhost", "-out", &p("server.csr")]);
    std::fs::write(
        dir.join("ext.cnf"),
        "basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .expect("write");
    openssl(&[
        "x509",
        "-req",
        "-in",
        &p("server.csr"),
        "-CA",
        &p("ca.pem"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &p("ext.cnf"),
        "-out",
        &p("cert.pem"),
    ]);
    (p("ca.pem"), p("cert.pem"), p("key.pem"))
}

/// The CLI against the server whose API is on `api`.
pub fn cli(api: u16, args: &[&str]) -> Output {
    Command::new(BIN).args(args).env("PACELINE_SERVER", format!("http://127.0.0.1:{api}")).output().expect("cli runs")
}

/// Its standard output, trimmed; fails the test (showing both streams) on a non-zero exit.
pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A CLI command's `-o json` answer.
pub fn json(api: u16, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&ok(cli(api, &all))).expect("json output")
}
