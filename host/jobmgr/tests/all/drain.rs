//! Drains and rolling updates share one count of unavailable instances per
//! job (decision 0046): an instance is unavailable until its health check
//! passes, and nothing takes a serving instance down while the job already
//! has `max_unavailable_instances` down. The hosts are played here with
//! health checks that pass a few steps after a run starts, and the count is
//! observed after every single update the job manager hears.

use std::collections::{BTreeMap, BTreeSet};

use paceline_jobmgr::UpdateRequest;
use paceline_jobmgr::scenario::Harness;
use paceline_model::job::{JobConfig, JobKind, UpdateSpec, UpdateState};
use paceline_model::run::RunState;
use paceline_model::task::TaskState;

use crate::common::*;

/// Steps between a run reaching RUNNING and its health check passing.
const HEALTH_DELAY: usize = 3;

fn web(n: u32) -> JobConfig {
    let mut c = config(JobKind::Stateless, n);
    c.default_task.health_check = Some(health());
    c.sla.max_unavailable_instances = Some(1);
    c.update = UpdateSpec { batch_size: 2, max_failed_instances: 1, rollback_on_failure: true, start_paused: false };
    c
}

/// Instances of `job` not RUNNING and healthy, as the job manager holds them.
fn down(h: &Harness, job: &str, n: u32) -> usize {
    (0..n)
        .filter(|&i| {
            h.jm.task_runtime(job, i).is_none_or(|rt| !(rt.state == TaskState::Running && rt.healthy == Some(true)))
        })
        .count()
}

/// Live instances of `job` by host (on a host and not ended).
fn by_host(h: &Harness, job: &str, n: u32) -> BTreeMap<String, Vec<u32>> {
    let mut m: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for i in 0..n {
        if let Some(rt) = h.jm.task_runtime(job, i)
            && rt.state.is_on_host()
            && let Some(host) = rt.host
        {
            m.entry(host).or_default().push(i);
        }
    }
    m
}

/// The hosts: a launched run reports RUNNING (health not yet known) at the
/// next step and healthy `HEALTH_DELAY` steps later; a kill is confirmed at
/// the next step.
#[derive(Default)]
struct Hosts {
    step: usize,
    started: BTreeMap<String, usize>,
    healthy: BTreeSet<String>,
    killed: BTreeSet<String>,
    /// Runs whose health check never passes.
    never: BTreeSet<String>,
    /// The most instances seen unavailable after any one update.
    worst: usize,
}

impl Hosts {
    async fn step(&mut self, h: &Harness, job: &str, n: u32) {
        self.step += 1;
        h.place().await;
        for l in h.launcher.launches() {
            let run = l.run.run_id.clone();
            if !self.started.contains_key(&run) && !self.killed.contains(&run) {
                self.started.insert(run.clone(), self.step);
                h.report(&run, RunState::Running, None).await;
                self.worst = self.worst.max(down(h, job, n));
            }
        }
        for (_, run) in h.launcher.kills() {
            if self.killed.insert(run.clone()) {
                h.report(&run, RunState::Killed, None).await;
                self.worst = self.worst.max(down(h, job, n));
            }
        }
        let due: Vec<String> = self
            .started
            .iter()
            .filter(|(run, at)| {
                self.step >= *at + HEALTH_DELAY && !self.killed.contains(*run) && !self.never.contains(*run)
            })
            .map(|(run, _)| run.clone())
            .collect();
        for run in due {
            if self.healthy.insert(run.clone()) {
                h.report(&run, RunState::Running, Some(true)).await;
                self.worst = self.worst.max(down(h, job, n));
            }
        }
    }

    /// Steps until every instance of `job` runs healthy (at most `max` steps).
    async fn settle(&mut self, h: &Harness, job: &str, n: u32, max: usize) {
        for _ in 0..max {
            self.step(h, job, n).await;
            if down(h, job, n) == 0 {
                return;
            }
        }
        panic!("{job} did not settle: {} down", down(h, job, n));
    }
}

