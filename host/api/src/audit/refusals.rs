//! Refused calls, recorded so that one client cannot flood the log.
//!
//! Every refused call used to be one record: 1,500 unauthenticated POSTs
//! wrote 1,500 rows in about a second, so one client could push real
//! records out of `max_rows` in minutes. Now refusals are counted per
//! *source* (the principal when the caller is known, else the peer's
//! address; IPv6 peers by their /64, which one host usually holds whole) in
//! fixed windows: the first [`AuditSettings::refusals_per_window`] of a
//! window are recorded one by one, the rest only counted, and when the
//! window closes the count becomes ONE record ("N more refused calls from
//! PEER between T1 and T2"). The log so grows by O(sources × windows), not
//! O(requests). Successful calls never pass through here: they are always
//! recorded in full.
//!
//! At most [`AuditSettings::refusal_sources`] sources are tracked at once;
//! refusals from further ones share one overflow source, so the table of
//! sources is bounded too.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};

use paceline_storage::AuditRecord;

use super::{AuditSettings, now_ms};

/// Where a refused call came from, as far as the server can tell.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// A known principal (by name): its refusals are counted together
    /// wherever it calls from.
    Principal(String),
    /// No known principal: the peer address (an IPv6 peer's /64).
    Peer(String),
    /// Too many sources at once: everything beyond the bound.
    Overflow,
}

impl Source {
    /// The source of a call by `principal` (when known) from `peer`.
    pub fn of(principal: Option<&str>, peer: Option<IpAddr>) -> Source {
        match principal {
            Some(name) => Source::Principal(name.to_string()),
            None => Source::Peer(peer_key(peer)),
        }
    }
}

/// A peer's address as a key: IPv4 whole, IPv6 by its /64 (one host
/// usually holds a whole /64 and could rotate through it).
pub fn peer_key(peer: Option<IpAddr>) -> String {
    match peer.map(|ip| ip.to_canonical()) {
        None => "(unknown peer)".into(),
        Some(IpAddr::V4(v4)) => v4.to_string(),
        Some(IpAddr::V6(v6)) => {
            let s = v6.segments();
            let prefix = std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
            format!("{prefix}/64")
        }
    }
}

/// One refusal, as the layer knows it.
#[derive(Clone, Debug)]
pub struct Refusal {
    /// The principal's name, or [`super::layer::UNAUTHENTICATED`].
    pub principal: String,
    /// The principal's role; empty when unknown.
    pub role: String,
    /// The method, as the record names it.
    pub method: String,
    /// The gRPC code's name.
    pub code: String,
    /// The refusal's message.
    pub message: String,
    /// The peer's address (for the aggregate's text).
    pub peer: String,
}

/// What [`Gate::admit`] decided for one refusal.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Record it one by one.
    Record,
    /// Only counted; it will be in the window's aggregate record.
    Counted,
}

#[derive(Debug)]
struct Window {
    started_ms: u64,
    recorded: u32,
    /// Refusals counted and not recorded in this window.
    counted: u64,
    first_counted_ms: u64,
    last_counted_ms: u64,
    /// The last counted refusal (who, the method and code if they were all
    /// the same, the message).
    last: Option<Refusal>,
    several_methods: bool,
    several_codes: bool,
}

/// The per-source windows (pure: the time is passed in, so tests need no clock).
#[derive(Debug)]
pub struct Windows {
    window_ms: u64,
    per_window: u32,
    max_sources: usize,
    by_source: HashMap<Source, Window>,
}

impl Windows {
    /// Empty, with the settings' bounds.
    pub fn new(settings: &AuditSettings) -> Windows {
        Windows {
            window_ms: (settings.refusal_window.as_millis() as u64).max(1),
            per_window: settings.refusals_per_window,
            max_sources: settings.refusal_sources.max(1),
            by_source: HashMap::new(),
        }
    }

    /// Decides whether `refusal` from `source` at `now_ms` is recorded, and
    /// returns the aggregate of the source's window if that window had
    /// closed (so the next one starts).
    pub fn admit(&mut self, source: Source, refusal: &Refusal, now_ms: u64) -> (Verdict, Option<AuditRecord>) {
        let source = if self.by_source.contains_key(&source) || self.by_source.len() < self.max_sources {
            source
        } else {
            Source::Overflow
        };
        let window_ms = self.window_ms;
        let mut closed = None;
        let ended = self.by_source.get(&source).is_some_and(|w| now_ms.saturating_sub(w.started_ms) >= window_ms);
        if ended && let Some(w) = self.by_source.remove(&source) {
            closed = aggregate(&source, w, now_ms);
        }
        let w = self.by_source.entry(source).or_insert_with(|| Window {
            started_ms: now_ms,
            recorded: 0,
            counted: 0,
            first_counted_ms: 0,
            last_counted_ms: 0,
            last: None,
            several_methods: false,
            several_codes: false,
        });
        if w.recorded < self.per_window {
            w.recorded += 1;
            return (Verdict::Record, closed);
        }
        if w.counted == 0 {
            w.first_counted_ms = now_ms;
        }
        w.counted += 1;
        w.last_counted_ms = now_ms;
        if let Some(last) = &w.last {
            w.several_methods |= last.method != refusal.method;
            w.several_codes |= last.code != refusal.code;
        }
        w.last = Some(refusal.clone());
        (Verdict::Counted, closed)
    }

