//! Fence reads shared by concurrent writes (decision 0066).
//!
//! Once a leader has claimed its epoch, every write reads the fence before
//! it (and a task runtime write again after it): at the job manager's
//! concurrency that is thousands of quorum reads of one row a second, as
//! many as the writes themselves. A read can serve every caller that was
//! already waiting when it was sent: what each caller needs is *a* read of
//! the fence that began after it asked (for the read after a write: after
//! the write was acknowledged), not a read of its own. So callers queue, one
//! read at a time is in flight, and each read answers everyone queued before
//! it was sent; callers arriving meanwhile wait for the next one. A caller
//! waits at most for the read in flight and its own.

use std::sync::{Arc, Mutex, PoisonError};

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use tokio::sync::oneshot;

use super::retry::retrying;
use crate::error::{Result, StoreError};

/// The epoch recorded in `leader_epochs` (0 when none), or why it could not be read.
type Answer = std::result::Result<u64, String>;

/// The queue of callers waiting for a fence read.
#[derive(Default)]
pub(super) struct FenceReads {
    pending: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    /// Whether a reader task is running (it sends the next read while
    /// anyone waits).
    reading: bool,
    waiting: Vec<oneshot::Sender<Answer>>,
}

/// What the reader task needs, owned.
pub(super) struct Reader {
    pub session: Arc<Session>,
    pub statement: PreparedStatement,
    pub tries: u32,
}

impl FenceReads {
    /// The recorded epoch, from a read sent after this call began.
    pub(super) async fn recorded_epoch(self: &Arc<Self>, reader: impl FnOnce() -> Reader) -> Result<u64> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            p.waiting.push(tx);
            !std::mem::replace(&mut p.reading, true)
        };
        if start {
            tokio::spawn(self.clone().read_while_waited_for(reader()));
        }
        match rx.await {
            Ok(answer) => answer.map_err(StoreError::Unavailable),
            Err(_) => Err(StoreError::Unavailable("leader fence: the read was abandoned".into())),
        }
    }

    async fn read_while_waited_for(self: Arc<Self>, reader: Reader) {
        loop {
            let answered = {
                let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                if p.waiting.is_empty() {
                    p.reading = false;
                    return;
                }
                std::mem::take(&mut p.waiting)
            };
            // Sent after every caller in `answered` asked.
            let answer = read(&reader).await;
            for tx in answered {
                let _ = tx.send(answer.clone());
            }
        }
    }
}

async fn read(reader: &Reader) -> Answer {
    let bound = reader.statement.clone().bind(&()).map_err(|e| format!("leader fence: {e}"))?;
    let qr = retrying("leader fence", reader.tries, || reader.session.execute_bound_unpaged(&bound))
        .await
        .map_err(|e| e.to_string())?;
    let rows = qr.into_rows_result().map_err(|e| format!("leader fence: {e}"))?;
    let first = rows.maybe_first_row::<(Option<i64>,)>().map_err(|e| format!("leader fence: {e}"))?;
    Ok(first.and_then(|r| r.0).map_or(0, |e| e.max(0) as u64))
}