/// Starts `job` (4 instances over h1..h3, two of them on one host) and returns
/// that host and the play so far.
async fn started(h: &Harness, job: &str, config: JobConfig) -> (String, Hosts) {
    let n = config.instance_count;
    h.jm.create(job, config).await.expect("create");
    let mut hosts = Hosts::default();
    hosts.settle(h, job, n, 30).await;
    let placed = by_host(h, job, n);
    let (crowded, _) = placed.iter().find(|(_, is)| is.len() == 2).expect("a host with two instances");
    (crowded.clone(), hosts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_takes_an_instance_down_only_once_the_last_is_healthy_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut h = harness(dir.path(), &["h1", "h2", "h3"]);
    let (drained, mut hosts) = started(&h, "web", web(4)).await;
    assert_eq!(h.jm.availability("web").map(|a| (a.unavailable, a.limit)), Some((0, 1)));
    hosts.worst = 0;

    // Placement no longer sees the draining host.
    h.hosts.retain(|x| *x != drained);
    h.jm.on_host_draining(&drained).await;
    hosts.worst = hosts.worst.max(down(&h, "web", 4));
    let first_kills = h.launcher.kills().len();
    assert_eq!(first_kills, 1, "one instance taken down at first: {:?}", h.launcher.kills());

    // The replacement runs, but is not healthy yet: the drain waits.
    for _ in 0..HEALTH_DELAY {
        hosts.step(&h, "web", 4).await;
        assert_eq!(
            h.launcher.kills().len(),
            1,
            "step {}: nothing more taken down before the replacement is healthy",
            hosts.step
        );
        assert!(by_host(&h, "web", 4).contains_key(&drained), "the drain is not over");
    }
    for _ in 0..20 {
        hosts.step(&h, "web", 4).await;
    }
    assert!(hosts.worst <= 1, "at most one instance unavailable at any moment; saw {}", hosts.worst);
    assert_eq!(down(&h, "web", 4), 0, "every instance runs healthy again");
    let placed = by_host(&h, "web", 4);
    assert!(!placed.contains_key(&drained), "the drain moved every instance: {placed:?}");
    assert_eq!(placed.values().map(Vec::len).sum::<usize>(), 4, "{placed:?}");
    let drain_kills = h.launcher.kills().iter().filter(|(host, _)| *host == drained).count();
    assert_eq!(drain_kills, 2, "{:?}", h.launcher.kills());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_during_a_rolling_update_shares_its_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut h = harness(dir.path(), &["h1", "h2", "h3"]);
    let (drained, mut hosts) = started(&h, "web", web(4)).await;
    hosts.worst = 0;
    let mut v2 = web(4);
    v2.default_task.args = vec!["v2".into()];
    h.jm.update("web", v2, UpdateRequest::default()).await.expect("update");
    hosts.worst = hosts.worst.max(down(&h, "web", 4));
    // The update's first instance is down; the drain starts beside it.
    hosts.step(&h, "web", 4).await;
    h.hosts.retain(|x| *x != drained);
    h.jm.on_host_draining(&drained).await;
    hosts.worst = hosts.worst.max(down(&h, "web", 4));
    for _ in 0..80 {
        hosts.step(&h, "web", 4).await;
    }
    assert!(
        hosts.worst <= 1,
        "the update and the drain together kept at most one instance unavailable; saw {}",
        hosts.worst
    );
    let job = h.jm.get("web").await.expect("get");
    let u = job.update.expect("update");
    assert_eq!(u.state, UpdateState::Succeeded, "{}", u.message);
    assert!(
        job.tasks.iter().all(|t| t.config_version == 2 && t.state == TaskState::Running && t.healthy == Some(true))
    );
    let placed = by_host(&h, "web", 4);
    assert!(!placed.contains_key(&drained), "the drain moved every instance: {placed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_replaces_an_instance_that_never_got_healthy_without_waiting_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2", "h3"]);
    h.jm.create("web", web(4)).await.expect("create");
    let mut hosts = Hosts::default();
    hosts.never.insert("web-1-1".into());
    for _ in 0..10 {
        hosts.step(&h, "web", 4).await;
    }
    assert_eq!(down(&h, "web", 4), 1, "instance 1 never passed its check");
    hosts.worst = 0;
    let mut v2 = web(4);
    v2.default_task.args = vec!["v2".into()];
    h.jm.update("web", v2, UpdateRequest::default()).await.expect("update");
    hosts.worst = hosts.worst.max(down(&h, "web", 4));
    // Instance 1 is down already, so replacing it costs nothing; a serving
    // instance waits until instance 1 is back.
    let kills: Vec<String> = h.launcher.kills().into_iter().map(|(_, run)| run).collect();
    assert_eq!(kills, vec!["web-1-1".to_string()], "only the instance already down is taken down first");
    for _ in 0..80 {
        hosts.step(&h, "web", 4).await;
    }
    assert!(hosts.worst <= 1, "never more than one unavailable; saw {}", hosts.worst);
    let job = h.jm.get("web").await.expect("get");
    assert_eq!(job.update.expect("update").state, UpdateState::Succeeded);
    assert!(
        job.tasks.iter().all(|t| t.config_version == 2 && t.state == TaskState::Running && t.healthy == Some(true))
    );
}

/// Issue 43's worst case: two hosts drained during a rolling update of 6
/// instances (it saw 4 of 6 down at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_drains_during_a_rolling_update_share_one_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut h = harness(dir.path(), &["h1", "h2", "h3", "h4"]);
    h.jm.create("web", web(6)).await.expect("create");
    let mut hosts = Hosts::default();
    hosts.settle(&h, "web", 6, 30).await;
    let placed = by_host(&h, "web", 6);
    let drained: Vec<String> = placed.keys().take(2).cloned().collect();
    assert_eq!(drained.len(), 2, "{placed:?}");
    hosts.worst = 0;
    let mut v2 = web(6);
    v2.default_task.args = vec!["v2".into()];
    h.jm.update("web", v2, UpdateRequest::default()).await.expect("update");
    hosts.step(&h, "web", 6).await;
    h.hosts.retain(|x| !drained.contains(x));
    for host in &drained {
        h.jm.on_host_draining(host).await;
        hosts.worst = hosts.worst.max(down(&h, "web", 6));
    }
    for _ in 0..150 {
        hosts.step(&h, "web", 6).await;
    }
    assert!(hosts.worst <= 1, "two drains and an update kept at most one of 6 unavailable; saw {}", hosts.worst);
    let job = h.jm.get("web").await.expect("get");
    assert_eq!(job.update.expect("update").state, UpdateState::Succeeded);
    assert!(
        job.tasks.iter().all(|t| t.config_version == 2 && t.state == TaskState::Running && t.healthy == Some(true))
    );
    let placed = by_host(&h, "web", 6);
    assert!(drained.iter().all(|d| !placed.contains_key(d)), "both drains moved every instance: {placed:?}");
}
