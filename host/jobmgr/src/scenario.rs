//! A reusable scenario harness: a [`RecordingLauncher`] that plays the host
//! side's launch and kill calls, and a [`Harness`] that plays placement
//! (first fit over a fixed host list, honouring preferred and required
//! hosts) and the hosts (feeding `RunUpdate`s back). The jobmgr tests use
//! it; the end-to-end tests can swap the launcher for the real host
//! manager and keep the scenario steps.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use async_trait::async_trait;
use paceline_joints::{Launcher, LeaseId, Placement, PortError, ReadyQueue, RunRefused};
use paceline_model::job::JobKind;
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::run::{LaunchRequest, RunState, RunUpdate};
use paceline_model::{Resources, UnplacedReason};
use paceline_plugin::Registry;
use paceline_resmgr::{Config, ResourceManager};
use paceline_storage::Store;

use crate::manager::{JobManager, JobManagerConfig};
use paceline_joints::ManualClock;

/// One launch the launcher saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launched {
    /// Offer lease.
    pub lease: LeaseId,
    /// Host.
    pub host: String,
    /// The request.
    pub run: LaunchRequest,
}

/// A [`Launcher`] that records every call and accepts them, except
/// launches on hosts listed in `refuse` (the whole batch) and runs of the
/// tasks listed in `refuse_tasks` (those runs alone).
#[derive(Debug, Default)]
pub struct RecordingLauncher {
    /// Launches, in order.
    pub launches: Mutex<Vec<Launched>>,
    /// Kills as (host, run id), in order.
    pub kills: Mutex<Vec<(String, String)>>,
    /// Hosts whose launches fail.
    pub refuse: Mutex<BTreeSet<String>>,
    /// Task ids (`<job>-<instance>`) whose runs are refused one by one, the
    /// rest of their batch launched.
    pub refuse_tasks: Mutex<BTreeSet<String>>,
}

