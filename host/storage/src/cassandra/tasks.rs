//! Task runtimes: rows bucketed by instance ([`super::TASK_BUCKET`] per
//! partition) with a marker row per bucket in `job_task_buckets` so that
//! listings find them, created in batches and changed by lightweight
//! transactions (each bucket's writes in order, buckets in parallel).

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, TryStreamExt};
use paceline_model::task::{TaskRuntime, TaskState};

use super::{CONCURRENCY, CassandraStore, bucket, task_what};
use crate::error::{Result, StoreError};
use crate::store::Store;
use crate::types::{TaskCas, TaskRecord, check_id, decode, encode, limits};
use crate::validate;

impl CassandraStore {
    pub(super) async fn buckets(&self, job_id: &str) -> Result<Vec<i32>> {
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

pub(super) async fn create_tasks(store: &CassandraStore, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()> {
    store.fence_check().await?;
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
    if !store.job_exists(job_id).await? {
        return Err(StoreError::not_found("job", job_id));
    }
    // Refuse existing instances before writing anything. Not atomic with
    // the writes (Cassandra has no multi-partition transactions): the job
    // manager creates a job's tasks from one leader, and a retry of the
    // same call finds only its own rows.
    let buckets: Vec<i32> = wanted.keys().copied().collect();
    let existing = futures::stream::iter(buckets)
        .map(|b: i32| store.rows::<(i32,)>("tasks", &store.s.sel_bucket_instances, (job_id, b)))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    for (i,) in existing.into_iter().flatten() {
        if wanted.get(&bucket(i as u32)).is_some_and(|s| s.contains(&(i as u32))) {
            return Err(StoreError::exists("task", format!("{job_id}/{i}")));
        }
    }
    store.put_tasks_unconditional(job_id, &rows).await
}

pub(super) async fn get_task(store: &CassandraStore, job_id: &str, instance: u32) -> Result<TaskRuntime> {
    let rows: Vec<(Option<String>,)> =
        store.rows("task", &store.s.sel_task, (job_id, bucket(instance), instance as i32)).await?;
    let body = rows
        .into_iter()
        .next()
        .and_then(|r| r.0)
        .ok_or_else(|| StoreError::not_found("task", format!("{job_id}/{instance}")))?;
    decode(|| task_what(job_id, instance), &body)
}

pub(super) async fn cas_task(
    store: &CassandraStore,
    job_id: &str,
    instance: u32,
    expected_version: u64,
    runtime: &TaskRuntime,
) -> Result<TaskRuntime> {
    store.fence_check().await?;
    check_id("job", job_id)?;
    runtime.validate()?;
    let mut stored = runtime.clone();
    stored.version = expected_version + 1;
    let body = encode(|| task_what(job_id, instance), &stored, limits::MAX_RECORD)?;
    let b = bucket(instance);
    let values =
        (stored.state.as_str(), stored.version as i64, &body, job_id, b, instance as i32, expected_version as i64);
    store
        .cas(
            &task_what(job_id, instance),
            &store.s.cas_task,
            values,
            &store.s.sel_task_serial,
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

pub(super) async fn cas_tasks(store: &CassandraStore, job_id: &str, writes: &[TaskCas]) -> Result<Vec<Result<u64>>> {
    store.fence_check().await?;
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
                    store.cas_task(job_id, w.instance, w.expected_version, &w.runtime).await.map(|r| r.version),
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

pub(super) async fn tasks_of_job(
    store: &CassandraStore,
    job_id: &str,
    states: &[TaskState],
) -> Result<Vec<TaskRecord>> {
    let buckets = store.buckets(job_id).await?;
    let parts = futures::stream::iter(buckets)
        .map(|b| store.rows::<(i32, String, String)>("tasks", &store.s.sel_bucket_tasks, (job_id, b)))
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
