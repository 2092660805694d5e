//! `paceline.v1.OperatorService`: whole-cluster maintenance. `Snapshot`
//! streams a snapshot of the store (decision 0030) while the server runs.
//! The auth layer lets only admins in (a snapshot holds every spec and
//! plugin) and audits each call.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use paceline_proto::v1 as pb;
use paceline_storage::Store;
use paceline_storage::snapshot::{self, SnapshotError};
use tokio::sync::mpsc;
use tonic::async_trait;
use tonic::{Request, Response, Status};

/// Largest chunk sent: well under any message size limit, whatever the
/// size of a record (a plugin component is one record of up to ~85 MB).
const CHUNK: usize = 1 << 20;

/// The service.
#[derive(Clone, Debug)]
pub struct OperatorApi {
    store: Arc<dyn Store>,
}

impl OperatorApi {
    /// Snapshots `store`.
    pub fn new(store: Arc<dyn Store>) -> OperatorApi {
        OperatorApi { store }
    }
}

/// Sends snapshot bytes as chunks of at most [`CHUNK`].
struct ChunkSink(mpsc::Sender<Result<pb::SnapshotChunk, Status>>);

#[async_trait]
impl snapshot::Sink for ChunkSink {
    async fn write(&mut self, bytes: Vec<u8>) -> Result<(), SnapshotError> {
        for piece in bytes.chunks(CHUNK) {
            self.0
                .send(Ok(pb::SnapshotChunk { data: piece.to_vec() }))
                .await
                .map_err(|_| SnapshotError::Io("the client went away".into()))?;
        }
        Ok(())
    }
}

type ChunkStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotChunk, Status>> + Send>>;

#[tonic::async_trait]
impl pb::operator_service_server::OperatorService for OperatorApi {
    type SnapshotStream = ChunkStream;

    async fn snapshot(&self, request: Request<pb::SnapshotRequest>) -> Result<Response<ChunkStream>, Status> {
        let pause_writes = request.into_inner().pause_writes;
        // A few chunks in flight: the export waits for a slow client
        // instead of buffering the whole snapshot in memory.
        let (tx, rx) = mpsc::channel(4);
        let store = self.store.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let mut sink = ChunkSink(tx.clone());
            let exported = if pause_writes {
                match store.pause_writes().await {
                    Some(pause) => {
                        tracing::info!(waited_ms = started.elapsed().as_millis() as u64, "snapshot: writes paused");
                        snapshot::export_paused(store.as_ref(), &mut sink, pause).await
                    }
                    None => Err(SnapshotError::Io("this server's store cannot pause its writes".into())),
                }
            } else {
                snapshot::export(store.as_ref(), &mut sink).await
            };
            match exported {
                Ok(trailer) => tracing::info!(
                    records = %snapshot::describe(&trailer.counts),
                    took_ms = started.elapsed().as_millis() as u64,
                    pause_writes,
                    "snapshot sent"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "snapshot failed");
                    let _ = tx.send(Err(Status::internal(format!("snapshot failed: {e}")))).await;
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}
