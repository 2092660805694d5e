//! The production backend: Apache Cassandra or ScyllaDB through the
//! `scylla` driver.
//!
//! - Schema: versioned, idempotent migrations ([`schema`]).
//! - Every statement is prepared once at connect.
//! - Compare-and-set uses lightweight transactions (`IF version = ?`) at
//!   serial consistency; a timed-out Paxos round is resolved by reading the
//!   row back at serial consistency, never by guessing.
//! - Partitions are bounded: a job's tasks live in buckets of
//!   [`schema::TASK_BUCKET`] instances, task events in a partition per task
//!   with a TTL, update progress in buckets too.
//! - Idempotent statements are retried with backoff on timeouts ([`retry`]).

mod config;
mod retry;
pub mod schema;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use paceline_model::host::HostRecord;
use paceline_model::job::{InstanceProgress, JobConfig, JobRuntime, Update};
use paceline_model::task::{TaskEvent, TaskRuntime, TaskState};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::deserialize::row::DeserializeRow;
use scylla::response::query_result::QueryResult;
use scylla::serialize::row::SerializeRow;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};
use scylla::value::{CqlValue, Row};
use sha2::{Digest, Sha256};

use crate::error::{Result, StoreError};
use crate::store::Store;
use crate::types::{
    JobQuery, JobSummary, NewJob, Page, PluginVersion, TaskCas, TaskRecord, check_id, check_page, decode, encode,
    encode_config, limits, matches, new_job, to_summary,
};
use crate::validate;
pub use config::{CassandraConfig, ConsistencyLevel};
use retry::{Class, backoff, classify, retrying};
pub use schema::{SCHEMA_VERSION, TASK_BUCKET};

/// Largest total body of one batch: Cassandra fails batches over 50 KiB
/// (`batch_size_fail_threshold`) by default.
const MAX_BATCH_BYTES: usize = 32 * 1024;
/// Most statements of one batch.
const MAX_BATCH_STATEMENTS: usize = 100;
/// Conditional or batched writes in flight at once from one call.
const CONCURRENCY: usize = 32;
/// Plugin components are split into chunks of this size (cells stay small).
const PLUGIN_CHUNK: usize = 1024 * 1024;

fn be(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn bucket(instance: u32) -> i32 {
    (instance / TASK_BUCKET) as i32
}

fn task_what(job_id: &str, instance: u32) -> String {
    format!("task {job_id}/{instance}")
}

/// What a conditional write answered.
enum Lwt {
    Applied,
    /// Not applied; the row's current version, `None` if the row is absent.
    NotApplied(Option<u64>),
}

macro_rules! statements {
    ($($field:ident: $cql:expr, $kind:ident;)*) => {
        /// Every statement, prepared at connect.
        #[derive(Debug)]
        struct Stmts { $($field: PreparedStatement,)* }

        impl Stmts {
            async fn prepare(session: &Session, c: Consistency, sc: SerialConsistency) -> Result<Stmts> {
                Ok(Stmts { $($field: prep(session, $cql, Kind::$kind, c, sc).await?,)* })
            }
        }
    };
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

async fn prep(
    session: &Session,
    cql: &str,
    kind: Kind,
    c: Consistency,
    sc: SerialConsistency,
) -> Result<PreparedStatement> {
    let mut st = session.prepare(cql).await.map_err(|e| StoreError::Backend(format!("prepare `{cql}`: {e}")))?;
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
    ins_job: "INSERT INTO jobs (job_id, name, owner, pool, kind, labels, instance_count, latest_config_version, state, version, runtime)
              VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, 1, ?) IF NOT EXISTS", Lwt;
    upd_job_config: "UPDATE jobs SET name = ?, owner = ?, pool = ?, kind = ?, labels = ?, instance_count = ?, latest_config_version = ?
                     WHERE job_id = ? IF latest_config_version = ?", Lwt;
    cas_job: "UPDATE jobs SET state = ?, version = ?, runtime = ? WHERE job_id = ? IF version = ?", Lwt;
    sel_job_serial: "SELECT version, runtime FROM jobs WHERE job_id = ?", Serial;
    sel_job_runtime: "SELECT runtime FROM jobs WHERE job_id = ?", Plain;
    sel_job_exists: "SELECT job_id FROM jobs WHERE job_id = ?", Plain;
    sel_jobs: "SELECT job_id, name, owner, pool, kind, labels, instance_count, latest_config_version, runtime FROM jobs", Plain;
    sel_jobs_after: "SELECT job_id, name, owner, pool, kind, labels, instance_count, latest_config_version, runtime FROM jobs
                     WHERE token(job_id) > token(?)", Plain;
    del_job: "DELETE FROM jobs WHERE job_id = ?", Plain;
    ins_config: "INSERT INTO job_configs (job_id, version, config) VALUES (?, ?, ?)", Plain;
    sel_config: "SELECT version, config FROM job_configs WHERE job_id = ? AND version = ?", Plain;
    sel_config_latest: "SELECT version, config FROM job_configs WHERE job_id = ? LIMIT 1", Plain;
    del_configs: "DELETE FROM job_configs WHERE job_id = ?", Plain;
    ins_bucket: "INSERT INTO job_task_buckets (job_id, bucket) VALUES (?, ?)", Plain;
    sel_buckets: "SELECT bucket FROM job_task_buckets WHERE job_id = ?", Plain;
    del_buckets: "DELETE FROM job_task_buckets WHERE job_id = ?", Plain;
    ins_task: "INSERT INTO tasks (job_id, bucket, instance, state, version, runtime) VALUES (?, ?, ?, ?, ?, ?)", Plain;
    cas_task: "UPDATE tasks SET state = ?, version = ?, runtime = ? WHERE job_id = ? AND bucket = ? AND instance = ? IF version = ?", Lwt;
    sel_task: "SELECT runtime FROM tasks WHERE job_id = ? AND bucket = ? AND instance = ?", Plain;
    sel_task_serial: "SELECT version, runtime FROM tasks WHERE job_id = ? AND bucket = ? AND instance = ?", Serial;
    sel_bucket_tasks: "SELECT instance, state, runtime FROM tasks WHERE job_id = ? AND bucket = ?", Plain;
    sel_bucket_instances: "SELECT instance FROM tasks WHERE job_id = ? AND bucket = ?", Plain;
    del_bucket_tasks: "DELETE FROM tasks WHERE job_id = ? AND bucket = ?", Plain;
    ins_event: "INSERT INTO task_events (job_id, instance, at_ms, run, to_state, event) VALUES (?, ?, ?, ?, ?, ?) USING TTL ?", Plain;
    sel_events: "SELECT event FROM task_events WHERE job_id = ? AND instance = ? LIMIT ?", Plain;
    del_events: "DELETE FROM task_events WHERE job_id = ? AND instance = ?", Plain;
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
    sel_fence: "SELECT epoch FROM leader_fence WHERE id = 'leader'", Plain;
}

/// The Cassandra store.
pub struct CassandraStore {
    session: Arc<Session>,
    s: Stmts,
    consistency: Consistency,
    tries: u32,
    event_ttl_secs: i32,
    keyspace: String,
    /// Leader fencing: checked by a read before each write once claimed.
    fence: Arc<crate::fence::Fence>,
}

impl std::fmt::Debug for CassandraStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CassandraStore")
            .field("keyspace", &self.keyspace)
            .field("consistency", &self.consistency)
            .finish()
    }
}

