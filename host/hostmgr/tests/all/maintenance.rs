//! Maintenance: UP → DRAINING → DRAINED → DOWN → UP, persisted.

use std::sync::Arc;

use paceline_hostmgr::{HostError, HostEvent, HostManager, SimProvider};
use paceline_model::host::MaintenanceState;
use paceline_model::run::RunState;
use paceline_storage::Store;
use paceline_storage::sqlite::SqliteStore;

use crate::support::*;

async fn next_state(events: &mut paceline_hostmgr::HostEvents) -> (MaintenanceState, Vec<String>) {
    loop {
        let ev =
            tokio::time::timeout(std::time::Duration::from_secs(5), events.recv()).await.expect("an event within 5 s");
        if let HostEvent::HostStateChanged { to, runs, .. } = ev.unwrap() {
            return (to, runs);
        }
    }
}

#[tokio::test]
async fn drain_down_up_is_persisted_and_restored() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("p.db")).unwrap());
    let sim = SimProvider::new(sim_config(2));
    let manager = HostManager::builder(Arc::new(sim.clone()))
        .clock(Arc::new(sim.clock()))
        .store(store.clone())
        .config(config())
        .start()
        .await
        .unwrap();
    manager.sync().await.unwrap();
    manager.expect_runs(Vec::new()).await;
    let mut events = manager.subscribe();

    let lease = lease_host(&manager, "h00000").await;
    manager.launch(lease, "h00000", vec![req("m-0-1", SMALL, &[("SIM_DURATION_MS", "100")])]).await.unwrap();
    manager.drain("h00000").await.unwrap();
    assert_eq!(next_state(&mut events).await, (MaintenanceState::Draining, vec!["m-0-1".to_string()]));
    assert!(matches!(
        manager.down("h00000").await,
        Err(HostError::InvalidTransition { from: MaintenanceState::Draining, .. })
    ));

    sim.advance(100).await;
    manager.sync().await.unwrap();
    assert_eq!(next_state(&mut events).await.0, MaintenanceState::Drained);
    manager.down("h00000").await.unwrap();
    assert_eq!(next_state(&mut events).await.0, MaintenanceState::Down);
    assert_eq!(store.get_host("h00000").await.unwrap().state, MaintenanceState::Down);

    // An empty host drains at once.
    manager.drain("h00001").await.unwrap();
    assert_eq!(next_state(&mut events).await.0, MaintenanceState::Draining);
    assert_eq!(next_state(&mut events).await.0, MaintenanceState::Drained);
    drop(events);
    drop(manager);

    // A new manager restores the states from the store.
    let sim2 = SimProvider::new(sim_config(2));
    let again = HostManager::builder(Arc::new(sim2.clone()))
        .clock(Arc::new(sim2.clock()))
        .store(store.clone())
        .config(config())
        .start()
        .await
        .unwrap();
    again.sync().await.unwrap();
    assert_eq!(again.host("h00000").unwrap().state, MaintenanceState::Down);
    assert_eq!(again.host("h00001").unwrap().state, MaintenanceState::Drained);
    assert!(again.lease(&paceline_hostmgr::LeaseRequest::new(SMALL, 10, 1000)).unwrap().hosts.is_empty());
    again.up("h00000").await.unwrap();
    assert_eq!(store.get_host("h00000").await.unwrap().state, MaintenanceState::Up);
    assert_eq!(again.lease(&paceline_hostmgr::LeaseRequest::new(SMALL, 10, 1000)).unwrap().hosts.len(), 1);
    let _ = RunState::Lost;
}

#[tokio::test]
async fn auto_down_when_drained() {
    let mut c = config();
    c.auto_down_when_drained = true;
    let (_sim, manager, mut events) = sim_manager(1, c).await;
    manager.drain("h00000").await.unwrap();
    assert_eq!(next_state(&mut events).await.0, MaintenanceState::Draining);
    assert_eq!(next_state(&mut events).await.0, MaintenanceState::Drained);
    assert_eq!(next_state(&mut events).await.0, MaintenanceState::Down);
    manager.up("h00000").await.unwrap();
    assert_eq!(manager.host("h00000").unwrap().state, MaintenanceState::Up);
}
