//! The engine against the real resource manager and the real plugin
//! registry (Wasm binpack deployed into the `placement/batch` slot). The
//! host side is a small lease table with the host manager's one-lease-per-host
//! rule, and the ready queue is the resource manager with a table of needs
//! that records each commit (the job manager's own commit is tested in
//! `host/jobmgr`); the end-to-end tests in `host/paceline` run the engine
//! against the real job manager and host manager.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use paceline_joints::{Committed, PortError, TaskHandle};
use paceline_model::job::JobKind;
use paceline_model::view::HostView;
use paceline_model::{Constraint, Labels, Resources, UnplacedReason};
use paceline_placement::{
    Engine, EngineConfig, Lease, LeaseId, LeaseRequest, Need, OfferSource, Placement, ReadyQueue, Taken,
};
use paceline_plugin::{DeployOptions, MemoryStore, PluginRuntime, Registry, RuntimeConfig};
use paceline_resmgr::{Config, GangSpec, PoolSpec, ResourceManager, TaskState, Transition};

fn broken(e: impl std::fmt::Display) -> PortError {
    PortError::unavailable(e.to_string())
}

/// Hosts with free capacity; a host is in at most one live lease.
#[derive(Default)]
struct Hosts {
    free: Mutex<BTreeMap<String, (Resources, Labels)>>,
    leased: Mutex<BTreeMap<u64, Vec<String>>>,
    leases_made: Mutex<u64>,
    requests: Mutex<Vec<LeaseRequest>>,
    /// When set, every lease fails with this (the host manager down, or refusing).
    failing: Mutex<Option<PortError>>,
}

#[async_trait]
impl OfferSource for Hosts {
    async fn lease(&self, request: &LeaseRequest) -> Result<Lease, PortError> {
        self.requests.lock().map_err(broken)?.push(request.clone());
        if let Some(e) = self.failing.lock().map_err(broken)?.clone() {
            return Err(e);
        }
        let free = self.free.lock().map_err(broken)?;
        let mut leased = self.leased.lock().map_err(broken)?;
        let busy: BTreeSet<&String> = leased.values().flatten().collect();
        let hosts: Vec<Arc<HostView>> = free
            .iter()
            .filter(|(name, (res, labels))| {
                !busy.contains(name)
                    && (request.only_hosts.is_empty() || request.only_hosts.contains(name))
                    && request.min_free.fits_in(res)
                    && request.constraints.iter().all(|c| match c {
                        Constraint::AttributeEquals { key, value } => labels.get(key) == Some(value),
                        _ => true,
                    })
            })
            .take(request.max_hosts)
            .map(|(name, (res, labels))| {
                Arc::new(HostView { attributes: labels.clone(), ..HostView::new(name.clone(), *res) })
            })
            .collect();
        let mut n = self.leases_made.lock().map_err(broken)?;
        *n += 1;
        leased.insert(*n, hosts.iter().map(|h| h.name.clone()).collect());
        Ok(Lease { id: LeaseId(*n), expires_at_ms: u64::MAX, hosts, job_hosts: None })
    }

    async fn release(&self, lease: LeaseId) -> Result<(), PortError> {
        self.leased.lock().map_err(broken)?.remove(&lease.0);
        Ok(())
    }
}

/// The ready queue: the resource manager, needs per job key, and a record
/// of what was committed (taking the capacity off the host, as a launch
/// through the host manager would).
struct Queue {
    rm: Arc<Mutex<ResourceManager>>,
    needs: BTreeMap<u64, Need>,
    hosts: Arc<Hosts>,
    launched: Mutex<Vec<(LeaseId, Placement)>>,
}

impl Queue {
    fn new(rm: &Arc<Mutex<ResourceManager>>, hosts: &Arc<Hosts>, needs: BTreeMap<u64, Need>) -> Arc<Queue> {
        Arc::new(Queue { rm: rm.clone(), needs, hosts: hosts.clone(), launched: Mutex::new(Vec::new()) })
    }
}

