//! The one error of every port.

/// What kind of failure a port reports; callers retry the first, not the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortErrorKind {
    /// The other side could not be reached or is not leading: try again later.
    Unavailable,
    /// The other side refused the request (an expired lease, an unknown host):
    /// the same request will fail again.
    Refused,
}

/// A port call that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PortError {
    /// Its class.
    pub kind: PortErrorKind,
    /// What happened, for logs and task events.
    pub message: String,
}

impl PortError {
    /// The other side is unreachable or not leading.
    pub fn unavailable(message: impl Into<String>) -> PortError {
        PortError { kind: PortErrorKind::Unavailable, message: message.into() }
    }

    /// The other side refused.
    pub fn refused(message: impl Into<String>) -> PortError {
        PortError { kind: PortErrorKind::Refused, message: message.into() }
    }
}
