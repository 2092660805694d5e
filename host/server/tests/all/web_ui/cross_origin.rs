//! Issue 44: pages of another origin cannot change anything. (Plain HTTP
//! requests and DNS rebinding, whose test reads the server's log, are in
//! host/paceline/tests/web_ui/cross_origin.rs.)

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
    let dev = Dev::start(dir.path(), 1, None);
    let api = dev.api;
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
    let jobs = job_names(&dev);
    assert!(!jobs.iter().any(|j| j.contains("drive-by")), "a page of another origin created a job: {jobs:?}");

    // The server's own page still submits jobs (with its X-Paceline-Request header).
    let own = drive_by_job("own-page");
    let (values, _) = browse(serde_json::json!([
        {"goto": format!("http://127.0.0.1:{api}/ui/")},
        {"wait": "document.querySelector('#nav')"},
        {"eval": format!("import('/ui/api.js').then((m) => m.postText('jobs', {})).then((r) => r.id)", serde_json::json!(own))},
    ]));
    let id = values[0].as_str().expect("the page's post answers the new job's id");
    assert_eq!(job(&dev, id).spec.map(|s| s.name).as_deref(), Some("own-page"));
    let jobs = job_names(&dev);
    assert!(!jobs.iter().any(|j| j.contains("drive-by")), "{jobs:?}");
}
