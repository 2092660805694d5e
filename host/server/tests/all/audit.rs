//! The audit log end to end, with the server in this process
//! ([`crate::dev_server`]) and the generated gRPC clients: changes (a job
//! created and killed, a plugin deploy the server refuses; an owner-lease
//! renewal is left out) are recorded with their principal, target and
//! outcome, `ListAuditRecords` filters them, a `user` reads only their own
//! records, refused calls are recorded, and `audit.max_rows` bounds the log.
//! (`paceline audit`'s own flags and table are unit tests of
//! `cmd/client/audit.rs`.)

use crate::dev_server::{Client, Dev, eventually, tokens_file};

use paceline_api::auth::Role;
use paceline_proto::v1 as pb;
use pb::audit_service_client::AuditServiceClient;
use pb::job_service_client::JobServiceClient;
use pb::plugin_service_client::PluginServiceClient;
use pb::pool_service_client::PoolServiceClient;

/// `ListAuditRecords` with `request`'s filters (limit 100 when unset).
fn audit(dev: &Dev, token: Option<&str>, mut request: pb::ListAuditRecordsRequest) -> Vec<pb::AuditRecord> {
    if request.limit == 0 {
        request.limit = 100;
    }
    let client = dev.client(token);
    dev.block_on(async move { AuditServiceClient::new(client).list_audit_records(request).await })
        .expect("audit records")
        .into_inner()
        .records
}

/// The request of no filters.
fn all() -> pb::ListAuditRecordsRequest {
    pb::ListAuditRecordsRequest::default()
}

fn methods(records: &[pb::AuditRecord]) -> Vec<String> {
    records.iter().map(|r| r.method.rsplit('/').next().unwrap_or_default().to_string()).collect()
}

fn find<'a>(records: &'a [pb::AuditRecord], method: &str) -> &'a pb::AuditRecord {
    records.iter().find(|r| r.method.ends_with(method)).unwrap_or_else(|| panic!("no {method} record in {records:#?}"))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn jobs(client: Client) -> JobServiceClient<Client> {
    JobServiceClient::new(client)
}

/// `job kill <id>` as `token`'s principal.
fn kill(dev: &Dev, token: Option<&str>, id: &str) -> Result<pb::KillJobResponse, tonic::Status> {
    let client = dev.client(token);
    let request = pb::KillJobRequest { id: id.into(), instances: vec![] };
    dev.block_on(async move { jobs(client).kill_job(request).await }).map(tonic::Response::into_inner)
}

/// `pool create <path>` of a reservation of 1 core, 1 GiB and 100 MiB, as `token`'s principal.
fn create_pool(dev: &Dev, token: Option<&str>, path: &str) -> Result<pb::CreatePoolResponse, tonic::Status> {
    let reservation = paceline_model::pool::PerKind { cpu: 1000, memory: 1024, disk: 100, gpu: 0 };
    let spec = paceline_model::pool::PoolSpec { reservation, ..paceline_model::pool::PoolSpec::default() };
    let request = pb::CreatePoolRequest { path: path.into(), spec: Some(paceline_api::pools::pool_spec_pb(&spec)) };
    let client = dev.client(token);
    dev.block_on(async move { PoolServiceClient::new(client).create_pool(request).await })
        .map(tonic::Response::into_inner)
}

