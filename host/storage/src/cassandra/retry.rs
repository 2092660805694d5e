//! Retries with exponential backoff for statements that timed out, found
//! their replicas unavailable or overloaded, or lost their connection.
//!
//! Only idempotent statements come here (plain writes of whole values,
//! reads). Conditional writes (LWT) are not retried blindly: a timed-out
//! Paxos round may have applied, so the compare-and-set code reads back
//! and decides (see `CassandraStore::cas`).

use std::future::Future;
use std::time::Duration;

use scylla::errors::{DbError, ExecutionError, RequestAttemptError, WriteType};

use crate::error::StoreError;

/// How an execution error should be handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Transient: try again after a pause.
    Transient,
    /// A conditional write timed out: it may or may not have applied.
    CasUnknown,
    /// Permanent: report it.
    Fatal,
}

/// Classifies an execution error.
pub fn classify(e: &ExecutionError) -> Class {
    match e {
        ExecutionError::RequestTimeout(_) | ExecutionError::ConnectionPoolError(_) | ExecutionError::EmptyPlan => {
            Class::Transient
        }
        ExecutionError::LastAttemptError(a) => match a {
            RequestAttemptError::DbError(DbError::WriteTimeout { write_type: WriteType::Cas, .. }, _) => {
                Class::CasUnknown
            }
            RequestAttemptError::DbError(
                DbError::ReadTimeout { .. }
                | DbError::WriteTimeout { .. }
                | DbError::Unavailable { .. }
                | DbError::Overloaded
                | DbError::IsBootstrapping
                | DbError::RateLimitReached { .. },
                _,
            )
            | RequestAttemptError::BrokenConnectionError(_)
            | RequestAttemptError::UnableToAllocStreamId => Class::Transient,
            _ => Class::Fatal,
        },
        _ => Class::Fatal,
    }
}

/// Pause before try `attempt` (1-based): 50 ms doubling, capped at 2 s, with jitter.
pub fn backoff(attempt: u32) -> Duration {
    let base = 50u64.saturating_mul(1 << attempt.min(6)).min(2000);
    // Jitter from the clock's nanoseconds: no RNG dependency, good enough
    // to keep retrying clients from marching in step.
    let jitter = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::from(d.subsec_nanos()) % (base / 2 + 1))
        .unwrap_or(0);
    Duration::from_millis(base / 2 + jitter)
}

/// Runs `f` until it succeeds, fails permanently, or `tries` are spent.
pub async fn retrying<T, F, Fut>(what: &str, tries: u32, mut f: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ExecutionError>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) => match classify(&e) {
                Class::Fatal => return Err(StoreError::Backend(format!("{what}: {e}"))),
                Class::Transient | Class::CasUnknown if attempt < tries.max(1) => {
                    tracing::warn!(what, attempt, error = %e, "cassandra: transient error, retrying");
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Class::Transient | Class::CasUnknown => {
                    return Err(StoreError::Unavailable(format!("{what}: {e} (after {attempt} tries)")));
                }
            },
        }
    }
}
