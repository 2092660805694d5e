//! [`HostAccess`]: what the other roles may ask of the host manager, whether
//! it runs in their process ([`HostManager`]) or in a process of its own
//! (`paceline server --roles hostmgr`, reached over `paceline.hostmgr.v1`).
//!
//! The job manager, the API and the wiring hold an `Arc<dyn HostAccess>` and
//! never learn which one they talk to. Leases and launches are the joints'
//! ports ([`OfferSource`], [`Launcher`]), supertraits of this one, so the
//! placement engine and the job manager are handed the same object as those
//! ports. The other methods are [`HostManager`]'s own, with the same meaning;
//! see each there.
//! `host` and `hosts` stay synchronous (the API and the capacity fan-out call
//! them often): a remote implementation answers from an inventory snapshot
//! its host manager streams to it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use paceline_joints::{Launcher, OfferSource, PortError, RunRefused};
use paceline_model::host::MaintenanceState;
use paceline_model::run::LaunchRequest;
use paceline_model::view::HostView;

use crate::{
    ExpectedRun, HostError, HostEvents, HostInfo, HostManager, Lease, LeaseId, LeaseRequest, LogChunk, LogStream,
};

/// The host manager as the other roles see it. Object safe; upcasts to
/// `Arc<dyn OfferSource>` and `Arc<dyn Launcher>`.
#[async_trait]
pub trait HostAccess: OfferSource + Launcher + Send + Sync + std::fmt::Debug {
    /// The provider's name (`agent`, `sim`, `mesos`).
    fn provider_name(&self) -> String;
    /// One host.
    fn host(&self, name: &str) -> Option<HostInfo>;
    /// Every host, in the order they became known.
    fn hosts(&self) -> Vec<HostInfo>;
    /// Every host as "why pending" counts them: its view (shared, not
    /// copied), maintenance state and reachability.
    fn census(&self) -> Vec<paceline_model::pending::CensusHost> {
        self.hosts()
            .into_iter()
            .map(|h| paceline_model::pending::CensusHost {
                view: Arc::new(h.view),
                state: h.state,
                reachable: h.reachable,
            })
            .collect()
    }
    /// Whether `pred` holds for some host (its view, maintenance state,
    /// reachability), stopping at the first: a question about one host that
    /// must not copy every host's view to be answered.
    fn any_host(&self, pred: &mut dyn FnMut(&HostView, MaintenanceState, bool) -> bool) -> bool {
        self.census().iter().any(|h| pred(&h.view, h.state, h.reachable))
    }
    /// Runs tracked (launched, not yet ended and acknowledged), counted
    /// without copying a host; `None` where the count is not at hand (a
    /// host manager in another process).
    fn run_count(&self) -> Option<usize> {
        None
    }
    /// What a live run holds on its host and the use its host last
    /// measured; `None` where not at hand (a run not live; through a host
    /// manager in another process, a run its host has not measured).
    fn run_holding(&self, _run_id: &str) -> Option<crate::RunHolding> {
        None
    }
    /// Every live run whose host measured its use; empty where not at hand.
    fn measured_use(&self) -> Vec<crate::MeasuredRun> {
        Vec::new()
    }
    /// Waits until the events the provider sent before the call are applied.
    async fn sync(&self) -> Result<(), HostError>;
    /// Checks deadlines now (virtual clocks; the manager also ticks alone).
    async fn tick(&self);
    /// The one subscriber's stream of events; replaces any earlier one and
    /// first replays every run update not yet acknowledged.
    fn subscribe(&self) -> HostEvents;
    /// The subscriber has durably handled these `(run id, seq)` updates.
    async fn acknowledge_all(&self, updates: &[(String, u64)]);
    /// Reads part of a run's log on a named host.
    async fn read_log_on(
        &self,
        host: &str,
        run_id: &str,
        stream: LogStream,
        offset: u64,
        max_bytes: u64,
    ) -> Result<LogChunk, HostError>;
    /// Which runs the owner expects (reconciliation after a restart or failover).
    async fn expect_runs(&self, runs: Vec<ExpectedRun>);
    /// UP → DRAINING.
    async fn drain(&self, host: &str) -> Result<(), HostError>;
    /// DRAINED → DOWN.
    async fn down(&self, host: &str) -> Result<(), HostError>;
    /// DOWN, DRAINING or DRAINED → UP.
    async fn up(&self, host: &str) -> Result<(), HostError>;
}

