//! The production backend: Apache Cassandra or ScyllaDB through the
//! `scylla` driver.
//!
//! - Schema: versioned, idempotent migrations ([`schema`]).
//! - Every statement is prepared once at connect.
//! - Jobs and task runtimes take no Paxos round (decision 0049): job
//!   creates decide "already exists", and runtime and config writes check
//!   their versions, in the handle's cache (`versions`), and job rows,
//!   their configs, index entries and task rows are written at the fenced
//!   write clock's timestamps, so a deposed leader's late write loses.
//!   Updates, plugin versions and the fence keep lightweight transactions
//!   (`IF version = ?`, `IF NOT EXISTS`) at serial consistency; a timed-out
//!   Paxos round is resolved by reading the row back at serial consistency,
//!   never by guessing.
//! - Partitions are bounded: a job's tasks live in buckets of
//!   [`schema::TASK_BUCKET`] instances, task events in a partition per task
//!   with a TTL, update progress in buckets too.
//! - Idempotent statements are retried with backoff on timeouts (`retry`).
//!
//! # Layout
//! - `mod.rs`: [`CassandraStore`], [`CassandraStore::connect`] (keyspace,
//!   migration, prepared statements), and the [`Store`] impl, which hands
//!   each method to the module that owns its tables.
//! - `config`: [`CassandraConfig`], [`CassandraTls`] and [`ConsistencyLevel`]
//!   (re-exported by [`crate::config`]).
//! - `security`: the login (password from a file or the environment, never
//!   printed) and the TLS context (decision 0028).
//! - [`schema`]: tables and migrations; `retry`: which errors are retried.
//! - `stmts`: every CQL statement, prepared at connect.
//! - `exec`: running statements: retries, scans, batches, conditional writes.
//! - `leader`: leader fencing (claim with the write clock's generation, and
//!   the check before each write).
//! - `versions`: the cache of task runtime versions (decision 0049).
//! - `jobs`, `tasks`, `events`, `updates`: a job and what hangs off it;
//!   a create all or nothing for readers (decision 0033).
//! - `job_index`: the job query index (decision 0033).
//! - `plugins`: plugin versions, their chunked bytes, slot histories.
//! - `inventory`: pools, hosts, provider ids.
//! - `job_events`: job events, a partition per job (decision 0025).

mod audit;
mod config;
mod events;
mod exec;
pub mod fault;
mod fence_reads;
mod inventory;
mod job_events;
mod job_index;
mod jobs;
mod leader;
mod plugins;
mod retry;
pub mod schema;
mod secrets;
mod security;
mod stmts;
mod tasks;
mod updates;
mod versions;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use paceline_model::host::HostRecord;
use paceline_model::job::{InstanceProgress, JobConfig, JobRuntime, Update};
use paceline_model::task::{TaskEvent, TaskRuntime, TaskState};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::{Consistency, SerialConsistency};

use crate::error::{Result, StoreError};
use crate::secrets::SealedSecret;
use crate::store::Store;
use crate::types::{JobQuery, JobSummary, Page, PluginVersion, TaskCas, TaskRecord};
pub use config::{CassandraConfig, CassandraTls, ConsistencyLevel};
pub use schema::{SCHEMA_VERSION, TASK_BUCKET};
use stmts::Stmts;

/// Conditional or batched writes in flight at once from one call.
const CONCURRENCY: usize = 32;

