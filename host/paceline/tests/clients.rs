//! The Python, Go, Java and Node.js clients (`clients/`) against a real
//! `paceline dev`: each builds from the protos (`clients/build.sh`), submits a batch job,
//! waits for it, and the Rust CLI sees the job they made; with a tokens file,
//! each is refused without the right token and served with it; over TLS,
//! each trusts the authority it is given and no other.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

use common::{BIN, Dev, free_port, test_certificates, tokens_file};

/// Every client `clients/build.sh all` builds; each test runs all of them.
const LANGUAGES: [&str; 4] = ["python", "go", "java", "node"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds every client once per test binary; a failure fails the tests.
fn build_clients() {
    static BUILT: Once = Once::new();
    BUILT.call_once(|| {
        let out = Command::new("bash")
            .arg(repo().join("clients/build.sh"))
            .arg("all")
            .output()
            .expect("runs clients/build.sh");
        assert!(
            out.status.success(),
            "clients/build.sh all failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// Runs one language's `submit` example against `server`, with only the
/// token and CA certificate given (none inherited from the environment).
fn submit(lang: &str, name: &str, server: &str, token: Option<&str>, ca: Option<&str>) -> Output {
    let clients = repo().join("clients");
    let mut c = match lang {
        "python" => {
            let mut c = Command::new(clients.join("python/.venv/bin/python"));
            c.arg(clients.join("python/submit.py")).args([
                "--instances",
                "2",
                "--env",
                "SIM_DURATION_MS=300",
                name,
                "--",
                "work",
            ]);
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
        "node" => {
            let mut c = Command::new("node");
            c.arg(clients.join("node/submit.mjs")).args([
                "--instances",
                "2",
                "--env",
                "SIM_DURATION_MS=300",
                name,
                "--",
                "work",
            ]);
            c
        }
        other => panic!("no client for {other}"),
    };
    c.env("PACELINE_SERVER", server).env_remove("PACELINE_TOKEN").env_remove("PACELINE_CA_CERT");
    if let Some(t) = token {
        c.env("PACELINE_TOKEN", t);
    }
    if let Some(ca) = ca {
        c.env("PACELINE_CA_CERT", ca);
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
    let server = format!("http://127.0.0.1:{api}");
    let _dev = Dev::start(dir.path(), api, 4, &[]);
    for lang in LANGUAGES {
        let name = format!("{lang}-hello");
        let out = submit(lang, &name, &server, None, None);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{lang}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("state SUCCEEDED SUCCEEDED=2"), "{lang}: {stdout}");
        let id = job_of(&out);
        // The Rust CLI sees the same job, with the name the client gave it.
        let got = Command::new(BIN)
            .args(["job", "get", &id, "-o", "json"])
            .env("PACELINE_SERVER", &server)
            .output()
            .expect("cli");
        let job: serde_json::Value = serde_json::from_slice(&got.stdout).expect("json");
        assert_eq!(job["spec"]["name"], name.as_str(), "{lang}: {job}");
        // No client sends an owner: the job is its creator's, on an open API
        // the built-in `anonymous`.
        assert_eq!(job["spec"]["owner"], "anonymous", "{lang}: {job}");
        assert_eq!(job["status"]["state"], "SUCCEEDED", "{lang}: {job}");
    }
}

#[test]
fn each_client_sends_its_token_and_a_wrong_one_is_refused() {
    build_clients();
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.yaml");
    let token = tokens_file(&tokens, &["--name", "ci", "--role", "user", "--pool", "/default"]);
    let api = free_port();
    let server = format!("http://127.0.0.1:{api}");
    let _dev = Dev::start(dir.path(), api, 4, &["--tokens-file", tokens.to_str().expect("utf-8")]);
    for lang in LANGUAGES {
        for wrong in [None, Some("wrong-token")] {
            let refused = submit(lang, &format!("{lang}-denied"), &server, wrong, None);
            assert!(!refused.status.success(), "{lang} with token {wrong:?} must be refused");
            assert_eq!(job_of(&refused), "", "{lang}: no job is made");
            let err = String::from_utf8_lossy(&refused.stderr).to_ascii_uppercase();
            assert!(err.contains("UNAUTHENTICATED"), "{lang} with token {wrong:?}: {err}");
        }
        let served = submit(lang, &format!("{lang}-allowed"), &server, Some(&token), None);
        let stdout = String::from_utf8_lossy(&served.stdout);
        assert!(served.status.success(), "{lang}: {stdout}\n{}", String::from_utf8_lossy(&served.stderr));
        assert!(stdout.contains("state SUCCEEDED"), "{lang}: {stdout}");
    }
}

#[test]
fn each_client_over_tls_trusts_the_authority_it_is_given_and_no_other() {
    build_clients();
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = test_certificates(&dir.path().join("tls"));
    let (other_ca, _, _) = test_certificates(&dir.path().join("other"));
    // Tokens too: over TLS they travel as call credentials, not as plain metadata.
    let tokens = dir.path().join("tokens.yaml");
    let token = tokens_file(&tokens, &["--name", "ci", "--role", "user", "--pool", "/default"]);
    let api = free_port();
    let config = dir.path().join("server.yaml");
    std::fs::write(
        &config,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:0\nhosts: {{provider: sim, hosts: 4, resources: {{cpu_millis: 4000, memory_mib: 8192, disk_mib: 10000, gpus: 0}}, zones: 1}}\ntls: {{cert_file: {cert}, key_file: {key}}}\ntokens_file: {}\n",
            dir.path().join("data").display(),
            tokens.display()
        ),
    )
    .expect("write");
    let _server = Dev::spawn(&["server", "--config", config.to_str().expect("utf-8")], "API on https://");
    let https = format!("https://localhost:{api}");
    for lang in LANGUAGES {
        let served = submit(lang, &format!("{lang}-tls"), &https, Some(&token), Some(&ca));
        let stdout = String::from_utf8_lossy(&served.stdout);
        assert!(served.status.success(), "{lang}: {stdout}\n{}", String::from_utf8_lossy(&served.stderr));
        assert!(stdout.contains("state SUCCEEDED"), "{lang}: {stdout}");
        // Another authority's certificate: the handshake fails and nothing is made.
        let untrusted = submit(lang, &format!("{lang}-untrusted"), &https, Some(&token), Some(&other_ca));
        assert!(!untrusted.status.success(), "{lang} must not trust a certificate its authority did not sign");
        assert_eq!(job_of(&untrusted), "", "{lang}: no job is made");
        // No authority at all: refused before connecting, naming what is missing.
        let missing = submit(lang, &format!("{lang}-no-ca"), &https, Some(&token), None);
        assert!(!missing.status.success(), "{lang} must refuse https without a CA certificate");
        let err = String::from_utf8_lossy(&missing.stderr);
        assert!(err.contains("PACELINE_CA_CERT"), "{lang}: {err}");
    }
}
