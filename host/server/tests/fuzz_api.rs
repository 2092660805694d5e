//! Fuzz targets `api` and `jobspec` (scripts/fuzz): every request message
//! of the public gRPC API, and job spec YAML as the CLI reads it, sent to a
//! real server (every role over the `sim` provider, SQLite, the real tonic
//! service with its decoding, conversion and validation).
//!
//! `api`: bytes, seeds of each request mutated or arbitrary, decoded as the
//! request type of one RPC (as the server decodes them) and sent.
//! `jobspec`: a job YAML mutated or arbitrary, parsed and checked as
//! `paceline job create` does (`serde_yaml` into `JobConfig`, `validate`),
//! and when that passes converted to the protobuf `JobSpec` and sent.
//!
//! Property: nothing panics, every answer is OK or a status other than
//! UNKNOWN and INTERNAL (those mean a handler failed, not that the request
//! was bad), and the server still answers afterwards. Files in
//! `fuzz/corpus/api` (first byte: the RPC's index in `RPCS`, then the
//! request) and `fuzz/corpus/jobspec` are replayed first.

#[path = "all/support.rs"]
mod support;

use std::path::PathBuf;
use std::sync::LazyLock;

use paceline_api::ApiConfig;
use paceline_model::job::JobConfig;
use paceline_proto::v1 as pb;
use pb::host_service_client::HostServiceClient;
use pb::job_service_client::JobServiceClient;
use pb::plugin_service_client::PluginServiceClient;
use pb::pool_service_client::PoolServiceClient;
use pb::secret_service_client::SecretServiceClient;
use pb::task_service_client::TaskServiceClient;
use pb::watch_service_client::WatchServiceClient;
use proptest::prelude::*;
use prost::Message;
use support::*;
use tonic::Code;
use tonic::transport::Channel;

struct Server {
    rt: tokio::runtime::Runtime,
    channel: Channel,
    /// A job that exists, so seeds that name one reach past the lookup.
    job_id: String,
    _sc: SimCluster,
    _dir: tempfile::TempDir,
}

static SERVER: LazyLock<Server> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let (sc, channel, job_id) = rt.block_on(async {
        let sc = SimCluster::start(dir.path(), shapes(2)).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(paceline_api::serve(sc.cluster.roles(), listener, ApiConfig::default(), std::future::pending()));
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let spec = paceline_proto::convert::job_spec_pb(&hello());
        let created = JobServiceClient::new(channel.clone())
            .create_job(pb::CreateJobRequest { spec: Some(spec) })
            .await
            .expect("seed job");
        (sc, channel, created.into_inner().id)
    });
    Server { rt, channel, job_id, _sc: sc, _dir: dir }
});

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn hello_yaml() -> Vec<u8> {
    std::fs::read(repo().join("examples/hello.yaml")).expect("examples/hello.yaml")
}

/// examples/hello.yaml in the test pool.
fn hello() -> JobConfig {
    let mut config: JobConfig = serde_yaml::from_slice(&hello_yaml()).expect("hello.yaml");
    config.pool = POOL.into();
    config.owner = "fuzz".into();
    config
}

/// What one RPC call came to: decoded and answered, or not decodable.
enum Sent {
    NotDecoded,
    Answered(Result<(), tonic::Status>),
}

macro_rules! rpc_table {
    ($( $name:literal => |$ch:ident, $req:ident : $ty:ty| $call:expr ),* $(,)?) => {
        /// The RPCs, by name; the index is the first byte of an `api` input.
        const RPCS: &[&str] = &[$($name),*];

        async fn send(index: usize, bytes: &[u8], channel: Channel) -> Sent {
            let mut i = 0;
            $(
                if index == i {
                    let Ok($req) = <$ty>::decode(bytes) else { return Sent::NotDecoded };
                    let $ch = channel;
                    return Sent::Answered($call.await.map(|_| ()));
                }
                i += 1;
            )*
            let _ = i;
            Sent::NotDecoded
        }
    };
}

