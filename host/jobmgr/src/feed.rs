//! The change feed: every durable change of a job or task, in order, with a
//! revision, for watchers (the API's `WatchService`).
//!
//! Changes carry ids only (which job, which task); a watcher reads the
//! current record when it sends the change, so a burst of changes to one
//! task shows its latest state. Revisions are assigned here, under one lock,
//! so they are gap-free and ordered within the process (not across
//! restarts: a new process starts again at 1). The last [`HISTORY`] changes
//! are kept so that a watcher that reconnects with the revision it saw last
//! misses nothing; older revisions are gone (the caller answers OUT_OF_RANGE).
//!
//! Publishing costs a lock, a ring-buffer push and a reference-count bump
//! per change: no allocation on the write path.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

/// Changes kept for watchers that resume.
pub const HISTORY: usize = 16_384;
/// Changes a live watcher may fall behind before it is cut off.
pub const LAG: usize = 16_384;

/// What changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A job's runtime (state, counts) or config changed, or it was created or deleted.
    Job(Arc<str>),
    /// A task's runtime changed.
    Task(Arc<str>, u32),
    /// A pool's spec or status changed (its path).
    Pool(Arc<str>),
}

/// A change and its revision.
pub type Revised = (u64, Change);

/// A resume point that is not held: older than the history, or newer than
/// the head (a revision of an earlier run of the server).
#[derive(Debug, thiserror::Error)]
#[error("revision {asked} is not held (oldest held: {oldest}, head: {head})")]
pub struct Compacted {
    /// The revision asked for.
    pub asked: u64,
    /// The oldest revision still replayable.
    pub oldest: u64,
    /// The latest revision.
    pub head: u64,
}

struct Inner {
    head: u64,
    history: VecDeque<Revised>,
}

/// The feed. Cheap to share (`Arc`).
pub struct Feed {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Revised>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").field("head", &self.head()).finish_non_exhaustive()
    }
}

impl Default for Feed {
    fn default() -> Self {
        Feed::new()
    }
}

impl Feed {
    /// An empty feed at revision 0.
    pub fn new() -> Feed {
        let (tx, _) = broadcast::channel(LAG);
        Feed { inner: Mutex::new(Inner { head: 0, history: VecDeque::with_capacity(HISTORY) }), tx }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The latest revision (0 before any change).
    pub fn head(&self) -> u64 {
        self.lock().head
    }

    /// How many watchers are subscribed now.
    pub fn watchers(&self) -> usize {
        self.tx.receiver_count()
    }

    /// Records changes, in order; returns the last revision given.
    pub fn publish(&self, changes: impl IntoIterator<Item = Change>) -> u64 {
        let mut inner = self.lock();
        for change in changes {
            inner.head += 1;
            let revised = (inner.head, change);
            if inner.history.len() == HISTORY {
                inner.history.pop_front();
            }
            inner.history.push_back(revised.clone());
            // No receiver is not an error: nobody watches.
            let _ = self.tx.send(revised);
        }
        inner.head
    }

    /// Changes after `from` that are still held, and a receiver of every
    /// later one (no gap, no repeat between the two). `from` 0: nothing
    /// replayed, from now on.
    pub fn subscribe(&self, from: u64) -> Result<(Vec<Revised>, broadcast::Receiver<Revised>), Compacted> {
        let inner = self.lock();
        let rx = self.tx.subscribe();
        if from == 0 || from == inner.head {
            return Ok((Vec::new(), rx));
        }
        if from > inner.head {
            // From another incarnation of the server (revisions restart).
            let oldest = inner.history.front().map_or(inner.head + 1, |(r, _)| *r);
            return Err(Compacted { asked: from, oldest, head: inner.head });
        }
        let oldest = inner.history.front().map_or(inner.head + 1, |(r, _)| *r);
        if from + 1 < oldest {
            return Err(Compacted { asked: from, oldest, head: inner.head });
        }
        let skip = (from + 1 - oldest) as usize;
        Ok((inner.history.iter().skip(skip).cloned().collect(), rx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(i: u32) -> Change {
        Change::Task(Arc::from("j"), i)
    }

    #[test]
    fn resuming_replays_what_was_missed_then_goes_live() {
        let feed = Feed::new();
        assert_eq!(feed.publish([task(0), task(1), task(2)]), 3);
        let (replay, mut rx) = feed.subscribe(1).expect("held");
        assert_eq!(replay, vec![(2, task(1)), (3, task(2))]);
        feed.publish([task(3)]);
        assert_eq!(rx.try_recv().expect("live"), (4, task(3)));
        assert!(rx.try_recv().is_err(), "nothing twice");
        let (replay, _) = feed.subscribe(0).expect("from now");
        assert!(replay.is_empty());
        let (replay, _) = feed.subscribe(4).expect("at head");
        assert!(replay.is_empty());
        assert!(feed.subscribe(9).is_err(), "a revision the feed never gave");
    }

    #[test]
    fn revisions_older_than_the_history_are_out_of_range() {
        let feed = Feed::new();
        feed.publish((0..HISTORY as u32 + 10).map(task));
        let err = feed.subscribe(5).expect_err("compacted");
        assert_eq!((err.oldest, err.head), (11, HISTORY as u64 + 10));
        let (replay, _) = feed.subscribe(10).expect("the oldest held follows 10");
        assert_eq!(replay.len(), HISTORY);
        assert_eq!(replay[0].0, 11);
    }
}
