//! The Python, Go and Java clients (`clients/`) against a real `paceline dev`:
//! each builds from the protos (`clients/build.sh`), submits a batch job,
//! waits for it, and the Rust CLI sees the job they made; with a tokens file,
//! each is refused without the right token and served with it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

use common::{BIN, Dev, free_port, tokens_file};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds every client once per test binary; a failure fails the tests.
fn build_clients() {
    static BUILT: Once = Once::new();
    BUILT.call_once(|| {
        let out = Command::new("bash").arg(repo().join("clients/build.sh")).arg("all").output().expect("runs clients/build.sh");
        assert!(out.status.success(), "clients/build.sh all failed:\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    });
}

/// The command that runs one language's `submit` example.
fn submit(lang: &str, name: &str, token: Option<&str>, api: u16) -> Output {
    let clients = repo().join("clients");
    let mut c = match lang {
        "python" => {
            let mut c = Command::new(clients.join("python/.venv/bin/python"));
            c.arg(clients.join("python/submit.py")).args(["--instances", "2", "--env", "SIM_DURATION_MS=300", name, "--", "work"]);
            c
        }
        "go" => {
            let mut c = Command::new(clients.join("go/.bin/submit"));
            c.args(["-instances", "2", "-env", "SIM_DURATION_MS=300", name, "--", "work"]);
            c
        }
        "java" => {
            let mut c = Command::new(clients.join("java/submit"));
            c.args(["--instances", "2", "--env", "SIM_DURATION_MS=300", name, "--", "work"]);
            c
        }
        other => panic!("no client for {other}"),
    };
    c.env("PACELINE_SERVER", format!("http://127.0.0.1:{api}")).env_remove("PACELINE_TOKEN").env_remove("PACELINE_CA_CERT");
    if let Some(t) = token {
        c.env("PACELINE_TOKEN", t);
    }
    c.output().expect("the client runs")
}

fn job_of(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().find_map(|l| l.strip_prefix("job ")).unwrap_or_default().trim().to_string()
}

#[test]
fn each_client_submits_a_job_that_runs_to_success() {
    build_clients();
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let _dev = Dev::start(dir.path(), api, 2, &[]);
    for lang in ["python", "go", "java"] {
        let name = format!("{lang}-hello");
        let out = submit(lang, &name, None, api);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{lang}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("state SUCCEEDED SUCCEEDED=2"), "{lang}: {stdout}");
        let id = job_of(&out);
        // The Rust CLI sees the same job, with the name the client gave it.
        let got = Command::new(BIN).args(["job", "get", &id, "-o", "json"]).env("PACELINE_SERVER", format!("http://127.0.0.1:{api}")).output().expect("cli");
        let job: serde_json::Value = serde_json::from_slice(&got.stdout).expect("json");
        assert_eq!(job["spec"]["name"], name.as_str(), "{lang}: {job}");
        assert_eq!(job["spec"]["owner"], format!("{lang}-client").as_str(), "{lang}: {job}");
    }
}

#[test]
fn each_client_sends_its_token_and_a_wrong_one_is_refused() {
    build_clients();
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.yaml");
    let token = tokens_file(&tokens, &["--name", "ci", "--role", "user", "--pool", "/default"]);
    let api = free_port();
    let _dev = Dev::start(dir.path(), api, 2, &["--tokens-file", tokens.to_str().expect("utf-8")]);
    for lang in ["python", "go", "java"] {
        let refused = submit(lang, &format!("{lang}-denied"), Some("wrong-token"), api);
        assert!(!refused.status.success(), "{lang} must be refused");
        let err = String::from_utf8_lossy(&refused.stderr).to_ascii_uppercase();
        assert!(err.contains("UNAUTHENTICATED"), "{lang}: {err}");
        let served = submit(lang, &format!("{lang}-allowed"), Some(&token), api);
        assert!(served.status.success(), "{lang}: {}\n{}", String::from_utf8_lossy(&served.stdout), String::from_utf8_lossy(&served.stderr));
    }
}
