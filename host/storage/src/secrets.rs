//! Task secrets at rest (decision 0032): [`SealedSecret`] is what the store
//! keeps (AES-256-GCM ciphertext, bound to its pool and name), and
//! [`SecretKey`] seals and opens them with the server's key, read from a
//! file. The store itself never sees a value in the clear.

use std::fmt;
use std::path::Path;

use paceline_model::secret::Secret;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A secret as stored: who set it and when, and its sealed value.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedSecret {
    /// The pool it belongs to.
    pub pool: String,
    /// Its name in the pool.
    pub name: String,
    /// 1 at creation, one more per replacement.
    pub version: u64,
    /// When the value was set, ms since the epoch.
    pub updated_at_ms: u64,
    /// The principal that set it.
    pub updated_by: String,
    /// The plaintext's length in bytes (the API shows it).
    pub size_bytes: u32,
    /// Which key sealed it: the first 16 hex digits of SHA-256 of the key,
    /// so opening with another key says so instead of failing obscurely.
    pub key_id: String,
    /// The 96-bit nonce, hex.
    pub nonce: String,
    /// Ciphertext with its 128-bit tag, hex.
    pub ciphertext: String,
}

impl fmt::Debug for SealedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealedSecret")
            .field("pool", &self.pool)
            .field("name", &self.name)
            .field("version", &self.version)
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// Why a key could not be read or a secret sealed or opened. Never holds a value.
#[derive(Debug, thiserror::Error)]
pub enum SecretKeyError {
    /// The key file is missing, unreadable or malformed.
    #[error("secrets key {0}")]
    Key(String),
    /// The secret was sealed with another key.
    #[error("secret {pool}/{name} was sealed with key {sealed_with}; this server's key is {ours}")]
    WrongKey {
        /// Its pool.
        pool: String,
        /// Its name.
        name: String,
        /// The key id in the record.
        sealed_with: String,
        /// This key's id.
        ours: String,
    },
    /// The record fails authentication: damaged, or moved to another name.
    #[error("secret {pool}/{name} does not open: the stored record is damaged or belongs to another name")]
    Damaged {
        /// Its pool.
        pool: String,
        /// Its name.
        name: String,
    },
    /// The random source failed.
    #[error("no randomness for a nonce")]
    Random,
}

/// The server's key for task secrets: 32 bytes, kept as 64 hex digits on
/// one line of a file only its owner reads.
pub struct SecretKey {
    key: LessSafeKey,
    id: String,
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretKey").field("id", &self.id).finish_non_exhaustive()
    }
}

impl SecretKey {
    /// Reads the key from `path`.
    pub fn from_file(path: &Path) -> Result<SecretKey, SecretKeyError> {
        let text = Secret::from_file(path).map_err(|e| SecretKeyError::Key(e.to_string()))?;
        let bytes = hex::decode(text.expose().trim())
            .ok()
            .filter(|b| b.len() == 32)
            .ok_or_else(|| SecretKeyError::Key(format!("{}: must hold 64 hex digits", path.display())))?;
        SecretKey::from_bytes(&bytes)
    }

    /// Reads the key from `path`, first creating it (32 random bytes,
    /// mode 0600) when there is no file: what `paceline dev` and a
    /// single server with a data dir do.
    pub fn load_or_create(path: &Path) -> Result<SecretKey, SecretKeyError> {
        if !path.exists() {
            let mut bytes = [0u8; 32];
            SystemRandom::new().fill(&mut bytes).map_err(|_| SecretKeyError::Random)?;
            write_private(path, format!("{}\n", hex::encode(bytes)).as_bytes())
                .map_err(|e| SecretKeyError::Key(format!("{}: {e}", path.display())))?;
            tracing::info!(path = %path.display(), "created the secrets key");
        }
        SecretKey::from_file(path)
    }

    fn from_bytes(bytes: &[u8]) -> Result<SecretKey, SecretKeyError> {
        let unbound =
            UnboundKey::new(&AES_256_GCM, bytes).map_err(|_| SecretKeyError::Key("is not 32 bytes".into()))?;
        let id = hex::encode(&Sha256::digest(bytes)[..8]);
        Ok(SecretKey { key: LessSafeKey::new(unbound), id })
    }

