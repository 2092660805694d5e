//! Time, injected: the manager's heartbeat deadlines and lease TTLs run on a
//! [`Clock`], so a simulated cluster can drive them from its virtual clock
//! and tests never sleep.

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

/// A clock that moves only when told to (the simulator's).
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
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}
