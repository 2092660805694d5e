//! Time: state timeouts, placement backoff, the timer heap, and the kill
//! requests handed to the runtime.

use super::*;

impl ResourceManager {
    /// The earliest time a timer (state timeout) or a placement backoff is
    /// due, if any: a caller driving a virtual clock need not tick before.
    pub fn next_wake_ms(&self) -> Option<u64> {
        let timer = self.timers.peek().map(|Reverse((at, _, _))| *at);
        let backoff = self.backoff.peek().map(|Reverse((at, _))| *at);
        match (timer, backoff) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Hosts joined that together offer at most `room` on any one host (the
    /// component-wise maximum of what each can take): every task waiting out
    /// a placement backoff (or an unreachable host manager's retry delay)
    /// whose resources fit in `room` goes back to READY now, its attempts
    /// kept (so its next failure waits longer still); the others keep their
    /// backoff, since no host that joined could take them. After a host
    /// manager's failover every host joins again, so tasks whose leases
    /// failed meanwhile are placed at once; a small host that joins a full
    /// cluster re-offers only what it could hold. One pass over the waiting
    /// tasks, reusing the heap's buffer. Returns how many went back.
    pub fn retry_backed_off(&mut self, room: &Resources) -> usize {
        let mut waiting = std::mem::take(&mut self.backoff).into_vec();
        let mut back = 0;
        waiting.retain(|&Reverse((_, raw))| {
            let id = TaskHandle(raw);
            let Some(t) = live(&self.tasks, id).filter(|t| t.state == TaskState::Ready) else {
                // Ended, or no longer waiting: the entry is stale.
                return false;
            };
            if !t.resources.fits_in(room) {
                return true;
            }
            self.ready[kind_index(t.kind)].push_back(raw);
            back += 1;
            false
        });
        self.backoff = BinaryHeap::from(waiting);
        back
    }

    /// A task whose placement backoff is over goes back to its ready queue,
    /// if it is still the same live READY task; whether it went.
    pub(super) fn end_backoff(&mut self, raw: u64) -> bool {
        let id = TaskHandle(raw);
        let Some(kind) = live(&self.tasks, id).filter(|t| t.state == TaskState::Ready).map(|t| t.kind) else {
            return false;
        };
        self.ready[kind_index(kind)].push_back(raw);
        true
    }

    /// Kill requests not yet handed out.
    pub fn take_kills(&mut self) -> Vec<KillRequest> {
        std::mem::take(&mut self.kills)
    }

    /// A task's timer stays in the heap after the task leaves the timed
    /// state (PLACING, LAUNCHING, …) until it is due, minutes later: at a
    /// million tasks placed in a minute that is millions of dead entries
    /// (tens of MiB). When the heap has doubled since the last compaction,
    /// the dead ones are dropped, so the work is amortised per push.
    pub(super) fn compact_timers(&mut self) {
        if self.timers.len() < self.timers_compact_at {
            return;
        }
        let tasks = &self.tasks;
        self.timers.retain(|Reverse((_, raw, epoch))| {
            let id = TaskHandle(*raw);
            live(tasks, id).is_some_and(|t| t.epoch == *epoch)
        });
        let live = self.timers.len();
        self.timers.shrink_to(live.saturating_mul(2));
        self.timers_compact_at = live.saturating_mul(2).max(MIN_TIMERS_COMPACT_AT);
    }

    /// State-timeout entries held, live and dead (memory accounting and
    /// tests).
    pub fn timer_entries(&self) -> usize {
        self.timers.len()
    }

    pub(super) fn fire_timers(&mut self, now_ms: u64) -> usize {
        self.compact_timers();
        let mut fired = 0;
        while let Some(&Reverse((at, raw, epoch))) = self.timers.peek() {
            if at > now_ms {
                break;
            }
            self.timers.pop();
            let id = TaskHandle(raw);
            let current = live(&self.tasks, id).is_some_and(|t| t.epoch == epoch);
            if current && self.apply(id, Transition::Timeout, now_ms).is_ok() {
                tracing::debug!(task = raw, "task timed out back to READY");
                fired += 1;
            }
        }
        while let Some(&Reverse((at, raw))) = self.backoff.peek() {
            if at > now_ms {
                break;
            }
            self.backoff.pop();
            self.end_backoff(raw);
        }
        fired
    }
}
