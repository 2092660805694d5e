//! Jobs: the `jobs` row (runtime and the summary columns queries read)
//! claimed by a lightweight transaction, config versions in `job_configs`,
//! the compare-and-set of the runtime, queries by a paged scan filtered
//! here, and deletion of a job with everything under it.

use futures::{StreamExt, TryStreamExt};
use paceline_model::job::{JobConfig, JobRuntime};

use super::exec::Lwt;
use super::{CONCURRENCY, CassandraStore};
use crate::error::{Result, StoreError};
use crate::store::Store;
use crate::types::{
    JobQuery, JobSummary, NewJob, Page, check_id, check_page, decode, encode, encode_config, limits, matches, new_job,
    to_summary,
};

type JobRow = (String, String, String, String, String, String, i32, i64, String);

/// Cassandra has no unsigned integers; the summary columns are `int` and `bigint`.
fn job_summary(r: JobRow) -> Result<JobSummary> {
    let (id, name, owner, pool, kind, labels, instance_count, latest, runtime) = r;
    to_summary((id, name, owner, pool, kind, labels, instance_count as u32, latest as u64, runtime))
}

impl CassandraStore {
    pub(super) async fn job_exists(&self, id: &str) -> Result<bool> {
        Ok(!self.rows::<(String,)>("job", &self.s.sel_job_exists, (id,)).await?.is_empty())
    }
}

pub(super) async fn create_job(
    store: &CassandraStore,
    id: &str,
    config: &JobConfig,
    runtime: &JobRuntime,
) -> Result<JobRuntime> {
    store.fence_check().await?;
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
    match store.lwt_once("create job", &store.s.ins_job, &values).await {
        Ok(Lwt::Applied) => {}
        Ok(Lwt::NotApplied(_)) => return Err(StoreError::exists("job", id)),
        Err((_, e)) => {
            // Unknown outcome: it is ours if the row holds our runtime.
            let current: Vec<(i64, String)> = store.rows("job", &store.s.sel_job_serial, (id,)).await?;
            if current.first().is_none_or(|(_, b)| *b != rt_body) {
                return Err(e);
            }
        }
    }
    store.exec("job config", &store.s.ins_config, (id, 1i64, &body)).await?;
    Ok(rt)
}

pub(super) async fn add_job_config(store: &CassandraStore, id: &str, version: u64, config: &JobConfig) -> Result<()> {
    store.fence_check().await?;
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
    let rows: Vec<(Option<String>,)> = store.rows("job", &store.s.sel_job_runtime, (id,)).await?;
    let body = rows.into_iter().next().and_then(|r| r.0).ok_or_else(|| StoreError::not_found("job", id))?;
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
    let values = (stored.state.as_str(), stored.version as i64, &body, id, expected_version as i64);
    store
        .cas(&format!("job {id}"), &store.s.cas_job, values, &store.s.sel_job_serial, (id,), expected_version, &body)
        .await
        .map_err(|e| match e {
            StoreError::NotFound { .. } => StoreError::not_found("job", id),
            e => e,
        })?;
    Ok(stored)
}

pub(super) async fn query_jobs(store: &CassandraStore, query: &JobQuery) -> Result<Page<JobSummary>> {
    check_page(query.limit)?;
    // Jobs are few (thousands, not millions) next to tasks: a paged scan
    // in token order filtered here beats secondary indexes, which
    // Cassandra answers by asking every node.
    let rows: Vec<JobRow> = match &query.cursor {
        Some(c) => store.scan("jobs", &store.s.sel_jobs_after, (c.as_str(),)).await?,
        None => store.scan("jobs", &store.s.sel_jobs, ()).await?,
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

pub(super) async fn live_jobs(store: &CassandraStore) -> Result<Vec<JobSummary>> {
    let rows: Vec<JobRow> = store.scan("jobs", &store.s.sel_jobs, ()).await?;
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
    for b in store.buckets(id).await? {
        store.exec("tasks", &store.s.del_bucket_tasks, (id, b)).await?;
    }
    store.exec("task buckets", &store.s.del_buckets, (id,)).await?;
    store.exec("job configs", &store.s.del_configs, (id,)).await?;
    super::job_events::delete_job_events(store, id).await?;
    // The job row last: while it exists, a retry can finish the delete.
    store.exec("job", &store.s.del_job, (id,)).await?;
    Ok(())
}
