//! Every CQL statement the store runs, in one list, prepared once at
//! connect ([`Stmts::prepare`]) with the consistency its [`Kind`] needs:
//! plain statements at the configured consistency and idempotent (so
//! retried), lightweight transactions at serial consistency and never
//! retried blindly, read-backs at serial consistency.
//!
//! Every table a statement names is qualified with the store's keyspace
//! when it is prepared ([`qualify`]): Cassandra 5 warns on each connection
//! that prepares an unqualified name while a `USE <keyspace>` is in force,
//! since the keyspace a prepared statement binds to then depends on the
//! connection it was prepared on.

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};

use crate::error::{Result, StoreError};

macro_rules! statements {
    ($($field:ident: $cql:expr, $kind:ident;)*) => {
        /// Every statement, prepared at connect.
        #[derive(Debug)]
        pub(super) struct Stmts { $(pub(super) $field: PreparedStatement,)* }

        impl Stmts {
            /// Prepares every statement with its tables in `keyspace`.
            pub(super) async fn prepare(session: &Session, keyspace: &str, c: Consistency, sc: SerialConsistency) -> Result<Stmts> {
                Ok(Stmts { $($field: prep(session, &qualify($cql, keyspace), Kind::$kind, c, sc).await?,)* })
            }
        }

        /// Every statement's CQL as written, unqualified, for the tests.
        #[cfg(test)]
        const ALL_CQL: &[&str] = &[$($cql,)*];
    };
}

/// `cql` with `keyspace.` before every table it names: the word after
/// each `FROM`, `INTO` and `UPDATE` (the statements here write their
/// keywords in capitals, and name no table elsewhere). A name that already
/// holds a `.` is left as it is.
pub(super) fn qualify(cql: &str, keyspace: &str) -> String {
    let mut out = String::with_capacity(cql.len() + 4 * (keyspace.len() + 1));
    let mut names_table_next = false;
    let mut rest = cql;
    while !rest.is_empty() {
        let blank = rest.len() - rest.trim_start().len();
        out.push_str(&rest[..blank]);
        rest = &rest[blank..];
        let word_len = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let word = &rest[..word_len];
        if names_table_next && !word.contains('.') && !word.is_empty() {
            out.push_str(keyspace);
            out.push('.');
        }
        out.push_str(word);
        names_table_next = matches!(word, "FROM" | "INTO" | "UPDATE");
        rest = &rest[word_len..];
    }
    out
}

#[derive(Clone, Copy)]
enum Kind {
    /// Plain read or whole-value write: idempotent, retried.
    Plain,
    /// Lightweight transaction.
    Lwt,
    /// Read at serial consistency (sees in-flight Paxos rounds).
    Serial,
}

/// How many times a statement is prepared before its error counts.
const PREPARE_TRIES: u32 = 20;

/// The node's error for a table or column it does not have (yet).
fn schema_not_there_yet(error: &str) -> bool {
    error.contains("Undefined column name") || error.contains("unconfigured table")
}

