//! The event recorder (decision 0025): the job manager's [`EventSink`].
//! Sightings are folded in memory by identity (job, instance, reason,
//! message); the job manager's tick drains them into one store call a
//! second (`JobManager::flush_events`), where they fold into the stored
//! events. So a task deferred every round costs one hash lookup per round
//! and one row write per flush, not a store write per round. Task events
//! of the kinds that come in crowds (a job's tasks placed or killed
//! together) are listed one by one up to [`CROWD_LISTED`] a job in
//! [`CROWD_WINDOW_MS`] and counted on the job past that (decision 0074).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, MutexGuard};

use paceline_joints::EventSink;
use paceline_model::event::{EventReason, JobEvent};

/// Most distinct events held between flushes; sightings of new ones past
/// this are dropped (and counted) rather than let memory grow while the
/// store is down. A second of a busy cluster (rounds of 1,000 tasks every
/// 20 ms, each task noted as it is placed) makes over 20,000: `bench
/// server` dropped that many a second at 10,000. About 150 bytes each.
pub const MAX_PENDING_EVENTS: usize = 100_000;

/// Task events of one crowd kind (see [`EventRecorder::record_crowded`])
/// listed one by one, on their tasks, per job in a window; the window's
/// rest are counted in one event on the job. Kubernetes' event aggregator
/// combines similar events the same way (10 in 10 minutes): a 10,000-task
/// job's events stay readable and within the per-job bound, and the store
/// writes a row for the crowd rather than one a task.
pub const CROWD_LISTED: u32 = 10;

/// The window of [`CROWD_LISTED`]: it opens at a job's first listed event
/// of the kind and closes this long after.
pub const CROWD_WINDOW_MS: u64 = 10 * 60 * 1000;

/// Most windows held (one per job and kind). When full they are all
/// forgotten: the next tasks of those jobs are listed again, which costs
/// rows, never an event.
pub const MAX_CROWDS: usize = 100_000;

/// Folds sightings until they are drained. Cheap to share.
#[derive(Debug, Default)]
pub struct EventRecorder {
    pending: Mutex<Pending>,
}

/// The task events that come in crowds (a job's tasks placed or killed
/// together), see [`EventRecorder::record_crowded`]. Lost, failed and
/// preempted runs are not among them: each says why, on its task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Crowd {
    /// A task placed on a host.
    Scheduled,
    /// A task killed.
    Killed,
}

impl Crowd {
    /// The reason of the crowd's events.
    pub fn reason(self) -> EventReason {
        match self {
            Crowd::Scheduled => EventReason::Scheduled,
            Crowd::Killed => EventReason::Killed,
        }
    }

    /// What the crowd's event on its job says the tasks were (its text
    /// names it; the text is one a kind, so that every task counted past
    /// the listed ones folds into one event).
    fn verb(self) -> &'static str {
        match self {
            Crowd::Scheduled => "scheduled",
            Crowd::Killed => "killed",
        }
    }
}

/// A job's open window of one crowd kind.
#[derive(Debug, Clone, Copy)]
struct Window {
    since_ms: u64,
    listed: u32,
}

fn crowd_key(job_id: &str, crowd: Crowd) -> u64 {
    let mut h = DefaultHasher::new();
    job_id.hash(&mut h);
    crowd.hash(&mut h);
    h.finish()
}

#[derive(Debug, Default)]
struct Pending {
    /// Identity hash → index in `events` of the first event with that hash.
    index: HashMap<u64, usize>,
    events: Vec<JobEvent>,
    /// New events dropped because `events` was full, since the last drain.
    dropped: u64,
    /// (job, crowd kind) → its open window. Kept across drains (a window
    /// outlives a flush), and here rather than under a lock of its own so
    /// that a crowded event takes one lock, not two.
    windows: HashMap<u64, Window>,
}

/// Hashes formatted text without building it.
struct HashWriter<'a>(&'a mut DefaultHasher);

impl std::fmt::Write for HashWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// Compares formatted text with a string without building it.
struct EqWriter<'a> {
    rest: &'a str,
    equal: bool,
}

impl std::fmt::Write for EqWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        match self.rest.strip_prefix(s) {
            Some(rest) if self.equal => self.rest = rest,
            _ => self.equal = false,
        }
        Ok(())
    }
}