#[async_trait]
impl ReadyQueue for Queue {
    async fn take_ready(&self, kind: JobKind, max: usize, now_ms: u64) -> Result<Taken, PortError> {
        let mut ready = Vec::new();
        self.rm.lock().map_err(broken)?.take_ready(kind, max, now_ms, &mut ready);
        let mut taken = Taken::default();
        for t in ready {
            match self.needs.get(&t.job) {
                Some(n) => taken.ready.push((t, n.clone())),
                None => taken.orphans.push(t),
            }
        }
        Ok(taken)
    }

    async fn unplaced(&self, tasks: &[(TaskHandle, UnplacedReason)], now_ms: u64) -> Result<usize, PortError> {
        let mut rm = self.rm.lock().map_err(broken)?;
        Ok(tasks.iter().filter(|(id, r)| rm.placement_failed(*id, *r, now_ms).is_ok()).count())
    }

    async fn commit(&self, lease: LeaseId, placements: Vec<Placement>, now_ms: u64) -> Result<Committed, PortError> {
        let leased = self.hosts.leased.lock().map_err(broken)?.get(&lease.0).cloned().unwrap_or_default();
        let mut free = self.hosts.free.lock().map_err(broken)?;
        let mut rm = self.rm.lock().map_err(broken)?;
        let mut committed = Committed::default();
        for p in placements {
            if rm.transition(p.task.id, Transition::Placed, now_ms).is_err() {
                committed.dropped += 1;
                continue;
            }
            assert!(leased.contains(&p.host), "{} placed on {} outside lease {lease}", p.task.instance, p.host);
            let entry = free.get_mut(&p.host).expect("known host");
            assert!(p.task.resources.fits_in(&entry.0), "over capacity on {}", p.host);
            entry.0 = entry.0.saturating_sub(&p.task.resources);
            committed.launched += 1;
            self.launched.lock().map_err(broken)?.push((lease, p));
        }
        Ok(committed)
    }
}

fn registry() -> Arc<Registry> {
    let runtime = Arc::new(PluginRuntime::new(RuntimeConfig::default()).expect("runtime"));
    let registry = Arc::new(Registry::open(runtime, Arc::new(MemoryStore::default())).expect("registry"));
    registry
        .deploy("placement/batch", "binpack", "1", paceline_plugin_artifacts::BINPACK, DeployOptions::default())
        .expect("deploys");
    registry.activate("placement/batch", "binpack@1").expect("activates");
    registry
}

fn resmgr() -> Arc<Mutex<ResourceManager>> {
    let mut rm = ResourceManager::new(Config::default());
    rm.set_capacity(Resources::new(64_000, 256 * 1024, 1 << 20, 8_000));
    let mut spec = PoolSpec::default();
    spec.reservation.cpu = 64_000;
    spec.reservation.memory = 256 * 1024;
    spec.share.cpu = 1;
    rm.create_pool("/team", spec).expect("pool");
    Arc::new(Mutex::new(rm))
}

fn hosts(n: usize, cpu: u64, zone_of: impl Fn(usize) -> &'static str) -> Arc<Hosts> {
    let h = Hosts::default();
    {
        let mut free = h.free.lock().expect("hosts");
        for i in 0..n {
            let mut labels = Labels::new();
            labels.insert("zone".into(), zone_of(i).into());
            free.insert(format!("host-{i}"), (Resources::new(cpu, 8192, 10_000, 0), labels));
        }
    }
    Arc::new(h)
}

fn need(job_id: &str, constraints: Vec<Constraint>) -> Need {
    Need { job_id: job_id.into(), constraints, slot: "placement/batch".into(), ..Need::default() }
}

