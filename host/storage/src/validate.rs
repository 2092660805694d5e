//! Input checks shared by the backends, run before anything is written so
//! that bad input fails whole with a clear error.

use paceline_model::host::HostRecord;
use paceline_model::job::MAX_INSTANCES;
use sha2::{Digest, Sha256};

use crate::error::{Result, StoreError};
use crate::types::{PluginVersion, check_id, limits};

pub(crate) fn instance(instance: u32) -> Result<()> {
    if instance >= MAX_INSTANCES {
        return Err(StoreError::Invalid(format!("instance {instance} is not below the limit of {MAX_INSTANCES}")));
    }
    Ok(())
}

pub(crate) fn pool(path: &str, spec: &[u8]) -> Result<()> {
    check_id("pool", path)?;
    if !path.starts_with('/') {
        return Err(StoreError::Invalid(format!("pool path `{path}` does not start with /")));
    }
    if spec.len() > limits::MAX_POOL_SPEC {
        return Err(StoreError::TooLarge {
            what: format!("spec of pool {path}"),
            size: spec.len(),
            max: limits::MAX_POOL_SPEC,
        });
    }
    Ok(())
}

pub(crate) fn plugin(v: &PluginVersion, bytes: &[u8]) -> Result<()> {
    check_id("plugin slot", &v.slot)?;
    check_id("plugin name", &v.name)?;
    check_id("plugin version", &v.version)?;
    check_id("plugin world", &v.world)?;
    check_id("plugin state", &v.state)?;
    if v.name.contains('@') {
        return Err(StoreError::Invalid(format!("plugin name `{}` contains @", v.name)));
    }
    if bytes.len() > limits::MAX_PLUGIN_BYTES {
        return Err(StoreError::TooLarge {
            what: format!("plugin {}", v.id()),
            size: bytes.len(),
            max: limits::MAX_PLUGIN_BYTES,
        });
    }
    if v.size != bytes.len() as u64 {
        return Err(StoreError::Invalid(format!("plugin {}: size {} but {} bytes given", v.id(), v.size, bytes.len())));
    }
    let digest = hex::encode(Sha256::digest(bytes));
    if !digest.eq_ignore_ascii_case(&v.sha256) {
        return Err(StoreError::Invalid(format!(
            "plugin {}: sha256 {} does not match the bytes ({digest})",
            v.id(),
            v.sha256
        )));
    }
    Ok(())
}

pub(crate) fn host(h: &HostRecord) -> Result<()> {
    check_id("host", &h.hostname)?;
    h.validate()?;
    Ok(())
}

/// Checks a sealed secret before it is stored: a valid name, a pool path,
/// and a record of bounded size.
pub(crate) fn secret(s: &crate::secrets::SealedSecret) -> Result<()> {
    paceline_model::task_secret::check_name(&s.name)
        .map_err(|why| StoreError::Invalid(format!("secret name {:?}: {why}", s.name)))?;
    if !s.pool.starts_with('/') || s.pool.len() > 1024 {
        return Err(StoreError::Invalid(format!("secret pool {:?}: must be a pool path", s.pool)));
    }
    // Hex doubles the sealed value (at most 64 KiB plus its tag).
    let max = 2 * (paceline_model::task_secret::MAX_VALUE + 16);
    if s.ciphertext.len() > max || s.nonce.len() != 24 {
        return Err(StoreError::TooLarge {
            what: format!("secret {}/{}", s.pool, s.name),
            size: s.ciphertext.len(),
            max,
        });
    }
    Ok(())
}