rpc_table! {
    "ListHosts" => |ch, r: pb::ListHostsRequest| HostServiceClient::new(ch).list_hosts(r),
    "GetHost" => |ch, r: pb::GetHostRequest| HostServiceClient::new(ch).get_host(r),
    "DrainHost" => |ch, r: pb::DrainHostRequest| HostServiceClient::new(ch).drain_host(r),
    "DownHost" => |ch, r: pb::HostRef| HostServiceClient::new(ch).down_host(r),
    "UpHost" => |ch, r: pb::HostRef| HostServiceClient::new(ch).up_host(r),
    "CreateJob" => |ch, r: pb::CreateJobRequest| JobServiceClient::new(ch).create_job(r),
    "GetJob" => |ch, r: pb::GetJobRequest| JobServiceClient::new(ch).get_job(r),
    "QueryJobs" => |ch, r: pb::QueryJobsRequest| JobServiceClient::new(ch).query_jobs(r),
    "UpdateJob" => |ch, r: pb::UpdateJobRequest| JobServiceClient::new(ch).update_job(r),
    "KillJob" => |ch, r: pb::KillJobRequest| JobServiceClient::new(ch).kill_job(r),
    "RestartJob" => |ch, r: pb::RestartJobRequest| JobServiceClient::new(ch).restart_job(r),
    "DeleteJob" => |ch, r: pb::DeleteJobRequest| JobServiceClient::new(ch).delete_job(r),
    "PauseUpdate" => |ch, r: pb::UpdateControlRequest| JobServiceClient::new(ch).pause_update(r),
    "ResumeUpdate" => |ch, r: pb::UpdateControlRequest| JobServiceClient::new(ch).resume_update(r),
    "AbortUpdate" => |ch, r: pb::UpdateControlRequest| JobServiceClient::new(ch).abort_update(r),
    "DeployPlugin" => |ch, r: pb::DeployPluginRequest| PluginServiceClient::new(ch).deploy_plugin(tokio_stream::iter(vec![r])),
    "ValidatePlugin" => |ch, r: pb::DeployPluginRequest| PluginServiceClient::new(ch).validate_plugin(tokio_stream::iter(vec![r])),
    "ListPlugins" => |ch, r: pb::ListPluginsRequest| PluginServiceClient::new(ch).list_plugins(r),
    "ActivatePlugin" => |ch, r: pb::PluginRef| PluginServiceClient::new(ch).activate_plugin(r),
    "RollbackPlugin" => |ch, r: pb::SlotRef| PluginServiceClient::new(ch).rollback_plugin(r),
    "ShadowPlugin" => |ch, r: pb::ShadowPluginRequest| PluginServiceClient::new(ch).shadow_plugin(r),
    "CreatePool" => |ch, r: pb::CreatePoolRequest| PoolServiceClient::new(ch).create_pool(r),
    "GetPool" => |ch, r: pb::GetPoolRequest| PoolServiceClient::new(ch).get_pool(r),
    "UpdatePool" => |ch, r: pb::UpdatePoolRequest| PoolServiceClient::new(ch).update_pool(r),
    "DeletePool" => |ch, r: pb::DeletePoolRequest| PoolServiceClient::new(ch).delete_pool(r),
    "ListPools" => |ch, r: pb::ListPoolsRequest| PoolServiceClient::new(ch).list_pools(r),
    "ListTasks" => |ch, r: pb::ListTasksRequest| TaskServiceClient::new(ch).list_tasks(r),
    "GetTask" => |ch, r: pb::GetTaskRequest| TaskServiceClient::new(ch).get_task(r),
    "KillTask" => |ch, r: pb::TaskRef| TaskServiceClient::new(ch).kill_task(r),
    "RestartTask" => |ch, r: pb::TaskRef| TaskServiceClient::new(ch).restart_task(r),
    "TaskLogs" => |ch, r: pb::TaskLogsRequest| TaskServiceClient::new(ch).task_logs(pb::TaskLogsRequest { follow: false, ..r }),
    "TaskEvents" => |ch, r: pb::TaskEventsRequest| TaskServiceClient::new(ch).task_events(r),
    "Watch" => |ch, r: pb::WatchRequest| WatchServiceClient::new(ch).watch(r),
    // New RPCs go last: the corpus names an RPC by its index here.
    "PutSecret" => |ch, r: pb::PutSecretRequest| SecretServiceClient::new(ch).put_secret(r),
    "ListSecrets" => |ch, r: pb::ListSecretsRequest| SecretServiceClient::new(ch).list_secrets(r),
    "DeleteSecret" => |ch, r: pb::DeleteSecretRequest| SecretServiceClient::new(ch).delete_secret(r),
    "AddInstances" => |ch, r: pb::AddInstancesRequest| JobServiceClient::new(ch).add_instances(r),
    "RemoveInstances" => |ch, r: pb::RemoveInstancesRequest| JobServiceClient::new(ch).remove_instances(r),
    "RenewOwnerLease" => |ch, r: pb::RenewOwnerLeaseRequest| JobServiceClient::new(ch).renew_owner_lease(r),
}

