//! Errors of the host manager and of providers.
//!
//! Every variant names the host, run, lease or field at fault, so a caller
//! (placement, the job manager, an operator) can act on the message alone.

use paceline_model::host::MaintenanceState;
use paceline_storage::StoreError;

use crate::lease::LeaseId;

/// What a provider could not do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The provider does not know the host, or it is not connected now.
    #[error("host {host}: not connected to provider {provider}")]
    HostNotConnected {
        /// The provider.
        provider: &'static str,
        /// The host.
        host: String,
    },
    /// The provider cannot do this at all (e.g. logs of simulated runs).
    #[error("provider {provider}: {what} is not supported")]
    Unsupported {
        /// The provider.
        provider: &'static str,
        /// The operation.
        what: &'static str,
    },
    /// The provider was not started, or has stopped.
    #[error("provider {0}: not running")]
    NotRunning(&'static str),
    /// The host answered with an error (e.g. a log that cannot be read).
    #[error("host {host}: {message}")]
    Remote {
        /// The host.
        host: String,
        /// What it said.
        message: String,
    },
    /// The host did not answer in time.
    #[error("host {host}: no answer within {timeout_ms} ms")]
    Timeout {
        /// The host.
        host: String,
        /// How long we waited.
        timeout_ms: u64,
    },
}

/// What the host manager refused or failed to do.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// No live lease has this id (never issued, released or reclaimed).
    #[error("lease {0}: unknown (released, expired or never issued)")]
    UnknownLease(LeaseId),
    /// The lease's TTL has passed; its hosts were returned.
    #[error("lease {0}: expired")]
    LeaseExpired(LeaseId),
    /// The inventory has no host of this name.
    #[error("host {0}: unknown")]
    UnknownHost(String),
    /// The host is not one of the lease's offers.
    #[error("host {host}: not in lease {lease}")]
    HostNotInLease {
        /// The host.
        host: String,
        /// The lease.
        lease: LeaseId,
    },
    /// The runs need more of `field` than the host has free.
    #[error("host {host}: over capacity in {field}: runs need {requested}, {free} free")]
    OverCapacity {
        /// The host.
        host: String,
        /// The resource kind (`cpu_millis`, `memory_mib`, …).
        field: &'static str,
        /// What the runs need together.
        requested: u64,
        /// What the host has free.
        free: u64,
    },
    /// A run id is already known to the manager, or repeated in the request.
    #[error("run {0}: duplicate run id")]
    DuplicateRunId(String),
    /// The task already has a live run (on any host), or appears twice in the request.
    #[error("task {task}: already has the live run {live_run}")]
    DuplicateTaskId {
        /// The task id.
        task: String,
        /// Its live run.
        live_run: String,
    },
    /// The host is in maintenance and takes no new runs.
    #[error("host {host}: does not accept tasks (maintenance state {state})")]
    HostNotAcceptingTasks {
        /// The host.
        host: String,
        /// Its maintenance state.
        state: MaintenanceState,
    },
    /// The host's provider does not reach it now.
    #[error("host {0}: unreachable")]
    HostUnreachable(String),
    /// The manager tracks no run of this id.
    #[error("run {0}: unknown")]
    UnknownRun(String),
    /// The maintenance state machine forbids the move.
    #[error("host {host}: cannot go from {from} to {to}")]
    InvalidTransition {
        /// The host.
        host: String,
        /// Its state.
        from: MaintenanceState,
        /// The state asked for.
        to: MaintenanceState,
    },
    /// A request field is out of range.
    #[error("invalid {field}: {reason}")]
    InvalidRequest {
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The provider failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The store failed; nothing was changed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The manager's event loop has stopped.
    #[error("host manager stopped")]
    Stopped,
    /// A host manager in another process refused the call or could not be
    /// reached (`paceline server --roles hostmgr`); `kind` keeps the class
    /// of its answer so that the API maps it to the same gRPC code.
    #[error("host manager: {message}")]
    Remote {
        /// What class of failure the other process reported.
        kind: RemoteErrorKind,
        /// Its message.
        message: String,
    },
}

/// The class of a [`HostError::Remote`] failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteErrorKind {
    /// Unknown host, run or lease.
    NotFound,
    /// A request field out of range.
    InvalidRequest,
    /// The state forbids it (maintenance transition, host not accepting tasks, fenced).
    FailedPrecondition,
    /// Unimplemented by the host manager's provider.
    Unsupported,
    /// Not reachable, or no leader right now: try again.
    Unavailable,
    /// Anything else.
    Other,
}

impl From<HostError> for tonic::Status {
    /// The gRPC code each failure answers with, in the public API and the
    /// host manager's own protocol alike.
    fn from(e: HostError) -> tonic::Status {
        use tonic::Status;
        let msg = e.to_string();
        match e {
            HostError::UnknownHost(_) | HostError::UnknownRun(_) => Status::not_found(msg),
            HostError::InvalidRequest { .. } => Status::invalid_argument(msg),
            HostError::InvalidTransition { .. } | HostError::HostNotAcceptingTasks { .. } => {
                Status::failed_precondition(msg)
            }
            HostError::Provider(ProviderError::Unsupported { .. }) => Status::unimplemented(msg),
            HostError::Provider(_) | HostError::HostUnreachable(_) | HostError::Store(_) | HostError::Stopped => {
                Status::unavailable(msg)
            }
            HostError::Remote { kind, .. } => match kind {
                RemoteErrorKind::NotFound => Status::not_found(msg),
                RemoteErrorKind::InvalidRequest => Status::invalid_argument(msg),
                RemoteErrorKind::FailedPrecondition => Status::failed_precondition(msg),
                RemoteErrorKind::Unsupported => Status::unimplemented(msg),
                RemoteErrorKind::Unavailable => Status::unavailable(msg),
                RemoteErrorKind::Other => Status::internal(msg),
            },
            _ => Status::internal(msg),
        }
    }
}

impl From<HostError> for paceline_joints::PortError {
    /// As a port's error: retry what may pass later, not what the manager refused.
    fn from(e: HostError) -> paceline_joints::PortError {
        let retry = matches!(
            e,
            HostError::Stopped | HostError::Store(_) | HostError::Remote { kind: RemoteErrorKind::Unavailable, .. }
        );
        if retry {
            paceline_joints::PortError::unavailable(e.to_string())
        } else {
            paceline_joints::PortError::refused(e.to_string())
        }
    }
}
