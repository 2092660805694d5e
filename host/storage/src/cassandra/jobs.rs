//! Jobs: the `jobs` row (runtime and the summary columns queries read),
//! config versions in `job_configs`, the compare-and-set of the runtime,
//! queries (through the index of `job_index`, or a paged scan when a query
//! names no filter), and deletion of a job with everything under it.
//!
//! A create is all or nothing for readers (decision 0033): a marker in
//! `job_creates` first, then the row with `state = 'CREATING'` (no read
//! returns such a row), the index entries, config version 1 and the tasks,
//! and last the write that sets the real state: the moment the job exists.
//! A crash in between leaves a marker that [`remove_interrupted_creates`]
//! follows at the next leader's start to remove what was written.
//!
//! No write here is a lightweight transaction (decision 0049): the leader
//! is the one writer of jobs, "already exists" and the versions of
//! runtimes and configs are checked in its cache (`versions.rs`), and every
//! row is written and deleted at its write clock, so a deposed leader's
//! late write loses to anything a newer leader wrote.

use futures::{StreamExt, TryStreamExt};
use paceline_model::job::{JobConfig, JobRuntime};

use paceline_model::task::TaskRuntime;

use super::job_index::{CREATING, config_attrs, live_states, plan, shard};
use super::versions::{JobLookup, JobMeta};
use super::{CONCURRENCY, CassandraStore};
use crate::error::{Result, StoreError};
use crate::store::Store;
use crate::types::{
    JobQuery, JobSummary, NewJob, Page, check_id, check_page, decode, encode, encode_config, limits, matches, new_job,
    to_summary,
};

/// The summary columns and the `state` column (`CREATING` while a create runs).
type JobRow = (String, String, String, String, String, String, i32, i64, String, Option<String>);

fn creating(r: &JobRow) -> bool {
    r.9.as_deref() == Some(CREATING)
}

/// Cassandra has no unsigned integers; the summary columns are `int` and `bigint`.
fn job_summary(r: JobRow) -> Result<JobSummary> {
    let (id, name, owner, pool, kind, labels, instance_count, latest, runtime, _) = r;
    to_summary((id, name, owner, pool, kind, labels, instance_count as u32, latest as u64, runtime))
}

impl CassandraStore {
    /// Whether a job exists for readers (a create that has not finished does not).
    pub(super) async fn job_exists(&self, id: &str) -> Result<bool> {
        let rows: Vec<(String, Option<String>)> = self.rows("job", &self.s.sel_job_exists, (id,)).await?;
        Ok(rows.first().is_some_and(|(_, state)| state.as_deref() != Some(CREATING)))
    }

    /// A job's summary, `None` if absent; and whether its create is still running.
    pub(super) async fn job_summary_of(&self, id: &str) -> Result<(Option<JobSummary>, bool)> {
        let rows: Vec<JobRow> = self.rows("job", &self.s.sel_job_summary, (id,)).await?;
        match rows.into_iter().next() {
            None => Ok((None, false)),
            Some(r) if creating(&r) => Ok((None, true)),
            Some(r) => Ok((Some(job_summary(r)?), false)),
        }
    }
}

/// A value unique to one create call, so that its marker is its own.
fn nonce() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}-{}", std::process::id(), crate::types::now_ms(), NEXT.fetch_add(1, Ordering::Relaxed))
}

pub(super) async fn create_job(
    store: &CassandraStore,
    id: &str,
    config: &JobConfig,
    runtime: &JobRuntime,
) -> Result<JobRuntime> {
    create_job_with_tasks(store, id, config, runtime, &[]).await
}

