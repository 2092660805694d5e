//! The host manager in a process of its own (`paceline server --roles
//! hostmgr`): both ends of the internal protocol `paceline.hostmgr.v1`
//! between it and the job manager's process.
//!
//! - [`HostPeerService`] (`server`): the host manager's side, over its
//!   [`HostManager`](crate::HostManager), with the epoch fence (a job manager
//!   that lost its leadership is refused once its successor has subscribed).
//! - [`RemoteHosts`] (`client`): the job manager's side, a
//!   [`HostAccess`](crate::HostAccess) (and so an offer source and a
//!   launcher) over the network. It keeps one `Events` stream open to the
//!   leading host manager and feeds it into the [`HostEvents`](crate::HostEvents)
//!   its subscriber reads; when the stream breaks (the host manager died or
//!   lost its leadership) it finds the leader again through a
//!   [`LocateLeader`], sends the job manager's expectations afresh (the new
//!   leader reconciles its agents against them) and resubscribes (which
//!   replays every run update not acknowledged). `host`/`hosts` answer from
//!   the inventory the stream carries.
//!
//! Values other than the ids travel as the model's JSON (the store's
//! encoding); the placement protocol, which carries every value typed, is the
//! model for a later version of this one.

mod client;
mod server;

pub use client::{Expectations, LocateLeader, RemoteHosts};
pub use server::HostPeerService;

use std::time::Duration;

use tonic::Status;

use crate::LogStream;

/// How often the inventory goes down the stream when it changed without an
/// event (allocations, heartbeats).
pub(crate) const INVENTORY_EVERY: Duration = Duration::from_millis(500);

/// Events per streamed batch, at most.
pub(crate) const BATCH: usize = 4096;

pub(crate) fn json<T: serde::Serialize + ?Sized>(value: &T) -> Vec<u8> {
    // The model's types serialize infallibly (no maps with non-string keys).
    serde_json::to_vec(value).unwrap_or_default()
}

pub(crate) fn from_json<T: serde::de::DeserializeOwned>(field: &str, bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{field}: {e}"))
}

pub(crate) fn stream_name(s: LogStream) -> &'static str {
    match s {
        LogStream::Stdout => "stdout",
        LogStream::Stderr => "stderr",
    }
}

pub(crate) fn stream_of(name: &str) -> Result<LogStream, Status> {
    match name {
        "stdout" => Ok(LogStream::Stdout),
        "stderr" => Ok(LogStream::Stderr),
        other => Err(Status::invalid_argument(format!("stream: `{other}` is neither stdout nor stderr"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_streams_survive_the_wire() {
        for s in [LogStream::Stdout, LogStream::Stderr] {
            assert_eq!(stream_of(stream_name(s)).expect("known"), s);
        }
        assert_eq!(stream_of("stdin").expect_err("unknown").code(), tonic::Code::InvalidArgument);
    }
}
