//! Rules every backend applies to [`JobEvent`]s (decision 0025): the input
//! checks, folding a batch's repeats together before anything is written,
//! and the bounded retention per job (most recently seen kept, the rest
//! and anything not seen for [`limits::MAX_JOB_EVENT_AGE_MS`] dropped).

use paceline_model::event::{EventReason, EventType, JobEvent};

use crate::error::{Result, StoreError};
use crate::types::{check_id, limits};
use crate::validate;

/// The `instance` column value of a job's own event (instances are below
/// `MAX_INSTANCES`, so -1 is never a task's).
pub(crate) const JOB_ROW: i64 = -1;

/// The column value of an event's instance.
pub(crate) fn instance_column(instance: Option<u32>) -> i64 {
    instance.map_or(JOB_ROW, i64::from)
}

/// The instance of a column value.
pub(crate) fn instance_of_column(value: i64) -> Option<u32> {
    u32::try_from(value).ok()
}

/// An event from a stored row (both backends store the same columns).
#[allow(clippy::too_many_arguments)]
pub(crate) fn from_row(
    job_id: &str,
    instance: i64,
    reason: &str,
    message: String,
    event_type: &str,
    first_seen_ms: i64,
    last_seen_ms: i64,
    count: i64,
) -> Result<JobEvent> {
    let corrupt = |what: &str, value: &str| StoreError::Corrupt {
        what: format!("event of job {job_id}"),
        reason: format!("unknown {what} `{value}`"),
    };
    Ok(JobEvent {
        job_id: job_id.to_string(),
        instance: instance_of_column(instance),
        reason: EventReason::parse(reason).ok_or_else(|| corrupt("reason", reason))?,
        event_type: EventType::parse(event_type).ok_or_else(|| corrupt("type", event_type))?,
        message,
        first_seen_ms: first_seen_ms.max(0) as u64,
        last_seen_ms: last_seen_ms.max(0) as u64,
        count: count.max(0) as u64,
    })
}

/// Checks a batch whole before anything is written.
pub(crate) fn check(events: &[JobEvent]) -> Result<()> {
    for e in events {
        check_id("job", &e.job_id)?;
        if let Some(i) = e.instance {
            validate::instance(i)?;
        }
        if e.message.len() > limits::MAX_EVENT_MESSAGE {
            return Err(StoreError::TooLarge {
                what: format!("message of a {} event of job {}", e.reason.as_str(), e.job_id),
                size: e.message.len(),
                max: limits::MAX_EVENT_MESSAGE,
            });
        }
        if e.count == 0 || e.first_seen_ms > e.last_seen_ms {
            return Err(StoreError::Invalid(format!(
                "{} event of job {}: count 0 or first seen after last seen",
                e.reason.as_str(),
                e.job_id
            )));
        }
    }
    Ok(())
}

/// The batch with events of the same identity folded into one, in the
/// order each identity first appears. A flush rarely holds repeats (the
/// recorder folds them), but a backend must not write one row twice in a
/// statement batch.
pub(crate) fn fold(events: &[JobEvent]) -> Vec<JobEvent> {
    let mut out: Vec<JobEvent> = Vec::with_capacity(events.len());
    let mut seen: std::collections::HashMap<(&str, Option<u32>, &str, &str), usize> =
        std::collections::HashMap::with_capacity(events.len());
    for e in events {
        match seen.entry((e.job_id.as_str(), e.instance, e.reason.as_str(), e.message.as_str())) {
            std::collections::hash_map::Entry::Occupied(at) => out[*at.get()].absorb(e),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(out.len());
                out.push(e.clone());
            }
        }
    }
    out
}

/// A job's events after retention: those last seen within
/// [`limits::MAX_JOB_EVENT_AGE_MS`] of the newest, at most
/// [`limits::MAX_EVENTS_PER_JOB`], most recently seen first.
pub(crate) fn retain(mut events: Vec<JobEvent>) -> Vec<JobEvent> {
    sort_newest_first(&mut events);
    if let Some(newest) = events.first().map(|e| e.last_seen_ms) {
        let cutoff = newest.saturating_sub(limits::MAX_JOB_EVENT_AGE_MS);
        events.retain(|e| e.last_seen_ms >= cutoff);
    }
    events.truncate(limits::MAX_EVENTS_PER_JOB);
    events
}

/// Most recently seen first; ties in a fixed order (object, reason, message)
/// so every backend returns the same list.
pub(crate) fn sort_newest_first(events: &mut [JobEvent]) {
    events.sort_by(|a, b| {
        b.last_seen_ms
            .cmp(&a.last_seen_ms)
            .then_with(|| instance_column(a.instance).cmp(&instance_column(b.instance)))
            .then_with(|| a.reason.as_str().cmp(b.reason.as_str()))
            .then_with(|| a.message.cmp(&b.message))
    });
}

/// What a read returns from a job's retained events: one task's (or all
/// with `None`), at most `limit`.
pub(crate) fn select(events: Vec<JobEvent>, instance: Option<u32>, limit: u32) -> Vec<JobEvent> {
    let mut events = retain(events);
    if let Some(i) = instance {
        events.retain(|e| e.instance == Some(i));
    }
    events.truncate(limit as usize);
    events
}
