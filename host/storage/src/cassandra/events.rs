//! Task events: a partition per task, written in unlogged batches with a
//! TTL (`event_ttl_days`) so that history is bounded by age, and read
//! newest first up to [`limits::MAX_EVENTS_PER_TASK`].

use paceline_model::task::TaskEvent;

use super::{CassandraStore, task_what};
use crate::error::Result;
use crate::types::{check_id, check_page, decode, encode, limits};

pub(super) async fn append_task_events(
    store: &CassandraStore,
    job_id: &str,
    instance: u32,
    events: &[TaskEvent],
) -> Result<()> {
    store.fence_check().await?;
    check_id("job", job_id)?;
    let mut rows = Vec::with_capacity(events.len());
    for e in events {
        let body = encode(|| format!("event of {}", task_what(job_id, instance)), e, limits::MAX_RECORD)?;
        let size = body.len() + 64;
        rows.push((
            0u8,
            size,
            (
                job_id.to_string(),
                instance as i32,
                e.at_ms as i64,
                e.run as i64,
                e.to.as_str(),
                body,
                store.event_ttl_secs,
            ),
        ));
    }
    store.batched("task events", &store.s.ins_event, rows).await
}

pub(super) async fn append_job_events(store: &CassandraStore, job_id: &str, events: &[(u32, TaskEvent)]) -> Result<()> {
    store.fence_check().await?;
    check_id("job", job_id)?;
    let mut rows = Vec::with_capacity(events.len());
    for (instance, e) in events {
        let body = encode(|| format!("event of {}", task_what(job_id, *instance)), e, limits::MAX_RECORD)?;
        let size = body.len() + 64;
        rows.push((
            *instance, // one batch per partition (job, instance)
            size,
            (
                job_id.to_string(),
                *instance as i32,
                e.at_ms as i64,
                e.run as i64,
                e.to.as_str(),
                body,
                store.event_ttl_secs,
            ),
        ));
    }
    store.batched("task events", &store.s.ins_event, rows).await
}

pub(super) async fn task_events(
    store: &CassandraStore,
    job_id: &str,
    instance: u32,
    limit: u32,
) -> Result<Vec<TaskEvent>> {
    check_page(limit)?;
    // History is bounded per task: older events are never returned and expire by TTL.
    let limit = limit.min(limits::MAX_EVENTS_PER_TASK as u32) as i32;
    let rows: Vec<(String,)> = store.rows("task events", &store.s.sel_events, (job_id, instance as i32, limit)).await?;
    rows.iter().map(|(b,)| decode(|| format!("event of {}", task_what(job_id, instance)), b)).collect()
}