fn message_equals(stored: &str, message: std::fmt::Arguments<'_>) -> bool {
    let mut w = EqWriter { rest: stored, equal: true };
    let _ = w.write_fmt(message);
    w.equal && w.rest.is_empty()
}

fn identity_hash(job_id: &str, instance: Option<u32>, reason: EventReason, message: std::fmt::Arguments<'_>) -> u64 {
    let mut h = DefaultHasher::new();
    job_id.hash(&mut h);
    instance.hash(&mut h);
    reason.hash(&mut h);
    let _ = HashWriter(&mut h).write_fmt(message);
    h.finish()
}

fn event_hash(e: &JobEvent) -> u64 {
    identity_hash(&e.job_id, e.instance, e.reason, format_args!("{}", e.message))
}

impl EventRecorder {
    /// An empty recorder.
    pub fn new() -> EventRecorder {
        EventRecorder::default()
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        // Plain data: a panic elsewhere leaves it usable.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Everything noted since the last drain, folded, and how many new
    /// events were dropped for want of room.
    pub fn drain(&self) -> (Vec<JobEvent>, u64) {
        let mut p = self.pending();
        p.index.clear();
        let dropped = std::mem::take(&mut p.dropped);
        (std::mem::take(&mut p.events), dropped)
    }

    /// Puts events back after a failed flush, folded with what was noted since.
    pub fn restore(&self, events: Vec<JobEvent>) {
        let mut p = self.pending();
        for e in events {
            let count = e.count;
            let (first, last) = (e.first_seen_ms, e.last_seen_ms);
            p.record_with(&e.job_id, e.instance, e.reason, format_args!("{}", e.message), last, |held| {
                held.count = held.count.saturating_add(count.saturating_sub(1));
                held.first_seen_ms = held.first_seen_ms.min(first);
            });
        }
    }

    /// Notes a task's event of a kind that comes in crowds: on the task
    /// while its job has had fewer than [`CROWD_LISTED`] of the kind listed
    /// in the window, otherwise counted in the job's one event of the kind.
    pub fn record_crowded(
        &self,
        job_id: &str,
        instance: u32,
        crowd: Crowd,
        message: std::fmt::Arguments<'_>,
        at_ms: u64,
    ) {
        let mut p = self.pending();
        if p.lists(job_id, crowd, at_ms) {
            p.record_with(job_id, Some(instance), crowd.reason(), message, at_ms, |_| {});
        } else {
            let verb = crowd.verb();
            let minutes = CROWD_WINDOW_MS / 60_000;
            p.record_with(
                job_id,
                None,
                crowd.reason(),
                format_args!(
                    "more tasks {verb} than are listed one by one ({CROWD_LISTED} a job in {minutes} minutes): \
                     counted here; each task's state history has its own"
                ),
                at_ms,
                |_| {},
            );
        }
    }

    /// Drops the noted events of a job (it is being deleted).
    pub fn forget(&self, job_id: &str) {
        let mut p = self.pending();
        for crowd in [Crowd::Scheduled, Crowd::Killed] {
            p.windows.remove(&crowd_key(job_id, crowd));
        }
        if p.events.iter().any(|e| e.job_id == job_id) {
            p.events.retain(|e| e.job_id != job_id);
            // Indexes moved: rebuild (rare: deletes only).
            let index = p.events.iter().enumerate().map(|(i, e)| (event_hash(e), i)).collect::<Vec<_>>();
            p.index.clear();
            for (h, i) in index {
                p.index.entry(h).or_insert(i);
            }
        }
    }

    /// Noted events of one job not yet flushed (for reads, which fold them
    /// into what the store returns).
    pub fn pending_of(&self, job_id: &str) -> Vec<JobEvent> {
        self.pending().events.iter().filter(|e| e.job_id == job_id).cloned().collect()
    }
}

impl Pending {
    fn record_with(
        &mut self,
        job_id: &str,
        instance: Option<u32>,
        reason: EventReason,
        message: std::fmt::Arguments<'_>,
        at_ms: u64,
        adjust: impl FnOnce(&mut JobEvent),
    ) {
        let hash = identity_hash(job_id, instance, reason, message);
        let same = |e: &JobEvent| {
            e.job_id == job_id && e.instance == instance && e.reason == reason && message_equals(&e.message, message)
        };
        let at = match self.index.get(&hash) {
            Some(&i) if same(&self.events[i]) => Some(i),
            // A hash collision: look through the rest (rare).
            Some(_) => self.events.iter().position(same),
            None => None,
        };
        if let Some(i) = at {
            let e = &mut self.events[i];
            e.count = e.count.saturating_add(1);
            e.first_seen_ms = e.first_seen_ms.min(at_ms);
            e.last_seen_ms = e.last_seen_ms.max(at_ms);
            adjust(e);
            return;
        }
        if self.events.len() >= MAX_PENDING_EVENTS {
            self.dropped += 1;
            return;
        }
        let mut e = JobEvent::new(job_id, instance, reason, message.to_string(), at_ms);
        adjust(&mut e);
        let i = self.events.len();
        self.events.push(e);
        self.index.entry(hash).or_insert(i);
    }

