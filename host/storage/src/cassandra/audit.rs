//! The audit log in Cassandra: a partition per UTC day (clustered newest
//! first), and a one-partition index of the days that have records.
//! Reads walk the days of the asked window newest first and stop at the
//! limit; pruning deletes whole day partitions, and cuts the one day that
//! straddles the age or row-count boundary with a single range delete.

use futures::StreamExt;

use super::{CassandraStore, be};
use crate::audit::{AuditQuery, AuditRecord, check_records, newest_first};
use crate::error::{Result, StoreError};

const DAY_MS: u64 = 86_400_000;

fn day_of(at_ms: u64) -> i32 {
    (at_ms / DAY_MS).min(i32::MAX as u64) as i32
}

type Row = (i64, String, String, String, String, String, String, String, String, String);

pub(super) async fn append(store: &CassandraStore, records: &[AuditRecord]) -> Result<()> {
    store.fence_check().await?;
    check_records(records)?;
    let mut days: Vec<i32> = records.iter().map(|r| day_of(r.at_ms)).collect();
    days.sort_unstable();
    days.dedup();
    // The day index first: a record is never in a day the index lacks.
    for day in &days {
        store.exec("audit day", &store.s.ins_audit_day, (*day,)).await?;
    }
    let rows = records
        .iter()
        .map(|r| {
            let size = r.id.len()
                + r.principal.len()
                + r.role.len()
                + r.method.len()
                + r.target.len()
                + r.job_id.len()
                + r.summary.len()
                + r.code.len()
                + r.message.len()
                + 64;
            let day = day_of(r.at_ms);
            (
                day,
                size,
                (
                    day,
                    r.at_ms as i64,
                    r.id.as_str(),
                    r.principal.as_str(),
                    r.role.as_str(),
                    r.method.as_str(),
                    r.target.as_str(),
                    r.job_id.as_str(),
                    r.summary.as_str(),
                    r.code.as_str(),
                    r.message.as_str(),
                ),
            )
        })
        .collect();
    store.batched("audit records", &store.s.ins_audit, rows).await
}

/// The days with records, newest first.
async fn days(store: &CassandraStore) -> Result<Vec<i32>> {
    let rows: Vec<(i32,)> = store.scan("audit days", &store.s.sel_audit_days, ()).await?;
    let mut days: Vec<i32> = rows.into_iter().map(|r| r.0).collect();
    days.sort_unstable_by(|a, b| b.cmp(a));
    Ok(days)
}

pub(super) async fn query(store: &CassandraStore, q: &AuditQuery) -> Result<Vec<AuditRecord>> {
    let limit = q.limit();
    let since = q.since_ms.unwrap_or(0).min(i64::MAX as u64) as i64;
    let until = q.until_ms.map_or(i64::MAX, |u| u.min(i64::MAX as u64) as i64);
    let mut out = Vec::new();
    for day in days(store).await? {
        let (first, last) = (day as i64 * DAY_MS as i64, (day as i64 + 1) * DAY_MS as i64);
        if first >= until || last <= since {
            continue;
        }
        let pager = store
            .session
            .execute_iter(store.s.sel_audit.clone(), (day, since, until))
            .await
            .map_err(|e| StoreError::Unavailable(format!("audit read: {e}")))?;
        let mut rows = pager.rows_stream::<Row>().map_err(be)?;
        while let Some(row) = rows.next().await {
            let (at_ms, id, principal, role, method, target, job_id, summary, code, message) =
                row.map_err(|e| StoreError::Corrupt { what: "audit record".into(), reason: e.to_string() })?;
            let record = AuditRecord {
                at_ms: at_ms.max(0) as u64,
                id,
                principal,
                role,
                method,
                target,
                job_id,
                summary,
                code,
                message,
            };
            if q.matches(&record) {
                out.push(record);
                if out.len() >= limit {
                    break;
                }
            }
        }
        if out.len() >= limit {
            break;
        }
    }
    out.sort_by(newest_first);
    Ok(out)
}

pub(super) async fn prune(store: &CassandraStore, before_ms: u64, max_rows: u64) -> Result<u64> {
    store.fence_check().await?;
    let cut_day = day_of(before_ms);
    let mut gone = 0u64;
    let mut kept = 0u64;
    for day in days(store).await? {
        if day < cut_day {
            gone += drop_day(store, day).await?;
            continue;
        }
        if day == cut_day {
            store.exec("audit prune", &store.s.del_audit_before, (day, before_ms.min(i64::MAX as u64) as i64)).await?;
        }
        let rows: Vec<(i64,)> = store.rows("audit count", &store.s.count_audit_day, (day,)).await?;
        let count = rows.first().map_or(0, |r| r.0.max(0) as u64);
        if kept >= max_rows {
            gone += drop_day(store, day).await?;
        } else if kept + count > max_rows {
            // Keep this day's newest (max_rows - kept) rows: cut below the last kept one's time.
            let keep = (max_rows - kept).min(i32::MAX as u64) as i32;
            let times: Vec<(i64,)> = store.rows("audit times", &store.s.sel_audit_times, (day, keep)).await?;
            if let Some((oldest_kept,)) = times.last() {
                store.exec("audit prune", &store.s.del_audit_before, (day, *oldest_kept)).await?;
            }
            gone += count.saturating_sub(keep as u64);
            kept = max_rows;
        } else {
            kept += count;
        }
    }
    Ok(gone)
}

async fn drop_day(store: &CassandraStore, day: i32) -> Result<u64> {
    let rows: Vec<(i64,)> = store.rows("audit count", &store.s.count_audit_day, (day,)).await?;
    store.exec("audit prune", &store.s.del_audit_day, (day,)).await?;
    store.exec("audit prune", &store.s.del_audit_day_entry, (day,)).await?;
    Ok(rows.first().map_or(0, |r| r.0.max(0) as u64))
}
