//! Issue 44: pages of another origin, DNS rebinding and plain HTTP cannot change anything.

use super::*;

/// A job file whose task would run `id` on the host (issue 44's drive-by).
fn drive_by_job(name: &str) -> String {
    format!(
        "name: {name}\npool: /default\nkind: batch\ninstance_count: 1\ndefault_task:\n  command: id\n  resources: {{cpu_millis: 10, memory_mib: 8, disk_mib: 1, gpu_milli: 0, ports: 0}}\n"
    )
}

/// A gRPC message frame of `CreateJobRequest` for the job file `yaml`.
fn grpc_frame(yaml: &str) -> Vec<u8> {
    use prost::Message;
    let mut config: paceline_model::job::JobConfig = serde_yaml::from_str(yaml).expect("job file");
    config.owner = "web".into();
    let request = paceline_proto::v1::CreateJobRequest { spec: Some(paceline_proto::convert::job_spec_pb(&config)) };
    let message = request.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend((message.len() as u32).to_be_bytes());
    frame.extend(message);
    frame
}

/// Serves `page` (HTML) to every request on a loopback port of its own
/// (another origin than the API's); the port. The thread lives as long as
/// the test process.
fn serve_page(page: String) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            // The request's head; its body (none for a GET) is not needed.
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    port
}

/// Issue 44: in the open mode (`paceline dev`, no tokens file) any page a
/// developer opens could post a job to the API from their browser, with a
/// no-cors fetch or a form (`text/plain`, so no CORS preflight), and the
/// job ran `id` on the host. Neither creates a job now; the server's own
/// page still does.
#[test]
fn a_page_of_another_origin_cannot_create_jobs_in_the_open_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let api = free_port();
    let _dev = Dev::start(dir, api, 1, &[]);
    let target = format!("http://127.0.0.1:{api}/ui/api/jobs");
    let page = format!(
        r##"<!doctype html><html><body><iframe name="sink"></iframe>
<form id="f" method="POST" action="{target}" enctype="text/plain" target="sink"><input type="hidden" name="x" value=""></form>
<script>
const fetched = {fetch_job};
fetch({target:?}, {{method: "POST", mode: "no-cors", body: fetched}})
  .then(() => {{ document.body.dataset.fetch = "sent"; }}, (e) => {{ document.body.dataset.fetch = "failed: " + e; }});
// The gRPC method itself, over HTTP/1.1 with a text/plain body (a framed CreateJobRequest).
fetch({grpc:?}, {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body: new Uint8Array({grpc_body})}})
  .then(() => {{ document.body.dataset.grpc = "sent"; }}, (e) => {{ document.body.dataset.grpc = "failed: " + e; }});
// A text/plain form sends `name=value`: the job file is the name, `#=` a YAML comment.
document.querySelector("#f input").name = {form_job} + "#";
document.getElementById("f").submit();
document.body.dataset.form = "sent";
</script></body></html>"##,
        fetch_job = serde_json::json!(drive_by_job("drive-by-fetch")),
        grpc = format!("http://127.0.0.1:{api}/paceline.v1.JobService/CreateJob"),
        grpc_body = serde_json::json!(grpc_frame(&drive_by_job("drive-by-grpc"))),
        form_job = serde_json::json!(drive_by_job("drive-by-form")),
    );
    let attacker = serve_page(page);
    let (values, _) = browse(serde_json::json!([
        {"goto": format!("http://127.0.0.1:{attacker}/")},
        {"wait": "document.body && document.body.dataset.fetch && document.body.dataset.form && document.body.dataset.grpc"},
        {"eval": "document.body.dataset.fetch"},
        {"eval": "document.body.dataset.grpc"},
        // Time for the form's post to arrive and be handled.
        {"wait": "new Promise((r) => setTimeout(() => r(true), 3000))", "timeout": 20},
    ]));
    assert_eq!(values[0], "sent", "the browser sent the no-cors post (its answer is opaque to the page)");
    assert_eq!(values[1], "sent", "and the one to the gRPC path");
    let jobs = ok(cli(api, None, &["job", "list", "-o", "json"]));
    assert!(!jobs.contains("drive-by"), "a page of another origin created a job: {jobs}");

    // The server's own page still submits jobs (with its X-Paceline-Request header).
    let own = drive_by_job("own-page");
    let (values, _) = browse(serde_json::json!([
        {"goto": format!("http://127.0.0.1:{api}/ui/")},
        {"wait": "document.querySelector('#nav')"},
        {"eval": format!("import('/ui/api.js').then((m) => m.postText('jobs', {})).then((r) => r.id)", serde_json::json!(own))},
    ]));
    let id = values[0].as_str().expect("the page's post answers the new job's id");
    assert_eq!(json(api, None, &["job", "get", id])["spec"]["name"], "own-page");
    let jobs = ok(cli(api, None, &["job", "list", "-o", "json"]));
    assert!(!jobs.contains("drive-by"), "{jobs}");
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
