//! Task events: a partition per bucket of tasks (the buckets of the tasks'
//! own rows) and group of [`RUNS_PER_PARTITION`] runs
//! (`task_events_by_bucket`), so that the events of a job's state change
//! are one unlogged batch per bucket rather than one write per task, and a
//! task in a crash loop moves on to new partitions instead of growing one;
//! `task_event_partitions` lists a job's partitions. Written with a TTL
//! (`event_ttl_days`) so that history is bounded by age, and read newest
//! first up to [`limits::MAX_EVENTS_PER_TASK`]. A row holds the events of
//! one run of a task that one call appends ([`crate::event_rows`]).
//!
//! Keyspaces from before schema 8 kept a partition per task (`task_events`).
//! A handle that finds rows there at open ([`CassandraStore::legacy_events`])
//! reads them beside the new ones and deletes them with their job; they
//! expire by their TTL like the rest, after which it finds none and skips
//! the old table (decision 0065).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use futures::{StreamExt, TryStreamExt};
use paceline_model::task::TaskEvent;

use super::{CONCURRENCY, CassandraStore, bucket, task_what};
use crate::error::{Result, StoreError};
use crate::event_rows::{EventRows, decode_newest_first, newest_first};
use crate::types::{check_id, check_page, limits};

/// Runs of a task whose events share a partition: a task's events of runs
/// 0–15 are in group 0, 16–31 in group 1, and so on. With a handful of
/// events a run and 100 tasks a bucket, a partition stays within a few
/// megabytes however long a crash loop lasts.
pub(super) const RUNS_PER_PARTITION: u64 = 16;

fn run_group(run: u64) -> i32 {
    i32::try_from(run / RUNS_PER_PARTITION).unwrap_or(i32::MAX)
}

/// The (bucket, run group) partitions of each job this handle has listed
/// in `task_event_partitions`, so each is listed once.
#[derive(Default)]
pub(super) struct ListedPartitions(Mutex<HashMap<String, BTreeSet<(i32, i32)>>>);

impl ListedPartitions {
    fn unlisted(&self, job_id: &str, wanted: BTreeSet<(i32, i32)>) -> Vec<(i32, i32)> {
        let known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match known.get(job_id) {
            Some(k) => wanted.into_iter().filter(|p| !k.contains(p)).collect(),
            None => wanted.into_iter().collect(),
        }
    }

    fn listed(&self, job_id: &str, parts: &[(i32, i32)]) {
        let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        known.entry(job_id.to_string()).or_default().extend(parts.iter().copied());
    }

    pub(super) fn forget_job(&self, job_id: &str) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(job_id);
    }
}

