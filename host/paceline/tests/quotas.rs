//! Security issue 44, item 5: quotas on live jobs and tasks, and a job's
//! tasks in pages. The real roles over the `sim` provider, a real tonic
//! server on 127.0.0.1:0 with chosen quotas, the generated clients and, for
//! `task list`, the CLI binary.

/// The in-process cluster of the server crate's tests (host/server/tests/all).
#[path = "../../server/tests/all/support.rs"]
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use paceline_api::ApiConfig;
use paceline_api::quota::{QuotaLimits, Quotas};
use paceline_model::job::JobKind;
use paceline_proto::v1 as pb;
use pb::job_service_client::JobServiceClient;
use pb::task_service_client::TaskServiceClient;
use support::*;
use tonic::Code;
use tonic::transport::Channel;

/// A sim cluster with the API served over it.
struct Api {
    sc: SimCluster,
    addr: std::net::SocketAddr,
    channel: Channel,
    _stop: tokio::sync::oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

impl Api {
    async fn start(limits: QuotaLimits) -> Api {
        let dir = tempfile::tempdir().expect("tempdir");
        let sc = SimCluster::start(dir.path(), shapes(1)).await;
        Api::serve(sc, dir, limits).await
    }

    /// The control plane restarted over the same store and hosts (every
    /// role new, the job manager's counts rebuilt from the store), serving
    /// the same limits.
    async fn restart(self, limits: QuotaLimits) -> Api {
        let Api { sc, _dir: dir, _stop, .. } = self;
        drop(_stop);
        let sc = SimCluster::start_with(sc.sim.clone(), sc.store.clone(), sc.registry.clone()).await;
        Api::serve(sc, dir, limits).await
    }

    async fn serve(sc: SimCluster, dir: tempfile::TempDir, limits: QuotaLimits) -> Api {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = ApiConfig { quotas: Arc::new(Quotas::new(limits)), ..ApiConfig::default() };
        tokio::spawn(paceline_api::serve(sc.cluster.roles(), listener, config, async {
            let _ = stopped.await;
        }));
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        Api { sc, addr, channel, _stop: stop, _dir: dir }
    }

    fn jobs(&self) -> JobServiceClient<Channel> {
        JobServiceClient::new(self.channel.clone())
    }

    fn tasks(&self) -> TaskServiceClient<Channel> {
        TaskServiceClient::new(self.channel.clone())
    }

    async fn create(&self, spec: pb::JobSpec) -> Result<String, tonic::Status> {
        self.jobs().create_job(pb::CreateJobRequest { spec: Some(spec) }).await.map(|r| r.into_inner().id)
    }

    async fn page(&self, id: &str, limit: u32, page_token: &str) -> pb::ListTasksResponse {
        let r = pb::ListTasksRequest { job_id: id.into(), states: vec![], limit, page_token: page_token.into() };
        self.tasks().list_tasks(r).await.expect("list tasks").into_inner()
    }
}

/// The support crate's job (owner `team`), on the wire.
fn spec(n: u32) -> pb::JobSpec {
    paceline_api::convert::job_spec_pb(&job(JobKind::Stateless, n))
}

fn limits(jobs: u64, tasks: u64) -> QuotaLimits {
    QuotaLimits { max_live_jobs_per_principal: jobs, max_live_tasks_per_principal: tasks, ..QuotaLimits::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_over_its_live_job_quota_is_refused_naming_the_limit() {
    let api = Api::start(limits(2, 1_000)).await;
    let first = api.create(spec(1)).await.expect("first job");
    api.create(spec(1)).await.expect("second job");
    let refused = api.create(spec(1)).await.expect_err("a third live job is over the quota");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let msg = refused.message();
    for needle in ["principal `team` has 2 live jobs", "limit of 2", "max_live_jobs_per_principal", "quotas:"] {
        assert!(msg.contains(needle), "{needle:?} in {msg}");
    }
    // Another principal is not held to team's count.
    let mut other = spec(1);
    other.owner = "someone-else".into();
    api.create(other).await.expect("another owner's job");

    // A job that ended no longer counts.
    api.jobs().kill_job(pb::KillJobRequest { id: first.clone(), instances: vec![] }).await.expect("kill");
    let ended = api.sc.run_until(250, 200, async |c| c.job_state(&first).await.is_terminal()).await;
    assert!(ended, "the killed job ended");
    api.create(spec(1)).await.expect("room again once a job ended");
    // Restarting the ended job would make it live again: a third.
    let restart = pb::RestartJobRequest { id: first, ..Default::default() };
    let refused = api.jobs().restart_job(restart).await.expect_err("a restart is a new live job");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("max_live_jobs_per_principal"), "{}", refused.message());
}

/// `n` creates of `tasks`-instance jobs sent at once, each on its own task.
async fn create_at_once(api: &Api, n: usize, tasks: u32) -> Vec<Result<String, tonic::Status>> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let mut jobs = api.jobs();
        let spec = spec(tasks);
        set.spawn(async move {
            jobs.create_job(pb::CreateJobRequest { spec: Some(spec) }).await.map(|r| r.into_inner().id)
        });
    }
    set.join_all().await
}

