//! Job events (decision 0025): what the job manager notes for people, from
//! its own writes (scheduled, lost, killed, failed, the job's end), from the
//! placement round's send-backs (deferred) and from preemption; the flush
//! into the store; and the read that folds in what is not flushed yet.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use paceline_joints::EventSink;
use paceline_model::UnplacedReason;
use paceline_model::event::{EventReason, JobEvent};
use paceline_model::job::JobState;
use paceline_model::task::{TaskEvent, TaskState};
use paceline_plugin_sdk::types::VictimReason;

use super::JobManager;
use crate::error::JobError;
use crate::events::{Crowd, EventRecorder};

/// Least time between two flushes of noted events into the store.
pub const EVENT_FLUSH_INTERVAL_MS: u64 = 1_000;

/// Why the preemption policy chose a victim, for people.
fn victim_text(reason: VictimReason) -> &'static str {
    match reason {
        VictimReason::OverEntitlement => "its pool is above its entitlement and another pool needs the resources",
        VictimReason::HigherPriority => "higher-priority work in its pool needs the resources",
        VictimReason::Revoked => "it ran on revocable resources that are needed now",
    }
}

impl JobManager {
    /// The recorder events are noted in; the placement engine of this
    /// process notes its own (plugin fallbacks) through it.
    pub fn event_recorder(&self) -> Arc<EventRecorder> {
        self.events.clone()
    }

    /// Writes the events noted since the last flush into the store, in one
    /// call; on failure they are kept for the next. Returns how many
    /// distinct events were written.
    pub async fn flush_events(&self) -> Result<usize, JobError> {
        let _flushing = self.events_flush.write().await;
        self.flush_events_held().await
    }

    /// [`JobManager::flush_events`] with `events_flush` held for writing.
    async fn flush_events_held(&self) -> Result<usize, JobError> {
        let (events, dropped) = self.events.drain();
        if dropped > 0 {
            tracing::warn!(dropped, "job events dropped: more distinct events than the recorder holds between flushes");
        }
        if events.is_empty() {
            return Ok(0);
        }
        match self.store.record_job_events(&events).await {
            Ok(()) => Ok(events.len()),
            Err(e) => {
                self.events.restore(events);
                Err(e.into())
            }
        }
    }

    /// Flushes when [`EVENT_FLUSH_INTERVAL_MS`] passed since the last flush.
    pub(crate) async fn flush_events_if_due(&self, now_ms: u64) {
        let last = self.events_flushed_at.load(Ordering::Relaxed);
        if now_ms < last.saturating_add(EVENT_FLUSH_INTERVAL_MS) {
            return;
        }
        // The tick never waits for an events read in progress (a store read,
        // slow on Cassandra): it flushes on a later tick instead.
        let Ok(_flushing) = self.events_flush.try_write() else {
            return;
        };
        self.events_flushed_at.store(now_ms, Ordering::Relaxed);
        if let Err(e) = self.flush_events_held().await {
            tracing::warn!(error = %e, "writing job events failed; kept for the next flush");
        }
    }

    /// A job's events (or one task's), most recently seen first, at most
    /// `limit`: the stored ones with those noted since the last flush
    /// folded in, so a read never lags the recorder.
    pub async fn job_events(&self, id: &str, instance: Option<u32>, limit: u32) -> Result<Vec<JobEvent>, JobError> {
        // No flush between the two reads: its drained events would be in
        // neither place.
        let _reading = self.events_flush.read().await;
        let mut events = self.store.job_events(id, instance, limit).await?;
        for p in self.events.pending_of(id) {
            if instance.is_some_and(|i| p.instance != Some(i)) {
                continue;
            }
            match events.iter_mut().find(|e| e.same_as(&p)) {
                Some(e) => e.absorb(&p),
                None => events.push(p),
            }
        }
        events.sort_by_key(|e| std::cmp::Reverse(e.last_seen_ms));
        events.truncate(limit as usize);
        Ok(events)
    }

