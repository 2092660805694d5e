//! One health probe of a run: a command in its sandbox, an HTTP GET or a
//! TCP connect on 127.0.0.1. The schedule (initial delay, interval,
//! consecutive failures) lives with the supervisor, which owns the updates.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Command;

use crate::spec::Probe;

/// Runs one probe; `Err` says why the run is not healthy.
pub(crate) async fn probe_once(
    probe: &Probe,
    ports: &BTreeMap<String, u16>,
    sandbox: &Path,
    env: &BTreeMap<String, String>,
    ids: Option<&crate::task_user::Ids>,
    timeout: Duration,
) -> Result<(), String> {
    match tokio::time::timeout(timeout, run_probe(probe, ports, sandbox, env, ids)).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {} s", timeout.as_secs_f64())),
    }
}

async fn run_probe(
    probe: &Probe,
    ports: &BTreeMap<String, u16>,
    sandbox: &Path,
    env: &BTreeMap<String, String>,
    ids: Option<&crate::task_user::Ids>,
) -> Result<(), String> {
    let port_of = |name: &str| ports.get(name).copied().ok_or_else(|| format!("no port named `{name}`"));
    match probe {
        Probe::Command { command, args } => {
            let mut cmd = Command::new(command);
            // A command check runs as the task does (decision 0047).
            // Supplementary groups: the std library clears them when it
            // switches uid (a named user's are not carried to its checks).
            if let Some(ids) = ids {
                cmd.uid(ids.uid).gid(ids.gid);
            }
            let status = cmd
                .args(args)
                .env_clear()
                .envs(env)
                .current_dir(sandbox)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                // A probe that outlives its timeout is killed with the future.
                .kill_on_drop(true)
                .status()
                .await
                .map_err(|e| format!("starting `{command}`: {e}"))?;
            if status.success() { Ok(()) } else { Err(format!("`{command}` ended with {status}")) }
        }
        Probe::Tcp { port } => {
            let port = port_of(port)?;
            TcpStream::connect(("127.0.0.1", port)).await.map(drop).map_err(|e| format!("connect to port {port}: {e}"))
        }
        Probe::Http { port, path } => {
            let port = port_of(port)?;
            let mut stream =
                TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| format!("connect to port {port}: {e}"))?;
            let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.map_err(|e| format!("sending request: {e}"))?;
            // The status line is all we need; 256 bytes hold it.
            let mut buf = vec![0u8; 256];
            let mut len = 0;
            while len < buf.len() {
                let n = stream.read(&mut buf[len..]).await.map_err(|e| format!("reading answer: {e}"))?;
                if n == 0 || buf[..len + n].contains(&b'\n') {
                    len += n;
                    break;
                }
                len += n;
            }
            let head = String::from_utf8_lossy(&buf[..len]);
            let code: u16 = head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| format!("not an HTTP answer: {:?}", head.lines().next().unwrap_or("")))?;
            if (200..400).contains(&code) { Ok(()) } else { Err(format!("HTTP {code} from {path}")) }
        }
    }
}