impl RecordingLauncher {
    /// Every launch so far.
    pub fn launches(&self) -> Vec<Launched> {
        self.launches.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Every kill so far.
    pub fn kills(&self) -> Vec<(String, String)> {
        self.kills.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

fn poisoned(e: impl std::fmt::Display) -> PortError {
    PortError::unavailable(e.to_string())
}

#[async_trait]
impl Launcher for RecordingLauncher {
    async fn launch(&self, lease: LeaseId, host: &str, runs: Vec<LaunchRequest>) -> Result<Vec<RunRefused>, PortError> {
        if self.refuse.lock().map_err(poisoned)?.contains(host) {
            return Err(PortError::refused(format!("host {host} refused")));
        }
        let refuse_tasks = self.refuse_tasks.lock().map_err(poisoned)?;
        let mut refused = Vec::new();
        let mut l = self.launches.lock().map_err(poisoned)?;
        for run in runs {
            if refuse_tasks.contains(&run.task_id) {
                refused.push(RunRefused { run_id: run.run_id, reason: format!("task {} refused", run.task_id) });
                continue;
            }
            l.push(Launched { lease, host: host.to_string(), run });
        }
        Ok(refused)
    }

    /// Recorded with the host the run was launched on (empty if never launched).
    async fn kill(&self, run_id: &str, _grace: Option<Duration>) -> Result<(), PortError> {
        let host = self
            .launches
            .lock()
            .map_err(poisoned)?
            .iter()
            .rev()
            .find(|l| l.run.run_id == run_id)
            .map(|l| l.host.clone())
            .unwrap_or_default();
        self.kills.lock().map_err(poisoned)?.push((host, run_id.to_string()));
        Ok(())
    }
}

/// A resource manager with one leaf pool `/test` whose reservation covers
/// everything (so non-preemptible work is admitted) on a large cluster.
pub fn test_resmgr() -> ResourceManager {
    let mut rm = ResourceManager::new(Config::default());
    rm.set_capacity(Resources::new(1_000_000_000, 1_000_000_000, 1_000_000_000, 1_000));
    let big = PerKind { cpu: 1_000_000_000, memory: 1_000_000_000, disk: 1_000_000_000, gpu: 1_000 };
    let spec = PoolSpec { reservation: big, ..PoolSpec::default() };
    if let Err(e) = rm.create_pool("/test", spec) {
        tracing::error!(error = %e, "test pool");
    }
    rm
}

/// The job manager with a recording launcher, a manual clock, a real
/// resource manager; the test plays placement and the hosts.
pub struct Harness {
    /// The job manager under test.
    pub jm: Arc<JobManager>,
    /// Its resource manager.
    pub resmgr: Arc<Mutex<ResourceManager>>,
    /// The host side.
    pub launcher: Arc<RecordingLauncher>,
    /// Time.
    pub clock: Arc<ManualClock>,
    /// Hosts placement may use.
    pub hosts: Vec<String>,
    /// Per run: the last sequence number sent.
    seq: Mutex<BTreeMap<String, u64>>,
    /// Runs already reported as started / killed.
    reported: Mutex<BTreeSet<String>>,
    lease: Mutex<u64>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness").field("hosts", &self.hosts).finish_non_exhaustive()
    }
}

impl Harness {
    /// A harness over `store` and `registry`, starting at `clock_ms`.
    pub fn new(store: Arc<dyn Store>, registry: Arc<Registry>, hosts: &[&str], clock_ms: u64) -> Harness {
        let resmgr = Arc::new(Mutex::new(test_resmgr()));
        let launcher = Arc::new(RecordingLauncher::default());
        let clock = Arc::new(ManualClock::new(clock_ms));
        let jm = Arc::new(JobManager::new(
            store,
            resmgr.clone(),
            registry,
            launcher.clone(),
            clock.clone(),
            JobManagerConfig::default(),
        ));
        // As the wiring does: preemption asks the job's availability count.
        jm.install_availability_gate();
        Harness {
            jm,
            resmgr,
            launcher,
            clock,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            seq: Mutex::new(BTreeMap::new()),
            reported: Mutex::new(BTreeSet::new()),
            lease: Mutex::new(0),
        }
    }

    /// Opens a SQLite store at `path`.
    pub fn sqlite(path: &Path) -> Arc<dyn Store> {
        Arc::new(paceline_storage::sqlite::SqliteStore::open(path).expect("open sqlite store"))
    }

    /// Plays one placement round through the job manager's ready queue, as
    /// an engine does: ticks the resource manager, takes every READY task
    /// with its need, places each (required host, else preferred host, else
    /// the hosts in turn) and commits. Returns how many were committed.
    pub async fn place(&self) -> usize {
        let now = self.clock_now();
        let kills = self.resmgr.lock().expect("resmgr lock").tick(now).kills;
        // What the wiring does with the tick's kill requests (preemption victims).
        if !kills.is_empty() {
            self.jm.on_resmgr_kills(kills).await.expect("resmgr kills handled");
        }
        let mut placements = Vec::new();
        for kind in [JobKind::Batch, JobKind::Stateless, JobKind::Stateful, JobKind::Daemon] {
            let taken = self.jm.take_ready(kind, usize::MAX, now).await.expect("an in-process queue does not fail");
            let orphans: Vec<_> = taken.orphans.iter().map(|t| (t.id, UnplacedReason::Deferred)).collect();
            self.jm.unplaced(&orphans, now).await.expect("an in-process queue does not fail");
            for (n, (task, need)) in taken.ready.into_iter().enumerate() {
                let host = match &need.preferred_host {
                    Some(h) if need.host_required || self.hosts.contains(h) => h.clone(),
                    _ => self.hosts[(task.instance as usize + n) % self.hosts.len()].clone(),
                };
                placements.push(Placement { task, host, gpu: Default::default() });
            }
        }
        if placements.is_empty() {
            return 0;
        }
        let lease = {
            let mut l = self.lease.lock().expect("lease lock");
            *l += 1;
            LeaseId(*l)
        };
        let committed = self.jm.commit(lease, placements, now).await.expect("an in-process queue does not fail");
        (committed.launched + committed.refused) as usize
    }

    fn clock_now(&self) -> u64 {
        use paceline_joints::Clock;
        self.clock.now_ms()
    }

    /// Sends one run update for `run_id` (on the host it was launched on).
    pub async fn report(&self, run_id: &str, state: RunState, healthy: Option<bool>) {
        let host = self
            .launcher
            .launches()
            .iter()
            .rev()
            .find(|l| l.run.run_id == run_id)
            .map(|l| l.host.clone())
            .unwrap_or_default();
        let seq = {
            let mut s = self.seq.lock().expect("seq lock");
            let e = s.entry(run_id.to_string()).or_insert(0);
            *e += 1;
            *e
        };
        let (job, _, _) = paceline_model::RunId::split(run_id).unwrap_or(("", 0, 0));
        let u = RunUpdate {
            host,
            run_id: run_id.to_string(),
            task_id: job.to_string(),
            seq,
            state,
            healthy,
            exit_code: match state {
                RunState::Succeeded => Some(0),
                RunState::Failed => Some(1),
                _ => None,
            },
            signal: None,
            reason: match state {
                RunState::Killed => "KILLED_BY_REQUEST".into(),
                RunState::Lost => "HOST_LOST".into(),
                _ => "EXITED".into(),
            },
            message: String::new(),
            at_ms: self.clock_now(),
            ports: BTreeMap::new(),
        };
        self.jm.on_run_update(&u).await.expect("run update handled");
    }

    /// Reports RUNNING (with `healthy(run)` as health) for every launched run
    /// not yet reported, and KILLED for every kill not yet confirmed.
    /// Returns how many updates were sent.
    pub async fn settle_hosts(&self, healthy: &(dyn Fn(&LaunchRequest) -> Option<bool> + Sync)) -> usize {
        let mut sent = 0;
        for l in self.launcher.launches() {
            let fresh = self.reported.lock().expect("reported lock").insert(format!("start {}", l.run.run_id));
            if fresh {
                self.report(&l.run.run_id, RunState::Running, healthy(&l.run)).await;
                sent += 1;
            }
        }
        for (_, run) in self.launcher.kills() {
            let fresh = self.reported.lock().expect("reported lock").insert(format!("kill {run}"));
            if fresh {
                self.report(&run, RunState::Killed, None).await;
                sent += 1;
            }
        }
        sent
    }

    /// Places and settles until nothing moves (at most `rounds` rounds).
    pub async fn pump(&self, healthy: &(dyn Fn(&LaunchRequest) -> Option<bool> + Sync), rounds: usize) {
        for _ in 0..rounds {
            let placed = self.place().await;
            let sent = self.settle_hosts(healthy).await;
            if placed == 0 && sent == 0 {
                break;
            }
        }
    }

    /// Advances the clock by `ms` and fires due deadlines.
    pub async fn advance(&self, ms: u64) {
        let now = self.clock.advance(ms);
        self.jm.tick(now).await.expect("tick");
    }

    /// Launches per instance of `job` (instance → launch count).
    pub fn launch_counts(&self, job: &str) -> BTreeMap<u32, usize> {
        let mut m = BTreeMap::new();
        for l in self.launcher.launches() {
            if let Ok((j, i, _)) = paceline_model::RunId::split(&l.run.run_id)
                && j == job
            {
                *m.entry(i).or_insert(0) += 1;
            }
        }
        m
    }
}
