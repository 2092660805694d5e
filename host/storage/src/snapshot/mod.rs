//! Snapshots: the whole cluster state as one checksummed, versioned file
//! (decision 0030; the format is in [`format`] and docs/operations.md).
//!
//! - [`export`] reads a store through the [`Store`] trait and writes a
//!   snapshot to a [`Sink`]. It reads from [`Store::consistent_view`] when
//!   the backend offers one (SQLite: a copy made in one read transaction),
//!   so the snapshot is of one moment; otherwise record by record.
//! - [`verify`] reads a whole file and checks header, records, counts and
//!   checksum without writing anything.
//! - [`restore`] verifies first, then refuses a store that holds anything,
//!   then writes every record through the trait. [`restore_sqlite_file`]
//!   restores into a new file beside the target and renames it into place,
//!   so a failure part-way leaves no database behind.
//!
//! Compare-and-set versions are not carried over: a restored job, task or
//! update starts at version 1. They are the store's own counters, never
//! shown by the API, and every writer reads before it writes.

pub mod format;
pub mod migrate;

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
pub use format::{Encoder, FORMAT_VERSION, Header, JobRecord, Record, Trailer};
use paceline_model::task::{TaskEvent, TaskRuntime};

use crate::error::StoreError;
use crate::store::Store;
use crate::types::{JobQuery, limits};

/// Providers whose ids a snapshot carries ([`Store::get_provider_id`] has
/// no listing; these are every key Paceline writes): the Mesos framework id
/// and the Kubernetes cluster id (`paceline.io/cluster` on every pod the
/// cluster made: a restore without it would make a new id and disown them).
pub const PROVIDERS: &[&str] = &["mesos", "kubernetes"];

/// Bytes buffered before they go to the sink.
const FLUSH_AT: usize = 1 << 20;

/// Tasks (and task events) written per call on restore.
const RESTORE_BATCH: usize = 1000;

/// Why a snapshot could not be taken, read or restored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The file is not a whole, intact snapshot. Nothing was written.
    #[error("the snapshot is damaged: {0}; nothing was written")]
    Damaged(String),
    /// The file was written by a newer Paceline. Nothing was written.
    #[error(
        "the snapshot has format version {found}, newer than {supported} which this build reads; use a newer paceline (nothing was written)"
    )]
    TooNew {
        /// Version in the file.
        found: u64,
        /// Newest version this build reads.
        supported: u32,
    },
    /// Restore writes only into an empty store. Nothing was written.
    #[error("the target store is not empty ({0}); restore writes only into an empty store (nothing was written)")]
    NotEmpty(String),
    /// A record would not encode (a bug, not bad input).
    #[error("encoding a record: {0}")]
    Encode(String),
    /// Reading or writing the file failed.
    #[error("i/o: {0}")]
    Io(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where snapshot bytes go, in order.
#[async_trait]
pub trait Sink: Send {
    /// Takes the next bytes.
    async fn write(&mut self, bytes: Vec<u8>) -> Result<(), SnapshotError>;
}

#[async_trait]
impl Sink for std::io::BufWriter<std::fs::File> {
    async fn write(&mut self, bytes: Vec<u8>) -> Result<(), SnapshotError> {
        std::io::Write::write_all(self, &bytes).map_err(|e| SnapshotError::Io(e.to_string()))
    }
}

#[async_trait]
impl Sink for Vec<u8> {
    async fn write(&mut self, bytes: Vec<u8>) -> Result<(), SnapshotError> {
        self.extend_from_slice(&bytes);
        Ok(())
    }
}

#[async_trait]
impl Sink for tokio::sync::mpsc::Sender<Vec<u8>> {
    async fn write(&mut self, bytes: Vec<u8>) -> Result<(), SnapshotError> {
        self.send(bytes).await.map_err(|_| SnapshotError::Io("the receiver of the snapshot went away".into()))
    }
}

/// A read view of a whole store as of one moment, for [`export`]
/// ([`Store::consistent_view`]). Dropping it releases what it holds.
pub struct ConsistentView {
    /// The store to read.
    pub store: std::sync::Arc<dyn Store>,
    /// Files removed once the view is dropped (after `store`).
    pub(crate) cleanup: Vec<PathBuf>,
}

impl std::fmt::Debug for ConsistentView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsistentView").field("store", &self.store).field("cleanup", &self.cleanup).finish()
    }
}

