//! The embedded backend: one SQLite file in WAL mode.
//!
//! Writes go through one writer thread with group commit ([`writer`]);
//! reads use a small pool of read-only connections on tokio's blocking
//! threads, so they never wait for a write. `synchronous = FULL` makes a
//! commit durable before any caller is answered.

mod schema;
mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use paceline_model::host::HostRecord;
use paceline_model::job::{InstanceProgress, JobConfig, JobRuntime, Update};
use paceline_model::task::{TaskEvent, TaskRuntime, TaskState};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

pub use schema::SCHEMA_VERSION;

use crate::error::{Result, StoreError};
use crate::store::Store;
use crate::types::{
    JobQuery, JobSummary, NewJob, Page, PluginVersion, SummaryRow, TaskCas, TaskRecord, check_id, check_page, decode,
    encode, encode_config, limits, new_job, to_summary,
};
use crate::validate;
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
    trims: Arc<Mutex<TrimCounts>>,
    /// Leader fencing (checked by the writer inside each group's transaction).
    fence: Arc<crate::fence::Fence>,
}

/// Job id → instance → events appended since the last trim.
type TrimCounts = std::collections::HashMap<String, std::collections::HashMap<u32, usize>>;

/// A task's history is trimmed back to [`limits::MAX_EVENTS_PER_TASK`] once
/// this many events were appended to it since the last trim (and on its
/// first append after the store opened, when the count is unknown). Trimming
/// on every append was one DELETE per task per write, most of them finding
/// nothing to delete: a task lives through about seven events. Reads never
/// return more than the bound, so the slack is invisible.
const TRIM_EVERY: usize = 25;

impl SqliteStore {
    /// Opens (creating) the database at `path`, migrates it, and starts the
    /// writer. A database of a newer schema is refused unchanged.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Backend(format!("{}: {e}", dir.display())))?;
        }
        let mut conn = Connection::open(&path).map_err(|e| StoreError::Backend(format!("{}: {e}", path.display())))?;
        // Refuse a newer schema before changing anything, even the journal mode.
        let found = schema::current_version(&conn)?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew { backend: "sqlite", found, supported: SCHEMA_VERSION });
        }
        conn.busy_timeout(Duration::from_secs(10)).map_err(db)?;
        // WAL: readers never block the writer; FULL: a commit is on disk
        // before it returns (NORMAL could lose the last commits on power loss).
        conn.pragma_update(None, "journal_mode", "WAL").map_err(db)?;
        conn.pragma_update(None, "synchronous", "FULL").map_err(db)?;
        conn.pragma_update(None, "foreign_keys", "OFF").map_err(db)?;
        // 64 MiB page cache: a 10,000-task job's rows (~5 MB) stay in memory
        // between rounds of updates (the 2 MiB default re-reads them).
        conn.pragma_update(None, "cache_size", -65_536).map_err(db)?;
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

fn task_what(job_id: &str, instance: u32) -> String {
    format!("task {job_id}/{instance}")
}

fn summary_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SummaryRow> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
    ))
}

const SUMMARY_COLS: &str = "job_id, name, owner, pool, kind, labels, instance_count, latest_config_version, runtime";

fn job_exists(conn: &Connection, id: &str) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM jobs WHERE job_id = ?1").and_then(|mut s| s.exists(params![id])).map_err(db)
}

fn write_summary_columns(conn: &Connection, id: &str, config: &JobConfig, version: u64) -> Result<()> {
    let labels = encode(|| format!("labels of job {id}"), &config.labels, limits::MAX_RECORD)?;
    conn.execute(
        "UPDATE jobs SET name = ?2, owner = ?3, pool = ?4, kind = ?5, labels = ?6, instance_count = ?7,
         latest_config_version = ?8 WHERE job_id = ?1",
        params![
            id,
            config.name,
            config.owner,
            config.pool,
            config.kind.as_str(),
            labels,
            config.instance_count,
            version
        ],
    )
    .map_err(db)?;
    conn.execute("DELETE FROM job_labels WHERE job_id = ?1", params![id]).map_err(db)?;
    let mut ins = conn.prepare_cached("INSERT INTO job_labels (job_id, key, value) VALUES (?1, ?2, ?3)").map_err(db)?;
    for (k, v) in &config.labels {
        ins.execute(params![id, k, v]).map_err(db)?;
    }
    Ok(())
}