/// A well-formed request for each RPC, naming things that exist.
fn seed(index: usize) -> Vec<u8> {
    let job = SERVER.job_id.clone();
    let task = Some(pb::TaskRef { job_id: job.clone(), instance: 0 });
    let spec = Some(paceline_proto::convert::job_spec_pb(&hello()));
    let pool_spec = Some(pb::PoolSpec {
        reservation: Some(pb::PerKind { cpu: 1000, memory: 1024, disk: 1000, gpu: 0, gpu_milli: 0 }),
        ..Default::default()
    });
    match RPCS[index] {
        "GetHost" | "DownHost" | "UpHost" => pb::HostRef { hostname: "sim-0".into() }.encode_to_vec(),
        "DrainHost" => pb::DrainHostRequest { hostname: "sim-1".into(), then_down: true }.encode_to_vec(),
        "CreateJob" => pb::CreateJobRequest { spec }.encode_to_vec(),
        "UpdateJob" => pb::UpdateJobRequest { id: job, spec, update: None, dry_run: true }.encode_to_vec(),
        "QueryJobs" => pb::QueryJobsRequest { states: vec![1, 2], pool: POOL.into(), limit: 10, ..Default::default() }
            .encode_to_vec(),
        "KillJob" | "RestartJob" => pb::KillJobRequest { id: job, instances: vec![0, 2] }.encode_to_vec(),
        "GetJob" | "DeleteJob" | "PauseUpdate" | "ResumeUpdate" | "AbortUpdate" => {
            pb::GetJobRequest { id: job, config_version: None }.encode_to_vec()
        }
        "DeployPlugin" | "ValidatePlugin" => pb::DeployPluginRequest {
            part: Some(pb::deploy_plugin_request::Part::Meta(pb::deploy_plugin_request::Meta {
                slot: "placement".into(),
                name: "p".into(),
                version: "1.0.0".into(),
                size: 8,
                ..Default::default()
            })),
        }
        .encode_to_vec(),
        "ActivatePlugin" | "ShadowPlugin" => pb::ShadowPluginRequest {
            plugin: Some(pb::PluginRef { slot: "placement".into(), id: "x".into() }),
            stop: true,
        }
        .encode_to_vec(),
        "RollbackPlugin" => pb::SlotRef { slot: "placement".into() }.encode_to_vec(),
        "CreatePool" | "UpdatePool" => pb::CreatePoolRequest { path: "/fuzz".into(), spec: pool_spec }.encode_to_vec(),
        "GetPool" | "DeletePool" => pb::GetPoolRequest { path: POOL.into() }.encode_to_vec(),
        "ListTasks" => pb::ListTasksRequest { job_id: job, states: vec![1], ..Default::default() }.encode_to_vec(),
        "GetTask" | "TaskEvents" => pb::GetTaskRequest { task }.encode_to_vec(),
        "KillTask" | "RestartTask" => pb::TaskRef { job_id: job, instance: 1 }.encode_to_vec(),
        "TaskLogs" => {
            pb::TaskLogsRequest { task, run: 1, stream: "stdout".into(), offset: -5, follow: false }.encode_to_vec()
        }
        "Watch" => pb::WatchRequest { from_revision: 1, job_id: job, kinds: vec!["job".into()] }.encode_to_vec(),
        "PutSecret" => {
            pb::PutSecretRequest { pool: POOL.into(), name: "db".into(), value: b"v".to_vec() }.encode_to_vec()
        }
        "ListSecrets" => pb::ListSecretsRequest { pool: POOL.into() }.encode_to_vec(),
        "DeleteSecret" => pb::DeleteSecretRequest { pool: POOL.into(), name: "db".into() }.encode_to_vec(),
        "AddInstances" => pb::AddInstancesRequest { id: job, count: 2 }.encode_to_vec(),
        "RemoveInstances" => pb::RemoveInstancesRequest { id: job, instances: vec![1] }.encode_to_vec(),
        "RenewOwnerLease" => pb::RenewOwnerLeaseRequest { id: job }.encode_to_vec(),
        _ => Vec::new(),
    }
}

/// Sends one `api` input (first byte: the RPC) and checks the property.
fn api_case(data: &[u8]) -> Result<(), TestCaseError> {
    let Some((&first, bytes)) = data.split_first() else { return Ok(()) };
    let index = usize::from(first) % RPCS.len();
    let server = &*SERVER;
    let sent = server.rt.block_on(send(index, bytes, server.channel.clone()));
    if let Sent::Answered(Err(status)) = &sent {
        prop_assert!(
            !matches!(status.code(), Code::Unknown | Code::Internal),
            "{}: {:?} {}",
            RPCS[index],
            status.code(),
            status.message()
        );
    }
    still_serving()
}

