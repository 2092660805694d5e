//! Jobs: the `jobs` row (runtime and the summary columns queries read),
//! config versions in `job_configs`, the compare-and-set of the runtime,
//! queries (through the index of `job_index`, or a paged scan when a query
//! names no filter), and deletion of a job with everything under it.
//!
//! A create is all or nothing for readers (decision 0033): a marker in
//! `job_creates` first, then the row claimed by a lightweight transaction
//! with `state = 'CREATING'` (no read returns such a row), the index
//! entries, config version 1 and the tasks, and last a second lightweight
//! transaction that sets the real state: the moment the job exists. A
//! crash in between leaves a marker that [`remove_interrupted_creates`]
//! follows at the next leader's start to remove what was written.

use futures::{StreamExt, TryStreamExt};
use paceline_model::job::{JobConfig, JobRuntime};

use paceline_model::task::TaskRuntime;

use super::exec::Lwt;
use super::job_index::{CREATING, config_attrs, live_states, plan, shard};
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
    store.fence_check().await?;
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
    let nonce = nonce();
    store
        .exec("job create marker", &store.s.ins_create, (shard(id), id, nonce.as_str(), crate::types::now_ms() as i64))
        .await?;
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
    );
    let claimed = match store.lwt_once("create job", &store.s.ins_job, &values).await {
        Ok(Lwt::Applied) => Ok(()),
        Ok(Lwt::NotApplied(_)) => Err(StoreError::exists("job", id)),
        Err((_, e)) => {
            // Unknown outcome: it is ours if the row holds our runtime and
            // is still being created.
            let current: Vec<(i64, String)> = store.rows("job", &store.s.sel_job_serial, (id,)).await?;
            let (exists, _) = store.job_summary_of(id).await?;
            if current.first().is_none_or(|(_, b)| *b != rt_body) || exists.is_some() { Err(e) } else { Ok(()) }
        }
    };
    if let Err(e) = claimed {
        let _ = store.exec("job create marker", &store.s.del_create, (shard(id), id, nonce.as_str())).await;
        return Err(e);
    }
    match finish_create(store, id, config, &rt, &body, &rows).await {
        Ok(()) => {
            // A marker left by a failure here only costs the next leader a read.
            let _ = store.exec("job create marker", &store.s.del_create, (shard(id), id, nonce.as_str())).await;
            Ok(rt)
        }
        Err(e) => {
            // Nothing was acknowledged: take back what was written. If that
            // fails too, the marker leads the next leader's start to it.
            if remove_all(store, id).await.is_ok() {
                let _ = store.exec("job create marker", &store.s.del_create, (shard(id), id, nonce.as_str())).await;
            }
            Err(e)
        }
    }
}

/// Everything after the claim: index entries, config 1, tasks, and the
/// state that makes the job visible.
async fn finish_create(
    store: &CassandraStore,
    id: &str,
    config: &JobConfig,
    rt: &JobRuntime,
    body: &str,
    tasks: &[(u32, TaskRuntime)],
) -> Result<()> {
    let mut attrs = config_attrs(&config.owner, &config.pool, &config.labels);
    attrs.push(("state", rt.state.as_str().to_string()));
    store.index_add(id, &attrs).await?;
    store.exec("job config", &store.s.ins_config, (id, 1i64, body)).await?;
    crate::crash::point("create-job.before-tasks");
    if !tasks.is_empty() {
        store.put_tasks_unconditional(id, tasks).await?;
    }
    crate::crash::point("create-job.before-commit");
    let state = rt.state.as_str();
    match store.lwt_once("create job", &store.s.commit_job, &(state, id, CREATING)).await {
        Ok(Lwt::Applied) => Ok(()),
        Ok(Lwt::NotApplied(_)) => {
            Err(StoreError::Backend(format!("create of job {id}: its row was removed or changed while it was written")))
        }
        Err((_, e)) => {
            let now: Vec<(Option<String>, Option<i64>)> = store.rows("job", &store.s.sel_job_state, (id,)).await?;
            match now.first() {
                Some((Some(s), _)) if s == state => Ok(()),
                _ => Err(e),
            }
        }
    }
}

