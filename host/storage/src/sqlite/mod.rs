//! The embedded backend: one SQLite file in WAL mode.
//!
//! Writes go through one writer thread with group commit (`writer`);
//! reads use a small pool of read-only connections on tokio's blocking
//! threads, so they never wait for a write. `synchronous = FULL` makes a
//! commit durable before any caller is answered.
//!
//! # Layout
//! - `mod.rs`: [`SqliteStore`]: opening the file, the read pool, and the
//!   [`Store`] impl, which hands each method to the module that owns its
//!   tables.
//! - `schema`: tables and migrations; `writer`: the writer thread.
//! - `leader`: claiming a leader epoch (the writer checks it).
//! - `jobs`, `tasks`, `events`, `updates`: a job and what hangs off it.
//! - `plugins`: plugin versions and slot histories.
//! - `inventory`: pools, hosts, provider ids.
//! - `job_events`: job events, folded and retained (decision 0025).

mod audit;
mod events;
mod inventory;
mod job_events;
mod jobs;
mod leader;
mod plugins;
mod schema;
mod secrets;
mod tasks;
mod updates;
mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use paceline_model::host::HostRecord;
use paceline_model::job::{InstanceProgress, JobConfig, JobRuntime, Update};
use paceline_model::task::{TaskEvent, TaskRuntime, TaskState};
use rusqlite::{Connection, OpenFlags};

pub use schema::SCHEMA_VERSION;

use crate::error::{Result, StoreError};
use crate::secrets::SealedSecret;
use crate::store::Store;
use crate::types::{JobQuery, JobSummary, Page, PluginVersion, TaskCas, TaskRecord};
use writer::Writer;

/// Most idle read connections kept open.
const MAX_IDLE_READERS: usize = 4;

fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// The SQLite store. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    writer: Writer,
    readers: Arc<Mutex<Vec<Connection>>>,
    /// Events appended per task since its history was last trimmed, by job
    /// (touched only on the writer thread). See `append_job_events`.
    trims: Arc<Mutex<events::TrimCounts>>,
    /// Leader fencing (checked by the writer inside each group's transaction).
    fence: Arc<crate::fence::Fence>,
}

impl SqliteStore {
    /// Opens (creating) the database at `path`, migrates it, and starts the
    /// writer. A database of a newer schema is refused unchanged.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            private_dir(dir).map_err(|e| StoreError::Backend(format!("{}: {e}", dir.display())))?;
        }
        private_file(&path).map_err(|e| StoreError::Backend(format!("{}: {e}", path.display())))?;
        let mut conn = Connection::open(&path).map_err(|e| StoreError::Backend(format!("{}: {e}", path.display())))?;
        // Refuse a newer schema before changing anything, even the journal mode.
        let found = schema::current_version(&conn)?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew { backend: "sqlite", found, supported: SCHEMA_VERSION });
        }
        conn.busy_timeout(Duration::from_secs(10)).map_err(db)?;
        if found > 0 && found < SCHEMA_VERSION {
            backup_before_upgrade(&conn, &path, found)?;
        }
        // WAL: readers never block the writer; FULL: a commit is on disk
        // before it returns (NORMAL could lose the last commits on power loss).
        conn.pragma_update(None, "journal_mode", "WAL").map_err(db)?;
        conn.pragma_update(None, "synchronous", "FULL").map_err(db)?;
        conn.pragma_update(None, "foreign_keys", "OFF").map_err(db)?;
        // 16 MiB page cache: a 10,000-task job's rows (~5 MB) stay in memory
        // between rounds of updates (the 2 MiB default re-reads them). 64 MiB
        // was no faster, neither for `bench storage` nor for a million tasks
        // through `bench server`, and cost 50 MiB of the server's peak RSS
        // (docs/benchmarks.md, 2026-11-27).
        conn.pragma_update(None, "cache_size", -16_384).map_err(db)?;
        schema::migrate(&mut conn)?;
        tracing::info!(path = %path.display(), schema = SCHEMA_VERSION, "sqlite store open");
        let fence = Arc::new(crate::fence::Fence::default());
        let writer = Writer::start(conn, fence.clone())?;
        Ok(SqliteStore { path, writer, readers: Arc::new(Mutex::new(Vec::new())), trims: Arc::default(), fence })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A copy of the database as of one moment, opened as a store of its
    /// own: `VACUUM INTO` runs in one read transaction, so the copy holds
    /// exactly what was committed when it began, and writers go on
    /// meanwhile (WAL). The copy lies beside the database and is removed
    /// when the view is dropped.
    async fn copy_for_snapshot(&self) -> Result<crate::snapshot::ConsistentView> {
        let copy = crate::snapshot::sibling(
            &self.path,
            &format!(".snapshot-{}-{}", std::process::id(), crate::types::now_ms()),
        );
        let cleanup: Vec<PathBuf> = ["", "-wal", "-shm"].iter().map(|s| crate::snapshot::sibling(&copy, s)).collect();
        for p in &cleanup {
            let _ = std::fs::remove_file(p);
        }
        let target = copy.to_string_lossy().into_owned();
        // Private like the database (VACUUM INTO fills an empty file).
        private_file(&copy).map_err(|e| StoreError::Backend(format!("{}: {e}", copy.display())))?;
        let made = self
            .read(move |conn| {
                conn.execute("VACUUM INTO ?1", [target])
                    .map_err(|e| StoreError::Backend(format!("copying for a snapshot: {e}")))
            })
            .await;
        let opened = made.and_then(|_| SqliteStore::open(&copy));
        match opened {
            Ok(store) => Ok(crate::snapshot::ConsistentView { store: Arc::new(store), cleanup }),
            Err(e) => {
                for p in &cleanup {
                    let _ = std::fs::remove_file(p);
                }
                Err(e)
            }
        }
    }

    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.writer.write(f).await
    }

    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let readers = self.readers.clone();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let conn = match readers.lock().ok().and_then(|mut r| r.pop()) {
                Some(c) => c,
                None => {
                    let c = Connection::open_with_flags(
                        &path,
                        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                    )
                    .map_err(db)?;
                    c.busy_timeout(Duration::from_secs(10)).map_err(db)?;
                    c.pragma_update(None, "cache_size", -16_384).map_err(db)?;
                    c
                }
            };
            let result = f(&conn);
            if let Ok(mut r) = readers.lock()
                && r.len() < MAX_IDLE_READERS
            {
                r.push(conn);
            }
            result
        })
        .await
        .map_err(|e| StoreError::Backend(format!("sqlite read task failed: {e}")))?
    }
}