#[async_trait]
impl HostAccess for HostManager {
    fn provider_name(&self) -> String {
        HostManager::provider_name(self).to_string()
    }

    fn host(&self, name: &str) -> Option<HostInfo> {
        HostManager::host(self, name)
    }

    fn hosts(&self) -> Vec<HostInfo> {
        HostManager::hosts(self)
    }

    fn run_count(&self) -> Option<usize> {
        Some(HostManager::run_count(self))
    }

    fn census(&self) -> Vec<paceline_model::pending::CensusHost> {
        HostManager::census(self)
    }

    fn run_holding(&self, run_id: &str) -> Option<crate::RunHolding> {
        HostManager::run_holding(self, run_id)
    }

    fn measured_use(&self) -> Vec<crate::MeasuredRun> {
        HostManager::measured_use(self)
    }

    fn any_host(&self, pred: &mut dyn FnMut(&HostView, MaintenanceState, bool) -> bool) -> bool {
        HostManager::any_host(self, pred)
    }

    async fn sync(&self) -> Result<(), HostError> {
        HostManager::sync(self).await
    }

    async fn tick(&self) {
        HostManager::tick(self).await
    }

    fn subscribe(&self) -> HostEvents {
        HostManager::subscribe(self)
    }

    async fn acknowledge_all(&self, updates: &[(String, u64)]) {
        for (run_id, seq) in updates {
            HostManager::acknowledge(self, run_id, *seq).await;
        }
    }

    async fn read_log_on(
        &self,
        host: &str,
        run_id: &str,
        stream: LogStream,
        offset: u64,
        max_bytes: u64,
    ) -> Result<LogChunk, HostError> {
        HostManager::read_log_on(self, host, run_id, stream, offset, max_bytes).await
    }

    async fn expect_runs(&self, runs: Vec<ExpectedRun>) {
        HostManager::expect_runs(self, runs).await
    }

    async fn drain(&self, host: &str) -> Result<(), HostError> {
        HostManager::drain(self, host).await
    }

    async fn down(&self, host: &str) -> Result<(), HostError> {
        HostManager::down(self, host).await
    }

    async fn up(&self, host: &str) -> Result<(), HostError> {
        HostManager::up(self, host).await
    }
}

#[async_trait]
impl OfferSource for HostManager {
    async fn lease(&self, request: &LeaseRequest) -> Result<Lease, PortError> {
        Ok(HostManager::lease(self, request)?)
    }

    async fn release(&self, lease: LeaseId) -> Result<(), PortError> {
        Ok(HostManager::release(self, lease)?)
    }
}

#[async_trait]
impl Launcher for HostManager {
    async fn launch(&self, lease: LeaseId, host: &str, runs: Vec<LaunchRequest>) -> Result<Vec<RunRefused>, PortError> {
        let refused = HostManager::launch(self, lease, host, runs).await?;
        Ok(refused.into_iter().map(|(run_id, why)| RunRefused { run_id, reason: why.to_string() }).collect())
    }

    async fn kill(&self, run_id: &str, grace: Option<Duration>) -> Result<(), PortError> {
        Ok(HostManager::kill_with_grace(self, run_id, grace).await?)
    }
}

impl From<HostManager> for Arc<dyn HostAccess> {
    fn from(hosts: HostManager) -> Self {
        Arc::new(hosts)
    }
}