#[test]
fn changes_are_recorded_with_principal_target_and_outcome_and_filtered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start(dir.path(), 2, None);
    // A job with an owner lease that runs until killed: its renewals are not audited.
    let leased: paceline_model::job::JobConfig = serde_yaml::from_str(
        "name: hello\npool: /default\nkind: batch\ninstance_count: 1\nowner_lease_secs: 600\ndefault_task:\n  \
         command: sh\n  args: [\"-c\", \"echo hello; sleep 300\"]\n  \
         resources: {cpu_millis: 100, memory_mib: 32, disk_mib: 10}\n",
    )
    .expect("job file");
    let client = dev.client(None);
    let id = dev
        .block_on(async {
            jobs(client.clone())
                .create_job(pb::CreateJobRequest { spec: Some(paceline_proto::convert::job_spec_pb(&leased)) })
                .await
        })
        .expect("create")
        .into_inner()
        .id;
    let renew = |id: &str| {
        let request = pb::RenewOwnerLeaseRequest { id: id.into() };
        dev.block_on(async { jobs(client.clone()).renew_owner_lease(request).await })
    };
    assert_eq!(renew(&id).expect("renewed").into_inner().lease_secs, 600, "owner lease renewed for 600 s");
    kill(&dev, None, &id).expect("kill");
    dev.block_on(async {
        jobs(client.clone()).get_job(pb::GetJobRequest { id: id.clone(), ..pb::GetJobRequest::default() }).await
    })
    .expect("a read: not audited");
    let late = renew(&id).expect_err("a killed job's lease is not renewed");
    assert!(late.message().contains("kill requested"), "a killed job's lease is not renewed: {late:?}");
    // A component with a valid header and nothing valid after it: the
    // server refuses it.
    let broken = b"\0asm\x0d\0\x01\0this is not a component".to_vec();
    let meta = pb::deploy_plugin_request::Meta {
        slot: "placement/batch".into(),
        name: "broken".into(),
        version: "1".into(),
        size: broken.len() as u64,
        ..Default::default()
    };
    let parts = vec![
        pb::DeployPluginRequest { part: Some(pb::deploy_plugin_request::Part::Meta(meta)) },
        pb::DeployPluginRequest { part: Some(pb::deploy_plugin_request::Part::Chunk(broken)) },
    ];
    let plugins = dev.client(None);
    let refused = dev
        .block_on(async {
            PluginServiceClient::new(plugins).deploy_plugin(tonic::codegen::tokio_stream::iter(parts)).await
        })
        .expect_err("the server refuses the component");
    let reason = refused.message().to_string();

    eventually(30, "three audit records", || audit(&dev, None, all()).len() >= 3);
    let records = audit(&dev, None, all());
    assert_eq!(
        methods(&records),
        ["DeployPlugin", "KillJob", "CreateJob"],
        "newest first, reads and lease renewals left out: {records:#?}"
    );
    let create = find(&records, "/paceline.v1.JobService/CreateJob");
    assert_eq!((create.principal.as_str(), create.role.as_str()), ("anonymous", "admin"));
    assert_eq!((create.target.as_str(), create.job_id.as_str()), (id.as_str(), id.as_str()));
    assert_eq!(create.code, "OK");
    assert!(create.summary.contains("name=hello") && create.summary.contains("pool=/default"), "{create:?}");
    assert!(!format!("{create:?}").contains("echo hello"), "no spec body in the record: {create:?}");
    let kill_record = find(&records, "KillJob");
    assert_eq!((kill_record.target.as_str(), kill_record.code.as_str()), (id.as_str(), "OK"));
    let deploy = find(&records, "DeployPlugin");
    assert_eq!(deploy.target, "placement/batch broken@1");
    assert_eq!(deploy.code, "InvalidArgument");
    assert!(
        !deploy.message.is_empty() && reason.contains(&deploy.message),
        "the refusal's reason, as the client saw it: {} / {reason}",
        deploy.message
    );

    // Filters.
    let by = |r: pb::ListAuditRecordsRequest| methods(&audit(&dev, None, r));
    assert_eq!(by(pb::ListAuditRecordsRequest { job_id: id.clone(), ..all() }), ["KillJob", "CreateJob"]);
    assert_eq!(by(pb::ListAuditRecordsRequest { method: "DeployPlugin".into(), ..all() }), ["DeployPlugin"]);
    assert_eq!(
        by(pb::ListAuditRecordsRequest { method: "/paceline.v1.JobService/KillJob".into(), ..all() }),
        ["KillJob"]
    );
    let last_hour = pb::ListAuditRecordsRequest {
        principal: "anonymous".into(),
        since_ms: now_ms().saturating_sub(3_600_000),
        ..all()
    };
    assert_eq!(audit(&dev, None, last_hour).len(), 3);
    assert!(audit(&dev, None, pb::ListAuditRecordsRequest { principal: "somebody-else".into(), ..all() }).is_empty());
    // 2000-01-01T00:00:00Z.
    assert!(audit(&dev, None, pb::ListAuditRecordsRequest { until_ms: 946_684_800_000, ..all() }).is_empty());
    assert_eq!(by(pb::ListAuditRecordsRequest { limit: 1, ..all() }), ["DeployPlugin"]);
}

