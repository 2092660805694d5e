//! Leader fencing: claiming an epoch (Paxos on the one `leader_fence`
//! row) and the check every write makes first once one is claimed. The
//! check is a read beside the write, not part of it: see docs/storage.md,
//! "Leader fencing", for the window this leaves.

use super::CassandraStore;
use crate::error::{Result, StoreError};

impl CassandraStore {
    /// Before a write: refuses it if a later leader's epoch is recorded.
    /// A read at the configured consistency, not part of the write (see
    /// docs/storage.md, "Leader fencing", for the window this leaves).
    pub(super) async fn fence_check(&self) -> Result<()> {
        if self.fence.claimed().is_none() {
            return Ok(());
        }
        self.fence.refuse_if_fenced()?;
        let rows: Vec<(i64,)> = self.rows("leader fence", &self.s.sel_fence, ()).await?;
        self.fence.check(rows.first().map_or(0, |r| r.0.max(0) as u64))
    }
}

pub(super) async fn claim_leadership(store: &CassandraStore, epoch: u64) -> Result<()> {
    if epoch == 0 {
        return Err(StoreError::Invalid("leader epoch 0: epochs start at 1".into()));
    }
    let e = epoch as i64;
    // Paxos on the one fence row: create it, or raise it if ours is larger;
    // then read it back at serial consistency to learn who won.
    if !store.applied("leader fence", &store.s.ins_fence, (e,)).await? {
        store.applied("leader fence", &store.s.raise_fence, (e, e)).await?;
    }
    let rows: Vec<(i64,)> = store.rows("leader fence", &store.s.sel_fence_serial, ()).await?;
    let recorded = rows.first().map_or(0, |r| r.0.max(0) as u64);
    if recorded > epoch {
        return Err(StoreError::Fenced { mine: epoch, current: recorded });
    }
    store.fence.set_claimed(epoch);
    tracing::info!(epoch, "cassandra: leader epoch claimed; writes are fenced against older leaders");
    Ok(())
}