pub(super) async fn create_job_with_tasks(
    store: &CassandraStore,
    id: &str,
    config: &JobConfig,
    runtime: &JobRuntime,
    tasks: &[(u32, TaskRuntime)],
) -> Result<JobRuntime> {
    let NewJob { config: body, runtime: rt, runtime_body: rt_body, labels } = new_job(id, config, runtime)?;
    let mut rows = Vec::with_capacity(tasks.len());
    let mut seen = std::collections::BTreeSet::new();
    for (instance, task) in tasks {
        crate::validate::instance(*instance)?;
        task.validate()?;
        if !seen.insert(*instance) {
            return Err(StoreError::exists("task", format!("{id}/{instance}")));
        }
        let mut task = task.clone();
        task.version = 1;
        encode(|| format!("task {id}/{instance}"), &task, limits::MAX_RECORD)?;
        rows.push((*instance, task));
    }
    // "Already exists" is decided in this handle (decision 0049): a create
    // of the id running here, or a job this handle knows, refuses it at
    // once; otherwise the row is read at the configured (quorum)
    // consistency, beside the fence read. A job an earlier leader created
    // and acknowledged is there: it acknowledged it only after a fence read
    // that followed its writes, so before this leader's claim completed.
    if !store.job_versions.reserve(id) {
        return Err(StoreError::exists("job", id));
    }
    let read = async {
        let (_, found) = futures::try_join!(store.fence_check(), store.job_meta(id))?;
        Ok::<_, StoreError>(found)
    };
    match read.await {
        Ok(None) => {}
        Ok(Some(found)) => {
            store.job_versions.forget(id);
            if found.state != CREATING {
                store.job_versions.fill(id, found);
            }
            return Err(StoreError::exists("job", id));
        }
        Err(e) => {
            store.job_versions.forget(id);
            return Err(e);
        }
    }
    let nonce = nonce();
    let written = async {
        store
            .exec(
                "job create marker",
                &store.s.ins_create,
                (shard(id), id, nonce.as_str(), crate::types::now_ms() as i64),
            )
            .await?;
        // Tombstones below everything this create writes, for what a
        // deposed leader's create of the same id may still land: its job
        // row's cells and tasks lose to ours, these hide its bucket markers
        // and the rows of instances this create does not have.
        let before = store.fence.next_timestamp()?;
        let values = (
            id,
            &config.name,
            &config.owner,
            &config.pool,
            config.kind.as_str(),
            &labels,
            config.instance_count as i32,
            CREATING,
            &rt_body,
            store.fence.next_timestamp()?,
        );
        // The row in a state no read returns: the id is this create's.
        store.exec("create job", &store.s.ins_job, values).await?;
        finish_create(store, id, config, &rt, &body, &rows, before).await
    };
    match written.await {
        Ok(state_at) => {
            // A marker left by a failure here only costs the next leader a
            // read. The fence is read after the writes: a newer leader
            // claimed before they were acknowledged might not see them.
            let marker = async {
                let _ = store.exec("job create marker", &store.s.del_create, (shard(id), id, nonce.as_str())).await;
                Ok(())
            };
            if let Err(e) = futures::try_join!(store.fence_check(), marker) {
                store.job_versions.forget(id);
                return Err(e);
            }
            let meta = JobMeta { version: 1, state: rt.state.as_str().to_string(), state_at, config_version: 1 };
            store.job_versions.created(id, meta);
            Ok(rt)
        }
        Err(e) => {
            // Nothing was acknowledged: take back what was written. If that
            // fails too, the marker leads the next leader's start to it.
            if remove_all(store, id).await.is_ok() {
                let _ = store.exec("job create marker", &store.s.del_create, (shard(id), id, nonce.as_str())).await;
            }
            store.job_versions.forget(id);
            Err(e)
        }
    }
}

