//! Injected time. No role reads the wall clock directly: deadlines, leases,
//! backoffs and run times follow a [`Clock`], so a simulation drives every
//! role from one virtual clock and tests never sleep.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (or since the start of a simulation).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, in milliseconds.
    fn now_ms(&self) -> u64;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that moves only when told to. Clones share one reading, so the
/// simulator and every role it drives see the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start_ms)))
    }

    /// Moves the clock forward by `ms`; returns the new time.
    pub fn advance(&self, ms: u64) -> u64 {
        self.0.fetch_add(ms, Ordering::AcqRel).saturating_add(ms)
    }

    /// Sets the clock to `ms` if that is later than now; returns the time.
    pub fn advance_to(&self, ms: u64) -> u64 {
        self.0.fetch_max(ms, Ordering::AcqRel).max(ms)
    }

    /// Sets the clock to `ms`, earlier or later.
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::Release);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_reading_and_advance_to_never_goes_back() {
        let a = ManualClock::new(100);
        let b = a.clone();
        assert_eq!(a.advance(50), 150);
        assert_eq!(b.now_ms(), 150);
        assert_eq!(b.advance_to(120), 150, "advance_to does not go back");
        assert_eq!(b.advance_to(400), 400);
        a.set(10);
        assert_eq!(b.now_ms(), 10, "set may go back");
    }
}
