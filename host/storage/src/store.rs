//! The [`Store`] trait: everything Paceline persists, in domain terms.
//!
//! Versions: a job or task runtime, or an update, is created at version 1;
//! each compare-and-set names the version it read and writes version + 1,
//! or fails with [`StoreError::Conflict`] and writes nothing. The check
//! happens in the database (SQLite `UPDATE … WHERE version = ?`, Cassandra
//! `IF version = ?`), never only in memory.

use std::collections::BTreeMap;

use async_trait::async_trait;
use paceline_model::event::JobEvent;
use paceline_model::host::HostRecord;
use paceline_model::job::{InstanceProgress, JobConfig, JobRuntime, Update};
use paceline_model::task::{TaskEvent, TaskRuntime, TaskSpec, TaskState};

use crate::audit::{AuditQuery, AuditRecord};
use crate::error::{Result, StoreError};
use crate::secrets::SealedSecret;
use crate::types::{JobQuery, JobSummary, Page, PluginVersion, TaskCas, TaskRecord};

/// Domain-level storage. Every method returns only after the change is
/// durable (SQLite: committed and fsynced; Cassandra: acknowledged at the
/// configured consistency). Implementations: [`crate::sqlite::SqliteStore`],
/// [`crate::cassandra::CassandraStore`].
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// `sqlite` or `cassandra`.
    fn backend(&self) -> &'static str;

    // ---- leader fencing ------------------------------------------------------

    /// Makes this handle the leader's: records `epoch` as the store's leader
    /// epoch, unless a larger one is recorded already ([`StoreError::Fenced`]).
    /// From then on every write of this handle first checks the recorded
    /// epoch and fails with [`StoreError::Fenced`], writing nothing, once
    /// another handle has claimed a larger one. Epochs come from the
    /// membership (each gain of leadership has a larger one); claiming the
    /// same epoch again is allowed. A handle that never claims is never
    /// fenced (one server without an election). How atomic the check is
    /// depends on the backend: see docs/storage.md, "Leader fencing".
    async fn claim_leadership(&self, epoch: u64) -> Result<()>;

    /// True once a larger epoch has fenced this handle (sticky).
    fn is_fenced(&self) -> bool;

    // ---- snapshots (decision 0030) -------------------------------------------

    /// A read-only view of the whole store as of one moment, for
    /// [`crate::snapshot::export`], or `None` when the backend has none
    /// (Cassandra: no cross-partition read view exists; the export then
    /// reads record by record). SQLite copies the database in one read
    /// transaction (`VACUUM INTO` a file beside it, removed when the view
    /// is dropped): writers are not blocked, and the copy needs as much
    /// free disk as the database.
    async fn consistent_view(&self) -> Result<Option<crate::snapshot::ConsistentView>> {
        Ok(None)
    }

    /// Holds back every write made through this handle until the returned
    /// pause is dropped (writes in flight finish first), or `None` when the
    /// handle cannot. For a snapshot of one moment on a backend without a
    /// [`Store::consistent_view`]: the server's handle
    /// ([`crate::metered::MeteredStore`]) can; the backends alone
    /// cannot (another handle's writes would pass anyway).
    async fn pause_writes(&self) -> Option<crate::snapshot::WritePause> {
        None
    }

    // ---- jobs --------------------------------------------------------------

    /// Creates a job: config version 1 and the runtime at version 1
    /// (`runtime.version` is ignored). [`StoreError::AlreadyExists`] if the
    /// id is taken. Returns the stored runtime.
    async fn create_job(&self, id: &str, config: &JobConfig, runtime: &JobRuntime) -> Result<JobRuntime>;

    /// Creates a job with its first tasks, all or nothing: config version 1,
    /// the runtime at version 1 and each task runtime at version 1. A crash
    /// part way leaves no job that a read can see: SQLite writes everything
    /// in one transaction; Cassandra claims the id in a state no read
    /// returns, writes the rest, then makes the job visible, and
    /// [`Store::remove_interrupted_creates`] removes what a crash left
    /// behind. [`StoreError::AlreadyExists`] if the id is taken.
    async fn create_job_with_tasks(
        &self,
        id: &str,
        config: &JobConfig,
        runtime: &JobRuntime,
        tasks: &[(u32, TaskRuntime)],
    ) -> Result<JobRuntime>;

    /// Removes jobs whose [`Store::create_job_with_tasks`] a crash cut
    /// short, with everything written for them, and returns their ids.
    /// Called by the leader before it recovers (nothing else creates jobs
    /// then). Backends whose create is one transaction have nothing to do.
    async fn remove_interrupted_creates(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// Adds config version `version` to a job; it must be the latest + 1
    /// ([`StoreError::Conflict`] otherwise). The runtime is not touched.
    async fn add_job_config(&self, id: &str, version: u64, config: &JobConfig) -> Result<()>;

    /// A config version of a job, or the latest with `None`. Returns
    /// `(version, config)`.
    async fn get_job_config(&self, id: &str, version: Option<u64>) -> Result<(u64, JobConfig)>;

    /// The job's runtime.
    async fn get_job_runtime(&self, id: &str) -> Result<JobRuntime>;

    /// Compare-and-set of the job runtime. Returns it at `expected_version + 1`.
    async fn cas_job_runtime(&self, id: &str, expected_version: u64, runtime: &JobRuntime) -> Result<JobRuntime>;

    /// Jobs matching `query`, one page at a time.
    async fn query_jobs(&self, query: &JobQuery) -> Result<Page<JobSummary>>;

    /// Every job not in a terminal state, for recovery after a restart.
    async fn live_jobs(&self) -> Result<Vec<JobSummary>>;

    /// Deletes a job with its configs, tasks and task events.
    async fn delete_job(&self, id: &str) -> Result<()>;

    // ---- tasks -------------------------------------------------------------

    /// Creates task runtimes of an existing job in one batch, each at
    /// version 1. [`StoreError::AlreadyExists`] if any instance exists.
    /// SQLite writes all or nothing; Cassandra writes in partition-sized
    /// batches, and a retry of the same call is safe.
    async fn create_tasks(&self, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()>;

    /// One task's runtime.
    async fn get_task(&self, job_id: &str, instance: u32) -> Result<TaskRuntime>;

    /// Compare-and-set of one task runtime. Returns it at `expected_version + 1`.
    async fn cas_task(
        &self,
        job_id: &str,
        instance: u32,
        expected_version: u64,
        runtime: &TaskRuntime,
    ) -> Result<TaskRuntime>;

    /// Many compare-and-sets at once (SQLite: one transaction, one fsync;
    /// Cassandra: concurrent conditional writes). Each item succeeds or fails
    /// on its own: the outer error is for the whole call (bad input, database
    /// down), the inner one per item (conflict, not found).
    async fn cas_tasks(&self, job_id: &str, writes: &[TaskCas]) -> Result<Vec<Result<u64>>>;

    /// Task runtimes of a job whose state is in `states` (all with an empty
    /// slice), ordered by instance.
    async fn tasks_of_job(&self, job_id: &str, states: &[TaskState]) -> Result<Vec<TaskRecord>>;

    /// The spec instance `instance` runs at config version `config_version`:
    /// task configs are stored per job version (default spec plus
    /// per-instance overrides), not copied per instance.
    async fn task_spec(&self, job_id: &str, config_version: u64, instance: u32) -> Result<TaskSpec> {
        let (_, config) = self.get_job_config(job_id, Some(config_version)).await?;
        Ok(config.task_spec(instance).clone())
    }

    // ---- task events -------------------------------------------------------

    /// Appends state-change events of a task. An event equal in (run, to,
    /// at_ms) to a stored one replaces it, so retries do not duplicate.
    /// At most [`crate::limits::MAX_EVENTS_PER_TASK`] are returned per task;
    /// a backend may keep a few more between trims (SQLite trims every 25).
    async fn append_task_events(&self, job_id: &str, instance: u32, events: &[TaskEvent]) -> Result<()>;

    /// Appends events of many tasks of one job, as (instance, event), with
    /// the rules of [`Store::append_task_events`]. Backends that can write
    /// them as one operation should: a placement round or a burst of run
    /// updates produces thousands at once.
    async fn append_job_events(&self, job_id: &str, events: &[(u32, TaskEvent)]) -> Result<()> {
        for (instance, event) in events {
            self.append_task_events(job_id, *instance, std::slice::from_ref(event)).await?;
        }
        Ok(())
    }

    /// Compare-and-sets of one job's task runtimes with the events that go
    /// with them, as one write where the backend can (SQLite: one
    /// transaction, so a task's state and its history are stored together or
    /// not at all). An event is stored when its instance has no write in
    /// `writes` or that write won ([`crate::types::lost_instances`]);
    /// results are those of [`Store::cas_tasks`]. The default makes the two calls
    /// one after the other: an error storing the events is returned though
    /// the runtimes were written.
    async fn cas_tasks_with_events(
        &self,
        job_id: &str,
        writes: &[TaskCas],
        events: &[(u32, TaskEvent)],
    ) -> Result<Vec<Result<u64>>> {
        let results = self.cas_tasks(job_id, writes).await?;
        let lost = crate::types::lost_instances(writes, &results);
        if lost.is_empty() {
            self.append_job_events(job_id, events).await?;
        } else {
            let kept: Vec<(u32, TaskEvent)> = events.iter().filter(|(i, _)| !lost.contains(i)).cloned().collect();
            self.append_job_events(job_id, &kept).await?;
        }
        Ok(results)
    }

    /// A task's events, newest first, at most `limit`.
    async fn task_events(&self, job_id: &str, instance: u32, limit: u32) -> Result<Vec<TaskEvent>>;

    // ---- updates -----------------------------------------------------------

    /// Creates an update workflow at version 1.
    async fn create_update(&self, update: &Update) -> Result<Update>;

    /// One update.
    async fn get_update(&self, id: &str) -> Result<Update>;

    /// Compare-and-set of an update. Returns it at `expected_version + 1`.
    async fn cas_update(&self, id: &str, expected_version: u64, update: &Update) -> Result<Update>;

    /// Updates of a job, oldest first.
    async fn updates_of_job(&self, job_id: &str) -> Result<Vec<Update>>;

    /// Writes per-instance progress of an update (upsert by instance).
    async fn put_update_progress(&self, update_id: &str, progress: &[InstanceProgress]) -> Result<()>;

    /// Per-instance progress of an update, ordered by instance.
    async fn update_progress(&self, update_id: &str) -> Result<Vec<InstanceProgress>>;

    // ---- pools (opaque: the resource manager owns the type) -----------------

    /// Writes a pool's serialized spec under its path.
    async fn put_pool(&self, path: &str, spec: &[u8]) -> Result<()>;

    /// A pool's serialized spec.
    async fn get_pool(&self, path: &str) -> Result<Vec<u8>>;

    /// Every pool, ordered by path.
    async fn list_pools(&self) -> Result<Vec<(String, Vec<u8>)>>;

    /// Deletes a pool (no error if absent).
    async fn delete_pool(&self, path: &str) -> Result<()>;

    // ---- plugins -----------------------------------------------------------

    /// Stores a new plugin version with its component bytes.
    /// [`StoreError::AlreadyExists`] if (slot, name, version) exists;
    /// [`StoreError::Invalid`] if `sha256` or `size` do not match the bytes.
    async fn put_plugin_version(&self, version: &PluginVersion, bytes: &[u8]) -> Result<()>;

    /// Changes a version's state.
    async fn set_plugin_state(&self, slot: &str, name: &str, version: &str, state: &str) -> Result<()>;

    /// Versions in `slot` (every slot with `None`), by slot then deploy time.
    async fn plugin_versions(&self, slot: Option<&str>) -> Result<Vec<PluginVersion>>;

    /// A version's component bytes.
    async fn plugin_bytes(&self, slot: &str, name: &str, version: &str) -> Result<Vec<u8>>;

    /// Replaces a slot's activation history (`name@version` ids, oldest
    /// first); the last one is the active version.
    async fn set_slot_history(&self, slot: &str, history: &[String]) -> Result<()>;

    /// Every slot's activation history.
    async fn slot_histories(&self) -> Result<BTreeMap<String, Vec<String>>>;

    /// The active version id of a slot, if any.
    async fn active_plugin(&self, slot: &str) -> Result<Option<String>> {
        Ok(self.slot_histories().await?.remove(slot).and_then(|mut h| h.pop()))
    }

    /// Makes `id` (`name@version`, which must be stored) the active version
    /// of `slot`, appending it to the slot's history.
    async fn set_active_plugin(&self, slot: &str, id: &str) -> Result<()> {
        let (name, version) =
            id.split_once('@').ok_or_else(|| StoreError::Invalid(format!("plugin id `{id}` is not name@version")))?;
        if !self.plugin_versions(Some(slot)).await?.iter().any(|v| v.name == name && v.version == version) {
            return Err(StoreError::not_found("plugin version", format!("{slot}/{id}")));
        }
        let mut history = self.slot_histories().await?.remove(slot).unwrap_or_default();
        history.push(id.to_string());
        self.set_slot_history(slot, &history).await
    }

    // ---- hosts -------------------------------------------------------------

    /// Writes a host's inventory record (upsert by hostname).
    async fn put_host(&self, host: &HostRecord) -> Result<()>;

    /// One host.
    async fn get_host(&self, hostname: &str) -> Result<HostRecord>;

    /// Every host, ordered by hostname.
    async fn list_hosts(&self) -> Result<Vec<HostRecord>>;

    /// Removes a host (no error if absent).
    async fn delete_host(&self, hostname: &str) -> Result<()>;

    // ---- provider ids ------------------------------------------------------

    /// Records an id a provider gave us (e.g. `mesos` → framework id).
    async fn put_provider_id(&self, provider: &str, id: &str) -> Result<()>;

    /// The id recorded for `provider`, if any.
    async fn get_provider_id(&self, provider: &str) -> Result<Option<String>>;

    // ---- job events (decision 0025) ----------------------------------------

    /// Records events of jobs and tasks, folding each into the stored event
    /// of the same identity (job, instance, reason, message): counts add up,
    /// first seen is the earliest and last seen the latest of both. The
    /// batch is checked whole first (ids, instance, message size, count ≥ 1);
    /// a bad event fails it and nothing is written. Events may name a job
    /// that does not exist (yet, or any more). Each job keeps at most
    /// [`crate::limits::MAX_EVENTS_PER_JOB`] events, the most recently seen,
    /// and none last seen more than [`crate::limits::MAX_JOB_EVENT_AGE_MS`]
    /// before its newest; a backend may trim later than it writes, but reads
    /// never show more. Folding is atomic in SQLite and memory; in Cassandra
    /// it reads the job's events and writes the sums, which is exact with
    /// one writer (the fenced leader) and may lose a count between two.
    async fn record_job_events(&self, events: &[JobEvent]) -> Result<()>;

    /// A job's events, most recently seen first, at most `limit`: all of
    /// them (the job's own and its tasks') with `instance` `None`, or only
    /// those of one task.
    async fn job_events(&self, job_id: &str, instance: Option<u32>, limit: u32) -> Result<Vec<JobEvent>>;

    // ---- audit log -----------------------------------------------------------

    /// Appends audit records in one write (SQLite: one transaction; Cassandra:
    /// batches by day partition). A record whose id is stored already is
    /// stored once. The batch is checked whole first ([`StoreError::Invalid`]).
    async fn append_audit(&self, records: &[AuditRecord]) -> Result<()>;

    /// Audit records matching `query`, newest first, at most its limit.
    async fn query_audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>>;

    /// Bounds the audit log: removes records older than `before_ms`, then
    /// the oldest beyond the newest `max_rows`. Returns how many went (a
    /// backend that cannot count deletions, Cassandra, returns an estimate).
    /// Cheap enough to run every few minutes; not meant per call.
    async fn prune_audit(&self, before_ms: u64, max_rows: u64) -> Result<u64>;

    // ---- task secrets (decision 0032): sealed records only ----

    /// Creates or replaces the secret `(secret.pool, secret.name)`, whole.
    async fn put_secret(&self, secret: &SealedSecret) -> Result<()>;

    /// One secret ([`StoreError::NotFound`] when absent).
    async fn get_secret(&self, pool: &str, name: &str) -> Result<SealedSecret>;

    /// The secrets of `pool`, by name.
    async fn list_secrets(&self, pool: &str) -> Result<Vec<SealedSecret>>;

    /// Removes a secret; absent is not an error.
    async fn delete_secret(&self, pool: &str, name: &str) -> Result<()>;
}
