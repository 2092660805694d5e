//! Keyed whole records without versions: resource pools (opaque specs),
//! the host inventory, and provider ids. Each is written whole
//! (`INSERT OR REPLACE`) and read back as written.

use paceline_model::host::HostRecord;
use rusqlite::{OptionalExtension, params};

use super::{SqliteStore, db};
use crate::error::{Result, StoreError};
use crate::types::{check_id, decode, encode, limits};
use crate::validate;

pub(super) async fn put_pool(store: &SqliteStore, path: &str, spec: &[u8]) -> Result<()> {
    validate::pool(path, spec)?;
    let (path, spec) = (path.to_string(), spec.to_vec());
    store
        .write(move |conn| {
            conn.execute("INSERT OR REPLACE INTO pools (path, spec) VALUES (?1, ?2)", params![path, spec])
                .map_err(db)?;
            Ok(())
        })
        .await
}

pub(super) async fn get_pool(store: &SqliteStore, path: &str) -> Result<Vec<u8>> {
    let path = path.to_string();
    store
        .read(move |conn| {
            conn.query_row("SELECT spec FROM pools WHERE path = ?1", params![path], |r| r.get(0))
                .optional()
                .map_err(db)?
                .ok_or_else(|| StoreError::not_found("pool", &path))
        })
        .await
}

pub(super) async fn list_pools(store: &SqliteStore) -> Result<Vec<(String, Vec<u8>)>> {
    store
        .read(|conn| {
            let mut stmt = conn.prepare("SELECT path, spec FROM pools ORDER BY path").map_err(db)?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)
        })
        .await
}

pub(super) async fn delete_pool(store: &SqliteStore, path: &str) -> Result<()> {
    let path = path.to_string();
    store
        .write(move |conn| {
            conn.execute("DELETE FROM pools WHERE path = ?1", params![path]).map_err(db)?;
            Ok(())
        })
        .await
}

pub(super) async fn put_host(store: &SqliteStore, host: &HostRecord) -> Result<()> {
    validate::host(host)?;
    let body = encode(|| format!("host {}", host.hostname), host, limits::MAX_RECORD)?;
    let name = host.hostname.clone();
    store
        .write(move |conn| {
            conn.execute("INSERT OR REPLACE INTO hosts (hostname, record) VALUES (?1, ?2)", params![name, body])
                .map_err(db)?;
            Ok(())
        })
        .await
}

pub(super) async fn get_host(store: &SqliteStore, hostname: &str) -> Result<HostRecord> {
    let hostname = hostname.to_string();
    store
        .read(move |conn| {
            let body: String = conn
                .query_row("SELECT record FROM hosts WHERE hostname = ?1", params![hostname], |r| r.get(0))
                .optional()
                .map_err(db)?
                .ok_or_else(|| StoreError::not_found("host", &hostname))?;
            decode(|| format!("host {hostname}"), &body)
        })
        .await
}

pub(super) async fn list_hosts(store: &SqliteStore) -> Result<Vec<HostRecord>> {
    store
        .read(|conn| {
            let mut stmt = conn.prepare("SELECT record FROM hosts ORDER BY hostname").map_err(db)?;
            let rows = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.iter().map(|b| decode(|| "host".to_string(), b)).collect()
        })
        .await
}

pub(super) async fn delete_host(store: &SqliteStore, hostname: &str) -> Result<()> {
    let hostname = hostname.to_string();
    store
        .write(move |conn| {
            conn.execute("DELETE FROM hosts WHERE hostname = ?1", params![hostname]).map_err(db)?;
            Ok(())
        })
        .await
}

pub(super) async fn put_provider_id(store: &SqliteStore, provider: &str, id: &str) -> Result<()> {
    check_id("provider", provider)?;
    check_id("provider id", id)?;
    let (provider, id) = (provider.to_string(), id.to_string());
    store
        .write(move |conn| {
            conn.execute("INSERT OR REPLACE INTO provider_ids (provider, id) VALUES (?1, ?2)", params![provider, id])
                .map_err(db)?;
            Ok(())
        })
        .await
}

pub(super) async fn get_provider_id(store: &SqliteStore, provider: &str) -> Result<Option<String>> {
    let provider = provider.to_string();
    store
        .read(move |conn| {
            conn.query_row("SELECT id FROM provider_ids WHERE provider = ?1", params![provider], |r| r.get(0))
                .optional()
                .map_err(db)
        })
        .await
}