/// The values of one `ins_event` row.
type EventRow = (String, i32, i32, i32, i64, i64, &'static str, Vec<u8>, i32);

/// A row with its partition (bucket, run group) and size, for batching.
type SizedRow = ((i32, i32), usize, EventRow);

/// The rows of `events` (one per run of a task, [`crate::event_rows`]),
/// each with its partition and size.
fn event_rows(store: &CassandraStore, job_id: &str, events: &[(u32, TaskEvent)]) -> Result<Vec<SizedRow>> {
    let grouped = EventRows::new(events);
    let mut rows = Vec::with_capacity(events.len());
    for row in grouped.rows() {
        let instance = row.instance();
        let body = row.encode(|| format!("event of {}", task_what(job_id, instance)))?;
        let size = body.len() + 64;
        let e = row.oldest();
        let (b, g) = (bucket(instance), run_group(e.run));
        rows.push((
            (b, g), // one batch per partition (job, bucket, run group)
            size,
            (
                job_id.to_string(),
                b,
                g,
                instance as i32,
                e.at_ms as i64,
                e.run as i64,
                e.to.as_str(),
                body.into_bytes(),
                store.event_ttl_secs,
            ),
        ));
    }
    Ok(rows)
}

/// Lists the rows' partitions not listed yet (before the rows: a read
/// finds every partition that may hold events), then writes the rows.
async fn write_events(store: &CassandraStore, job_id: &str, rows: Vec<SizedRow>) -> Result<()> {
    let parts = store.event_partitions.unlisted(job_id, rows.iter().map(|r| r.0).collect());
    if !parts.is_empty() {
        // One partition (the job's) for the list: one batch.
        let markers = parts.iter().map(|&(b, g)| (0u8, 16, (job_id, b, g))).collect();
        store.batched("task events", &store.s.ins_event_partition, markers).await?;
        store.event_partitions.listed(job_id, &parts);
    }
    store.batched("task events", &store.s.ins_event, rows).await
}

pub(super) async fn append_task_events(
    store: &CassandraStore,
    job_id: &str,
    instance: u32,
    events: &[TaskEvent],
) -> Result<()> {
    store.fence_check().await?;
    check_id("job", job_id)?;
    let events: Vec<(u32, TaskEvent)> = events.iter().map(|e| (instance, e.clone())).collect();
    let rows = event_rows(store, job_id, &events)?;
    write_events(store, job_id, rows).await
}

pub(super) async fn append_job_events(store: &CassandraStore, job_id: &str, events: &[(u32, TaskEvent)]) -> Result<()> {
    store.fence_check().await?;
    check_id("job", job_id)?;
    let rows = event_rows(store, job_id, events)?;
    write_events(store, job_id, rows).await
}

/// The run groups of one bucket's events, newest first.
async fn run_groups(store: &CassandraStore, job_id: &str, b: i32) -> Result<Vec<i32>> {
    let rows: Vec<(i32,)> = store.rows("task events", &store.s.sel_event_partitions, (job_id, b)).await?;
    Ok(rows.into_iter().map(|r| r.0).collect())
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
    // A task's runs only grow, so a newer group holds only newer events:
    // groups are read newest first until the limit is reached.
    let b = bucket(instance);
    let mut rows: Vec<StoredEvent> = Vec::new();
    for g in run_groups(store, job_id, b).await? {
        let more: Vec<StoredEvent> =
            store.rows("task events", &store.s.sel_events, (job_id, b, g, instance as i32, limit)).await?;
        rows.extend(more);
        if rows.len() >= limit as usize {
            break;
        }
    }
    rows.truncate(limit as usize);
    if store.legacy_events() {
        let old: Vec<(i64, i64, String, String)> =
            store.rows("task events", &store.s.sel_events_legacy, (job_id, instance as i32, limit)).await?;
        let old = old.into_iter().map(|(at, run, to, event)| (at, run, to, event.into_bytes())).collect();
        rows = merge_rows_newest_first(rows, old, limit as usize);
    }
    // A row holds one event or more: `limit` rows hold at least `limit`
    // events where there are that many.
    let mut events = Vec::with_capacity(rows.len());
    for r in &rows {
        let what = || format!("event of {}", task_what(job_id, instance));
        let json =
            std::str::from_utf8(&r.3).map_err(|e| StoreError::Corrupt { what: what(), reason: e.to_string() })?;
        decode_newest_first(what, json, &mut events)?;
    }
    Ok(newest_first(events, limit as usize))
}

/// Two lists each newest first (the tables' clustering order) merged into
/// one, newest first, at most `limit` long.
fn merge_rows_newest_first(a: Vec<StoredEvent>, b: Vec<StoredEvent>, limit: usize) -> Vec<StoredEvent> {
    let mut all: Vec<StoredEvent> = a.into_iter().chain(b).collect();
    all.sort_by(|x, y| (y.0, y.1, &y.2).cmp(&(x.0, x.1, &x.2)));
    all.truncate(limit);
    all
}

/// Deletes every event of job `id`: a partition delete per bucket and run
/// group listed, then the list; and the old table's partition per task
/// where the keyspace still has rows there.
pub(super) async fn delete_task_events(store: &CassandraStore, id: &str, instances: &[u32]) -> Result<()> {
    let parts: Vec<(i32, i32)> = store.rows("task events", &store.s.sel_job_event_partitions, (id,)).await?;
    futures::stream::iter(parts)
        .map(|(b, g)| store.exec("task events", &store.s.del_events, (id, b, g)))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    store.exec("task events", &store.s.del_event_partitions, (id,)).await?;
    store.event_partitions.forget_job(id);
    if store.legacy_events() {
        futures::stream::iter(instances.iter().copied())
            .map(|i| store.exec("task events", &store.s.del_events_legacy, (id, i as i32)))
            .buffer_unordered(CONCURRENCY)
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
    fn runs_share_a_partition_sixteen_at_a_time() {
        assert_eq!([0, 1, 15, 16, 31, 32].map(run_group), [0, 0, 0, 1, 1, 2]);
        assert_eq!(run_group(u64::MAX), i32::MAX);
    }

    #[test]
    fn events_of_both_tables_come_newest_first_up_to_the_limit() {
        let new = vec![e(30, 2, "RUNNING"), e(20, 2, "LAUNCHED")];
        let old = vec![e(25, 1, "KILLED"), e(10, 1, "RUNNING"), e(5, 1, "PLACED")];
        let merged = merge_rows_newest_first(new, old, 4);
        let at: Vec<i64> = merged.iter().map(|r| r.0).collect();
        assert_eq!(at, [30, 25, 20, 10]);
        // Ties at one millisecond are ordered as the tables order them: run, then state, descending.
        let merged =
            merge_rows_newest_first(vec![e(7, 1, "LAUNCHED")], vec![e(7, 2, "PLACED"), e(7, 1, "RUNNING")], 10);
        let keys: Vec<(i64, &str)> = merged.iter().map(|r| (r.1, r.2.as_str())).collect();
        assert_eq!(keys, [(2, "PLACED"), (1, "RUNNING"), (1, "LAUNCHED")]);
    }
}
