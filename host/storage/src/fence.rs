//! The leader-fencing state one store handle keeps (see
//! [`crate::Store::claim_leadership`]): the epoch it claimed, and whether a
//! larger one has fenced it. Shared by both backends; the check itself is
//! each backend's (inside the write transaction for SQLite, a quorum read
//! before each write for Cassandra).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Result, StoreError};

/// Claimed epoch (0: never claimed) and the sticky fenced flag.
#[derive(Debug, Default)]
pub struct Fence {
    mine: AtomicU64,
    fenced: AtomicBool,
}

impl Fence {
    /// The epoch claimed, if any.
    pub fn claimed(&self) -> Option<u64> {
        match self.mine.load(Ordering::Acquire) {
            0 => None,
            e => Some(e),
        }
    }

    /// Records a successful claim.
    pub fn set_claimed(&self, epoch: u64) {
        self.mine.store(epoch, Ordering::Release);
    }

    /// True once fenced.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Compares the store's recorded epoch with the claimed one: a larger
    /// recorded epoch fences this handle for good.
    pub fn check(&self, recorded: u64) -> Result<()> {
        let Some(mine) = self.claimed() else { return Ok(()) };
        if recorded > mine || self.is_fenced() {
            if !self.fenced.swap(true, Ordering::AcqRel) {
                tracing::error!(
                    mine,
                    current = recorded,
                    "fenced: another server claimed leadership of the store; refusing every write from now on"
                );
            }
            return Err(StoreError::Fenced { mine, current: recorded.max(mine) });
        }
        Ok(())
    }

    /// Refuses at once when already fenced (no round trip needed).
    pub fn refuse_if_fenced(&self) -> Result<()> {
        match self.claimed() {
            Some(mine) if self.is_fenced() => Err(StoreError::Fenced { mine, current: mine }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unclaimed_handles_are_never_fenced_and_a_larger_epoch_fences_for_good() {
        let f = Fence::default();
        assert!(f.check(99).is_ok(), "never claimed: no fence");
        f.set_claimed(5);
        assert!(f.check(5).is_ok());
        assert!(f.check(3).is_ok(), "an older epoch in the store does not fence a newer leader");
        assert!(f.check(6).expect_err("fenced").is_fenced());
        assert!(f.is_fenced());
        assert!(f.check(5).is_err(), "sticky");
        assert!(f.refuse_if_fenced().is_err());
    }
}