impl Drop for ConsistentView {
    fn drop(&mut self) {
        for p in &self.cleanup {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Where [`walk`] hands each record, in order.
#[async_trait]
pub trait RecordSink: Send {
    /// Takes the next record.
    async fn record(&mut self, record: Record) -> Result<(), SnapshotError>;
}

/// Encodes records into a file's bytes and hands them to a [`Sink`] in
/// pieces of about [`FLUSH_AT`].
struct FileSink<'a> {
    enc: Encoder,
    sink: &'a mut dyn Sink,
}

#[async_trait]
impl RecordSink for FileSink<'_> {
    async fn record(&mut self, record: Record) -> Result<(), SnapshotError> {
        self.enc.record(&record)?;
        if self.enc.buffered() >= FLUSH_AT {
            self.sink.write(self.enc.take()).await?;
        }
        Ok(())
    }
}

/// Writes a snapshot of `store` to `sink`; returns its trailer (counts
/// and checksum). From one read view where the backend has one
/// (`Header::point_in_time`), else record by record: a job deleted while
/// the export runs is left out, one created may or may not be in.
pub async fn export(store: &dyn Store, sink: &mut dyn Sink) -> Result<Trailer, SnapshotError> {
    export_with(store, sink, None).await
}

/// [`export`] with the store's writes held back by `pause` (from
/// [`Store::pause_writes`]) until the last record is read: one moment on
/// any backend, at the price of every write of the server waiting that long.
pub async fn export_paused(
    store: &dyn Store,
    sink: &mut dyn Sink,
    pause: WritePause,
) -> Result<Trailer, SnapshotError> {
    export_with(store, sink, Some(pause)).await
}

async fn export_with(
    store: &dyn Store,
    sink: &mut dyn Sink,
    pause: Option<WritePause>,
) -> Result<Trailer, SnapshotError> {
    let view = match pause {
        Some(_) => None,
        None => store.consistent_view().await?,
    };
    let src: &dyn Store = match &view {
        Some(v) => v.store.as_ref(),
        None => store,
    };
    let frozen = view.is_some() || pause.is_some();
    let header = Header {
        format: format::FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        created_at_ms: crate::types::now_ms(),
        source_backend: store.backend().into(),
        point_in_time: frozen,
        written_by: env!("CARGO_PKG_VERSION").into(),
    };
    let mut out = FileSink { enc: Encoder::new(&header)?, sink };
    walk(src, frozen, &mut out).await?;
    // Writes resume once every record is read; the last bytes are only sent.
    drop(pause);
    let (last, trailer) = out.enc.finish()?;
    out.sink.write(last).await?;
    drop(view);
    Ok(trailer)
}

/// The gate a store handle's writes pass ([`Store::pause_writes`]): each
/// write holds a shared permit while it runs; a pause takes the gate
/// whole, after the writes in flight, and new writes wait behind it.
#[derive(Debug, Default)]
pub struct WriteGate {
    lock: std::sync::Arc<tokio::sync::RwLock<()>>,
}

impl WriteGate {
    /// A write's permit: waits while a pause holds the gate.
    pub async fn permit(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.lock.read().await
    }

