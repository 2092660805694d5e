//! Domain errors → gRPC statuses.
//!
//! One function per manager's error type, so every service maps the same
//! failure to the same code: the caller's mistake is INVALID_ARGUMENT (with
//! the field path), a missing object NOT_FOUND, a call that does not fit
//! the object's state FAILED_PRECONDITION, and a dependency that failed
//! UNAVAILABLE (retryable) or INTERNAL (a bug).

use paceline_hostmgr::HostError;
use paceline_jobmgr::JobError;
use paceline_plugin::PluginError;
use paceline_resmgr::{PoolError, PoolErrorReason};
use tonic::Status;

/// A job manager error. `prefix` is the request field the job's config
/// came from (`spec`), so `instance_count` reads `spec.instance_count`.
pub fn job(e: JobError, prefix: &str) -> Status {
    match e {
        JobError::Invalid { field, reason } => {
            // `id` is the request's own field, not part of the spec.
            let path = if field == "id" || prefix.is_empty() { field } else { format!("{prefix}.{field}") };
            Status::invalid_argument(format!("{path}: {reason}"))
        }
        JobError::NotFound(what) => Status::not_found(format!("{what} not found")),
        JobError::State(msg) => Status::failed_precondition(msg),
        JobError::Store(e) => Status::unavailable(format!("storage: {e}")),
        JobError::Resmgr(msg) => Status::unavailable(format!("resource manager: {msg}")),
        JobError::Plugin(msg) => Status::internal(format!("lifecycle plugin: {msg}")),
    }
}

/// A host manager error: its own mapping (`impl From<HostError> for
/// Status` in `paceline-hostmgr`), shared with the host manager's protocol.
pub fn host(e: HostError) -> Status {
    Status::from(e)
}

/// Fields of a pool's spec, which the wire nests under `spec`.
fn spec_field(field: &str) -> bool {
    [
        "reservation",
        "limit",
        "share",
        "slack_limit",
        "pool_type",
        "static_kinds",
        "queue_policy",
        "controller_limit_percent",
    ]
    .iter()
    .any(|f| field == *f || field.starts_with(&format!("{f}.")))
}

/// A resource manager pool error; the message leads with the request field.
pub fn pool(e: PoolError) -> Status {
    let field = if spec_field(&e.field) { format!("spec.{}", e.field) } else { e.field.clone() };
    let msg = format!("{field}: pool {}: {}", e.pool, e.reason);
    match e.reason {
        PoolErrorReason::NotFound => Status::not_found(msg),
        PoolErrorReason::AlreadyExists => Status::already_exists(msg),
        PoolErrorReason::HasChildren | PoolErrorReason::HoldsJobs { .. } | PoolErrorReason::ParentHoldsJobs(_) => {
            Status::failed_precondition(msg)
        }
        _ => Status::invalid_argument(msg),
    }
}

/// A plugin registry error.
pub fn plugin(e: PluginError) -> Status {
    let msg = e.to_string();
    match e {
        PluginError::TooLarge { .. }
        | PluginError::NotWasm
        | PluginError::NotComponent
        | PluginError::Compile(_)
        | PluginError::WrongWorld { .. }
        | PluginError::SelfTest(_)
        | PluginError::UnknownSlot(_) => Status::invalid_argument(msg),
        PluginError::InvalidName { field, .. } => Status::invalid_argument(format!("meta.{field}: {msg}")),
        PluginError::UnknownVersion { .. } => Status::not_found(msg),
        PluginError::Duplicate { .. } => Status::already_exists(msg),
        PluginError::NothingToRollBack { .. } => Status::failed_precondition(msg),
        PluginError::Storage(_) => Status::unavailable(msg),
        _ => Status::internal(msg),
    }
}

/// A required string field left empty.
pub fn required(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() { Err(Status::invalid_argument(format!("{field}: must be set"))) } else { Ok(()) }
}

/// A store error on a read the API makes itself (the audit log).
pub fn store(e: paceline_storage::StoreError) -> Status {
    use paceline_storage::StoreError as E;
    match e {
        E::Invalid(msg) => Status::invalid_argument(msg),
        E::NotFound { .. } => Status::not_found(e.to_string()),
        E::Corrupt { .. } => Status::internal(format!("storage: {e}")),
        _ => Status::unavailable(format!("storage: {e}")),
    }
}
