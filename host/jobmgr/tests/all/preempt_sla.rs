//! Preemption asks the same count of unavailable instances as drains and
//! updates (decision 0046): a stateless job with `max_unavailable_instances`
//! (with a health check, or without one) loses at most that many instances
//! to preemption at once, and
//! the pool claiming its share takes the rest from other jobs. The hosts
//! are played: a launched run reports RUNNING at the next step and healthy
//! at the one after; a kill is confirmed at the next step. The count is
//! observed after every update the job manager hears.

use std::collections::BTreeSet;

use paceline_jobmgr::scenario::Harness;
use paceline_model::Resources;
use paceline_model::job::{JobConfig, JobKind};
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::run::RunState;
use paceline_model::task::TaskState;

use crate::common::*;

/// Instances of `job` not RUNNING and healthy (health checked) or not
/// RUNNING (no check), as the job manager holds them.
fn down(h: &Harness, job: &str, n: u32, checked: bool) -> u32 {
    (0..n)
        .filter(|&i| {
            h.jm.task_runtime(job, i)
                .is_none_or(|rt| rt.state != TaskState::Running || (checked && rt.healthy != Some(true)))
        })
        .count() as u32
}

fn running(h: &Harness, job: &str, n: u32) -> u32 {
    n - down(h, job, n, false)
}

#[derive(Default)]
struct Hosts {
    /// Whether `web` has a health check (unavailable until healthy) or not
    /// (unavailable until RUNNING).
    checked: bool,
    started: BTreeSet<String>,
    healthy: BTreeSet<String>,
    killed: BTreeSet<String>,
    /// The most instances of `web` seen unavailable after any one update.
    worst: u32,
}

impl Hosts {
    async fn step(&mut self, h: &Harness) {
        h.place().await;
        let launches = h.launcher.launches();
        let mut fresh = Vec::new();
        for l in &launches {
            let run = l.run.run_id.clone();
            if !self.killed.contains(&run) && self.started.insert(run.clone()) {
                h.report(&run, RunState::Running, None).await;
                self.observe(h);
                fresh.push(run);
            }
        }
        for (_, run) in h.launcher.kills() {
            if self.killed.insert(run.clone()) {
                h.report(&run, RunState::Killed, None).await;
                self.observe(h);
            }
        }
        // Health passes one step after RUNNING, for runs with a check.
        let due: Vec<String> = launches
            .iter()
            .filter(|l| l.run.spec.health_check.is_some())
            .map(|l| l.run.run_id.clone())
            .filter(|r| self.started.contains(r) && !fresh.contains(r) && !self.killed.contains(r))
            .collect();
        for run in due {
            if self.healthy.insert(run.clone()) {
                h.report(&run, RunState::Running, Some(true)).await;
                self.observe(h);
            }
        }
    }

    fn observe(&mut self, h: &Harness) {
        self.worst = self.worst.max(down(h, "web", 4, self.checked));
    }
}

fn cpu_pool(cpu: u64) -> PoolSpec {
    PoolSpec { reservation: PerKind { cpu, ..PerKind::default() }, ..PoolSpec::default() }
}

fn job(kind: JobKind, pool: &str, priority: u32) -> JobConfig {
    let mut c = config(kind, 4);
    c.pool = pool.into();
    c.sla.priority = priority;
    c.sla.preemptible = true;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempt_sla_a_health_checked_service_loses_at_most_its_limit_and_the_claim_is_met_from_others() {
    service_under_preemption(true).await;
}

/// The same promise without a health check: `max_unavailable_instances`
/// alone holds preemption back (an instance is unavailable until RUNNING).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempt_sla_a_service_without_a_check_keeps_its_max_unavailable_too() {
    service_under_preemption(false).await;
}

async fn service_under_preemption(checked: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2", "h3", "h4"]);
    {
        // Room for 8 tasks of 100 millicores; /a and /b reserve half each.
        let mut rm = h.resmgr.lock().expect("resmgr lock");
        rm.set_capacity(Resources::new(800, 1_000_000, 1_000_000, 0));
        rm.create_pool("/a", cpu_pool(400)).expect("pool /a");
        rm.create_pool("/b", cpu_pool(400)).expect("pool /b");
    }
    // /a fills the cluster while /b asks for nothing: a service with a
    // health check and at most one instance down, at the lowest priority
    // (the policy's first choice), beside a batch job.
    let mut web = job(JobKind::Stateless, "/a", 0);
    if checked {
        web.default_task.health_check = Some(health());
    }
    web.sla.max_unavailable_instances = Some(1);
    h.jm.create("web", web).await.expect("create web");
    h.jm.create("other", job(JobKind::Batch, "/a", 1)).await.expect("create other");
    let mut hosts = Hosts { checked, ..Hosts::default() };
    for _ in 0..6 {
        hosts.step(&h).await;
    }
    assert_eq!(down(&h, "web", 4, checked), 0, "web serves on all four");
    assert_eq!(running(&h, "other", 4), 4);
    hosts.worst = 0;

    // /b claims its reservation: four tasks, room for which /a must give back.
    h.jm.create("claim", job(JobKind::Batch, "/b", 1)).await.expect("create claim");
    for _ in 0..40 {
        hosts.step(&h).await;
        if running(&h, "claim", 4) == 4 {
            break;
        }
    }
    assert!(hosts.worst <= 1, "web had {} of 4 unavailable at once (limit 1)", hosts.worst);
    assert_eq!(running(&h, "claim", 4), 4, "the claiming pool got its share");
    // One instance of web went (the policy's first pick); the rest came
    // from the batch job, whose instances are preempted as before.
    assert_eq!(down(&h, "web", 4, checked), 1);
    assert_eq!(running(&h, "other", 4), 1);
}
