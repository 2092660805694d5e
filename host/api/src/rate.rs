//! Per-principal rate limits for calls that cost the shared server much
//! (validating a plugin compiles and runs untrusted Wasm on the runtime
//! that also serves placement).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tonic::Status;

/// A token bucket per principal name: `burst` calls at once, then one per
/// `every`. The map holds one entry per principal that has called, and
/// principals come from the tokens file, so it stays small.
#[derive(Debug)]
pub struct PerPrincipal {
    what: &'static str,
    burst: u32,
    every: Duration,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl PerPrincipal {
    /// `burst` calls, then one per `every`, for each principal; `what` names
    /// the call in the refusal.
    pub fn new(what: &'static str, burst: u32, every: Duration) -> PerPrincipal {
        PerPrincipal { what, burst: burst.max(1), every, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one call from `who`'s bucket, or refuses with
    /// RESOURCE_EXHAUSTED saying when the next call is allowed.
    pub fn take(&self, who: &str) -> Result<(), Status> {
        self.take_at(who, Instant::now())
    }

    fn take_at(&self, who: &str, now: Instant) -> Result<(), Status> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let burst = f64::from(self.burst);
        let bucket = buckets.entry(who.to_string()).or_insert(Bucket { tokens: burst, at: now });
        let per_second = 1.0 / self.every.as_secs_f64().max(f64::EPSILON);
        let earned = now.saturating_duration_since(bucket.at).as_secs_f64() * per_second;
        bucket.tokens = (bucket.tokens + earned).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = Duration::from_secs_f64((1.0 - bucket.tokens) / per_second);
        Err(Status::resource_exhausted(format!(
            "{who} has made {} {} calls recently (at most {} at once, then one every {}s): try again in {:.1}s",
            self.burst,
            self.what,
            self.burst,
            self.every.as_secs(),
            wait.as_secs_f64()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_period_per_principal() {
        let limit = PerPrincipal::new("ValidatePlugin", 2, Duration::from_secs(10));
        let t0 = Instant::now();
        assert!(limit.take_at("bob", t0).is_ok());
        assert!(limit.take_at("bob", t0).is_ok());
        let refused = limit.take_at("bob", t0).expect_err("third at once");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused.message().contains("try again in 10.0s"), "{}", refused.message());
        // Another principal has a bucket of its own.
        assert!(limit.take_at("carol", t0).is_ok());
        // Half a period earns half a call: still refused; a whole one, allowed.
        assert!(limit.take_at("bob", t0 + Duration::from_secs(5)).is_err());
        assert!(limit.take_at("bob", t0 + Duration::from_secs(10)).is_ok());
        assert!(limit.take_at("bob", t0 + Duration::from_secs(10)).is_err());
        // A long pause refills to the burst, not beyond.
        let later = t0 + Duration::from_secs(1000);
        assert!(limit.take_at("bob", later).is_ok());
        assert!(limit.take_at("bob", later).is_ok());
        assert!(limit.take_at("bob", later).is_err());
    }
}