    /// Whether the job's next event of `crowd` at `at_ms` is listed on its
    /// task; counts it if so.
    fn lists(&mut self, job_id: &str, crowd: Crowd, at_ms: u64) -> bool {
        let key = crowd_key(job_id, crowd);
        if self.windows.len() >= MAX_CROWDS && !self.windows.contains_key(&key) {
            self.windows.clear();
        }
        let fresh = Window { since_ms: at_ms, listed: 0 };
        let w = self.windows.entry(key).or_insert(fresh);
        if at_ms >= w.since_ms.saturating_add(CROWD_WINDOW_MS) {
            *w = fresh;
        }
        if w.listed < CROWD_LISTED {
            w.listed += 1;
            true
        } else {
            false
        }
    }
}

impl EventSink for EventRecorder {
    fn record(
        &self,
        job_id: &str,
        instance: Option<u32>,
        reason: EventReason,
        message: std::fmt::Arguments<'_>,
        at_ms: u64,
    ) {
        self.pending().record_with(job_id, instance, reason, message, at_ms, |_| {});
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_fold_into_one_event_per_identity() {
        let r = EventRecorder::new();
        for round in 0..5u64 {
            r.record("j", None, EventReason::Deferred, format_args!("{}", "insufficient_resources"), 100 + round);
        }
        r.record("j", Some(0), EventReason::Scheduled, format_args!("scheduled on host {}", "h1"), 50);
        r.record("j", Some(0), EventReason::Scheduled, format_args!("scheduled on host {}", "h2"), 60);
        r.record("j", Some(0), EventReason::Scheduled, format_args!("scheduled on host {}", "h1"), 70);
        let (events, dropped) = r.drain();
        assert_eq!(dropped, 0);
        let seen: Vec<(&str, u64, u64, u64)> =
            events.iter().map(|e| (e.message.as_str(), e.count, e.first_seen_ms, e.last_seen_ms)).collect();
        assert_eq!(
            seen,
            vec![
                ("insufficient_resources", 5, 100, 104),
                ("scheduled on host h1", 2, 50, 70),
                ("scheduled on host h2", 1, 60, 60),
            ]
        );
        assert!(r.drain().0.is_empty(), "a drain empties the recorder");
    }

    #[test]
    fn formatted_text_is_compared_whole() {
        assert!(message_equals("on host h1", format_args!("on host {}", "h1")));
        assert!(!message_equals("on host h1", format_args!("on host {}", "h10")));
        assert!(!message_equals("on host h10", format_args!("on host {}", "h1")));
        assert!(!message_equals("on host h1", format_args!("on hosts {}", "h1")));
    }

    #[test]
    fn restored_events_keep_their_counts() {
        let r = EventRecorder::new();
        for at in [10, 20, 30] {
            r.record("j", None, EventReason::Deferred, format_args!("x"), at);
        }
        let (events, _) = r.drain();
        r.record("j", None, EventReason::Deferred, format_args!("x"), 40);
        r.restore(events);
        let (events, _) = r.drain();
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].count, events[0].first_seen_ms, events[0].last_seen_ms), (4, 10, 40));
    }

    #[test]
    fn a_forgotten_job_leaves_the_others_findable() {
        let r = EventRecorder::new();
        r.record("gone", None, EventReason::Deferred, format_args!("x"), 1);
        r.record("kept", None, EventReason::Deferred, format_args!("x"), 1);
        r.forget("gone");
        r.record("kept", None, EventReason::Deferred, format_args!("x"), 2);
        let (events, _) = r.drain();
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].job_id.as_str(), events[0].count), ("kept", 2));
    }

    fn crowd(r: &EventRecorder, job: &str, instances: std::ops::Range<u32>, at_ms: u64) {
        for i in instances {
            r.record_crowded(job, i, Crowd::Scheduled, format_args!("scheduled on host h{i}"), at_ms + u64::from(i));
        }
    }

    #[test]
    fn kills_before_placement_are_counted_past_the_bound_and_the_count_claims_no_host() {
        let r = EventRecorder::new();
        for i in 0..12 {
            r.record_crowded("j", i, Crowd::Killed, format_args!("killed before it was placed"), 10 + u64::from(i));
        }
        let (events, _) = r.drain();
        assert_eq!(events.iter().filter(|e| e.instance.is_some()).count(), CROWD_LISTED as usize);
        let counted: Vec<_> = events.iter().filter(|e| e.instance.is_none()).collect();
        assert_eq!(counted.len(), 1, "{events:?}");
        assert_eq!((counted[0].reason, counted[0].count), (EventReason::Killed, 2));
        assert!(counted[0].message.starts_with("more tasks killed"), "{}", counted[0].message);
        assert!(
            !counted[0].message.contains("host"),
            "a task killed before placement had none: {}",
            counted[0].message
        );
    }

    #[test]
    fn a_crowd_is_listed_up_to_the_bound_and_counted_on_its_job_past_it() {
        let r = EventRecorder::new();
        crowd(&r, "big", 0..25, 1_000);
        crowd(&r, "small", 0..3, 1_000);
        r.record_crowded("big", 0, Crowd::Killed, format_args!("killed on host h0"), 2_000);
        let (events, _) = r.drain();
        let of = |job: &str, reason: EventReason| {
            events.iter().filter(|e| e.job_id == job && e.reason == reason).collect::<Vec<_>>()
        };
        let big = of("big", EventReason::Scheduled);
        let listed: Vec<Option<u32>> = big.iter().filter(|e| e.instance.is_some()).map(|e| e.instance).collect();
        assert_eq!(listed, (0..CROWD_LISTED).map(Some).collect::<Vec<_>>(), "the first ten, on their tasks");
        let counted: Vec<_> = big.iter().filter(|e| e.instance.is_none()).collect();
        assert_eq!(counted.len(), 1, "{big:?}");
        let c = counted[0];
        assert_eq!((c.count, c.first_seen_ms, c.last_seen_ms), (15, 1_010, 1_024));
        assert!(c.message.starts_with("more tasks scheduled"), "{}", c.message);
        assert_eq!(of("small", EventReason::Scheduled).len(), 3, "another job's window is its own");
        assert_eq!(of("big", EventReason::Killed)[0].instance, Some(0), "another kind's window is its own");
        // The window outlives the drain: the next task is counted, not listed.
        crowd(&r, "big", 25..26, 5_000);
        let (events, _) = r.drain();
        assert_eq!((events.len(), events[0].instance, events[0].count), (1, None, 1), "{events:?}");
        // A window later, ten are listed again.
        crowd(&r, "big", 26..40, 1_000 + CROWD_WINDOW_MS);
        let (events, _) = r.drain();
        assert_eq!(events.iter().filter(|e| e.instance.is_some()).count(), CROWD_LISTED as usize, "{events:?}");
        // Forgetting a job (deleted) closes its windows.
        r.forget("big");
        crowd(&r, "big", 0..1, 1_000 + CROWD_WINDOW_MS);
        assert_eq!(r.drain().0[0].instance, Some(0));
    }

    #[test]
    fn new_events_past_the_bound_are_dropped_and_counted() {
        let r = EventRecorder::new();
        for i in 0..MAX_PENDING_EVENTS as u32 + 3 {
            r.record("j", Some(i), EventReason::Lost, format_args!("lost"), 1);
        }
        // A repeat of a held event still folds in.
        r.record("j", Some(0), EventReason::Lost, format_args!("lost"), 2);
        let (events, dropped) = r.drain();
        assert_eq!((events.len(), dropped), (MAX_PENDING_EVENTS, 3));
        assert_eq!(events[0].count, 2);
    }
}