    /// Closes every window older than the window length at `now_ms` and
    /// returns their aggregates (a window with nothing counted makes none).
    pub fn flush(&mut self, now_ms: u64) -> Vec<AuditRecord> {
        let window_ms = self.window_ms;
        let done: Vec<Source> = self
            .by_source
            .iter()
            .filter(|(_, w)| now_ms.saturating_sub(w.started_ms) >= window_ms)
            .map(|(s, _)| s.clone())
            .collect();
        self.close(done, now_ms)
    }

    /// Closes every window (the server is stopping).
    pub fn flush_all(&mut self, now_ms: u64) -> Vec<AuditRecord> {
        let all: Vec<Source> = self.by_source.keys().cloned().collect();
        self.close(all, now_ms)
    }

    fn close(&mut self, sources: Vec<Source>, now_ms: u64) -> Vec<AuditRecord> {
        sources
            .into_iter()
            .filter_map(|s| {
                let w = self.by_source.remove(&s)?;
                aggregate(&s, w, now_ms)
            })
            .collect()
    }

    /// Sources with an open window.
    pub fn sources(&self) -> usize {
        self.by_source.len()
    }
}

/// The method an aggregate names when the calls it counts named several.
pub const SEVERAL_METHODS: &str = "(several methods)";

/// The one record of a window's counted refusals; none when none were counted.
fn aggregate(source: &Source, w: Window, now_ms: u64) -> Option<AuditRecord> {
    let last = w.last?;
    if w.counted == 0 {
        return None;
    }
    let from = match source {
        Source::Principal(name) => format!("{name} (last from {})", last.peer),
        Source::Peer(peer) => peer.clone(),
        Source::Overflow => "peers beyond the tracked bound".to_string(),
    };
    let summary = format!(
        "{} more refused calls from {from} between {} and {} (counted, not recorded one by one)",
        w.counted,
        utc(w.first_counted_ms),
        utc(w.last_counted_ms)
    );
    let (principal, role) = match source {
        Source::Overflow => (super::layer::UNAUTHENTICATED.to_string(), String::new()),
        _ => (last.principal, last.role),
    };
    let method = if w.several_methods { SEVERAL_METHODS.to_string() } else { last.method };
    let code = if w.several_codes { "(several codes)".to_string() } else { last.code };
    Some(super::layer::record(
        principal,
        role,
        method,
        String::new(),
        String::new(),
        summary,
        code,
        format!("last: {}", last.message),
        now_ms,
    ))
}

/// The gate the [`super::Auditor`] passes refusals through: the windows,
/// and the queue their aggregates go to. When the last auditor goes, the
/// open windows' aggregates are queued (so a stopping server loses none).
#[derive(Debug)]
pub struct Gate {
    windows: Mutex<Windows>,
    queue: tokio::sync::mpsc::Sender<AuditRecord>,
}

impl Gate {
    /// A gate queueing its aggregates on `queue`, and (on a runtime) a task
    /// that closes windows as they end, so a peer that stops sending still
    /// gets its aggregate within about a window.
    pub fn start(settings: &AuditSettings, queue: tokio::sync::mpsc::Sender<AuditRecord>) -> Arc<Gate> {
        let gate = Arc::new(Gate { windows: Mutex::new(Windows::new(settings)), queue });
        let every = (settings.refusal_window / 4).max(std::time::Duration::from_millis(50));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(close_windows(Arc::downgrade(&gate), every));
        }
        gate
    }

    /// Whether a refusal from `source` is recorded one by one; queues the
    /// aggregate of a window it closes.
    pub fn admit(&self, source: Source, refusal: &Refusal) -> Verdict {
        let (verdict, closed) = match self.windows.lock() {
            Ok(mut w) => w.admit(source, refusal, now_ms()),
            // A panic elsewhere poisoned the lock: record rather than lose.
            Err(_) => (Verdict::Record, None),
        };
        if let Some(record) = closed {
            self.queue(record);
        }
        verdict
    }

    fn flush(&self) {
        let records = match self.windows.lock() {
            Ok(mut w) => w.flush(now_ms()),
            Err(_) => return,
        };
        for r in records {
            self.queue(r);
        }
    }

    fn queue(&self, record: AuditRecord) {
        if self.queue.try_send(record).is_err() {
            tracing::warn!("an aggregate audit record of refused calls was dropped (queue full or writer stopped)");
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let records = match self.windows.get_mut() {
            Ok(w) => w.flush_all(now_ms()),
            Err(_) => return,
        };
        for r in records {
            self.queue(r);
        }
    }
}

async fn close_windows(gate: Weak<Gate>, every: std::time::Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(gate) = gate.upgrade() else { break };
        gate.flush();
    }
}

