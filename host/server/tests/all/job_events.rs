//! Job events (decision 0025) end to end: every role in one process over
//! simulated hosts, the built-in Wasm policies (and a hostile one), a real
//! SQLite file. Each source of events is driven for real and the events are
//! read back the way the API reads them (`JobManager::job_events`) and from
//! the store after the tick's flush.

use crate::support;

use std::sync::Arc;

use paceline_hostmgr::{HostManager, ManagerConfig, SimConfig, SimProvider};
use paceline_model::Resources;
use paceline_model::event::{EventReason, EventType, JobEvent};
use paceline_model::job::{JobKind, JobState};
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::task::TaskState;
use paceline_plugin::DeployOptions;
use paceline_server::cluster::{AssembleConfig, Cluster};
use paceline_storage::Store;
use paceline_storage::sqlite::SqliteStore;
use support::*;

async fn events(c: &SimCluster, id: &str) -> Vec<JobEvent> {
    c.cluster.jobs.job_events(id, None, 1_000).await.expect("events")
}

fn with(events: &[JobEvent], reason: EventReason) -> Vec<&JobEvent> {
    events.iter().filter(|e| e.reason == reason).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_too_big_to_fit_gets_one_deferred_warning_whose_count_grows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(2)).await;
    let mut spec = job(JobKind::Batch, 1);
    // Hosts have 4 cores; this task wants 8.
    spec.default_task.resources = Resources::new(8_000, 256, 10, 0);
    c.cluster.jobs.create("huge", spec).await.expect("create");
    for _ in 0..20 {
        c.step(250).await;
    }
    let first = events(&c, "huge").await;
    let deferred = with(&first, EventReason::Deferred);
    assert_eq!(deferred.len(), 1, "one event however many rounds: {first:?}");
    let d = deferred[0];
    assert_eq!((d.event_type, d.instance), (EventType::Warning, None));
    assert!(!d.message.is_empty() && !d.message.contains("TaskHandle"), "a reason, no handles: {}", d.message);
    let count = d.count;
    assert!(count >= 2, "seen in several rounds: {count}");
    for _ in 0..20 {
        c.step(250).await;
    }
    let later = events(&c, "huge").await;
    let again = with(&later, EventReason::Deferred);
    assert_eq!(again.len(), 1, "still one event: {later:?}");
    assert!(again[0].count > count, "its count grew: {} then {}", count, again[0].count);
    assert!(again[0].last_seen_ms > d.last_seen_ms && again[0].first_seen_ms == d.first_seen_ms);
    // The tick flushed it into the store: one row there too.
    let stored = c.store.job_events("huge", None, 100).await.expect("stored");
    assert_eq!(with(&stored, EventReason::Deferred).len(), 1, "{stored:?}");
    assert!(with(&stored, EventReason::Scheduled).is_empty(), "never scheduled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placed_tasks_are_scheduled_the_job_completes_and_submit_to_running_is_observed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(2)).await;
    let before = c.cluster.jobs.submit_to_running().count;
    let mut spec = job(JobKind::Batch, 2);
    spec.default_task.env.insert("SIM_DURATION_MS".into(), "1000".into());
    c.cluster.jobs.create("ok", spec).await.expect("create");
    assert!(c.run_until(250, 200, async |c| c.job_state("ok").await.is_terminal()).await);
    assert_eq!(c.job_state("ok").await, JobState::Succeeded);
    let all = events(&c, "ok").await;
    let scheduled = with(&all, EventReason::Scheduled);
    assert_eq!(scheduled.len(), 2, "one per task: {all:?}");
    for e in &scheduled {
        assert_eq!(e.event_type, EventType::Normal);
        assert!(e.message.starts_with("scheduled on host sim"), "{}", e.message);
    }
    let done = with(&all, EventReason::JobCompleted);
    assert_eq!(done.len(), 1, "{all:?}");
    assert_eq!(done[0].message, "job SUCCEEDED");
    assert!(with(&all, EventReason::Deferred).is_empty(), "placed at the first try: {all:?}");
    // One task's events only.
    let task1 = c.cluster.jobs.job_events("ok", Some(1), 100).await.expect("task 1");
    assert!(!task1.is_empty() && task1.iter().all(|e| e.instance == Some(1)), "{task1:?}");
    // Submit→running: once per task.
    let latency = c.cluster.jobs.submit_to_running();
    assert_eq!(latency.count - before, 2, "{latency:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_job_lists_ten_tasks_scheduled_and_killed_and_counts_the_rest_on_the_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(2)).await;
    let mut spec = job(JobKind::Batch, 14);
    spec.default_task.env.insert("SIM_DURATION_MS".into(), "600000".into());
    c.cluster.jobs.create("crowd", spec).await.expect("create");
    let running = async |c: &SimCluster| {
        c.cluster.jobs.get("crowd").await.expect("job").tasks.iter().all(|t| t.state == TaskState::Running)
    };
    assert!(c.run_until(250, 200, running).await, "all 14 run (16 fit)");
    let check = |all: &[JobEvent], reason: EventReason, verb: &str| {
        let of = with(all, reason);
        let listed: Vec<_> = of.iter().filter(|e| e.instance.is_some()).collect();
        assert_eq!(listed.len(), 10, "the first ten on their tasks: {of:?}");
        assert!(listed.iter().all(|e| e.message.starts_with(&format!("{verb} on host sim"))), "{listed:?}");
        let counted: Vec<_> = of.iter().filter(|e| e.instance.is_none()).collect();
        assert_eq!(counted.len(), 1, "{of:?}");
        assert_eq!(counted[0].count, 4, "the other four counted on the job: {:?}", counted[0]);
        assert!(counted[0].message.starts_with(&format!("more tasks {verb}")), "{}", counted[0].message);
    };
    check(&events(&c, "crowd").await, EventReason::Scheduled, "scheduled");
    c.cluster.jobs.kill("crowd", None).await.expect("kill");
    assert!(c.run_until(250, 200, async |c| c.job_state("crowd").await.is_terminal()).await);
    for _ in 0..8 {
        c.step(250).await;
    }
    check(&events(&c, "crowd").await, EventReason::Killed, "killed");
    // The tick flushed both crowds into the store as they are shown.
    let stored = c.store.job_events("crowd", None, 100).await.expect("stored");
    check(&stored, EventReason::Scheduled, "scheduled");
    check(&stored, EventReason::Killed, "killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_on_a_removed_host_is_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(2)).await;
    let mut spec = job(JobKind::Stateless, 1);
    spec.default_task.restart_policy.on_failure = true;
    c.cluster.jobs.create("svc", spec).await.expect("create");
    let running =
        async |c: &SimCluster| c.cluster.jobs.get("svc").await.expect("job").tasks[0].state == TaskState::Running;
    assert!(c.run_until(250, 100, running).await, "runs");
    let host = c.cluster.jobs.get("svc").await.expect("job").tasks[0].host.clone().expect("a host");
    c.sim.remove_host(&host).await.expect("removed");
    for _ in 0..8 {
        c.step(250).await;
    }
    let all = events(&c, "svc").await;
    let lost = with(&all, EventReason::Lost);
    assert_eq!(lost.len(), 1, "{all:?}");
    assert_eq!((lost[0].instance, lost[0].event_type), (Some(0), EventType::Warning));
    assert!(lost[0].message.contains(&host), "names the host: {}", lost[0].message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_plugin_that_traps_yields_plugin_fell_back_on_the_jobs_of_the_round() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(2)).await;
    let no_self_test = DeployOptions { self_test: false };
    c.registry
        .deploy("placement/batch", "bad", "1", paceline_plugin_artifacts::GUEST_PANIC, no_self_test)
        .expect("deploys");
    c.registry.activate("placement/batch", "bad@1").expect("activates");
    let mut spec = job(JobKind::Batch, 2);
    spec.default_task.env.insert("SIM_DURATION_MS".into(), "1000".into());
    c.cluster.jobs.create("victim", spec).await.expect("create");
    assert!(c.run_until(250, 200, async |c| c.job_state("victim").await.is_terminal()).await);
    assert_eq!(c.job_state("victim").await, JobState::Succeeded, "the fallback placed it");
    let all = events(&c, "victim").await;
    let fell = with(&all, EventReason::PluginFellBack);
    assert_eq!(fell.len(), 1, "{all:?}");
    let f = fell[0];
    assert_eq!((f.instance, f.event_type), (None, EventType::Warning));
    assert!(f.message.contains("bad@1") && f.message.contains("placement/batch"), "{}", f.message);
    assert!(!f.message.contains("hash"), "no internal identifiers: {}", f.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrower_preempted_for_an_underserved_pool_gets_preempted_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = Arc::new(SimProvider::new(SimConfig { shapes: shapes(2), ..SimConfig::default() }));
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("paceline.sqlite")).expect("sqlite"));
    let clock = sim.clock();
    let hosts = HostManager::builder(sim.clone())
        .store(store.clone())
        .clock(Arc::new(clock.clone()))
        .config(ManagerConfig { tick_interval: None, ..ManagerConfig::default() })
        .start()
        .await
        .expect("host manager");
    hosts.sync().await.expect("sync");
    let mut config = AssembleConfig { install_default_plugins: true, ..AssembleConfig::default() };
    config.resmgr.preempt_after_periods = 1;
    // Two pools, half the cluster (one 4-core host) reserved each, equal shares.
    let half = PerKind { cpu: 4_000, memory: 8_192, disk: 100_000, gpu: 0 };
    let share = PerKind { cpu: 1, memory: 1, disk: 1, gpu: 1 };
    let pools = move |rm: &mut paceline_resmgr::ResourceManager| {
        for p in ["/a", "/b"] {
            rm.create_pool(p, PoolSpec { reservation: half, share, ..PoolSpec::default() }).expect("pool");
        }
    };
    let registry = registry();
    let cluster = Cluster::assemble(store.clone(), registry.clone(), hosts, Arc::new(clock), config, pools)
        .await
        .expect("assemble");
    let c = SimCluster { cluster, sim, store, registry };

    let task = |pool: &str, n: u32, priority: u32, preemptible: bool| {
        let mut spec = job(JobKind::Batch, n);
        spec.pool = pool.into();
        spec.sla.priority = priority;
        spec.sla.preemptible = preemptible;
        spec.default_task.resources = Resources::new(1_000, 256, 10, 0);
        spec.default_task.env.insert("SIM_DURATION_MS".into(), "600000".into());
        spec
    };
    let running = async |c: &SimCluster, id: &str| {
        c.cluster.jobs.get(id).await.expect("job").tasks.iter().filter(|t| t.state == TaskState::Running).count()
    };
    c.cluster.jobs.create("borrower", task("/a", 8, 1, true)).await.expect("borrower");
    assert!(c.run_until(250, 200, async |c| running(c, "borrower").await == 8).await, "/a borrows all 8 cores");
    c.cluster.jobs.create("owner", task("/b", 4, 100, false)).await.expect("owner");
    assert!(c.run_until(250, 400, async |c| running(c, "owner").await == 4).await, "/b gets its cores back");
    let all = events(&c, "borrower").await;
    let preempted = with(&all, EventReason::Preempted);
    assert!(!preempted.is_empty(), "{all:?}");
    for e in &preempted {
        assert_eq!(e.event_type, EventType::Warning);
        assert!(e.instance.is_some(), "a task's event");
        assert!(e.message.starts_with("preempted on host sim"), "{}", e.message);
        assert!(e.message.contains("entitlement"), "says why: {}", e.message);
    }
    assert!(with(&events(&c, "owner").await, EventReason::Preempted).is_empty());
}
