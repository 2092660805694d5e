//! A whole cluster in one test process over a provider of real hosts (the
//! agent's port, a Mesos master, a Kubernetes API server): the real job,
//! resource and host managers and the default Wasm policies, wall-clock
//! time, one pool `/team` reserving far more than any test uses. Shared by
//! `drain_agents.rs`, `kubernetes.rs` and `mesos.rs`, which differ only in
//! the provider and the host manager's timing.

use std::sync::Arc;
use std::time::Duration;

use paceline_hostmgr::{HostManager, ManagerConfig, Provider};
use paceline_model::Resources;
use paceline_model::pool::{PerKind, PoolSpec};
use paceline_plugin::{MemoryStore, PluginRuntime, Registry, RuntimeConfig};
use paceline_server::cluster::{AssembleConfig, Cluster};
use paceline_storage::Store;

/// The cluster over `provider` with the host manager's `config`, host
/// records in `store`, and its loops running every 50 ms (the handle aborts
/// them).
pub async fn assemble(
    provider: Arc<dyn Provider>,
    store: Arc<dyn Store>,
    config: ManagerConfig,
) -> (Arc<Cluster>, tokio::task::JoinHandle<()>) {
    let hosts = HostManager::builder(provider).store(store.clone()).config(config).start().await.expect("hosts");
    let runtime = Arc::new(PluginRuntime::new(RuntimeConfig::default()).expect("runtime"));
    let registry = Arc::new(Registry::open(runtime, Arc::new(MemoryStore::default())).expect("registry"));
    let cluster = Cluster::assemble(
        store,
        registry,
        hosts,
        Arc::new(paceline_joints::SystemClock),
        AssembleConfig { install_default_plugins: true, ..AssembleConfig::default() },
        |rm| {
            rm.set_capacity(Resources::new(1_000_000, 1 << 30, 1 << 30, 0));
            let big = PerKind { cpu: 1_000_000, memory: 1 << 30, disk: 1 << 30, gpu: 0 };
            rm.create_pool("/team", PoolSpec { reservation: big, ..PoolSpec::default() }).expect("pool");
        },
    )
    .await
    .expect("cluster");
    let loops = cluster.spawn(Duration::from_millis(50));
    (cluster, loops)
}
