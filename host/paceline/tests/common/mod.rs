//! Helpers shared by the tests that run the real `paceline` binary
//! (`clients.rs`, `dev_e2e.rs`, `ha_zookeeper.rs`, `split_roles.rs`,
//! `web_ui.rs`). Each test binary uses a part of them.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_paceline");

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
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

/// `paceline dev` on `sim_hosts` simulated hosts, stopped with SIGTERM on drop.
pub struct Dev(Child);

impl Dev {
    /// Starts it on `api` with data in `dir/dev` and waits for "API on".
    pub fn start(dir: &Path, api: u16, sim_hosts: usize, extra: &[&str]) -> Dev {
        let mut child = Command::new(BIN)
            .args(["dev", "--sim-hosts", &sim_hosts.to_string(), "--data-dir", dir.join("dev").to_str().expect("utf-8")])
            .args(["--api-listen", &format!("127.0.0.1:{api}")])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
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
        Dev(child)
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
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
