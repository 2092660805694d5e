//! SQLite schema and its versioned migrations. The schema version lives in
//! `PRAGMA user_version`; each migration runs in its own transaction with
//! the version bump, so a crash leaves the old or the new schema.

use rusqlite::Connection;

use crate::error::{Result, StoreError};

/// Migrations in order; index + 1 is the schema version they produce.
/// Released entries are never edited: add a new one.
const MIGRATIONS: &[&str] = &[
    // 1: everything of the first release.
    r#"
    CREATE TABLE jobs (
        job_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        owner TEXT NOT NULL,
        pool TEXT NOT NULL,
        kind TEXT NOT NULL,
        labels TEXT NOT NULL,
        instance_count INTEGER NOT NULL,
        latest_config_version INTEGER NOT NULL,
        state TEXT NOT NULL,
        version INTEGER NOT NULL,
        runtime TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX jobs_state ON jobs(state);
    CREATE INDEX jobs_owner ON jobs(owner);
    CREATE INDEX jobs_pool ON jobs(pool);
    CREATE TABLE job_labels (
        job_id TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (job_id, key)
    ) WITHOUT ROWID;
    CREATE INDEX job_labels_kv ON job_labels(key, value);
    CREATE TABLE job_configs (
        job_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        config TEXT NOT NULL,
        PRIMARY KEY (job_id, version)
    ) WITHOUT ROWID;
    CREATE TABLE tasks (
        job_id TEXT NOT NULL,
        instance INTEGER NOT NULL,
        state TEXT NOT NULL,
        version INTEGER NOT NULL,
        runtime TEXT NOT NULL,
        PRIMARY KEY (job_id, instance)
    ) WITHOUT ROWID;
    CREATE INDEX tasks_state ON tasks(job_id, state);
    CREATE TABLE task_events (
        job_id TEXT NOT NULL,
        instance INTEGER NOT NULL,
        at_ms INTEGER NOT NULL,
        run INTEGER NOT NULL,
        to_state TEXT NOT NULL,
        event TEXT NOT NULL,
        PRIMARY KEY (job_id, instance, at_ms, run, to_state)
    ) WITHOUT ROWID;
    CREATE TABLE updates (
        update_id TEXT PRIMARY KEY,
        job_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        created_at_ms INTEGER NOT NULL,
        body TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX updates_job ON updates(job_id, created_at_ms);
    CREATE TABLE update_progress (
        update_id TEXT NOT NULL,
        instance INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (update_id, instance)
    ) WITHOUT ROWID;
    CREATE TABLE pools (
        path TEXT PRIMARY KEY,
        spec BLOB NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE plugins (
        slot TEXT NOT NULL,
        name TEXT NOT NULL,
        version TEXT NOT NULL,
        meta TEXT NOT NULL,
        deployed_at_ms INTEGER NOT NULL,
        bytes BLOB NOT NULL,
        PRIMARY KEY (slot, name, version)
    );
    CREATE TABLE plugin_slots (
        slot TEXT PRIMARY KEY,
        history TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE hosts (
        hostname TEXT PRIMARY KEY,
        record TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE provider_ids (
        provider TEXT PRIMARY KEY,
        id TEXT NOT NULL
    ) WITHOUT ROWID;
    "#,
    // 2: the leader epoch that fences stale leaders' writes (one row, id 1).
    r#"
    CREATE TABLE leader_fence (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        epoch INTEGER NOT NULL
    );
    "#,
    // 3: job events (decision 0025), one row per (job, instance, reason,
    // message); instance -1 is the job's own.
    r#"
    CREATE TABLE job_events (
        job_id TEXT NOT NULL,
        instance INTEGER NOT NULL,
        reason TEXT NOT NULL,
        message TEXT NOT NULL,
        event_type TEXT NOT NULL,
        first_seen_ms INTEGER NOT NULL,
        last_seen_ms INTEGER NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (job_id, instance, reason, message)
    ) WITHOUT ROWID;
    CREATE INDEX job_events_seen ON job_events(job_id, last_seen_ms);
    "#,
    // 4: the audit log (docs/operations.md, "Audit log"). `seq` only grows,
    // so pruning to a row count is one range delete.
    r#"
    CREATE TABLE audit_log (
        seq INTEGER PRIMARY KEY,
        at_ms INTEGER NOT NULL,
        id TEXT NOT NULL UNIQUE,
        principal TEXT NOT NULL,
        role TEXT NOT NULL,
        method TEXT NOT NULL,
        target TEXT NOT NULL,
        job_id TEXT NOT NULL,
        summary TEXT NOT NULL,
        code TEXT NOT NULL,
        message TEXT NOT NULL
    );
    CREATE INDEX audit_log_at ON audit_log(at_ms);
    CREATE INDEX audit_log_principal ON audit_log(principal, at_ms);
    CREATE INDEX audit_log_job ON audit_log(job_id, at_ms);
    "#,
    // 5: task secrets (decision 0032), sealed records as JSON.
    r#"
    CREATE TABLE secrets (
        pool TEXT NOT NULL,
        name TEXT NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (pool, name)
    ) WITHOUT ROWID;
    "#,
    // 6: a `task_events` row may hold the events of one run of a task that
    // one call appended, as a JSON array (decision 0072). No table
    // changes; the version makes a server that reads one event a row
    // refuse the file instead of failing on those rows.
    "-- task events a row per run and call",
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// The schema version recorded in the database.
pub fn current_version(conn: &Connection) -> Result<u32> {
    conn.query_row("PRAGMA user_version", [], |r| r.get::<_, u32>(0)).map_err(backend)
}

/// Brings the schema to [`SCHEMA_VERSION`], or refuses a newer database
/// without changing it.
pub fn migrate(conn: &mut Connection) -> Result<()> {
    let found = current_version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew { backend: "sqlite", found, supported: SCHEMA_VERSION });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as u32 + 1;
        let tx = conn.transaction().map_err(backend)?;
        tx.execute_batch(sql).map_err(|e| StoreError::Backend(format!("migration {version}: {e}")))?;
        // PRAGMA takes no bound parameters; `version` is our own integer.
        tx.execute_batch(&format!("PRAGMA user_version = {version}")).map_err(backend)?;
        tx.commit().map_err(backend)?;
        tracing::info!(version, "sqlite schema migrated");
    }
    Ok(())
}
