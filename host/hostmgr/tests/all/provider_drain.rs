//! A provider's drain and its undoing (a Kubernetes cordon and uncordon):
//! the provider may take back only the drains it asked for, never an
//! operator's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use paceline_hostmgr::HostManager;
use paceline_hostmgr::error::ProviderError;
use paceline_hostmgr::provider::{HostRegistration, LogChunk, LogStream, Provider, ProviderEvent};
use paceline_model::host::MaintenanceState;
use paceline_model::run::LaunchRequest;
use tokio::sync::mpsc;

use crate::support::*;

/// A provider whose events the test sends itself; it runs nothing.
#[derive(Debug, Default)]
struct Hand {
    events: Mutex<Option<mpsc::Sender<ProviderEvent>>>,
}

impl Hand {
    async fn send(&self, ev: ProviderEvent) {
        let tx = self.events.lock().unwrap().clone().expect("started");
        tx.send(ev).await.expect("the manager listens");
    }
}

#[async_trait]
impl Provider for Hand {
    fn name(&self) -> &'static str {
        "hand"
    }
    async fn start(&self, events: mpsc::Sender<ProviderEvent>) -> Result<(), ProviderError> {
        *self.events.lock().unwrap() = Some(events);
        Ok(())
    }
    async fn launch(&self, _host: &str, _runs: Vec<LaunchRequest>) -> Result<(), ProviderError> {
        Ok(())
    }
    async fn kill(&self, _host: &str, _run_id: &str, _grace: Option<Duration>) -> Result<(), ProviderError> {
        Ok(())
    }
    async fn acknowledge(&self, _host: &str, _run_id: &str, _seq: u64) -> Result<(), ProviderError> {
        Ok(())
    }
    async fn reconcile(&self, _host: &str, _expected: Vec<String>) -> Result<(), ProviderError> {
        Ok(())
    }
    async fn read_log(
        &self,
        _host: &str,
        _run_id: &str,
        _stream: LogStream,
        offset: u64,
        _max_bytes: u64,
    ) -> Result<LogChunk, ProviderError> {
        Ok(LogChunk { data: Vec::new(), offset, file_size: 0 })
    }
}

fn registration(host: &str) -> ProviderEvent {
    ProviderEvent::HostRegistered(HostRegistration {
        hostname: host.into(),
        agent_id: format!("node/{host}"),
        total: HOST,
        attributes: Default::default(),
        running: Vec::new(),
        gpus: Vec::new(),
    })
}

async fn state(manager: &HostManager, hand: &Hand, ev: ProviderEvent, host: &str) -> MaintenanceState {
    hand.send(ev).await;
    manager.sync().await.unwrap();
    manager.host(host).unwrap().state
}

#[tokio::test]
async fn a_provider_takes_back_its_own_drain_only() {
    let hand = Arc::new(Hand::default());
    let manager = HostManager::builder(hand.clone()).config(config()).start().await.unwrap();
    manager.expect_runs(Vec::new()).await;
    for h in ["a", "b", "c"] {
        hand.send(registration(h)).await;
    }
    manager.sync().await.unwrap();
    let drain = |h: &str| ProviderEvent::HostDrainRequested { host: h.into(), reason: "cordoned".into() };
    let undrain = |h: &str| ProviderEvent::HostUndrainRequested { host: h.into(), reason: "uncordoned".into() };

    // a: cordoned (drained, empty) then uncordoned: up again.
    assert_eq!(state(&manager, &hand, drain("a"), "a").await, MaintenanceState::Drained);
    assert_eq!(state(&manager, &hand, undrain("a"), "a").await, MaintenanceState::Up);

    // b: drained by an operator, never cordoned; an uncordon does not undo it.
    manager.drain("b").await.unwrap();
    assert_eq!(state(&manager, &hand, undrain("b"), "b").await, MaintenanceState::Drained);
    // Nor once the node is cordoned and uncordoned: the drain was the operator's.
    assert_eq!(state(&manager, &hand, drain("b"), "b").await, MaintenanceState::Drained);
    assert_eq!(state(&manager, &hand, undrain("b"), "b").await, MaintenanceState::Drained);

    // c: cordoned, then the operator took it over (down): an uncordon leaves it down.
    assert_eq!(state(&manager, &hand, drain("c"), "c").await, MaintenanceState::Drained);
    manager.down("c").await.unwrap();
    assert_eq!(state(&manager, &hand, undrain("c"), "c").await, MaintenanceState::Down);
    manager.up("c").await.unwrap();
    assert_eq!(manager.host("c").unwrap().state, MaintenanceState::Up);
}
