//! Update workflows: the `updates` row with its compare-and-set, listed by
//! job in creation order, and per-instance progress in `update_progress`.

use paceline_model::job::{InstanceProgress, Update};
use rusqlite::{OptionalExtension, params};

use super::jobs::job_exists;
use super::{SqliteStore, db};
use crate::error::{Result, StoreError};
use crate::types::{check_id, decode, encode, limits};

pub(super) async fn create_update(store: &SqliteStore, update: &Update) -> Result<Update> {
    update.validate()?;
    check_id("update", &update.id)?;
    let mut stored = update.clone();
    stored.version = 1;
    let body = encode(|| format!("update {}", update.id), &stored, limits::MAX_JOB_CONFIG)?;
    let out = stored.clone();
    store.write(move |conn| {
        if !job_exists(conn, &stored.job_id)? {
            return Err(StoreError::not_found("job", &stored.job_id));
        }
        let n = conn
            .execute(
                "INSERT OR IGNORE INTO updates (update_id, job_id, version, created_at_ms, body) VALUES (?1, ?2, 1, ?3, ?4)",
                params![stored.id, stored.job_id, stored.created_at_ms, body],
            )
            .map_err(db)?;
        if n == 0 {
            return Err(StoreError::exists("update", &stored.id));
        }
        Ok(())
    })
    .await?;
    Ok(out)
}

pub(super) async fn get_update(store: &SqliteStore, id: &str) -> Result<Update> {
    let id = id.to_string();
    store
        .read(move |conn| {
            let body: Option<String> = conn
                .query_row("SELECT body FROM updates WHERE update_id = ?1", params![id], |r| r.get(0))
                .optional()
                .map_err(db)?;
            let body = body.ok_or_else(|| StoreError::not_found("update", &id))?;
            decode(|| format!("update {id}"), &body)
        })
        .await
}

pub(super) async fn cas_update(
    store: &SqliteStore,
    id: &str,
    expected_version: u64,
    update: &Update,
) -> Result<Update> {
    update.validate()?;
    if update.id != id {
        return Err(StoreError::Invalid(format!("update id `{}` differs from `{id}`", update.id)));
    }
    let mut stored = update.clone();
    stored.version = expected_version + 1;
    let body = encode(|| format!("update {id}"), &stored, limits::MAX_JOB_CONFIG)?;
    let id = id.to_string();
    store
        .write(move |conn| {
            let n = conn
                .execute(
                    "UPDATE updates SET version = ?3, body = ?4 WHERE update_id = ?1 AND version = ?2",
                    params![id, expected_version, stored.version, body],
                )
                .map_err(db)?;
            if n == 1 {
                return Ok(stored);
            }
            let found: Option<u64> = conn
                .query_row("SELECT version FROM updates WHERE update_id = ?1", params![id], |r| r.get(0))
                .optional()
                .map_err(db)?;
            match found {
                None => Err(StoreError::not_found("update", &id)),
                Some(v) => Err(StoreError::conflict(format!("update {id}"), expected_version, Some(v))),
            }
        })
        .await
}

pub(super) async fn updates_of_job(store: &SqliteStore, job_id: &str) -> Result<Vec<Update>> {
    let job_id = job_id.to_string();
    store
        .read(move |conn| {
            let mut stmt = conn
                .prepare("SELECT body FROM updates WHERE job_id = ?1 ORDER BY created_at_ms, update_id")
                .map_err(db)?;
            let rows = stmt
                .query_map(params![job_id], |r| r.get::<_, String>(0))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.iter().map(|b| decode(|| format!("update of job {job_id}"), b)).collect()
        })
        .await
}

pub(super) async fn put_update_progress(
    store: &SqliteStore,
    update_id: &str,
    progress: &[InstanceProgress],
) -> Result<()> {
    check_id("update", update_id)?;
    let mut rows = Vec::with_capacity(progress.len());
    for p in progress {
        rows.push((p.instance, encode(|| format!("progress of update {update_id}"), p, limits::MAX_RECORD)?));
    }
    let update_id = update_id.to_string();
    store
        .write(move |conn| {
            let exists = conn
                .prepare_cached("SELECT 1 FROM updates WHERE update_id = ?1")
                .and_then(|mut s| s.exists(params![update_id]))
                .map_err(db)?;
            if !exists {
                return Err(StoreError::not_found("update", &update_id));
            }
            let mut ins = conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO update_progress (update_id, instance, body) VALUES (?1, ?2, ?3)",
                )
                .map_err(db)?;
            for (instance, body) in &rows {
                ins.execute(params![update_id, instance, body]).map_err(db)?;
            }
            Ok(())
        })
        .await
}

pub(super) async fn update_progress(store: &SqliteStore, update_id: &str) -> Result<Vec<InstanceProgress>> {
    let update_id = update_id.to_string();
    store
        .read(move |conn| {
            let mut stmt =
                conn.prepare("SELECT body FROM update_progress WHERE update_id = ?1 ORDER BY instance").map_err(db)?;
            let rows = stmt
                .query_map(params![update_id], |r| r.get::<_, String>(0))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.iter().map(|b| decode(|| format!("progress of update {update_id}"), b)).collect()
        })
        .await
}
