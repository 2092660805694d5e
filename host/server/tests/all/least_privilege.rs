//! Least privilege on the public API, through the real auth layer and a
//! real tonic server over the sim provider: a user reads task logs and
//! events only of jobs in pools granted to them (their jobs and tasks too:
//! `tenant_reads`), and validating a plugin
//! (which compiles untrusted Wasm on the shared runtime) needs the `author`
//! role and is rate-limited per principal.

use crate::support;

use std::sync::Arc;

use paceline_api::ApiConfig;
use paceline_api::auth::{Auth, token_hash_hex};
use paceline_model::job::JobKind;
use paceline_proto::bearer::Bearer;
use paceline_proto::v1 as pb;
use pb::job_service_client::JobServiceClient;
use pb::plugin_service_client::PluginServiceClient;
use pb::task_service_client::TaskServiceClient;
use support::*;
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub(crate) type Client = InterceptedService<Channel, Bearer>;

pub(crate) struct Api {
    _sc: SimCluster,
    pub(crate) channel: Channel,
    /// The API's address, for the web UI's routes on the same port.
    pub(crate) addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Api {
    /// alice: user in `/team` (the support pool); carol: user in `/elsewhere`;
    /// bob: author in `/elsewhere`; ops: operator; root: admin.
    pub(crate) async fn start() -> Api {
        let dir = tempfile::tempdir().expect("tempdir");
        let sc = SimCluster::start(dir.path(), shapes(2)).await;
        let tokens = format!(
            "version: 1\nprincipals:\n  - {{name: alice, role: user, pools: [{POOL}], token_sha256: {}}}\n  - {{name: carol, role: user, pools: [/elsewhere], token_sha256: {}}}\n  - {{name: bob, role: author, pools: [/elsewhere], token_sha256: {}}}\n  - {{name: root, role: admin, token_sha256: {}}}\n  - {{name: ops, role: operator, token_sha256: {}}}\n",
            token_hash_hex("alice-token"),
            token_hash_hex("carol-token"),
            token_hash_hex("bob-token"),
            token_hash_hex("root-token"),
            token_hash_hex("ops-token"),
        );
        let config = ApiConfig { auth: Arc::new(Auth::from_yaml(&tokens).expect("tokens")), ..ApiConfig::default() };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(paceline_api::serve(sc.cluster.roles(), listener, config, async {
            let _ = stopped.await;
        }));
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        Api { _sc: sc, channel, addr, stop: Some(stop), _dir: dir }
    }

    pub(crate) fn as_(&self, token: &str) -> Client {
        InterceptedService::new(self.channel.clone(), Bearer::new(Some(token)).expect("token"))
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn task_ref(id: &str) -> Option<pb::TaskRef> {
    Some(pb::TaskRef { job_id: id.into(), instance: 0 })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_reads_logs_and_events_only_of_jobs_in_granted_pools() {
    let api = Api::start().await;
    let spec = paceline_api::convert::job_spec_pb(&job(JobKind::Batch, 1));
    let id = JobServiceClient::new(api.as_("root-token"))
        .create_job(pb::CreateJobRequest { spec: Some(spec) })
        .await
        .expect("create")
        .into_inner()
        .id;

    // alice's team: events read, logs get past the check (the task has no run yet).
    let mut alice_tasks = TaskServiceClient::new(api.as_("alice-token"));
    alice_tasks.task_events(pb::TaskEventsRequest { task: task_ref(&id), limit: 0 }).await.expect("own events");
    JobServiceClient::new(api.as_("alice-token"))
        .job_events(pb::JobEventsRequest { job_id: id.clone(), instance: None, limit: 0 })
        .await
        .expect("own job events");
    let own_logs = alice_tasks
        .task_logs(pb::TaskLogsRequest { task: task_ref(&id), ..Default::default() })
        .await
        .expect_err("no run yet");
    assert_eq!(own_logs.code(), Code::FailedPrecondition, "{own_logs:?}");

    // carol's grant is another pool: neither the task nor its logs or events.
    let mut carol_tasks = TaskServiceClient::new(api.as_("carol-token"));
    for refused in [
        carol_tasks.get_task(pb::GetTaskRequest { task: task_ref(&id) }).await.map(|_| ()),
        carol_tasks.task_events(pb::TaskEventsRequest { task: task_ref(&id), limit: 0 }).await.map(|_| ()),
        carol_tasks.task_logs(pb::TaskLogsRequest { task: task_ref(&id), ..Default::default() }).await.map(|_| ()),
        JobServiceClient::new(api.as_("carol-token"))
            .job_events(pb::JobEventsRequest { job_id: id.clone(), instance: None, limit: 0 })
            .await
            .map(|_| ()),
    ] {
        let e = refused.expect_err("another team's details");
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("may not read") && e.message().contains(POOL), "{}", e.message());
    }
    // An unknown job is NOT_FOUND for her, not a hint that it exists elsewhere.
    let e = carol_tasks
        .task_events(pb::TaskEventsRequest { task: task_ref("no-such-job"), limit: 0 })
        .await
        .expect_err("unknown");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
}

fn upload(bytes: &[u8]) -> Vec<pb::DeployPluginRequest> {
    use pb::deploy_plugin_request::{Meta, Part};
    let meta = Meta {
        slot: "placement/batch".into(),
        name: "spread".into(),
        version: "v9".into(),
        size: bytes.len() as u64,
        skip_self_test: true,
        deadline_ms: 0,
        candidates: String::new(),
    };
    vec![
        pb::DeployPluginRequest { part: Some(Part::Meta(meta)) },
        pb::DeployPluginRequest { part: Some(Part::Chunk(bytes.to_vec())) },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validating_a_plugin_needs_an_author_and_is_rate_limited_per_principal() {
    let api = Api::start().await;
    let bytes = paceline_plugin_artifacts::SPREAD;
    let validate = async |token: &str| {
        PluginServiceClient::new(api.as_(token)).validate_plugin(tokio_stream::iter(upload(bytes))).await
    };
    let e = validate("alice-token").await.expect_err("a user may not");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("needs role author"), "{}", e.message());

    for i in 0..paceline_api::plugins::VALIDATE_BURST {
        let ok = validate("bob-token").await.unwrap_or_else(|e| panic!("validation {i}: {e:?}")).into_inner();
        assert_eq!(ok.error, "", "the component is valid");
    }
    let e = validate("bob-token").await.expect_err("beyond the burst");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("try again in"), "{}", e.message());
    // The limit is bob's, not everyone's.
    assert_eq!(validate("root-token").await.expect("root's own bucket").into_inner().error, "");
}

/// A snapshot holds every job's spec and every plugin: only an admin takes
/// one, and what an admin gets is a whole, intact snapshot file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_takes_a_snapshot() {
    use pb::operator_service_client::OperatorServiceClient;
    let api = Api::start().await;
    for who in ["alice-token", "bob-token"] {
        let e = OperatorServiceClient::new(api.as_(who))
            .snapshot(pb::SnapshotRequest::default())
            .await
            .map(|_| ())
            .expect_err("not an admin");
        assert_eq!(e.code(), Code::PermissionDenied, "{who}: {e:?}");
    }
    let mut stream = OperatorServiceClient::new(api.as_("root-token"))
        .snapshot(pb::SnapshotRequest::default())
        .await
        .expect("admin")
        .into_inner();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.message().await.expect("chunk") {
        assert!(chunk.data.len() <= 1 << 20, "chunks of at most 1 MiB");
        bytes.extend_from_slice(&chunk.data);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.snap");
    std::fs::write(&file, &bytes).expect("write");
    let (header, trailer) = paceline_storage::snapshot::verify(&file).expect("an intact snapshot");
    assert!(header.point_in_time, "the sim cluster's store is SQLite: one moment");
    assert_eq!(trailer.counts.get("host"), Some(&2), "the cluster's two hosts: {:?}", trailer.counts);
}