fn still_serving() -> Result<(), TestCaseError> {
    let server = &*SERVER;
    let alive = server.rt.block_on(PoolServiceClient::new(server.channel.clone()).list_pools(pb::ListPoolsRequest {}));
    prop_assert!(alive.is_ok(), "the server stopped answering: {:?}", alive.err());
    Ok(())
}

/// One `jobspec` input, as `paceline job create` reads a file, then sent.
fn jobspec_case(yaml: &[u8]) -> Result<(), TestCaseError> {
    let Ok(mut config) = serde_yaml::from_slice::<JobConfig>(yaml) else { return Ok(()) };
    if config.owner.is_empty() {
        config.owner = "fuzz".into();
    }
    // The examples name /default; this cluster's leaf pool is POOL.
    if config.pool == "/default" {
        config.pool = POOL.into();
    }
    if config.validate().is_err() {
        return Ok(());
    }
    let spec = paceline_proto::convert::job_spec_pb(&config);
    let mut input = vec![RPCS.iter().position(|r| *r == "CreateJob").expect("CreateJob") as u8];
    input.extend(pb::CreateJobRequest { spec: Some(spec) }.encode_to_vec());
    api_case(&input)
}

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = repo().join("fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .map(|p| {
            let bytes = std::fs::read(&p).expect("corpus file");
            (p, bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_seed_is_answered_and_the_corpus_replays() {
    for (index, name) in RPCS.iter().enumerate() {
        let mut input = vec![index as u8];
        input.extend(seed(index));
        api_case(&input).unwrap_or_else(|e| panic!("seed {name}: {e}"));
    }
    jobspec_case(&hello_yaml()).expect("hello.yaml");
    for (path, bytes) in corpus("api") {
        api_case(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    for (path, bytes) in corpus("jobspec") {
        jobspec_case(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

#[test]
#[ignore = "writes the seed files; run by hand after changing a seed"]
fn write_seeds() {
    for target in ["api", "jobspec"] {
        std::fs::create_dir_all(repo().join("fuzz/corpus").join(target)).expect("corpus dir");
    }
    for (index, name) in RPCS.iter().enumerate() {
        let mut input = vec![index as u8];
        input.extend(seed(index));
        std::fs::write(repo().join("fuzz/corpus/api").join(format!("seed-{name}")), input).expect("seed");
    }
    for example in ["hello.yaml", "gang.yaml", "web.yaml", "stateful.yaml"] {
        std::fs::copy(repo().join("examples").join(example), repo().join("fuzz/corpus/jobspec").join(example))
            .expect("seed");
    }
}

fn mutate(mut bytes: Vec<u8>, ops: &[(u8, prop::sample::Index, u8)]) -> Vec<u8> {
    for (op, at, b) in ops {
        let i = at.index(bytes.len() + 1);
        match op {
            0 if i < bytes.len() => bytes[i] = *b,
            1 => bytes.insert(i, *b),
            2 if i < bytes.len() => {
                bytes.remove(i);
            }
            _ => bytes.truncate(i),
        }
    }
    bytes
}

fn ops() -> impl Strategy<Value = Vec<(u8, prop::sample::Index, u8)>> {
    proptest::collection::vec((0u8..4, any::<prop::sample::Index>(), any::<u8>()), 0..6)
}

proptest! {
    // Cases from PROPTEST_CASES (scripts/fuzz), else 64: each case is a real RPC.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn fuzz_api_mutated_requests(rpc in any::<prop::sample::Index>(), ops in ops()) {
        let index = rpc.index(RPCS.len());
        let mut input = vec![index as u8];
        input.extend(mutate(seed(index), &ops));
        api_case(&input)?;
    }

    #[test]
    fn fuzz_api_arbitrary_requests(bytes in proptest::collection::vec(any::<u8>(), 1..256)) {
        api_case(&bytes)?;
    }

    #[test]
    fn fuzz_jobspec_mutated_yaml(ops in ops()) {
        jobspec_case(&mutate(hello_yaml(), &ops))?;
    }

    #[test]
    fn fuzz_jobspec_arbitrary_yaml(text in "[a-z_:{}\\[\\], \\n\"0-9-]{0,200}") {
        jobspec_case(text.as_bytes())?;
    }
}