    /// Notes the events people care about among task state changes just
    /// written: placed (scheduled), lost, killed and failed runs. Placed
    /// and killed come in crowds (a job's tasks together): past the first
    /// few of a job they are counted on the job (decision 0074).
    pub(crate) fn note_transitions(&self, job_id: &str, changes: &[(u32, TaskEvent)]) {
        let sink: &dyn EventSink = &*self.events;
        for (instance, e) in changes {
            let (i, at) = (Some(*instance), e.at_ms);
            let detail = if e.message.is_empty() { e.reason.as_str() } else { e.message.as_str() };
            match (e.to, e.host.as_deref()) {
                (TaskState::Placed, Some(h)) => self.events.record_crowded(
                    job_id,
                    *instance,
                    Crowd::Scheduled,
                    format_args!("scheduled on host {h}"),
                    at,
                ),
                (TaskState::Lost, Some(h)) => {
                    sink.record(job_id, i, EventReason::Lost, format_args!("lost on host {h}: {detail}"), at)
                }
                (TaskState::Lost, None) => {
                    sink.record(job_id, i, EventReason::Lost, format_args!("lost: {detail}"), at)
                }
                (TaskState::Killed, Some(h)) => {
                    self.events.record_crowded(job_id, *instance, Crowd::Killed, format_args!("killed on host {h}"), at)
                }
                (TaskState::Killed, None) => self.events.record_crowded(
                    job_id,
                    *instance,
                    Crowd::Killed,
                    format_args!("killed before it was placed"),
                    at,
                ),
                (TaskState::Failed, Some(h)) => {
                    sink.record(job_id, i, EventReason::Failed, format_args!("failed on host {h}: {detail}"), at)
                }
                (TaskState::Failed, None) => {
                    sink.record(job_id, i, EventReason::Failed, format_args!("failed: {detail}"), at)
                }
                _ => {}
            }
        }
    }

    /// Notes tasks a placement round sent back, once per task, on the job:
    /// a job's tasks usually wait for the same reason, and one event per
    /// reason keeps a big job's events readable.
    pub(crate) fn note_deferred(&self, deferred: &[(u64, UnplacedReason)], now_ms: u64) {
        if deferred.is_empty() {
            return;
        }
        let m = self.mem();
        for &(key, reason) in deferred {
            if let Some(job) = m.jobs.get(&key) {
                self.events.record(&job.id, None, EventReason::Deferred, format_args!("{}", reason.describe()), now_ms);
            }
        }
    }

    /// Notes a preemption victim, with the policy's reason.
    pub(crate) fn note_preempted(&self, job_id: &str, instance: u32, host: Option<&str>, why: VictimReason) {
        let host = host.unwrap_or("no host");
        self.events.record(
            job_id,
            Some(instance),
            EventReason::Preempted,
            format_args!("preempted on host {host}: {}", victim_text(why)),
            self.now(),
        );
    }

    /// Notes a lifecycle call about the job answered by a fallback.
    pub(crate) fn note_plugin_fallback(
        &self,
        job_id: &str,
        slot: &str,
        failed: &paceline_plugin::CallError,
        served_by: &paceline_plugin::ServedBy,
        at_ms: u64,
    ) {
        let by = match served_by {
            paceline_plugin::ServedBy::Version(id) => id.clone(),
            paceline_plugin::ServedBy::Native(name) => format!("the native policy {name}"),
        };
        self.events.record(
            job_id,
            None,
            EventReason::PluginFellBack,
            format_args!(
                "lifecycle plugin {} failed ({}) on slot {slot}; answered by {by}",
                failed.version, failed.kind
            ),
            at_ms,
        );
    }

    /// Notes a job reaching a terminal state.
    pub(crate) fn note_job_state(&self, job_id: &str, from: JobState, to: JobState, at_ms: u64) {
        if to.is_terminal() && !from.is_terminal() {
            self.events.record(job_id, None, EventReason::JobCompleted, format_args!("job {}", to.as_str()), at_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deferred_event_says_why_in_words_and_ends_with_the_stable_code() {
        for reason in UnplacedReason::ALL {
            let text = reason.describe();
            assert!(text.ends_with(&format!("({})", reason.as_str())), "{text}");
            assert!(text.len() > reason.as_str().len() + 20, "prose, not only the code: {text}");
        }
    }
}
