//! Cassandra schema: versioned migrations recorded in `schema_migrations`.
//!
//! Every statement is `IF NOT EXISTS` (a column is added only where it is
//! missing), so a migration that ran halfway (a crash, two processes
//! racing) can simply run again; a migration is
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
    // Both tables are written and deleted all the time (an entry per state
    // a job passes, a marker per create): their tombstones would pile up in
    // the partitions that recovery reads. A lost delete only brings back a
    // stale entry, which readers check and remove again, so tombstones may
    // go after 10 minutes, and compaction looks for them early.
    "job query index and create markers",
    &[
        "CREATE TABLE IF NOT EXISTS job_index (attr text, value text, shard int, job_id text, at bigint,
           PRIMARY KEY ((attr, value, shard), job_id))
           WITH gc_grace_seconds = 600 AND compaction = {'class': 'SizeTieredCompactionStrategy',
             'tombstone_threshold': '0.1', 'tombstone_compaction_interval': '600',
             'unchecked_tombstone_compaction': 'true'}",
        "CREATE TABLE IF NOT EXISTS job_creates (shard int, job_id text, nonce text, claimed_ms bigint,
           PRIMARY KEY (shard, job_id, nonce))
           WITH gc_grace_seconds = 600 AND compaction = {'class': 'SizeTieredCompactionStrategy',
             'tombstone_threshold': '0.1', 'tombstone_compaction_interval': '600',
             'unchecked_tombstone_compaction': 'true'}",
    ],
), (
    // Decision 0049: the leader's epoch with a generation, one more per new
    // epoch, the high bits of the write clock of task runtimes. A table of
    // its own rather than a column added to `leader_fence`, so every
    // migration stays a `CREATE … IF NOT EXISTS` (safe to run again, and
    // what the copy before an upgrade recreates). A claim still raises
    // `leader_fence` too, for a server of schema 6 still running.
    "leader epochs and generations",
    &["CREATE TABLE IF NOT EXISTS leader_epochs (id text PRIMARY KEY, epoch bigint, generation bigint)"],
), (
    // Decision 0065: task events a partition per bucket of tasks and group
    // of 16 runs, so a state change of a job's tasks writes its events in one
    // batch per bucket instead of one write per task, and a crash loop cannot
    // grow one partition without bound; `task_event_partitions` lists a job's
    // partitions for reads and deletes. The event's JSON is a blob,
    // which the node stores without checking it is UTF-8. The old
    // `task_events` is still read while it holds rows (`events.rs`).
    "task events by bucket",
    &[
        "CREATE TABLE IF NOT EXISTS task_events_by_bucket (job_id text, bucket int, runs int, instance int,
           at_ms bigint, run bigint, to_state text, event blob,
           PRIMARY KEY ((job_id, bucket, runs), instance, at_ms, run, to_state))
           WITH CLUSTERING ORDER BY (instance ASC, at_ms DESC, run DESC, to_state DESC)",
        "CREATE TABLE IF NOT EXISTS task_event_partitions (job_id text, bucket int, runs int,
           PRIMARY KEY (job_id, bucket, runs)) WITH CLUSTERING ORDER BY (bucket ASC, runs DESC)",
    ],
), (
    // Decision 0067: a task runtime's JSON in a blob column, which the
    // node stores without checking it is UTF-8 (about a tenth of its CPU
    // under the pipeline, when it was `text`). `runtime` is still read
    // where `body` is null. The one migration that alters a table: the
    // column is added only where it is missing (`add_column`), so it can
    // run again like the `CREATE … IF NOT EXISTS` ones, on Cassandra 4.0
    // too (which has no `ADD IF NOT EXISTS`).
    "task runtimes as blobs",
    &["ALTER TABLE tasks ADD body blob"],
), (
    // Decision 0072: a row of `task_events_by_bucket` may hold the events
    // of one run of a task that one call appended, as a JSON array. No
    // table changes; the version is recorded so that a server that can
    // read only one event a row refuses the keyspace instead of failing on
    // those rows.
    "task events a row per run and call",
    &[],
)];

/// The migration whose index [`backfill`] fills from the existing jobs.
const JOB_INDEX_MIGRATION: u32 = 6;

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

