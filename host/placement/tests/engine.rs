//! The engine against the real resource manager and the real plugin
//! registry (Wasm binpack deployed into the `placement/batch` slot). The host
//! side here is a small lease table with the host manager's one-lease-per-host
//! rule; the end-to-end tests in `host/paceline` run the engine against the
//! real host manager.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use paceline_model::task::TaskSpec;
use paceline_model::view::HostView;
use paceline_model::{Constraint, Labels, Resources};
use paceline_placement::{
    Engine, EngineConfig, Lease, LeaseRequest, Need, NeedSource, OfferError, OfferSource, Placement, PlacementSink,
};
use paceline_plugin::{DeployOptions, MemoryStore, PluginRuntime, Registry, RuntimeConfig};
use paceline_plugin_sdk::types::{JobKind, UnplacedReason};
use paceline_resmgr::{Config, GangSpec, PoolSpec, ResourceManager, TaskState};

/// Hosts with free capacity; a host is in at most one live lease.
#[derive(Default)]
struct Hosts {
    free: Mutex<BTreeMap<String, (Resources, Labels)>>,
    leased: Mutex<BTreeMap<String, Vec<String>>>,
    leases_made: Mutex<u64>,
    requests: Mutex<Vec<LeaseRequest>>,
}

#[async_trait]
impl OfferSource for Hosts {
    async fn lease(&self, request: &LeaseRequest) -> Result<Lease, OfferError> {
        self.requests.lock().map_err(|e| OfferError(e.to_string()))?.push(request.clone());
        let free = self.free.lock().map_err(|e| OfferError(e.to_string()))?;
        let mut leased = self.leased.lock().map_err(|e| OfferError(e.to_string()))?;
        let busy: BTreeSet<&String> = leased.values().flatten().collect();
        let hosts: Vec<HostView> = free
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
            .map(|(name, (res, labels))| HostView { attributes: labels.clone(), ..HostView::new(name.clone(), *res) })
            .collect();
        let mut n = self.leases_made.lock().map_err(|e| OfferError(e.to_string()))?;
        *n += 1;
        let id = format!("lease-{n}");
        leased.insert(id.clone(), hosts.iter().map(|h| h.name.clone()).collect());
        Ok(Lease { id, hosts })
    }

    async fn release(&self, lease_id: &str) {
        if let Ok(mut leased) = self.leased.lock() {
            leased.remove(lease_id);
        }
    }
}

/// The job side: specs per job key; records what it was asked to launch and
/// takes the capacity off the host (as a launch through the host manager would).
struct Jobs {
    specs: BTreeMap<u64, (String, TaskSpec)>,
    hosts: Arc<Hosts>,
    launched: Mutex<Vec<(String, Placement)>>,
    /// Pins every task to this host (as a daemon instance is).
    pin: Option<String>,
}

impl NeedSource for Jobs {
    fn need(&self, job_key: u64, _instance: u32) -> Option<Need> {
        let (id, spec) = self.specs.get(&job_key)?;
        Some(Need {
            job_id: id.clone(),
            spec: Arc::new(spec.clone()),
            preferred_host: self.pin.clone(),
            host_required: self.pin.is_some(),
            slot: "placement/batch".into(),
            avoid_host: None,
        })
    }
}

