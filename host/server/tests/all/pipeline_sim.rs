//! Issue 8's scenarios end to end: the job manager, resource manager,
//! placement engine and host manager joined by `paceline_server::cluster`, running
//! the built-in Wasm policies, on simulated hosts whose runs are scripted by
//! their environment (`SIM_*`, see `paceline_hostmgr` docs).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use paceline_jobmgr::UpdateRequest;
use paceline_model::host::MaintenanceState;
use paceline_model::job::{JobKind, JobState, UpdateSpec, UpdateState};
use paceline_model::task::{RestartPolicy, TaskState, VolumeSpec};
use support::*;

fn running(info: &paceline_jobmgr::JobInfo) -> usize {
    info.tasks.iter().filter(|t| t.state == TaskState::Running).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_instances_that_fail_once_are_retried_and_the_job_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(3)).await;
    let mut spec = job(JobKind::Batch, 4);
    spec.default_task.env.insert("SIM_DURATION_MS".into(), "2000".into());
    spec.default_task.restart_policy =
        RestartPolicy { on_failure: true, max_restarts: Some(3), ..RestartPolicy::default() };
    // Instances 0 and 1 fail their first run.
    for i in 0..2 {
        let mut t = spec.default_task.clone();
        t.env.insert("SIM_FAIL_RUNS".into(), "1".into());
        spec.instance_overrides.insert(i, t);
    }
    c.cluster.jobs.create("retry", spec).await.expect("create");
    let done = c.run_until(250, 400, async |c| c.job_state("retry").await.is_terminal()).await;
    assert!(done, "the job finished");
    let info = c.cluster.jobs.get("retry").await.expect("job");
    assert_eq!(info.runtime.state, JobState::Succeeded);
    let runs: Vec<u64> = info.tasks.iter().map(|t| t.run).collect();
    assert_eq!(runs, vec![2, 2, 1, 1], "two retried instances, two first-time successes");
    let events = c.cluster.jobs.task_events("retry", 0).await.expect("events");
    assert!(events.iter().any(|e| e.run == 1 && e.to == TaskState::Failed), "the failed run is in the history");
    assert!(events.iter().any(|e| e.run == 2 && e.to == TaskState::Succeeded));
    assert!(events.iter().all(|e| e.host.as_deref().is_none_or(|h| h.starts_with("sim"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_job_that_spends_its_failure_budget_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(2)).await;
    let mut spec = job(JobKind::Batch, 2);
    spec.default_task.env.insert("SIM_EXIT_CODE".into(), "3".into());
    spec.default_task.restart_policy =
        RestartPolicy { on_failure: true, max_restarts: Some(1), ..RestartPolicy::default() };
    c.cluster.jobs.create("doomed", spec).await.expect("create");
    let done = c.run_until(250, 400, async |c| c.job_state("doomed").await.is_terminal()).await;
    assert!(done);
    let info = c.cluster.jobs.get("doomed").await.expect("job");
    assert_eq!(info.runtime.state, JobState::Failed);
    assert!(info.tasks.iter().any(|t| t.failure_count >= 2), "one instance spent its budget: {:?}", info.tasks);
}

fn service(n: u32) -> paceline_model::job::JobConfig {
    let mut spec = job(JobKind::Stateless, n);
    spec.default_task.health_check = Some(health());
    spec.default_task.restart_policy = RestartPolicy { on_failure: true, backoff_secs: 1, ..RestartPolicy::default() };
    spec.update = UpdateSpec { batch_size: 2, max_failed_instances: 1, rollback_on_failure: true, start_paused: false };
    spec
}

async fn all_running(c: &SimCluster, id: &str, n: usize) -> bool {
    let info = c.cluster.jobs.get(id).await.expect("job");
    running(&info) == n
        && info.tasks.iter().filter(|t| t.state != TaskState::Killed && t.state != TaskState::Succeeded).count() == n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_to_an_unhealthy_version_stops_and_rolls_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(4)).await;
    c.cluster.jobs.create("web", service(10)).await.expect("create");
    assert!(c.run_until(250, 200, async |c| all_running(c, "web", 10).await).await, "10 instances up");

    let mut bad = service(10);
    bad.default_task.env.insert("SIM_UNHEALTHY".into(), "1".into());
    c.cluster.jobs.update("web", bad, UpdateRequest::default()).await.expect("update");
    let settled = c
        .run_until(250, 400, async |c| {
            c.cluster.jobs.get("web").await.expect("job").update.is_some_and(|u| u.state.is_terminal())
        })
        .await;
    assert!(settled, "the update ended");
    assert!(c.run_until(250, 200, async |c| all_running(c, "web", 10).await).await, "back to 10 running");
    let info = c.cluster.jobs.get("web").await.expect("job");
    let update = info.update.clone().expect("update");
    assert_eq!(update.state, UpdateState::RolledBack, "{}", update.message);
    assert!(info.tasks.iter().all(|t| t.config_version == 1), "every instance back on version 1");
    // Only the first batch (2 instances) ever ran the bad version.
    let touched: BTreeSet<u32> = (0..10).filter(|&i| info.tasks[i as usize].run > 1).collect();
    assert!(touched.len() <= 2, "only the first batch was touched: {touched:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_pauses_and_resumes_mid_way() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(4)).await;
    c.cluster.jobs.create("api", service(6)).await.expect("create");
    assert!(c.run_until(250, 200, async |c| all_running(c, "api", 6).await).await);
    let mut v2 = service(6);
    v2.default_task.args = vec!["--v2".into()];
    c.cluster.jobs.update("api", v2, UpdateRequest::default()).await.expect("update");
    c.cluster.jobs.pause_update("api").await.expect("pause");
    for _ in 0..40 {
        c.step(250).await;
    }
    let paused = c.cluster.jobs.get("api").await.expect("job");
    let on_v2 = paused.tasks.iter().filter(|t| t.config_version == 2).count();
    assert!(on_v2 <= 2, "at most the batch under way moved while paused: {on_v2}");
    assert_eq!(paused.update.as_ref().map(|u| u.state), Some(UpdateState::Paused));
    c.cluster.jobs.resume_update("api").await.expect("resume");
    let done = c
        .run_until(250, 400, async |c| {
            c.cluster.jobs.get("api").await.expect("job").update.is_some_and(|u| u.state == UpdateState::Succeeded)
        })
        .await;
    assert!(done, "the update finished after resuming");
    let info = c.cluster.jobs.get("api").await.expect("job");
    assert!(info.tasks.iter().all(|t| t.config_version == 2 && t.state == TaskState::Running));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_scales_down_and_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(4)).await;
    let mut spec = job(JobKind::Stateless, 10);
    spec.update.batch_size = 0;
    c.cluster.jobs.create("svc", spec.clone()).await.expect("create");
    assert!(c.run_until(250, 200, async |c| all_running(c, "svc", 10).await).await);
    for n in [4u32, 8] {
        let mut s = spec.clone();
        s.instance_count = n;
        c.cluster.jobs.update("svc", s, UpdateRequest::default()).await.expect("scale");
        let ok = c
            .run_until(250, 200, async |c| {
                let info = c.cluster.jobs.get("svc").await.expect("job");
                running(&info) == n as usize
            })
            .await;
        assert!(ok, "scaled to {n}");
    }
    let on_hosts: usize = c.cluster.hosts.hosts().iter().map(|h| h.runs.len()).sum();
    assert_eq!(on_hosts, 8, "the host side agrees: 8 runs hold resources");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_stateful_instance_keeps_its_host_and_volume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(4)).await;
    let mut spec = job(JobKind::Stateful, 2);
    spec.default_task.volume = Some(VolumeSpec { name: "data".into(), size_mib: 10 });
    c.cluster.jobs.create("db", spec).await.expect("create");
    assert!(c.run_until(250, 200, async |c| all_running(c, "db", 2).await).await);
    let before: Vec<Option<String>> =
        c.cluster.jobs.get("db").await.expect("job").tasks.iter().map(|t| t.host.clone()).collect();
    c.cluster.jobs.restart("db", None, 1).await.expect("restart");
    let ok = c
        .run_until(250, 400, async |c| {
            let info = c.cluster.jobs.get("db").await.expect("job");
            info.tasks.iter().all(|t| t.run == 2 && t.state == TaskState::Running)
        })
        .await;
    assert!(ok, "both instances restarted");
    let info = c.cluster.jobs.get("db").await.expect("job");
    let after: Vec<Option<String>> = info.tasks.iter().map(|t| t.host.clone()).collect();
    assert_eq!(before, after, "same hosts");
    assert!(info.config.default_task.volume.as_ref().is_some_and(|v| v.name == "data"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_follows_hosts_joining_and_draining() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(2)).await;
    let mut spec = job(JobKind::Daemon, 0);
    spec.update.batch_size = 0;
    c.cluster.jobs.create("agentd", spec).await.expect("create");
    let per_host = async |c: &SimCluster| -> BTreeMap<String, usize> {
        let info = c.cluster.jobs.get("agentd").await.expect("job");
        info.tasks.iter().filter(|t| t.state == TaskState::Running).filter_map(|t| t.host.clone()).fold(
            BTreeMap::new(),
            |mut m, h| {
                *m.entry(h).or_default() += 1;
                m
            },
        )
    };
    assert!(c.run_until(250, 200, async |c| per_host(c).await.len() == 2).await, "one per host");
    let mut labels = paceline_model::Labels::new();
    labels.insert("zone".into(), "a".into());
    c.sim.add_host("late", paceline_model::Resources::new(4_000, 8192, 100_000, 0), labels).await.expect("add");
    assert!(c.run_until(250, 200, async |c| per_host(c).await.contains_key("late")).await, "the new host got one");
    c.cluster.hosts.drain("sim00000").await.expect("drain");
    assert!(
        c.run_until(250, 200, async |c| !per_host(c).await.contains_key("sim00000")).await,
        "the drained host's instance went"
    );
    let hosts = per_host(&c).await;
    assert_eq!(hosts.values().copied().collect::<Vec<_>>(), vec![1, 1], "one on each remaining host: {hosts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_control_plane_resumes_the_update_without_double_launches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = SimCluster::start(dir.path(), shapes(4)).await;
    first.cluster.jobs.create("api", service(6)).await.expect("create");
    assert!(first.run_until(250, 200, async |c| all_running(c, "api", 6).await).await);
    let mut v2 = service(6);
    v2.default_task.args = vec!["--v2".into()];
    first.cluster.jobs.update("api", v2, UpdateRequest::default()).await.expect("update");
    // Part of the way: some instances on v2, some still on v1.
    let partway = first
        .run_until(1, 2_000, async |c| {
            let info = c.cluster.jobs.get("api").await.expect("job");
            let v2 = info.tasks.iter().filter(|t| t.config_version == 2 && t.state == TaskState::Running).count();
            (1..6).contains(&v2)
        })
        .await;
    assert!(partway, "the update got under way");
    let mid = first.cluster.jobs.get("api").await.expect("job");
    assert_eq!(mid.update.as_ref().map(|u| u.state), Some(UpdateState::RollingForward), "stopped mid-update");
    assert!(mid.tasks.iter().any(|t| t.config_version == 1), "some instances still on v1");
    let (sim, store, registry) = (first.sim.clone(), first.store.clone(), first.registry.clone());
    drop(first);
    let second = SimCluster::start_with(sim, store, registry).await;
    let done = second
        .run_until(250, 600, async |c| {
            c.cluster.jobs.get("api").await.expect("job").update.is_some_and(|u| u.state == UpdateState::Succeeded)
        })
        .await;
    if !done {
        let info = second.cluster.jobs.get("api").await.expect("job");
        eprintln!("update: {:?}", info.update);
        for t in &info.tasks {
            eprintln!(
                "task: {:?} run {} v{} host {:?} {} {}",
                t.state, t.run, t.config_version, t.host, t.reason, t.message
            );
        }
        for h in second.cluster.hosts.hosts() {
            eprintln!("host {} {:?} reachable {} runs {:?}", h.view.name, h.state, h.reachable, h.runs);
        }
    }
    assert!(done, "the update finished under the new control plane");
    let info = second.cluster.jobs.get("api").await.expect("job");
    assert!(info.tasks.iter().all(|t| t.config_version == 2 && t.state == TaskState::Running));
    // Each instance ran once on v1 and once on v2: runs 1 and 2, no more.
    assert!(
        info.tasks.iter().all(|t| t.run == 2),
        "no instance launched twice: {:?}",
        info.tasks.iter().map(|t| t.run).collect::<Vec<_>>()
    );
    assert_eq!(second.sim.run_count(), 6 + 6, "the hosts saw 12 runs in all");
}

/// A drain under way when the control plane restarts goes on under the new
/// one (decision 0046): the host manager restores DRAINING, and the job
/// manager, which keeps no record of drains, learns it from the inventory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_under_way_goes_on_after_the_control_plane_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = SimCluster::start(dir.path(), shapes(1)).await;
    let mut spec = service(4);
    spec.sla.max_unavailable_instances = Some(1);
    first.cluster.jobs.create("web", spec).await.expect("create");
    assert!(first.run_until(250, 200, async |c| all_running(c, "web", 4).await).await, "4 running on sim00000");
    let mut labels = paceline_model::Labels::new();
    labels.insert("zone".into(), "a".into());
    for name in ["b1", "b2"] {
        first
            .sim
            .add_host(name, paceline_model::Resources::new(4_000, 8192, 100_000, 0), labels.clone())
            .await
            .expect("add");
    }
    assert!(first.run_until(250, 20, async |c| c.cluster.hosts.host("b2").is_some_and(|h| h.reachable)).await);
    first.cluster.hosts.drain("sim00000").await.expect("drain");
    let on = async |c: &SimCluster, host: &str| {
        let info = c.cluster.jobs.get("web").await.expect("job");
        info.tasks.iter().filter(|t| t.state.is_on_host() && t.host.as_deref() == Some(host)).count()
    };
    // Part of the way: one instance moved, the others still there.
    let partway = first
        .run_until(1, 5_000, async |c| {
            let left = on(c, "sim00000").await;
            (1..4).contains(&left)
        })
        .await;
    assert!(partway, "the drain got under way");
    let (sim, store, registry) = (first.sim.clone(), first.store.clone(), first.registry.clone());
    drop(first);
    let second = SimCluster::start_with(sim, store, registry).await;
    let done = second
        .run_until(250, 400, async |c| {
            on(c, "sim00000").await == 0
                && all_running(c, "web", 4).await
                && c.cluster.hosts.host("sim00000").is_some_and(|h| h.state == MaintenanceState::Drained)
        })
        .await;
    let info = second.cluster.jobs.get("web").await.expect("job");
    assert!(
        done,
        "the drain finished under the new control plane: {:?}, host {:?}",
        info.tasks.iter().map(|t| (t.state, t.host.clone())).collect::<Vec<_>>(),
        second.cluster.hosts.host("sim00000").map(|h| h.state)
    );
}
