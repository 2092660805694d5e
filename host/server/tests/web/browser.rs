//! The browser helpers both web UI suites use: `host/server/tests/all/web_ui`
//! (the server in the test's process) and `host/paceline/tests/web_ui` (the
//! tests that need the `paceline` binary). Each includes this file with
//! `#[path]`; neither uses every helper, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The checkout: every crate sits at `host/<crate>`.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The browser driver and axe-core, beside this file.
pub fn web_dir() -> PathBuf {
    repo().join("host/server/tests/web")
}

/// The browser binary; installs Debian's chromium when missing (fails the
/// test with the script's reason when it cannot).
pub fn chromium() -> String {
    let out = Command::new("bash")
        .arg(repo().join("deploy/browser/chromium.sh"))
        .arg("path")
        .output()
        .expect("runs chromium.sh");
    assert!(
        out.status.success(),
        "a real browser is needed for the web UI tests; deploy/browser/chromium.sh could not provide one:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Where the test run saves its screenshots (under target/, never committed).
pub fn shot(name: &str) -> String {
    format!("{}/web-ui-screenshots/{name}.png", env!("CARGO_TARGET_TMPDIR"))
}

/// axe-core, vendored from npm (host/server/tests/web/vendor): injected into the page by the driver.
pub fn axe() -> String {
    web_dir().join("vendor/axe-core-4.10.2/axe.min.js").to_str().expect("utf-8").to_string()
}

/// Runs browser steps (see cdp.py beside this file); the evaluated values and the dialogs seen.
pub fn browse(steps: serde_json::Value) -> (Vec<serde_json::Value>, Vec<String>) {
    let out = Command::new("python3")
        .arg(web_dir().join("cdp.py"))
        .arg(chromium())
        .arg(steps.to_string())
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "browser steps failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("driver output");
    let dialogs =
        v["dialogs"].as_array().into_iter().flatten().filter_map(|d| d.as_str().map(str::to_string)).collect();
    (v["values"].as_array().cloned().unwrap_or_default(), dialogs)
}

/// A raw HTTP/1.1 request as the page sends it (with its `X-Paceline-Request`
/// header), answering the status code and the whole answer.
pub fn http(api: u16, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    raw(
        api,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}X-Paceline-Request: ui\r\nContent-Type: application/json"
        ),
        body,
    )
}

/// A raw HTTP/1.1 request: `head` is the request line and headers (without
/// the length and the closing blank line); the status code and the whole answer.
pub fn raw(api: u16, head: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", api)).expect("connect");
    write!(s, "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

/// Waits (in a thread) for the driver to save the screenshot `name`, then runs `then`.
pub fn when_shot(name: &str, then: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
    let path = PathBuf::from(shot(name));
    let _ = std::fs::remove_file(&path);
    std::thread::spawn(move || {
        for _ in 0..1200 {
            if path.exists() {
                then();
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    })
}
