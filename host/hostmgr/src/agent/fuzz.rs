//! The agent protocol as fuzz targets see it: a sequence of `AgentMessage`s
//! (length-delimited protobuf, as they follow each other on the session
//! stream) through the real session code: `Register` validation, the
//! registration event, heartbeats, status updates with duplicate
//! suppression, launch rejections and log chunks. Reached through
//! [`crate::fuzz_entry::agent_stream`].

use prost::Message;
use tokio::sync::mpsc;

use super::{AgentConfig, AgentProvider, lock};
use paceline_proto::agent::v1 as pb;

/// Decodes `data` as length-delimited messages (stopping at the first that
/// does not decode) and runs one session over them. Returns how many
/// events the session handed on (seed tests use it to see seeds get deep).
pub(crate) fn stream(data: &[u8]) -> usize {
    let mut messages = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        match pb::AgentMessage::decode_length_delimited(&mut rest) {
            Ok(m) => messages.push(Ok(m)),
            Err(_) => break,
        }
    }
    let provider = AgentProvider::new(AgentConfig::default());
    let (events_tx, mut events_rx) = mpsc::channel(64);
    *lock(&provider.inner.events) = Some(events_tx);
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_time().build() else {
        return 0;
    };
    let (tx, _rx) = mpsc::unbounded_channel();
    let inner = provider.inner.clone();
    rt.block_on(async move {
        let counter = tokio::spawn(async move {
            let mut n = 0;
            while events_rx.recv().await.is_some() {
                n += 1;
            }
            n
        });
        inner.run_session(futures::stream::iter(messages), tx, None).await;
        drop(provider);
        counter.await.unwrap_or(0)
    })
}
