//! Jobs: the `jobs` row (runtime, and the summary columns and
//! `job_labels` rows that queries filter on), config versions in
//! `job_configs`, the compare-and-set of the runtime, queries, and
//! deletion of a job with everything under it.

use paceline_model::job::{JobConfig, JobRuntime};
use paceline_model::task::TaskRuntime;
use rusqlite::{Connection, OptionalExtension, params};

use super::{SqliteStore, db};
use crate::error::{Result, StoreError};
use crate::types::{
    JobQuery, JobSummary, NewJob, Page, SummaryRow, check_id, check_page, decode, encode, encode_config, limits,
    new_job, to_summary,
};

fn summary_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SummaryRow> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
    ))
}

const SUMMARY_COLS: &str = "job_id, name, owner, pool, kind, labels, instance_count, latest_config_version, runtime";

pub(super) fn job_exists(conn: &Connection, id: &str) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM jobs WHERE job_id = ?1").and_then(|mut s| s.exists(params![id])).map_err(db)
}

fn write_summary_columns(conn: &Connection, id: &str, config: &JobConfig, version: u64) -> Result<()> {
    let labels = encode(|| format!("labels of job {id}"), &config.labels, limits::MAX_RECORD)?;
    conn.execute(
        "UPDATE jobs SET name = ?2, owner = ?3, pool = ?4, kind = ?5, labels = ?6, instance_count = ?7,
         latest_config_version = ?8 WHERE job_id = ?1",
        params![
            id,
            config.name,
            config.owner,
            config.pool,
            config.kind.as_str(),
            labels,
            config.instance_count,
            version
        ],
    )
    .map_err(db)?;
    conn.execute("DELETE FROM job_labels WHERE job_id = ?1", params![id]).map_err(db)?;
    let mut ins = conn.prepare_cached("INSERT INTO job_labels (job_id, key, value) VALUES (?1, ?2, ?3)").map_err(db)?;
    for (k, v) in &config.labels {
        ins.execute(params![id, k, v]).map_err(db)?;
    }
    Ok(())
}

pub(super) async fn create_job(
    store: &SqliteStore,
    id: &str,
    config: &JobConfig,
    runtime: &JobRuntime,
) -> Result<JobRuntime> {
    create_job_with_tasks(store, id, config, runtime, &[]).await
}

/// The job, its first config and its tasks in one write (one savepoint of
/// the writer's transaction): all of it is committed, or none.
pub(super) async fn create_job_with_tasks(
    store: &SqliteStore,
    id: &str,
    config: &JobConfig,
    runtime: &JobRuntime,
    tasks: &[(u32, TaskRuntime)],
) -> Result<JobRuntime> {
    let NewJob { config: body, runtime: rt, runtime_body: rt_body, labels } = new_job(id, config, runtime)?;
    let rows = super::tasks::new_task_rows(id, tasks)?;
    let (id, config, out) = (id.to_string(), config.clone(), rt.clone());
    let trims = store.trims.clone();
    store
        .write(move |conn| {
            if job_exists(conn, &id)? {
                return Err(StoreError::exists("job", &id));
            }
            conn.execute(
                "INSERT INTO jobs (job_id, name, owner, pool, kind, labels, instance_count, latest_config_version,
                 state, version, runtime) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8, 1, ?9)",
                params![
                    id,
                    config.name,
                    config.owner,
                    config.pool,
                    config.kind.as_str(),
                    labels,
                    config.instance_count,
                    rt.state.as_str(),
                    rt_body
                ],
            )
            .map_err(db)?;
            conn.execute("INSERT INTO job_configs (job_id, version, config) VALUES (?1, 1, ?2)", params![id, body])
                .map_err(db)?;
            write_summary_columns(conn, &id, &config, 1)?;
            crate::crash::point("create-job.before-tasks");
            super::tasks::insert_tasks(conn, &id, &rows, &trims)
        })
        .await?;
    Ok(out)
}

pub(super) async fn add_job_config(store: &SqliteStore, id: &str, version: u64, config: &JobConfig) -> Result<()> {
    let body = encode_config(id, config)?;
    let (id, config) = (id.to_string(), config.clone());
    store
        .write(move |conn| {
            let latest: Option<u64> = conn
                .query_row("SELECT latest_config_version FROM jobs WHERE job_id = ?1", params![id], |r| r.get(0))
                .optional()
                .map_err(db)?;
            let latest = latest.ok_or_else(|| StoreError::not_found("job", &id))?;
            if version != latest + 1 {
                return Err(StoreError::conflict(
                    format!("config of job {id}"),
                    version.saturating_sub(1),
                    Some(latest),
                ));
            }
            conn.execute(
                "INSERT INTO job_configs (job_id, version, config) VALUES (?1, ?2, ?3)",
                params![id, version, body],
            )
            .map_err(db)?;
            write_summary_columns(conn, &id, &config, version)
        })
        .await
}