fn be(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// Runs one migration statement, asking again when it fails: every one is
/// `IF NOT EXISTS`, and a schema change that timed out on a loaded node may
/// still have been applied (clean-clone CI of `39620e3`: "migration 8:
/// Request execution exceeded a client timeout of 30000ms").
async fn schema_change(session: &Session, cql: &str) -> std::result::Result<(), String> {
    const TRIES: u32 = 3;
    let mut tries = 0;
    loop {
        tries += 1;
        match session.query_unpaged(cql, &[]).await {
            Ok(_) => return Ok(()),
            Err(e) if tries < TRIES => {
                tracing::warn!(error = %e, tries, "cassandra: a schema change failed; asking again")
            }
            Err(e) => return Err(format!("{e} ({tries} tries)")),
        }
    }
}

/// `ALTER TABLE t ADD c type` split into its table, column and type.
fn added_column(cql: &str) -> Option<(&str, &str, &str)> {
    let mut words = cql.strip_prefix("ALTER TABLE ")?.split_whitespace();
    let table = words.next()?;
    if words.next()? != "ADD" {
        return None;
    }
    let (column, kind) = (words.next()?, words.next()?);
    words.next().is_none().then_some((table, column, kind))
}

/// Adds `column` to `table` (in `keyspace`, else the session's) unless the
/// table has it: a migration that ran halfway runs again, and of two
/// processes adding it at once, the one refused finds it added.
async fn add_column(
    session: &Session,
    keyspace: Option<&str>,
    table: &str,
    column: &str,
    kind: &str,
) -> std::result::Result<(), String> {
    let keyspace = match keyspace {
        Some(k) => k.to_string(),
        None => session.get_keyspace().map(|k| k.to_string()).ok_or("the session has no keyspace")?,
    };
    if has_column(session, &keyspace, table, column).await? {
        return Ok(());
    }
    let alter = format!("ALTER TABLE {keyspace}.{table} ADD {column} {kind}");
    match session.query_unpaged(alter.as_str(), &[]).await {
        Ok(_) => Ok(()),
        Err(_) if has_column(session, &keyspace, table, column).await? => Ok(()),
        Err(_) => schema_change(session, &alter).await,
    }
}

async fn has_column(session: &Session, keyspace: &str, table: &str, column: &str) -> std::result::Result<bool, String> {
    let found = session
        .query_unpaged(
            "SELECT column_name FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ? AND column_name = ?",
            (keyspace, table, column),
        )
        .await
        .map_err(|e| e.to_string())?
        .into_rows_result()
        .map_err(|e| e.to_string())?
        .rows_num();
    Ok(found > 0)
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

/// Creates the migrations table, refuses a newer schema, copies an older
/// one aside (with `copy_before`, see [`copy_before_upgrade`]), runs what
/// is missing.
pub async fn migrate(session: &Session, copy_before: bool) -> Result<()> {
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
    if copy_before
        && let Some(&from) = done.last()
        && from < SCHEMA_VERSION
    {
        copy_before_upgrade(session, from).await?;
    }
    for (i, (description, statements)) in MIGRATIONS.iter().enumerate() {
        let version = i as u32 + 1;
        if done.contains(&version) {
            continue;
        }
        for cql in *statements {
            let done = match added_column(cql) {
                Some((table, column, kind)) => add_column(session, None, table, column, kind).await,
                None => schema_change(session, cql).await,
            };
            done.map_err(|e| StoreError::Backend(format!("migration {version}: {e}")))?;
        }
        session.await_schema_agreement().await.map_err(be)?;
        if version == JOB_INDEX_MIGRATION {
            // Before the version is recorded: a crash here runs it again.
            super::job_index::backfill(session).await?;
        }
        // A query with values is prepared by the driver: its table is
        // qualified, as every prepared statement's is (see `stmts`).
        let keyspace = session.get_keyspace().ok_or_else(|| StoreError::Backend("migrate: no keyspace".into()))?;
        session
            .query_unpaged(
                super::stmts::qualify(
                    "INSERT INTO schema_migrations (id, description, applied_at_ms) VALUES (?, ?, ?)",
                    &keyspace,
                ),
                (version as i32, *description, now_ms() as i64),
            )
            .await
            .map_err(be)?;
        tracing::info!(version, description, "cassandra schema migrated");
    }
    Ok(())
}

/// The keyspace an upgrade from schema `from` copies `keyspace` into.
pub fn pre_upgrade_keyspace(keyspace: &str, from: u32) -> String {
    let suffix = format!("_pre{from}");
    // Keyspace names are at most 48 characters.
    let keep = keyspace.len().min(48 - suffix.len());
    format!("{}{suffix}", &keyspace[..keep])
}

/// Tables schema `version` has, with the statements that make them.
fn tables_of(version: u32) -> Vec<(&'static str, &'static str)> {
    MIGRATIONS
        .iter()
        .take(version as usize)
        .flat_map(|(_, statements)| statements.iter())
        .filter_map(|cql| {
            let rest = cql.strip_prefix("CREATE TABLE IF NOT EXISTS ")?;
            let name = rest.split([' ', '(']).next()?;
            Some((name, *cql))
        })
        .collect()
}

/// Copies every table of the session's keyspace, at schema `from`, into
/// [`pre_upgrade_keyspace`] (replaced if a copy of the same version is
/// there: an earlier upgrade stopped part way), with the same replication,
/// before any migration runs. The older server can be pointed at the copy.
/// Rows are copied as JSON (`SELECT JSON` / `INSERT … JSON`); TTLs are not
/// kept (a copied task event no longer expires). The servers must be
/// stopped (the upgrade procedure): the copy is then of one moment.
async fn copy_before_upgrade(session: &Session, from: u32) -> Result<()> {
    let keyspace = session
        .get_keyspace()
        .ok_or_else(|| StoreError::Backend("schema upgrade: the session has no keyspace".into()))?;
    let target = pre_upgrade_keyspace(&keyspace, from);
    let replication: Option<std::collections::HashMap<String, String>> = session
        .query_unpaged("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?", (keyspace.as_str(),))
        .await
        .map_err(be)?
        .into_rows_result()
        .map_err(be)?
        .maybe_first_row::<(std::collections::HashMap<String, String>,)>()
        .map_err(be)?
        .map(|r| r.0);
    let replication = replication.ok_or_else(|| StoreError::Backend(format!("keyspace {keyspace} not found")))?;
    let mut parts = Vec::new();
    for (k, v) in &replication {
        if !k.chars().chain(v.chars()).all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            return Err(StoreError::Backend(format!("keyspace {keyspace}: replication entry {k} is unusual")));
        }
        parts.push(format!("'{k}': '{v}'"));
    }
    let started = std::time::Instant::now();
    tracing::info!(from, to = SCHEMA_VERSION, copy = %target, "cassandra: copying the keyspace before its schema upgrade");
    let run = |cql: String| async move {
        session.query_unpaged(cql.as_str(), &[]).await.map_err(|e| StoreError::Backend(format!("{cql}: {e}")))
    };
    run(format!("DROP KEYSPACE IF EXISTS {target}")).await?;
    run(format!("CREATE KEYSPACE {target} WITH replication = {{{}}}", parts.join(", "))).await?;
    run(format!(
        "CREATE TABLE IF NOT EXISTS {target}.schema_migrations (id int PRIMARY KEY, description text, applied_at_ms bigint)"
    ))
    .await?;
    let tables = tables_of(from);
    for (name, cql) in &tables {
        let qualified = cql.replacen(
            &format!("CREATE TABLE IF NOT EXISTS {name}"),
            &format!("CREATE TABLE IF NOT EXISTS {target}.{name}"),
            1,
        );
        run(qualified).await?;
    }
    // Columns later migrations of `from` added to those tables.
    for cql in MIGRATIONS.iter().take(from as usize).flat_map(|(_, statements)| statements.iter()) {
        if let Some((table, column, kind)) = added_column(cql) {
            add_column(session, Some(&target), table, column, kind).await.map_err(StoreError::Backend)?;
        }
    }
    session.await_schema_agreement().await.map_err(be)?;
    let mut rows = 0u64;
    for name in std::iter::once("schema_migrations").chain(tables.iter().map(|(n, _)| *n)) {
        rows += copy_table(session, &keyspace, &target, name).await?;
    }
    tracing::info!(
        copy = %target,
        rows,
        seconds = started.elapsed().as_secs_f64(),
        "cassandra store copied before its schema upgrade"
    );
    Ok(())
}

async fn copy_table(session: &Session, from: &str, to: &str, table: &str) -> Result<u64> {
    use futures::{StreamExt, TryStreamExt};
    let insert = session.prepare(format!("INSERT INTO {to}.{table} JSON ?")).await.map_err(be)?;
    let pager = session.query_iter(format!("SELECT JSON * FROM {from}.{table}"), &[]).await.map_err(be)?;
    let mut stream = pager.rows_stream::<(String,)>().map_err(be)?.map_err(be).chunks(256);
    let mut n = 0u64;
    while let Some(chunk) = stream.next().await {
        let rows: Vec<String> = chunk.into_iter().map(|r| r.map(|r| r.0)).collect::<Result<_>>()?;
        n += rows.len() as u64;
        futures::stream::iter(rows)
            .map(|json| {
                let insert = &insert;
                async move { session.execute_unpaged(insert, (json,)).await.map_err(be) }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<_>>()
            .await?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_added_column_is_read_from_its_statement() {
        assert_eq!(added_column("ALTER TABLE tasks ADD body blob"), Some(("tasks", "body", "blob")));
        assert_eq!(added_column("ALTER TABLE tasks DROP body"), None);
        assert_eq!(added_column("ALTER TABLE tasks ADD body blob extra"), None);
        assert_eq!(added_column("CREATE TABLE IF NOT EXISTS t (k int PRIMARY KEY)"), None);
    }

    #[test]
    fn every_migration_statement_can_run_again() {
        for (description, statements) in MIGRATIONS {
            for cql in *statements {
                let again = cql.starts_with("CREATE TABLE IF NOT EXISTS ") || added_column(cql).is_some();
                assert!(again, "migration {description:?}: {cql} cannot run twice");
            }
        }
    }
}
