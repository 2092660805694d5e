//! The tokens file (token hashes, never tokens) and authenticating a request's bearer token.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tonic::Status;

use super::policy::{Principal, Requirement, Role, requirement};

/// A tokens file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read.
    #[error("tokens file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid YAML of the expected shape.
    #[error("tokens file: {0}")]
    Parse(String),
    /// An entry is wrong; the message names it (`principals[2].token_sha256`).
    #[error("tokens file: {0}")]
    Invalid(String),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    /// Format version; only 1 exists.
    version: u32,
    #[serde(default)]
    principals: Vec<PrincipalEntry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PrincipalEntry {
    name: String,
    role: Role,
    #[serde(default)]
    pools: Vec<String>,
    token_sha256: String,
}

/// The server's principals, by token hash. Cheap to share (`Arc`).
#[derive(Clone, Debug)]
pub struct Auth {
    by_hash: Option<HashMap<[u8; 32], Arc<Principal>>>,
    anonymous: Arc<Principal>,
}

impl Auth {
    /// An open API: every caller is [`Principal::anonymous`].
    pub fn open() -> Auth {
        Auth { by_hash: None, anonymous: Arc::new(Principal::anonymous()) }
    }

    /// Whether callers must present a token.
    pub fn is_enforced(&self) -> bool {
        self.by_hash.is_some()
    }

    /// Reads a tokens file (see `docs/operations.md`, "Authentication").
    pub fn load(path: &Path) -> Result<Auth, AuthError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| AuthError::Read { path: path.display().to_string(), source })?;
        Auth::from_yaml(&text)
    }

    /// Parses a tokens file's text. Every entry is checked; the error names
    /// the first bad one. Duplicate names or token hashes are refused.
    pub fn from_yaml(text: &str) -> Result<Auth, AuthError> {
        let file: TokensFile = serde_yaml::from_str(text).map_err(|e| AuthError::Parse(e.to_string()))?;
        if file.version != 1 {
            return Err(AuthError::Invalid(format!("version: {} is not supported (only 1)", file.version)));
        }
        let mut by_hash = HashMap::new();
        let mut names = std::collections::HashSet::new();
        for (i, p) in file.principals.into_iter().enumerate() {
            let at = format!("principals[{i}]");
            if p.name.trim().is_empty() {
                return Err(AuthError::Invalid(format!("{at}.name: must not be empty")));
            }
            if !names.insert(p.name.clone()) {
                return Err(AuthError::Invalid(format!("{at}.name: `{}` appears twice", p.name)));
            }
            let hash =
                parse_hash(&p.token_sha256).map_err(|e| AuthError::Invalid(format!("{at}.token_sha256: {e}")))?;
            for (j, pool) in p.pools.iter().enumerate() {
                if !pool.starts_with('/') {
                    return Err(AuthError::Invalid(format!(
                        "{at}.pools[{j}]: `{pool}` is not a pool path (it starts with /)"
                    )));
                }
            }
            let principal = Arc::new(Principal { name: p.name, role: p.role, pools: p.pools });
            if by_hash.insert(hash, principal).is_some() {
                return Err(AuthError::Invalid(format!("{at}.token_sha256: the same token is given twice")));
            }
        }
        Ok(Auth { by_hash: Some(by_hash), anonymous: Arc::new(Principal::anonymous()) })
    }

    /// The principal behind a request's `authorization` header.
    pub fn authenticate(&self, headers: &http::HeaderMap) -> Result<Arc<Principal>, Status> {
        let Some(by_hash) = &self.by_hash else {
            return Ok(self.anonymous.clone());
        };
        let value = headers.get(http::header::AUTHORIZATION).ok_or_else(|| {
            Status::unauthenticated(
                "no token: send `authorization: Bearer <token>` (paceline --token or PACELINE_TOKEN)",
            )
        })?;
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Status::unauthenticated("authorization: expected `Bearer <token>`"))?;
        by_hash
            .get(&token_hash(token))
            .cloned()
            .ok_or_else(|| Status::unauthenticated("the token is not known to this server"))
    }

    /// Authenticates and checks the role-level requirement of a method.
    pub fn admit(
        &self,
        method: &http::Method,
        path: &str,
        headers: &http::HeaderMap,
    ) -> Result<Option<Arc<Principal>>, Status> {
        let need = requirement(method, path);
        if need == Requirement::Open {
            return Ok(None);
        }
        let who = self.authenticate(headers)?;
        if let Requirement::AtLeast(role) = need
            && who.role < role
        {
            return Err(Status::permission_denied(format!(
                "{path} needs role {role} or above; {} has role {}",
                who.name, who.role
            )));
        }
        Ok(Some(who))
    }
}

/// SHA-256 of a token, as the tokens file stores it.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A fresh API token: 32 bytes from the kernel's CSPRNG (`/dev/urandom`) in
/// lowercase hex. A token is a password; only its hash goes in the tokens file.
pub fn new_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The tokens-file entry (the lines under `principals:`, each indented two
/// spaces) admitting `token` as `name` with `role` and, for a `user`, the
/// pools whose jobs it may change. `paceline auth token` prints it; tests
/// write it into their tokens files.
pub fn tokens_file_entry(name: &str, role: Role, pools: &[String], token: &str) -> String {
    let pools = if pools.is_empty() { String::new() } else { format!("    pools: [{}]\n", pools.join(", ")) };
    format!(
        "  - name: {}\n    role: {role}\n{pools}    token_sha256: {}\n",
        serde_json::to_string(name).unwrap_or_default(),
        token_hash_hex(token)
    )
}

/// [`token_hash`] in lowercase hex.
pub fn token_hash_hex(token: &str) -> String {
    token_hash(token).iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hash(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("expected 64 hex digits (the token's SHA-256; `paceline auth token` prints it)".into());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(out)
}