fn engine(
    _rm: &Arc<Mutex<ResourceManager>>,
    hosts: &Arc<Hosts>,
    queue: &Arc<Queue>,
    registry: Arc<Registry>,
    config: EngineConfig,
) -> Engine {
    Engine::new(queue.clone(), hosts.clone(), registry, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_plugin_call_places_a_batch_and_every_lease_is_released() {
    let rm = resmgr();
    let hosts = hosts(4, 4_000, |_| "a");
    let jobs = Queue::new(&rm, &hosts, BTreeMap::from([(1, need("job-1", vec![]))]));
    {
        let mut rm = rm.lock().expect("rm");
        for i in 0..12 {
            let g = GangSpec {
                job: 1,
                first_instance: i,
                tasks: 1,
                per_task: Resources::new(1_000, 256, 0, 0),
                ..GangSpec::default()
            };
            rm.submit("/team", g, 0).expect("submits");
        }
        rm.tick(1);
    }
    let engine = engine(&rm, &hosts, &jobs, registry(), EngineConfig::default());
    let report = engine.run_round(2).await;
    assert_eq!(report.taken, 12);
    assert_eq!(report.placed, 12, "{report:?}");
    assert_eq!(report.plugin_calls, 1, "one call for the whole group");
    assert!(hosts.leased.lock().expect("leases").is_empty(), "leases released");
    let launched = jobs.launched.lock().expect("launched");
    let per_host: BTreeMap<&str, usize> = launched.iter().fold(BTreeMap::new(), |mut m, (_, p)| {
        *m.entry(p.host.as_str()).or_default() += 1;
        m
    });
    assert!(per_host.values().all(|&n| n <= 4), "capacity respected: {per_host:?}");
    let rm = rm.lock().expect("rm");
    for (_, p) in launched.iter() {
        assert_eq!(rm.task(p.task.id).map(|t| t.state), Some(TaskState::Placed));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_does_not_fit_is_sent_back_whole_with_a_reason() {
    let rm = resmgr();
    let hosts = hosts(2, 2_000, |_| "a");
    let jobs = Queue::new(&rm, &hosts, BTreeMap::from([(7, need("gang", vec![]))]));
    let gang;
    {
        let mut rm = rm.lock().expect("rm");
        // Five tasks of one core on four free cores: all or nothing.
        let g = GangSpec { job: 7, tasks: 5, per_task: Resources::new(1_000, 256, 0, 0), ..GangSpec::default() };
        gang = rm.submit("/team", g, 0).expect("submits");
        rm.tick(1);
    }
    let engine = engine(&rm, &hosts, &jobs, registry(), EngineConfig::default());
    let report = engine.run_round(2).await;
    assert_eq!((report.taken, report.placed, report.unplaced), (5, 0, 5), "{report:?}");
    assert!(jobs.launched.lock().expect("launched").is_empty(), "nothing of the gang launched");
    let mut rm = rm.lock().expect("rm");
    let _ = gang;
    // Backed off, then READY again: the tasks carry the policy's reason.
    assert_eq!(rm.take_ready(JobKind::Batch, 100, 3, &mut Vec::new()), 0, "still backing off");
    let mut again = Vec::new();
    rm.tick(600_000);
    rm.take_ready(JobKind::Batch, 100, 600_000, &mut again);
    assert_eq!(again.len(), 5, "the whole gang is queued again");
    for t in &again {
        let info = rm.task(t.id).expect("task");
        assert_eq!(info.attempts, 1);
        assert!(
            matches!(info.last_unplaced, Some(UnplacedReason::GangIncomplete | UnplacedReason::InsufficientResources)),
            "why pending: {:?}",
            info.last_unplaced
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_hard_constraints_filter_on_the_host_side_and_no_host_means_constraints_unsatisfiable() {
    let rm = resmgr();
    let hosts = hosts(4, 4_000, |i| if i < 2 { "a" } else { "b" });
    let zone_c = Constraint::AttributeEquals { key: "zone".into(), value: "c".into() };
    let zone_b = Constraint::AttributeEquals { key: "zone".into(), value: "b".into() };
    let jobs = Queue::new(
        &rm,
        &hosts,
        BTreeMap::from([(1, need("in-b", vec![zone_b.clone()])), (2, need("in-c", vec![zone_c]))]),
    );
    {
        let mut rm = rm.lock().expect("rm");
        for job in [1, 2] {
            let g = GangSpec { job, tasks: 1, per_task: Resources::new(1_000, 256, 0, 0), ..GangSpec::default() };
            rm.submit("/team", g, 0).expect("submits");
        }
        rm.tick(1);
    }
    let engine = engine(&rm, &hosts, &jobs, registry(), EngineConfig { batch_size: 1, ..EngineConfig::default() });
    // batch_size 1 → one task per round.
    let first = engine.run_round(2).await;
    let second = engine.run_round(3).await;
    assert_eq!(first.placed + second.placed, 1);
    assert_eq!(first.unplaced + second.unplaced, 1);
    let launched = jobs.launched.lock().expect("launched");
    assert_eq!(launched.len(), 1);
    assert!(launched[0].1.host == "host-2" || launched[0].1.host == "host-3", "zone b only: {:?}", launched[0].1.host);
    let requests = hosts.requests.lock().expect("requests");
    assert!(requests.iter().any(|r| r.constraints == vec![zone_b.clone()]), "the filter went to the host side");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_at_once_never_place_beyond_a_hosts_capacity() {
    let rm = resmgr();
    let hosts = hosts(3, 2_000, |_| "a");
    let jobs = Queue::new(&rm, &hosts, BTreeMap::from([(1, need("job-1", vec![]))]));
    {
        let mut rm = rm.lock().expect("rm");
        for i in 0..10 {
            let g = GangSpec {
                job: 1,
                first_instance: i,
                tasks: 1,
                per_task: Resources::new(1_000, 256, 0, 0),
                ..GangSpec::default()
            };
            rm.submit("/team", g, 0).expect("submits");
        }
        rm.tick(1);
    }
    let reg = registry();
    let config = EngineConfig { batch_size: 3, ..EngineConfig::default() };
    let a = Arc::new(engine(&rm, &hosts, &jobs, reg.clone(), config.clone()));
    let b = Arc::new(engine(&rm, &hosts, &jobs, reg, config));
    let mut placed = 0;
    for now in 2..6 {
        let (ra, rb) = tokio::join!(a.run_round(now), b.run_round(now));
        placed += ra.placed + rb.placed;
    }
    // Six cores in all: the queue's commit asserts no host goes over capacity.
    assert_eq!(placed, 6, "every free core used once, no more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_task_goes_to_its_host_or_nowhere() {
    let rm = resmgr();
    let hosts = hosts(4, 2_000, |_| "a");
    let pinned = Need { preferred_host: Some("host-3".into()), host_required: true, ..need("daemon", vec![]) };
    let jobs = Queue::new(&rm, &hosts, BTreeMap::from([(1, pinned)]));
    {
        let mut rm = rm.lock().expect("rm");
        for i in 0..2 {
            let g = GangSpec {
                job: 1,
                first_instance: i,
                tasks: 1,
                per_task: Resources::new(1_500, 256, 0, 0),
                ..GangSpec::default()
            };
            rm.submit("/team", g, 0).expect("submits");
        }
        rm.tick(1);
    }
    let engine = engine(&rm, &hosts, &jobs, registry(), EngineConfig::default());
    let report = engine.run_round(2).await;
    // host-3 has room for one of the two; the other must not spill to host-0..2.
    assert_eq!((report.placed, report.unplaced), (1, 1), "{report:?}");
    let launched = jobs.launched.lock().expect("launched");
    assert_eq!(launched[0].1.host, "host-3");
    let requests = hosts.requests.lock().expect("requests");
    assert!(requests.iter().all(|r| r.only_hosts == vec!["host-3".to_string()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_host_manager_is_retried_shortly_and_counts_no_attempt() {
    let rm = resmgr();
    let hosts = hosts(2, 4_000, |_| "a");
    let jobs = Queue::new(&rm, &hosts, BTreeMap::from([(1, need("job-1", vec![]))]));
    {
        let mut rm = rm.lock().expect("rm");
        let g = GangSpec { job: 1, tasks: 2, per_task: Resources::new(1_000, 256, 0, 0), ..GangSpec::default() };
        rm.submit("/team", g, 0).expect("submits");
        rm.tick(1);
    }
    let engine = engine(&rm, &hosts, &jobs, registry(), EngineConfig::default());
    // Per instance: placement attempts and the last reason.
    let waits = |rm: &ResourceManager| -> Vec<Option<(u32, Option<UnplacedReason>)>> {
        (0..2).map(|i| rm.find_task(1, i).map(|t| (t.attempts, t.last_unplaced))).collect()
    };
    let retry = Config::default().timeouts.unreachable_retry_ms;

    // The host manager is down (failing over): the lease fails as unavailable.
    *hosts.failing.lock().expect("hosts") = Some(PortError::unavailable("host manager unreachable"));
    let report = engine.run_round(2).await;
    assert_eq!((report.taken, report.unplaced, report.port_errors), (2, 2, 1), "{report:?}");
    {
        let mut rm = rm.lock().expect("rm");
        let reason = Some(UnplacedReason::HostManagerUnreachable);
        assert_eq!(waits(&rm), vec![Some((0, reason)); 2], "no placement attempt counted");
        assert_eq!(rm.next_wake_ms(), Some(2 + retry), "due after the fixed retry delay, not a backoff");
        rm.tick(2 + retry);
    }
    // Up again but refusing: the same request would fail again, so that one
    // is an attempt and backs off.
    *hosts.failing.lock().expect("hosts") = Some(PortError::refused("no such lease"));
    let report = engine.run_round(2 + retry).await;
    assert_eq!((report.taken, report.unplaced), (2, 2), "retried after the delay: {report:?}");
    {
        let mut rm = rm.lock().expect("rm");
        let reason = Some(UnplacedReason::Deferred);
        assert_eq!(waits(&rm), vec![Some((1, reason)); 2]);
        assert_eq!(rm.next_wake_ms(), Some(2 + retry + 1_000), "the first backoff");
        rm.tick(2 + retry + 1_000);
    }
    *hosts.failing.lock().expect("hosts") = None;
    let report = engine.run_round(2 + retry + 1_000).await;
    assert_eq!(report.placed, 2, "{report:?}");
}

/// Submits `n` one-core tasks of `job` as singleton gangs and makes them ready.
fn submit_ones(rm: &Arc<Mutex<ResourceManager>>, job: u64, n: u32, at: u64) {
    let mut rm = rm.lock().expect("rm");
    for i in 0..n {
        let g = GangSpec {
            job,
            first_instance: i,
            tasks: 1,
            per_task: Resources::new(1_000, 256, 0, 0),
            ..GangSpec::default()
        };
        rm.submit("/team", g, at).expect("submits");
    }
    rm.tick(at + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_are_narrowed_unless_the_version_or_the_slot_says_otherwise() {
    let rm = resmgr();
    let hosts = hosts(300, 4_000, |_| "a");
    let needs = BTreeMap::from([(1, need("narrowed", vec![])), (2, need("every", vec![])), (3, need("slot", vec![]))]);
    let jobs = Queue::new(&rm, &hosts, needs);
    let registry = registry();
    let engine = engine(&rm, &hosts, &jobs, registry.clone(), EngineConfig::default());

    // Auto: 300 feasible hosts, 50 - 300/125 = 48% of them offered (144),
    // all tasks placed.
    submit_ones(&rm, 1, 10, 0);
    let report = engine.run_round(2).await;
    assert_eq!(report.placed, 10, "{report:?}");
    assert_eq!((report.hosts_feasible, report.hosts_offered), (300, 144), "{report:?}");

    // A version that declares it needs every host sees every host.
    registry
        .set_candidates("placement/batch", Some("binpack@1"), Some(paceline_plugin::Candidates::All))
        .expect("sets the version's");
    assert_eq!(registry.candidates("placement/batch"), paceline_plugin::Candidates::All);
    submit_ones(&rm, 2, 10, 10);
    let report = engine.run_round(12).await;
    assert_eq!(report.placed, 10, "{report:?}");
    // (Hosts binpack filled in the first round are no longer feasible.)
    assert!(report.hosts_feasible > 290, "{report:?}");
    assert_eq!(report.hosts_offered, report.hosts_feasible, "every feasible host: {report:?}");

    // The version's setting cleared, the slot's applies.
    registry.set_candidates("placement/batch", Some("binpack@1"), None).expect("clears");
    registry
        .set_candidates("placement/batch", None, Some(paceline_plugin::Candidates::Count(120)))
        .expect("sets the slot's");
    submit_ones(&rm, 3, 10, 20);
    let report = engine.run_round(22).await;
    assert_eq!(report.placed, 10, "{report:?}");
    assert_eq!(report.hosts_offered, 120, "{report:?}");
    let listed = registry.list().into_iter().find(|s| s.slot == "placement/batch").expect("listed");
    assert_eq!(
        (listed.slot_candidates, listed.candidates),
        (Some(paceline_plugin::Candidates::Count(120)), paceline_plugin::Candidates::Count(120))
    );
}