fn be(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn bucket(instance: u32) -> i32 {
    (instance / TASK_BUCKET) as i32
}

fn task_what(job_id: &str, instance: u32) -> String {
    format!("task {job_id}/{instance}")
}

/// The Cassandra store.
pub struct CassandraStore {
    session: Arc<Session>,
    s: Stmts,
    consistency: Consistency,
    tries: u32,
    event_ttl_secs: i32,
    keyspace: String,
    /// Leader fencing: checked by a read before each write once claimed;
    /// and the write clock of task rows (decision 0049).
    fence: Arc<crate::fence::Fence>,
    /// Versions of task runtimes, where their compare-and-set is checked.
    versions: versions::Versions,
    /// Job rows this handle knows: creates' "already exists", versions of
    /// job runtimes and configs (decision 0049).
    job_versions: versions::JobVersions,
    /// Tests only: see [`CassandraStore::act_as_paused_past_fence_check`].
    past_fence_check: std::sync::atomic::AtomicBool,
    /// Fault injection ([`fault`]): task runtime writes wait while this file exists.
    hold_runtime_writes: Option<std::path::PathBuf>,
    /// Whether `task_events`, the partition per task of schemas before 8,
    /// held rows when this handle opened: they are then read and deleted
    /// beside the new table's (decision 0065).
    legacy_events: bool,
    /// Task event partitions this handle has listed (`events.rs`).
    event_partitions: events::ListedPartitions,
    /// Fence reads shared by the writes waiting for one.
    fence_reads: Arc<fence_reads::FenceReads>,
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
        // The driver reads schema metadata at start and again on every schema
        // change anywhere in the cluster. Routing needs only this keyspace's
        // replication and tables, not their columns nor other keyspaces': a
        // node shared with many keyspaces (tests, other services) otherwise
        // costs every open session a read of all of them per DDL.
        let mut builder = SessionBuilder::new()
            .known_nodes(&cfg.contact_points)
            .connection_timeout(Duration::from_secs(10))
            .keyspaces_to_fetch([ks.clone()])
            .fetch_full_schema_metadata(false);
        let login = security::login(cfg)?;
        if let Some(login) = &login {
            builder = builder.user(login.user.clone(), login.password.expose());
        }
        match &cfg.tls {
            Some(tls) => builder = builder.tls_context(Some(security::tls_context(tls)?)),
            None if login.is_some() => tracing::warn!(
                "cassandra: a password is sent without TLS, readable on the network; set storage.cassandra.tls"
            ),
            None => {}
        }
        let session = builder.build().await.map_err(|e| security::connect_error(cfg, &e.to_string()))?;
        session
            .query_unpaged(format!("CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {replication}"), &[])
            .await
            .map_err(be)?;
        session.await_schema_agreement().await.map_err(be)?;
        session.use_keyspace(ks.as_str(), false).await.map_err(be)?;
        schema::migrate(&session, cfg.copy_before_upgrade).await?;
        let (c, sc) = match cfg.consistency {
            ConsistencyLevel::One => (Consistency::One, SerialConsistency::LocalSerial),
            ConsistencyLevel::LocalQuorum => (Consistency::LocalQuorum, SerialConsistency::LocalSerial),
            ConsistencyLevel::Quorum => (Consistency::Quorum, SerialConsistency::Serial),
            ConsistencyLevel::EachQuorum => (Consistency::EachQuorum, SerialConsistency::Serial),
            ConsistencyLevel::All => (Consistency::All, SerialConsistency::Serial),
        };
        let s = Stmts::prepare(&session, ks, c, sc).await?;
        let legacy_events = {
            let mut q = s.any_event_legacy.clone();
            // Any replica's answer will do: a row seen or not only decides
            // whether a read looks in the old table too.
            q.set_consistency(Consistency::One);
            let found = match session.execute_unpaged(&q, ()).await {
                Ok(rows) => rows.into_rows_result().map(|r| r.rows_num() > 0).map_err(be),
                Err(e) => Err(be(e)),
            };
            // A scan of an old table full of tombstones may fail: reading
            // both tables is then the safe side.
            found.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cassandra: could not tell whether task_events holds rows; reading it too");
                true
            })
        };
        tracing::info!(keyspace = %ks, consistency = ?c, schema = SCHEMA_VERSION, legacy_events, "cassandra store open");
        Ok(CassandraStore {
            session: Arc::new(session),
            s,
            consistency: c,
            tries: cfg.retries.max(1),
            event_ttl_secs: (cfg.event_ttl_days.max(1) as i32).saturating_mul(86_400),
            keyspace: ks.clone(),
            fence: Arc::default(),
            versions: versions::Versions::default(),
            job_versions: versions::JobVersions::default(),
            past_fence_check: std::sync::atomic::AtomicBool::new(false),
            hold_runtime_writes: fault::hold_file_from_env(),
            legacy_events,
            fence_reads: Arc::default(),
            event_partitions: events::ListedPartitions::default(),
        })
    }

    /// Whether the per-task events table of schemas before 8 is read too.
    pub(super) fn legacy_events(&self) -> bool {
        self.legacy_events
    }

    /// Tests only: from now on this handle's task and job runtime writes skip the
    /// fence read before them, as the writes of a leader paused (SIGSTOP, a
    /// long GC) between that read and sending them, and resumed after a
    /// newer leader claimed. The read after the writes still runs. For the
    /// test that such a late write loses (decision 0049).
    #[doc(hidden)]
    pub fn act_as_paused_past_fence_check(&self, on: bool) {
        self.past_fence_check.store(on, std::sync::atomic::Ordering::Release);
    }

    /// The driver session (tests and benchmarks use it for raw CQL).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The consistency the store's reads and writes use, from its
    /// configuration (for raw CQL that should write as the store does).
    pub fn consistency(&self) -> Consistency {
        self.consistency
    }

    /// A query answered by scanning every job and filtering here, as all
    /// queries were before the index: the benchmark's baseline.
    pub async fn query_jobs_by_scan(&self, query: &JobQuery) -> Result<Page<JobSummary>> {
        jobs::query_by_scan(self, query).await
    }
}