#[test]
fn users_read_only_their_own_records_and_refused_calls_are_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tokens.yaml");
    let t = tokens_file(&file, &[("root", Role::Admin, &[]), ("alice", Role::User, &["/team-a"])]);
    let (root, alice) = (Some(t[0].as_str()), Some(t[1].as_str()));
    let dev = Dev::start(dir.path(), 1, Some(&file));
    create_pool(&dev, root, "/team-a").expect("root creates /team-a");
    // Refused by role (a user may not create pools) and for want of a token.
    assert!(create_pool(&dev, alice, "/mine").is_err());
    assert!(kill(&dev, None, "someone-elses-job").is_err());
    // Refused by a handler: alice's job kill of a job that does not exist.
    assert!(kill(&dev, alice, "no-such-job").is_err());

    eventually(30, "four audit records", || audit(&dev, root, all()).len() >= 4);
    let records = audit(&dev, root, all());
    let denied = find(&records, "CreatePool");
    assert!(records.iter().any(|r| r.principal == "root" && r.code == "OK" && r.target == "/team-a"), "{records:#?}");
    let by_alice: Vec<_> = records.iter().filter(|r| r.principal == "alice").collect();
    assert_eq!(by_alice.len(), 2, "{records:#?}");
    assert!(by_alice.iter().any(|r| r.code == "PermissionDenied" && r.role == "user"), "{denied:?}");
    assert!(by_alice.iter().any(|r| r.code == "NotFound" && r.target == "no-such-job"), "{by_alice:#?}");
    let anonymous = find(&records, "KillJob");
    let unauthenticated: Vec<_> = records.iter().filter(|r| r.principal == "(unauthenticated)").collect();
    assert_eq!(unauthenticated.len(), 1, "{anonymous:?}");
    assert_eq!(unauthenticated[0].code, "Unauthenticated");

    // Alice reads her own records, only hers, and may not ask for root's.
    let hers = audit(&dev, alice, all());
    assert_eq!(hers.len(), 2, "{hers:#?}");
    assert!(hers.iter().all(|r| r.principal == "alice"));
    let client = dev.client(alice);
    let refused = dev
        .block_on(async {
            AuditServiceClient::new(client)
                .list_audit_records(pb::ListAuditRecordsRequest { principal: "root".into(), limit: 100, ..all() })
                .await
        })
        .expect_err("alice may not read root's records");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    // Without a token nothing is read.
    let client = dev.client(None);
    let anonymous = dev.block_on(async {
        AuditServiceClient::new(client).list_audit_records(pb::ListAuditRecordsRequest { limit: 100, ..all() }).await
    });
    assert!(anonymous.is_err());
}

#[test]
fn the_server_keeps_at_most_audit_max_rows_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    // `paceline server --data-dir … --audit-max-rows <rows>`: agents' hosts, none joined.
    let start = |rows: u64| {
        Dev::with(paceline_server::ServerConfig {
            data_dir: dir.path().join("data"),
            api_listen: "127.0.0.1:0".parse().expect("address"),
            agent_listen: "127.0.0.1:0".parse().expect("address"),
            audit: paceline_server::AuditConfig { max_rows: rows, ..paceline_server::AuditConfig::default() },
            ..paceline_server::ServerConfig::default()
        })
    };
    let server = start(100);
    for i in 0..5 {
        // Five refused kills: each is a change attempt, so each is recorded.
        assert!(kill(&server, None, &format!("job-{i}")).is_err());
    }
    eventually(30, "five records", || audit(&server, None, all()).len() == 5);
    drop(server);
    // Restarted with a bound of 2: the log is pruned to its newest two at start.
    let server = start(2);
    eventually(30, "two records left", || {
        audit(&server, None, pb::ListAuditRecordsRequest { method: "KillJob".into(), ..all() }).len() == 2
    });
    let left: Vec<_> = audit(&server, None, all()).into_iter().map(|r| r.target).collect();
    assert_eq!(left, ["job-4", "job-3"], "the newest are kept");
}
