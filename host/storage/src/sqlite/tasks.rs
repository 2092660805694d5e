//! Task runtimes: one row per instance, created all or nothing, and the
//! compare-and-set (prepared off the writer thread, since encoding is the
//! expensive part; the writer only runs the `UPDATE … WHERE version = ?`).

use paceline_model::task::{TaskEvent, TaskRuntime, TaskState};
use rusqlite::{Connection, OptionalExtension, params};

use std::sync::Mutex;

use super::events::TrimCounts;
use super::jobs::job_exists;
use super::{SqliteStore, db, task_what};
use crate::error::{Result, StoreError};
use crate::types::{TaskCas, TaskRecord, check_id, decode, encode, limits};
use crate::validate;

/// A task compare-and-set prepared outside the writer thread (encoding is
/// the expensive part; the writer only runs SQL).
struct PreparedCas {
    instance: u32,
    expected: u64,
    state: &'static str,
    body: String,
}

fn prepare_cas(
    job_id: &str,
    instance: u32,
    expected: u64,
    runtime: &TaskRuntime,
) -> Result<(PreparedCas, TaskRuntime)> {
    runtime.validate()?;
    let mut stored = runtime.clone();
    stored.version = expected + 1;
    let body = encode(|| task_what(job_id, instance), &stored, limits::MAX_RECORD)?;
    Ok((PreparedCas { instance, expected, state: stored.state.as_str(), body }, stored))
}

fn cas_task_in(conn: &Connection, job_id: &str, c: &PreparedCas) -> Result<u64> {
    let n = conn
        .prepare_cached(
            "UPDATE tasks SET state = ?4, version = ?5, runtime = ?6
             WHERE job_id = ?1 AND instance = ?2 AND version = ?3",
        )
        .and_then(|mut s| s.execute(params![job_id, c.instance, c.expected, c.state, c.expected + 1, c.body]))
        .map_err(db)?;
    if n == 1 {
        return Ok(c.expected + 1);
    }
    let found: Option<u64> = conn
        .prepare_cached("SELECT version FROM tasks WHERE job_id = ?1 AND instance = ?2")
        .and_then(|mut s| s.query_row(params![job_id, c.instance], |r| r.get(0)).optional())
        .map_err(db)?;
    match found {
        None => Err(StoreError::not_found("task", format!("{job_id}/{}", c.instance))),
        Some(v) => Err(StoreError::conflict(task_what(job_id, c.instance), c.expected, Some(v))),
    }
}

