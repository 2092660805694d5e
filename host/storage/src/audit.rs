//! The audit log's records and queries, shared by every backend.
//!
//! One [`AuditRecord`] per mutating API call (and per refused call): who,
//! what, when, the outcome. The API layer writes them in batches
//! ([`crate::Store::append_audit`]), reads them newest first
//! ([`crate::Store::query_audit`]) and bounds the log by age and row count
//! ([`crate::Store::prune_audit`]). The store does not interpret the
//! fields beyond the filters.

use crate::error::{Result, StoreError};

/// Longest text of one field of a record, bytes. The writer shortens
/// longer text before it reaches the store; the store refuses it.
pub const MAX_AUDIT_FIELD: usize = 2048;

/// Most records one query returns.
pub const MAX_AUDIT_QUERY: u32 = 1000;

/// One audited call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditRecord {
    /// When the answer was ready, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Unique id of the record (the writer makes it); a record appended
    /// twice with the same id is stored once.
    pub id: String,
    /// Who called: the token's principal, `anonymous` on an open API, or
    /// `(unauthenticated)` when no known token came with the call.
    pub principal: String,
    /// The principal's role (`user`, `operator`, `admin`); empty when unknown.
    pub role: String,
    /// The method: `/paceline.v1.JobService/KillJob`, or `POST /ui/api/...`.
    pub method: String,
    /// What the call named: a job id, `job/instance`, a pool path, a host,
    /// `slot name@version`; empty when it named nothing readable.
    pub target: String,
    /// The job the call was about, when it was about one (for filtering).
    pub job_id: String,
    /// A short summary of the request (never secrets, never whole specs).
    pub summary: String,
    /// `OK`, or the gRPC code's name (`PermissionDenied`, `InvalidArgument`).
    pub code: String,
    /// The error message of a failed call; empty when it succeeded.
    pub message: String,
}

/// Which records [`crate::Store::query_audit`] returns, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only this principal's records.
    pub principal: Option<String>,
    /// Only records about this job.
    pub job_id: Option<String>,
    /// Only this method: the full path, or its last segment (`KillJob`).
    pub method: Option<String>,
    /// Only records at or after this time (ms since the epoch).
    pub since_ms: Option<u64>,
    /// Only records before this time (ms since the epoch).
    pub until_ms: Option<u64>,
    /// At most this many (1..=[`MAX_AUDIT_QUERY`]; 0 means 100).
    pub limit: u32,
}

impl AuditQuery {
    /// The effective limit.
    pub fn limit(&self) -> usize {
        match self.limit {
            0 => 100,
            n => n.min(MAX_AUDIT_QUERY) as usize,
        }
    }

    /// Whether `r` passes every filter (backends that filter in memory).
    pub fn matches(&self, r: &AuditRecord) -> bool {
        self.principal.as_ref().is_none_or(|p| &r.principal == p)
            && self.job_id.as_ref().is_none_or(|j| &r.job_id == j)
            && self.method.as_ref().is_none_or(|m| method_matches(&r.method, m))
            && self.since_ms.is_none_or(|s| r.at_ms >= s)
            && self.until_ms.is_none_or(|u| r.at_ms < u)
    }
}

/// `wanted` is the whole method or its last `/`-segment.
pub fn method_matches(method: &str, wanted: &str) -> bool {
    method == wanted || method.rsplit('/').next() == Some(wanted)
}

/// Checks records before any is written: the batch is refused whole.
pub(crate) fn check_records(records: &[AuditRecord]) -> Result<()> {
    for r in records {
        if r.id.is_empty() {
            return Err(StoreError::Invalid("audit record: empty id".into()));
        }
        for (name, value) in [
            ("id", &r.id),
            ("principal", &r.principal),
            ("role", &r.role),
            ("method", &r.method),
            ("target", &r.target),
            ("job_id", &r.job_id),
            ("summary", &r.summary),
            ("code", &r.code),
            ("message", &r.message),
        ] {
            if value.len() > MAX_AUDIT_FIELD {
                return Err(StoreError::Invalid(format!(
                    "audit record {}: {name} is {} bytes (at most {MAX_AUDIT_FIELD})",
                    r.id,
                    value.len()
                )));
            }
        }
        if r.at_ms > i64::MAX as u64 {
            return Err(StoreError::Invalid(format!("audit record {}: at_ms out of range", r.id)));
        }
    }
    Ok(())
}

/// Orders records newest first (time, then id, both descending).
pub(crate) fn newest_first(a: &AuditRecord, b: &AuditRecord) -> std::cmp::Ordering {
    b.at_ms.cmp(&a.at_ms).then_with(|| b.id.cmp(&a.id))
}
