//! Issue 44 over plain HTTP: DNS rebinding and changes without the UI's
//! header are refused. This test stays with the binary: it reads the
//! server's log (`paceline dev`'s stderr) for what is and is not logged.
//! (A page of another origin: host/server/tests/all/web_ui/cross_origin.rs.)

use super::*;

/// A job file whose task would run `id` on the host (issue 44's drive-by).
fn drive_by_job(name: &str) -> String {
    format!(
        "name: {name}\npool: /default\nkind: batch\ninstance_count: 1\ndefault_task:\n  command: id\n  resources: {{cpu_millis: 10, memory_mib: 8, disk_mib: 1, gpu_milli: 0, ports: 0}}\n"
    )
}

/// `paceline <args>` with its log (stderr) in `log`; killed when dropped.
struct Logged(std::process::Child);

impl Logged {
    fn spawn(args: &[&str], log: &Path) -> Logged {
        use std::io::BufRead;
        let mut child = Command::new(BIN)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(log).expect("log file"))
            .spawn()
            .expect("starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("API on") {
                    let _ = tx.send(());
                }
            }
        });
        let process = Logged(child);
        rx.recv_timeout(std::time::Duration::from_secs(60)).expect("paceline dev came up");
        process
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// Issue 44 over plain HTTP: a request must name the server by an IP
/// address, localhost, its hostname or a name from `--api-allowed-host`
/// (DNS rebinding); a change needs `X-Paceline-Request` and may not come
/// from another origin; `/ui` answers may not be framed; `/favicon.ico` is
/// answered without a refusal in the log (issue 43).
#[test]
fn plain_http_requests_must_name_the_server_and_changes_need_the_ui_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let log = dir.join("dev.log");
    let data = dir.join("dev");
    let _dev = Logged::spawn(
        &[
            "dev",
            "--sim-hosts",
            "1",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--api-listen",
            &format!("127.0.0.1:{api}"),
            "--api-allowed-host",
            "paceline.test",
        ],
        &log,
    );
    let get = |host: &str, path: &str| raw(api, &format!("GET {path} HTTP/1.1\r\nHost: {host}"), "");
    for path in ["/ui/", "/ui/api/jobs", "/metrics", "/"] {
        let (code, text) = get("attacker.example", path);
        assert!(code == 403 && text.contains("api_allowed_hosts"), "{path}: {text}");
    }
    let (code, text) = raw(
        api,
        "POST /ui/api/jobs HTTP/1.1\r\nHost: attacker.example:80\r\nX-Paceline-Request: ui\r\nContent-Type: text/plain",
        &drive_by_job("rebound"),
    );
    assert!(code == 403 && text.contains("api_allowed_hosts"), "{text}");
    for host in
        [format!("127.0.0.1:{api}"), "localhost".into(), format!("localhost:{api}"), format!("paceline.test:{api}")]
    {
        let (code, text) = get(&host, "/ui/api/jobs");
        assert_eq!(code, 200, "{host}: {text}");
    }
    // The page and every other /ui answer refuse to be framed and sniffed.
    let (code, text) = get(&format!("127.0.0.1:{api}"), "/ui/");
    let lower = text.to_ascii_lowercase();
    assert_eq!(code, 200, "{text}");
    for header in
        ["content-security-policy: frame-ancestors 'none'", "x-frame-options: deny", "x-content-type-options: nosniff"]
    {
        assert!(lower.contains(header), "{header} in {text}");
    }
    assert!(get(&format!("127.0.0.1:{api}"), "/ui/api/jobs").1.to_ascii_lowercase().contains("x-frame-options: deny"));

    // A change without the UI's header, or from another origin, is refused.
    let post = |headers: &str, name: &str| {
        raw(
            api,
            &format!("POST /ui/api/jobs HTTP/1.1\r\nHost: 127.0.0.1:{api}\r\nContent-Type: text/plain{headers}"),
            &drive_by_job(name),
        )
    };
    let (code, text) = post("", "no-header");
    assert!(code == 403 && text.contains("X-Paceline-Request: ui"), "{text}");
    let (code, text) = post("\r\nX-Paceline-Request: ui\r\nOrigin: http://evil.example", "evil-origin");
    assert!(code == 403 && text.contains("http://evil.example"), "{text}");
    let (code, text) = post("\r\nX-Paceline-Request: ui\r\nSec-Fetch-Site: cross-site", "cross-site");
    assert!(code == 403 && text.contains("Sec-Fetch-Site"), "{text}");
    let (code, text) = post(&format!("\r\nX-Paceline-Request: ui\r\nOrigin: http://127.0.0.1:{api}"), "scripted");
    assert_eq!(code, 200, "{text}");
    let jobs = ok(cli(api, None, &["job", "list", "-o", "json"]));
    assert!(jobs.contains("scripted"), "{jobs}");
    for refused in ["rebound", "no-header", "evil-origin", "cross-site"] {
        assert!(!jobs.contains(refused), "{refused}: {jobs}");
    }

    // Browsers ask for /favicon.ico on every page load: no content, no refusal logged.
    let (code, text) = get(&format!("127.0.0.1:{api}"), "/favicon.ico");
    assert_eq!(code, 204, "{text}");
    // Something else is refused after it, so the log has caught up when that line is there.
    assert_eq!(get("attacker.example", "/ui/").0, 403);
    eventually(10, "the refusal logged", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("attacker.example"))
    });
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(!text.contains("favicon"), "a refusal of /favicon.ico was logged:\n{text}");
}
