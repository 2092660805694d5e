//! Task events: a partition per bucket of tasks (`task_events_by_bucket`,
//! the buckets of the tasks' own rows), so that the events of a job's state
//! change are one unlogged batch per bucket rather than one write per task;
//! written with a TTL (`event_ttl_days`) so that history is bounded by age,
//! and read newest first up to [`limits::MAX_EVENTS_PER_TASK`].
//!
//! Keyspaces from before schema 8 kept a partition per task (`task_events`).
//! A handle that finds rows there at open ([`CassandraStore::legacy_events`])
//! reads them beside the new ones and deletes them with their job; they
//! expire by their TTL like the rest, after which it finds none and skips
//! the old table (decision 0065).

use paceline_model::task::TaskEvent;

use super::{CassandraStore, bucket, task_what};
use crate::error::Result;
use crate::types::{check_id, check_page, decode, encode, limits};

/// The values of one `ins_event` row.
type EventRow = (String, i32, i32, i64, i64, &'static str, Vec<u8>, i32);

fn event_row(store: &CassandraStore, job_id: &str, instance: u32, e: &TaskEvent) -> Result<(i32, usize, EventRow)> {
    let body = encode(|| format!("event of {}", task_what(job_id, instance)), e, limits::MAX_RECORD)?;
    let size = body.len() + 64;
    let b = bucket(instance);
    Ok((
        b, // one batch per partition (job, bucket)
        size,
        (
            job_id.to_string(),
            b,
            instance as i32,
            e.at_ms as i64,
            e.run as i64,
            e.to.as_str(),
            body.into_bytes(),
            store.event_ttl_secs,
        ),
    ))
}

pub(super) async fn append_task_events(
    store: &CassandraStore,
    job_id: &str,
    instance: u32,
    events: &[TaskEvent],
) -> Result<()> {
    store.fence_check().await?;
    check_id("job", job_id)?;
    let rows = events.iter().map(|e| event_row(store, job_id, instance, e)).collect::<Result<Vec<_>>>()?;
    store.batched("task events", &store.s.ins_event, rows).await
}

pub(super) async fn append_job_events(store: &CassandraStore, job_id: &str, events: &[(u32, TaskEvent)]) -> Result<()> {
    store.fence_check().await?;
    check_id("job", job_id)?;
    let rows = events.iter().map(|(i, e)| event_row(store, job_id, *i, e)).collect::<Result<Vec<_>>>()?;
    store.batched("task events", &store.s.ins_event, rows).await
}

/// `at_ms, run, to_state, event` of one stored event: its clustering key
/// (newest first) and its JSON.
type StoredEvent = (i64, i64, String, Vec<u8>);

pub(super) async fn task_events(
    store: &CassandraStore,
    job_id: &str,
    instance: u32,
    limit: u32,
) -> Result<Vec<TaskEvent>> {
    check_page(limit)?;
    // History is bounded per task: older events are never returned and expire by TTL.
    let limit = limit.min(limits::MAX_EVENTS_PER_TASK as u32) as i32;
    let mut rows: Vec<StoredEvent> =
        store.rows("task events", &store.s.sel_events, (job_id, bucket(instance), instance as i32, limit)).await?;
    if store.legacy_events() {
        let old: Vec<(i64, i64, String, String)> =
            store.rows("task events", &store.s.sel_events_legacy, (job_id, instance as i32, limit)).await?;
        let old = old.into_iter().map(|(at, run, to, event)| (at, run, to, event.into_bytes())).collect();
        rows = newest_first(rows, old, limit as usize);
    }
    rows.iter()
        .map(|r| {
            let what = || format!("event of {}", task_what(job_id, instance));
            let json = std::str::from_utf8(&r.3)
                .map_err(|e| crate::error::StoreError::Corrupt { what: what(), reason: e.to_string() })?;
            decode(what, json)
        })
        .collect()
}

/// Two lists each newest first (the tables' clustering order) merged into
/// one, newest first, at most `limit` long.
fn newest_first(a: Vec<StoredEvent>, b: Vec<StoredEvent>, limit: usize) -> Vec<StoredEvent> {
    let mut all: Vec<StoredEvent> = a.into_iter().chain(b).collect();
    all.sort_by(|x, y| (y.0, y.1, &y.2).cmp(&(x.0, x.1, &x.2)));
    all.truncate(limit);
    all
}

/// Deletes every event of job `id`: a partition delete per bucket, and the
/// old table's partition per task where the keyspace still has rows there.
pub(super) async fn delete_task_events(
    store: &CassandraStore,
    id: &str,
    buckets: &[i32],
    instances: &[u32],
) -> Result<()> {
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(buckets.iter().copied())
        .map(|b| store.exec("task events", &store.s.del_events, (id, b)))
        .buffer_unordered(super::CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    if store.legacy_events() {
        futures::stream::iter(instances.iter().copied())
            .map(|i| store.exec("task events", &store.s.del_events_legacy, (id, i as i32)))
            .buffer_unordered(super::CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(at: i64, run: i64, to: &str) -> StoredEvent {
        (at, run, to.to_string(), format!("{at}/{run}/{to}").into_bytes())
    }

    #[test]
    fn events_of_both_tables_come_newest_first_up_to_the_limit() {
        let new = vec![e(30, 2, "RUNNING"), e(20, 2, "LAUNCHED")];
        let old = vec![e(25, 1, "KILLED"), e(10, 1, "RUNNING"), e(5, 1, "PLACED")];
        let merged = newest_first(new, old, 4);
        let at: Vec<i64> = merged.iter().map(|r| r.0).collect();
        assert_eq!(at, [30, 25, 20, 10]);
        // Ties at one millisecond are ordered as the tables order them: run, then state, descending.
        let merged = newest_first(vec![e(7, 1, "LAUNCHED")], vec![e(7, 2, "PLACED"), e(7, 1, "RUNNING")], 10);
        let keys: Vec<(i64, &str)> = merged.iter().map(|r| (r.1, r.2.as_str())).collect();
        assert_eq!(keys, [(2, "PLACED"), (1, "RUNNING"), (1, "LAUNCHED")]);
    }
}
