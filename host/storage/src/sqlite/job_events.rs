//! Job events (decision 0025): one row per identity (job, instance, reason,
//! message), folded in with an upsert in the writer's group, each touched
//! job trimmed to the retention rules in the same transaction.

use paceline_model::event::JobEvent;
use rusqlite::params;

use super::{SqliteStore, db};
use crate::error::Result;
use crate::job_events::{check, fold, from_row, instance_column, select};
use crate::types::{check_id, check_page, limits};

pub(super) async fn record_job_events(store: &SqliteStore, events: &[JobEvent]) -> Result<()> {
    check(events)?;
    if events.is_empty() {
        return Ok(());
    }
    let events = fold(events);
    store
        .write(move |conn| {
            let mut upsert = conn
                .prepare_cached(
                    "INSERT INTO job_events
                       (job_id, instance, reason, message, event_type, first_seen_ms, last_seen_ms, count)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                     ON CONFLICT (job_id, instance, reason, message) DO UPDATE SET
                       first_seen_ms = min(first_seen_ms, excluded.first_seen_ms),
                       last_seen_ms = max(last_seen_ms, excluded.last_seen_ms),
                       count = count + excluded.count",
                )
                .map_err(db)?;
            for e in &events {
                upsert
                    .execute(params![
                        e.job_id,
                        instance_column(e.instance),
                        e.reason.as_str(),
                        e.message,
                        e.event_type.as_str(),
                        e.first_seen_ms as i64,
                        e.last_seen_ms as i64,
                        e.count.min(i64::MAX as u64) as i64,
                    ])
                    .map_err(db)?;
            }
            // Retention per touched job: by age from the job's newest event,
            // then by number (the newest MAX_EVENTS_PER_JOB by last seen).
            let mut by_age = conn
                .prepare_cached(
                    "DELETE FROM job_events WHERE job_id = ?1 AND last_seen_ms <
                     (SELECT max(last_seen_ms) FROM job_events WHERE job_id = ?1) - ?2",
                )
                .map_err(db)?;
            let mut by_number = conn
                .prepare_cached(
                    "DELETE FROM job_events WHERE job_id = ?1 AND last_seen_ms <
                     (SELECT last_seen_ms FROM job_events WHERE job_id = ?1
                      ORDER BY last_seen_ms DESC LIMIT 1 OFFSET ?2)",
                )
                .map_err(db)?;
            let mut jobs: Vec<&str> = events.iter().map(|e| e.job_id.as_str()).collect();
            jobs.sort_unstable();
            jobs.dedup();
            for job in jobs {
                by_age.execute(params![job, limits::MAX_JOB_EVENT_AGE_MS as i64]).map_err(db)?;
                // Strictly older than the MAX-th newest: ties with it stay
                // (reads cut them), so a trim never drops an event a read
                // would still show.
                by_number.execute(params![job, (limits::MAX_EVENTS_PER_JOB - 1) as i64]).map_err(db)?;
            }
            Ok(())
        })
        .await
}

pub(super) async fn job_events(
    store: &SqliteStore,
    job_id: &str,
    instance: Option<u32>,
    limit: u32,
) -> Result<Vec<JobEvent>> {
    check_id("job", job_id)?;
    check_page(limit)?;
    let job_id = job_id.to_string();
    let rows = store
        .read(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT instance, reason, message, event_type, first_seen_ms, last_seen_ms, count
                     FROM job_events WHERE job_id = ?1",
                )
                .map_err(db)?;
            let rows = stmt
                .query_map(params![job_id], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, i64>(4)?,
                        r.get::<_, i64>(5)?,
                        r.get::<_, i64>(6)?,
                    ))
                })
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.into_iter()
                .map(|(instance, reason, message, event_type, first, last, count)| {
                    from_row(&job_id, instance, &reason, message, &event_type, first, last, count)
                })
                .collect::<Result<Vec<_>>>()
        })
        .await?;
    Ok(select(rows, instance, limit))
}
