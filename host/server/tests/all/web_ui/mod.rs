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

use paceline_proto::v1 as pb;
use pb::host_service_client::HostServiceClient;
use pb::job_service_client::JobServiceClient;
use pb::plugin_service_client::PluginServiceClient;
use pb::pool_service_client::PoolServiceClient;
use pb::task_service_client::TaskServiceClient;

pub use crate::dev_server::{Dev, eventually};

#[path = "../../web/browser.rs"]
mod browser;
pub use browser::*;

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