async fn prep(
    session: &Session,
    cql: &str,
    kind: Kind,
    c: Consistency,
    sc: SerialConsistency,
) -> Result<PreparedStatement> {
    let mut tries = 0;
    let mut st = loop {
        tries += 1;
        match session.prepare(cql).await {
            Ok(st) => break st,
            // Another process migrating the same keyspace at the same time
            // (two servers starting, or the test suites' parallel connects)
            // may have recorded a change before this node serves it: a
            // storage suite run saw "Undefined column name body" once.
            // Asked again for up to 5 s; anything else fails at once.
            Err(e) if tries < PREPARE_TRIES && schema_not_there_yet(&e.to_string()) => {
                tracing::debug!(error = %e, tries, "cassandra: a statement's table or column is not there yet");
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(e) => return Err(StoreError::Backend(format!("prepare `{cql}`: {e}"))),
        }
    };
    match kind {
        Kind::Plain => {
            st.set_consistency(c);
            st.set_is_idempotent(true);
        }
        Kind::Lwt => {
            st.set_consistency(c);
            st.set_serial_consistency(Some(sc));
            st.set_is_idempotent(false);
        }
        Kind::Serial => {
            st.set_consistency(match sc {
                SerialConsistency::LocalSerial => Consistency::LocalSerial,
                SerialConsistency::Serial => Consistency::Serial,
            });
            st.set_is_idempotent(true);
        }
    }
    st.set_page_size(1000);
    Ok(st)
}

statements! {
    // Job rows, their configs, task buckets and index entries are written,
    // and deleted, only at the handle's write clock, as task rows are
    // (decision 0049): the version and "already exists" checks are made in
    // the handle's cache, with no Paxos round.
    ins_job: "INSERT INTO jobs (job_id, name, owner, pool, kind, labels, instance_count, latest_config_version, state, version, runtime)
              VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, 1, ?) USING TIMESTAMP ?", Plain;
    upd_job_config: "UPDATE jobs USING TIMESTAMP ? SET name = ?, owner = ?, pool = ?, kind = ?, labels = ?, instance_count = ?,
                     latest_config_version = ? WHERE job_id = ?", Plain;
    put_job_runtime: "UPDATE jobs USING TIMESTAMP ? SET state = ?, version = ?, runtime = ? WHERE job_id = ?", Plain;
    sel_job_meta: "SELECT version, state, WRITETIME(state), latest_config_version FROM jobs WHERE job_id = ?", Plain;
    sel_job_runtime: "SELECT runtime, state FROM jobs WHERE job_id = ?", Plain;
    sel_job_exists: "SELECT job_id, state FROM jobs WHERE job_id = ?", Plain;
    sel_job_state: "SELECT state, WRITETIME(state) FROM jobs WHERE job_id = ?", Plain;
    sel_job_summary: "SELECT job_id, name, owner, pool, kind, labels, instance_count, latest_config_version, runtime, state
                      FROM jobs WHERE job_id = ?", Plain;
    commit_job: "UPDATE jobs USING TIMESTAMP ? SET state = ? WHERE job_id = ?", Plain;
    sel_jobs: "SELECT job_id, name, owner, pool, kind, labels, instance_count, latest_config_version, runtime, state FROM jobs", Plain;
    sel_jobs_after: "SELECT job_id, name, owner, pool, kind, labels, instance_count, latest_config_version, runtime, state FROM jobs
                     WHERE token(job_id) > token(?)", Plain;
    ins_index: "INSERT INTO job_index (attr, value, shard, job_id, at) VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?", Plain;
    sel_index: "SELECT job_id, WRITETIME(at) FROM job_index WHERE attr = ? AND value = ? AND shard = ? AND job_id > ? LIMIT ?", Plain;
    del_index_at: "DELETE FROM job_index USING TIMESTAMP ? WHERE attr = ? AND value = ? AND shard = ? AND job_id = ?", Plain;
    ins_create: "INSERT INTO job_creates (shard, job_id, nonce, claimed_ms) VALUES (?, ?, ?, ?)", Plain;
    del_create: "DELETE FROM job_creates WHERE shard = ? AND job_id = ? AND nonce = ?", Plain;
    sel_creates: "SELECT job_id, nonce FROM job_creates WHERE shard = ?", Plain;
    del_job: "DELETE FROM jobs USING TIMESTAMP ? WHERE job_id = ?", Plain;
    ins_config: "INSERT INTO job_configs (job_id, version, config) VALUES (?, ?, ?) USING TIMESTAMP ?", Plain;
    sel_config: "SELECT version, config FROM job_configs WHERE job_id = ? AND version = ?", Plain;
    sel_config_latest: "SELECT version, config FROM job_configs WHERE job_id = ? LIMIT 1", Plain;
    del_configs: "DELETE FROM job_configs USING TIMESTAMP ? WHERE job_id = ?", Plain;
    ins_bucket: "INSERT INTO job_task_buckets (job_id, bucket) VALUES (?, ?) USING TIMESTAMP ?", Plain;
    sel_buckets: "SELECT bucket FROM job_task_buckets WHERE job_id = ?", Plain;
    del_buckets: "DELETE FROM job_task_buckets USING TIMESTAMP ? WHERE job_id = ?", Plain;
    // Task rows are written only at the handle's write clock (decision
    // 0049): creates, runtime changes and deletes alike.
    // The runtime's JSON goes in `body`, a blob (schema 9, decision 0067);
    // `runtime` (text) is read where `body` is null: rows of older schemas,
    // and `bench storage`'s Paxos baseline below, which keeps the old column.
    ins_task: "INSERT INTO tasks (job_id, bucket, instance, state, version, body) VALUES (?, ?, ?, ?, ?, ?)
               USING TIMESTAMP ?", Plain;
    sel_bucket_versions: "SELECT instance, version FROM tasks WHERE job_id = ? AND bucket = ?", Plain;
    // The compare-and-set by Paxos of before decision 0049, and the create
    // at the node's time it needs: `bench storage`'s baseline.
    ins_task_node_time: "INSERT INTO tasks (job_id, bucket, instance, state, version, runtime) VALUES (?, ?, ?, ?, ?, ?)", Plain;
    cas_task_lwt: "UPDATE tasks SET state = ?, version = ?, runtime = ? WHERE job_id = ? AND bucket = ? AND instance = ? IF version = ?", Lwt;
    sel_task: "SELECT runtime, body FROM tasks WHERE job_id = ? AND bucket = ? AND instance = ?", Plain;
    sel_task_serial: "SELECT version, runtime FROM tasks WHERE job_id = ? AND bucket = ? AND instance = ?", Serial;
    sel_bucket_tasks: "SELECT instance, state, runtime, body FROM tasks WHERE job_id = ? AND bucket = ?", Plain;
    sel_bucket_instances: "SELECT instance FROM tasks WHERE job_id = ? AND bucket = ?", Plain;
    del_bucket_tasks: "DELETE FROM tasks USING TIMESTAMP ? WHERE job_id = ? AND bucket = ?", Plain;
    ins_event: "INSERT INTO task_events_by_bucket (job_id, bucket, runs, instance, at_ms, run, to_state, event)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?", Plain;
    sel_events: "SELECT at_ms, run, to_state, event FROM task_events_by_bucket
                 WHERE job_id = ? AND bucket = ? AND runs = ? AND instance = ? LIMIT ?", Plain;
    del_events: "DELETE FROM task_events_by_bucket WHERE job_id = ? AND bucket = ? AND runs = ?", Plain;
    ins_event_partition: "INSERT INTO task_event_partitions (job_id, bucket, runs) VALUES (?, ?, ?)", Plain;
    sel_event_partitions: "SELECT runs FROM task_event_partitions WHERE job_id = ? AND bucket = ?", Plain;
    sel_job_event_partitions: "SELECT bucket, runs FROM task_event_partitions WHERE job_id = ?", Plain;
    del_event_partitions: "DELETE FROM task_event_partitions WHERE job_id = ?", Plain;
    // The partition per task of schemas before 8, read while it holds rows.
    any_event_legacy: "SELECT instance FROM task_events LIMIT 1", Plain;
    sel_events_legacy: "SELECT at_ms, run, to_state, event FROM task_events WHERE job_id = ? AND instance = ? LIMIT ?", Plain;
    del_events_legacy: "DELETE FROM task_events WHERE job_id = ? AND instance = ?", Plain;
    ins_update: "INSERT INTO updates (update_id, job_id, version, body) VALUES (?, ?, 1, ?) IF NOT EXISTS", Lwt;
    ins_update_by_job: "INSERT INTO updates_by_job (job_id, created_at_ms, update_id) VALUES (?, ?, ?)", Plain;
    cas_update: "UPDATE updates SET version = ?, body = ? WHERE update_id = ? IF version = ?", Lwt;
    sel_update: "SELECT body FROM updates WHERE update_id = ?", Plain;
    sel_update_serial: "SELECT version, body FROM updates WHERE update_id = ?", Serial;
    sel_updates_of_job: "SELECT update_id FROM updates_by_job WHERE job_id = ?", Plain;
    ins_progress_bucket: "INSERT INTO update_progress_buckets (update_id, bucket) VALUES (?, ?)", Plain;
    sel_progress_buckets: "SELECT bucket FROM update_progress_buckets WHERE update_id = ?", Plain;
    ins_progress: "INSERT INTO update_progress (update_id, bucket, instance, body) VALUES (?, ?, ?, ?)", Plain;
    sel_progress: "SELECT body FROM update_progress WHERE update_id = ? AND bucket = ?", Plain;
    ins_pool: "INSERT INTO pools (path, spec) VALUES (?, ?)", Plain;
    sel_pool: "SELECT spec FROM pools WHERE path = ?", Plain;
    sel_pools: "SELECT path, spec FROM pools", Plain;
    del_pool: "DELETE FROM pools WHERE path = ?", Plain;
    ins_secret: "INSERT INTO secrets (pool, name, record) VALUES (?, ?, ?)", Plain;
    sel_secret: "SELECT record FROM secrets WHERE pool = ? AND name = ?", Plain;
    sel_secrets: "SELECT name, record FROM secrets WHERE pool = ?", Plain;
    del_secret: "DELETE FROM secrets WHERE pool = ? AND name = ?", Plain;
    ins_plugin: "INSERT INTO plugins (slot, name, version, meta, chunks) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS", Lwt;
    upd_plugin_meta: "UPDATE plugins SET meta = ? WHERE slot = ? AND name = ? AND version = ?", Plain;
    sel_plugin: "SELECT meta, chunks FROM plugins WHERE slot = ? AND name = ? AND version = ?", Plain;
    sel_plugins_slot: "SELECT meta FROM plugins WHERE slot = ?", Plain;
    sel_plugins: "SELECT meta FROM plugins", Plain;
    ins_chunk: "INSERT INTO plugin_chunks (slot, name, version, chunk, data) VALUES (?, ?, ?, ?, ?)", Plain;
    sel_chunks: "SELECT chunk, data FROM plugin_chunks WHERE slot = ? AND name = ? AND version = ?", Plain;
    ins_slot: "INSERT INTO plugin_slots (slot, history) VALUES (?, ?)", Plain;
    sel_slots: "SELECT slot, history FROM plugin_slots", Plain;
    ins_host: "INSERT INTO hosts (hostname, record) VALUES (?, ?)", Plain;
    sel_host: "SELECT record FROM hosts WHERE hostname = ?", Plain;
    sel_hosts: "SELECT record FROM hosts", Plain;
    del_host: "DELETE FROM hosts WHERE hostname = ?", Plain;
    ins_provider: "INSERT INTO provider_ids (provider, id) VALUES (?, ?)", Plain;
    sel_provider: "SELECT id FROM provider_ids WHERE provider = ?", Plain;
    ins_fence: "INSERT INTO leader_fence (id, epoch) VALUES ('leader', ?) IF NOT EXISTS", Lwt;
    raise_fence: "UPDATE leader_fence SET epoch = ? WHERE id = 'leader' IF epoch < ?", Lwt;
    sel_fence_serial: "SELECT epoch FROM leader_fence WHERE id = 'leader'", Serial;
    // Decision 0049: the epoch with the generation of the write clock.
    ins_epoch: "INSERT INTO leader_epochs (id, epoch, generation) VALUES ('leader', ?, ?) IF NOT EXISTS", Lwt;
    raise_epoch: "UPDATE leader_epochs SET epoch = ?, generation = ? WHERE id = 'leader' IF epoch = ? AND generation = ?", Lwt;
    sel_epoch_serial: "SELECT epoch, generation FROM leader_epochs WHERE id = 'leader'", Serial;
    sel_fence: "SELECT epoch FROM leader_epochs WHERE id = 'leader'", Plain;
    ins_job_event: "INSERT INTO job_events (job_id, instance, reason, message, event_type, first_seen_ms, last_seen_ms, count)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?", Plain;
    sel_job_events: "SELECT instance, reason, message, event_type, first_seen_ms, last_seen_ms, count FROM job_events
                     WHERE job_id = ?", Plain;
    del_job_event: "DELETE FROM job_events WHERE job_id = ? AND instance = ? AND reason = ? AND message = ?", Plain;
    del_job_events: "DELETE FROM job_events WHERE job_id = ?", Plain;
    ins_audit: "INSERT INTO audit_log (day, at_ms, id, principal, role, method, target, job_id, summary, code, message)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", Plain;
    ins_audit_day: "INSERT INTO audit_days (k, day) VALUES (0, ?)", Plain;
    sel_audit_days: "SELECT day FROM audit_days WHERE k = 0", Plain;
    sel_audit: "SELECT at_ms, id, principal, role, method, target, job_id, summary, code, message FROM audit_log
                WHERE day = ? AND at_ms >= ? AND at_ms < ?", Plain;
    sel_audit_times: "SELECT at_ms FROM audit_log WHERE day = ? LIMIT ?", Plain;
    count_audit_day: "SELECT COUNT(*) FROM audit_log WHERE day = ?", Plain;
    del_audit_day: "DELETE FROM audit_log WHERE day = ?", Plain;
    del_audit_before: "DELETE FROM audit_log WHERE day = ? AND at_ms < ?", Plain;
    del_audit_day_entry: "DELETE FROM audit_days WHERE k = 0 AND day = ?", Plain;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualify_names_the_keyspace_before_each_table_and_nowhere_else() {
        assert_eq!(
            qualify("UPDATE jobs USING TIMESTAMP ? SET state = ? WHERE job_id = ?", "ks"),
            "UPDATE ks.jobs USING TIMESTAMP ? SET state = ? WHERE job_id = ?"
        );
        assert_eq!(
            qualify("SELECT version, runtime FROM tasks\n   WHERE job_id = ?", "ks"),
            "SELECT version, runtime FROM ks.tasks\n   WHERE job_id = ?"
        );
        assert_eq!(
            qualify("INSERT INTO pools (path, spec) VALUES (?, ?)", "p_1"),
            "INSERT INTO p_1.pools (path, spec) VALUES (?, ?)"
        );
        assert_eq!(qualify("SELECT x FROM other.t", "ks"), "SELECT x FROM other.t");
        assert_eq!(qualify("SELECT from_ms, into FROM t", "ks"), "SELECT from_ms, into FROM ks.t");
    }

    #[test]
    fn every_prepared_statement_names_its_tables_in_the_keyspace() {
        for cql in ALL_CQL {
            let q = qualify(cql, "paceline_ks");
            let tables = cql.split_whitespace().filter(|w| matches!(*w, "FROM" | "INTO" | "UPDATE")).count();
            assert!(tables >= 1, "no table named in `{cql}`");
            assert_eq!(q.matches(" paceline_ks.").count(), tables, "`{q}`");
            assert_eq!(q.replace("paceline_ks.", ""), *cql);
        }
    }
}