/// Removes a job and everything under it, whatever its state (a create
/// cut short included).
async fn remove_all(store: &CassandraStore, id: &str) -> Result<()> {
    let attrs = match store.rows::<JobRow>("job", &store.s.sel_job_summary, (id,)).await?.into_iter().next() {
        Some(r) => {
            let labels = decode(|| format!("labels of job {id}"), &r.5).unwrap_or_default();
            config_attrs(&r.2, &r.3, &labels)
        }
        None => Vec::new(),
    };
    store.versions.forget_job(id);
    for b in store.buckets(id).await? {
        // At the write clock, as every write of a task row (decision 0049):
        // a delete at the node's own time would not hide them.
        let ts = store.fence.next_timestamp()?;
        store.exec("tasks", &store.s.del_bucket_tasks, (ts, id, b)).await?;
    }
    store.exec("task buckets", &store.s.del_buckets, (id,)).await?;
    store.exec("job configs", &store.s.del_configs, (id,)).await?;
    store.index_remove_all(id, &attrs).await?;
    // The job row last: while it exists, a retry can finish the delete.
    store.exec("job", &store.s.del_job, (id,)).await?;
    Ok(())
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
    if !store.job_exists(id).await? {
        return Err(StoreError::not_found("job", id));
    }
    // Entries before the write that makes them true; the old owner's,
    // pool's and labels' entries become stale and readers remove them.
    store.index_add(id, &config_attrs(&config.owner, &config.pool, &config.labels)).await?;
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
    match store.lwt_once("job config", &store.s.upd_job_config, &values).await {
        Ok(Lwt::Applied) => {}
        Ok(Lwt::NotApplied(_)) if !store.job_exists(id).await? => return Err(StoreError::not_found("job", id)),
        Ok(Lwt::NotApplied(_)) => {
            let (latest, _) = store.get_job_config(id, None).await?;
            return Err(StoreError::conflict(format!("config of job {id}"), version - 1, Some(latest)));
        }
        Err((_, e)) => return Err(e),
    }
    store.exec("job config", &store.s.ins_config, (id, version as i64, &body)).await?;
    Ok(())
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

pub(super) async fn cas_job_runtime(
    store: &CassandraStore,
    id: &str,
    expected_version: u64,
    runtime: &JobRuntime,
) -> Result<JobRuntime> {
    store.fence_check().await?;
    check_id("job", id)?;
    runtime.validate()?;
    let mut stored = runtime.clone();
    stored.version = expected_version + 1;
    let body = encode(|| format!("runtime of job {id}"), &stored, limits::MAX_RECORD)?;
    // The new state's index entry before the write that makes it true;
    // the old state's removed after, written no later than the old state
    // was (an entry written again since, for a job back in that state, stays).
    let before: Vec<(Option<String>, Option<i64>)> = store.rows("job", &store.s.sel_job_state, (id,)).await?;
    let old = match before.into_iter().next() {
        Some((Some(s), _)) if s == CREATING => return Err(StoreError::not_found("job", id)),
        Some((Some(s), Some(at))) if s != stored.state.as_str() => Some((s, at)),
        Some(_) => None,
        None => return Err(StoreError::not_found("job", id)),
    };
    if old.is_some() {
        store.index_add(id, &[("state", stored.state.as_str().to_string())]).await?;
    }
    let values = (stored.state.as_str(), stored.version as i64, &body, id, expected_version as i64);
    store
        .cas(&format!("job {id}"), &store.s.cas_job, values, &store.s.sel_job_serial, (id,), expected_version, &body)
        .await
        .map_err(|e| match e {
            StoreError::NotFound { .. } => StoreError::not_found("job", id),
            e => e,
        })?;
    if let Some((state, at)) = old
        && let Err(e) = store.index_remove_at(id, &[("state", state)], at).await
    {
        // Stale, not wrong: readers check entries against the row.
        tracing::warn!(job = %id, error = %e, "cassandra: old state's index entry not removed");
    }
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
    let tasks = store.tasks_of_job(id, &[]).await?;
    let instances: Vec<u32> = tasks.iter().map(|t| t.instance).collect();
    futures::stream::iter(instances)
        .map(|i: u32| store.exec("task events", &store.s.del_events, (id, i as i32)))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    super::job_events::delete_job_events(store, id).await?;
    remove_all(store, id).await
}
