//! Errors of the agent: I/O on its data dir, launches it refuses, and the
//! session with the host manager.

use std::path::PathBuf;

/// A launch the agent refuses before creating the run; `field` names the
/// part of the `Launch` at fault so the manager can show it to a person.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct LaunchError {
    /// The `Launch` field at fault (`command`, `resources.memory_mib`,
    /// `health_check.http_port`, …).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl LaunchError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

/// Everything else that can go wrong in the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Reading or writing the data dir, or starting a process.
    #[error("{context}: {source}")]
    Io {
        /// What the agent was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A state file the agent wrote could not be decoded.
    #[error("corrupt state file {}: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The launch was refused.
    #[error("launch rejected: {0}")]
    Rejected(#[from] LaunchError),
    /// No such run.
    #[error("unknown run `{0}`")]
    UnknownRun(String),
    /// The configuration is unusable.
    #[error("config: {0}")]
    Config(String),
    /// Dialling the host manager failed.
    #[error("connecting to the host manager: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The agent has no certificate and cannot get one (not joined, a
    /// refused join, a CA that does not match its pin).
    #[error("agent identity: {0}")]
    Identity(String),
    /// The host manager ended the session with an error.
    #[error("session: {0}")]
    Session(Box<tonic::Status>),
}

impl From<tonic::Status> for AgentError {
    fn from(status: tonic::Status) -> Self {
        AgentError::Session(Box::new(status))
    }
}

/// Wraps an `io::Error` with what the agent was doing.
pub(crate) fn io_ctx(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> AgentError {
    let context = context.into();
    move |source| AgentError::Io { context, source }
}