/// Concurrent creates cannot overshoot: each admitted create is counted by
/// the next check until it is made, though the creates' store writes run
/// side by side (no lock is held across them). 24 at once against a limit
/// of 5 jobs and of 12 tasks: exactly 5 jobs or 12 tasks' worth pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_stop_exactly_at_the_limit() {
    let api = Api::start(limits(5, 1_000)).await;
    let results = create_at_once(&api, 24, 1).await;
    let passed = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(passed, 5, "{results:?}");
    for refused in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(refused.message().contains("max_live_jobs_per_principal"), "{}", refused.message());
    }
    let jobs = &api.sc.cluster.jobs;
    assert_eq!(jobs.live_counts(), jobs.recount_live(), "kept counts agree with a recount");

    // The task limit the same way: jobs of 3 tasks against 12.
    let api = Api::start(limits(1_000, 12)).await;
    let results = create_at_once(&api, 24, 3).await;
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 4, "{results:?}");
    assert!(
        results.iter().filter_map(|r| r.as_ref().err()).all(|e| e.message().contains("max_live_tasks_per_principal")),
        "{results:?}"
    );

    // Exactly up to the limit: a change already made is not counted again
    // while its reservation is still held, so all of these pass.
    let api = Api::start(limits(1_000, 24)).await;
    let results = create_at_once(&api, 8, 3).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// The counts a check reads are kept as jobs change (not recounted per
