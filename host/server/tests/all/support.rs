//! A whole cluster in one test process: the real job manager, resource
//! manager, placement engine (Wasm policies) and host manager over the `sim`
//! provider, on one virtual clock, with a real SQLite file.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use paceline_hostmgr::{HostManager, HostShape, ManagerConfig, SimConfig, SimProvider};
use paceline_model::Resources;
use paceline_model::job::{JobConfig, JobKind, JobState};
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_model::task::{HealthCheck, TaskSpec};
use paceline_plugin::{MemoryStore, PluginRuntime, Registry, RuntimeConfig};
use paceline_server::cluster::{AssembleConfig, Cluster};
use paceline_storage::Store;
use paceline_storage::sqlite::SqliteStore;

/// A cluster over simulated hosts.
pub struct SimCluster {
    pub cluster: Arc<Cluster>,
    pub sim: Arc<SimProvider>,
    pub store: Arc<dyn Store>,
    pub registry: Arc<Registry>,
}

/// Leaf pool every test job uses; its reservation covers the hosts.
pub const POOL: &str = "/team";

pub fn registry() -> Arc<Registry> {
    let runtime = Arc::new(PluginRuntime::new(RuntimeConfig::default()).expect("runtime"));
    Arc::new(Registry::open(runtime, Arc::new(MemoryStore::default())).expect("registry"))
}

fn pools(rm: &mut paceline_resmgr::ResourceManager) {
    rm.set_capacity(Resources::new(1_000_000, 1 << 30, 1 << 30, 64_000));
    let big = PerKind { cpu: 1_000_000, memory: 1 << 30, disk: 1 << 30, gpu: 64_000 };
    rm.create_pool(POOL, PoolSpec { reservation: big, ..PoolSpec::default() }).expect("pool");
}

/// `n` simulated hosts of 4 cores and 8 GiB named `sim00000`…, zone a.
pub fn shapes(n: usize) -> Vec<HostShape> {
    vec![HostShape::new(n, "sim", Resources::new(4_000, 8192, 100_000, 0)).attribute("zone", "a")]
}

/// Two hosts in zone a (`sima…`) and one in zone b (`simb00000`), 4 cores
/// and 8 GiB each: a zone b task has one host to wait for.
pub fn two_zones() -> Vec<HostShape> {
    let total = Resources::new(4_000, 8192, 100_000, 0);
    vec![
        HostShape::new(2, "sima", total).attribute("zone", "a"),
        HostShape::new(1, "simb", total).attribute("zone", "b"),
    ]
}

impl SimCluster {
    /// Starts the simulator and every role on `dir/paceline.sqlite`.
    pub async fn start(dir: &Path, hosts: Vec<HostShape>) -> SimCluster {
        let sim = Arc::new(SimProvider::new(SimConfig { shapes: hosts, ..SimConfig::default() }));
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.join("paceline.sqlite")).expect("sqlite"));
        Self::start_with(sim, store, registry()).await
    }

    /// Every role over an existing simulator, store and registry (a restart
    /// of the control plane: the hosts keep running).
    pub async fn start_with(sim: Arc<SimProvider>, store: Arc<dyn Store>, registry: Arc<Registry>) -> SimCluster {
        let clock = sim.clock();
        let hosts = HostManager::builder(sim.clone())
            .store(store.clone())
            .clock(Arc::new(clock.clone()))
            .config(ManagerConfig { tick_interval: None, ..ManagerConfig::default() })
            .start()
            .await
            .expect("host manager");
        hosts.sync().await.expect("sync");
        let config = AssembleConfig { install_default_plugins: true, ..AssembleConfig::default() };
        let cluster = Cluster::assemble(store.clone(), registry.clone(), hosts, Arc::new(clock), config, pools)
            .await
            .expect("assemble");
        SimCluster { cluster, sim, store, registry }
    }

    /// Virtual now.
    pub fn now(&self) -> u64 {
        self.sim.now_ms()
    }

    /// Advances virtual time by `ms` in one step and runs every loop once.
    pub async fn step(&self, ms: u64) {
        self.sim.advance(ms).await;
        self.cluster.hosts.sync().await.expect("sync");
        self.cluster.hosts.tick().await;
        self.cluster.step(self.now()).await;
    }

    /// Steps `step_ms` at a time until `done` holds or `max_steps` pass; returns whether it held.
    pub async fn run_until(&self, step_ms: u64, max_steps: usize, mut done: impl AsyncFnMut(&Self) -> bool) -> bool {
        for _ in 0..max_steps {
            self.step(step_ms).await;
            if done(self).await {
                return true;
            }
        }
        false
    }

    /// The job's state.
    pub async fn job_state(&self, id: &str) -> JobState {
        self.cluster.jobs.get(id).await.expect("job").runtime.state
    }
}

/// A job of `n` instances of one small task in [`POOL`].
pub fn job(kind: JobKind, n: u32) -> JobConfig {
    JobConfig {
        name: "job".into(),
        owner: "team".into(),
        pool: POOL.into(),
        kind,
        instance_count: n,
        default_task: TaskSpec {
            command: "serve".into(),
            resources: Resources::new(500, 256, 10, 0),
            ..TaskSpec::default()
        },
        ..JobConfig::default()
    }
}

/// A command health check (the simulator reports healthy unless `SIM_UNHEALTHY=1`).
pub fn health() -> HealthCheck {
    HealthCheck {
        command: "check".into(),
        args: vec![],
        http: None,
        tcp: None,
        initial_delay_secs: 0,
        interval_secs: 1,
        timeout_secs: 1,
        max_consecutive_failures: 1,
    }
}
