//! The provider boundary: how the host manager reaches hosts.
//!
//! A provider turns the manager's intents (launch, kill, acknowledge,
//! reconcile, read a log) into its own protocol and reports what hosts say
//! as [`ProviderEvent`]s on one channel. It knows nothing of leases, offers,
//! maintenance or allocation: those are the manager's, so the same manager
//! serves the agent, Mesos (offers and inverse offers are translated below
//! this line) and simulated hosts.
//!
//! Rules every provider keeps:
//! - Run updates of one run are sent in order, each with the host's `seq`
//!   (1, 2, 3, …), and are re-sent until [`Provider::acknowledge`] covers them.
//! - [`Provider::acknowledge`] never waits on the event channel (the manager
//!   may call it from the loop that drains that channel).
//! - `launch` and `kill` are idempotent by run id.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use paceline_model::run::{LaunchRequest, RunUpdate};
use paceline_model::{Labels, Resources};
use tokio::sync::mpsc;

use crate::error::ProviderError;

/// A run a host says it supervises when it registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningRun {
    /// The run id.
    pub run_id: String,
    /// Its task id.
    pub task_id: String,
    /// What it holds.
    pub resources: Resources,
    /// The GPU devices it holds (empty: none, or a provider that does not
    /// say).
    pub gpu: paceline_model::gpu::GpuGrant,
}

/// What a run actually uses, as its host measured it (the agent's
/// `Heartbeat.usage`; providers that do not measure report none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MeasuredUse {
    /// CPU between the host's last two samples, millicores.
    pub cpu_millis: u64,
    /// Memory at the last sample, MiB.
    pub memory_mib: u64,
    /// When the host took the last sample, ms since the Unix epoch (its clock).
    pub sampled_at_ms: u64,
}

/// One run's [`MeasuredUse`], as a heartbeat carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunUsage {
    /// The run.
    pub run_id: String,
    /// What it used.
    pub used: MeasuredUse,
}

/// A run's holding on its host, for the API: what it reserved and, where
/// the provider measures it, what it uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunHolding {
    /// The host.
    pub host: String,
    /// What the run holds there.
    pub reserved: Resources,
    /// Its latest measured use; `None` before two samples or from a
    /// provider that does not measure (sim, Mesos).
    pub used: Option<MeasuredUse>,
}

/// A live run whose host measured its use: what the metrics sum and what
/// a host manager in another process sends its peers
/// (`paceline.hostmgr.v1`, `EventBatch.measured_json`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MeasuredRun {
    /// The run.
    pub run_id: String,
    /// Its task.
    pub task_id: String,
    /// Its host.
    pub host: String,
    /// What it holds there.
    pub reserved: Resources,
    /// What it used at the last sample.
    pub used: MeasuredUse,
}

/// A host introducing itself (first time or after a reconnect).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRegistration {
    /// Host name, unique in the cluster.
    pub hostname: String,
    /// The provider's id for the host's agent.
    pub agent_id: String,
    /// Everything it offers to tasks.
    pub total: Resources,
    /// Attributes for constraints (`zone`, `rack`, …).
    pub attributes: Labels,
    /// Runs it supervises now, for reconciliation.
    pub running: Vec<RunningRun>,
    /// Its GPU devices, in order (empty: devices 0..n of `total`, of the
    /// `gpu_model` attribute).
    pub gpus: Vec<paceline_model::gpu::GpuDevice>,
}

/// What a provider reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderEvent {
    /// A host registered or re-registered.
    HostRegistered(HostRegistration),
    /// A host is alive.
    Heartbeat {
        /// The host.
        host: String,
    },
    /// What a host's running runs use, as it measured them (agents send it
    /// with their heartbeats; providers that do not measure never do).
    Usage {
        /// The host.
        host: String,
        /// One entry per run it sampled.
        usage: Vec<RunUsage>,
    },
    /// The provider lost its connection to a host (its runs may still be
    /// alive: the manager waits for the heartbeat deadline before losing them).
    HostDisconnected {
        /// The host.
        host: String,
        /// Why, for logs and events.
        reason: String,
    },
    /// A run changed state.
    RunUpdate(RunUpdate),
    /// A host refused a launch before creating the run.
    LaunchRejected {
        /// The host.
        host: String,
        /// The run.
        run_id: String,
        /// Why, naming the field at fault.
        error: String,
    },
    /// The provider's cluster asks for a host to be drained for maintenance
    /// (Mesos inverse offers). The manager moves an UP host to DRAINING, as
    /// [`crate::HostManager::drain`] would; other states are left alone.
    HostDrainRequested {
        /// The host.
        host: String,
        /// Why, for logs.
        reason: String,
    },
    /// The provider's cluster no longer wants the host drained (a
    /// Kubernetes node uncordoned). The manager puts the host back UP only
    /// if a [`ProviderEvent::HostDrainRequested`] is what took it out of UP
    /// and no operator changed its state since: an operator's drain is
    /// never undone by the provider.
    HostUndrainRequested {
        /// The host.
        host: String,
        /// Why, for logs.
        reason: String,
    },
}

/// Which log of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl LogStream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

/// Part of a run's log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogChunk {
    /// Bytes from `offset`.
    pub data: Vec<u8>,
    /// Offset of `data` in the file.
    pub offset: u64,
    /// Size of the whole file when read.
    pub file_size: u64,
}

/// A way to reach hosts. Object-safe: the manager holds `Arc<dyn Provider>`.
#[async_trait]
pub trait Provider: Send + Sync + fmt::Debug {
    /// Short name recorded in the inventory: `agent`, `mesos`, `sim`.
    fn name(&self) -> &'static str;

    /// Starts reporting to `events`. Called once, before any other call.
    async fn start(&self, events: mpsc::Sender<ProviderEvent>) -> Result<(), ProviderError>;

    /// Starts runs on `host`.
    async fn launch(&self, host: &str, runs: Vec<LaunchRequest>) -> Result<(), ProviderError>;

    /// Stops a run; `grace_override` replaces the launch's grace period.
    async fn kill(&self, host: &str, run_id: &str, grace_override: Option<Duration>) -> Result<(), ProviderError>;

    /// Every update of `run_id` up to `seq` is durably handled: stop re-sending.
    async fn acknowledge(&self, host: &str, run_id: &str, seq: u64) -> Result<(), ProviderError>;

    /// Asks the host to report the latest state of `expected_run_ids` again
    /// (runs it does not know come back LOST). Providers whose hosts report
    /// their runs on registration (the agent) may treat this as a no-op.
    async fn reconcile(&self, host: &str, expected_run_ids: Vec<String>) -> Result<(), ProviderError>;

    /// `host` was declared lost, yet heartbeats again on the connection the
    /// provider kept open (they were late, not gone). Have it register
    /// again, so the manager learns what it runs and takes it back. The
    /// default does nothing, for providers whose hosts register again on
    /// their own.
    async fn reregister(&self, _host: &str) -> Result<(), ProviderError> {
        Ok(())
    }

    /// Reads part of a run's stdout or stderr.
    async fn read_log(
        &self,
        host: &str,
        run_id: &str,
        stream: LogStream,
        offset: u64,
        max_bytes: u64,
    ) -> Result<LogChunk, ProviderError>;
}