/// A task compare-and-set prepared outside the writer thread (encoding is
/// the expensive part; the writer only runs SQL).
struct PreparedCas {
    instance: u32,
    expected: u64,
    state: &'static str,
    body: String,
}

fn prepare_cas(
    job_id: &str,
    instance: u32,
    expected: u64,
    runtime: &TaskRuntime,
) -> Result<(PreparedCas, TaskRuntime)> {
    runtime.validate()?;
    let mut stored = runtime.clone();
    stored.version = expected + 1;
    let body = encode(|| task_what(job_id, instance), &stored, limits::MAX_RECORD)?;
    Ok((PreparedCas { instance, expected, state: stored.state.as_str(), body }, stored))
}

fn cas_task_in(conn: &Connection, job_id: &str, c: &PreparedCas) -> Result<u64> {
    let n = conn
        .prepare_cached(
            "UPDATE tasks SET state = ?4, version = ?5, runtime = ?6
             WHERE job_id = ?1 AND instance = ?2 AND version = ?3",
        )
        .and_then(|mut s| s.execute(params![job_id, c.instance, c.expected, c.state, c.expected + 1, c.body]))
        .map_err(db)?;
    if n == 1 {
        return Ok(c.expected + 1);
    }
    let found: Option<u64> = conn
        .prepare_cached("SELECT version FROM tasks WHERE job_id = ?1 AND instance = ?2")
        .and_then(|mut s| s.query_row(params![job_id, c.instance], |r| r.get(0)).optional())
        .map_err(db)?;
    match found {
        None => Err(StoreError::not_found("task", format!("{job_id}/{}", c.instance))),
        Some(v) => Err(StoreError::conflict(task_what(job_id, c.instance), c.expected, Some(v))),
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn claim_leadership(&self, epoch: u64) -> Result<()> {
        if epoch == 0 {
            return Err(StoreError::Invalid("leader epoch 0: epochs start at 1".into()));
        }
        let recorded = self
            .write(move |conn| {
                // Raise the recorded epoch unless a larger one is there; the
                // writer's transaction holds the database's write lock.
                conn.prepare_cached(
                    "INSERT INTO leader_fence (id, epoch) VALUES (1, ?1)
                     ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch WHERE excluded.epoch > leader_fence.epoch",
                )
                .and_then(|mut s| s.execute(params![epoch]))
                .map_err(db)?;
                writer::recorded_epoch(conn).map_err(db)
            })
            .await?;
        if recorded > epoch {
            return Err(StoreError::Fenced { mine: epoch, current: recorded });
        }
        self.fence.set_claimed(epoch);
        tracing::info!(epoch, "sqlite: leader epoch claimed; writes are fenced against older leaders");
        Ok(())
    }

    fn is_fenced(&self) -> bool {
        self.fence.is_fenced()
    }

    async fn create_job(&self, id: &str, config: &JobConfig, runtime: &JobRuntime) -> Result<JobRuntime> {
        let NewJob { config: body, runtime: rt, runtime_body: rt_body, labels } = new_job(id, config, runtime)?;
        let (id, config, out) = (id.to_string(), config.clone(), rt.clone());
        self.write(move |conn| {
            if job_exists(conn, &id)? {
                return Err(StoreError::exists("job", &id));
            }
            conn.execute(
                "INSERT INTO jobs (job_id, name, owner, pool, kind, labels, instance_count, latest_config_version,
                 state, version, runtime) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8, 1, ?9)",
                params![
                    id,
                    config.name,
                    config.owner,
                    config.pool,
                    config.kind.as_str(),
                    labels,
                    config.instance_count,
                    rt.state.as_str(),
                    rt_body
                ],
            )
            .map_err(db)?;
            conn.execute("INSERT INTO job_configs (job_id, version, config) VALUES (?1, 1, ?2)", params![id, body])
                .map_err(db)?;
            write_summary_columns(conn, &id, &config, 1)
        })
        .await?;
        Ok(out)
    }

    async fn add_job_config(&self, id: &str, version: u64, config: &JobConfig) -> Result<()> {
        let body = encode_config(id, config)?;
        let (id, config) = (id.to_string(), config.clone());
        self.write(move |conn| {
            let latest: Option<u64> = conn
                .query_row("SELECT latest_config_version FROM jobs WHERE job_id = ?1", params![id], |r| r.get(0))
                .optional()
                .map_err(db)?;
            let latest = latest.ok_or_else(|| StoreError::not_found("job", &id))?;
            if version != latest + 1 {
                return Err(StoreError::conflict(
                    format!("config of job {id}"),
                    version.saturating_sub(1),
                    Some(latest),
                ));
            }
            conn.execute(
                "INSERT INTO job_configs (job_id, version, config) VALUES (?1, ?2, ?3)",
                params![id, version, body],
            )
            .map_err(db)?;
            write_summary_columns(conn, &id, &config, version)
        })
        .await
    }

    async fn get_job_config(&self, id: &str, version: Option<u64>) -> Result<(u64, JobConfig)> {
        let id = id.to_string();
        self.read(move |conn| {
            let row: Option<(u64, String)> = match version {
                Some(v) => conn
                    .query_row(
                        "SELECT version, config FROM job_configs WHERE job_id = ?1 AND version = ?2",
                        params![id, v],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional(),
                None => conn
                    .query_row(
                        "SELECT version, config FROM job_configs WHERE job_id = ?1 ORDER BY version DESC LIMIT 1",
                        params![id],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional(),
            }
            .map_err(db)?;
            let (v, body) = row.ok_or_else(|| {
                StoreError::not_found(
                    "job config",
                    match version {
                        Some(v) => format!("{id} v{v}"),
                        None => id.clone(),
                    },
                )
            })?;
            Ok((v, decode(|| format!("config of job {id} v{v}"), &body)?))
        })
        .await
    }

    async fn get_job_runtime(&self, id: &str) -> Result<JobRuntime> {
        let id = id.to_string();
        self.read(move |conn| {
            let body: Option<String> = conn
                .prepare_cached("SELECT runtime FROM jobs WHERE job_id = ?1")
                .and_then(|mut s| s.query_row(params![id], |r| r.get(0)).optional())
                .map_err(db)?;
            let body = body.ok_or_else(|| StoreError::not_found("job", &id))?;
            decode(|| format!("runtime of job {id}"), &body)
        })
        .await
    }

    async fn cas_job_runtime(&self, id: &str, expected_version: u64, runtime: &JobRuntime) -> Result<JobRuntime> {
        check_id("job", id)?;
        runtime.validate()?;
        let mut stored = runtime.clone();
        stored.version = expected_version + 1;
        let body = encode(|| format!("runtime of job {id}"), &stored, limits::MAX_RECORD)?;
        let id = id.to_string();
        self.write(move |conn| {
            let n = conn
                .execute(
                    "UPDATE jobs SET state = ?3, version = ?4, runtime = ?5 WHERE job_id = ?1 AND version = ?2",
                    params![id, expected_version, stored.state.as_str(), stored.version, body],
                )
                .map_err(db)?;
            if n == 1 {
                return Ok(stored);
            }
            let found: Option<u64> = conn
                .query_row("SELECT version FROM jobs WHERE job_id = ?1", params![id], |r| r.get(0))
                .optional()
                .map_err(db)?;
            match found {
                None => Err(StoreError::not_found("job", &id)),
                Some(v) => Err(StoreError::conflict(format!("job {id}"), expected_version, Some(v))),
            }
        })
        .await
    }

    async fn query_jobs(&self, query: &JobQuery) -> Result<Page<JobSummary>> {
        check_page(query.limit)?;
        let q = query.clone();
        self.read(move |conn| {
            let mut sql = format!("SELECT {SUMMARY_COLS} FROM jobs WHERE job_id > ?");
            let mut args: Vec<rusqlite::types::Value> = vec![q.cursor.clone().unwrap_or_default().into()];
            if !q.states.is_empty() {
                sql.push_str(&format!(" AND state IN ({})", vec!["?"; q.states.len()].join(",")));
                args.extend(q.states.iter().map(|s| s.as_str().to_string().into()));
            }
            if let Some(o) = &q.owner {
                sql.push_str(" AND owner = ?");
                args.push(o.clone().into());
            }
            if let Some(p) = &q.pool {
                sql.push_str(" AND pool = ?");
                args.push(p.clone().into());
            }
            for (k, v) in &q.labels {
                sql.push_str(" AND job_id IN (SELECT job_id FROM job_labels WHERE key = ? AND value = ?)");
                args.push(k.clone().into());
                args.push(v.clone().into());
            }
            sql.push_str(" ORDER BY job_id LIMIT ?");
            args.push(i64::from(q.limit + 1).into());
            let mut stmt = conn.prepare(&sql).map_err(db)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args), summary_from_row)
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            let mut items = rows.into_iter().map(to_summary).collect::<Result<Vec<_>>>()?;
            let next = if items.len() > q.limit as usize {
                items.truncate(q.limit as usize);
                items.last().map(|s| s.id.clone())
            } else {
                None
            };
            Ok(Page { items, next })
        })
        .await
    }

    async fn live_jobs(&self) -> Result<Vec<JobSummary>> {
        self.read(move |conn| {
            let live: Vec<String> =
                crate::types::live_job_states().iter().map(|s| format!("'{}'", s.as_str())).collect();
            let sql = format!("SELECT {SUMMARY_COLS} FROM jobs WHERE state IN ({}) ORDER BY job_id", live.join(","));
            let mut stmt = conn.prepare(&sql).map_err(db)?;
            let rows =
                stmt.query_map([], summary_from_row).map_err(db)?.collect::<rusqlite::Result<Vec<_>>>().map_err(db)?;
            rows.into_iter().map(to_summary).collect()
        })
        .await
    }

    async fn delete_job(&self, id: &str) -> Result<()> {
        let id = id.to_string();
        let trims = self.trims.clone();
        self.write(move |conn| {
            if !job_exists(conn, &id)? {
                return Err(StoreError::not_found("job", &id));
            }
            for table in ["jobs", "job_labels", "job_configs", "tasks", "task_events"] {
                conn.execute(&format!("DELETE FROM {table} WHERE job_id = ?1"), params![id]).map_err(db)?;
            }
            if let Ok(mut t) = trims.lock() {
                t.remove(&id);
            }
            Ok(())
        })
        .await
    }

    async fn create_tasks(&self, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()> {
        check_id("job", job_id)?;
        let mut rows = Vec::with_capacity(tasks.len());
        for (instance, rt) in tasks {
            validate::instance(*instance)?;
            rt.validate()?;
            let mut rt = rt.clone();
            rt.version = 1;
            let body = encode(|| task_what(job_id, *instance), &rt, limits::MAX_RECORD)?;
            rows.push((*instance, rt.state.as_str(), body));
        }
        let job_id = job_id.to_string();
        let trims = self.trims.clone();
        self.write(move |conn| {
            if !job_exists(conn, &job_id)? {
                return Err(StoreError::not_found("job", &job_id));
            }
            let mut ins = conn
                .prepare_cached(
                    "INSERT INTO tasks (job_id, instance, state, version, runtime) VALUES (?1, ?2, ?3, 1, ?4)",
                )
                .map_err(db)?;
            for (instance, state, body) in &rows {
                ins.execute(params![job_id, instance, state, body]).map_err(|e| match e {
                    rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation => {
                        StoreError::exists("task", format!("{job_id}/{instance}"))
                    }
                    e => db(e),
                })?;
            }
            // New tasks have no history: nothing to trim until TRIM_EVERY.
            if let Ok(mut t) = trims.lock() {
                let counts = t.entry(job_id.clone()).or_default();
                for (instance, ..) in &rows {
                    counts.insert(*instance, 0);
                }
            }
            Ok(())
        })
        .await
    }

    async fn get_task(&self, job_id: &str, instance: u32) -> Result<TaskRuntime> {
        let job_id = job_id.to_string();
        self.read(move |conn| {
            let body: Option<String> = conn
                .prepare_cached("SELECT runtime FROM tasks WHERE job_id = ?1 AND instance = ?2")
                .and_then(|mut s| s.query_row(params![job_id, instance], |r| r.get(0)).optional())
                .map_err(db)?;
            let body = body.ok_or_else(|| StoreError::not_found("task", format!("{job_id}/{instance}")))?;
            decode(|| task_what(&job_id, instance), &body)
        })
        .await
    }

    async fn cas_task(
        &self,
        job_id: &str,
        instance: u32,
        expected_version: u64,
        runtime: &TaskRuntime,
    ) -> Result<TaskRuntime> {
        check_id("job", job_id)?;
        let (c, stored) = prepare_cas(job_id, instance, expected_version, runtime)?;
        let job_id = job_id.to_string();
        self.write(move |conn| cas_task_in(conn, &job_id, &c)).await?;
        Ok(stored)
    }

    async fn cas_tasks(&self, job_id: &str, writes: &[TaskCas]) -> Result<Vec<Result<u64>>> {
        check_id("job", job_id)?;
        let prepared = writes
            .iter()
            .map(|w| prepare_cas(job_id, w.instance, w.expected_version, &w.runtime).map(|p| p.0))
            .collect::<Result<Vec<_>>>()?;
        let job_id = job_id.to_string();
        self.write(move |conn| Ok(prepared.iter().map(|c| cas_task_in(conn, &job_id, c)).collect())).await
    }

    async fn tasks_of_job(&self, job_id: &str, states: &[TaskState]) -> Result<Vec<TaskRecord>> {
        let (job_id, states) = (job_id.to_string(), states.to_vec());
        self.read(move |conn| {
            let mut sql = "SELECT instance, runtime FROM tasks WHERE job_id = ?".to_string();
            let mut args: Vec<rusqlite::types::Value> = vec![job_id.clone().into()];
            if !states.is_empty() {
                sql.push_str(&format!(" AND state IN ({})", vec!["?"; states.len()].join(",")));
                args.extend(states.iter().map(|s| s.as_str().to_string().into()));
            }
            sql.push_str(" ORDER BY instance");
            let mut stmt = conn.prepare(&sql).map_err(db)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args), |r| Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?)))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.into_iter()
                .map(|(instance, body)| {
                    Ok(TaskRecord { instance, runtime: decode(|| task_what(&job_id, instance), &body)? })
                })
                .collect()
        })
        .await
    }

    async fn append_task_events(&self, job_id: &str, instance: u32, events: &[TaskEvent]) -> Result<()> {
        let events: Vec<(u32, TaskEvent)> = events.iter().map(|e| (instance, e.clone())).collect();
        self.append_job_events(job_id, &events).await
    }

    async fn append_job_events(&self, job_id: &str, events: &[(u32, TaskEvent)]) -> Result<()> {
        check_id("job", job_id)?;
        if events.is_empty() {
            return Ok(());
        }
        let mut rows = Vec::with_capacity(events.len());
        for (instance, e) in events {
            let body = encode(|| format!("event of {}", task_what(job_id, *instance)), e, limits::MAX_RECORD)?;
            rows.push((*instance, e.at_ms, e.run, e.to.as_str(), body));
        }
        let job_id = job_id.to_string();
        let trims = self.trims.clone();
        self.write(move |conn| {
            let mut ins = conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO task_events (job_id, instance, at_ms, run, to_state, event)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(db)?;
            for (instance, at, run, to, body) in &rows {
                ins.execute(params![job_id, instance, at, run, to, body]).map_err(db)?;
            }
            // Keep the newest MAX_EVENTS_PER_TASK of each task touched:
            // history is bounded per task. The cut-off is the oldest event
            // still kept; with fewer events there is none and nothing goes.
            // An index walk of at most MAX_EVENTS_PER_TASK entries, no sort.
            let mut trim = conn
                .prepare_cached(
                    "DELETE FROM task_events WHERE job_id = ?1 AND instance = ?2 AND (at_ms, run, to_state) <
                     (SELECT at_ms, run, to_state FROM task_events WHERE job_id = ?1 AND instance = ?2
                      ORDER BY at_ms DESC, run DESC, to_state DESC LIMIT 1 OFFSET ?3)",
                )
                .map_err(db)?;
            let mut counts = trims.lock().map_err(|_| StoreError::Backend("trim counts poisoned".into()))?;
            let counts = counts.entry(job_id.clone()).or_default();
            for (instance, ..) in &rows {
                let n = counts.entry(*instance).or_insert(TRIM_EVERY);
                *n += 1;
                if *n > TRIM_EVERY {
                    trim.execute(params![job_id, instance, (limits::MAX_EVENTS_PER_TASK - 1) as i64]).map_err(db)?;
                    *n = 0;
                }
            }
            Ok(())
        })
        .await
    }

    async fn task_events(&self, job_id: &str, instance: u32, limit: u32) -> Result<Vec<TaskEvent>> {
        check_page(limit)?;
        let job_id = job_id.to_string();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT event FROM task_events WHERE job_id = ?1 AND instance = ?2
                     ORDER BY at_ms DESC, run DESC, to_state DESC LIMIT ?3",
                )
                .map_err(db)?;
            let rows = stmt
                // History is trimmed in steps (TRIM_EVERY): never show more than the bound.
                .query_map(params![job_id, instance, limit.min(limits::MAX_EVENTS_PER_TASK as u32)], |r| {
                    r.get::<_, String>(0)
                })
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.iter().map(|b| decode(|| format!("event of {}", task_what(&job_id, instance)), b)).collect()
        })
        .await
    }

    async fn create_update(&self, update: &Update) -> Result<Update> {
        update.validate()?;
        check_id("update", &update.id)?;
        let mut stored = update.clone();
        stored.version = 1;
        let body = encode(|| format!("update {}", update.id), &stored, limits::MAX_JOB_CONFIG)?;
        let out = stored.clone();
        self.write(move |conn| {
            if !job_exists(conn, &stored.job_id)? {
                return Err(StoreError::not_found("job", &stored.job_id));
            }
            let n = conn
                .execute(
                    "INSERT OR IGNORE INTO updates (update_id, job_id, version, created_at_ms, body) VALUES (?1, ?2, 1, ?3, ?4)",
                    params![stored.id, stored.job_id, stored.created_at_ms, body],
                )
                .map_err(db)?;
            if n == 0 {
                return Err(StoreError::exists("update", &stored.id));
            }
            Ok(())
        })
        .await?;
        Ok(out)
    }

    async fn get_update(&self, id: &str) -> Result<Update> {
        let id = id.to_string();
        self.read(move |conn| {
            let body: Option<String> = conn
                .query_row("SELECT body FROM updates WHERE update_id = ?1", params![id], |r| r.get(0))
                .optional()
                .map_err(db)?;
            let body = body.ok_or_else(|| StoreError::not_found("update", &id))?;
            decode(|| format!("update {id}"), &body)
        })
        .await
    }

    async fn cas_update(&self, id: &str, expected_version: u64, update: &Update) -> Result<Update> {
        update.validate()?;
        if update.id != id {
            return Err(StoreError::Invalid(format!("update id `{}` differs from `{id}`", update.id)));
        }
        let mut stored = update.clone();
        stored.version = expected_version + 1;
        let body = encode(|| format!("update {id}"), &stored, limits::MAX_JOB_CONFIG)?;
        let id = id.to_string();
        self.write(move |conn| {
            let n = conn
                .execute(
                    "UPDATE updates SET version = ?3, body = ?4 WHERE update_id = ?1 AND version = ?2",
                    params![id, expected_version, stored.version, body],
                )
                .map_err(db)?;
            if n == 1 {
                return Ok(stored);
            }
            let found: Option<u64> = conn
                .query_row("SELECT version FROM updates WHERE update_id = ?1", params![id], |r| r.get(0))
                .optional()
                .map_err(db)?;
            match found {
                None => Err(StoreError::not_found("update", &id)),
                Some(v) => Err(StoreError::conflict(format!("update {id}"), expected_version, Some(v))),
            }
        })
        .await
    }

    async fn updates_of_job(&self, job_id: &str) -> Result<Vec<Update>> {
        let job_id = job_id.to_string();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare("SELECT body FROM updates WHERE job_id = ?1 ORDER BY created_at_ms, update_id")
                .map_err(db)?;
            let rows = stmt
                .query_map(params![job_id], |r| r.get::<_, String>(0))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.iter().map(|b| decode(|| format!("update of job {job_id}"), b)).collect()
        })
        .await
    }

    async fn put_update_progress(&self, update_id: &str, progress: &[InstanceProgress]) -> Result<()> {
        check_id("update", update_id)?;
        let mut rows = Vec::with_capacity(progress.len());
        for p in progress {
            rows.push((p.instance, encode(|| format!("progress of update {update_id}"), p, limits::MAX_RECORD)?));
        }
        let update_id = update_id.to_string();
        self.write(move |conn| {
            let exists = conn
                .prepare_cached("SELECT 1 FROM updates WHERE update_id = ?1")
                .and_then(|mut s| s.exists(params![update_id]))
                .map_err(db)?;
            if !exists {
                return Err(StoreError::not_found("update", &update_id));
            }
            let mut ins = conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO update_progress (update_id, instance, body) VALUES (?1, ?2, ?3)",
                )
                .map_err(db)?;
            for (instance, body) in &rows {
                ins.execute(params![update_id, instance, body]).map_err(db)?;
            }
            Ok(())
        })
        .await
    }

    async fn update_progress(&self, update_id: &str) -> Result<Vec<InstanceProgress>> {
        let update_id = update_id.to_string();
        self.read(move |conn| {
            let mut stmt =
                conn.prepare("SELECT body FROM update_progress WHERE update_id = ?1 ORDER BY instance").map_err(db)?;
            let rows = stmt
                .query_map(params![update_id], |r| r.get::<_, String>(0))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.iter().map(|b| decode(|| format!("progress of update {update_id}"), b)).collect()
        })
        .await
    }

    async fn put_pool(&self, path: &str, spec: &[u8]) -> Result<()> {
        validate::pool(path, spec)?;
        let (path, spec) = (path.to_string(), spec.to_vec());
        self.write(move |conn| {
            conn.execute("INSERT OR REPLACE INTO pools (path, spec) VALUES (?1, ?2)", params![path, spec])
                .map_err(db)?;
            Ok(())
        })
        .await
    }

    async fn get_pool(&self, path: &str) -> Result<Vec<u8>> {
        let path = path.to_string();
        self.read(move |conn| {
            conn.query_row("SELECT spec FROM pools WHERE path = ?1", params![path], |r| r.get(0))
                .optional()
                .map_err(db)?
                .ok_or_else(|| StoreError::not_found("pool", &path))
        })
        .await
    }

    async fn list_pools(&self) -> Result<Vec<(String, Vec<u8>)>> {
        self.read(|conn| {
            let mut stmt = conn.prepare("SELECT path, spec FROM pools ORDER BY path").map_err(db)?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)
        })
        .await
    }

    async fn delete_pool(&self, path: &str) -> Result<()> {
        let path = path.to_string();
        self.write(move |conn| {
            conn.execute("DELETE FROM pools WHERE path = ?1", params![path]).map_err(db)?;
            Ok(())
        })
        .await
    }

    async fn put_plugin_version(&self, version: &PluginVersion, bytes: &[u8]) -> Result<()> {
        validate::plugin(version, bytes)?;
        let meta = encode(|| format!("plugin {}", version.id()), version, limits::MAX_RECORD)?;
        let (v, bytes) = (version.clone(), bytes.to_vec());
        self.write(move |conn| {
            let n = conn
                .execute(
                    "INSERT OR IGNORE INTO plugins (slot, name, version, meta, deployed_at_ms, bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![v.slot, v.name, v.version, meta, v.deployed_at_ms, bytes],
                )
                .map_err(db)?;
            if n == 0 {
                return Err(StoreError::exists("plugin version", format!("{}/{}", v.slot, v.id())));
            }
            Ok(())
        })
        .await
    }

    async fn set_plugin_state(&self, slot: &str, name: &str, version: &str, state: &str) -> Result<()> {
        check_id("plugin state", state)?;
        let (slot, name, version, state) = (slot.to_string(), name.to_string(), version.to_string(), state.to_string());
        self.write(move |conn| {
            let meta: Option<String> = conn
                .query_row(
                    "SELECT meta FROM plugins WHERE slot = ?1 AND name = ?2 AND version = ?3",
                    params![slot, name, version],
                    |r| r.get(0),
                )
                .optional()
                .map_err(db)?;
            let meta =
                meta.ok_or_else(|| StoreError::not_found("plugin version", format!("{slot}/{name}@{version}")))?;
            let mut v: PluginVersion = decode(|| format!("plugin {slot}/{name}@{version}"), &meta)?;
            v.state = state;
            let meta = encode(|| format!("plugin {}", v.id()), &v, limits::MAX_RECORD)?;
            conn.execute(
                "UPDATE plugins SET meta = ?4 WHERE slot = ?1 AND name = ?2 AND version = ?3",
                params![slot, name, version, meta],
            )
            .map_err(db)?;
            Ok(())
        })
        .await
    }

    async fn plugin_versions(&self, slot: Option<&str>) -> Result<Vec<PluginVersion>> {
        let slot = slot.map(str::to_string);
        self.read(move |conn| {
            let metas: Vec<String> = match &slot {
                Some(s) => conn
                    .prepare("SELECT meta FROM plugins WHERE slot = ?1 ORDER BY deployed_at_ms, name, version")
                    .and_then(|mut st| st.query_map(params![s], |r| r.get(0))?.collect()),
                None => conn
                    .prepare("SELECT meta FROM plugins ORDER BY slot, deployed_at_ms, name, version")
                    .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect()),
            }
            .map_err(db)?;
            metas.iter().map(|m| decode(|| "plugin version".to_string(), m)).collect()
        })
        .await
    }

    async fn plugin_bytes(&self, slot: &str, name: &str, version: &str) -> Result<Vec<u8>> {
        let (slot, name, version) = (slot.to_string(), name.to_string(), version.to_string());
        self.read(move |conn| {
            conn.query_row(
                "SELECT bytes FROM plugins WHERE slot = ?1 AND name = ?2 AND version = ?3",
                params![slot, name, version],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?
            .ok_or_else(|| StoreError::not_found("plugin version", format!("{slot}/{name}@{version}")))
        })
        .await
    }

    async fn set_slot_history(&self, slot: &str, history: &[String]) -> Result<()> {
        check_id("plugin slot", slot)?;
        let body = encode(|| format!("history of slot {slot}"), &history, limits::MAX_RECORD)?;
        let slot = slot.to_string();
        self.write(move |conn| {
            conn.execute("INSERT OR REPLACE INTO plugin_slots (slot, history) VALUES (?1, ?2)", params![slot, body])
                .map_err(db)?;
            Ok(())
        })
        .await
    }

    async fn slot_histories(&self) -> Result<BTreeMap<String, Vec<String>>> {
        self.read(|conn| {
            let mut stmt = conn.prepare("SELECT slot, history FROM plugin_slots").map_err(db)?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.into_iter().map(|(s, h)| Ok((s.clone(), decode(|| format!("history of slot {s}"), &h)?))).collect()
        })
        .await
    }

    async fn put_host(&self, host: &HostRecord) -> Result<()> {
        validate::host(host)?;
        let body = encode(|| format!("host {}", host.hostname), host, limits::MAX_RECORD)?;
        let name = host.hostname.clone();
        self.write(move |conn| {
            conn.execute("INSERT OR REPLACE INTO hosts (hostname, record) VALUES (?1, ?2)", params![name, body])
                .map_err(db)?;
            Ok(())
        })
        .await
    }

    async fn get_host(&self, hostname: &str) -> Result<HostRecord> {
        let hostname = hostname.to_string();
        self.read(move |conn| {
            let body: String = conn
                .query_row("SELECT record FROM hosts WHERE hostname = ?1", params![hostname], |r| r.get(0))
                .optional()
                .map_err(db)?
                .ok_or_else(|| StoreError::not_found("host", &hostname))?;
            decode(|| format!("host {hostname}"), &body)
        })
        .await
    }

    async fn list_hosts(&self) -> Result<Vec<HostRecord>> {
        self.read(|conn| {
            let mut stmt = conn.prepare("SELECT record FROM hosts ORDER BY hostname").map_err(db)?;
            let rows = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.iter().map(|b| decode(|| "host".to_string(), b)).collect()
        })
        .await
    }

    async fn delete_host(&self, hostname: &str) -> Result<()> {
        let hostname = hostname.to_string();
        self.write(move |conn| {
            conn.execute("DELETE FROM hosts WHERE hostname = ?1", params![hostname]).map_err(db)?;
            Ok(())
        })
        .await
    }

    async fn put_provider_id(&self, provider: &str, id: &str) -> Result<()> {
        check_id("provider", provider)?;
        check_id("provider id", id)?;
        let (provider, id) = (provider.to_string(), id.to_string());
        self.write(move |conn| {
            conn.execute("INSERT OR REPLACE INTO provider_ids (provider, id) VALUES (?1, ?2)", params![provider, id])
                .map_err(db)?;
            Ok(())
        })
        .await
    }

    async fn get_provider_id(&self, provider: &str) -> Result<Option<String>> {
        let provider = provider.to_string();
        self.read(move |conn| {
            conn.query_row("SELECT id FROM provider_ids WHERE provider = ?1", params![provider], |r| r.get(0))
                .optional()
                .map_err(db)
        })
        .await
    }
}