    /// Closes the gate until the pause is dropped.
    pub async fn pause(&self) -> WritePause {
        WritePause { _guard: self.lock.clone().write_owned().await }
    }
}

/// Writes held back until this is dropped ([`WriteGate::pause`]).
#[derive(Debug)]
pub struct WritePause {
    _guard: tokio::sync::OwnedRwLockWriteGuard<()>,
}

/// Hands every record of `src` to `out` in snapshot order: pools, their
/// sealed secrets, hosts,
/// provider ids, plugins, slots, then each job (by id page) followed by its
/// tasks, task events, updates and job events. `frozen` says `src` is a
/// [`ConsistentView`]: a job that vanishes part-way is then an error, not a
/// deletion that raced the walk.
pub async fn walk(src: &dyn Store, frozen: bool, out: &mut dyn RecordSink) -> Result<(), SnapshotError> {
    let pools = src.list_pools().await?;
    let paths: Vec<String> = pools.iter().map(|(p, _)| p.clone()).collect();
    for (path, spec) in pools {
        out.record(Record::Pool { path, spec: format::b64(&spec) }).await?;
    }
    // Secrets are listed by pool; sealed, as stored.
    for path in paths {
        for secret in src.list_secrets(&path).await? {
            out.record(Record::Secret(secret)).await?;
        }
    }
    for host in src.list_hosts().await? {
        out.record(Record::Host(host)).await?;
    }
    for provider in PROVIDERS {
        if let Some(id) = src.get_provider_id(provider).await? {
            out.record(Record::ProviderId { provider: provider.to_string(), id }).await?;
        }
    }
    for version in src.plugin_versions(None).await? {
        let bytes = src.plugin_bytes(&version.slot, &version.name, &version.version).await?;
        out.record(Record::Plugin { bytes: format::b64(&bytes), version }).await?;
    }
    for (slot, history) in src.slot_histories().await? {
        out.record(Record::Slot { slot, history }).await?;
    }
    let mut cursor = None;
    loop {
        let page = src.query_jobs(&JobQuery { limit: 1000, cursor: cursor.take(), ..JobQuery::default() }).await?;
        for job in page.items {
            match walk_job(src, &job.id, job.latest_config_version, job.runtime, out).await {
                // Deleted while a record-by-record walk ran: left out.
                Err(SnapshotError::Store(e)) if e.is_not_found() && !frozen => {
                    tracing::info!(job = %job.id, "job deleted during the snapshot, left out");
                }
                other => other?,
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(())
}

/// Hands one job's records to `out`: the job, its tasks, their events,
/// its updates, its job events. Everything is read before the first record
/// goes out: a job deleted meanwhile fails whole, never half-handed-out.
pub async fn walk_job(
    src: &dyn Store,
    id: &str,
    latest: u64,
    runtime: paceline_model::job::JobRuntime,
    out: &mut dyn RecordSink,
) -> Result<(), SnapshotError> {
    let mut configs = Vec::with_capacity(latest as usize);
    for v in 1..=latest {
        configs.push(src.get_job_config(id, Some(v)).await?);
    }
    let tasks = src.tasks_of_job(id, &[]).await?;
    let mut events = Vec::new();
    for t in &tasks {
        let mut e = src.task_events(id, t.instance, limits::MAX_EVENTS_PER_TASK as u32).await?;
        if !e.is_empty() {
            e.reverse();
            events.push((t.instance, e));
        }
    }
    let mut updates = Vec::new();
    for update in src.updates_of_job(id).await? {
        let progress = src.update_progress(&update.id).await?;
        updates.push((update, progress));
    }
    let job_events = src.job_events(id, None, limits::MAX_EVENTS_PER_JOB as u32).await?;
    out.record(Record::Job(JobRecord { id: id.to_string(), configs, runtime })).await?;
    for t in tasks {
        out.record(Record::Task { job: id.to_string(), instance: t.instance, runtime: t.runtime }).await?;
    }
    for (instance, events) in events {
        out.record(Record::TaskEvents { job: id.to_string(), instance, events }).await?;
    }
    for (update, progress) in updates {
        out.record(Record::Update { update, progress }).await?;
    }
    if !job_events.is_empty() {
        out.record(Record::JobEvents { job: id.to_string(), events: job_events }).await?;
    }
    Ok(())
}

/// Checks one record as the store would, so that restore does not fail on
/// it half-way through.
fn check(record: &Record) -> Result<(), String> {
    match record {
        Record::Pool { path, spec } => {
            crate::types::check_id("pool", path).map_err(|e| e.to_string())?;
            format::unb64(&format!("pool {path}"), spec).map_err(|e| e.to_string())?;
        }
        Record::Host(h) => h.validate().map_err(|e| format!("host {}: {e}", h.hostname))?,
        Record::Secret(secret) => crate::validate::secret(secret).map_err(|e| e.to_string())?,
        Record::ProviderId { provider, .. } => {
            crate::types::check_id("provider", provider).map_err(|e| e.to_string())?
        }
        Record::Plugin { version, bytes } => {
            let bytes = format::unb64(&format!("plugin {}", version.id()), bytes).map_err(|e| e.to_string())?;
            crate::validate::plugin(version, &bytes).map_err(|e| e.to_string())?;
        }
        Record::Slot { .. } | Record::TaskEvents { .. } | Record::JobEvents { .. } | Record::End(_) => {}
        Record::Job(job) => {
            if job.configs.is_empty() {
                return Err(format!("job {} has no config", job.id));
            }
            for (i, (v, c)) in job.configs.iter().enumerate() {
                if *v != i as u64 + 1 {
                    return Err(format!(
                        "job {}: config versions are not 1, 2, …: found {v} at position {}",
                        job.id,
                        i + 1
                    ));
                }
                crate::types::encode_config(&job.id, c).map_err(|e| e.to_string())?;
            }
            job.runtime.validate().map_err(|e| format!("job {}: {e}", job.id))?;
        }
        Record::Task { job, instance, runtime } => {
            runtime.validate().map_err(|e| format!("task {job}/{instance}: {e}"))?
        }
        Record::Update { update, .. } => update.validate().map_err(|e| format!("update {}: {e}", update.id))?,
    }
    Ok(())
}

fn open(path: &Path) -> Result<format::Decoder<BufReader<std::fs::File>>, SnapshotError> {
    let file = std::fs::File::open(path).map_err(|e| SnapshotError::Io(format!("{}: {e}", path.display())))?;
    format::Decoder::new(BufReader::with_capacity(1 << 20, file))
}

/// Reads the whole file at `path` and checks it: header and format
/// version, every record (decoded and checked as the store would), the
/// counts and the checksum. Writes nothing.
pub fn verify(path: &Path) -> Result<(Header, Trailer), SnapshotError> {
    let mut dec = open(path)?;
    let mut jobs = std::collections::HashSet::new();
    while let Some(record) = dec.next_record()? {
        check(&record).map_err(SnapshotError::Damaged)?;
        let out_of_order = match &record {
            Record::Job(j) => (!jobs.insert(j.id.clone())).then(|| format!("job {} appears twice", j.id)),
            Record::Task { job, .. } | Record::TaskEvents { job, .. } | Record::JobEvents { job, .. } => {
                (!jobs.contains(job)).then(|| format!("a record of job {job} comes before the job"))
            }
            Record::Update { update, .. } => {
                (!jobs.contains(&update.job_id)).then(|| format!("update {} comes before its job", update.id))
            }
            _ => None,
        };
        if let Some(reason) = out_of_order {
            return Err(SnapshotError::Damaged(reason));
        }
    }
    let trailer = dec.trailer().cloned().unwrap_or_default();
    Ok((dec.header().clone(), trailer))
}

/// What the target store holds, or `None` when it is empty.
pub async fn contents(store: &dyn Store) -> Result<Option<String>, StoreError> {
    let mut held = Vec::new();
    if !store.query_jobs(&JobQuery { limit: 1, ..JobQuery::default() }).await?.items.is_empty() {
        held.push("jobs".to_string());
    }
    let pools = store.list_pools().await?.len();
    if pools > 0 {
        held.push(format!("{pools} pools"));
    }
    let hosts = store.list_hosts().await?.len();
    if hosts > 0 {
        held.push(format!("{hosts} hosts"));
    }
    let plugins = store.plugin_versions(None).await?.len();
    if plugins > 0 {
        held.push(format!("{plugins} plugin versions"));
    }
    if !store.slot_histories().await?.is_empty() {
        held.push("plugin slots".into());
    }
    for p in PROVIDERS {
        if store.get_provider_id(p).await?.is_some() {
            held.push(format!("a {p} provider id"));
        }
    }
    Ok((!held.is_empty()).then(|| held.join(", ")))
}

/// Restores the snapshot at `path` into `store`, which must be empty:
/// checks the whole file first ([`verify`]) and the store second, and
/// writes nothing when either fails. A store error part-way (the database
/// went away) leaves what was written so far: empty the store and run it
/// again ([`restore_sqlite_file`] leaves nothing instead).
pub async fn restore(path: &Path, store: &dyn Store) -> Result<Trailer, SnapshotError> {
    let (_, trailer) = verify(path)?;
    if let Some(held) = contents(store).await? {
        return Err(SnapshotError::NotEmpty(held));
    }
    let mut dec = open(path)?;
    let mut w = Restorer::new(store);
    while let Some(record) = dec.next_record()? {
        w.record(record).await?;
    }
    w.flush().await?;
    // The file changed between the two reads: what was written came from
    // the first, checked one only if the second agrees.
    match dec.trailer() {
        Some(t) if *t == trailer => Ok(trailer),
        _ => Err(SnapshotError::Damaged("the file changed while it was restored".into())),
    }
}

/// Writes records in order, batching a job's tasks and task events.
pub(crate) struct Restorer<'a> {
    store: &'a dyn Store,
    job: String,
    tasks: Vec<(u32, TaskRuntime)>,
    events: Vec<(u32, TaskEvent)>,
}

impl<'a> Restorer<'a> {
    pub(crate) fn new(store: &'a dyn Store) -> Restorer<'a> {
        Restorer { store, tasks: Vec::new(), events: Vec::new(), job: String::new() }
    }

    pub(crate) async fn flush(&mut self) -> Result<(), SnapshotError> {
        if !self.tasks.is_empty() {
            self.store.create_tasks(&self.job, &std::mem::take(&mut self.tasks)).await?;
        }
        if !self.events.is_empty() {
            self.store.append_job_events(&self.job, &std::mem::take(&mut self.events)).await?;
        }
        Ok(())
    }

    pub(crate) async fn record(&mut self, record: Record) -> Result<(), SnapshotError> {
        let s = self.store;
        match record {
            Record::Task { job, instance, runtime } => {
                if job != self.job || self.tasks.len() >= RESTORE_BATCH || !self.events.is_empty() {
                    self.flush().await?;
                    self.job = job;
                }
                self.tasks.push((instance, runtime));
                return Ok(());
            }
            Record::TaskEvents { job, instance, events } => {
                if job != self.job || self.events.len() >= RESTORE_BATCH * 10 || !self.tasks.is_empty() {
                    self.flush().await?;
                    self.job = job;
                }
                self.events.extend(events.into_iter().map(|e| (instance, e)));
                return Ok(());
            }
            _ => self.flush().await?,
        }
        match record {
            Record::Pool { path, spec } => s.put_pool(&path, &format::unb64(&path, &spec)?).await?,
            Record::Host(h) => s.put_host(&h).await?,
            Record::Secret(secret) => s.put_secret(&secret).await?,
            Record::ProviderId { provider, id } => s.put_provider_id(&provider, &id).await?,
            Record::Plugin { version, bytes } => {
                s.put_plugin_version(&version, &format::unb64(&version.id(), &bytes)?).await?
            }
            Record::Slot { slot, history } => s.set_slot_history(&slot, &history).await?,
            Record::Job(job) => {
                let mut configs = job.configs.into_iter();
                let (_, first) =
                    configs.next().ok_or_else(|| SnapshotError::Damaged(format!("job {} has no config", job.id)))?;
                s.create_job(&job.id, &first, &job.runtime).await?;
                for (v, c) in configs {
                    s.add_job_config(&job.id, v, &c).await?;
                }
            }
            Record::Update { update, progress } => {
                s.create_update(&update).await?;
                if !progress.is_empty() {
                    s.put_update_progress(&update.id, &progress).await?;
                }
            }
            Record::JobEvents { events, .. } => s.record_job_events(&events).await?,
            Record::Task { .. } | Record::TaskEvents { .. } | Record::End(_) => {}
        }
        Ok(())
    }
}

/// Restores the snapshot at `snapshot` into the SQLite database `db`:
/// refuses a `db` that holds anything, restores into a new file beside it
/// and renames that into place only once everything is written, so a
/// failure at any point leaves `db` as it was (absent or empty).
pub async fn restore_sqlite_file(snapshot: &Path, db: &Path) -> Result<Trailer, SnapshotError> {
    let (_, trailer) = verify(snapshot)?;
    if db.exists() {
        let existing = crate::sqlite::SqliteStore::open(db)?;
        if let Some(held) = contents(&existing).await? {
            return Err(SnapshotError::NotEmpty(format!("{}: {held}", db.display())));
        }
    }
    let tmp = sibling(db, ".restoring");
    remove_db_files(&tmp);
    let result = async {
        let store = crate::sqlite::SqliteStore::open(&tmp)?;
        let t = restore(snapshot, &store).await?;
        drop(store);
        settle(&tmp)?;
        Ok::<_, SnapshotError>(t)
    }
    .await;
    match result {
        Ok(t) if t == trailer => {
            remove_db_files(db);
            std::fs::rename(&tmp, db)
                .map_err(|e| SnapshotError::Io(format!("{} → {}: {e}", tmp.display(), db.display())))?;
            Ok(t)
        }
        Ok(_) => {
            remove_db_files(&tmp);
            Err(SnapshotError::Damaged("the file changed while it was restored".into()))
        }
        Err(e) => {
            remove_db_files(&tmp);
            Err(e)
        }
    }
}

/// `db` with `suffix` appended to its file name.
pub(crate) fn sibling(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(suffix);
    db.with_file_name(name)
}

fn remove_db_files(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(sibling(db, suffix));
    }
}

/// Folds the write-ahead log into the database file and leaves WAL mode, so
/// that the one file holds everything before it is renamed. The store's
/// threads close their connections shortly after it is dropped: wait.
fn settle(db: &Path) -> Result<(), SnapshotError> {
    let conn = rusqlite::Connection::open(db).map_err(|e| SnapshotError::Store(StoreError::Backend(e.to_string())))?;
    let mut last = String::new();
    for _ in 0..100 {
        match conn.query_row("PRAGMA journal_mode = DELETE", [], |r| r.get::<_, String>(0)) {
            Ok(mode) if mode.eq_ignore_ascii_case("delete") => return Ok(()),
            Ok(mode) => last = format!("journal mode stayed {mode}"),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Err(SnapshotError::Store(StoreError::Backend(format!("{}: cannot fold the WAL in: {last}", db.display()))))
}

/// Per-kind record counts as a short line (`12 jobs, 340 tasks, …`).
pub fn describe(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        return "no records".into();
    }
    counts.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(", ")
}
