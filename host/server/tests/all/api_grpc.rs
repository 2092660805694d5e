//! The public gRPC API end to end: the real roles over the `sim` provider,
//! a real tonic server on 127.0.0.1:0 (`paceline_api::serve`), and the
//! generated clients. The sim's virtual clock moves only when a test steps
//! it, so each test drives the cluster between calls.

use crate::support;

use std::time::Duration;

use paceline_api::ApiConfig;
use paceline_api::tonic_health::pb::HealthCheckRequest;
use paceline_api::tonic_health::pb::health_check_response::ServingStatus;
use paceline_api::tonic_health::pb::health_client::HealthClient;
use paceline_model::job::JobKind;
use paceline_proto::v1 as pb;
use pb::host_service_client::HostServiceClient;
use pb::job_service_client::JobServiceClient;
use pb::plugin_service_client::PluginServiceClient;
use pb::pool_service_client::PoolServiceClient;
use pb::task_service_client::TaskServiceClient;
use pb::watch_service_client::WatchServiceClient;
use support::*;
use tonic::Code;
use tonic::transport::Channel;

/// A sim cluster with the API served over it.
struct Api {
    sc: SimCluster,
    channel: Channel,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<Result<(), paceline_api::ApiError>>,
    _dir: tempfile::TempDir,
}

impl Api {
    async fn start(hosts: usize) -> Api {
        Self::start_on(shapes(hosts)).await
    }

    async fn start_on(shapes: Vec<paceline_hostmgr::sim::HostShape>) -> Api {
        let dir = tempfile::tempdir().expect("tempdir");
        let sc = SimCluster::start(dir.path(), shapes).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(paceline_api::serve(sc.cluster.roles(), listener, ApiConfig::default(), async {
            let _ = stopped.await;
        }));
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        Api { sc, channel, stop: Some(stop), server, _dir: dir }
    }

    fn jobs(&self) -> JobServiceClient<Channel> {
        JobServiceClient::new(self.channel.clone())
    }
    fn tasks(&self) -> TaskServiceClient<Channel> {
        TaskServiceClient::new(self.channel.clone())
    }
    fn pools(&self) -> PoolServiceClient<Channel> {
        PoolServiceClient::new(self.channel.clone())
    }
    fn hosts(&self) -> HostServiceClient<Channel> {
        HostServiceClient::new(self.channel.clone())
    }
    fn plugins(&self) -> PluginServiceClient<Channel> {
        PluginServiceClient::new(self.channel.clone())
    }

    /// Stops the server and checks it stopped cleanly.
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let served = tokio::time::timeout(Duration::from_secs(10), self.server).await.expect("server stops");
        served.expect("server task").expect("server result");
    }

    async fn create(&self, spec: pb::JobSpec) -> String {
        self.jobs().create_job(pb::CreateJobRequest { spec: Some(spec) }).await.expect("create").into_inner().id
    }

    async fn tasks_in(&self, id: &str) -> Vec<pb::Task> {
        let r = pb::ListTasksRequest { job_id: id.into(), states: vec![], ..Default::default() };
        self.tasks().list_tasks(r).await.expect("list tasks").into_inner().tasks
    }

    async fn query_ids(&self) -> Vec<String> {
        let page = self.jobs().query_jobs(pb::QueryJobsRequest::default()).await.expect("query").into_inner();
        page.jobs.into_iter().map(|j| j.id).collect()
    }
}

/// The support crate's job, on the wire.
fn spec(kind: JobKind, n: u32) -> pb::JobSpec {
    paceline_api::convert::job_spec_pb(&job(kind, n))
}

fn task_ref(id: &str, instance: u32) -> Option<pb::TaskRef> {
    Some(pb::TaskRef { job_id: id.into(), instance })
}

