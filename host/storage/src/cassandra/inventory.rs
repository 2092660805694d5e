//! Keyed whole records without versions: resource pools (opaque specs),
//! the host inventory, and provider ids. Each is written whole and read
//! back as written; listings scan the (small) table and sort here.

use paceline_model::host::HostRecord;

use super::CassandraStore;
use crate::error::{Result, StoreError};
use crate::types::{check_id, decode, encode, limits};
use crate::validate;

pub(super) async fn put_pool(store: &CassandraStore, path: &str, spec: &[u8]) -> Result<()> {
    store.fence_check().await?;
    validate::pool(path, spec)?;
    store.exec("pool", &store.s.ins_pool, (path, spec)).await?;
    Ok(())
}

pub(super) async fn get_pool(store: &CassandraStore, path: &str) -> Result<Vec<u8>> {
    let rows: Vec<(Vec<u8>,)> = store.rows("pool", &store.s.sel_pool, (path,)).await?;
    rows.into_iter().next().map(|r| r.0).ok_or_else(|| StoreError::not_found("pool", path))
}

pub(super) async fn list_pools(store: &CassandraStore) -> Result<Vec<(String, Vec<u8>)>> {
    let mut rows: Vec<(String, Vec<u8>)> = store.scan("pools", &store.s.sel_pools, ()).await?;
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(rows)
}

pub(super) async fn delete_pool(store: &CassandraStore, path: &str) -> Result<()> {
    store.fence_check().await?;
    store.exec("pool", &store.s.del_pool, (path,)).await?;
    Ok(())
}

pub(super) async fn put_host(store: &CassandraStore, host: &HostRecord) -> Result<()> {
    store.fence_check().await?;
    validate::host(host)?;
    let body = encode(|| format!("host {}", host.hostname), host, limits::MAX_RECORD)?;
    store.exec("host", &store.s.ins_host, (&host.hostname, &body)).await?;
    Ok(())
}

pub(super) async fn get_host(store: &CassandraStore, hostname: &str) -> Result<HostRecord> {
    let rows: Vec<(String,)> = store.rows("host", &store.s.sel_host, (hostname,)).await?;
    let (body,) = rows.into_iter().next().ok_or_else(|| StoreError::not_found("host", hostname))?;
    decode(|| format!("host {hostname}"), &body)
}

pub(super) async fn list_hosts(store: &CassandraStore) -> Result<Vec<HostRecord>> {
    let rows: Vec<(String,)> = store.scan("hosts", &store.s.sel_hosts, ()).await?;
    let mut out = rows.iter().map(|(b,)| decode::<HostRecord>(|| "host".into(), b)).collect::<Result<Vec<_>>>()?;
    out.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    Ok(out)
}

pub(super) async fn delete_host(store: &CassandraStore, hostname: &str) -> Result<()> {
    store.fence_check().await?;
    store.exec("host", &store.s.del_host, (hostname,)).await?;
    Ok(())
}

pub(super) async fn put_provider_id(store: &CassandraStore, provider: &str, id: &str) -> Result<()> {
    store.fence_check().await?;
    check_id("provider", provider)?;
    check_id("provider id", id)?;
    store.exec("provider id", &store.s.ins_provider, (provider, id)).await?;
    Ok(())
}

pub(super) async fn get_provider_id(store: &CassandraStore, provider: &str) -> Result<Option<String>> {
    let rows: Vec<(String,)> = store.rows("provider id", &store.s.sel_provider, (provider,)).await?;
    Ok(rows.into_iter().next().map(|r| r.0))
}
