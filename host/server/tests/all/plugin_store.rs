//! Plugin versions persisted through the storage gateway (SQLite): a
//! registry reopened on the same database finds every version, its bytes
//! and the active one.

use std::sync::Arc;

use paceline_plugin::{DeployOptions, PluginRuntime, Registry, RuntimeConfig, ServedBy, VersionState};
use paceline_server::wiring::StoreVersions;

#[test]
fn versions_and_activation_survive_a_restart_in_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("paceline.db");
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("tokio");
    let open = || {
        let store: Arc<dyn paceline_storage::Store> =
            Arc::new(paceline_storage::sqlite::SqliteStore::open(&db).expect("sqlite opens"));
        let versions = Arc::new(StoreVersions::new(store, tokio.handle().clone()));
        let runtime = Arc::new(PluginRuntime::new(RuntimeConfig::default()).expect("runtime"));
        Registry::open(runtime, versions).expect("registry opens")
    };
    {
        let reg = open();
        reg.deploy("placement/batch", "binpack", "1", paceline_plugin_artifacts::BINPACK, DeployOptions::default())
            .expect("deploys");
        reg.deploy("placement/batch", "spread", "1", paceline_plugin_artifacts::SPREAD, DeployOptions::default())
            .expect("deploys");
        reg.activate("placement/batch", "binpack@1").expect("activates");
        reg.activate("placement/batch", "spread@1").expect("activates");
    }
    let reg = open();
    assert_eq!(reg.active("placement/batch").expect("slot").as_deref(), Some("spread@1"));
    let slot = reg.list().into_iter().find(|s| s.slot == "placement/batch").expect("listed");
    let state = |id: &str| slot.versions.iter().find(|v| v.record.id() == id).map(|v| v.record.state);
    assert_eq!(state("spread@1"), Some(VersionState::Active));
    assert_eq!(state("binpack@1"), Some(VersionState::Retired));
    let req = paceline_plugin_sdk::types::PlacementRequest::default();
    assert_eq!(reg.place("placement/batch", &req).expect("answers").served_by, ServedBy::Version("spread@1".into()));
    assert_eq!(reg.rollback("placement/batch").expect("rolls back").as_deref(), Some("binpack@1"));
}