pub(super) async fn get_job_config(store: &SqliteStore, id: &str, version: Option<u64>) -> Result<(u64, JobConfig)> {
    let id = id.to_string();
    store
        .read(move |conn| {
            let row: Option<(u64, String)> = match version {
                Some(v) => conn
                    .query_row(
                        "SELECT version, config FROM job_configs WHERE job_id = ?1 AND version = ?2",
                        params![id, v],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional(),
                None => conn
                    .query_row(
                        "SELECT version, config FROM job_configs WHERE job_id = ?1 ORDER BY version DESC LIMIT 1",
                        params![id],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional(),
            }
            .map_err(db)?;
            let (v, body) = row.ok_or_else(|| {
                StoreError::not_found(
                    "job config",
                    match version {
                        Some(v) => format!("{id} v{v}"),
                        None => id.clone(),
                    },
                )
            })?;
            Ok((v, decode(|| format!("config of job {id} v{v}"), &body)?))
        })
        .await
}

pub(super) async fn get_job_runtime(store: &SqliteStore, id: &str) -> Result<JobRuntime> {
    let id = id.to_string();
    store
        .read(move |conn| {
            let body: Option<String> = conn
                .prepare_cached("SELECT runtime FROM jobs WHERE job_id = ?1")
                .and_then(|mut s| s.query_row(params![id], |r| r.get(0)).optional())
                .map_err(db)?;
            let body = body.ok_or_else(|| StoreError::not_found("job", &id))?;
            decode(|| format!("runtime of job {id}"), &body)
        })
        .await
}

pub(super) async fn cas_job_runtime(
    store: &SqliteStore,
    id: &str,
    expected_version: u64,
    runtime: &JobRuntime,
) -> Result<JobRuntime> {
    check_id("job", id)?;
    runtime.validate()?;
    let mut stored = runtime.clone();
    stored.version = expected_version + 1;
    let body = encode(|| format!("runtime of job {id}"), &stored, limits::MAX_RECORD)?;
    let id = id.to_string();
    store
        .write(move |conn| {
            let n = conn
                .execute(
                    "UPDATE jobs SET state = ?3, version = ?4, runtime = ?5 WHERE job_id = ?1 AND version = ?2",
                    params![id, expected_version, stored.state.as_str(), stored.version, body],
                )
                .map_err(db)?;
            if n == 1 {
                return Ok(stored);
            }
            let found: Option<u64> = conn
                .query_row("SELECT version FROM jobs WHERE job_id = ?1", params![id], |r| r.get(0))
                .optional()
                .map_err(db)?;
            match found {
                None => Err(StoreError::not_found("job", &id)),
                Some(v) => Err(StoreError::conflict(format!("job {id}"), expected_version, Some(v))),
            }
        })
        .await
}

pub(super) async fn query_jobs(store: &SqliteStore, query: &JobQuery) -> Result<Page<JobSummary>> {
    check_page(query.limit)?;
    let q = query.clone();
    store
        .read(move |conn| {
            let mut sql = format!("SELECT {SUMMARY_COLS} FROM jobs WHERE job_id > ?");
            let mut args: Vec<rusqlite::types::Value> = vec![q.cursor.clone().unwrap_or_default().into()];
            if !q.states.is_empty() {
                sql.push_str(&format!(" AND state IN ({})", vec!["?"; q.states.len()].join(",")));
                args.extend(q.states.iter().map(|s| s.as_str().to_string().into()));
            }
            if let Some(o) = &q.owner {
                sql.push_str(" AND owner = ?");
                args.push(o.clone().into());
            }
            if let Some(p) = &q.pool {
                sql.push_str(" AND pool = ?");
                args.push(p.clone().into());
            }
            for (k, v) in &q.labels {
                sql.push_str(" AND job_id IN (SELECT job_id FROM job_labels WHERE key = ? AND value = ?)");
                args.push(k.clone().into());
                args.push(v.clone().into());
            }
            sql.push_str(" ORDER BY job_id LIMIT ?");
            args.push(i64::from(q.limit + 1).into());
            let mut stmt = conn.prepare(&sql).map_err(db)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args), summary_from_row)
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            let mut items = rows.into_iter().map(to_summary).collect::<Result<Vec<_>>>()?;
            let next = if items.len() > q.limit as usize {
                items.truncate(q.limit as usize);
                items.last().map(|s| s.id.clone())
            } else {
                None
            };
            Ok(Page { items, next })
        })
        .await
}

pub(super) async fn live_jobs(store: &SqliteStore) -> Result<Vec<JobSummary>> {
    store
        .read(move |conn| {
            let live: Vec<String> =
                crate::types::live_job_states().iter().map(|s| format!("'{}'", s.as_str())).collect();
            let sql = format!("SELECT {SUMMARY_COLS} FROM jobs WHERE state IN ({}) ORDER BY job_id", live.join(","));
            let mut stmt = conn.prepare(&sql).map_err(db)?;
            let rows =
                stmt.query_map([], summary_from_row).map_err(db)?.collect::<rusqlite::Result<Vec<_>>>().map_err(db)?;
            rows.into_iter().map(to_summary).collect()
        })
        .await
}

pub(super) async fn delete_job(store: &SqliteStore, id: &str) -> Result<()> {
    let id = id.to_string();
    let trims = store.trims.clone();
    store
        .write(move |conn| {
            if !job_exists(conn, &id)? {
                return Err(StoreError::not_found("job", &id));
            }
            for table in ["jobs", "job_labels", "job_configs", "tasks", "task_events", "job_events"] {
                conn.execute(&format!("DELETE FROM {table} WHERE job_id = ?1"), params![id]).map_err(db)?;
            }
            if let Ok(mut t) = trims.lock() {
                t.remove(&id);
            }
            Ok(())
        })
        .await
}
