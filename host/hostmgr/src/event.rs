//! What the manager tells its one subscriber.

use paceline_model::host::MaintenanceState;
use paceline_model::run::RunUpdate;
use paceline_model::{Labels, Resources};
use tokio::sync::mpsc;

/// An event for the subscriber (the job manager and resource manager, fanned out by the caller).
///
/// Serializable: a host manager in a process of its own streams these to the
/// job manager (`paceline.hostmgr.v1`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum HostEvent {
    /// A run changed state. Acknowledge it with
    /// [`crate::HostManager::acknowledge`] once durably handled; until then
    /// it is re-sent (and replayed to a new subscriber). Updates the manager
    /// makes up itself — LOST with reason HOST_LOST, RUN_MISSING or
    /// LAUNCH_TIMEOUT, FAILED with reason LAUNCH_REJECTED — come the same way.
    Run(RunUpdate),
    /// A host registered (first time or after a reconnect).
    HostJoined {
        /// The host.
        host: String,
        /// Its capacity.
        total: Resources,
        /// Its attributes.
        attributes: Labels,
    },
    /// A host became unreachable (disconnected, or missed its heartbeats).
    HostLeft {
        /// The host.
        host: String,
        /// Why.
        reason: String,
    },
    /// A host's maintenance state changed. On DRAINING, `runs` lists the
    /// runs to move off it (within each job's max-unavailable).
    HostStateChanged {
        /// The host.
        host: String,
        /// Before.
        from: MaintenanceState,
        /// After.
        to: MaintenanceState,
        /// Runs still on the host.
        runs: Vec<String>,
    },
}

/// The subscriber's end: events in the order the manager produced them.
/// Ends when the manager stops or another `subscribe` replaces it.
#[derive(Debug)]
pub struct HostEvents {
    pub(crate) rx: mpsc::UnboundedReceiver<HostEvent>,
}

impl HostEvents {
    /// A stream fed by `rx`: for a host manager reached over the network,
    /// whose events arrive on a connection rather than from this process.
    pub fn from_channel(rx: mpsc::UnboundedReceiver<HostEvent>) -> HostEvents {
        HostEvents { rx }
    }

    /// The next event, or `None` once the stream has ended.
    pub async fn recv(&mut self) -> Option<HostEvent> {
        self.rx.recv().await
    }

    /// An event if one is ready.
    pub fn try_recv(&mut self) -> Option<HostEvent> {
        self.rx.try_recv().ok()
    }
}

impl futures::Stream for HostEvents {
    type Item = HostEvent;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<HostEvent>> {
        self.rx.poll_recv(cx)
    }
}