/// check): a killed job frees its room, a batch job that ends by itself
/// frees its room, and after a restart of the control plane the counts
/// are rebuilt from the store, so the quota still binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kept_counts_free_room_when_jobs_end_and_still_bind_after_a_restart() {
    let quota = limits(2, 10);
    let api = Api::start(quota.clone()).await;
    let kept_equals_recount = |api: &Api, when: &str| {
        let jobs = &api.sc.cluster.jobs;
        assert_eq!(jobs.live_counts(), jobs.recount_live(), "kept counts differ from a recount {when}");
    };
    let first = api.create(spec(4)).await.expect("first job");
    let second = api.create(spec(4)).await.expect("second job");
    kept_equals_recount(&api, "after two creates");
    let refused = api.create(spec(1)).await.expect_err("a third live job");
    assert!(refused.message().contains("principal `team` has 2 live jobs"), "{}", refused.message());

    // Killing one makes room, once it is KILLED.
    api.jobs().kill_job(pb::KillJobRequest { id: first.clone(), instances: vec![] }).await.expect("kill");
    let ended = api.sc.run_until(250, 200, async |c| c.job_state(&first).await.is_terminal()).await;
    assert!(ended, "the killed job ended");
    kept_equals_recount(&api, "after the kill");
    let third = api.create(spec(6)).await.expect("room again once a job was killed");
    let refused = api.create(spec(1)).await.expect_err("two live jobs again");
    assert!(refused.message().contains("principal `team` has 2 live jobs"), "{}", refused.message());

    // A restarted control plane rebuilds the counts from the store.
    let api = api.restart(quota.clone()).await;
    kept_equals_recount(&api, "after the restart");
    let held = api.sc.cluster.jobs.live_held("team", POOL).0;
    assert_eq!((held.jobs, held.tasks), (2, 10), "the second and third jobs, 4 + 6 tasks");
    let refused = api.create(spec(1)).await.expect_err("the quota binds after a restart");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("principal `team` has 2 live jobs"), "{}", refused.message());
    let grow = pb::AddInstancesRequest { id: second.clone(), count: 1 };
    let refused = api.jobs().add_instances(grow).await.expect_err("the task quota binds after a restart");
    assert!(refused.message().contains("has 6 live tasks in other jobs"), "{}", refused.message());

    // A batch job that succeeds by itself frees its room too.
    for id in [&second, &third] {
        api.jobs().kill_job(pb::KillJobRequest { id: id.clone(), instances: vec![] }).await.expect("kill");
    }
    let ended = api
        .sc
        .run_until(250, 200, async |c| {
            c.job_state(&second).await.is_terminal() && c.job_state(&third).await.is_terminal()
        })
        .await;
    assert!(ended, "both jobs ended");
    let mut batch = job(JobKind::Batch, 2);
    batch.default_task.env.insert("SIM_DURATION_MS".into(), "1000".into());
    let b = api.create(paceline_api::convert::job_spec_pb(&batch)).await.expect("a batch job");
    api.create(spec(1)).await.expect("a second job");
    let ended = api.sc.run_until(250, 400, async |c| c.job_state(&b).await.is_terminal()).await;
    assert!(ended, "the batch job ended by itself: {:?}", api.sc.job_state(&b).await);
    kept_equals_recount(&api, "after the batch job ended");
    api.create(spec(1)).await.expect("room again once the batch job ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_growing_past_the_task_quota_is_refused() {
    let api = Api::start(limits(100, 10)).await;
    let refused = api.create(spec(11)).await.expect_err("11 tasks on creation");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("max_live_tasks_per_principal"), "{}", refused.message());
    let id = api.create(spec(6)).await.expect("6 tasks fit");

    // An update to 11 instances is refused, with the counts.
    let update = |n: u32| pb::UpdateJobRequest { id: id.clone(), spec: Some(spec(n)), ..Default::default() };
    let refused = api.jobs().update_job(update(11)).await.expect_err("an update past the quota");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let msg = refused.message();
    for needle in
        ["has 0 live tasks in other jobs", "this job's 11 would make 11", "limit of 10", "max_live_tasks_per_principal"]
    {
        assert!(msg.contains(needle), "{needle:?} in {msg}");
    }
    // So is AddInstances past it; up to it is fine.
    let grow = |count: u32| pb::AddInstancesRequest { id: id.clone(), count };
    let refused = api.jobs().add_instances(grow(5)).await.expect_err("6 + 5 > 10");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("this job's 11 would make 11"), "{}", refused.message());
    api.jobs().add_instances(grow(4)).await.expect("6 + 4 = 10 fits");
    // Another job of the same owner now has no room.
    let refused = api.create(spec(1)).await.expect_err("the owner holds 10 live tasks");
    assert!(refused.message().contains("has 10 live tasks in other jobs"), "{}", refused.message());
    // Shrinking is always allowed.
    api.jobs().update_job(update(3)).await.expect("shrinking");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_tasks_pages_cover_every_task_once_and_the_cap_holds() {
    let api = Api::start(QuotaLimits::default()).await;
    let n = paceline_api::tasks::MAX_TASK_PAGE as u32 + 1_200;
    let id = api.create(spec(n)).await.expect("create");

    // Limit 0 and a limit over the cap both get the cap.
    for limit in [0, u32::MAX, n] {
        let first = api.page(&id, limit, "").await;
        assert_eq!(first.tasks.len(), paceline_api::tasks::MAX_TASK_PAGE, "limit {limit}");
        assert_eq!(first.total, n);
        assert!(!first.next_page_token.is_empty());
    }
    // Two pages cover every instance exactly once, in order.
    let first = api.page(&id, 0, "").await;
    let second = api.page(&id, 0, &first.next_page_token).await;
    assert_eq!(second.tasks.len(), 1_200);
    assert!(second.next_page_token.is_empty(), "the second page is the last");
    let seen: Vec<u32> = first.tasks.iter().chain(&second.tasks).map(|t| t.instance).collect();
    assert_eq!(seen, (0..n).collect::<Vec<_>>());

    // Small pages too, and the state filter pages the same way.
    let mut token = String::new();
    let mut seen = BTreeSet::new();
    let mut pages = 0;
    loop {
        let r = pb::ListTasksRequest {
            job_id: id.clone(),
            states: vec![
                pb::TaskState::Pending as i32,
                pb::TaskState::Ready as i32,
                pb::TaskState::Placed as i32,
                pb::TaskState::Launching as i32,
                pb::TaskState::Launched as i32,
                pb::TaskState::Running as i32,
                pb::TaskState::Initialized as i32,
                pb::TaskState::Placing as i32,
                pb::TaskState::Starting as i32,
            ],
            limit: 1_000,
            page_token: token,
        };
        let page = api.tasks().list_tasks(r).await.expect("filtered page").into_inner();
        assert!(page.tasks.len() <= 1_000);
        pages += 1;
        for t in &page.tasks {
            assert!(seen.insert(t.instance), "instance {} listed twice", t.instance);
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen.len(), n as usize, "every live task once");
    assert_eq!(pages, 7);

    let bad = pb::ListTasksRequest { job_id: id, states: vec![], limit: 0, page_token: "x".into() };
    let refused = api.tasks().list_tasks(bad).await.expect_err("a token the server never gave");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("page_token"), "{}", refused.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_task_list_of_a_job_over_one_page_lists_every_task() {
    let api = Api::start(QuotaLimits::default()).await;
    // Enough tasks that one reply with all of them (about 170 bytes each
    // here: 6.7 MB) is over the CLI's 4 MiB message limit, as the finding's
    // job was.
    let n = 40_000;
    let id = api.create(spec(n)).await.expect("create");
    // A placement round, so the waiting tasks carry their reasons as in the
    // finding (one host cannot hold them all).
    api.sc.step(1_000).await;
    api.sc.step(1_000).await;
    let server = format!("http://{}", api.addr);
    let args = ["task", "list", id.as_str(), "--server", server.as_str(), "-o", "json"].map(String::from);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_paceline"))
            .args(&args)
            .env_remove("PACELINE_SERVER")
            .env_remove("PACELINE_TOKEN")
            .output()
            .expect("paceline runs")
    });
    let out = tokio::time::timeout(Duration::from_secs(120), out).await.expect("in time").expect("joined");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    let instances: Vec<u64> = listed.iter().map(|t| t["instance"].as_u64().unwrap_or(0)).collect();
    assert_eq!(instances, (0..u64::from(n)).collect::<Vec<_>>(), "every task once, in order");
}

