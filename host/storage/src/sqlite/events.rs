//! Task events: appended in the writer's groups, a row per run of a task
//! per call ([`crate::event_rows`]), each task's history trimmed back to
//! [`limits::MAX_EVENTS_PER_TASK`] rows in steps of [`TRIM_EVERY`] appends,
//! read newest first.

use paceline_model::task::TaskEvent;
use rusqlite::params;

use super::{SqliteStore, db, task_what};
use crate::error::{Result, StoreError};
use crate::event_rows::{EventRows, decode_newest_first, newest_first};
use crate::store::Store;
use crate::types::{check_id, check_page, limits};

/// Job id → instance → events appended since the last trim.
pub(super) type TrimCounts = std::collections::HashMap<String, std::collections::HashMap<u32, usize>>;

/// A task's history is trimmed back to [`limits::MAX_EVENTS_PER_TASK`] once
/// this many events were appended to it since the last trim (and on its
/// first append after the store opened, when the count is unknown). Trimming
/// on every append was one DELETE per task per write, most of them finding
/// nothing to delete: a task lives through about seven events. Reads never
/// return more than the bound, so the slack is invisible.
const TRIM_EVERY: usize = 25;

pub(super) async fn append_task_events(
    store: &SqliteStore,
    job_id: &str,
    instance: u32,
    events: &[TaskEvent],
) -> Result<()> {
    let events: Vec<(u32, TaskEvent)> = events.iter().map(|e| (instance, e.clone())).collect();
    store.append_job_events(job_id, &events).await
}

pub(super) async fn append_job_events(store: &SqliteStore, job_id: &str, events: &[(u32, TaskEvent)]) -> Result<()> {
    check_id("job", job_id)?;
    if events.is_empty() {
        return Ok(());
    }
    let rows = event_rows(job_id, events)?;
    let job_id = job_id.to_string();
    let trims = store.trims.clone();
    store.write(move |conn| insert_events(conn, &job_id, &rows, &trims)).await
}

/// One row: (instance, at_ms, run, to_state, encoded body), keyed by its
/// oldest event.
pub(super) type EventRow = (u32, u64, u64, &'static str, String);

/// The events' rows, encoded and checked for size, before the writer runs.
pub(super) fn event_rows(job_id: &str, events: &[(u32, TaskEvent)]) -> Result<Vec<EventRow>> {
    let grouped = EventRows::new(events);
    let mut rows = Vec::with_capacity(events.len());
    for row in grouped.rows() {
        let instance = row.instance();
        let body = row.encode(|| format!("event of {}", task_what(job_id, instance)))?;
        let e = row.oldest();
        rows.push((instance, e.at_ms, e.run, e.to.as_str(), body));
    }
    Ok(rows)
}

/// Inserts event rows on the writer's connection, and trims the history of
/// each task touched every [`TRIM_EVERY`] appends.
pub(super) fn insert_events(
    conn: &rusqlite::Connection,
    job_id: &str,
    rows: &[EventRow],
    trims: &std::sync::Mutex<TrimCounts>,
) -> Result<()> {
    let mut ins = conn
        .prepare_cached(
            "INSERT OR REPLACE INTO task_events (job_id, instance, at_ms, run, to_state, event)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .map_err(db)?;
    for (instance, at, run, to, body) in rows {
        ins.execute(params![job_id, instance, at, run, to, body]).map_err(db)?;
    }
    // Keep the newest MAX_EVENTS_PER_TASK of each task touched:
    // history is bounded per task. The cut-off is the oldest event
    // still kept; with fewer events there is none and nothing goes.
    // An index walk of at most MAX_EVENTS_PER_TASK entries, no sort.
    let mut trim = conn
        .prepare_cached(
            "DELETE FROM task_events WHERE job_id = ?1 AND instance = ?2 AND (at_ms, run, to_state) <
             (SELECT at_ms, run, to_state FROM task_events WHERE job_id = ?1 AND instance = ?2
              ORDER BY at_ms DESC, run DESC, to_state DESC LIMIT 1 OFFSET ?3)",
        )
        .map_err(db)?;
    let mut counts = trims.lock().map_err(|_| StoreError::Backend("trim counts poisoned".into()))?;
    let counts = counts.entry(job_id.to_string()).or_default();
    for (instance, ..) in rows {
        let n = counts.entry(*instance).or_insert(TRIM_EVERY);
        *n += 1;
        if *n > TRIM_EVERY {
            trim.execute(params![job_id, instance, (limits::MAX_EVENTS_PER_TASK - 1) as i64]).map_err(db)?;
            *n = 0;
        }
    }
    Ok(())
}

pub(super) async fn task_events(
    store: &SqliteStore,
    job_id: &str,
    instance: u32,
    limit: u32,
) -> Result<Vec<TaskEvent>> {
    check_page(limit)?;
    let job_id = job_id.to_string();
    store
        .read(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT event FROM task_events WHERE job_id = ?1 AND instance = ?2
                     ORDER BY at_ms DESC, run DESC, to_state DESC LIMIT ?3",
                )
                .map_err(db)?;
            // History is trimmed in steps (TRIM_EVERY): never show more than
            // the bound. A row holds one event or more, so `limit` rows
            // hold at least `limit` events where there are that many.
            let limit = limit.min(limits::MAX_EVENTS_PER_TASK as u32);
            let rows = stmt
                .query_map(params![job_id, instance, limit], |r| r.get::<_, String>(0))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            let mut events = Vec::with_capacity(rows.len());
            for body in &rows {
                decode_newest_first(|| format!("event of {}", task_what(&job_id, instance)), body, &mut events)?;
            }
            Ok(newest_first(events, limit as usize))
        })
        .await
}
