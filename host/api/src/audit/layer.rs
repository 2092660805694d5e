//! The audit's part of [`crate::auth::AuthLayer`]: what it does before a
//! call (wrap the body to copy its first message, leave a note for the
//! handler) and after (make the record, queue it).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use paceline_storage::{AuditRecord, audit::MAX_AUDIT_FIELD};
use tonic::Status;

use super::peek::{PeekBody, Peeked};
use super::refusals::{Source, peer_key};
use super::{AuditNote, Auditor, WebOutcome, describe::describe, now_ms, shorten};
use crate::auth::Principal;

/// Who the record names when no known token came with the call.
pub const UNAUTHENTICATED: &str = "(unauthenticated)";

/// An audited call in flight.
#[derive(Debug)]
pub struct Pending {
    auditor: Auditor,
    method: String,
    /// The path, with the query for a web route (what [`describe`] reads).
    path: String,
    who: Option<Arc<Principal>>,
    body: Peeked,
    note: Arc<AuditNote>,
    /// Where the call came from (for rate-limiting its refusal).
    peer: Option<IpAddr>,
}

impl Pending {
    /// Wraps the request's body and leaves a note on it for the handler.
    pub fn start(
        auditor: Auditor,
        request: &mut http::Request<tonic::body::Body>,
        who: Option<Arc<Principal>>,
    ) -> Pending {
        let path = request.uri().path().to_owned();
        let grpc = !path.starts_with("/ui/");
        // A web route's query says what it acts on (an upload's slot); a
        // gRPC path has none. The record's method stays the bare path.
        let described_path = match request.uri().query() {
            Some(q) if !grpc => format!("{path}?{q}"),
            _ => path.clone(),
        };
        let body = std::mem::replace(request.body_mut(), tonic::body::Body::empty());
        let (peek, copy) = PeekBody::new(body, grpc);
        *request.body_mut() = tonic::body::Body::new(peek);
        let note = Arc::new(AuditNote::default());
        request.extensions_mut().insert(note.clone());
        let peer = peer_of(request);
        Pending {
            auditor,
            method: method_name(request.method(), &path),
            path: described_path,
            who,
            body: copy,
            note,
            peer,
        }
    }

    /// Makes the record from the answer's head and queues it. A gRPC call's
    /// error is in the head (tonic answers every handler error at once); a
    /// web route's is on the response ([`WebOutcome`]).
    pub fn finish(self, response: &http::Response<tonic::body::Body>) {
        let (code, message) = outcome(response);
        let body = self.body.lock().map(|b| b.clone()).unwrap_or_default();
        let mut described = describe(&self.path, &body);
        // Only a call that succeeded made the job its handler noted: a
        // refused create names no id that never existed.
        if let Some(job) = self.note.job().filter(|_| code == "OK") {
            described.target = job.to_string();
            described.job_id = job.to_string();
        }
        let (principal, role) = match &self.who {
            Some(w) => (w.name.clone(), w.role.to_string()),
            None => (UNAUTHENTICATED.to_string(), String::new()),
        };
        // Who changed what, at the default level (refusals are logged by the
        // auth layer); the audit log keeps the same and more.
        if code == "OK" {
            tracing::info!(
                caller = %principal,
                role = %role,
                call = %self.method,
                target = %described.target,
                summary = %described.summary,
                "change"
            );
        }
        let record = record(
            principal,
            role,
            self.method,
            described.target,
            described.job_id,
            described.summary,
            code,
            message,
            now_ms(),
        );
        if record.code == "OK" {
            // A change that went through: always recorded in full.
            self.auditor.record(record);
        } else {
            // A refusal by a handler (a pool not granted, an unknown job):
            // rate-limited per source like the layer's own refusals.
            let source = Source::of(self.who.as_ref().map(|w| w.name.as_str()), self.peer);
            self.auditor.refused(source, &peer_key(self.peer), record);
        }
    }
}

/// Queues the record of a call the layer refused (no handler ran, so only
/// who, from where and what method are known), or only counts it when its
/// source has had its share of records this window ([`super::refusals`]).
pub fn refused<B>(auditor: &Auditor, request: &http::Request<B>, who: Option<&Principal>, status: &Status) {
    let (principal, role) = match who {
        Some(w) => (w.name.clone(), w.role.to_string()),
        None => (UNAUTHENTICATED.to_string(), String::new()),
    };
    let peer = peer_of(request);
    let peer_text = peer_key(peer);
    let record = record(
        principal,
        role,
        method_name(request.method(), request.uri().path()),
        String::new(),
        String::new(),
        format!("peer={peer_text}"),
        format!("{:?}", status.code()),
        status.message().to_string(),
        now_ms(),
    );
    auditor.refused(Source::of(who.map(|w| w.name.as_str()), peer), &peer_text, record);
}

/// The address of the peer that sent `request`, from the connection info
/// tonic's server puts on every request (plain TCP or TLS over TCP).
pub fn peer_of<B>(request: &http::Request<B>) -> Option<IpAddr> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let extensions = request.extensions();
    extensions
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| extensions.get::<TlsConnectInfo<TcpConnectInfo>>().and_then(|t| t.get_ref().remote_addr()))
        .map(|a| a.ip())
}

/// A gRPC path as it is; a web route with its HTTP method in front.
fn method_name(method: &http::Method, path: &str) -> String {
    if path.starts_with("/ui/") { format!("{method} {path}") } else { path.to_string() }
}

fn outcome(response: &http::Response<tonic::body::Body>) -> (String, String) {
    if let Some(web) = response.extensions().get::<WebOutcome>() {
        return (web.code.clone(), web.message.clone());
    }
    match Status::from_header_map(response.headers()) {
        Some(s) if s.code() != tonic::Code::Ok => (format!("{:?}", s.code()), s.message().to_string()),
        _ if !response.status().is_success() => (format!("HTTP {}", response.status().as_u16()), String::new()),
        _ => ("OK".into(), String::new()),
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn record(
    principal: String,
    role: String,
    method: String,
    target: String,
    job_id: String,
    summary: String,
    code: String,
    message: String,
    at_ms: u64,
) -> AuditRecord {
    let fit = |s: String| if s.len() > MAX_AUDIT_FIELD { shorten(&s, MAX_AUDIT_FIELD) } else { s };
    AuditRecord {
        at_ms,
        id: next_id(at_ms),
        principal: fit(principal),
        role,
        method: fit(method),
        target: fit(target),
        job_id: fit(job_id),
        summary: fit(summary),
        code,
        message: fit(message),
    }
}

/// Unique across processes (a random process part) and within one (a counter).
fn next_id(at_ms: u64) -> String {
    static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let process = *PROCESS.get_or_init(|| fastrand::u64(..));
    format!("{at_ms:013}-{process:016x}-{:08}", SEQ.fetch_add(1, Ordering::Relaxed))
}
