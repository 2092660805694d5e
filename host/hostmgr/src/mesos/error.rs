//! [`MesosError`]: what went wrong talking to a master. The subscription
//! loop decides from it whether to follow a redirect, resubscribe, or stop.

use std::time::Duration;

use super::recordio;

/// What went wrong talking to a master.
#[derive(Debug, thiserror::Error)]
pub enum MesosError {
    /// No master is configured.
    #[error("masters: none configured")]
    NoMaster,
    /// The URL of a master is not usable.
    #[error("master URL {0:?}: {1}")]
    BadUrl(String, String),
    /// The HTTP exchange failed.
    #[error("HTTP: {0}")]
    Http(String),
    /// The master answered with an unexpected status.
    #[error("master answered {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The body, as text.
        body: String,
    },
    /// The master is not the leader; the leader is at this URL.
    #[error("redirected to {0}")]
    Redirect(String),
    /// A call or event could not be encoded or decoded.
    #[error("decode: {0}")]
    Decode(String),
    /// The stream is not RecordIO.
    #[error(transparent)]
    RecordIo(#[from] recordio::RecordIoError),
    /// An event we do not understand.
    #[error("unknown event type {0}")]
    UnknownEvent(i32),
    /// An event of a known type without its payload.
    #[error("event {0} has no payload")]
    MissingPayload(&'static str),
    /// No event within the deadline.
    #[error("no event within {0:?}")]
    Silent(Duration),
    /// The stream ended.
    #[error("the master closed the stream")]
    Closed,
    /// The master sent ERROR.
    #[error("the master says: {0}")]
    Master(String),
    /// The provider was told to stop.
    #[error("stopped")]
    Stopped,
    /// A call on the stream was refused (307, 403): subscribe again.
    #[error("the master refused a call on this stream; resubscribing")]
    Resubscribe,
}
