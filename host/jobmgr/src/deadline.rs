//! The deadline queue: restart backoffs, max-run-time checks and kill
//! retries, each tagged with the run it was set for so that a deadline of
//! an older run is dropped when it fires.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What a deadline does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeadlineKind {
    /// Start the next run (a `restart-after` the lifecycle asked for).
    Restart,
    /// Tell the lifecycle the run may be past its max run time (`timer` event).
    MaxRunTime,
    /// Re-send a kill that the host has not confirmed.
    KillRetry,
    /// Submit again a run whose launch was refused more than once in a row
    /// (a backoff: a refusal that lasts, such as a missing secret, must not
    /// spin launches and store writes).
    Resubmit,
}

/// One deadline.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline {
    /// When, milliseconds since the epoch.
    pub at_ms: u64,
    /// The job's key.
    pub job_key: u64,
    /// Instance.
    pub instance: u32,
    /// The run it was set for.
    pub run: u64,
    /// What to do.
    pub kind: DeadlineKind,
}

/// A min-heap of deadlines.
#[derive(Debug, Default)]
pub struct DeadlineQueue {
    heap: BinaryHeap<Reverse<Deadline>>,
}

impl DeadlineQueue {
    /// Adds a deadline.
    pub fn push(&mut self, d: Deadline) {
        self.heap.push(Reverse(d));
    }

    /// Removes and returns every deadline due at `now_ms`, earliest first.
    pub fn due(&mut self, now_ms: u64) -> Vec<Deadline> {
        let mut out = Vec::new();
        while self.heap.peek().is_some_and(|Reverse(d)| d.at_ms <= now_ms) {
            if let Some(Reverse(d)) = self.heap.pop() {
                out.push(d);
            }
        }
        out
    }

    /// The earliest deadline, if any.
    pub fn next_at(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse(d)| d.at_ms)
    }

    /// Number of deadlines queued.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// No deadline queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_in_order() {
        let mut q = DeadlineQueue::default();
        for at in [30, 10, 20] {
            q.push(Deadline { at_ms: at, job_key: 1, instance: 0, run: 1, kind: DeadlineKind::Restart });
        }
        assert_eq!(q.due(25).iter().map(|d| d.at_ms).collect::<Vec<_>>(), vec![10, 20]);
        assert_eq!(q.next_at(), Some(30));
    }
}
