//! Task secrets: sealed records (decision 0032), a partition per pool and a
//! row per name, written whole.

use super::CassandraStore;
use crate::error::{Result, StoreError};
use crate::secrets::SealedSecret;
use crate::types::{decode, encode};
use crate::validate;

fn what(pool: &str, name: &str) -> String {
    format!("secret {pool}/{name}")
}

pub(super) async fn put(store: &CassandraStore, s: &SealedSecret) -> Result<()> {
    store.fence_check().await?;
    validate::secret(s)?;
    let record = encode(|| what(&s.pool, &s.name), s, usize::MAX)?;
    store.exec("secret", &store.s.ins_secret, (&s.pool, &s.name, record)).await?;
    Ok(())
}

pub(super) async fn get(store: &CassandraStore, pool: &str, name: &str) -> Result<SealedSecret> {
    let rows: Vec<(String,)> = store.rows("secret", &store.s.sel_secret, (pool, name)).await?;
    let (record,) = rows.into_iter().next().ok_or_else(|| StoreError::not_found("secret", format!("{pool}/{name}")))?;
    decode(|| what(pool, name), &record)
}

pub(super) async fn list(store: &CassandraStore, pool: &str) -> Result<Vec<SealedSecret>> {
    let rows: Vec<(String, String)> = store.rows("secrets", &store.s.sel_secrets, (pool,)).await?;
    rows.into_iter().map(|(name, record)| decode(|| what(pool, &name), &record)).collect()
}

pub(super) async fn delete(store: &CassandraStore, pool: &str, name: &str) -> Result<()> {
    store.fence_check().await?;
    store.exec("secret", &store.s.del_secret, (pool, name)).await?;
    Ok(())
}