/// Everything after the row: index entries, config 1, tasks, and the
/// state that makes the job visible, whose write timestamp it returns.
async fn finish_create(
    store: &CassandraStore,
    id: &str,
    config: &JobConfig,
    rt: &JobRuntime,
    body: &str,
    tasks: &[(u32, TaskRuntime)],
    before: i64,
) -> Result<i64> {
    let mut attrs = config_attrs(&config.owner, &config.pool, &config.labels);
    attrs.push(("state", rt.state.as_str().to_string()));
    let ts = store.fence.next_timestamp()?;
    futures::try_join!(
        store.index_add(id, &attrs, ts),
        store.exec("job config", &store.s.ins_config, (id, 1i64, body, ts)),
    )?;
    crate::crash::point("create-job.before-tasks");
    let buckets: std::collections::BTreeSet<i32> = tasks.iter().map(|(i, _)| super::bucket(*i)).collect();
    let hide = futures::stream::iter(buckets)
        .map(|b| store.exec("tasks", &store.s.del_bucket_tasks, (before, id, b)))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>();
    futures::try_join!(hide, store.exec("task buckets", &store.s.del_buckets, (before, id)))?;
    if !tasks.is_empty() {
        store.write_tasks(id, tasks).await?;
    }
    crate::crash::point("create-job.before-commit");
    let at = store.fence.next_timestamp()?;
    store.exec("create job", &store.s.commit_job, (at, rt.state.as_str(), id)).await?;
    Ok(at)
}

/// Removes a job and everything under it, whatever its state (a create
/// cut short included), at the write clock (decision 0049): a delete at
/// the node's own time would not hide rows written at the clock.
async fn remove_all(store: &CassandraStore, id: &str) -> Result<()> {
    let attrs = match store.rows::<JobRow>("job", &store.s.sel_job_summary, (id,)).await?.into_iter().next() {
        Some(r) => {
            let labels = decode(|| format!("labels of job {id}"), &r.5).unwrap_or_default();
            config_attrs(&r.2, &r.3, &labels)
        }
        None => Vec::new(),
    };
    store.versions.forget_job(id);
    store.job_versions.forget(id);
    let ts = store.fence.next_timestamp()?;
    for b in store.buckets(id).await? {
        store.exec("tasks", &store.s.del_bucket_tasks, (ts, id, b)).await?;
    }
    store.exec("task buckets", &store.s.del_buckets, (ts, id)).await?;
    store.exec("job configs", &store.s.del_configs, (ts, id)).await?;
    store.index_remove_all(id, &attrs, ts).await?;
    // The job row last: while it exists, a retry can finish the delete.
    store.exec("job", &store.s.del_job, (ts, id)).await?;
    Ok(())
}

/// `version, state, WRITETIME(state), latest_config_version` of a job row.
type MetaRow = (Option<i64>, Option<String>, Option<i64>, Option<i64>);

impl CassandraStore {
    /// The job row's versions and state as stored, `None` if there is none.
    async fn job_meta(&self, id: &str) -> Result<Option<JobMeta>> {
        let rows: Vec<MetaRow> = self.rows("job", &self.s.sel_job_meta, (id,)).await?;
        Ok(rows.into_iter().next().map(|(version, state, at, config)| JobMeta {
            version: version.map_or(0, |v| v.max(0) as u64),
            state: state.unwrap_or_default(),
            state_at: at.unwrap_or(0),
            config_version: config.map_or(0, |v| v.max(0) as u64),
        }))
    }

    /// Makes sure this handle knows job `id` (reading its row if not):
    /// [`StoreError::NotFound`] if there is no such job for readers.
    async fn know_job(&self, id: &str) -> Result<()> {
        match self.job_versions.lookup(id) {
            JobLookup::Known => Ok(()),
            JobLookup::Creating => Err(StoreError::not_found("job", id)),
            JobLookup::Unknown => match self.job_meta(id).await? {
                Some(m) if m.state != CREATING => {
                    self.job_versions.fill(id, m);
                    Ok(())
                }
                _ => Err(StoreError::not_found("job", id)),
            },
        }
    }
}

/// Follows the markers of creates a crash cut short: a row still
/// `CREATING` goes with everything written for it; the marker goes in
/// every case. Returns the ids removed.
pub(super) async fn remove_interrupted_creates(store: &CassandraStore) -> Result<Vec<String>> {
    store.fence_check().await?;
    let mut markers: Vec<(String, String)> = Vec::new();
    for s in 0..super::job_index::SHARDS {
        markers.extend(store.rows::<(String, String)>("job create markers", &store.s.sel_creates, (s,)).await?);
    }
    let mut removed = Vec::new();
    for (id, nonce) in markers {
        let state: Vec<(Option<String>, Option<i64>)> =
            store.rows("job", &store.s.sel_job_state, (id.as_str(),)).await?;
        if state.first().is_some_and(|(s, _)| s.as_deref() == Some(CREATING)) {
            remove_all(store, &id).await?;
            removed.push(id.clone());
        }
        store.exec("job create marker", &store.s.del_create, (shard(&id), id.as_str(), nonce.as_str())).await?;
    }
    Ok(removed)
}

