//! Findings of the security review (issue 44), through a real tonic server
//! with a tokens file and the audit writer over the sim provider, and the
//! real CLI binary:
//! - a flood of refused calls is a bounded number of audit records (the
//!   first few one by one, the rest counted in one aggregate), and a change
//!   after the flood is still recorded;
//! - a refused `CreateJob` names no job id that never existed;
//! - a user may not create a job for someone else (`owner: admin`);
//! - control characters in printed job fields are refused on input, and the
//!   CLI prints stored ones as escapes;
//! - the CLI warns when it would send a token in clear to another host.

/// The in-process cluster of the server crate's tests (host/server/tests/all).
#[path = "../../server/tests/all/support.rs"]
mod support;

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline_api::ApiConfig;
use paceline_api::audit::AuditSettings;
use paceline_api::auth::{Auth, token_hash_hex};
use paceline_model::job::{JobKind, JobRuntime};
use paceline_proto::bearer::Bearer;
use paceline_proto::v1 as pb;
use paceline_storage::{AuditQuery, AuditRecord};
use pb::job_service_client::JobServiceClient;
use support::*;
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

const BIN: &str = env!("CARGO_BIN_EXE_paceline");

type Client = JobServiceClient<InterceptedService<Channel, Bearer>>;

struct Api {
    sc: SimCluster,
    addr: std::net::SocketAddr,
    channel: Channel,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
    /// A handle on the server's auditor, for its counters; taken (dropped)
    /// before `stop`, which waits for every handle to go.
    auditor: Option<paceline_api::audit::Auditor>,
    _dir: tempfile::TempDir,
}

impl Api {
    /// alice: user in `/team` (the support pool); root: admin. Audited
    /// with `settings`.
    async fn start(settings: AuditSettings) -> Api {
        let dir = tempfile::tempdir().expect("tempdir");
        let sc = SimCluster::start(dir.path(), shapes(2)).await;
        let tokens = format!(
            "version: 1\nprincipals:\n  - {{name: alice, role: user, pools: [{POOL}], token_sha256: {}}}\n  - {{name: root, role: admin, token_sha256: {}}}\n",
            token_hash_hex("alice-token"),
            token_hash_hex("root-token"),
        );
        let audit = paceline_api::audit::spawn(sc.store.clone(), settings);
        let auditor = audit.clone();
        let config = ApiConfig {
            auth: Arc::new(Auth::from_yaml(&tokens).expect("tokens")),
            audit: Some(audit),
            ..ApiConfig::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let roles = sc.cluster.roles();
        let served = tokio::spawn(async move {
            let _ = paceline_api::serve(roles, listener, config, async {
                let _ = stopped.await;
            })
            .await;
        });
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        Api { sc, addr, channel, stop: Some(stop), served: Some(served), auditor: Some(auditor), _dir: dir }
    }

    fn jobs(&self, token: Option<&str>) -> Client {
        JobServiceClient::new(InterceptedService::new(self.channel.clone(), Bearer::new(token).expect("token")))
    }

    /// Stops the server and waits until it has let go of its auditor (the
    /// writer then writes what is left, the open windows' aggregates too).
    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            tokio::time::timeout(Duration::from_secs(30), served).await.expect("the server stops").expect("joined");
        }
    }

    /// Every audit record, newest first.
    async fn audit(&self) -> Vec<AuditRecord> {
        self.sc.store.query_audit(&AuditQuery { limit: 10_000, ..AuditQuery::default() }).await.expect("query")
    }

    /// The audit records once `done` holds of them (the writer is asynchronous).
    async fn audit_when(&self, what: &str, done: impl Fn(&[AuditRecord]) -> bool) -> Vec<AuditRecord> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let records = self.audit().await;
            if done(&records) {
                return records;
            }
            assert!(Instant::now() < deadline, "{what}: {records:#?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn spec(owner: &str, pool: &str) -> pb::JobSpec {
    let mut config = job(JobKind::Batch, 1);
    config.owner = owner.into();
    config.pool = pool.into();
    paceline_api::convert::job_spec_pb(&config)
}

