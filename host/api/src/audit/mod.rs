//! The audit log: one record per mutating call of the public API and the
//! web UI, and per refused call (unauthenticated, permission denied), with
//! who, what, when and the outcome.
//!
//! Recording happens in one place, [`crate::auth::AuthLayer`], so no
//! handler has to remember it: the layer decides from the method's
//! requirement ([`is_audited`]) whether a call is audited, copies the
//! first request message as it streams past ([`peek`]), and once the
//! answer's head is ready turns both into a record ([`describe`]) and hands
//! it to the [`Auditor`]. A handler may add what only it knows (the id of
//! a job it created) with [`note_job`].
//!
//! The [`Auditor`] never makes a call wait for or fail on the store: it
//! puts the record on a bounded queue, and one background task writes what
//! has queued up in one batch ([`writer`]). Refused calls pass a gate
//! first ([`refusals`]): per source (principal, else peer address) only the
//! first few of each window are recorded one by one, the rest as one
//! aggregate record, so a client hammering the API cannot flush real
//! records out of the log's row bound. A full queue drops the record
//! (counted and logged); a failed write is logged and counted, its records
//! lost. A crash loses what was queued and not yet written (at most the
//! queue's capacity; normally the last few milliseconds of calls).
//!
//! Reads ([`service::AuditApi`]) go straight to the store.

pub mod describe;
pub mod layer;
pub mod peek;
pub mod refusals;
pub mod service;
pub mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::auth::{Requirement, requirement};

pub use writer::spawn;

/// How the audit log is written and bounded.
#[derive(Clone, Debug)]
pub struct AuditSettings {
    /// Records older than this are pruned.
    pub max_age: Duration,
    /// At most this many records are kept (the oldest go first).
    pub max_rows: u64,
    /// Records waiting for the writer; beyond this, new ones are dropped.
    pub queue: usize,
    /// Most records written in one store call.
    pub batch: usize,
    /// How often the retention bounds are applied.
    pub prune_every: Duration,
    /// Refused calls recorded one by one per source (principal, else peer
    /// address) and window; the rest of the window's are one aggregate.
    pub refusals_per_window: u32,
    /// The length of that window.
    pub refusal_window: Duration,
    /// Sources tracked at once; refusals from more share one window.
    pub refusal_sources: usize,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            max_age: Duration::from_secs(90 * 86_400),
            max_rows: 1_000_000,
            queue: 8192,
            batch: 500,
            prune_every: Duration::from_secs(600),
            refusals_per_window: 10,
            refusal_window: Duration::from_secs(60),
            refusal_sources: 10_000,
        }
    }
}

/// What happened to records, for metrics and tests.
#[derive(Debug, Default)]
pub struct AuditCounters {
    /// Written to the store.
    pub written: AtomicU64,
    /// Dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Lost because a store write failed.
    pub failed: AtomicU64,
    /// Removed by pruning.
    pub pruned: AtomicU64,
    /// Refused calls only counted (in an aggregate record), not recorded
    /// one by one.
    pub refusals_counted: AtomicU64,
}

/// The handle calls record through: cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct Auditor {
    queue: tokio::sync::mpsc::Sender<paceline_storage::AuditRecord>,
    counters: Arc<AuditCounters>,
    refusals: Arc<refusals::Gate>,
}

impl Auditor {
    /// Queues a record for the writer; drops it (counted, logged) when the
    /// queue is full or the writer is gone.
    pub fn record(&self, record: paceline_storage::AuditRecord) {
        if let Err(e) = self.queue.try_send(record) {
            let dropped = self.counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // One line for the first and then every 1000th, not one per call.
            if dropped == 1 || dropped.is_multiple_of(1000) {
                let why = match e {
                    tokio::sync::mpsc::error::TrySendError::Full(_) => "queue full",
                    tokio::sync::mpsc::error::TrySendError::Closed(_) => "writer stopped",
                };
                tracing::warn!(dropped, why, "audit records dropped");
            }
        }
    }

    /// Queues the record of a refused call from `source`, or only counts it
    /// (it goes into the window's aggregate) when the source has had its
    /// share of records this window. `peer` is for the log line.
    pub fn refused(&self, source: refusals::Source, peer: &str, record: paceline_storage::AuditRecord) {
        let refusal = refusals::Refusal {
            principal: record.principal.clone(),
            role: record.role.clone(),
            method: record.method.clone(),
            code: record.code.clone(),
            message: record.message.clone(),
            peer: peer.to_string(),
        };
        match self.refusals.admit(source, &refusal) {
            refusals::Verdict::Record => self.record(record),
            refusals::Verdict::Counted => {
                let counted = self.counters.refusals_counted.fetch_add(1, Ordering::Relaxed) + 1;
                if counted == 1 || counted.is_multiple_of(1000) {
                    tracing::info!(
                        counted,
                        peer,
                        "refused calls beyond the per-source bound: counted, aggregated in the audit log"
                    );
                }
            }
        }
    }

    /// The counters.
    pub fn counters(&self) -> &AuditCounters {
        &self.counters
    }
}

/// Whether a call to `path` is audited: every mutating method of the public
/// API and the web UI. Reads are not; internal protocols (placement, host
/// manager) are not, though they need `admin`: they are the roles talking.
///
/// One mutating call is left out: `RenewOwnerLease`, a keep-alive its
/// caller sends every few seconds that changes nothing but a clock. What
/// matters is its absence, and the kill that causes is in the job's events.
pub fn is_audited(http_method: &http::Method, path: &str) -> bool {
    is_public(path)
        && path != "/paceline.v1.JobService/RenewOwnerLease"
        && matches!(requirement(http_method, path), Requirement::JobsInPool | Requirement::AtLeast(_))
}

/// A path of the public API or the web UI's JSON routes (refusals of these
/// are audited even for reads).
pub fn is_public(path: &str) -> bool {
    path.starts_with("/paceline.v1.") || path.starts_with("/ui/api/")
}

/// What a handler adds to its call's record (the layer puts one on every
/// audited request).
#[derive(Debug, Default)]
pub struct AuditNote {
    job: std::sync::OnceLock<String>,
}

impl AuditNote {
    /// The job a handler named, if any.
    pub fn job(&self) -> Option<&str> {
        self.job.get().map(String::as_str)
    }
}

/// Names the job an audited call created (its id is known only to the
/// handler). Does nothing on a call that is not audited.
pub fn note_job<T>(request: &tonic::Request<T>, id: &str) {
    if let Some(note) = request.extensions().get::<Arc<AuditNote>>() {
        let _ = note.job.set(id.to_string());
    }
}

/// The outcome of a web UI call that failed, put on its response by the
/// web routes so the layer can record the gRPC code and message.
#[derive(Clone, Debug)]
pub struct WebOutcome {
    /// The gRPC code's name.
    pub code: String,
    /// The message.
    pub message: String,
}

/// Shortens `text` to at most `max` bytes on a character boundary, marking the cut.
pub fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