/// Task runtimes checked and encoded for insertion at version 1.
pub(super) type NewTaskRows = Vec<(u32, &'static str, String)>;

pub(super) fn new_task_rows(job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<NewTaskRows> {
    check_id("job", job_id)?;
    let mut rows = Vec::with_capacity(tasks.len());
    for (instance, rt) in tasks {
        validate::instance(*instance)?;
        rt.validate()?;
        let mut rt = rt.clone();
        rt.version = 1;
        let body = encode(|| task_what(job_id, *instance), &rt, limits::MAX_RECORD)?;
        rows.push((*instance, rt.state.as_str(), body));
    }
    Ok(rows)
}

/// Inserts checked rows inside the caller's write (its savepoint makes the
/// whole write one unit), and notes that the new tasks have no history to trim.
pub(super) fn insert_tasks(
    conn: &Connection,
    job_id: &str,
    rows: &NewTaskRows,
    trims: &Mutex<TrimCounts>,
) -> Result<()> {
    let mut ins = conn
        .prepare_cached("INSERT INTO tasks (job_id, instance, state, version, runtime) VALUES (?1, ?2, ?3, 1, ?4)")
        .map_err(db)?;
    for (instance, state, body) in rows {
        ins.execute(params![job_id, instance, state, body]).map_err(|e| match e {
            rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation => {
                StoreError::exists("task", format!("{job_id}/{instance}"))
            }
            e => db(e),
        })?;
    }
    // New tasks have no history: nothing to trim until TRIM_EVERY.
    if let Ok(mut t) = trims.lock() {
        let counts = t.entry(job_id.to_string()).or_default();
        for (instance, ..) in rows {
            counts.insert(*instance, 0);
        }
    }
    Ok(())
}

pub(super) async fn create_tasks(store: &SqliteStore, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()> {
    let rows = new_task_rows(job_id, tasks)?;
    let job_id = job_id.to_string();
    let trims = store.trims.clone();
    store
        .write(move |conn| {
            if !job_exists(conn, &job_id)? {
                return Err(StoreError::not_found("job", &job_id));
            }
            insert_tasks(conn, &job_id, &rows, &trims)
        })
        .await
}

pub(super) async fn get_task(store: &SqliteStore, job_id: &str, instance: u32) -> Result<TaskRuntime> {
    let job_id = job_id.to_string();
    store
        .read(move |conn| {
            let body: Option<String> = conn
                .prepare_cached("SELECT runtime FROM tasks WHERE job_id = ?1 AND instance = ?2")
                .and_then(|mut s| s.query_row(params![job_id, instance], |r| r.get(0)).optional())
                .map_err(db)?;
            let body = body.ok_or_else(|| StoreError::not_found("task", format!("{job_id}/{instance}")))?;
            decode(|| task_what(&job_id, instance), &body)
        })
        .await
}

pub(super) async fn cas_task(
    store: &SqliteStore,
    job_id: &str,
    instance: u32,
    expected_version: u64,
    runtime: &TaskRuntime,
) -> Result<TaskRuntime> {
    check_id("job", job_id)?;
    let (c, stored) = prepare_cas(job_id, instance, expected_version, runtime)?;
    let job_id = job_id.to_string();
    store.write(move |conn| cas_task_in(conn, &job_id, &c)).await?;
    Ok(stored)
}

pub(super) async fn cas_tasks(store: &SqliteStore, job_id: &str, writes: &[TaskCas]) -> Result<Vec<Result<u64>>> {
    check_id("job", job_id)?;
    let prepared = writes
        .iter()
        .map(|w| prepare_cas(job_id, w.instance, w.expected_version, &w.runtime).map(|p| p.0))
        .collect::<Result<Vec<_>>>()?;
    let job_id = job_id.to_string();
    store.write(move |conn| Ok(prepared.iter().map(|c| cas_task_in(conn, &job_id, c)).collect())).await
}

/// [`cas_tasks`] and the events that go with them in one write: the same
/// savepoint of the writer's transaction, so a task's new state and its
/// events are committed together or not at all.
pub(super) async fn cas_tasks_with_events(
    store: &SqliteStore,
    job_id: &str,
    writes: &[TaskCas],
    events: &[(u32, TaskEvent)],
) -> Result<Vec<Result<u64>>> {
    check_id("job", job_id)?;
    let prepared = writes
        .iter()
        .map(|w| prepare_cas(job_id, w.instance, w.expected_version, &w.runtime).map(|p| p.0))
        .collect::<Result<Vec<_>>>()?;
    let rows = super::events::event_rows(job_id, events)?;
    let job_id = job_id.to_string();
    let trims = store.trims.clone();
    store
        .write(move |conn| {
            let results: Vec<Result<u64>> = prepared.iter().map(|c| cas_task_in(conn, &job_id, c)).collect();
            let lost: std::collections::HashSet<u32> =
                prepared.iter().zip(&results).filter(|(_, r)| r.is_err()).map(|(c, _)| c.instance).collect();
            let mut rows = rows;
            if !lost.is_empty() {
                rows.retain(|(instance, ..)| !lost.contains(instance));
            }
            if !rows.is_empty() {
                super::events::insert_events(conn, &job_id, &rows, &trims)?;
            }
            Ok(results)
        })
        .await
}

pub(super) async fn tasks_of_job(store: &SqliteStore, job_id: &str, states: &[TaskState]) -> Result<Vec<TaskRecord>> {
    let (job_id, states) = (job_id.to_string(), states.to_vec());
    store
        .read(move |conn| {
            let mut sql = "SELECT instance, runtime FROM tasks WHERE job_id = ?".to_string();
            let mut args: Vec<rusqlite::types::Value> = vec![job_id.clone().into()];
            if !states.is_empty() {
                sql.push_str(&format!(" AND state IN ({})", vec!["?"; states.len()].join(",")));
                args.extend(states.iter().map(|s| s.as_str().to_string().into()));
            }
            sql.push_str(" ORDER BY instance");
            let mut stmt = conn.prepare(&sql).map_err(db)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args), |r| Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?)))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.into_iter()
                .map(|(instance, body)| {
                    Ok(TaskRecord { instance, runtime: decode(|| task_what(&job_id, instance), &body)? })
                })
                .collect()
        })
        .await
}
