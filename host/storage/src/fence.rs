//! The leader-fencing state one store handle keeps (see
//! [`crate::Store::claim_leadership`]): the epoch it claimed, and whether a
//! larger one has fenced it. Shared by both backends; the check itself is
//! each backend's (inside the write transaction for SQLite, a quorum read
//! before and after each write for Cassandra).
//!
//! For Cassandra it also keeps the write clock (decision 0049): the
//! timestamps (`USING TIMESTAMP`) of task runtime writes, whose high bits
//! are the leader's generation (a small number the claim takes from the
//! store, one more per new epoch) and whose low bits are microseconds,
//! made strictly increasing. Every timestamp a leader issues is therefore
//! larger than every timestamp any earlier leader issued, whatever the
//! clocks say, and Cassandra's last-write-wins drops a deposed leader's
//! late writes wherever the new leader has written.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Result, StoreError};

/// Bits of a write timestamp below the generation: microseconds since
/// [`CLOCK_ORIGIN_US`], 2^50 of them (35 years, to 2061).
pub const CLOCK_BITS: u32 = 50;
/// 2026-01-01T00:00:00Z in microseconds since the Unix epoch: where the
/// low bits of the write clock count from.
pub const CLOCK_ORIGIN_US: u64 = 1_767_225_600_000_000;
/// Added to the generation in the high bits, so that every timestamp the
/// clock issues (≥ 2^51, year 2041 in wall-clock microseconds) is above
/// every timestamp Cassandra gave a write before this scheme (wall-clock
/// microseconds, 2^50.7 today): rows written by an older server lose to
/// the first write of a newer one.
const GENERATION_OFFSET: u64 = 2;
/// The largest generation that fits: (generation + 2) · 2^50 < 2^63.
pub const MAX_GENERATION: u64 = (1 << (63 - CLOCK_BITS)) - 1 - GENERATION_OFFSET;

/// Claimed epoch (0: never claimed), the sticky fenced flag, and the
/// write clock (generation and the last timestamp issued).
#[derive(Debug, Default)]
pub struct Fence {
    mine: AtomicU64,
    fenced: AtomicBool,
    generation: AtomicU64,
    last_timestamp: AtomicU64,
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

    /// Records the generation a claim was given (see [`Fence::next_timestamp`]).
    pub fn set_generation(&self, generation: u64) {
        self.generation.store(generation, Ordering::Release);
    }

    /// The generation of this handle's claim (0: never claimed).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The next write timestamp: `(generation + 2) << 50` plus the
    /// microseconds since 2026, or one more than the last one issued if the
    /// clock has not moved on (or went back). Strictly increasing for this
    /// handle; larger than any timestamp of a smaller generation. Fails only
    /// when a generation has used up its 2^50 microseconds (after 2061), or
    /// when the generation is out of range; both write nothing.
    pub fn next_timestamp(&self) -> Result<i64> {
        let generation = self.generation();
        if generation > MAX_GENERATION {
            return Err(StoreError::Invalid(format!("leader generation {generation} is above {MAX_GENERATION}")));
        }
        let base = (generation + GENERATION_OFFSET) << CLOCK_BITS;
        let end = base + (1 << CLOCK_BITS);
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
            .saturating_sub(CLOCK_ORIGIN_US)
            .min((1 << CLOCK_BITS) - 1);
        let wanted = base + now_us;
        let mut last = self.last_timestamp.load(Ordering::Acquire);
        loop {
            let ts = wanted.max(last + 1);
            if ts >= end {
                return Err(StoreError::Backend(format!(
                    "the write clock of leader generation {generation} is spent; a new leadership claim starts another"
                )));
            }
            match self.last_timestamp.compare_exchange_weak(last, ts, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(ts as i64),
                Err(seen) => last = seen,
            }
        }
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

    #[test]
    fn write_timestamps_increase_and_a_later_generation_beats_any_earlier_one() {
        let old = Fence::default();
        old.set_generation(7);
        let mut prev = 0;
        for _ in 0..10_000 {
            let ts = old.next_timestamp().expect("ts");
            assert!(ts > prev, "strictly increasing");
            prev = ts;
        }
        // Wall-clock microseconds of today (what Cassandra stamps by itself)
        // are below every timestamp of the clock, generation 0 included.
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_micros();
        let unclaimed = Fence::default();
        assert!(i128::from(unclaimed.next_timestamp().expect("ts")) > wall as i128);
        // The next leader, even with a clock far behind (its microseconds
        // are at most 2^50 apart), writes above the old leader.
        let new = Fence::default();
        new.set_generation(8);
        assert!(new.next_timestamp().expect("ts") > prev + (1 << 40));
        // The deposed leader's clock running on does not reach the new one.
        assert!(old.next_timestamp().expect("ts") < new.next_timestamp().expect("ts"));
        let top = Fence::default();
        top.set_generation(MAX_GENERATION);
        assert!(top.next_timestamp().expect("the last generation still fits") > 0);
        top.set_generation(MAX_GENERATION + 1);
        assert!(top.next_timestamp().is_err());
    }
}
