//! Leader fencing: claiming an epoch (Paxos on the `leader_epochs` row,
//! which also hands out the generation of the write clock, decision 0049)
//! and the check every write makes once one is claimed. The check is a read
//! beside the write, not part of it: see docs/storage.md, "Leader fencing",
//! for what that leaves and why the task runtimes' write clock closes it.

use super::CassandraStore;
use crate::error::{Result, StoreError};
use crate::fence::MAX_GENERATION;

/// Rounds of the claim's read-then-conditional-write before giving up
/// (another server claiming at the same moment makes one round fail).
const CLAIM_ROUNDS: u32 = 10;

impl CassandraStore {
    /// Before a write: refuses it if a later leader's epoch is recorded.
    /// A read at the configured consistency, not part of the write (see
    /// docs/storage.md, "Leader fencing", for the window this leaves).
    pub(super) async fn fence_check(&self) -> Result<()> {
        if self.fence.claimed().is_none() {
            return Ok(());
        }
        self.fence.refuse_if_fenced()?;
        let recorded = self
            .fence_reads
            .recorded_epoch(|| super::fence_reads::Reader {
                session: self.session.clone(),
                statement: self.s.sel_fence.clone(),
                tries: self.tries,
            })
            .await?;
        self.fence.check(recorded)
    }
}

impl CassandraStore {
    /// The fence read before a runtime write, skipped by a handle acting
    /// as paused past it ([`CassandraStore::act_as_paused_past_fence_check`]).
    pub(super) async fn fence_check_before(&self) -> Result<()> {
        if self.past_fence_check.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        self.fence_check().await
    }
}

pub(super) async fn claim_leadership(store: &CassandraStore, epoch: u64) -> Result<()> {
    if epoch == 0 {
        return Err(StoreError::Invalid("leader epoch 0: epochs start at 1".into()));
    }
    let e = epoch as i64;
    // The fence of schema 6 first, so that a server of that schema still
    // running is fenced as before: Paxos on its one row, create it or raise
    // it if ours is larger, then read it back to learn who won.
    if !store.applied("leader fence", &store.s.ins_fence, (e,)).await? {
        store.applied("leader fence", &store.s.raise_fence, (e, e)).await?;
    }
    let rows: Vec<(i64,)> = store.rows("leader fence", &store.s.sel_fence_serial, ()).await?;
    let recorded = rows.first().map_or(0, |r| r.0.max(0) as u64);
    if recorded > epoch {
        return Err(StoreError::Fenced { mine: epoch, current: recorded });
    }
    let generation = claim_generation(store, epoch).await?;
    store.fence.set_generation(generation);
    store.fence.set_claimed(epoch);
    tracing::info!(
        epoch,
        generation,
        "cassandra: leader epoch claimed; writes are fenced against older leaders, task runtimes written at this generation's clock"
    );
    Ok(())
}

/// Records `epoch` in `leader_epochs` with the next generation (the same
/// one when the epoch is claimed again), by a read at serial consistency
/// and a conditional write on both columns: two claims cannot both take
/// the same generation, and a smaller epoch never gets a larger one.
async fn claim_generation(store: &CassandraStore, epoch: u64) -> Result<u64> {
    let e = epoch as i64;
    for _ in 0..CLAIM_ROUNDS {
        let rows: Vec<(Option<i64>, Option<i64>)> = store.rows("leader epochs", &store.s.sel_epoch_serial, ()).await?;
        let applied = match rows.first() {
            None => store.applied("leader epochs", &store.s.ins_epoch, (e, 1i64)).await?.then_some(1),
            Some((recorded, generation)) => {
                let recorded_epoch = recorded.map_or(0, |r| r.max(0) as u64);
                let generation = generation.map_or(0, |g| g.max(0) as u64);
                if recorded_epoch > epoch {
                    return Err(StoreError::Fenced { mine: epoch, current: recorded_epoch });
                }
                if recorded_epoch == epoch && generation > 0 {
                    return Ok(generation);
                }
                let next = generation + 1;
                if next > MAX_GENERATION {
                    return Err(StoreError::Backend(format!(
                        "leader generations are spent ({MAX_GENERATION} claims of a new epoch on this keyspace); see decision 0049"
                    )));
                }
                store
                    .applied("leader epochs", &store.s.raise_epoch, (e, next as i64, *recorded, generation as i64))
                    .await?
                    .then_some(next)
            }
        };
        if let Some(generation) = applied {
            return Ok(generation);
        }
    }
    Err(StoreError::Unavailable(format!("leader epoch {epoch}: the claim kept racing with other claims")))
}