pub(super) async fn add_job_config(store: &CassandraStore, id: &str, version: u64, config: &JobConfig) -> Result<()> {
    store.fence_check().await?;
    let body = encode_config(id, config)?;
    let labels = encode(|| format!("labels of job {id}"), &config.labels, limits::MAX_RECORD)?;
    if version < 2 {
        return Err(StoreError::Invalid(format!("config version {version}: versions after the first start at 2")));
    }
    // The latest version checked in this handle (decision 0049).
    store.know_job(id).await?;
    let index_ts = store.fence.next_timestamp()?;
    let ts = store.fence.next_timestamp()?;
    store.job_versions.take_config(id, version)?;
    // Entries before the write that makes them true; the old owner's,
    // pool's and labels' entries become stale and readers remove them.
    let values = (
        ts,
        &config.name,
        &config.owner,
        &config.pool,
        config.kind.as_str(),
        &labels,
        config.instance_count as i32,
        version as i64,
        id,
    );
    let written = async {
        store.index_add(id, &config_attrs(&config.owner, &config.pool, &config.labels), index_ts).await?;
        futures::try_join!(
            store.exec("job config", &store.s.upd_job_config, values),
            store.exec("job config", &store.s.ins_config, (id, version as i64, &body, ts)),
        )?;
        Ok::<_, StoreError>(())
    };
    if let Err(e) = written.await {
        store.job_versions.forget(id);
        return Err(e);
    }
    store.fence_check().await
}

