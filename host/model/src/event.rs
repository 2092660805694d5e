//! Events in the Kubernetes sense: what happened to a job or one of its
//! tasks, for people. Unlike a [`crate::task::TaskEvent`] (one row per state
//! change, the task's history), a [`JobEvent`] is keyed by its object, its
//! reason and its message, and repeats are folded into it: a task deferred
//! every round for an hour is one event whose `count` grew, seen first and
//! last at two times (decision 0025).

use serde::{Deserialize, Serialize};

/// Whether an event is routine or asks for attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventType {
    /// Expected progress (scheduled, the job completed).
    Normal,
    /// Something a person may want to look at (deferred, preempted, lost, a
    /// plugin fell back, failed).
    Warning,
}

impl EventType {
    /// `Normal` or `Warning`, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }

    /// Parses [`EventType::as_str`]'s names.
    pub fn parse(name: &str) -> Option<EventType> {
        [EventType::Normal, EventType::Warning].into_iter().find(|t| t.as_str() == name)
    }
}

/// Why an event was recorded: one word from a fixed set, so that clients can
/// filter on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventReason {
    /// A placement round put a task on a host.
    Scheduled,
    /// A placement round could not place a task; the message is its pending reason.
    Deferred,
    /// The preemption policy chose a running task as a victim.
    Preempted,
    /// A task's run was lost with its host (or its host lost track of it).
    Lost,
    /// A plugin call failed and an earlier version or the native policy answered.
    PluginFellBack,
    /// A task's run was killed.
    Killed,
    /// A task's run failed.
    Failed,
    /// The job reached a terminal state (the message says which).
    JobCompleted,
}

impl EventReason {
    /// Every reason.
    pub const ALL: [EventReason; 8] = [
        EventReason::Scheduled,
        EventReason::Deferred,
        EventReason::Preempted,
        EventReason::Lost,
        EventReason::PluginFellBack,
        EventReason::Killed,
        EventReason::Failed,
        EventReason::JobCompleted,
    ];

    /// The reason's word, as stored and shown (`Scheduled`, `PluginFellBack`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::Scheduled => "Scheduled",
            EventReason::Deferred => "Deferred",
            EventReason::Preempted => "Preempted",
            EventReason::Lost => "Lost",
            EventReason::PluginFellBack => "PluginFellBack",
            EventReason::Killed => "Killed",
            EventReason::Failed => "Failed",
            EventReason::JobCompleted => "JobCompleted",
        }
    }

    /// Parses [`EventReason::as_str`]'s words.
    pub fn parse(name: &str) -> Option<EventReason> {
        Self::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The type an event of this reason has.
    pub fn event_type(self) -> EventType {
        match self {
            EventReason::Scheduled | EventReason::JobCompleted => EventType::Normal,
            _ => EventType::Warning,
        }
    }
}

/// One event of a job (`instance` `None`) or of one of its tasks, with its
/// repeats folded in. Its identity is (job_id, instance, reason, message):
/// recording an event with the same identity adds to `count` and moves
/// `last_seen_ms` instead of adding a row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobEvent {
    /// The job.
    pub job_id: String,
    /// The task's instance, or `None` for the job itself.
    pub instance: Option<u32>,
    /// Normal or Warning.
    pub event_type: EventType,
    /// What happened, as one word.
    pub reason: EventReason,
    /// What happened, for a person: hosts, policies and reasons by name, no
    /// internal handles.
    pub message: String,
    /// When it was first seen, milliseconds since the epoch.
    pub first_seen_ms: u64,
    /// When it was last seen.
    pub last_seen_ms: u64,
    /// How many times it was seen (at least 1).
    pub count: u64,
}

impl JobEvent {
    /// A first sighting at `at_ms`.
    pub fn new(job_id: &str, instance: Option<u32>, reason: EventReason, message: String, at_ms: u64) -> JobEvent {
        JobEvent {
            job_id: job_id.to_string(),
            instance,
            event_type: reason.event_type(),
            reason,
            message,
            first_seen_ms: at_ms,
            last_seen_ms: at_ms,
            count: 1,
        }
    }

    /// Whether `other` is the same event (same object, reason and message).
    pub fn same_as(&self, other: &JobEvent) -> bool {
        self.job_id == other.job_id
            && self.instance == other.instance
            && self.reason == other.reason
            && self.message == other.message
    }

    /// Folds a later (or earlier) sighting of the same event into this one.
    pub fn absorb(&mut self, other: &JobEvent) {
        self.count = self.count.saturating_add(other.count);
        self.first_seen_ms = self.first_seen_ms.min(other.first_seen_ms);
        self.last_seen_ms = self.last_seen_ms.max(other.last_seen_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for r in EventReason::ALL {
            assert_eq!(EventReason::parse(r.as_str()), Some(r));
        }
        assert_eq!(EventReason::parse("Bored"), None);
        assert_eq!(EventType::parse("Warning"), Some(EventType::Warning));
        assert_eq!(EventType::parse("warning"), None);
    }

    #[test]
    fn absorbing_adds_counts_and_widens_the_window() {
        let mut a = JobEvent::new("j", Some(0), EventReason::Deferred, "no host fits".into(), 2_000);
        let b = JobEvent { count: 3, first_seen_ms: 1_000, last_seen_ms: 5_000, ..a.clone() };
        assert!(a.same_as(&b));
        a.absorb(&b);
        assert_eq!((a.count, a.first_seen_ms, a.last_seen_ms), (4, 1_000, 5_000));
        let other = JobEvent::new("j", None, EventReason::Deferred, "no host fits".into(), 2_000);
        assert!(!a.same_as(&other), "the job and its task are different objects");
        assert_eq!(a.event_type, EventType::Warning);
    }
}
