//! Update workflows: the `updates` row claimed and changed by lightweight
//! transactions, its index by job (`updates_by_job`), and per-instance
//! progress in bucketed partitions like tasks.

use std::collections::BTreeSet;

use paceline_model::job::{InstanceProgress, Update};

use super::exec::Lwt;
use super::{CassandraStore, bucket};
use crate::error::{Result, StoreError};
use crate::store::Store;
use crate::types::{check_id, decode, encode, limits};
use crate::validate;

pub(super) async fn create_update(store: &CassandraStore, update: &Update) -> Result<Update> {
    store.fence_check().await?;
    update.validate()?;
    check_id("update", &update.id)?;
    let mut stored = update.clone();
    stored.version = 1;
    let body = encode(|| format!("update {}", update.id), &stored, limits::MAX_JOB_CONFIG)?;
    if !store.job_exists(&update.job_id).await? {
        return Err(StoreError::not_found("job", &update.job_id));
    }
    match store.lwt_once("update", &store.s.ins_update, &(&stored.id, &stored.job_id, &body)).await {
        Ok(Lwt::Applied) => {}
        Ok(Lwt::NotApplied(_)) => return Err(StoreError::exists("update", &stored.id)),
        Err((_, e)) => return Err(e),
    }
    store.exec("update", &store.s.ins_update_by_job, (&stored.job_id, stored.created_at_ms as i64, &stored.id)).await?;
    Ok(stored)
}

pub(super) async fn get_update(store: &CassandraStore, id: &str) -> Result<Update> {
    let rows: Vec<(String,)> = store.rows("update", &store.s.sel_update, (id,)).await?;
    let (body,) = rows.into_iter().next().ok_or_else(|| StoreError::not_found("update", id))?;
    decode(|| format!("update {id}"), &body)
}

pub(super) async fn cas_update(
    store: &CassandraStore,
    id: &str,
    expected_version: u64,
    update: &Update,
) -> Result<Update> {
    store.fence_check().await?;
    update.validate()?;
    if update.id != id {
        return Err(StoreError::Invalid(format!("update id `{}` differs from `{id}`", update.id)));
    }
    let mut stored = update.clone();
    stored.version = expected_version + 1;
    let body = encode(|| format!("update {id}"), &stored, limits::MAX_JOB_CONFIG)?;
    let values = (stored.version as i64, &body, id, expected_version as i64);
    store
        .cas(
            &format!("update {id}"),
            &store.s.cas_update,
            values,
            &store.s.sel_update_serial,
            (id,),
            expected_version,
            &body,
        )
        .await
        .map_err(|e| match e {
            StoreError::NotFound { .. } => StoreError::not_found("update", id),
            e => e,
        })?;
    Ok(stored)
}

pub(super) async fn updates_of_job(store: &CassandraStore, job_id: &str) -> Result<Vec<Update>> {
    let ids: Vec<(String,)> = store.rows("updates", &store.s.sel_updates_of_job, (job_id,)).await?;
    let mut out = Vec::with_capacity(ids.len());
    for (id,) in ids {
        match store.get_update(&id).await {
            Ok(u) => out.push(u),
            // An index row whose update was never written (a crash
            // between the two writes) is skipped.
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

pub(super) async fn put_update_progress(
    store: &CassandraStore,
    update_id: &str,
    progress: &[InstanceProgress],
) -> Result<()> {
    store.fence_check().await?;
    check_id("update", update_id)?;
    let mut rows = Vec::with_capacity(progress.len());
    let mut buckets = BTreeSet::new();
    for p in progress {
        validate::instance(p.instance)?;
        let body = encode(|| format!("progress of update {update_id}"), p, limits::MAX_RECORD)?;
        let b = bucket(p.instance);
        buckets.insert(b);
        rows.push((b, body.len() + 32, (update_id.to_string(), b, p.instance as i32, body)));
    }
    if store.rows::<(String,)>("update", &store.s.sel_update, (update_id,)).await?.is_empty() {
        return Err(StoreError::not_found("update", update_id));
    }
    for b in buckets {
        store.exec("progress bucket", &store.s.ins_progress_bucket, (update_id, b)).await?;
    }
    store.batched("update progress", &store.s.ins_progress, rows).await
}

pub(super) async fn update_progress(store: &CassandraStore, update_id: &str) -> Result<Vec<InstanceProgress>> {
    let buckets: Vec<(i32,)> = store.rows("progress buckets", &store.s.sel_progress_buckets, (update_id,)).await?;
    let mut out: Vec<InstanceProgress> = Vec::new();
    for (b,) in buckets {
        let rows: Vec<(String,)> = store.rows("update progress", &store.s.sel_progress, (update_id, b)).await?;
        for (body,) in rows {
            out.push(decode(|| format!("progress of update {update_id}"), &body)?);
        }
    }
    out.sort_by_key(|p| p.instance);
    Ok(out)
}