/// A plain HTTP/1.1 GET on the API port, as the web page sends it; the
/// answer's status code and body.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let code = answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_job_route_returns_one_page_of_tasks_and_how_to_get_more() {
    let api = Api::start(QuotaLimits::default()).await;
    let id = api.create(spec(1_200)).await.expect("create");
    let (code, body) = http_get(api.addr, &format!("/ui/api/jobs/{id}")).await;
    assert_eq!(code, 200, "{body}");
    let first: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(first["tasks"].as_array().map(Vec::len), Some(500), "the default page");
    assert_eq!(first["tasks_total"], 1_200);
    assert_eq!(first["tasks_next_offset"], 500);
    let (code, body) = http_get(api.addr, &format!("/ui/api/jobs/{id}?tasks_offset=1000&tasks_limit=400")).await;
    assert_eq!(code, 200, "{body}");
    let last: serde_json::Value = serde_json::from_str(&body).expect("json");
    let instances: Vec<u64> =
        last["tasks"].as_array().expect("tasks").iter().filter_map(|t| t["instance"].as_u64()).collect();
    assert_eq!(instances, (1_000..1_200).collect::<Vec<_>>());
    assert!(last["tasks_next_offset"].is_null(), "the last page: {}", last["tasks_next_offset"]);
    // The page size is capped as ListTasks caps it.
    let (_, body) = http_get(api.addr, &format!("/ui/api/jobs/{id}?tasks_limit=100000")).await;
    let all: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(all["tasks"].as_array().map(Vec::len), Some(1_200));
    let (code, _) = http_get(api.addr, &format!("/ui/api/jobs/{id}?tasks_offset=x")).await;
    assert_eq!(code, 400, "a bad offset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_client_list_tasks_reads_every_page() {
    let clients = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/node");
    let node_ok = std::process::Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if !node_ok || !clients.join("node_modules").exists() {
        eprintln!("skipped: node or clients/node/node_modules is missing (npm ci in clients/node)");
        return;
    }
    let api = Api::start(QuotaLimits::default()).await;
    let n = paceline_api::tasks::MAX_TASK_PAGE as u32 + 700;
    let id = api.create(spec(n)).await.expect("create");
    let index = clients.join("index.mjs");
    let script = format!(
        "const {{ connect }} = await import({index:?}); const c = connect('http://{addr}'); \
         const t = await c.listTasks('{id}'); console.log(t.length + ' ' + t[t.length - 1].instance); process.exit(0);",
        index = index.to_string_lossy(),
        addr = api.addr,
    );
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .args(["--input-type=module", "-e", &script])
            .env_remove("PACELINE_TOKEN")
            .output()
            .expect("node runs")
    });
    let out = tokio::time::timeout(Duration::from_secs(60), out).await.expect("in time").expect("joined");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("{n} {}", n - 1));
}

