//! The web UI in a real browser: the server in this process on simulated
//! hosts as `paceline dev --sim-hosts N` configures it
//! ([`crate::dev_server`]), Debian's Chromium (installed by
//! `deploy/browser/chromium.sh`) driven through the DevTools protocol by
//! `tests/web/cdp.py`; what the page does is checked against the gRPC API.
//!
//! Run with `cargo test --workspace --test all -- web_ui::`. The tests that
//! need the `paceline` binary itself (local agents, the server's log, `sim
//! compare`'s reports, the CLI's task text) stay in `host/paceline/tests/web_ui`.
//! This file holds the helpers every test uses, each module a part of the UI.

mod cross_origin;
mod jobs;
mod overview;
mod tokens;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use paceline_proto::v1 as pb;
use pb::host_service_client::HostServiceClient;
use pb::job_service_client::JobServiceClient;
use pb::plugin_service_client::PluginServiceClient;
use pb::pool_service_client::PoolServiceClient;
use pb::task_service_client::TaskServiceClient;

pub use crate::dev_server::{Dev, eventually};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The browser binary; installs Debian's chromium when missing (fails the
/// test with the script's reason when it cannot).
fn chromium() -> String {
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
fn shot(name: &str) -> String {
    format!("{}/web-ui-screenshots/{name}.png", env!("CARGO_TARGET_TMPDIR"))
}

/// axe-core, vendored from npm (tests/web/vendor): injected into the page by the driver.
fn axe() -> String {
    format!("{}/tests/web/vendor/axe-core-4.10.2/axe.min.js", env!("CARGO_MANIFEST_DIR"))
}

/// Runs browser steps (see tests/web/cdp.py); the evaluated values and the dialogs seen.
fn browse(steps: serde_json::Value) -> (Vec<serde_json::Value>, Vec<String>) {
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/web/cdp.py"))
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

/// A long batch job of `n` one-core instances in `pool`, as a job file's YAML.
fn job_file(name: &str, pool: &str, n: u32) -> String {
    format!(
        "name: {name}\npool: {pool}\nkind: batch\ninstance_count: {n}\ndefault_task:\n  command: work\n  env: {{SIM_DURATION_MS: \"600000\"}}\n  resources: {{cpu_millis: 1000, memory_mib: 64, disk_mib: 10, gpu_milli: 0, ports: 0}}\n"
    )
}

/// A job file's YAML on the wire (as `job create` sends it).
fn spec(yaml: &str) -> pb::JobSpec {
    let config: paceline_model::job::JobConfig = serde_yaml::from_str(yaml).expect("a job file");
    paceline_proto::convert::job_spec_pb(&config)
}

/// `job create` of the job file `yaml` as `token`'s principal; the new job's id.
fn create(dev: &Dev, token: Option<&str>, yaml: &str) -> String {
    let (client, spec) = (dev.client(token), spec(yaml));
    dev.block_on(
        async move { JobServiceClient::new(client).create_job(pb::CreateJobRequest { spec: Some(spec) }).await },
    )
    .expect("job created")
    .into_inner()
    .id
}

/// Creates the job of [`job_file`] as the admin and waits until its `n`
/// tasks run; its id.
fn create_running(dev: &Dev, name: &str, pool: &str, n: u32) -> String {
    let id = create(dev, None, &job_file(name, pool, n));
    eventually(60, &format!("{n} running"), || {
        let tasks = tasks(dev, &id);
        tasks.len() == n as usize && tasks.iter().all(|t| t.state == pb::TaskState::Running as i32)
    });
    id
}

/// `job get <id> [--config-version V]` as `token`'s principal.
fn get_job(dev: &Dev, token: Option<&str>, id: &str, version: Option<u64>) -> Result<pb::Job, tonic::Status> {
    let client = dev.client(token);
    let request = pb::GetJobRequest { id: id.into(), config_version: version };
    dev.block_on(async move { JobServiceClient::new(client).get_job(request).await })
        .map(|r| r.into_inner().job.expect("a job"))
}

/// `job get <id>`, as the admin.
fn job(dev: &Dev, id: &str) -> pb::Job {
    get_job(dev, None, id, None).expect("job get")
}

/// A job's state's name (`JOB_STATE_KILLED`).
fn job_state(job: &pb::Job) -> String {
    let state = job.status.as_ref().map_or(0, |s| s.state);
    pb::JobState::try_from(state).map_or_else(|_| state.to_string(), |s| s.as_str_name().to_string())
}

/// The names of every job (`job list`).
fn job_names(dev: &Dev) -> Vec<String> {
    let client = dev.client(None);
    let request = pb::QueryJobsRequest { limit: 1000, ..pb::QueryJobsRequest::default() };
    dev.block_on(async move { JobServiceClient::new(client).query_jobs(request).await })
        .expect("job list")
        .into_inner()
        .jobs
        .into_iter()
        .filter_map(|j| j.spec.map(|s| s.name))
        .collect()
}

/// `task list <id>`.
fn tasks(dev: &Dev, id: &str) -> Vec<pb::Task> {
    let client = dev.client(None);
    let request = pb::ListTasksRequest { job_id: id.into(), limit: 1000, ..pb::ListTasksRequest::default() };
    dev.block_on(async move { TaskServiceClient::new(client).list_tasks(request).await })
        .expect("task list")
        .into_inner()
        .tasks
}

/// `host list` as `token`'s principal.
fn hosts(dev: &Dev, token: Option<&str>) -> Vec<pb::Host> {
    let client = dev.client(token);
    dev.block_on(async move { HostServiceClient::new(client).list_hosts(pb::ListHostsRequest {}).await })
        .expect("host list")
        .into_inner()
        .hosts
}

/// `pool create <path>` with a reservation of `cpu` millicores, `memory`
/// MiB and `disk` MiB, as `token`'s principal.
fn create_pool(dev: &Dev, token: Option<&str>, path: &str, (cpu, memory, disk): (u64, u64, u64)) {
    let reservation = paceline_model::pool::PerKind { cpu, memory, disk, gpu: 0 };
    let spec = paceline_model::pool::PoolSpec { reservation, ..paceline_model::pool::PoolSpec::default() };
    let request = pb::CreatePoolRequest { path: path.into(), spec: Some(paceline_api::pools::pool_spec_pb(&spec)) };
    let client = dev.client(token);
    dev.block_on(async move { PoolServiceClient::new(client).create_pool(request).await }).expect("pool created");
}

/// `pool list`: the pools and the cluster's capacity.
fn pools(dev: &Dev) -> pb::ListPoolsResponse {
    let client = dev.client(None);
    dev.block_on(async move { PoolServiceClient::new(client).list_pools(pb::ListPoolsRequest {}).await })
        .expect("pool list")
        .into_inner()
}

/// `plugin deploy <slot> <name> <version> <file>`.
fn deploy(dev: &Dev, slot: &str, name: &str, version: &str, file: &str) {
    use pb::deploy_plugin_request::{Meta, Part};
    let bytes = std::fs::read(file).expect("the component");
    let meta = Meta {
        slot: slot.into(),
        name: name.into(),
        version: version.into(),
        size: bytes.len() as u64,
        ..Meta::default()
    };
    let parts = vec![
        pb::DeployPluginRequest { part: Some(Part::Meta(meta)) },
        pb::DeployPluginRequest { part: Some(Part::Chunk(bytes)) },
    ];
    let client = dev.client(None);
    dev.block_on(async move {
        PluginServiceClient::new(client).deploy_plugin(tonic::codegen::tokio_stream::iter(parts)).await
    })
    .expect("deployed");
}

/// `plugin activate <slot> <id>`.
fn activate(dev: &Dev, slot: &str, id: &str) {
    let client = dev.client(None);
    let request = pb::PluginRef { slot: slot.into(), id: id.into() };
    dev.block_on(async move { PluginServiceClient::new(client).activate_plugin(request).await }).expect("activated");
}

/// `plugin list`'s entry of `slot`.
fn plugin_slot(dev: &Dev, slot: &str) -> pb::PluginSlot {
    let client = dev.client(None);
    dev.block_on(async move { PluginServiceClient::new(client).list_plugins(pb::ListPluginsRequest::default()).await })
        .expect("plugin list")
        .into_inner()
        .slots
        .into_iter()
        .find(|s| s.slot == slot)
        .expect("the slot is listed")
}

/// A raw HTTP/1.1 request as the page sends it (with its `X-Paceline-Request`
/// header), answering the status code and the whole answer.
fn http(api: u16, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
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
fn raw(api: u16, head: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", api)).expect("connect");
    write!(s, "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, text)
}

/// Waits (in a thread) for the driver to save the screenshot `name`, then runs `then`.
fn when_shot(name: &str, then: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
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