fn all_in(tasks: &[pb::Task], state: pb::TaskState) -> bool {
    !tasks.is_empty() && tasks.iter().all(|t| t.state == state as i32)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_job_created_over_grpc_runs_to_success() {
    let api = Api::start(2).await;
    let mut wire = spec(JobKind::Batch, 3);
    wire.name = "Nightly ETL".into();
    if let Some(t) = wire.default_task.as_mut() {
        t.env.insert("SIM_DURATION_MS".into(), "1000".into());
    }
    let id = api.create(wire).await;
    assert!(id.starts_with("nightly-etl-") && id.len() == "nightly-etl-".len() + 8, "{id}");

    let done = api.sc.run_until(250, 400, async |c| c.job_state(&id).await.is_terminal()).await;
    assert!(done, "the job finished");
    let job = api
        .jobs()
        .get_job(pb::GetJobRequest { id: id.clone(), config_version: None })
        .await
        .expect("get")
        .into_inner()
        .job
        .expect("job");
    let status = job.status.expect("status");
    assert_eq!(status.state, pb::JobState::Succeeded as i32);
    assert_eq!(status.task_counts.get("SUCCEEDED"), Some(&3));
    assert_eq!(job.spec.expect("spec").name, "Nightly ETL");

    let tasks = api.tasks_in(&id).await;
    assert_eq!(tasks.len(), 3);
    assert!(all_in(&tasks, pb::TaskState::Succeeded), "{tasks:?}");
    assert!(tasks.iter().all(|t| !t.host.is_empty() && t.run == 1 && t.run_id == format!("{id}-{}-1", t.instance)));
    let only_failed =
        pb::ListTasksRequest { job_id: id.clone(), states: vec![pb::TaskState::Failed as i32], ..Default::default() };
    assert!(api.tasks().list_tasks(only_failed).await.expect("filtered").into_inner().tasks.is_empty());

    let one = api.tasks().get_task(pb::GetTaskRequest { task: task_ref(&id, 1) }).await.expect("get task").into_inner();
    assert_eq!(one.task.expect("task").instance, 1);

    let events = api
        .tasks()
        .task_events(pb::TaskEventsRequest { task: task_ref(&id, 0), limit: 0 })
        .await
        .expect("events")
        .into_inner()
        .events;
    assert!(events.len() >= 3, "{events:?}");
    assert_eq!(events.last().map(|e| e.to), Some(pb::TaskState::Succeeded as i32), "oldest first, ending SUCCEEDED");
    assert!(events.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    let limited = pb::TaskEventsRequest { task: task_ref(&id, 0), limit: 1 };
    let newest = api.tasks().task_events(limited).await.expect("limited").into_inner().events;
    assert_eq!(newest.len(), 1);
    assert_eq!(newest[0].to, pb::TaskState::Succeeded as i32, "the limit keeps the newest");

    assert!(api.query_ids().await.contains(&id));
    let by_name = pb::QueryJobsRequest { name_contains: "ETL".into(), ..Default::default() };
    assert_eq!(api.jobs().query_jobs(by_name).await.expect("query").into_inner().jobs.len(), 1);
    let bad_state = pb::QueryJobsRequest { states: vec![0], ..Default::default() };
    let e = api.jobs().query_jobs(bad_state).await.expect_err("unspecified state");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("states[0]"), "{}", e.message());

    // The sim provider keeps no logs: the call says so plainly.
    let logs = pb::TaskLogsRequest { task: task_ref(&id, 0), ..Default::default() };
    let e = api.tasks().task_logs(logs).await.expect_err("sim has no logs");
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
    assert!(e.message().contains("read_log") && e.message().contains("not supported"), "{}", e.message());
    let bad_stream = pb::TaskLogsRequest { task: task_ref(&id, 0), stream: "stdin".into(), ..Default::default() };
    let e = api.tasks().task_logs(bad_stream).await.expect_err("bad stream");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("stream:"), "{}", e.message());

    // Its job events over the wire: one Scheduled per task, the job's end.
    let all = pb::JobEventsRequest { job_id: id.clone(), instance: None, limit: 0 };
    let events = api.jobs().job_events(all.clone()).await.expect("job events").into_inner().events;
    let scheduled: Vec<&pb::JobEvent> = events.iter().filter(|e| e.reason == "Scheduled").collect();
    assert_eq!(scheduled.len(), 3, "{events:?}");
    assert!(scheduled.iter().all(|e| e.r#type == pb::EventType::Normal as i32 && e.instance.is_some() && e.count == 1));
    assert!(events.iter().any(|e| e.reason == "JobCompleted" && e.instance.is_none() && e.message == "job SUCCEEDED"));
    assert!(events.windows(2).all(|w| w[0].last_seen_ms >= w[1].last_seen_ms), "most recently seen first");
    let one = pb::JobEventsRequest { instance: Some(2), ..all.clone() };
    let only = api.jobs().job_events(one).await.expect("task 2").into_inner().events;
    assert!(!only.is_empty() && only.iter().all(|e| e.instance == Some(2)), "{only:?}");
    let e = api.jobs().job_events(pb::JobEventsRequest { job_id: "no-such-job".into(), ..all.clone() }).await;
    assert_eq!(e.expect_err("unknown job").code(), Code::NotFound);
    let e = api.jobs().job_events(pb::JobEventsRequest { limit: 10_001, ..all.clone() }).await;
    assert_eq!(e.expect_err("limit too big").code(), Code::InvalidArgument);

    // Terminal, so it can be deleted; then it is gone, with its events.
    api.jobs().delete_job(pb::DeleteJobRequest { id: id.clone() }).await.expect("delete");
    assert!(api.sc.store.job_events(&id, None, 100).await.expect("read").is_empty(), "events deleted with the job");
    let e = api.jobs().get_job(pb::GetJobRequest { id: id.clone(), config_version: None }).await.expect_err("deleted");
    assert_eq!(e.code(), Code::NotFound);
    api.stop().await;
}

/// A change to a valid spec that should make it invalid.
type Edit = Box<dyn Fn(&mut pb::JobSpec)>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_specs_are_rejected_naming_the_field_and_nothing_is_stored() {
    let api = Api::start(1).await;
    let before = api.query_ids().await;
    let cases: Vec<(&str, Edit, Code, &str)> = vec![
        ("no default task", Box::new(|s| s.default_task = None), Code::InvalidArgument, "spec.default_task"),
        ("kind unset", Box::new(|s| s.kind = 0), Code::InvalidArgument, "spec.kind"),
        (
            "zero cpu",
            Box::new(|s| {
                if let Some(t) = s.default_task.as_mut() {
                    t.resources = Some(pb::Resources { cpu_millis: 0, memory_mib: 64, ..Default::default() });
                }
            }),
            Code::InvalidArgument,
            "spec.default_task.resources.cpu_millis",
        ),
        (
            "empty constraint",
            Box::new(|s| {
                if let Some(t) = s.default_task.as_mut() {
                    t.constraints = vec![pb::Constraint { kind: None }];
                }
            }),
            Code::InvalidArgument,
            "spec.default_task.constraints[0]",
        ),
        (
            "empty command",
            Box::new(|s| {
                if let Some(t) = s.default_task.as_mut() {
                    t.command.clear();
                }
            }),
            Code::InvalidArgument,
            "spec.default_task.command",
        ),
        ("no name", Box::new(|s| s.name.clear()), Code::InvalidArgument, "spec.name"),
        ("unknown pool", Box::new(|s| s.pool = "/nope".into()), Code::InvalidArgument, "spec.pool"),
        ("interior pool", Box::new(|s| s.pool = "/".into()), Code::InvalidArgument, "spec.pool"),
        (
            "gang above instances",
            Box::new(|s| {
                if let Some(sla) = s.sla.as_mut() {
                    sla.min_running_instances = Some(5);
                }
            }),
            Code::InvalidArgument,
            "spec.sla.min_running_instances",
        ),
    ];
    for (name, edit, code, field) in cases {
        let mut wire = spec(JobKind::Batch, 2);
        edit(&mut wire);
        let e = api.jobs().create_job(pb::CreateJobRequest { spec: Some(wire) }).await.expect_err(name);
        assert_eq!(e.code(), code, "{name}: {e:?}");
        assert!(e.message().starts_with(&format!("{field}:")), "{name}: `{}` should name {field}", e.message());
    }
    let e = api.jobs().create_job(pb::CreateJobRequest { spec: None }).await.expect_err("no spec");
    assert!(e.message().starts_with("spec:"), "{}", e.message());
    assert_eq!(api.query_ids().await, before, "no rejected job was stored");

    let e =
        api.jobs().get_job(pb::GetJobRequest { id: String::new(), config_version: None }).await.expect_err("empty id");
    assert_eq!((e.code(), e.message().starts_with("id:")), (Code::InvalidArgument, true));
    let e =
        api.jobs().kill_job(pb::KillJobRequest { id: "missing".into(), instances: vec![] }).await.expect_err("unknown");
    assert_eq!(e.code(), Code::NotFound);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_running_stateless_job_kills_every_instance() {
    let api = Api::start(2).await;
    let mut config = job(JobKind::Stateless, 3);
    config.default_task.health_check = Some(support::health());
    let id = api.create(paceline_api::convert::job_spec_pb(&config)).await;
    let mut running = false;
    for _ in 0..200 {
        api.sc.step(250).await;
        let tasks = api.tasks_in(&id).await;
        if all_in(&tasks, pb::TaskState::Running) && tasks.iter().all(|t| t.healthy.is_some()) {
            running = true;
            break;
        }
    }
    assert!(running, "all instances ran with a health result: {:?}", api.tasks_in(&id).await);
    assert!(api.tasks_in(&id).await.iter().all(|t| t.healthy == Some(true)), "health as the host reported it");
    let e = api.jobs().delete_job(pb::DeleteJobRequest { id: id.clone() }).await.expect_err("live job");
    assert_eq!(e.code(), Code::FailedPrecondition);

    // One instance restarted (a new run), one killed; the rest keep running.
    api.tasks().restart_task(pb::TaskRef { job_id: id.clone(), instance: 0 }).await.expect("restart task");
    api.tasks().kill_task(pb::TaskRef { job_id: id.clone(), instance: 1 }).await.expect("kill task");
    let mut settled = false;
    for _ in 0..200 {
        api.sc.step(250).await;
        let t = api.tasks_in(&id).await;
        if t[0].run >= 2 && t[0].state == pb::TaskState::Running as i32 && t[1].state == pb::TaskState::Killed as i32 {
            settled = true;
            break;
        }
    }
    assert!(settled, "instance 0 restarted, 1 killed: {:?}", api.tasks_in(&id).await);
    assert_eq!(api.tasks_in(&id).await[2].state, pb::TaskState::Running as i32);
    let e = api.tasks().kill_task(pb::TaskRef { job_id: String::new(), instance: 0 }).await.expect_err("no job id");
    assert!(e.message().starts_with("task.job_id:"), "{}", e.message());

    let e = api.jobs().kill_job(pb::KillJobRequest { id: id.clone(), instances: vec![0, 7] }).await.expect_err("range");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("instances[1]:"), "{}", e.message());
    api.jobs().kill_job(pb::KillJobRequest { id: id.clone(), instances: vec![] }).await.expect("kill");
    let mut killed = false;
    for _ in 0..200 {
        api.sc.step(250).await;
        if all_in(&api.tasks_in(&id).await, pb::TaskState::Killed) {
            killed = true;
            break;
        }
    }
    assert!(killed, "all instances killed: {:?}", api.tasks_in(&id).await);
    let job = api
        .jobs()
        .get_job(pb::GetJobRequest { id, config_version: None })
        .await
        .expect("get")
        .into_inner()
        .job
        .expect("job");
    assert_eq!(job.status.expect("status").state, pb::JobState::Killed as i32);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_dry_run_reports_the_diff_and_changes_nothing() {
    let api = Api::start(2).await;
    let id = api.create(spec(JobKind::Stateless, 2)).await;
    api.sc.step(250).await;
    let mut next = spec(JobKind::Stateless, 3);
    if let Some(t) = next.default_task.as_mut() {
        t.command = "serve2".into();
    }
    let dry = pb::UpdateJobRequest { id: id.clone(), spec: Some(next.clone()), update: None, dry_run: true };
    let diff = api.jobs().update_job(dry).await.expect("dry run").into_inner();
    assert_eq!(diff.update_id, "");
    assert_eq!(diff.changed_instances, vec![0, 1]);
    assert_eq!(diff.added_instances, vec![2]);
    assert!(diff.removed_instances.is_empty());
    assert_eq!(diff.diff, vec![r#"command: "serve" → "serve2""#.to_string()]);
    let job = api
        .jobs()
        .get_job(pb::GetJobRequest { id: id.clone(), config_version: None })
        .await
        .expect("get")
        .into_inner()
        .job
        .expect("job");
    assert_eq!(job.status.expect("status").desired_config_version, 1, "a dry run changes nothing");
    assert!(job.update.is_none());

    let mut bad = next.clone();
    bad.kind = pb::JobKind::Batch as i32;
    let e = api
        .jobs()
        .update_job(pb::UpdateJobRequest { id: id.clone(), spec: Some(bad), update: None, dry_run: true })
        .await;
    assert_eq!(e.expect_err("kind change").code(), Code::InvalidArgument);

    // A real update, created paused through the request's override; then
    // resumed and aborted through the update controls.
    let paused = pb::UpdateSpec { batch_size: 1, start_paused: true, ..Default::default() };
    let real = pb::UpdateJobRequest { id: id.clone(), spec: Some(next), update: Some(paused), dry_run: false };
    let started = api.jobs().update_job(real).await.expect("update").into_inner();
    assert!(!started.update_id.is_empty());
    let job = api
        .jobs()
        .get_job(pb::GetJobRequest { id: id.clone(), config_version: None })
        .await
        .expect("get")
        .into_inner()
        .job
        .expect("job");
    assert_eq!(job.status.expect("status").desired_config_version, 2);
    let update = job.update.expect("update");
    assert_eq!((update.id.as_str(), update.state), (started.update_id.as_str(), pb::UpdateState::Paused as i32));
    let control = || pb::UpdateControlRequest { id: id.clone() };
    let resumed = api.jobs().resume_update(control()).await.expect("resume").into_inner().update.expect("update");
    assert_eq!(resumed.state, pb::UpdateState::RollingForward as i32);
    let e = api.jobs().resume_update(control()).await.expect_err("not paused");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let aborted = api.jobs().abort_update(control()).await.expect("abort").into_inner().update.expect("update");
    assert_eq!(aborted.state, pb::UpdateState::Aborted as i32);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_are_created_listed_updated_and_deleted_and_persisted() {
    let api = Api::start(1).await;
    let mut pools = api.pools();
    let spec = |cpu: u64| pb::PoolSpec {
        reservation: Some(pb::PerKind { cpu, memory: 1024, ..Default::default() }),
        limit: Some(pb::PerKind { cpu: 8_000, ..Default::default() }),
        ..Default::default()
    };
    pools.create_pool(pb::CreatePoolRequest { path: "/ml".into(), spec: Some(spec(2_000)) }).await.expect("create");
    pools
        .create_pool(pb::CreatePoolRequest { path: "/ml/train".into(), spec: Some(spec(1_000)) })
        .await
        .expect("child");

    let list = pools.list_pools(pb::ListPoolsRequest {}).await.expect("list").into_inner();
    let paths: Vec<&str> = list.pools.iter().map(|p| p.path.as_str()).collect();
    let at = |p: &str| paths.iter().position(|x| *x == p).unwrap_or(usize::MAX);
    assert!(at("/") < at("/ml") && at("/ml") < at("/ml/train") && at("/team") < usize::MAX, "{paths:?}");
    assert!(list.capacity.is_some_and(|c| c.cpu_millis > 0));
    let ml = list.pools.iter().find(|p| p.path == "/ml").expect("/ml");
    assert_eq!(ml.children, vec!["/ml/train".to_string()]);
    assert!(ml.entitlement.is_some() && ml.allocation.is_some() && ml.demand.is_some());
    let got = pools
        .get_pool(pb::GetPoolRequest { path: "/ml/train".into() })
        .await
        .expect("get")
        .into_inner()
        .pool
        .expect("pool");
    assert_eq!(
        got.spec.as_ref().and_then(|s| s.limit.as_ref()).map(|l| (l.cpu, l.memory)),
        Some((8_000, 0)),
        "0 is unlimited"
    );
    assert_eq!(got.spec.as_ref().map(|s| s.limited_kinds.clone()), Some(vec!["cpu".to_string()]), "cpu has a limit");

    // Reservation above the limit, a child reserving more than its parent,
    // a missing parent: each refused, naming what is wrong.
    let bad = pb::PoolSpec {
        reservation: Some(pb::PerKind { cpu: 9_000, ..Default::default() }),
        limit: Some(pb::PerKind { cpu: 1_000, ..Default::default() }),
        ..Default::default()
    };
    let e =
        pools.update_pool(pb::UpdatePoolRequest { path: "/ml".into(), spec: Some(bad) }).await.expect_err("bad spec");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("spec.reservation.cpu_millis:"), "{}", e.message());
    let e = pools
        .create_pool(pb::CreatePoolRequest { path: "/ml/big".into(), spec: Some(spec(5_000)) })
        .await
        .expect_err("over parent");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("reservation"), "{}", e.message());
    let e = pools
        .create_pool(pb::CreatePoolRequest { path: "/nope/x".into(), spec: Some(spec(0)) })
        .await
        .expect_err("no parent");
    assert!(e.message().contains("/nope"), "{}", e.message());
    let e =
        pools.create_pool(pb::CreatePoolRequest { path: "/ml".into(), spec: Some(spec(0)) }).await.expect_err("exists");
    assert_eq!(e.code(), Code::AlreadyExists);
    let e = pools.delete_pool(pb::DeletePoolRequest { path: "/ml".into() }).await.expect_err("has children");
    assert_eq!(e.code(), Code::FailedPrecondition);

    pools.update_pool(pb::UpdatePoolRequest { path: "/ml".into(), spec: Some(spec(3_000)) }).await.expect("update");
    let stored = paceline_api::restore_pools(api.sc.store.as_ref()).await.expect("restore");
    let stored_paths: Vec<&str> = stored.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(stored_paths, vec!["/ml", "/ml/train"], "parents first");
    assert_eq!(stored[0].1.reservation.cpu, 3_000, "the update was persisted");

    pools.delete_pool(pb::DeletePoolRequest { path: "/ml/train".into() }).await.expect("delete");
    let e = pools.get_pool(pb::GetPoolRequest { path: "/ml/train".into() }).await.expect_err("gone");
    assert_eq!(e.code(), Code::NotFound);
    let stored = paceline_api::restore_pools(api.sc.store.as_ref()).await.expect("restore");
    assert_eq!(stored.len(), 1);
    api.stop().await;
}

/// A task's GPU devices over the API (issue 28): two tasks of half a GPU on
/// one host of two devices share one device; `GetTask` and `ListTasks` say
/// which, as grant positions and as device indices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_shows_its_gpu_share_and_devices() {
    let gpu_host =
        paceline_hostmgr::sim::HostShape::new(1, "gpu", paceline_model::Resources::new(8_000, 8192, 100_000, 2_000))
            .attribute("zone", "a");
    let api = Api::start_on(vec![gpu_host]).await;
    let mut watch = WatchServiceClient::new(api.channel.clone());
    let request = pb::WatchRequest { kinds: vec!["task".into()], ..Default::default() };
    let mut stream = watch.watch(request).await.expect("watch").into_inner();
    let mut wire = spec(JobKind::Stateless, 2);
    if let Some(t) = wire.default_task.as_mut() {
        let r = t.resources.get_or_insert_with(Default::default);
        r.gpus = 0;
        r.gpu_milli = 500;
    }
    let id = api.create(wire).await;
    let running = api
        .sc
        .run_until(250, 200, async |c| {
            let info = c.cluster.jobs.get(&id).await.expect("job");
            info.tasks.iter().all(|t| t.state == paceline_model::task::TaskState::Running)
        })
        .await;
    assert!(running, "both shares run");
    let tasks = api.tasks_in(&id).await;
    assert_eq!(tasks.len(), 2);
    for t in &tasks {
        let g = t.gpu.as_ref().unwrap_or_else(|| panic!("task {} has its grant: {t:?}", t.instance));
        assert_eq!(g.milli_each, 500, "{t:?}");
        assert_eq!(g.devices.len(), 1, "{t:?}");
        // The simulated host's devices are numbered 0 and 1 in order.
        assert_eq!(t.gpu_device_indices, g.devices, "{t:?}");
    }
    assert_eq!(tasks[0].gpu, tasks[1].gpu, "two halves share one device: {tasks:?}");
    let one = api.tasks().get_task(pb::GetTaskRequest { task: task_ref(&id, 1) }).await.expect("get").into_inner();
    let one = one.task.expect("task");
    assert_eq!(one.gpu, tasks[1].gpu);
    assert_eq!(one.gpu_device_indices, tasks[1].gpu_device_indices);
    // The watch stream, opened before the job was created, names the same
    // devices (issue 48 item 3): each instance's last change carries them.
    let mut last: std::collections::BTreeMap<u32, pb::Task> = std::collections::BTreeMap::new();
    while last.len() < 2 || last.values().any(|t| t.gpu_device_indices.is_empty()) {
        let ev = tokio::time::timeout(Duration::from_secs(20), stream.message())
            .await
            .unwrap_or_else(|_| panic!("task changes with devices in time; last {last:?}"))
            .expect("stream")
            .expect("event");
        if let Some(pb::watch_event::Change::Task(t)) = ev.change {
            last.insert(t.instance, t);
        }
    }
    for t in &tasks {
        assert_eq!(last[&t.instance].gpu_device_indices, t.gpu_device_indices, "{:?}", last[&t.instance]);
    }
    // An open stream would hold the server's graceful stop.
    drop(stream);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_are_listed_drained_and_returned_to_service() {
    let api = Api::start(3).await;
    let mut hosts = api.hosts();
    let list = hosts.list_hosts(pb::ListHostsRequest {}).await.expect("list").into_inner().hosts;
    assert_eq!(list.len(), 3);
    assert!(list.iter().all(|h| h.provider == "sim" && h.state == pb::HostState::Up as i32 && h.reachable));
    assert_eq!(list[0].attributes.get("zone").map(String::as_str), Some("a"));
    assert!(list[0].total.as_ref().is_some_and(|t| t.cpu_millis == 4_000));
    let name = list[0].hostname.clone();

    let drained =
        hosts.drain_host(pb::DrainHostRequest { hostname: name.clone(), then_down: false }).await.expect("drain");
    let state = drained.into_inner().host.expect("host").state;
    assert!(state == pb::HostState::Draining as i32 || state == pb::HostState::Drained as i32, "{state}");
    api.sc.step(250).await;
    let up = hosts.up_host(pb::HostRef { hostname: name.clone() }).await.expect("up").into_inner();
    assert_eq!(up.host.expect("host").state, pb::HostState::Up as i32);

    let e = hosts.get_host(pb::GetHostRequest { hostname: "nope".into() }).await.expect_err("unknown");
    assert_eq!(e.code(), Code::NotFound);
    let e = hosts.down_host(pb::HostRef { hostname: name }).await.expect_err("an UP host cannot go down");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    api.stop().await;
}

fn upload(slot: &str, name: &str, version: &str, bytes: &[u8], chunk: usize) -> Vec<pb::DeployPluginRequest> {
    use pb::deploy_plugin_request::{Meta, Part};
    let meta = Meta {
        slot: slot.into(),
        name: name.into(),
        version: version.into(),
        size: bytes.len() as u64,
        skip_self_test: false,
        deadline_ms: 0,
        candidates: String::new(),
    };
    std::iter::once(pb::DeployPluginRequest { part: Some(Part::Meta(meta)) })
        .chain(bytes.chunks(chunk).map(|c| pb::DeployPluginRequest { part: Some(Part::Chunk(c.to_vec())) }))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_are_deployed_in_chunks_activated_and_rolled_back() {
    let api = Api::start(1).await;
    let mut plugins = api.plugins();
    let slot = "placement/batch";
    let active = async |p: &mut PluginServiceClient<Channel>| {
        let slots = p.list_plugins(pb::ListPluginsRequest {}).await.expect("list").into_inner().slots;
        slots.into_iter().find(|s| s.slot == slot).expect("slot")
    };
    let builtin = active(&mut plugins).await.active;
    assert!(!builtin.is_empty(), "the default plugin serves first");
    // The built-in lifecycles answer a burst of events in one call (WIT 0.1.1).
    let slots = plugins.list_plugins(pb::ListPluginsRequest {}).await.expect("list").into_inner().slots;
    let batched = |name: &str| {
        let s = slots.iter().find(|s| s.slot == name)?;
        s.versions.iter().find(|v| v.id == s.active).map(|v| v.batched)
    };
    assert_eq!(batched("lifecycle/batch"), Some(true), "{slots:?}");
    assert_eq!(batched("placement/batch"), Some(false), "{slots:?}");

    let bytes = paceline_plugin_artifacts::SPREAD;
    let chunk = bytes.len() / 5 + 1;
    let deployed =
        plugins.deploy_plugin(tokio_stream_iter(upload(slot, "spread", "v1", bytes, chunk))).await.expect("deploy");
    let deployed = deployed.into_inner();
    assert_eq!(deployed.id, "spread@v1");
    assert_eq!(deployed.sha256.len(), 64);
    let listed = active(&mut plugins).await;
    let v = listed.versions.iter().find(|v| v.id == "spread@v1").expect("listed");
    assert_eq!((v.state.as_str(), v.sha256.as_str()), ("deployed", deployed.sha256.as_str()));

    let after =
        plugins.activate_plugin(pb::PluginRef { slot: slot.into(), id: "spread@v1".into() }).await.expect("activate");
    assert_eq!(after.into_inner().active, "spread@v1");
    let back = plugins.rollback_plugin(pb::SlotRef { slot: slot.into() }).await.expect("rollback").into_inner();
    assert_eq!(back.active, builtin);

    let e =
        plugins.deploy_plugin(tokio_stream_iter(upload(slot, "spread", "v1", bytes, chunk))).await.expect_err("again");
    assert_eq!(e.code(), Code::AlreadyExists);

    // Garbage is refused before anything is stored.
    let e = plugins
        .deploy_plugin(tokio_stream_iter(upload(slot, "junk", "1", b"not wasm at all", 4)))
        .await
        .expect_err("garbage");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("WebAssembly"), "{}", e.message());
    let e = plugins
        .deploy_plugin(tokio_stream_iter(upload("placement/", "x", "1", bytes, chunk)))
        .await
        .expect_err("bad slot");
    assert!(e.message().starts_with("meta.slot:"), "{}", e.message());
    let mut no_meta = upload(slot, "x", "1", bytes, chunk);
    no_meta.remove(0);
    let e = plugins.deploy_plugin(tokio_stream_iter(no_meta)).await.expect_err("no meta");
    assert_eq!(e.code(), Code::InvalidArgument);
    let listed = active(&mut plugins).await;
    assert!(listed.versions.iter().all(|v| !v.id.starts_with("junk") && !v.id.starts_with("x@")), "nothing stored");

    // Validate checks without storing.
    let ok =
        plugins.validate_plugin(tokio_stream_iter(upload(slot, "spread", "v2", bytes, chunk))).await.expect("validate");
    assert_eq!(ok.into_inner().error, "");
    let bad = plugins
        .validate_plugin(tokio_stream_iter(upload(slot, "junk", "1", b"\0asm garbage", 64)))
        .await
        .expect("validate");
    assert!(!bad.into_inner().error.is_empty());
    let listed = active(&mut plugins).await;
    assert!(listed.versions.iter().all(|v| v.id != "spread@v2" && v.id != "candidate@0"), "validate stores nothing");

    let e =
        plugins.activate_plugin(pb::PluginRef { slot: slot.into(), id: "nope@1".into() }).await.expect_err("unknown");
    assert_eq!(e.code(), Code::NotFound);
    api.stop().await;
}

/// A request stream from a list of messages.
fn tokio_stream_iter(
    items: Vec<pb::DeployPluginRequest>,
) -> impl tonic::IntoStreamingRequest<Message = pb::DeployPluginRequest> {
    tonic::codegen::tokio_stream::iter(items)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_serving_and_watch_streams_job_changes() {
    let api = Api::start(1).await;
    let mut health = HealthClient::new(api.channel.clone());
    for service in ["", "paceline.v1.JobService", "paceline.v1.PluginService", "paceline.v1.WatchService"] {
        let r = health.check(HealthCheckRequest { service: service.into() }).await.expect("health").into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service}");
    }

    let mut watch = WatchServiceClient::new(api.channel.clone());
    let request = pb::WatchRequest { from_revision: 0, job_id: String::new(), kinds: vec!["job".into()] };
    let mut events = watch.watch(request).await.expect("watch").into_inner();
    // Let the stream take its first look before the job exists.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let id = api.create(spec(JobKind::Batch, 1)).await;
    let event = tokio::time::timeout(Duration::from_secs(10), events.message())
        .await
        .expect("an event in time")
        .expect("stream")
        .expect("event");
    assert!(event.revision > 0);
    match event.change {
        Some(pb::watch_event::Change::Job(j)) => assert_eq!(j.id, id),
        other => panic!("expected a job change, got {other:?}"),
    }
    let stale = pb::WatchRequest { from_revision: event.revision + 100, ..Default::default() };
    assert_eq!(watch.watch(stale).await.expect_err("not held").code(), Code::OutOfRange);
    let e =
        watch.watch(pb::WatchRequest { kinds: vec!["host".into()], ..Default::default() }).await.expect_err("bad kind");
    assert_eq!(e.code(), Code::InvalidArgument);
    drop(events);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_from_a_revision_without_gaps() {
    let api = Api::start(1).await;
    let mut watch = WatchServiceClient::new(api.channel.clone());
    let all = pb::WatchRequest { kinds: vec!["job".into(), "task".into()], ..Default::default() };
    let mut live = watch.watch(all.clone()).await.expect("watch").into_inner();
    let id = api.create(spec(JobKind::Batch, 2)).await;
    // The simulated cluster moves only when stepped: place and launch.
    api.sc.run_until(100, 20, async |c| c.job_state(&id).await != paceline_model::job::JobState::Pending).await;
    // Every change of the job as it runs: revisions strictly increase.
    let mut seen: Vec<(u64, String)> = Vec::new();
    let mut task_states = std::collections::BTreeSet::new();
    while seen.len() < 6 {
        let ev = tokio::time::timeout(Duration::from_secs(20), live.message())
            .await
            .unwrap_or_else(|_| panic!("6 changes in time; seen {seen:?}"))
            .expect("stream")
            .expect("event");
        if let Some(last) = seen.last() {
            assert!(ev.revision > last.0, "revisions increase: {} after {}", ev.revision, last.0);
        }
        let what = match ev.change {
            Some(pb::watch_event::Change::Job(j)) => format!("job {}", j.id),
            Some(pb::watch_event::Change::Task(t)) => {
                assert_eq!(t.job_id, id);
                task_states.insert(t.state);
                format!("task {}/{}", t.job_id, t.instance)
            }
            other => panic!("only jobs and tasks asked for: {other:?}"),
        };
        seen.push((ev.revision, what));
    }
    assert!(
        seen.iter().any(|(_, w)| w.starts_with("job")) && seen.iter().any(|(_, w)| w.starts_with("task")),
        "{seen:?}"
    );
    // A second watcher resuming after the first event gets the same changes
    // with the same revisions, none missing.
    let resume = pb::WatchRequest { from_revision: seen[0].0, ..all };
    let mut again = watch.watch(resume).await.expect("resume").into_inner();
    for (revision, what) in &seen[1..] {
        let ev = tokio::time::timeout(Duration::from_secs(10), again.message())
            .await
            .expect("in time")
            .expect("stream")
            .expect("event");
        assert_eq!(ev.revision, *revision, "{what}");
    }
    drop((live, again));
    api.stop().await;
}
