//! Task secrets: sealed records (decision 0032), one JSON row per
//! (pool, name), written whole.

use rusqlite::{OptionalExtension, params};

use super::{SqliteStore, db};
use crate::error::{Result, StoreError};
use crate::secrets::SealedSecret;
use crate::types::{decode, encode};
use crate::validate;

fn what(pool: &str, name: &str) -> String {
    format!("secret {pool}/{name}")
}

pub(super) async fn put(store: &SqliteStore, s: &SealedSecret) -> Result<()> {
    validate::secret(s)?;
    let record = encode(|| what(&s.pool, &s.name), s, usize::MAX)?;
    let (pool, name) = (s.pool.clone(), s.name.clone());
    store
        .write(move |conn| {
            conn.execute(
                "INSERT OR REPLACE INTO secrets (pool, name, record) VALUES (?1, ?2, ?3)",
                params![pool, name, record],
            )
            .map_err(db)?;
            Ok(())
        })
        .await
}

pub(super) async fn get(store: &SqliteStore, pool: &str, name: &str) -> Result<SealedSecret> {
    let (pool, name) = (pool.to_string(), name.to_string());
    store
        .read(move |conn| {
            let record: Option<String> = conn
                .query_row("SELECT record FROM secrets WHERE pool = ?1 AND name = ?2", params![pool, name], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(db)?;
            let record = record.ok_or_else(|| StoreError::not_found("secret", format!("{pool}/{name}")))?;
            decode(|| what(&pool, &name), &record)
        })
        .await
}

pub(super) async fn list(store: &SqliteStore, pool: &str) -> Result<Vec<SealedSecret>> {
    let pool = pool.to_string();
    store
        .read(move |conn| {
            let mut stmt =
                conn.prepare("SELECT name, record FROM secrets WHERE pool = ?1 ORDER BY name").map_err(db)?;
            let rows = stmt
                .query_map(params![pool], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.into_iter().map(|(name, record)| decode(|| what(&pool, &name), &record)).collect()
        })
        .await
}

pub(super) async fn delete(store: &SqliteStore, pool: &str, name: &str) -> Result<()> {
    let (pool, name) = (pool.to_string(), name.to_string());
    store
        .write(move |conn| {
            conn.execute("DELETE FROM secrets WHERE pool = ?1 AND name = ?2", params![pool, name]).map_err(db)?;
            Ok(())
        })
        .await
}