    /// This key's id (not secret: a hash prefix).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Seals `value` as `pool`/`name`; the other fields of the record are
    /// the caller's to fill.
    pub fn seal(&self, pool: &str, name: &str, value: &[u8]) -> Result<SealedSecret, SecretKeyError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).map_err(|_| SecretKeyError::Random)?;
        let mut data = value.to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad(pool, name)), &mut data)
            .map_err(|_| SecretKeyError::Random)?;
        Ok(SealedSecret {
            pool: pool.to_string(),
            name: name.to_string(),
            version: 0,
            updated_at_ms: 0,
            updated_by: String::new(),
            size_bytes: value.len() as u32,
            key_id: self.id.clone(),
            nonce: hex::encode(nonce),
            ciphertext: hex::encode(data),
        })
    }

    /// The value of a sealed secret.
    pub fn open(&self, s: &SealedSecret) -> Result<Secret, SecretKeyError> {
        if s.key_id != self.id {
            return Err(SecretKeyError::WrongKey {
                pool: s.pool.clone(),
                name: s.name.clone(),
                sealed_with: s.key_id.clone(),
                ours: self.id.clone(),
            });
        }
        let damaged = || SecretKeyError::Damaged { pool: s.pool.clone(), name: s.name.clone() };
        let nonce: [u8; NONCE_LEN] = hex::decode(&s.nonce).ok().and_then(|n| n.try_into().ok()).ok_or_else(damaged)?;
        let mut data = hex::decode(&s.ciphertext).map_err(|_| damaged())?;
        let plain = self
            .key
            .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad(&s.pool, &s.name)), &mut data)
            .map_err(|_| damaged())?;
        let text = String::from_utf8(plain.to_vec()).map_err(|_| damaged())?;
        Ok(Secret::new(text))
    }
}

/// The associated data: a record copied under another pool or name fails
/// to open.
fn aad(pool: &str, name: &str) -> Vec<u8> {
    format!("paceline-secret-v1\0{pool}\0{name}").into_bytes()
}

/// Writes `bytes` to `path` readable by its owner only, whole or not at all.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    paceline_model::secret::write_file_atomic(path, bytes, 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(dir: &Path, name: &str) -> SecretKey {
        SecretKey::load_or_create(&dir.join(name)).expect("test")
    }

    #[test]
    fn a_sealed_value_opens_with_its_key_and_shows_nowhere() {
        let dir = tempfile::tempdir().expect("test");
        let k = key(dir.path(), "k");
        let s = k.seal("/team", "db", b"hunter2-value").expect("test");
        assert!(!s.ciphertext.contains(&hex::encode(b"hunter2-value")));
        assert!(!format!("{s:?}").contains("hunter2"));
        assert_eq!(k.open(&s).expect("test").expose(), "hunter2-value");
        assert_eq!(s.size_bytes, 13);
        // The same key again from its file.
        let again = SecretKey::load_or_create(&dir.path().join("k")).expect("test");
        assert_eq!(again.id(), k.id());
        assert_eq!(again.open(&s).expect("test").expose(), "hunter2-value");
    }

    #[test]
    fn another_key_a_moved_record_and_a_flipped_bit_are_refused() {
        let dir = tempfile::tempdir().expect("test");
        let (k, other) = (key(dir.path(), "a"), key(dir.path(), "b"));
        let s = k.seal("/team", "db", b"value").expect("test");
        assert!(matches!(other.open(&s), Err(SecretKeyError::WrongKey { .. })));
        let mut moved = s.clone();
        moved.name = "other".into();
        assert!(matches!(k.open(&moved), Err(SecretKeyError::Damaged { .. })));
        let mut flipped = s.clone();
        let mut bytes = hex::decode(&flipped.ciphertext).expect("test");
        bytes[0] ^= 1;
        flipped.ciphertext = hex::encode(bytes);
        assert!(matches!(k.open(&flipped), Err(SecretKeyError::Damaged { .. })));
    }

    #[test]
    fn a_malformed_key_file_is_refused_without_its_content() {
        let dir = tempfile::tempdir().expect("test");
        let path = dir.path().join("k");
        std::fs::write(&path, "not-hex-at-all-but-long-enough-to-matter\n").expect("test");
        let e = SecretKey::from_file(&path).expect_err("test").to_string();
        assert!(e.contains("64 hex digits") && !e.contains("not-hex"), "{e}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let created = dir.path().join("new");
            SecretKey::load_or_create(&created).expect("test");
            assert_eq!(std::fs::metadata(&created).expect("test").permissions().mode() & 0o777, 0o600);
        }
    }
}