/// The count an aggregate record's summary starts with ("1490 more refused calls ...").
fn aggregated(r: &AuditRecord) -> Option<u64> {
    let (n, rest) = r.summary.split_once(' ')?;
    rest.starts_with("more refused calls").then(|| n.parse().ok()).flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refused_calls_is_a_few_records_and_one_aggregate_and_a_change_after_it_is_recorded() {
    // A window longer than the test: every refusal falls in one.
    let settings =
        AuditSettings { refusals_per_window: 10, refusal_window: Duration::from_secs(600), ..AuditSettings::default() };
    let mut api = Api::start(settings).await;
    const FLOOD: u64 = 1500;
    let started = Instant::now();
    let mut anonymous = api.jobs(None);
    for _ in 0..FLOOD {
        let e = anonymous
            .create_job(pb::CreateJobRequest { spec: Some(spec("", POOL)) })
            .await
            .expect_err("no token: refused");
        assert_eq!(e.code(), Code::Unauthenticated);
    }
    eprintln!("{FLOOD} refused calls in {:?}", started.elapsed());
    // /metrics counts the calls the aggregate stands for, as they happen.
    let auditor = api.auditor.take().expect("the auditor");
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(paceline_server::metrics::AuditCollector(auditor)));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(text.contains(&format!("audit_refusals_aggregated_total {}\n", FLOOD - 10)), "{text}");
    drop(registry);
    // A legitimate change after the flood.
    let id = api
        .jobs(Some("root-token"))
        .create_job(pb::CreateJobRequest { spec: Some(spec("", POOL)) })
        .await
        .expect("root creates")
        .into_inner()
        .id;
    let records =
        api.audit_when("the change is recorded", |r| r.iter().any(|r| r.job_id == id && r.code == "OK")).await;
    let refused_so_far = records.iter().filter(|r| r.code == "Unauthenticated").count();
    assert_eq!(refused_so_far, 10, "only the window's first few are recorded one by one");

    // The window's aggregate is written when it closes; stopping the server closes it.
    drop(anonymous);
    api.stop().await;
    let records = api.audit_when("the aggregate record", |r| r.iter().any(|r| aggregated(r).is_some())).await;
    let one_by_one: Vec<_> =
        records.iter().filter(|r| r.code == "Unauthenticated" && aggregated(r).is_none()).collect();
    let aggregates: Vec<_> = records.iter().filter(|r| aggregated(r).is_some()).collect();
    assert_eq!(one_by_one.len(), 10, "{records:#?}");
    assert!(one_by_one.iter().all(|r| r.principal == "(unauthenticated)" && r.summary == "peer=127.0.0.1"));
    assert_eq!(aggregates.len(), 1, "{aggregates:#?}");
    let a = aggregates[0];
    assert_eq!(aggregated(a), Some(FLOOD - 10), "the rest, counted: {}", a.summary);
    assert!(a.summary.contains("from 127.0.0.1 between "), "{}", a.summary);
    assert_eq!((a.method.as_str(), a.code.as_str()), ("/paceline.v1.JobService/CreateJob", "Unauthenticated"));
    // 1,500 refusals and one change: 12 rows, not 1,501.
    assert_eq!(records.len(), 12, "{records:#?}");
    let change = records.iter().find(|r| r.job_id == id).expect("the change");
    assert_eq!((change.principal.as_str(), change.code.as_str()), ("root", "OK"));
    let _ = api.addr;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_create_names_no_job_that_never_existed() {
    let api = Api::start(AuditSettings::default()).await;
    // Past the auth layer and the owner and pool checks; the job manager
    // refuses it (no such pool) after the handler picked an id.
    let e = api
        .jobs(Some("root-token"))
        .create_job(pb::CreateJobRequest { spec: Some(spec("root", "/no-such-pool")) })
        .await
        .expect_err("no such pool");
    assert_ne!(e.code(), Code::Ok);
    let records = api.audit_when("the refusal is recorded", |r| r.iter().any(|r| r.code != "OK")).await;
    let refused = records.iter().find(|r| r.method.ends_with("CreateJob")).expect("the create's record");
    assert_eq!((refused.job_id.as_str(), refused.target.as_str()), ("", ""), "{refused:#?}");
    assert!(refused.summary.contains("name=job") && refused.summary.contains("pool=/no-such-pool"), "{refused:#?}");
    let listed =
        api.sc.store.query_jobs(&paceline_storage::JobQuery { limit: 100, ..Default::default() }).await.expect("query");
    assert!(listed.items.is_empty(), "and indeed none was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_creates_jobs_only_as_themselves_and_operators_for_anyone() {
    let api = Api::start(AuditSettings::default()).await;
    let mut alice = api.jobs(Some("alice-token"));
    for owner in ["admin", "root", "Alice"] {
        let e =
            alice.create_job(pb::CreateJobRequest { spec: Some(spec(owner, POOL)) }).await.expect_err("impersonation");
        assert_eq!(e.code(), Code::PermissionDenied, "{owner}: {e:?}");
        assert!(e.message().contains("spec.owner") && e.message().contains(&format!("`{owner}`")), "{}", e.message());
    }
    // Left empty it becomes the caller; naming herself is fine.
    let created = alice.create_job(pb::CreateJobRequest { spec: Some(spec("", POOL)) }).await.expect("own");
    assert_eq!(created.get_ref().owner, "alice");
    let id = created.into_inner().id;
    alice.create_job(pb::CreateJobRequest { spec: Some(spec("alice", POOL)) }).await.expect("herself");
    // Nor may she hand her job to someone else by an update; keeping the owner is fine.
    let update = |owner: &str| pb::UpdateJobRequest {
        id: id.clone(),
        spec: Some(spec(owner, POOL)),
        dry_run: true,
        ..pb::UpdateJobRequest::default()
    };
    let e = alice.update_job(update("admin")).await.expect_err("re-owned");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    alice.update_job(update("")).await.expect("owner kept");
    alice.update_job(update("alice")).await.expect("owner named");
    // An admin acts for others.
    let made = api
        .jobs(Some("root-token"))
        .create_job(pb::CreateJobRequest { spec: Some(spec("team-x", POOL)) })
        .await
        .expect("admin for another");
    assert_eq!(made.get_ref().owner, "team-x");
}

fn cli(api: &Api, token: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args).env("PACELINE_SERVER", format!("http://{}", api.addr)).env_remove("PACELINE_TOKEN");
    if let Some(t) = token {
        c.env("PACELINE_TOKEN", t);
    }
    c.output().expect("cli runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_are_refused_on_input_and_printed_as_escapes() {
    let api = Api::start(AuditSettings::default()).await;
    let evil = "web\u{1b}]0;owned\u{7}\u{1b}[2J";
    let mut bad = job(JobKind::Batch, 1);
    bad.name = evil.into();
    let e = api
        .jobs(Some("root-token"))
        .create_job(pb::CreateJobRequest { spec: Some(paceline_api::convert::job_spec_pb(&bad)) })
        .await
        .expect_err("refused");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("name") && e.message().contains("control character U+001B"), "{}", e.message());
    let mut bad_label = job(JobKind::Batch, 1);
    bad_label.labels.insert("team".into(), "a\u{9b}31mred".into());
    let e = api
        .jobs(Some("root-token"))
        .create_job(pb::CreateJobRequest { spec: Some(paceline_api::convert::job_spec_pb(&bad_label)) })
        .await
        .expect_err("refused");
    assert!(e.message().contains("labels") && e.message().contains("U+009B"), "{}", e.message());

    // A job stored by an older server that did not check: the CLI's table
    // shows the escapes, never the raw bytes.
    let mut old = job(JobKind::Batch, 1);
    old.name = evil.into();
    api.sc.store.create_job("old-1", &old, &JobRuntime::initial(1, 0)).await.expect("stored");
    let out = cli(&api, Some("root-token"), &["job", "list"]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("old-1"), "{stdout}");
    assert!(!stdout.contains('\u{1b}') && !stdout.contains('\u{7}'), "no raw control character: {stdout:?}");
    assert!(stdout.contains(r"web\u{1b}]0;owned\u{7}\u{1b}[2J"), "{stdout}");
    // JSON escapes them itself.
    let json = cli(&api, Some("root-token"), &["job", "list", "-o", "json"]);
    assert!(!String::from_utf8_lossy(&json.stdout).contains('\u{1b}'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_about_to_cross_the_network_in_clear_is_warned_about_once() {
    let api = Api::start(AuditSettings::default()).await;
    const WARNING: &str = "warning: sending a token over plain http://";
    // TEST-NET-1: never routed, so the call fails (at most the 5 s connect
    // timeout), but only after the warning.
    let remote = Command::new(BIN)
        .args(["job", "list", "--server", "http://192.0.2.1:7400"])
        .env("PACELINE_TOKEN", "root-token")
        .output()
        .expect("cli runs");
    let stderr = String::from_utf8_lossy(&remote.stderr).to_string();
    assert_eq!(stderr.matches(WARNING).count(), 1, "{stderr}");
    assert!(stderr.contains("192.0.2.1"), "{stderr}");
    // No token, or a loopback server: no warning.
    let tokenless = Command::new(BIN)
        .args(["job", "list", "--server", "http://192.0.2.1:7400"])
        .env_remove("PACELINE_TOKEN")
        .output()
        .expect("cli runs");
    assert!(!String::from_utf8_lossy(&tokenless.stderr).contains(WARNING));
    let local = cli(&api, Some("root-token"), &["job", "list"]);
    assert!(local.status.success(), "{}", String::from_utf8_lossy(&local.stderr));
    assert!(!String::from_utf8_lossy(&local.stderr).contains(WARNING));
}

/// Issue 44: a refused POST over HTTP/2 sometimes got a stream reset
/// instead of its 401/403: the answer went out while the body was still
/// being sent. curl (a real HTTP/2 client, in the machine's base image)
/// said "stream was not closed cleanly" (exit 92) and saw no status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_upload_over_http2_gets_its_answer_not_a_stream_reset() {
    let api = Api::start(AuditSettings::default()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let body = dir.path().join("job.yaml");
    std::fs::write(&body, vec![b'a'; 3 << 20]).expect("write");
    let url = format!("http://{}/ui/api/jobs", api.addr);
    let body_arg = format!("@{}", body.display());
    for attempt in 0..3 {
        let out = tokio::task::spawn_blocking({
            let (url, body_arg) = (url.clone(), body_arg.clone());
            move || {
                Command::new("curl")
                    .args(["-sS", "--http2-prior-knowledge", "-X", "POST", "-w", "\n%{http_code}"])
                    .args(["-H", "X-Paceline-Request: ui", "-H", "Content-Type: application/yaml"])
                    .args(["--data-binary", &body_arg, &url])
                    .output()
                    .expect("curl runs (Debian's curl is in the base image)")
            }
        })
        .await
        .expect("joined");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "attempt {attempt}: curl {:?}: {stderr}", out.status.code());
        assert!(stdout.ends_with("\n401"), "attempt {attempt}: {stdout}");
        assert!(stdout.contains("no token"), "the refusal's own words: {stdout}");
    }
}