#[async_trait]
impl Store for CassandraStore {
    async fn claim_leadership(&self, epoch: u64) -> Result<()> {
        leader::claim_leadership(self, epoch).await
    }

    fn is_fenced(&self) -> bool {
        self.fence.is_fenced()
    }

    fn backend(&self) -> &'static str {
        "cassandra"
    }

    async fn create_job(&self, id: &str, config: &JobConfig, runtime: &JobRuntime) -> Result<JobRuntime> {
        jobs::create_job(self, id, config, runtime).await
    }

    async fn create_job_with_tasks(
        &self,
        id: &str,
        config: &JobConfig,
        runtime: &JobRuntime,
        tasks: &[(u32, TaskRuntime)],
    ) -> Result<JobRuntime> {
        jobs::create_job_with_tasks(self, id, config, runtime, tasks).await
    }

    async fn remove_interrupted_creates(&self) -> Result<Vec<String>> {
        jobs::remove_interrupted_creates(self).await
    }

    async fn add_job_config(&self, id: &str, version: u64, config: &JobConfig) -> Result<()> {
        jobs::add_job_config(self, id, version, config).await
    }

    async fn get_job_config(&self, id: &str, version: Option<u64>) -> Result<(u64, JobConfig)> {
        jobs::get_job_config(self, id, version).await
    }

    async fn get_job_runtime(&self, id: &str) -> Result<JobRuntime> {
        jobs::get_job_runtime(self, id).await
    }

    async fn cas_job_runtime(&self, id: &str, expected_version: u64, runtime: &JobRuntime) -> Result<JobRuntime> {
        jobs::cas_job_runtime(self, id, expected_version, runtime).await
    }

    async fn query_jobs(&self, query: &JobQuery) -> Result<Page<JobSummary>> {
        jobs::query_jobs(self, query).await
    }

    async fn live_jobs(&self) -> Result<Vec<JobSummary>> {
        jobs::live_jobs(self).await
    }

    async fn delete_job(&self, id: &str) -> Result<()> {
        jobs::delete_job(self, id).await
    }

    async fn create_tasks(&self, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()> {
        tasks::create_tasks(self, job_id, tasks).await
    }

    async fn get_task(&self, job_id: &str, instance: u32) -> Result<TaskRuntime> {
        tasks::get_task(self, job_id, instance).await
    }

    async fn cas_task(
        &self,
        job_id: &str,
        instance: u32,
        expected_version: u64,
        runtime: &TaskRuntime,
    ) -> Result<TaskRuntime> {
        tasks::cas_task(self, job_id, instance, expected_version, runtime).await
    }

    async fn cas_tasks(&self, job_id: &str, writes: &[TaskCas]) -> Result<Vec<Result<u64>>> {
        tasks::cas_tasks(self, job_id, writes).await
    }

    async fn tasks_of_job(&self, job_id: &str, states: &[TaskState]) -> Result<Vec<TaskRecord>> {
        tasks::tasks_of_job(self, job_id, states).await
    }

    async fn append_task_events(&self, job_id: &str, instance: u32, events: &[TaskEvent]) -> Result<()> {
        events::append_task_events(self, job_id, instance, events).await
    }

    async fn append_job_events(&self, job_id: &str, events: &[(u32, TaskEvent)]) -> Result<()> {
        events::append_job_events(self, job_id, events).await
    }

    async fn task_events(&self, job_id: &str, instance: u32, limit: u32) -> Result<Vec<TaskEvent>> {
        events::task_events(self, job_id, instance, limit).await
    }

    async fn create_update(&self, update: &Update) -> Result<Update> {
        updates::create_update(self, update).await
    }

    async fn get_update(&self, id: &str) -> Result<Update> {
        updates::get_update(self, id).await
    }

    async fn cas_update(&self, id: &str, expected_version: u64, update: &Update) -> Result<Update> {
        updates::cas_update(self, id, expected_version, update).await
    }

    async fn updates_of_job(&self, job_id: &str) -> Result<Vec<Update>> {
        updates::updates_of_job(self, job_id).await
    }

    async fn put_update_progress(&self, update_id: &str, progress: &[InstanceProgress]) -> Result<()> {
        updates::put_update_progress(self, update_id, progress).await
    }

    async fn update_progress(&self, update_id: &str) -> Result<Vec<InstanceProgress>> {
        updates::update_progress(self, update_id).await
    }

    async fn put_pool(&self, path: &str, spec: &[u8]) -> Result<()> {
        inventory::put_pool(self, path, spec).await
    }

    async fn get_pool(&self, path: &str) -> Result<Vec<u8>> {
        inventory::get_pool(self, path).await
    }

    async fn list_pools(&self) -> Result<Vec<(String, Vec<u8>)>> {
        inventory::list_pools(self).await
    }

    async fn delete_pool(&self, path: &str) -> Result<()> {
        inventory::delete_pool(self, path).await
    }

    async fn put_plugin_version(&self, version: &PluginVersion, bytes: &[u8]) -> Result<()> {
        plugins::put_plugin_version(self, version, bytes).await
    }

    async fn set_plugin_state(&self, slot: &str, name: &str, version: &str, state: &str) -> Result<()> {
        plugins::set_plugin_state(self, slot, name, version, state).await
    }

    async fn plugin_versions(&self, slot: Option<&str>) -> Result<Vec<PluginVersion>> {
        plugins::plugin_versions(self, slot).await
    }

    async fn plugin_bytes(&self, slot: &str, name: &str, version: &str) -> Result<Vec<u8>> {
        plugins::plugin_bytes(self, slot, name, version).await
    }

    async fn set_slot_history(&self, slot: &str, history: &[String]) -> Result<()> {
        plugins::set_slot_history(self, slot, history).await
    }

    async fn slot_histories(&self) -> Result<BTreeMap<String, Vec<String>>> {
        plugins::slot_histories(self).await
    }

    async fn put_host(&self, host: &HostRecord) -> Result<()> {
        inventory::put_host(self, host).await
    }

    async fn get_host(&self, hostname: &str) -> Result<HostRecord> {
        inventory::get_host(self, hostname).await
    }

    async fn list_hosts(&self) -> Result<Vec<HostRecord>> {
        inventory::list_hosts(self).await
    }

    async fn delete_host(&self, hostname: &str) -> Result<()> {
        inventory::delete_host(self, hostname).await
    }

    async fn put_provider_id(&self, provider: &str, id: &str) -> Result<()> {
        inventory::put_provider_id(self, provider, id).await
    }

    async fn get_provider_id(&self, provider: &str) -> Result<Option<String>> {
        inventory::get_provider_id(self, provider).await
    }

    async fn record_job_events(&self, events: &[paceline_model::event::JobEvent]) -> Result<()> {
        job_events::record_job_events(self, events).await
    }

    async fn job_events(
        &self,
        job_id: &str,
        instance: Option<u32>,
        limit: u32,
    ) -> Result<Vec<paceline_model::event::JobEvent>> {
        job_events::job_events(self, job_id, instance, limit).await
    }

    async fn append_audit(&self, records: &[crate::AuditRecord]) -> Result<()> {
        audit::append(self, records).await
    }

    async fn query_audit(&self, query: &crate::AuditQuery) -> Result<Vec<crate::AuditRecord>> {
        audit::query(self, query).await
    }

    async fn prune_audit(&self, before_ms: u64, max_rows: u64) -> Result<u64> {
        audit::prune(self, before_ms, max_rows).await
    }
    async fn put_secret(&self, secret: &SealedSecret) -> Result<()> {
        secrets::put(self, secret).await
    }

    async fn get_secret(&self, pool: &str, name: &str) -> Result<SealedSecret> {
        secrets::get(self, pool, name).await
    }

    async fn list_secrets(&self, pool: &str) -> Result<Vec<SealedSecret>> {
        secrets::list(self, pool).await
    }

    async fn delete_secret(&self, pool: &str, name: &str) -> Result<()> {
        secrets::delete(self, pool, name).await
    }
}