/// A pool's own limits (`max_live_jobs`, `max_live_tasks` in its spec)
/// replace the server's per-pool defaults, both ways, and a refusal names
/// the pool's spec as where the limit is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pools_own_limits_replace_the_servers_and_a_refusal_names_them() {
    let server = QuotaLimits { max_live_jobs_per_pool: 1, max_live_tasks_per_pool: 5, ..QuotaLimits::default() };
    let api = Api::start(server).await;
    let mut pools = pb::pool_service_client::PoolServiceClient::new(api.channel.clone());
    let create = |path: &str, jobs: Option<u64>, tasks: Option<u64>| pb::CreatePoolRequest {
        path: path.into(),
        spec: Some(pb::PoolSpec { max_live_jobs: jobs, max_live_tasks: tasks, ..Default::default() }),
    };
    pools.create_pool(create("/roomy", Some(3), Some(0))).await.expect("a pool above the server's limits");
    pools.create_pool(create("/tight", None, Some(2))).await.expect("a pool below them");
    let shown = pools.get_pool(pb::GetPoolRequest { path: "/roomy".into() }).await.expect("get").into_inner();
    let own = shown.pool.and_then(|p| p.spec).expect("spec");
    assert_eq!((own.max_live_jobs, own.max_live_tasks), (Some(3), Some(0)), "kept as given");
    let in_pool = |pool: &str, n: u32| {
        let mut s = spec(n);
        s.pool = pool.into();
        s
    };
    // /roomy: 3 jobs where the server allows 1, and no task limit (0).
    for _ in 0..3 {
        api.create(in_pool("/roomy", 10)).await.expect("within /roomy's own limits");
    }
    let refused = api.create(in_pool("/roomy", 1)).await.expect_err("a fourth job");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    for needle in ["pool /roomy has 3 live jobs", "limit of 3", "max_live_jobs in pool /roomy's spec"] {
        assert!(refused.message().contains(needle), "{needle:?} in {}", refused.message());
    }
    // /tight: its own task limit of 2; its job limit is the server's (1).
    let refused = api.create(in_pool("/tight", 3)).await.expect_err("3 tasks over /tight's 2");
    for needle in ["limit of 2", "max_live_tasks in pool /tight's spec"] {
        assert!(refused.message().contains(needle), "{needle:?} in {}", refused.message());
    }
    api.create(in_pool("/tight", 2)).await.expect("2 tasks fit");
    let refused = api.create(in_pool("/tight", 1)).await.expect_err("the server's one job per pool");
    assert!(refused.message().contains("max_live_jobs_per_pool in the `quotas:` section"), "{}", refused.message());
}