pub(super) async fn get_job_config(store: &CassandraStore, id: &str, version: Option<u64>) -> Result<(u64, JobConfig)> {
    let rows: Vec<(i64, String)> = match version {
        Some(v) => store.rows("job config", &store.s.sel_config, (id, v as i64)).await?,
        None => store.rows("job config", &store.s.sel_config_latest, (id,)).await?,
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

pub(super) async fn get_job_runtime(store: &CassandraStore, id: &str) -> Result<JobRuntime> {
    let rows: Vec<(Option<String>, Option<String>)> = store.rows("job", &store.s.sel_job_runtime, (id,)).await?;
    let body = rows
        .into_iter()
        .next()
        .filter(|r| r.1.as_deref() != Some(CREATING))
        .and_then(|r| r.0)
        .ok_or_else(|| StoreError::not_found("job", id))?;
    decode(|| format!("runtime of job {id}"), &body)
}

/// Compare-and-set of a job runtime without Paxos (decision 0049): the
/// version checked in this handle's cache, the row written at the write
/// clock, the fence read again after the write; as [`super::tasks::cas_tasks`].
pub(super) async fn cas_job_runtime(
    store: &CassandraStore,
    id: &str,
    expected_version: u64,
    runtime: &JobRuntime,
) -> Result<JobRuntime> {
    store.fence_check_before().await?;
    check_id("job", id)?;
    runtime.validate()?;
    let mut stored = runtime.clone();
    stored.version = expected_version + 1;
    let body = encode(|| format!("runtime of job {id}"), &stored, limits::MAX_RECORD)?;
    store.know_job(id).await?;
    let state = stored.state.as_str();
    // The new state's index entry before the write that makes it true (a
    // smaller timestamp); the old state's removed after, at the timestamp
    // its state was written with, so an entry written again since (a job
    // back in that state) stays.
    let index_ts = store.fence.next_timestamp()?;
    let ts = store.fence.next_timestamp()?;
    let (old, old_at) = store.job_versions.take_runtime(id, expected_version, state, ts)?;
    let moved = old != state;
    let written = async {
        if moved {
            store.index_add(id, &[("state", state.to_string())], index_ts).await?;
        }
        let values = (ts, state, stored.version as i64, &body, id);
        store.exec(&format!("job {id}"), &store.s.put_job_runtime, values).await.map(drop)
    };
    if let Err(e) = written.await {
        // The outcome is unknown: the next write reads the row again (this
        // one, if it lands late, loses to it: its timestamp is smaller).
        store.job_versions.forget(id);
        return Err(StoreError::Unavailable(format!("job {id}: {e}")));
    }
    let removed = async {
        if moved && let Err(e) = store.index_remove_at(id, &[("state", old)], old_at).await {
            // Stale, not wrong: readers check entries against the row.
            tracing::warn!(job = %id, error = %e, "cassandra: old state's index entry not removed");
        }
        Ok(())
    };
    // After the write: a newer leader recorded before it was acknowledged
    // may not have seen it, so it is not reported made.
    futures::try_join!(store.fence_check(), removed)?;
    Ok(stored)
}

pub(super) async fn query_jobs(store: &CassandraStore, query: &JobQuery) -> Result<Page<JobSummary>> {
    check_page(query.limit)?;
    match plan(query) {
        Some(attrs) => store.query_indexed(query, &attrs, query.limit as usize).await,
        None => query_by_scan(store, query).await,
    }
}

/// Jobs in token order, filtered here, read until the page is full and
/// one more match is found: a listing with no filter, and the
/// benchmark's baseline for filtered queries.
pub(super) async fn query_by_scan(store: &CassandraStore, query: &JobQuery) -> Result<Page<JobSummary>> {
    check_page(query.limit)?;
    let mut items = Vec::new();
    let mut next = None;
    let limit = query.limit as usize;
    let mut take = |r: JobRow| -> Result<bool> {
        if creating(&r) {
            return Ok(true);
        }
        let s = job_summary(r)?;
        if !matches(query, &s) {
            return Ok(true);
        }
        if items.len() == limit {
            next = items.last().map(|s: &JobSummary| s.id.clone());
            return Ok(false);
        }
        items.push(s);
        Ok(true)
    };
    match &query.cursor {
        Some(c) => store.scan_until("jobs", &store.s.sel_jobs_after, (c.as_str(),), &mut take).await?,
        None => store.scan_until("jobs", &store.s.sel_jobs, (), &mut take).await?,
    }
    Ok(Page { items, next })
}

/// The live jobs, from the live states' index partitions.
pub(super) async fn live_jobs(store: &CassandraStore) -> Result<Vec<JobSummary>> {
    let query = JobQuery {
        states: paceline_model::job::JobState::ALL.into_iter().filter(|s| !s.is_terminal()).collect(),
        ..Default::default()
    };
    let mut out = match store.query_indexed(&query, &live_states(), usize::MAX - 1).await {
        Ok(page) => page.items,
        Err(e) => {
            // Recovery must not depend on the index (a partition the node
            // refuses to read, too many tombstones): the scan is slower, not wrong.
            tracing::warn!(error = %e, "cassandra: live jobs not read from the index; scanning every job");
            let mut out = Vec::new();
            let mut q = JobQuery { limit: crate::types::limits::MAX_PAGE, ..query };
            loop {
                let page = query_by_scan(store, &q).await?;
                out.extend(page.items);
                match page.next {
                    Some(c) => q.cursor = Some(c),
                    None => break out,
                }
            }
        }
    };
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

pub(super) async fn delete_job(store: &CassandraStore, id: &str) -> Result<()> {
    store.fence_check().await?;
    if !store.job_exists(id).await? {
        return Err(StoreError::not_found("job", id));
    }
    let instances: Vec<u32> = if store.legacy_events() {
        store.tasks_of_job(id, &[]).await?.iter().map(|t| t.instance).collect()
    } else {
        Vec::new()
    };
    super::events::delete_task_events(store, id, &instances).await?;
    super::job_events::delete_job_events(store, id).await?;
    remove_all(store, id).await
}