/// `ms` since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(per_window: u32, window_s: u64, sources: usize) -> AuditSettings {
        AuditSettings {
            refusals_per_window: per_window,
            refusal_window: std::time::Duration::from_secs(window_s),
            refusal_sources: sources,
            ..AuditSettings::default()
        }
    }

    fn refusal(method: &str) -> Refusal {
        Refusal {
            principal: super::super::layer::UNAUTHENTICATED.into(),
            role: String::new(),
            method: method.into(),
            code: "Unauthenticated".into(),
            message: "no token".into(),
            peer: "192.0.2.7".into(),
        }
    }

    fn peer(ip: &str) -> Source {
        Source::of(None, Some(ip.parse().expect("ip")))
    }

    #[test]
    fn a_flood_from_one_peer_is_a_few_records_and_one_aggregate_with_the_rest_counted() {
        let mut w = Windows::new(&settings(10, 60, 100));
        let t0 = 1_790_000_000_000;
        let mut recorded = 0;
        for i in 0..1500u64 {
            let (verdict, closed) = w.admit(peer("192.0.2.7"), &refusal("/paceline.v1.JobService/CreateJob"), t0 + i);
            assert!(closed.is_none(), "the window is still open");
            recorded += u64::from(verdict == Verdict::Record);
        }
        assert_eq!(recorded, 10);
        assert!(w.flush(t0 + 59_999).is_empty(), "not before the window ends");
        let aggregates = w.flush(t0 + 60_000);
        assert_eq!(aggregates.len(), 1, "{aggregates:#?}");
        let a = &aggregates[0];
        assert!(a.summary.starts_with("1490 more refused calls from 192.0.2.7 between "), "{}", a.summary);
        assert_eq!((a.method.as_str(), a.code.as_str()), ("/paceline.v1.JobService/CreateJob", "Unauthenticated"));
        assert_eq!(a.principal, "(unauthenticated)");
        assert_eq!(w.sources(), 0, "a closed window is forgotten");
        // The next window records its first few again.
        assert_eq!(w.admit(peer("192.0.2.7"), &refusal("/x"), t0 + 70_000).0, Verdict::Record);
    }

    #[test]
    fn a_new_refusal_after_the_window_closes_it_and_several_methods_are_named_as_such() {
        let mut w = Windows::new(&settings(1, 60, 100));
        assert_eq!(w.admit(peer("192.0.2.1"), &refusal("/a"), 0).0, Verdict::Record);
        assert_eq!(w.admit(peer("192.0.2.1"), &refusal("/a"), 1).0, Verdict::Counted);
        assert_eq!(w.admit(peer("192.0.2.1"), &refusal("/b"), 2).0, Verdict::Counted);
        let (verdict, closed) = w.admit(peer("192.0.2.1"), &refusal("/a"), 60_000);
        assert_eq!(verdict, Verdict::Record);
        let closed = closed.expect("the old window's aggregate");
        assert!(closed.summary.starts_with("2 more refused calls"), "{}", closed.summary);
        assert_eq!(closed.method, SEVERAL_METHODS);
    }

    #[test]
    fn peers_are_counted_apart_ipv6_by_its_64_and_the_number_of_sources_is_bounded() {
        let mut w = Windows::new(&settings(1, 60, 2));
        assert_eq!(w.admit(peer("192.0.2.1"), &refusal("/a"), 0).0, Verdict::Record);
        assert_eq!(w.admit(peer("2001:db8::1"), &refusal("/a"), 0).0, Verdict::Record);
        // The same /64: the same source.
        assert_eq!(w.admit(peer("2001:db8::ffff:1"), &refusal("/a"), 0).0, Verdict::Counted);
        // A third source: beyond the bound, so it shares the overflow's window.
        assert_eq!(w.admit(peer("192.0.2.3"), &refusal("/a"), 0).0, Verdict::Record);
        assert_eq!(w.admit(peer("192.0.2.4"), &refusal("/a"), 0).0, Verdict::Counted);
        assert_eq!(w.sources(), 3, "two peers and the overflow");
        assert_eq!(peer_key(Some("::ffff:192.0.2.9".parse().expect("ip"))), "192.0.2.9");
        let all = w.flush(60_000);
        assert_eq!(all.len(), 2, "the /64 and the overflow counted one each: {all:#?}");
    }

    #[test]
    fn a_principal_is_one_source_wherever_it_calls_from() {
        let mut w = Windows::new(&settings(1, 60, 100));
        let alice = |ip: &str| Source::of(Some("alice"), Some(ip.parse().expect("ip")));
        assert_eq!(w.admit(alice("192.0.2.1"), &refusal("/a"), 0).0, Verdict::Record);
        assert_eq!(w.admit(alice("192.0.2.2"), &refusal("/a"), 0).0, Verdict::Counted);
    }

    #[test]
    fn times_are_printed_in_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(utc(1_798_761_599_000), "2026-12-31T23:59:59.000Z");
    }
}
