//! The audit log in SQLite: one table, rows appended in one transaction
//! per batch, read newest first through the time index, pruned by age (an
//! index range) and by row count (by `seq`, which only grows, so the cut
//! is one range delete and never a scan of the kept rows).

use rusqlite::{OptionalExtension, params};

use super::{SqliteStore, db};
use crate::audit::{AuditQuery, AuditRecord, check_records};
use crate::error::Result;

pub(super) async fn append(store: &SqliteStore, records: &[AuditRecord]) -> Result<()> {
    check_records(records)?;
    if records.is_empty() {
        return Ok(());
    }
    let records = records.to_vec();
    store
        .write(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "INSERT OR IGNORE INTO audit_log
                       (at_ms, id, principal, role, method, target, job_id, summary, code, message)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                )
                .map_err(db)?;
            for r in &records {
                stmt.execute(params![
                    r.at_ms as i64,
                    r.id,
                    r.principal,
                    r.role,
                    r.method,
                    r.target,
                    r.job_id,
                    r.summary,
                    r.code,
                    r.message
                ])
                .map_err(db)?;
            }
            Ok(())
        })
        .await
}

pub(super) async fn query(store: &SqliteStore, q: &AuditQuery) -> Result<Vec<AuditRecord>> {
    let q = q.clone();
    store
        .read(move |conn| {
            // `method` matches the whole path or its last segment.
            let method_suffix = q.method.as_ref().map(|m| format!("*/{}", glob_escape(m)));
            let mut stmt = conn
                .prepare_cached(
                    "SELECT at_ms, id, principal, role, method, target, job_id, summary, code, message
                     FROM audit_log
                     WHERE (?1 IS NULL OR principal = ?1)
                       AND (?2 IS NULL OR job_id = ?2)
                       AND (?3 IS NULL OR method = ?3 OR method GLOB ?4)
                       AND at_ms >= ?5 AND at_ms < ?6
                     ORDER BY at_ms DESC, id DESC
                     LIMIT ?7",
                )
                .map_err(db)?;
            let rows = stmt
                .query_map(
                    params![
                        q.principal,
                        q.job_id,
                        q.method,
                        method_suffix,
                        q.since_ms.unwrap_or(0) as i64,
                        q.until_ms.map_or(i64::MAX, |u| u.min(i64::MAX as u64) as i64),
                        q.limit() as i64
                    ],
                    |r| {
                        Ok(AuditRecord {
                            at_ms: r.get::<_, i64>(0)?.max(0) as u64,
                            id: r.get(1)?,
                            principal: r.get(2)?,
                            role: r.get(3)?,
                            method: r.get(4)?,
                            target: r.get(5)?,
                            job_id: r.get(6)?,
                            summary: r.get(7)?,
                            code: r.get(8)?,
                            message: r.get(9)?,
                        })
                    },
                )
                .map_err(db)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(db)
        })
        .await
}

pub(super) async fn prune(store: &SqliteStore, before_ms: u64, max_rows: u64) -> Result<u64> {
    store
        .write(move |conn| {
            let mut gone = conn
                .execute("DELETE FROM audit_log WHERE at_ms < ?1", params![before_ms.min(i64::MAX as u64) as i64])
                .map_err(db)? as u64;
            let newest: Option<i64> =
                conn.query_row("SELECT MAX(seq) FROM audit_log", [], |r| r.get(0)).optional().map_err(db)?.flatten();
            if let Some(newest) = newest {
                let keep = max_rows.min(i64::MAX as u64) as i64;
                gone += conn
                    .execute("DELETE FROM audit_log WHERE seq <= ?1", params![newest.saturating_sub(keep)])
                    .map_err(db)? as u64;
            }
            Ok(gone)
        })
        .await
}

/// Escapes GLOB's special characters so a method name matches literally.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '*' | '?' | '[' => {
                out.push('[');
                out.push(c);
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}
