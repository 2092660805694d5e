//! Plugin versions: metadata claimed by a lightweight transaction, the
//! component bytes in chunks of [`PLUGIN_CHUNK`] (verified against the
//! recorded sha256 on read), and each slot's activation history.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};

use super::CassandraStore;
use super::exec::Lwt;
use crate::error::{Result, StoreError};
use crate::types::{PluginVersion, check_id, decode, encode, limits};
use crate::validate;

/// Plugin components are split into chunks of this size (cells stay small).
const PLUGIN_CHUNK: usize = 1024 * 1024;

pub(super) async fn put_plugin_version(store: &CassandraStore, version: &PluginVersion, bytes: &[u8]) -> Result<()> {
    store.fence_check().await?;
    validate::plugin(version, bytes)?;
    let meta = encode(|| format!("plugin {}", version.id()), version, limits::MAX_RECORD)?;
    let chunks = bytes.len().div_ceil(PLUGIN_CHUNK);
    let v = version;
    // Claim the version first so that an existing version's chunks are
    // never overwritten; the chunks follow, and reads verify the sha256,
    // so a crash in between shows as a corrupt (incomplete) version.
    match store.lwt_once("plugin", &store.s.ins_plugin, &(&v.slot, &v.name, &v.version, &meta, chunks as i32)).await {
        Ok(Lwt::Applied) => {}
        Ok(Lwt::NotApplied(_)) => {
            return Err(StoreError::exists("plugin version", format!("{}/{}", v.slot, v.id())));
        }
        Err((_, e)) => return Err(e),
    }
    futures::stream::iter(0..chunks)
        .map(|i: usize| {
            let c = &bytes[i * PLUGIN_CHUNK..((i + 1) * PLUGIN_CHUNK).min(bytes.len())];
            store.exec("plugin chunk", &store.s.ins_chunk, (&v.slot, &v.name, &v.version, i as i32, c))
        })
        .buffer_unordered(4)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

pub(super) async fn set_plugin_state(
    store: &CassandraStore,
    slot: &str,
    name: &str,
    version: &str,
    state: &str,
) -> Result<()> {
    store.fence_check().await?;
    check_id("plugin state", state)?;
    let rows: Vec<(String, i32)> = store.rows("plugin", &store.s.sel_plugin, (slot, name, version)).await?;
    let (meta, _) = rows
        .into_iter()
        .next()
        .ok_or_else(|| StoreError::not_found("plugin version", format!("{slot}/{name}@{version}")))?;
    let mut v: PluginVersion = decode(|| format!("plugin {slot}/{name}@{version}"), &meta)?;
    v.state = state.to_string();
    let meta = encode(|| format!("plugin {}", v.id()), &v, limits::MAX_RECORD)?;
    store.exec("plugin", &store.s.upd_plugin_meta, (&meta, slot, name, version)).await?;
    Ok(())
}

pub(super) async fn plugin_versions(store: &CassandraStore, slot: Option<&str>) -> Result<Vec<PluginVersion>> {
    let rows: Vec<(String,)> = match slot {
        Some(s) => store.rows("plugins", &store.s.sel_plugins_slot, (s,)).await?,
        None => store.scan("plugins", &store.s.sel_plugins, ()).await?,
    };
    let mut out =
        rows.iter().map(|(m,)| decode::<PluginVersion>(|| "plugin version".into(), m)).collect::<Result<Vec<_>>>()?;
    out.sort_by(|a, b| {
        (&a.slot, a.deployed_at_ms, &a.name, &a.version).cmp(&(&b.slot, b.deployed_at_ms, &b.name, &b.version))
    });
    Ok(out)
}

pub(super) async fn plugin_bytes(store: &CassandraStore, slot: &str, name: &str, version: &str) -> Result<Vec<u8>> {
    let what = format!("{slot}/{name}@{version}");
    let rows: Vec<(String, i32)> = store.rows("plugin", &store.s.sel_plugin, (slot, name, version)).await?;
    let (meta, n) = rows.into_iter().next().ok_or_else(|| StoreError::not_found("plugin version", &what))?;
    let v: PluginVersion = decode(|| format!("plugin {what}"), &meta)?;
    let mut chunks: Vec<(i32, Vec<u8>)> =
        store.rows("plugin chunks", &store.s.sel_chunks, (slot, name, version)).await?;
    chunks.sort_by_key(|c| c.0);
    if chunks.len() != n as usize {
        return Err(StoreError::Corrupt {
            what: format!("plugin {what}"),
            reason: format!("{} of {n} chunks stored", chunks.len()),
        });
    }
    let bytes: Vec<u8> = chunks.into_iter().flat_map(|c| c.1).collect();
    if !hex::encode(Sha256::digest(&bytes)).eq_ignore_ascii_case(&v.sha256) {
        return Err(StoreError::Corrupt {
            what: format!("plugin {what}"),
            reason: "sha256 does not match the stored bytes".into(),
        });
    }
    Ok(bytes)
}

pub(super) async fn set_slot_history(store: &CassandraStore, slot: &str, history: &[String]) -> Result<()> {
    store.fence_check().await?;
    check_id("plugin slot", slot)?;
    let body = encode(|| format!("history of slot {slot}"), &history, limits::MAX_RECORD)?;
    store.exec("plugin slot", &store.s.ins_slot, (slot, &body)).await?;
    Ok(())
}

pub(super) async fn slot_histories(store: &CassandraStore) -> Result<BTreeMap<String, Vec<String>>> {
    let rows: Vec<(String, String)> = store.scan("plugin slots", &store.s.sel_slots, ()).await?;
    rows.into_iter().map(|(s, h)| Ok((s.clone(), decode(|| format!("history of slot {s}"), &h)?))).collect()
}
