//! Cassandra schema: versioned migrations recorded in `schema_migrations`.
//!
//! Every statement is `IF NOT EXISTS`, so a migration that ran halfway (a
//! crash, two processes racing) can simply run again; a migration is
//! recorded only after all its statements succeeded and the cluster agrees
//! on the schema.

use scylla::client::session::Session;

use crate::error::{Result, StoreError};
use crate::types::now_ms;

/// Rows of a job's tasks per partition: a 100,000-instance job spreads over
/// 1,000 partitions of at most 100 rows (~50 KB), never one big one. Small
/// buckets also spread lightweight transactions: Paxos serialises
/// conditional writes per partition, so a batch of compare-and-sets over
/// 1,000 instances runs on 10 partitions in parallel.
pub const TASK_BUCKET: u32 = 100;

/// Migrations in order; index + 1 is the version recorded.
/// Released entries are never edited: add a new one.
const MIGRATIONS: &[(&str, &[&str])] = &[(
    "initial schema",
    &[
        "CREATE TABLE IF NOT EXISTS jobs (job_id text PRIMARY KEY, name text, owner text, pool text, kind text,
           labels text, instance_count int, latest_config_version bigint, state text, version bigint, runtime text)",
        "CREATE TABLE IF NOT EXISTS job_configs (job_id text, version bigint, config text,
           PRIMARY KEY (job_id, version)) WITH CLUSTERING ORDER BY (version DESC)",
        "CREATE TABLE IF NOT EXISTS job_task_buckets (job_id text, bucket int, PRIMARY KEY (job_id, bucket))",
        "CREATE TABLE IF NOT EXISTS tasks (job_id text, bucket int, instance int, state text, version bigint,
           runtime text, PRIMARY KEY ((job_id, bucket), instance))",
        "CREATE TABLE IF NOT EXISTS task_events (job_id text, instance int, at_ms bigint, run bigint, to_state text,
           event text, PRIMARY KEY ((job_id, instance), at_ms, run, to_state))
           WITH CLUSTERING ORDER BY (at_ms DESC, run DESC, to_state DESC)",
        "CREATE TABLE IF NOT EXISTS updates (update_id text PRIMARY KEY, job_id text, version bigint, body text)",
        "CREATE TABLE IF NOT EXISTS updates_by_job (job_id text, created_at_ms bigint, update_id text,
           PRIMARY KEY (job_id, created_at_ms, update_id))",
        "CREATE TABLE IF NOT EXISTS update_progress_buckets (update_id text, bucket int, PRIMARY KEY (update_id, bucket))",
        "CREATE TABLE IF NOT EXISTS update_progress (update_id text, bucket int, instance int, body text,
           PRIMARY KEY ((update_id, bucket), instance))",
        "CREATE TABLE IF NOT EXISTS pools (path text PRIMARY KEY, spec blob)",
        "CREATE TABLE IF NOT EXISTS plugins (slot text, name text, version text, meta text, chunks int,
           PRIMARY KEY (slot, name, version))",
        "CREATE TABLE IF NOT EXISTS plugin_chunks (slot text, name text, version text, chunk int, data blob,
           PRIMARY KEY ((slot, name, version), chunk))",
        "CREATE TABLE IF NOT EXISTS plugin_slots (slot text PRIMARY KEY, history text)",
        "CREATE TABLE IF NOT EXISTS hosts (hostname text PRIMARY KEY, record text)",
        "CREATE TABLE IF NOT EXISTS provider_ids (provider text PRIMARY KEY, id text)",
    ],
), (
    "leader fence",
    &["CREATE TABLE IF NOT EXISTS leader_fence (id text PRIMARY KEY, epoch bigint)"],
), (
    "job events",
    // Decision 0025: a partition per job, one row per (instance, reason, message).
    &["CREATE TABLE IF NOT EXISTS job_events (job_id text, instance int, reason text, message text, event_type text,
         first_seen_ms bigint, last_seen_ms bigint, count bigint, PRIMARY KEY (job_id, instance, reason, message))"],
), (
    // A partition per UTC day, newest first inside it; `audit_days` lists
    // the days that have one, so reads and pruning visit only those.
    "audit log",
    &[
        "CREATE TABLE IF NOT EXISTS audit_log (day int, at_ms bigint, id text, principal text, role text, method text,
           target text, job_id text, summary text, code text, message text,
           PRIMARY KEY ((day), at_ms, id)) WITH CLUSTERING ORDER BY (at_ms DESC, id DESC)",
        "CREATE TABLE IF NOT EXISTS audit_days (k int, day int, PRIMARY KEY (k, day))",
    ],
), (
    // Decision 0032: sealed task secrets, a partition per pool.
    "task secrets",
    &["CREATE TABLE IF NOT EXISTS secrets (pool text, name text, record text, PRIMARY KEY (pool, name))"],
), (
    // Decision 0033: job queries read an index instead of scanning every
    // job; a job is created behind a marker so a crash leaves nothing a
    // read can see. `backfill` fills the index from the jobs already there.
    "job query index and create markers",
    &[
        "CREATE TABLE IF NOT EXISTS job_index (attr text, value text, shard int, job_id text, at bigint,
           PRIMARY KEY ((attr, value, shard), job_id))",
        "CREATE TABLE IF NOT EXISTS job_creates (k int, job_id text, nonce text, claimed_ms bigint,
           PRIMARY KEY (k, job_id, nonce))",
    ],
)];

/// The migration whose index [`backfill`] fills from the existing jobs.
const JOB_INDEX_MIGRATION: u32 = 6;

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

fn be(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// Versions recorded in the keyspace (the session must use it).
pub async fn recorded(session: &Session) -> Result<Vec<u32>> {
    let rows = session.query_unpaged("SELECT id FROM schema_migrations", &[]).await.map_err(be)?;
    let rows = rows.into_rows_result().map_err(be)?;
    let mut ids = Vec::new();
    for r in rows.rows::<(i32,)>().map_err(be)? {
        ids.push(r.map_err(be)?.0 as u32);
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Creates the migrations table, refuses a newer schema, runs what is missing.
pub async fn migrate(session: &Session) -> Result<()> {
    session
        .query_unpaged(
            "CREATE TABLE IF NOT EXISTS schema_migrations (id int PRIMARY KEY, description text, applied_at_ms bigint)",
            &[],
        )
        .await
        .map_err(be)?;
    session.await_schema_agreement().await.map_err(be)?;
    let done = recorded(session).await?;
    if let Some(&found) = done.last()
        && found > SCHEMA_VERSION
    {
        return Err(StoreError::SchemaTooNew { backend: "cassandra", found, supported: SCHEMA_VERSION });
    }
    for (i, (description, statements)) in MIGRATIONS.iter().enumerate() {
        let version = i as u32 + 1;
        if done.contains(&version) {
            continue;
        }
        for cql in *statements {
            session
                .query_unpaged(*cql, &[])
                .await
                .map_err(|e| StoreError::Backend(format!("migration {version}: {e}")))?;
        }
        session.await_schema_agreement().await.map_err(be)?;
        if version == JOB_INDEX_MIGRATION {
            // Before the version is recorded: a crash here runs it again.
            super::job_index::backfill(session).await?;
        }
        session
            .query_unpaged(
                "INSERT INTO schema_migrations (id, description, applied_at_ms) VALUES (?, ?, ?)",
                (version as i32, *description, now_ms() as i64),
            )
            .await
            .map_err(be)?;
        tracing::info!(version, description, "cassandra schema migrated");
    }
    Ok(())
}