/// Creates `dir` (and missing parents) readable by its owner only (0700 on
/// Unix). A directory that already exists is left as it is: whoever made it
/// chose its mode.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Creates the database file, empty, readable and writable by its owner
/// only (0600 on Unix), unless it exists. SQLite creates a database's `-wal`
/// and `-shm` files with the database file's mode, so they are 0600 too;
/// left to SQLite, all three would be 0644 (less the umask), readable by
/// every local user — and the store holds every job's spec and environment.
/// An existing file keeps its mode, with a warning when others may read it.
pub(crate) fn private_file(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(path)?.permissions().mode();
                if mode & 0o077 != 0 {
                    tracing::warn!(
                        path = %path.display(),
                        mode = format!("{:o}", mode & 0o777),
                        "the database file may be read by other users; `chmod 600` it (and its -wal, -shm)"
                    );
                }
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Copies a database of an older schema beside itself before it is
/// migrated (`PATH.pre-upgrade-vN-MS`), so that an upgrade can be undone by
/// putting the copy back and running the older Paceline. A copy of the file
/// and not a snapshot: only the older build reads the older schema, and it
/// is the one that needs the copy. If the copy fails nothing is migrated.
fn backup_before_upgrade(conn: &Connection, path: &Path, found: u32) -> Result<PathBuf> {
    let copy = crate::snapshot::sibling(path, &format!(".pre-upgrade-v{found}-{}", crate::types::now_ms()));
    // Private like the database (VACUUM INTO fills an empty file).
    private_file(&copy).map_err(|e| StoreError::Backend(format!("{}: {e}", copy.display())))?;
    conn.execute("VACUUM INTO ?1", [copy.to_string_lossy().as_ref()]).map_err(|e| {
        let _ = std::fs::remove_file(&copy);
        StoreError::Backend(format!(
            "{}: cannot copy the database (schema {found}) before upgrading it to schema {SCHEMA_VERSION}: {e}; nothing was changed",
            path.display()
        ))
    })?;
    tracing::info!(from = found, to = SCHEMA_VERSION, backup = %copy.display(), "sqlite store copied before its schema upgrade");
    Ok(copy)
}

fn task_what(job_id: &str, instance: u32) -> String {
    format!("task {job_id}/{instance}")
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn claim_leadership(&self, epoch: u64) -> Result<()> {
        leader::claim_leadership(self, epoch).await
    }

    fn is_fenced(&self) -> bool {
        self.fence.is_fenced()
    }

    async fn consistent_view(&self) -> Result<Option<crate::snapshot::ConsistentView>> {
        self.copy_for_snapshot().await.map(Some)
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

    async fn cas_tasks_with_events(
        &self,
        job_id: &str,
        writes: &[TaskCas],
        events: &[(u32, TaskEvent)],
    ) -> Result<Vec<Result<u64>>> {
        tasks::cas_tasks_with_events(self, job_id, writes, events).await
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
