//! Plugin versions (metadata and component bytes in one `plugins` row)
//! and each slot's activation history.

use std::collections::BTreeMap;

use rusqlite::{OptionalExtension, params};

use super::{SqliteStore, db};
use crate::error::{Result, StoreError};
use crate::types::{PluginVersion, check_id, decode, encode, limits};
use crate::validate;

pub(super) async fn put_plugin_version(store: &SqliteStore, version: &PluginVersion, bytes: &[u8]) -> Result<()> {
    validate::plugin(version, bytes)?;
    let meta = encode(|| format!("plugin {}", version.id()), version, limits::MAX_RECORD)?;
    let (v, bytes) = (version.clone(), bytes.to_vec());
    store.write(move |conn| {
        let n = conn
            .execute(
                "INSERT OR IGNORE INTO plugins (slot, name, version, meta, deployed_at_ms, bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![v.slot, v.name, v.version, meta, v.deployed_at_ms, bytes],
            )
            .map_err(db)?;
        if n == 0 {
            return Err(StoreError::exists("plugin version", format!("{}/{}", v.slot, v.id())));
        }
        Ok(())
    })
    .await
}

pub(super) async fn set_plugin_state(
    store: &SqliteStore,
    slot: &str,
    name: &str,
    version: &str,
    state: &str,
) -> Result<()> {
    check_id("plugin state", state)?;
    let (slot, name, version, state) = (slot.to_string(), name.to_string(), version.to_string(), state.to_string());
    store
        .write(move |conn| {
            let meta: Option<String> = conn
                .query_row(
                    "SELECT meta FROM plugins WHERE slot = ?1 AND name = ?2 AND version = ?3",
                    params![slot, name, version],
                    |r| r.get(0),
                )
                .optional()
                .map_err(db)?;
            let meta =
                meta.ok_or_else(|| StoreError::not_found("plugin version", format!("{slot}/{name}@{version}")))?;
            let mut v: PluginVersion = decode(|| format!("plugin {slot}/{name}@{version}"), &meta)?;
            v.state = state;
            let meta = encode(|| format!("plugin {}", v.id()), &v, limits::MAX_RECORD)?;
            conn.execute(
                "UPDATE plugins SET meta = ?4 WHERE slot = ?1 AND name = ?2 AND version = ?3",
                params![slot, name, version, meta],
            )
            .map_err(db)?;
            Ok(())
        })
        .await
}

pub(super) async fn plugin_versions(store: &SqliteStore, slot: Option<&str>) -> Result<Vec<PluginVersion>> {
    let slot = slot.map(str::to_string);
    store
        .read(move |conn| {
            let metas: Vec<String> = match &slot {
                Some(s) => conn
                    .prepare("SELECT meta FROM plugins WHERE slot = ?1 ORDER BY deployed_at_ms, name, version")
                    .and_then(|mut st| st.query_map(params![s], |r| r.get(0))?.collect()),
                None => conn
                    .prepare("SELECT meta FROM plugins ORDER BY slot, deployed_at_ms, name, version")
                    .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect()),
            }
            .map_err(db)?;
            metas.iter().map(|m| decode(|| "plugin version".to_string(), m)).collect()
        })
        .await
}

pub(super) async fn plugin_bytes(store: &SqliteStore, slot: &str, name: &str, version: &str) -> Result<Vec<u8>> {
    let (slot, name, version) = (slot.to_string(), name.to_string(), version.to_string());
    store
        .read(move |conn| {
            conn.query_row(
                "SELECT bytes FROM plugins WHERE slot = ?1 AND name = ?2 AND version = ?3",
                params![slot, name, version],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?
            .ok_or_else(|| StoreError::not_found("plugin version", format!("{slot}/{name}@{version}")))
        })
        .await
}

pub(super) async fn set_slot_history(store: &SqliteStore, slot: &str, history: &[String]) -> Result<()> {
    check_id("plugin slot", slot)?;
    let body = encode(|| format!("history of slot {slot}"), &history, limits::MAX_RECORD)?;
    let slot = slot.to_string();
    store
        .write(move |conn| {
            conn.execute("INSERT OR REPLACE INTO plugin_slots (slot, history) VALUES (?1, ?2)", params![slot, body])
                .map_err(db)?;
            Ok(())
        })
        .await
}

pub(super) async fn slot_histories(store: &SqliteStore) -> Result<BTreeMap<String, Vec<String>>> {
    store
        .read(|conn| {
            let mut stmt = conn.prepare("SELECT slot, history FROM plugin_slots").map_err(db)?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .map_err(db)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db)?;
            rows.into_iter().map(|(s, h)| Ok((s.clone(), decode(|| format!("history of slot {s}"), &h)?))).collect()
        })
        .await
}
