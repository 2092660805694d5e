//! End to end through the real binary: `paceline dev` (or `paceline server`
//! with agents started here) and the `paceline` CLI, with real agents
//! running real processes.
//!
//! One binary (`cargo test --test dev_e2e`); this file holds the process and CLI helpers
//! every test uses, each module one subject.

#[path = "../common/mod.rs"]
mod common;

mod access;
mod dev;
mod jobs;
mod plugins;
mod pools;
mod secrets;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{BIN, cli, eventually, free_port, join_args, json, ok, test_certificates};

/// A child process stopped with SIGTERM (or SIGKILL with `kill9`) when dropped.
struct Proc(Child, Option<std::path::PathBuf>);

impl Proc {
    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).stderr(Stdio::null()).status();
        let _ = self.0.wait();
        // A dev's agents leave their tasks running when dev is killed.
        if let Some(dir) = &self.1 {
            common::kill_processes_working_under(dir);
        }
    }
}

/// Starts `paceline <args>` and waits for the line that says the API is up.
fn start(args: &[&str], ready: &str) -> Proc {
    start_with_path(args, ready, None)
}

/// [`start`], with a folder put first on the child's PATH.
fn start_with_path(args: &[&str], ready: &str, path_first: Option<&Path>) -> Proc {
    let mut cmd = Command::new(BIN);
    if let Some(first) = path_first {
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", first.display()));
    }
    let mut child = cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("starts");
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
    rx.recv_timeout(Duration::from_secs(60)).expect("the server came up");
    Proc(child, None)
}

fn dev(dir: &Path, api: u16) -> Proc {
    let data = dir.join("dev");
    let mut dev = start(
        &[
            "dev",
            "--agents",
            "2",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
        ],
        "API on",
    );
    dev.1 = Some(data);
    dev
}

fn examples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn example(name: &str) -> String {
    examples().join(name).to_str().expect("utf-8").to_string()
}

fn job_state(api: u16, id: &str) -> String {
    json(api, &["job", "get", id])["status"]["state"].as_str().unwrap_or_default().to_string()
}

fn tasks(api: u16, id: &str) -> Vec<serde_json::Value> {
    json(api, &["task", "list", id]).as_array().cloned().unwrap_or_default()
}

/// Live processes (not zombies) whose command line contains every one of
/// `needles`.
fn processes_with(needles: &[&str]) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !needles.iter().all(|n| cmdline.contains(n)) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()).unwrap_or("X");
        if state != "Z" && state != "X" {
            out.push(pid);
        }
    }
    out
}

/// A job file in `dir`: `instances` of `command` (through `sh -c`) in /default.
fn shell_job_file(dir: &Path, name: &str, instances: u32, command: &str, cpu_millis: u64) -> String {
    let path = dir.join(format!("{name}.yaml"));
    let body = format!(
        "name: {name}\npool: /default\ninstance_count: {instances}\ndefault_task:\n  command: sh\n  args: [\"-c\", {command:?}]\n  resources: {{cpu_millis: {cpu_millis}, memory_mib: 16}}\n"
    );
    std::fs::write(&path, body).expect("job file");
    path.to_str().expect("utf-8").to_string()
}

/// `paceline auth token` for one principal: (the token, its tokens-file entry).
fn new_token(args: &[&str]) -> (String, String) {
    let mut all = vec!["auth", "token"];
    all.extend(args);
    let out = ok(Command::new(BIN).args(&all).output().expect("runs"));
    let token = out.lines().find_map(|l| l.strip_prefix("token: ")).expect("a token line").to_string();
    let entry: String = out.lines().filter(|l| l.starts_with("  ")).map(|l| format!("{l}\n")).collect();
    (token, entry)
}

fn cli_as(api: u16, token: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("PACELINE_SERVER", format!("http://127.0.0.1:{api}"))
        .env("PACELINE_TOKEN", token)
        .output()
        .expect("cli runs")
}

fn refused(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must be refused: {}", String::from_utf8_lossy(&out.stdout));
    assert!(err.contains(needle), "the error says `{needle}`: {err}");
}