#[async_trait]
impl PlacementSink for Jobs {
    async fn placed(&self, lease_id: &str, placements: Vec<Placement>) {
        let leased = self.hosts.leased.lock().map(|l| l.get(lease_id).cloned().unwrap_or_default()).unwrap_or_default();
        let mut free = self.hosts.free.lock().expect("hosts");
        for p in &placements {
            assert!(leased.contains(&p.host), "{} placed on {} outside lease {lease_id}", p.task.instance, p.host);
            let entry = free.get_mut(&p.host).expect("known host");
            assert!(p.task.resources.fits_in(&entry.0), "over capacity on {}", p.host);
            entry.0 = entry.0.saturating_sub(&p.task.resources);
        }
        self.launched.lock().expect("launched").extend(placements.into_iter().map(|p| (lease_id.to_string(), p)));
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
    rm.set_capacity(Resources::new(64_000, 256 * 1024, 1 << 20, 8));
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

fn spec(cpu: u64, constraints: Vec<Constraint>) -> TaskSpec {
    TaskSpec { command: "true".into(), resources: Resources::new(cpu, 256, 0, 0), constraints, ..TaskSpec::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_plugin_call_places_a_batch_and_every_lease_is_released() {
    let rm = resmgr();
    let hosts = hosts(4, 4_000, |_| "a");
    let jobs = Arc::new(Jobs {
        specs: BTreeMap::from([(1, ("job-1".to_string(), spec(1_000, vec![])))]),
        hosts: hosts.clone(),
        launched: Mutex::new(Vec::new()),
        pin: None,
    });
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
    let engine = Engine::new(rm.clone(), registry(), hosts.clone(), jobs.clone(), EngineConfig::default());
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
    let jobs = Arc::new(Jobs {
        specs: BTreeMap::from([(7, ("gang".to_string(), spec(1_000, vec![])))]),
        hosts: hosts.clone(),
        launched: Mutex::new(Vec::new()),
        pin: None,
    });
    let gang;
    {
        let mut rm = rm.lock().expect("rm");
        // Five tasks of one core on four free cores: all or nothing.
        let g = GangSpec { job: 7, tasks: 5, per_task: Resources::new(1_000, 256, 0, 0), ..GangSpec::default() };
        gang = rm.submit("/team", g, 0).expect("submits");
        rm.tick(1);
    }
    let engine = Engine::new(rm.clone(), registry(), hosts.clone(), jobs.clone(), EngineConfig::default());
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
    let jobs = Arc::new(Jobs {
        specs: BTreeMap::from([
            (1, ("in-b".to_string(), spec(1_000, vec![zone_b.clone()]))),
            (2, ("in-c".to_string(), spec(1_000, vec![zone_c]))),
        ]),
        hosts: hosts.clone(),
        launched: Mutex::new(Vec::new()),
        pin: None,
    });
    {
        let mut rm = rm.lock().expect("rm");
        for job in [1, 2] {
            let g = GangSpec { job, tasks: 1, per_task: Resources::new(1_000, 256, 0, 0), ..GangSpec::default() };
            rm.submit("/team", g, 0).expect("submits");
        }
        rm.tick(1);
    }
    let engine = Engine::new(
        rm.clone(),
        registry(),
        hosts.clone(),
        jobs.clone(),
        EngineConfig { batch_size: 1, ..EngineConfig::default() },
    );
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
    let jobs = Arc::new(Jobs {
        specs: BTreeMap::from([(1, ("job-1".to_string(), spec(1_000, vec![])))]),
        hosts: hosts.clone(),
        launched: Mutex::new(Vec::new()),
        pin: None,
    });
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
    let a = Arc::new(Engine::new(rm.clone(), reg.clone(), hosts.clone(), jobs.clone(), config.clone()));
    let b = Arc::new(Engine::new(rm.clone(), reg, hosts.clone(), jobs.clone(), config));
    let mut placed = 0;
    for now in 2..6 {
        let (ra, rb) = tokio::join!(a.run_round(now), b.run_round(now));
        placed += ra.placed + rb.placed;
    }
    // Six cores in all: the Jobs sink asserts no host goes over capacity.
    assert_eq!(placed, 6, "every free core used once, no more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_task_goes_to_its_host_or_nowhere() {
    let rm = resmgr();
    let hosts = hosts(4, 2_000, |_| "a");
    let jobs = Arc::new(Jobs {
        specs: BTreeMap::from([(1, ("daemon".to_string(), spec(1_500, vec![])))]),
        hosts: hosts.clone(),
        launched: Mutex::new(Vec::new()),
        pin: Some("host-3".into()),
    });
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
    let engine = Engine::new(rm.clone(), registry(), hosts.clone(), jobs.clone(), EngineConfig::default());
    let report = engine.run_round(2).await;
    // host-3 has room for one of the two; the other must not spill to host-0..2.
    assert_eq!((report.placed, report.unplaced), (1, 1), "{report:?}");
    let launched = jobs.launched.lock().expect("launched");
    assert_eq!(launched[0].1.host, "host-3");
    let requests = hosts.requests.lock().expect("requests");
    assert!(requests.iter().all(|r| r.only_hosts == vec!["host-3".to_string()]));
}
