//! Task runtimes: rows bucketed by instance ([`super::TASK_BUCKET`] per
//! partition) with a marker row per bucket in `job_task_buckets` so that
//! listings find them, created and changed in unlogged batches per
//! partition at the fenced write clock's timestamps, their versions checked
//! in the handle's cache (decision 0049; [`cas_tasks`]).

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, TryStreamExt};
use paceline_model::task::{TaskRuntime, TaskState};

use super::{CONCURRENCY, CassandraStore, bucket, task_what};
use crate::error::{Result, StoreError};
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
    /// versions they carry, at the write clock's timestamps. Used by
    /// [`Store::create_tasks`], and by the benchmark to measure writes
    /// without any version check. Not a compare-and-set: do not use it
    /// beside concurrent writers.
    pub async fn put_tasks_unconditional(&self, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()> {
        self.fence_check().await?;
        self.write_tasks(job_id, tasks).await
    }

    /// [`CassandraStore::put_tasks_unconditional`] without its fence read
    /// (a job create has made it).
    pub(super) async fn write_tasks(&self, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()> {
        check_id("job", job_id)?;
        let mut rows = Vec::with_capacity(tasks.len());
        let mut buckets = BTreeSet::new();
        for (instance, rt) in tasks {
            validate::instance(*instance)?;
            rt.validate()?;
            let body = encode(|| task_what(job_id, *instance), rt, limits::MAX_RECORD)?.into_bytes();
            buckets.insert(bucket(*instance));
            let size = body.len() + job_id.len() + 32;
            let ts = self.fence.next_timestamp()?;
            rows.push((
                bucket(*instance),
                size,
                (
                    job_id.to_string(),
                    bucket(*instance),
                    *instance as i32,
                    rt.state.as_str(),
                    rt.version as i64,
                    body,
                    ts,
                ),
            ));
        }
        // Whatever happens below, this handle's versions of these tasks are
        // now those written (or unknown, if the write fails).
        let versions: Vec<(u32, u64)> = tasks.iter().map(|(i, rt)| (*i, rt.version)).collect();
        // Bucket markers first: a task row is never invisible to listings.
        let ts = self.fence.next_timestamp()?;
        futures::stream::iter(buckets)
            .map(|b| self.exec("task bucket", &self.s.ins_bucket, (job_id, b, ts)))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        let written = self.batched("tasks", &self.s.ins_task, rows).await;
        match &written {
            Ok(()) => self.versions.set(job_id, &versions),
            Err(_) => self.versions.forget_job(job_id),
        }
        written
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
    let rows: Vec<(Option<String>, Option<Vec<u8>>)> =
        store.rows("task", &store.s.sel_task, (job_id, bucket(instance), instance as i32)).await?;
    match rows.into_iter().next() {
        // A row with neither column (a partial write's leftover) is no task.
        None | Some((None, None)) => Err(StoreError::not_found("task", format!("{job_id}/{instance}"))),
        Some((runtime, body)) => decode_task(job_id, instance, runtime, body),
    }
}

/// The values of `ins_task`: job, bucket, instance, state, version, runtime, timestamp.
// (The state is owned: a borrowed one here trips the compiler's
// higher-ranked lifetime check of the async trait's future.)
type TaskRow = (String, i32, i32, String, i64, Vec<u8>, i64);

/// A stored task runtime: `body` (a blob, schema 9) where it is set, else
/// `runtime` (text: rows written before schema 9, and `bench storage`'s
/// Paxos baseline).
fn decode_task(job_id: &str, instance: u32, runtime: Option<String>, body: Option<Vec<u8>>) -> Result<TaskRuntime> {
    let what = || task_what(job_id, instance);
    match (body, runtime) {
        (Some(body), _) => {
            serde_json::from_slice(&body).map_err(|e| StoreError::Corrupt { what: what(), reason: e.to_string() })
        }
        (None, Some(text)) => decode(what, &text),
        (None, None) => Err(StoreError::Corrupt { what: what(), reason: "the row holds no runtime".into() }),
    }
}

/// Compare-and-set of one task runtime: [`cas_tasks`] with one write.
pub(super) async fn cas_task(
    store: &CassandraStore,
    job_id: &str,
    instance: u32,
    expected_version: u64,
    runtime: &TaskRuntime,
) -> Result<TaskRuntime> {
    let w = TaskCas { instance, expected_version, runtime: runtime.clone() };
    let version = cas_tasks(store, job_id, std::slice::from_ref(&w))
        .await?
        .pop()
        .unwrap_or_else(|| Err(StoreError::Backend("internal: a write of the batch was not run".into())))?;
    let mut stored = runtime.clone();
    stored.version = version;
    Ok(stored)
}

/// Compare-and-sets of task runtimes without Paxos (decision 0049). The
/// versions are checked in this handle's cache of them (filled from the
/// database, a bucket at a time, on first use), where each accepted write
/// takes the next version at once, so two concurrent calls expecting the
/// same version cannot both pass. The rows are then written in unlogged
/// batches per partition at the write clock's timestamps, and the fence is
/// read again after the writes: a write acknowledged to the caller was made
/// before any newer leader claimed, so that leader's recovery reads it; a
/// write of a deposed leader landing later carries a smaller timestamp than
/// anything the new leader writes, and loses to it.
///
/// The check is exact for the writes of this handle, which is the one
/// writer of the keyspace: the fenced leader, or a server without election.
/// Two handles writing the same tasks at once (not fenced against each
/// other) would both pass their checks, and the later timestamp win.
pub(super) async fn cas_tasks(store: &CassandraStore, job_id: &str, writes: &[TaskCas]) -> Result<Vec<Result<u64>>> {
    store.fence_check_before().await?;
    // Fault injection only (the deposed-leader test): a pause here, kept
    // until the writes below are done.
    let _held = super::fault::hold_while_exists(store.hold_runtime_writes.as_deref()).await;
    check_id("job", job_id)?;
    let mut bodies = Vec::with_capacity(writes.len());
    for w in writes {
        validate::instance(w.instance)?;
        w.runtime.validate()?;
        let mut stored = w.runtime.clone();
        stored.version = w.expected_version + 1;
        bodies.push(encode(|| task_what(job_id, w.instance), &stored, limits::MAX_RECORD)?.into_bytes());
    }
    // Versions of the buckets this handle has not seen yet, from the database.
    let missing = store.versions.missing_buckets(job_id, writes.iter().map(|w| w.instance));
    let read = futures::stream::iter(missing)
        .map(|b: i32| async move {
            let rows = store.rows::<(i32, Option<i64>)>("tasks", &store.s.sel_bucket_versions, (job_id, b)).await?;
            Ok::<_, StoreError>((b, rows))
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    for (b, rows) in read {
        store.versions.fill(job_id, b, rows.into_iter().map(|(i, v)| (i as u32, v.map_or(0, |v| v.max(0) as u64))));
    }
    // Check and take the versions, in the order of the writes; each write
    // taken gets its timestamp in the same order, so that a later write of
    // the same task in this call wins.
    let mut results: Vec<Result<u64>> = Vec::with_capacity(writes.len());
    let mut rows: Vec<(i32, usize, TaskRow)> = Vec::new();
    let mut taken: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (i, (w, body)) in writes.iter().zip(bodies).enumerate() {
        match store.versions.take(job_id, w.instance, w.expected_version) {
            Err(e) => results.push(Err(e)),
            Ok(()) => {
                let ts = store.fence.next_timestamp()?;
                let b = bucket(w.instance);
                let version = w.expected_version + 1;
                let size = body.len() + job_id.len() + 40;
                rows.push((
                    b,
                    size,
                    (
                        job_id.to_string(),
                        b,
                        w.instance as i32,
                        w.runtime.state.as_str().to_string(),
                        version as i64,
                        body,
                        ts,
                    ),
                ));
                taken.entry(b).or_default().push(i);
                results.push(Ok(version));
            }
        }
    }
    // One batch stream per partition; a partition's failure fails only its writes.
    let mut by_bucket: BTreeMap<i32, Vec<(i32, usize, TaskRow)>> = BTreeMap::new();
    for row in rows {
        by_bucket.entry(row.0).or_default().push(row);
    }
    let outcomes = futures::stream::iter(by_bucket)
        .map(|(b, rows): (i32, Vec<(i32, usize, TaskRow)>)| async move {
            (b, store.batched("task runtimes", &store.s.ins_task, rows).await)
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    for (b, outcome) in outcomes {
        if let Err(e) = outcome {
            // The outcome is unknown: forget the versions, so that the next
            // write reads them from the database (this one, if it landed
            // late, then loses to it: its timestamp is smaller).
            store.versions.forget_bucket(job_id, b);
            let msg = e.to_string();
            for &i in taken.get(&b).into_iter().flatten() {
                results[i] = Err(StoreError::Unavailable(format!("{}: {msg}", task_what(job_id, writes[i].instance))));
            }
        }
    }
    // After the writes: a newer leader recorded before they were
    // acknowledged may not have seen them, so none is reported written.
    if !taken.is_empty() {
        store.fence_check().await?;
    }
    Ok(results)
}

impl CassandraStore {
    /// Creates task rows at the node's time (no `USING TIMESTAMP`), as
    /// before decision 0049, for [`CassandraStore::cas_tasks_lwt`]: a Paxos
    /// write carries the node's time too, and would be hidden under rows
    /// written at the write clock, which is above it. `bench storage` only.
    pub async fn create_tasks_for_lwt_baseline(&self, job_id: &str, tasks: &[(u32, TaskRuntime)]) -> Result<()> {
        check_id("job", job_id)?;
        let mut rows = Vec::with_capacity(tasks.len());
        for (instance, rt) in tasks {
            let mut rt = rt.clone();
            rt.version = 1;
            let body = encode(|| task_what(job_id, *instance), &rt, limits::MAX_RECORD)?;
            let b = bucket(*instance);
            let ts = self.fence.next_timestamp()?;
            self.exec("task bucket", &self.s.ins_bucket, (job_id, b, ts)).await?;
            let size = body.len() + job_id.len() + 32;
            rows.push((b, size, (job_id.to_string(), b, *instance as i32, rt.state.as_str(), rt.version as i64, body)));
        }
        self.batched("tasks", &self.s.ins_task_node_time, rows).await
    }

    /// The compare-and-set of task runtimes by Paxos, as it was before
    /// decision 0049 (each bucket's writes in order, buckets in parallel):
    /// `bench storage`'s baseline, on tasks made by
    /// [`CassandraStore::create_tasks_for_lwt_baseline`]. Not used by the
    /// `Store` methods, and not coherent with their version cache: use it on
    /// a job of its own.
    pub async fn cas_tasks_lwt(&self, job_id: &str, writes: &[TaskCas]) -> Result<Vec<Result<u64>>> {
        self.fence_check().await?;
        check_id("job", job_id)?;
        for w in writes {
            w.runtime.validate()?;
        }
        let mut by_bucket: BTreeMap<i32, Vec<(usize, TaskCas)>> = BTreeMap::new();
        for (i, w) in writes.iter().enumerate() {
            by_bucket.entry(bucket(w.instance)).or_default().push((i, w.clone()));
        }
        let groups: Vec<Vec<(usize, TaskCas)>> = by_bucket.into_values().collect();
        let done = futures::stream::iter(groups)
            .map(|group: Vec<(usize, TaskCas)>| async move {
                let mut out = Vec::with_capacity(group.len());
                for (i, w) in group {
                    out.push((i, cas_task_lwt(self, job_id, w.instance, w.expected_version, &w.runtime).await));
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
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(StoreError::Backend("internal: a write of the batch was not run".into()))))
            .collect())
    }
}

async fn cas_task_lwt(
    store: &CassandraStore,
    job_id: &str,
    instance: u32,
    expected_version: u64,
    runtime: &TaskRuntime,
) -> Result<u64> {
    let mut stored = runtime.clone();
    stored.version = expected_version + 1;
    let body = encode(|| task_what(job_id, instance), &stored, limits::MAX_RECORD)?;
    let b = bucket(instance);
    let values =
        (stored.state.as_str(), stored.version as i64, &body, job_id, b, instance as i32, expected_version as i64);
    store
        .cas(
            &task_what(job_id, instance),
            &store.s.cas_task_lwt,
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
    Ok(stored.version)
}

pub(super) async fn tasks_of_job(
    store: &CassandraStore,
    job_id: &str,
    states: &[TaskState],
) -> Result<Vec<TaskRecord>> {
    let buckets = store.buckets(job_id).await?;
    let parts = futures::stream::iter(buckets)
        .map(|b| {
            store.rows::<(i32, String, Option<String>, Option<Vec<u8>>)>(
                "tasks",
                &store.s.sel_bucket_tasks,
                (job_id, b),
            )
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let wanted: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
    let mut out = Vec::new();
    for (instance, state, runtime, body) in parts.into_iter().flatten() {
        if wanted.is_empty() || wanted.contains(&state.as_str()) {
            let instance = instance as u32;
            out.push(TaskRecord { instance, runtime: decode_task(job_id, instance, runtime, body)? });
        }
    }
    out.sort_by_key(|t| t.instance);
    Ok(out)
}
