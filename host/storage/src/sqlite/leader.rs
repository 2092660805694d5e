//! Leader fencing: claiming an epoch in the one-row `leader_fence` table.
//! The check every write makes once an epoch is claimed is the writer's
//! ([`super::writer`]): it reads the recorded epoch inside each group's
//! transaction, which holds the database's write lock.

use rusqlite::params;

use super::{SqliteStore, db, writer};
use crate::error::{Result, StoreError};

pub(super) async fn claim_leadership(store: &SqliteStore, epoch: u64) -> Result<()> {
    if epoch == 0 {
        return Err(StoreError::Invalid("leader epoch 0: epochs start at 1".into()));
    }
    let recorded = store
        .write(move |conn| {
            // Raise the recorded epoch unless a larger one is there; the
            // writer's transaction holds the database's write lock.
            conn.prepare_cached(
                "INSERT INTO leader_fence (id, epoch) VALUES (1, ?1)
                     ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch WHERE excluded.epoch > leader_fence.epoch",
            )
            .and_then(|mut s| s.execute(params![epoch]))
            .map_err(db)?;
            writer::recorded_epoch(conn).map_err(db)
        })
        .await?;
    if recorded > epoch {
        return Err(StoreError::Fenced { mine: epoch, current: recorded });
    }
    store.fence.set_claimed(epoch);
    tracing::info!(epoch, "sqlite: leader epoch claimed; writes are fenced against older leaders");
    Ok(())
}
