//! Errors of the job manager.

use paceline_model::task::SpecError;
use paceline_storage::StoreError;

/// What went wrong in a job manager call.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The job spec is not acceptable; `field` names the offending field.
    /// Nothing was persisted.
    #[error("invalid job spec: `{field}`: {reason}")]
    Invalid {
        /// The field, e.g. `instance_count` or `sla.min_running_instances`.
        field: String,
        /// Why.
        reason: String,
    },
    /// No such job (or instance).
    #[error("{0} not found")]
    NotFound(String),
    /// The call does not fit the job's state (e.g. delete of a live job).
    #[error("{0}")]
    State(String),
    /// Storage failed; the change was not made durable.
    #[error("storage: {0}")]
    Store(#[from] StoreError),
    /// The resource manager refused a gang.
    #[error("resource manager: {0}")]
    Resmgr(String),
    /// The lifecycle plugin slot failed with no fallback.
    #[error("lifecycle plugin: {0}")]
    Plugin(String),
}

impl JobError {
    /// An invalid-spec error for `field`.
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        JobError::Invalid { field: field.into(), reason: reason.into() }
    }
}

impl From<SpecError> for JobError {
    fn from(e: SpecError) -> Self {
        let field = match &e {
            SpecError::Empty(f) => (*f).to_string(),
            SpecError::TooLong { field, .. } | SpecError::TooMany { field, .. } | SpecError::Invalid { field, .. } => {
                (*field).to_string()
            }
            SpecError::Constraint(_) => "constraints".to_string(),
        };
        JobError::Invalid { field, reason: e.to_string() }
    }
}