fn replication_cql(cfg: &CassandraConfig) -> Result<String> {
    let mut parts = Vec::new();
    for (k, v) in &cfg.replication {
        let v = match v {
            serde_yaml::Value::String(s) => s.clone(),
            serde_yaml::Value::Number(n) => n.to_string(),
            other => return Err(StoreError::Invalid(format!("replication `{k}`: unsupported value {other:?}"))),
        };
        for s in [k.as_str(), v.as_str()] {
            if !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
                return Err(StoreError::Invalid(format!(
                    "replication entry `{s}` has characters CQL does not allow here"
                )));
            }
        }
        parts.push(format!("'{k}': '{v}'"));
    }
    if !cfg.replication.contains_key("class") {
        return Err(StoreError::Invalid("replication needs a `class`".into()));
    }
    Ok(format!("{{{}}}", parts.join(", ")))
}

impl CassandraStore {
    /// Connects, creates the keyspace if missing, migrates, prepares.
    pub async fn connect(cfg: &CassandraConfig) -> Result<CassandraStore> {
        if cfg.contact_points.is_empty() {
            return Err(StoreError::Invalid("cassandra: no contact_points".into()));
        }
        let ks = &cfg.keyspace;
        if ks.is_empty() || ks.len() > 48 || !ks.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(StoreError::Invalid(format!("keyspace `{ks}`: use 1-48 letters, digits or _")));
        }
        let replication = replication_cql(cfg)?;
        let session = SessionBuilder::new()
            .known_nodes(&cfg.contact_points)
            .connection_timeout(Duration::from_secs(10))
            .build()
            .await
            .map_err(|e| StoreError::Unavailable(format!("cassandra at {:?}: {e}", cfg.contact_points)))?;
        session
            .query_unpaged(format!("CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {replication}"), &[])
            .await
            .map_err(be)?;
        session.await_schema_agreement().await.map_err(be)?;
        session.use_keyspace(ks.as_str(), false).await.map_err(be)?;
        schema::migrate(&session).await?;
        let (c, sc) = match cfg.consistency {
            ConsistencyLevel::One => (Consistency::One, SerialConsistency::LocalSerial),
            ConsistencyLevel::LocalQuorum => (Consistency::LocalQuorum, SerialConsistency::LocalSerial),
            ConsistencyLevel::Quorum => (Consistency::Quorum, SerialConsistency::Serial),
            ConsistencyLevel::EachQuorum => (Consistency::EachQuorum, SerialConsistency::Serial),
            ConsistencyLevel::All => (Consistency::All, SerialConsistency::Serial),
        };
        let s = Stmts::prepare(&session, c, sc).await?;
        tracing::info!(keyspace = %ks, consistency = ?c, schema = SCHEMA_VERSION, "cassandra store open");
        Ok(CassandraStore {
            session: Arc::new(session),
            s,
            consistency: c,
            tries: cfg.retries.max(1),
            event_ttl_secs: (cfg.event_ttl_days.max(1) as i32).saturating_mul(86_400),
            keyspace: ks.clone(),
            fence: Arc::default(),
        })
    }

    /// The driver session (tests and benchmarks use it for raw CQL).
    pub fn session(&self) -> &Session {
        &self.session
    }

    async fn exec(&self, what: &str, st: &PreparedStatement, values: impl SerializeRow) -> Result<QueryResult> {
        let bound = st.clone().bind(&values).map_err(be)?;
        retrying(what, self.tries, || self.session.execute_bound_unpaged(&bound)).await
    }

    async fn rows<R>(&self, what: &str, st: &PreparedStatement, values: impl SerializeRow) -> Result<Vec<R>>
    where
        R: for<'f, 'm> DeserializeRow<'f, 'm>,
    {
        let qr = self.exec(what, st, values).await?;
        let rows = qr.into_rows_result().map_err(be)?;
        let mut out = Vec::with_capacity(rows.rows_num());
        for r in rows.rows::<R>().map_err(|e| StoreError::Corrupt { what: what.into(), reason: e.to_string() })? {
            out.push(r.map_err(|e| StoreError::Corrupt { what: what.into(), reason: e.to_string() })?);
        }
        Ok(out)
    }

    /// All pages of a query (scans of small tables, the jobs table).
    async fn scan<R>(&self, what: &str, st: &PreparedStatement, values: impl SerializeRow + Clone) -> Result<Vec<R>>
    where
        R: for<'f, 'm> DeserializeRow<'f, 'm>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result: std::result::Result<Vec<R>, String> = async {
                let pager = self.session.execute_iter(st.clone(), values.clone()).await.map_err(|e| e.to_string())?;
                let stream = pager.rows_stream::<R>().map_err(|e| e.to_string())?;
                stream.try_collect::<Vec<R>>().await.map_err(|e| e.to_string())
            }
            .await;
            match result {
                Ok(v) => return Ok(v),
                Err(e) if attempt < self.tries => {
                    tracing::warn!(what, attempt, error = %e, "cassandra: scan failed, retrying");
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(StoreError::Unavailable(format!("{what}: {e}"))),
            }
        }
    }

    /// Writes `rows` with `st` in unlogged batches of bounded size, grouped
    /// by partition (`key(row)`) so each batch touches one partition.
    async fn batched<V, K>(&self, what: &str, st: &PreparedStatement, rows: Vec<(K, usize, V)>) -> Result<()>
    where
        V: SerializeRow + Send + Sync,
        K: Ord,
    {
        let mut groups: BTreeMap<K, Vec<(usize, V)>> = BTreeMap::new();
        for (k, size, v) in rows {
            groups.entry(k).or_default().push((size, v));
        }
        let mut batches: Vec<Vec<V>> = Vec::new();
        for (_, group) in groups {
            let mut cur = Vec::new();
            let mut bytes = 0;
            for (size, v) in group {
                if !cur.is_empty() && (bytes + size > MAX_BATCH_BYTES || cur.len() >= MAX_BATCH_STATEMENTS) {
                    batches.push(std::mem::take(&mut cur));
                    bytes = 0;
                }
                bytes += size;
                cur.push(v);
            }
            if !cur.is_empty() {
                batches.push(cur);
            }
        }
        futures::stream::iter(batches)
            .map(|values| async move {
                let mut batch = Batch::new(BatchType::Unlogged);
                for _ in 0..values.len() {
                    batch.append_statement(st.clone());
                }
                batch.set_consistency(self.consistency);
                batch.set_is_idempotent(true);
                retrying(what, self.tries, || self.session.batch(&batch, &values)).await.map(|_| ())
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    async fn lwt_once(
        &self,
        what: &str,
        st: &PreparedStatement,
        values: &impl SerializeRow,
    ) -> std::result::Result<Lwt, (Class, StoreError)> {
        let bound = st.clone().bind(values).map_err(|e| (Class::Fatal, be(e)))?;
        let qr = self
            .session
            .execute_bound_unpaged(&bound)
            .await
            .map_err(|e| (classify(&e), StoreError::Backend(format!("{what}: {e}"))))?;
        let rows = qr.into_rows_result().map_err(|e| (Class::Fatal, be(e)))?;
        let version_col = rows.column_specs().get_by_name("version").map(|(i, _)| i);
        let row: Row = rows.first_row::<Row>().map_err(|e| (Class::Fatal, be(e)))?;
        let applied = matches!(row.columns.first(), Some(Some(CqlValue::Boolean(true))));
        if applied {
            return Ok(Lwt::Applied);
        }
        let version = version_col.and_then(|i| match row.columns.get(i) {
            Some(Some(CqlValue::BigInt(v))) => Some(*v as u64),
            _ => None,
        });
        // A row that exists always has a version; an absent row answers
        // with `[applied]` alone (or null columns).
        let exists = row.columns.len() > 1 && row.columns.iter().skip(1).any(Option::is_some);
        Ok(Lwt::NotApplied(if exists { version.or(Some(0)) } else { None }))
    }

    /// A compare-and-set: the LWT `st` with `values`; on an unknown outcome
    /// (timeout) reads the row back at serial consistency with `read` /
    /// `key` and decides from what is there.
    // The arguments are the statement pair and the values each needs; a
    // struct to carry them would only rename them.
    #[allow(clippy::too_many_arguments)]
    async fn cas<V, KV>(
        &self,
        what: &str,
        st: &PreparedStatement,
        values: V,
        read: &PreparedStatement,
        key: KV,
        expected: u64,
        body: &str,
    ) -> Result<()>
    where
        V: SerializeRow,
        KV: SerializeRow + Clone,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let err = match self.lwt_once(what, st, &values).await {
                Ok(Lwt::Applied) => return Ok(()),
                Ok(Lwt::NotApplied(None)) => return Err(StoreError::NotFound { kind: "record", id: what.to_string() }),
                Ok(Lwt::NotApplied(Some(v))) => return Err(StoreError::conflict(what, expected, Some(v))),
                Err((Class::Fatal, e)) => return Err(e),
                Err((_, e)) => e,
            };
            tracing::warn!(what, attempt, error = %err, "cassandra: conditional write outcome unknown, reading back");
            tokio::time::sleep(backoff(attempt)).await;
            let current: Vec<(i64, String)> = self.rows(what, read, key.clone()).await?;
            match current.first() {
                None => return Err(StoreError::NotFound { kind: "record", id: what.to_string() }),
                Some((v, b)) if *v as u64 == expected + 1 && b == body => return Ok(()),
                Some((v, _)) if *v as u64 == expected && attempt < self.tries => continue,
                Some((v, _)) if *v as u64 == expected => return Err(err),
                Some((v, _)) => return Err(StoreError::conflict(what, expected, Some(*v as u64))),
            }
        }
    }

    /// Before a write: refuses it if a later leader's epoch is recorded.
    /// A read at the configured consistency, not part of the write (see
    /// docs/storage.md, "Leader fencing", for the window this leaves).
    async fn fence_check(&self) -> Result<()> {
        if self.fence.claimed().is_none() {
            return Ok(());
        }
        self.fence.refuse_if_fenced()?;
        let rows: Vec<(i64,)> = self.rows("leader fence", &self.s.sel_fence, ()).await?;
        self.fence.check(rows.first().map_or(0, |r| r.0.max(0) as u64))
    }

    /// Runs a lightweight transaction once and says whether it applied.
    async fn applied(&self, what: &str, st: &PreparedStatement, values: impl SerializeRow) -> Result<bool> {
        let bound = st.clone().bind(&values).map_err(be)?;
        let qr = self
            .session
            .execute_bound_unpaged(&bound)
            .await
            .map_err(|e| StoreError::Unavailable(format!("{what}: {e}")))?;
        let rows = qr.into_rows_result().map_err(be)?;
        let row: Row = rows.first_row::<Row>().map_err(be)?;
        Ok(matches!(row.columns.first(), Some(Some(CqlValue::Boolean(true)))))
    }

    async fn job_exists(&self, id: &str) -> Result<bool> {
        Ok(!self.rows::<(String,)>("job", &self.s.sel_job_exists, (id,)).await?.is_empty())
    }

    async fn buckets(&self, job_id: &str) -> Result<Vec<i32>> {
        Ok(self
            .rows::<(i32,)>("task buckets", &self.s.sel_buckets, (job_id,))
            .await?
            .into_iter()
            .map(|r| r.0)
            .collect())
    }

    /// Plain (non-conditional) batched writes of task runtimes at the
    /// versions they carry. Used by [`Store::create_tasks`], and by the
    /// benchmark to measure writes without LWT. Not a compare-and-set:
    /// do not use it beside concurrent writers.
    pub async fn put_tasks_unconditional(&self, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()> {
        self.fence_check().await?;
        check_id("job", job_id)?;
        let mut rows = Vec::with_capacity(tasks.len());
        let mut buckets = BTreeSet::new();
        for (instance, rt) in tasks {
            validate::instance(*instance)?;
            rt.validate()?;
            let body = encode(|| task_what(job_id, *instance), rt, limits::MAX_RECORD)?;
            buckets.insert(bucket(*instance));
            let size = body.len() + job_id.len() + 32;
            rows.push((
                bucket(*instance),
                size,
                (job_id.to_string(), bucket(*instance), *instance as i32, rt.state.as_str(), rt.version as i64, body),
            ));
        }
        // Bucket markers first: a task row is never invisible to listings.
        futures::stream::iter(buckets)
            .map(|b| self.exec("task bucket", &self.s.ins_bucket, (job_id, b)))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        self.batched("tasks", &self.s.ins_task, rows).await
    }
}

type JobRow = (String, String, String, String, String, String, i32, i64, String);

/// Cassandra has no unsigned integers; the summary columns are `int` and `bigint`.
fn job_summary(r: JobRow) -> Result<JobSummary> {
    let (id, name, owner, pool, kind, labels, instance_count, latest, runtime) = r;
    to_summary((id, name, owner, pool, kind, labels, instance_count as u32, latest as u64, runtime))
}

#[async_trait]
impl Store for CassandraStore {
    async fn claim_leadership(&self, epoch: u64) -> Result<()> {
        if epoch == 0 {
            return Err(StoreError::Invalid("leader epoch 0: epochs start at 1".into()));
        }
        let e = epoch as i64;
        // Paxos on the one fence row: create it, or raise it if ours is larger;
        // then read it back at serial consistency to learn who won.
        if !self.applied("leader fence", &self.s.ins_fence, (e,)).await? {
            self.applied("leader fence", &self.s.raise_fence, (e, e)).await?;
        }
        let rows: Vec<(i64,)> = self.rows("leader fence", &self.s.sel_fence_serial, ()).await?;
        let recorded = rows.first().map_or(0, |r| r.0.max(0) as u64);
        if recorded > epoch {
            return Err(StoreError::Fenced { mine: epoch, current: recorded });
        }
        self.fence.set_claimed(epoch);
        tracing::info!(epoch, "cassandra: leader epoch claimed; writes are fenced against older leaders");
        Ok(())
    }

    fn is_fenced(&self) -> bool {
        self.fence.is_fenced()
    }

    fn backend(&self) -> &'static str {
        "cassandra"
    }

    async fn create_job(&self, id: &str, config: &JobConfig, runtime: &JobRuntime) -> Result<JobRuntime> {
        self.fence_check().await?;
        let NewJob { config: body, runtime: rt, runtime_body: rt_body, labels } = new_job(id, config, runtime)?;
        // The config first (plain, idempotent) would overwrite version 1 of
        // an existing job; so the LWT claims the id first.
        let values = (
            id,
            &config.name,
            &config.owner,
            &config.pool,
            config.kind.as_str(),
            &labels,
            config.instance_count as i32,
            rt.state.as_str(),
            &rt_body,
        );
        match self.lwt_once("create job", &self.s.ins_job, &values).await {
            Ok(Lwt::Applied) => {}
            Ok(Lwt::NotApplied(_)) => return Err(StoreError::exists("job", id)),
            Err((_, e)) => {
                // Unknown outcome: it is ours if the row holds our runtime.
                let current: Vec<(i64, String)> = self.rows("job", &self.s.sel_job_serial, (id,)).await?;
                if current.first().is_none_or(|(_, b)| *b != rt_body) {
                    return Err(e);
                }
            }
        }
        self.exec("job config", &self.s.ins_config, (id, 1i64, &body)).await?;
        Ok(rt)
    }

    async fn add_job_config(&self, id: &str, version: u64, config: &JobConfig) -> Result<()> {
        self.fence_check().await?;
        let body = encode_config(id, config)?;
        let labels = encode(|| format!("labels of job {id}"), &config.labels, limits::MAX_RECORD)?;
        if version < 2 {
            return Err(StoreError::Invalid(format!("config version {version}: versions after the first start at 2")));
        }
        let values = (
            &config.name,
            &config.owner,
            &config.pool,
            config.kind.as_str(),
            &labels,
            config.instance_count as i32,
            version as i64,
            id,
            (version - 1) as i64,
        );
        match self.lwt_once("job config", &self.s.upd_job_config, &values).await {
            Ok(Lwt::Applied) => {}
            Ok(Lwt::NotApplied(_)) if !self.job_exists(id).await? => return Err(StoreError::not_found("job", id)),
            Ok(Lwt::NotApplied(_)) => {
                let (latest, _) = self.get_job_config(id, None).await?;
                return Err(StoreError::conflict(format!("config of job {id}"), version - 1, Some(latest)));
            }
            Err((_, e)) => return Err(e),
        }
        self.exec("job config", &self.s.ins_config, (id, version as i64, &body)).await?;
        Ok(())
    }

    async fn get_job_config(&self, id: &str, version: Option<u64>) -> Result<(u64, JobConfig)> {
        let rows: Vec<(i64, String)> = match version {
            Some(v) => self.rows("job config", &self.s.sel_config, (id, v as i64)).await?,
            None => self.rows("job config", &self.s.sel_config_latest, (id,)).await?,
        };
        let (v, body) = rows.into_iter().next().ok_or_else(|| {
            StoreError::not_found(
                "job config",
                match version {
                    Some(v) => format!("{id} v{v}"),
                    None => id.to_string(),
                },
            )
        })?;
        Ok((v as u64, decode(|| format!("config of job {id} v{v}"), &body)?))
    }

    async fn get_job_runtime(&self, id: &str) -> Result<JobRuntime> {
        let rows: Vec<(Option<String>,)> = self.rows("job", &self.s.sel_job_runtime, (id,)).await?;
        let body = rows.into_iter().next().and_then(|r| r.0).ok_or_else(|| StoreError::not_found("job", id))?;
        decode(|| format!("runtime of job {id}"), &body)
    }

    async fn cas_job_runtime(&self, id: &str, expected_version: u64, runtime: &JobRuntime) -> Result<JobRuntime> {
        self.fence_check().await?;
        check_id("job", id)?;
        runtime.validate()?;
        let mut stored = runtime.clone();
        stored.version = expected_version + 1;
        let body = encode(|| format!("runtime of job {id}"), &stored, limits::MAX_RECORD)?;
        let values = (stored.state.as_str(), stored.version as i64, &body, id, expected_version as i64);
        self.cas(&format!("job {id}"), &self.s.cas_job, values, &self.s.sel_job_serial, (id,), expected_version, &body)
            .await
            .map_err(|e| match e {
                StoreError::NotFound { .. } => StoreError::not_found("job", id),
                e => e,
            })?;
        Ok(stored)
    }

    async fn query_jobs(&self, query: &JobQuery) -> Result<Page<JobSummary>> {
        check_page(query.limit)?;
        // Jobs are few (thousands, not millions) next to tasks: a paged scan
        // in token order filtered here beats secondary indexes, which
        // Cassandra answers by asking every node.
        let rows: Vec<JobRow> = match &query.cursor {
            Some(c) => self.scan("jobs", &self.s.sel_jobs_after, (c.as_str(),)).await?,
            None => self.scan("jobs", &self.s.sel_jobs, ()).await?,
        };
        let mut items = Vec::new();
        let mut next = None;
        for r in rows {
            let s = job_summary(r)?;
            if !matches(query, &s) {
                continue;
            }
            if items.len() == query.limit as usize {
                next = items.last().map(|s: &JobSummary| s.id.clone());
                break;
            }
            items.push(s);
        }
        Ok(Page { items, next })
    }

    async fn live_jobs(&self) -> Result<Vec<JobSummary>> {
        let rows: Vec<JobRow> = self.scan("jobs", &self.s.sel_jobs, ()).await?;
        let mut out = Vec::new();
        for r in rows {
            let s = job_summary(r)?;
            if !s.runtime.state.is_terminal() {
                out.push(s);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    async fn delete_job(&self, id: &str) -> Result<()> {
        self.fence_check().await?;
        if !self.job_exists(id).await? {
            return Err(StoreError::not_found("job", id));
        }
        let tasks = self.tasks_of_job(id, &[]).await?;
        let instances: Vec<u32> = tasks.iter().map(|t| t.instance).collect();
        futures::stream::iter(instances)
            .map(|i: u32| self.exec("task events", &self.s.del_events, (id, i as i32)))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        for b in self.buckets(id).await? {
            self.exec("tasks", &self.s.del_bucket_tasks, (id, b)).await?;
        }
        self.exec("task buckets", &self.s.del_buckets, (id,)).await?;
        self.exec("job configs", &self.s.del_configs, (id,)).await?;
        // The job row last: while it exists, a retry can finish the delete.
        self.exec("job", &self.s.del_job, (id,)).await?;
        Ok(())
    }

    async fn create_tasks(&self, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()> {
        self.fence_check().await?;
        check_id("job", job_id)?;
        let mut rows = Vec::with_capacity(tasks.len());
        let mut wanted: BTreeMap<i32, BTreeSet<u32>> = BTreeMap::new();
        for (instance, rt) in tasks {
            validate::instance(*instance)?;
            rt.validate()?;
            let mut rt = rt.clone();
            rt.version = 1;
            encode(|| task_what(job_id, *instance), &rt, limits::MAX_RECORD)?;
            wanted.entry(bucket(*instance)).or_default().insert(*instance);
            rows.push((*instance, rt));
        }
        if !self.job_exists(job_id).await? {
            return Err(StoreError::not_found("job", job_id));
        }
        // Refuse existing instances before writing anything. Not atomic with
        // the writes (Cassandra has no multi-partition transactions): the job
        // manager creates a job's tasks from one leader, and a retry of the
        // same call finds only its own rows.
        let buckets: Vec<i32> = wanted.keys().copied().collect();
        let existing = futures::stream::iter(buckets)
            .map(|b: i32| self.rows::<(i32,)>("tasks", &self.s.sel_bucket_instances, (job_id, b)))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        for (i,) in existing.into_iter().flatten() {
            if wanted.get(&bucket(i as u32)).is_some_and(|s| s.contains(&(i as u32))) {
                return Err(StoreError::exists("task", format!("{job_id}/{i}")));
            }
        }
        self.put_tasks_unconditional(job_id, &rows).await
    }

    async fn get_task(&self, job_id: &str, instance: u32) -> Result<TaskRuntime> {
        let rows: Vec<(Option<String>,)> =
            self.rows("task", &self.s.sel_task, (job_id, bucket(instance), instance as i32)).await?;
        let body = rows
            .into_iter()
            .next()
            .and_then(|r| r.0)
            .ok_or_else(|| StoreError::not_found("task", format!("{job_id}/{instance}")))?;
        decode(|| task_what(job_id, instance), &body)
    }

    async fn cas_task(
        &self,
        job_id: &str,
        instance: u32,
        expected_version: u64,
        runtime: &TaskRuntime,
    ) -> Result<TaskRuntime> {
        self.fence_check().await?;
        check_id("job", job_id)?;
        runtime.validate()?;
        let mut stored = runtime.clone();
        stored.version = expected_version + 1;
        let body = encode(|| task_what(job_id, instance), &stored, limits::MAX_RECORD)?;
        let b = bucket(instance);
        let values =
            (stored.state.as_str(), stored.version as i64, &body, job_id, b, instance as i32, expected_version as i64);
        self.cas(
            &task_what(job_id, instance),
            &self.s.cas_task,
            values,
            &self.s.sel_task_serial,
            (job_id, b, instance as i32),
            expected_version,
            &body,
        )
        .await
        .map_err(|e| match e {
            StoreError::NotFound { .. } => StoreError::not_found("task", format!("{job_id}/{instance}")),
            e => e,
        })?;
        Ok(stored)
    }

    async fn cas_tasks(&self, job_id: &str, writes: &[TaskCas]) -> Result<Vec<Result<u64>>> {
        self.fence_check().await?;
        check_id("job", job_id)?;
        for w in writes {
            w.runtime.validate()?;
        }
        // Conditional writes cannot be batched across partitions, and
        // concurrent ones on one partition contend in Paxos: run each
        // bucket's writes in order, buckets in parallel.
        let mut by_bucket: BTreeMap<i32, Vec<(usize, TaskCas)>> = BTreeMap::new();
        for (i, w) in writes.iter().enumerate() {
            by_bucket.entry(bucket(w.instance)).or_default().push((i, w.clone()));
        }
        // (Measured: 4 concurrent writers per bucket were slower than 1.)
        let groups: Vec<Vec<(usize, TaskCas)>> = by_bucket.into_values().collect();
        let done = futures::stream::iter(groups)
            .map(|group: Vec<(usize, TaskCas)>| async move {
                let mut out = Vec::with_capacity(group.len());
                for (i, w) in group {
                    out.push((
                        i,
                        self.cas_task(job_id, w.instance, w.expected_version, &w.runtime).await.map(|r| r.version),
                    ));
                }
                out
            })
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        let mut results: Vec<Option<Result<u64>>> = (0..writes.len()).map(|_| None).collect();
        for (i, r) in done.into_iter().flatten() {
            results[i] = Some(r);
        }
        let results = results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(StoreError::Backend("internal: a write of the batch was not run".into()))))
            .collect();
        Ok(results)
    }

    async fn tasks_of_job(&self, job_id: &str, states: &[TaskState]) -> Result<Vec<TaskRecord>> {
        let buckets = self.buckets(job_id).await?;
        let parts = futures::stream::iter(buckets)
            .map(|b| self.rows::<(i32, String, String)>("tasks", &self.s.sel_bucket_tasks, (job_id, b)))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        let wanted: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
        let mut out = Vec::new();
        for (instance, state, body) in parts.into_iter().flatten() {
            if wanted.is_empty() || wanted.contains(&state.as_str()) {
                let instance = instance as u32;
                out.push(TaskRecord { instance, runtime: decode(|| task_what(job_id, instance), &body)? });
            }
        }
        out.sort_by_key(|t| t.instance);
        Ok(out)
    }

    async fn append_task_events(&self, job_id: &str, instance: u32, events: &[TaskEvent]) -> Result<()> {
        self.fence_check().await?;
        check_id("job", job_id)?;
        let mut rows = Vec::with_capacity(events.len());
        for e in events {
            let body = encode(|| format!("event of {}", task_what(job_id, instance)), e, limits::MAX_RECORD)?;
            let size = body.len() + 64;
            rows.push((
                0u8,
                size,
                (
                    job_id.to_string(),
                    instance as i32,
                    e.at_ms as i64,
                    e.run as i64,
                    e.to.as_str(),
                    body,
                    self.event_ttl_secs,
                ),
            ));
        }
        self.batched("task events", &self.s.ins_event, rows).await
    }

    async fn append_job_events(&self, job_id: &str, events: &[(u32, TaskEvent)]) -> Result<()> {
        self.fence_check().await?;
        check_id("job", job_id)?;
        let mut rows = Vec::with_capacity(events.len());
        for (instance, e) in events {
            let body = encode(|| format!("event of {}", task_what(job_id, *instance)), e, limits::MAX_RECORD)?;
            let size = body.len() + 64;
            rows.push((
                *instance, // one batch per partition (job, instance)
                size,
                (
                    job_id.to_string(),
                    *instance as i32,
                    e.at_ms as i64,
                    e.run as i64,
                    e.to.as_str(),
                    body,
                    self.event_ttl_secs,
                ),
            ));
        }
        self.batched("task events", &self.s.ins_event, rows).await
    }

    async fn task_events(&self, job_id: &str, instance: u32, limit: u32) -> Result<Vec<TaskEvent>> {
        check_page(limit)?;
        // History is bounded per task: older events are never returned and expire by TTL.
        let limit = limit.min(limits::MAX_EVENTS_PER_TASK as u32) as i32;
        let rows: Vec<(String,)> =
            self.rows("task events", &self.s.sel_events, (job_id, instance as i32, limit)).await?;
        rows.iter().map(|(b,)| decode(|| format!("event of {}", task_what(job_id, instance)), b)).collect()
    }

    async fn create_update(&self, update: &Update) -> Result<Update> {
        self.fence_check().await?;
        update.validate()?;
        check_id("update", &update.id)?;
        let mut stored = update.clone();
        stored.version = 1;
        let body = encode(|| format!("update {}", update.id), &stored, limits::MAX_JOB_CONFIG)?;
        if !self.job_exists(&update.job_id).await? {
            return Err(StoreError::not_found("job", &update.job_id));
        }
        match self.lwt_once("update", &self.s.ins_update, &(&stored.id, &stored.job_id, &body)).await {
            Ok(Lwt::Applied) => {}
            Ok(Lwt::NotApplied(_)) => return Err(StoreError::exists("update", &stored.id)),
            Err((_, e)) => return Err(e),
        }
        self.exec("update", &self.s.ins_update_by_job, (&stored.job_id, stored.created_at_ms as i64, &stored.id))
            .await?;
        Ok(stored)
    }

    async fn get_update(&self, id: &str) -> Result<Update> {
        let rows: Vec<(String,)> = self.rows("update", &self.s.sel_update, (id,)).await?;
        let (body,) = rows.into_iter().next().ok_or_else(|| StoreError::not_found("update", id))?;
        decode(|| format!("update {id}"), &body)
    }

    async fn cas_update(&self, id: &str, expected_version: u64, update: &Update) -> Result<Update> {
        self.fence_check().await?;
        update.validate()?;
        if update.id != id {
            return Err(StoreError::Invalid(format!("update id `{}` differs from `{id}`", update.id)));
        }
        let mut stored = update.clone();
        stored.version = expected_version + 1;
        let body = encode(|| format!("update {id}"), &stored, limits::MAX_JOB_CONFIG)?;
        let values = (stored.version as i64, &body, id, expected_version as i64);
        self.cas(
            &format!("update {id}"),
            &self.s.cas_update,
            values,
            &self.s.sel_update_serial,
            (id,),
            expected_version,
            &body,
        )
        .await
        .map_err(|e| match e {
            StoreError::NotFound { .. } => StoreError::not_found("update", id),
            e => e,
        })?;
        Ok(stored)
    }

    async fn updates_of_job(&self, job_id: &str) -> Result<Vec<Update>> {
        let ids: Vec<(String,)> = self.rows("updates", &self.s.sel_updates_of_job, (job_id,)).await?;
        let mut out = Vec::with_capacity(ids.len());
        for (id,) in ids {
            match self.get_update(&id).await {
                Ok(u) => out.push(u),
                // An index row whose update was never written (a crash
                // between the two writes) is skipped.
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    async fn put_update_progress(&self, update_id: &str, progress: &[InstanceProgress]) -> Result<()> {
        self.fence_check().await?;
        check_id("update", update_id)?;
        let mut rows = Vec::with_capacity(progress.len());
        let mut buckets = BTreeSet::new();
        for p in progress {
            validate::instance(p.instance)?;
            let body = encode(|| format!("progress of update {update_id}"), p, limits::MAX_RECORD)?;
            let b = bucket(p.instance);
            buckets.insert(b);
            rows.push((b, body.len() + 32, (update_id.to_string(), b, p.instance as i32, body)));
        }
        if self.rows::<(String,)>("update", &self.s.sel_update, (update_id,)).await?.is_empty() {
            return Err(StoreError::not_found("update", update_id));
        }
        for b in buckets {
            self.exec("progress bucket", &self.s.ins_progress_bucket, (update_id, b)).await?;
        }
        self.batched("update progress", &self.s.ins_progress, rows).await
    }

    async fn update_progress(&self, update_id: &str) -> Result<Vec<InstanceProgress>> {
        let buckets: Vec<(i32,)> = self.rows("progress buckets", &self.s.sel_progress_buckets, (update_id,)).await?;
        let mut out: Vec<InstanceProgress> = Vec::new();
        for (b,) in buckets {
            let rows: Vec<(String,)> = self.rows("update progress", &self.s.sel_progress, (update_id, b)).await?;
            for (body,) in rows {
                out.push(decode(|| format!("progress of update {update_id}"), &body)?);
            }
        }
        out.sort_by_key(|p| p.instance);
        Ok(out)
    }

    async fn put_pool(&self, path: &str, spec: &[u8]) -> Result<()> {
        self.fence_check().await?;
        validate::pool(path, spec)?;
        self.exec("pool", &self.s.ins_pool, (path, spec)).await?;
        Ok(())
    }

    async fn get_pool(&self, path: &str) -> Result<Vec<u8>> {
        let rows: Vec<(Vec<u8>,)> = self.rows("pool", &self.s.sel_pool, (path,)).await?;
        rows.into_iter().next().map(|r| r.0).ok_or_else(|| StoreError::not_found("pool", path))
    }

    async fn list_pools(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let mut rows: Vec<(String, Vec<u8>)> = self.scan("pools", &self.s.sel_pools, ()).await?;
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(rows)
    }

    async fn delete_pool(&self, path: &str) -> Result<()> {
        self.fence_check().await?;
        self.exec("pool", &self.s.del_pool, (path,)).await?;
        Ok(())
    }

    async fn put_plugin_version(&self, version: &PluginVersion, bytes: &[u8]) -> Result<()> {
        self.fence_check().await?;
        validate::plugin(version, bytes)?;
        let meta = encode(|| format!("plugin {}", version.id()), version, limits::MAX_RECORD)?;
        let chunks = bytes.len().div_ceil(PLUGIN_CHUNK);
        let v = version;
        // Claim the version first so that an existing version's chunks are
        // never overwritten; the chunks follow, and reads verify the sha256,
        // so a crash in between shows as a corrupt (incomplete) version.
        match self.lwt_once("plugin", &self.s.ins_plugin, &(&v.slot, &v.name, &v.version, &meta, chunks as i32)).await {
            Ok(Lwt::Applied) => {}
            Ok(Lwt::NotApplied(_)) => {
                return Err(StoreError::exists("plugin version", format!("{}/{}", v.slot, v.id())));
            }
            Err((_, e)) => return Err(e),
        }
        futures::stream::iter(0..chunks)
            .map(|i: usize| {
                let c = &bytes[i * PLUGIN_CHUNK..((i + 1) * PLUGIN_CHUNK).min(bytes.len())];
                self.exec("plugin chunk", &self.s.ins_chunk, (&v.slot, &v.name, &v.version, i as i32, c))
            })
            .buffer_unordered(4)
            .try_collect::<Vec<_>>()
            .await?;
        Ok(())
    }

    async fn set_plugin_state(&self, slot: &str, name: &str, version: &str, state: &str) -> Result<()> {
        self.fence_check().await?;
        check_id("plugin state", state)?;
        let rows: Vec<(String, i32)> = self.rows("plugin", &self.s.sel_plugin, (slot, name, version)).await?;
        let (meta, _) = rows
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::not_found("plugin version", format!("{slot}/{name}@{version}")))?;
        let mut v: PluginVersion = decode(|| format!("plugin {slot}/{name}@{version}"), &meta)?;
        v.state = state.to_string();
        let meta = encode(|| format!("plugin {}", v.id()), &v, limits::MAX_RECORD)?;
        self.exec("plugin", &self.s.upd_plugin_meta, (&meta, slot, name, version)).await?;
        Ok(())
    }

    async fn plugin_versions(&self, slot: Option<&str>) -> Result<Vec<PluginVersion>> {
        let rows: Vec<(String,)> = match slot {
            Some(s) => self.rows("plugins", &self.s.sel_plugins_slot, (s,)).await?,
            None => self.scan("plugins", &self.s.sel_plugins, ()).await?,
        };
        let mut out = rows
            .iter()
            .map(|(m,)| decode::<PluginVersion>(|| "plugin version".into(), m))
            .collect::<Result<Vec<_>>>()?;
        out.sort_by(|a, b| {
            (&a.slot, a.deployed_at_ms, &a.name, &a.version).cmp(&(&b.slot, b.deployed_at_ms, &b.name, &b.version))
        });
        Ok(out)
    }

    async fn plugin_bytes(&self, slot: &str, name: &str, version: &str) -> Result<Vec<u8>> {
        let what = format!("{slot}/{name}@{version}");
        let rows: Vec<(String, i32)> = self.rows("plugin", &self.s.sel_plugin, (slot, name, version)).await?;
        let (meta, n) = rows.into_iter().next().ok_or_else(|| StoreError::not_found("plugin version", &what))?;
        let v: PluginVersion = decode(|| format!("plugin {what}"), &meta)?;
        let mut chunks: Vec<(i32, Vec<u8>)> =
            self.rows("plugin chunks", &self.s.sel_chunks, (slot, name, version)).await?;
        chunks.sort_by_key(|c| c.0);
        if chunks.len() != n as usize {
            return Err(StoreError::Corrupt {
                what: format!("plugin {what}"),
                reason: format!("{} of {n} chunks stored", chunks.len()),
            });
        }
        let bytes: Vec<u8> = chunks.into_iter().flat_map(|c| c.1).collect();
        if !hex::encode(Sha256::digest(&bytes)).eq_ignore_ascii_case(&v.sha256) {
            return Err(StoreError::Corrupt {
                what: format!("plugin {what}"),
                reason: "sha256 does not match the stored bytes".into(),
            });
        }
        Ok(bytes)
    }

    async fn set_slot_history(&self, slot: &str, history: &[String]) -> Result<()> {
        self.fence_check().await?;
        check_id("plugin slot", slot)?;
        let body = encode(|| format!("history of slot {slot}"), &history, limits::MAX_RECORD)?;
        self.exec("plugin slot", &self.s.ins_slot, (slot, &body)).await?;
        Ok(())
    }

    async fn slot_histories(&self) -> Result<BTreeMap<String, Vec<String>>> {
        let rows: Vec<(String, String)> = self.scan("plugin slots", &self.s.sel_slots, ()).await?;
        rows.into_iter().map(|(s, h)| Ok((s.clone(), decode(|| format!("history of slot {s}"), &h)?))).collect()
    }

    async fn put_host(&self, host: &HostRecord) -> Result<()> {
        self.fence_check().await?;
        validate::host(host)?;
        let body = encode(|| format!("host {}", host.hostname), host, limits::MAX_RECORD)?;
        self.exec("host", &self.s.ins_host, (&host.hostname, &body)).await?;
        Ok(())
    }

    async fn get_host(&self, hostname: &str) -> Result<HostRecord> {
        let rows: Vec<(String,)> = self.rows("host", &self.s.sel_host, (hostname,)).await?;
        let (body,) = rows.into_iter().next().ok_or_else(|| StoreError::not_found("host", hostname))?;
        decode(|| format!("host {hostname}"), &body)
    }

    async fn list_hosts(&self) -> Result<Vec<HostRecord>> {
        let rows: Vec<(String,)> = self.scan("hosts", &self.s.sel_hosts, ()).await?;
        let mut out = rows.iter().map(|(b,)| decode::<HostRecord>(|| "host".into(), b)).collect::<Result<Vec<_>>>()?;
        out.sort_by(|a, b| a.hostname.cmp(&b.hostname));
        Ok(out)
    }

    async fn delete_host(&self, hostname: &str) -> Result<()> {
        self.fence_check().await?;
        self.exec("host", &self.s.del_host, (hostname,)).await?;
        Ok(())
    }

    async fn put_provider_id(&self, provider: &str, id: &str) -> Result<()> {
        self.fence_check().await?;
        check_id("provider", provider)?;
        check_id("provider id", id)?;
        self.exec("provider id", &self.s.ins_provider, (provider, id)).await?;
        Ok(())
    }

    async fn get_provider_id(&self, provider: &str) -> Result<Option<String>> {
        let rows: Vec<(String,)> = self.rows("provider id", &self.s.sel_provider, (provider,)).await?;
        Ok(rows.into_iter().next().map(|r| r.0))
    }
}
