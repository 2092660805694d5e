//! Job events (decision 0025): a partition per job, one row per identity
//! (instance, reason, message; instance -1 is the job's own). A write reads
//! the job's partition (at most [`limits::MAX_EVENTS_PER_JOB`] rows and a
//! few more between trims), folds the batch in, writes the changed rows
//! with a TTL of [`limits::MAX_JOB_EVENT_AGE_MS`] (age-bounded retention
//! without a sweep) and deletes what falls past the number bound. The fold
//! is a read then a write, exact with one writer (the fenced leader).

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use paceline_model::event::JobEvent;

use super::{CONCURRENCY, CassandraStore};
use crate::error::Result;
use crate::job_events::{check, fold, from_row, instance_column, retain, select};
use crate::types::{check_id, check_page, limits};

/// One stored row: instance, reason, message, type, first seen, last seen, count.
type Row = (i32, String, String, String, i64, i64, i64);

async fn stored(store: &CassandraStore, job_id: &str) -> Result<Vec<JobEvent>> {
    let rows: Vec<Row> = store.scan("job events", &store.s.sel_job_events, (job_id,)).await?;
    rows.into_iter()
        .map(|(instance, reason, message, event_type, first, last, count)| {
            from_row(job_id, i64::from(instance), &reason, message, &event_type, first, last, count)
        })
        .collect()
}

pub(super) async fn record_job_events(store: &CassandraStore, events: &[JobEvent]) -> Result<()> {
    store.fence_check().await?;
    check(events)?;
    let mut by_job: BTreeMap<String, Vec<JobEvent>> = BTreeMap::new();
    for e in fold(events) {
        by_job.entry(e.job_id.clone()).or_default().push(e);
    }
    futures::stream::iter(by_job)
        .map(|(job_id, batch)| async move { record_one_job(store, &job_id, batch).await })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

async fn record_one_job(store: &CassandraStore, job_id: &str, batch: Vec<JobEvent>) -> Result<()> {
    let mut all = stored(store, job_id).await?;
    let mut touched = Vec::with_capacity(batch.len());
    for e in batch {
        match all.iter_mut().find(|s| s.same_as(&e)) {
            Some(s) => {
                s.absorb(&e);
                touched.push(s.clone());
            }
            None => {
                touched.push(e.clone());
                all.push(e);
            }
        }
    }
    let kept = retain(all.clone());
    let is_kept = |e: &JobEvent| kept.iter().any(|k| k.same_as(e));
    let ttl = (limits::MAX_JOB_EVENT_AGE_MS / 1000).min(i32::MAX as u64) as i32;
    let rows: Vec<(u8, usize, _)> = touched
        .iter()
        .filter(|e| is_kept(e))
        .map(|e| {
            (
                0u8, // one partition: the job
                e.message.len() + 96,
                (
                    job_id.to_string(),
                    instance_column(e.instance) as i32,
                    e.reason.as_str(),
                    e.message.clone(),
                    e.event_type.as_str(),
                    e.first_seen_ms as i64,
                    e.last_seen_ms as i64,
                    e.count.min(i64::MAX as u64) as i64,
                    ttl,
                ),
            )
        })
        .collect();
    store.batched("job events", &store.s.ins_job_event, rows).await?;
    let dropped: Vec<(u8, usize, _)> = all
        .iter()
        .filter(|e| !is_kept(e))
        .map(|e| {
            (
                0u8,
                e.message.len() + 64,
                (job_id.to_string(), instance_column(e.instance) as i32, e.reason.as_str(), e.message.clone()),
            )
        })
        .collect();
    store.batched("job events", &store.s.del_job_event, dropped).await
}

pub(super) async fn job_events(
    store: &CassandraStore,
    job_id: &str,
    instance: Option<u32>,
    limit: u32,
) -> Result<Vec<JobEvent>> {
    check_id("job", job_id)?;
    check_page(limit)?;
    Ok(select(stored(store, job_id).await?, instance, limit))
}

pub(super) async fn delete_job_events(store: &CassandraStore, job_id: &str) -> Result<()> {
    store.exec("job events", &store.s.del_job_events, (job_id,)).await.map(|_| ())
}
