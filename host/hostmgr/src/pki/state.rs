//! `state.json` of a PKI directory: join tokens (secrets as SHA-256 only)
//! and the certificates issued to agents.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{PkiError, write_file};

/// Everything kept besides the CA.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct State {
    /// Format version (1).
    #[serde(default = "one")]
    pub version: u32,
    /// Join tokens, oldest first.
    #[serde(default)]
    pub tokens: Vec<TokenRecord>,
    /// Certificates issued to agents, oldest first.
    #[serde(default)]
    pub certs: Vec<IssuedCert>,
}

fn one() -> u32 {
    1
}

/// One join token as stored. No `Debug` of the hash is harmful, but it is
/// still left out of logs: only [`TokenInfo`] leaves this module.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TokenRecord {
    pub id: String,
    /// SHA-256 (hex) of the secret part.
    pub secret_sha256: String,
    #[serde(default)]
    pub description: String,
    pub created_unix: u64,
    pub expires_unix: u64,
    /// Joins still allowed; `None`: any number until it expires.
    pub uses_left: Option<u32>,
    /// Joins made with it.
    pub joins: u32,
    pub revoked: bool,
}

impl std::fmt::Debug for TokenRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenRecord").field("id", &self.id).finish_non_exhaustive()
    }
}

/// A join token as `paceline agent-token list` shows it (no secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TokenInfo {
    /// The id (the part before the dot).
    pub id: String,
    /// What the operator wrote when creating it.
    pub description: String,
    /// Unix seconds.
    pub created_unix: u64,
    /// Unix seconds after which joins are refused.
    pub expires_unix: u64,
    /// Joins still allowed; `None`: any number until it expires.
    pub uses_left: Option<u32>,
    /// Joins made with it.
    pub joins: u32,
    /// `valid`, `expired`, `revoked` or `used up`.
    pub state: &'static str,
}

impl TokenRecord {
    pub fn info(&self, now: u64) -> TokenInfo {
        let state = if self.revoked {
            "revoked"
        } else if self.expires_unix <= now {
            "expired"
        } else if self.uses_left == Some(0) {
            "used up"
        } else {
            "valid"
        };
        TokenInfo {
            id: self.id.clone(),
            description: self.description.clone(),
            created_unix: self.created_unix,
            expires_unix: self.expires_unix,
            uses_left: self.uses_left,
            joins: self.joins,
            state,
        }
    }
}

/// A certificate issued to an agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuedCert {
    /// Its serial number, hex.
    pub serial: String,
    /// The host name it stands for (its common name).
    pub hostname: String,
    /// Unix seconds.
    pub issued_unix: u64,
    /// Unix seconds.
    pub expires_unix: u64,
    /// The join token it was issued for.
    pub token_id: String,
    /// Revoked: sessions with it are refused.
    pub revoked: bool,
}

impl State {
    pub fn load(dir: &Path) -> Result<State, PkiError> {
        let path = dir.join("state.json");
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| PkiError::Corrupt { path, message: e.to_string() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State { version: 1, ..State::default() }),
            Err(source) => Err(PkiError::Io { context: format!("reading {}", path.display()), source }),
        }
    }

    pub fn store(&self, dir: &Path) -> Result<(), PkiError> {
        let text = serde_json::to_vec_pretty(self)
            .map_err(|e| PkiError::Corrupt { path: dir.join("state.json"), message: format!("encoding: {e}") })?;
        write_file(&dir.join("state.json"), &text, 0o600)
    }
}
