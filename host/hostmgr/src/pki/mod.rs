//! The agent port's identities: the cluster CA, the host manager's server
//! certificate, join tokens, and the certificates issued to agents.
//!
//! An agent presents a join token once (`AgentService.Join`, over TLS it
//! verified against the CA hash the operator gave it) with a certificate
//! signing request; it receives a client certificate whose common name is
//! its host name. From then on `AgentService.Session` requires that
//! certificate, and `Register.hostname` must equal its name, so no other
//! process can take over a host's name. See
//! docs/decisions/0029-agent-identity.md.
//!
//! Everything lives in one directory (`<data_dir>/pki/` by default, mode
//! 0700): `ca.key` (0600), `ca.crt`, and `state.json` (0600: the tokens,
//! their secrets as SHA-256 only, and the certificates issued). Every change
//! to `state.json` is made under an exclusive lock on `lock`, so the server
//! and `paceline agent-token` on the same directory never lose each other's
//! writes.

mod state;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use sha2::{Digest, Sha256};

pub use state::{IssuedCert, TokenInfo};
use state::{State, TokenRecord};

/// How long the CA is valid.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 86_400);
/// How long an agent's certificate is valid (rotate by re-joining; see docs/operations.md).
pub const AGENT_CERT_VALIDITY: Duration = Duration::from_secs(365 * 86_400);
/// How long the host manager's own certificate is valid (a new one is made at every start).
const SERVER_CERT_VALIDITY: Duration = Duration::from_secs(365 * 86_400);
/// Longest host name (as `Register` allows).
const MAX_HOSTNAME: usize = 253;

/// What went wrong with the PKI directory.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Reading or writing a file.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A file is there but cannot be used.
    #[error("{path}: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Making or signing a certificate failed.
    #[error("certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// No token with this id.
    #[error("no join token with id {0:?}")]
    UnknownToken(String),
    /// A bad argument (ttl, uses, name).
    #[error("{0}")]
    Invalid(String),
}

/// Why a `Join` was refused. The messages name no secret.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// Not `<id>.<secret>`, or no token has this id and secret.
    #[error("the join token is not valid")]
    BadToken,
    /// The token expired.
    #[error("join token {0} expired")]
    Expired(String),
    /// The token was revoked.
    #[error("join token {0} was revoked")]
    Revoked(String),
    /// The token's uses are spent.
    #[error("join token {0} has been used as many times as it allows")]
    UsedUp(String),
    /// The host name is not one `Register` accepts.
    #[error("hostname: {0}")]
    BadHostname(String),
    /// Another installation holds a valid certificate for this name.
    #[error(
        "host {0:?} already has a certificate; revoke it first (`paceline agent-token revoke-host {0}`) to join under this name again"
    )]
    HostnameTaken(String),
    /// The signing request cannot be used.
    #[error("csr: {0}")]
    BadCsr(String),
    /// The server's side failed.
    #[error(transparent)]
    Pki(#[from] PkiError),
}

/// Why a session's client certificate was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The certificate does not admit a session (revoked, unknown, unreadable): final.
    #[error("{0}")]
    Refused(String),
    /// The server could not check it (its state file): worth retrying.
    #[error(transparent)]
    Pki(#[from] PkiError),
}

/// A token just created: the only time its secret exists in the clear.
pub struct NewToken {
    /// The token's id (not secret; shown by `list`, used by `revoke`).
    pub id: String,
    /// `<id>.<secret>`: what the agent presents.
    pub token: String,
    /// Unix seconds after which it is refused.
    pub expires_unix: u64,
}

impl std::fmt::Debug for NewToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewToken")
            .field("id", &self.id)
            .field("token", &"<redacted>")
            .field("expires_unix", &self.expires_unix)
            .finish()
    }
}

/// The cluster CA and the state of one PKI directory.
pub struct AgentPki {
    dir: PathBuf,
    ca_pem: String,
    ca_der: Vec<u8>,
    ca_key: KeyPair,
    cache: std::sync::Mutex<Option<(Stamp, Arc<State>)>>,
}

impl std::fmt::Debug for AgentPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentPki").field("dir", &self.dir).field("ca_hash", &self.ca_hash()).finish_non_exhaustive()
    }
}

fn io_ctx(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> PkiError {
    let context = context.into();
    move |source| PkiError::Io { context, source }
}

/// Seconds since the Unix epoch.
pub fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn datetime(unix: u64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(unix.min(253_402_300_799) as i64)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// `n` bytes from the kernel's random source.
fn random_bytes(n: usize) -> Result<Vec<u8>, PkiError> {
    let mut bytes = vec![0u8; n];
    File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(io_ctx("reading /dev/urandom"))?;
    Ok(bytes)
}

/// A positive serial whose first byte is not zero, so its hex is the same
/// however a parser strips leading zeros.
fn random_serial() -> Result<(SerialNumber, String), PkiError> {
    let mut b = random_bytes(16)?;
    b[0] = (b[0] & 0x7f) | 0x40;
    Ok((SerialNumber::from_slice(&b), hex::encode(&b)))
}

/// `sha256:<hex>` of a certificate's DER: what an agent pins.
pub fn cert_hash(der: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(der)))
}

/// The host-name rules of `Register`.
pub fn check_hostname(h: &str) -> Result<(), String> {
    if h.is_empty() {
        return Err("must not be empty".into());
    }
    if h.len() > MAX_HOSTNAME {
        return Err(format!("{} bytes, at most {MAX_HOSTNAME}", h.len()));
    }
    if h.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must not contain whitespace or control characters".into());
    }
    Ok(())
}

/// Whether two host names are one name: equal but for ASCII case and a
/// trailing dot. Certificates issued before names were canonical may be
/// spelled `NODE-A`; they still hold the name `node-a`.
fn same_host(a: &str, b: &str) -> bool {
    a.strip_suffix('.').unwrap_or(a).eq_ignore_ascii_case(b.strip_suffix('.').unwrap_or(b))
}

/// Writes `text` to `path` through a temporary file and a rename, with `mode`.
fn write_file(path: &Path, text: &[u8], mode: u32) -> Result<(), PkiError> {
    paceline_model::secret::write_file_atomic(path, text, mode).map_err(io_ctx(format!("writing {}", path.display())))
}

/// The exclusive lock on a PKI directory, released when dropped.
struct Locked(File);

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl AgentPki {
    /// Opens the PKI directory, creating it and the CA on first use.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, PkiError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(io_ctx(format!("creating {}", dir.display())))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io_ctx(format!("setting the mode of {}", dir.display())))?;
        let _lock = lock(&dir)?;
        let (key_path, cert_path) = (dir.join("ca.key"), dir.join("ca.crt"));
        if !key_path.exists() {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::default();
            params.distinguished_name = DistinguishedName::new();
            params.distinguished_name.push(DnType::CommonName, "paceline cluster CA");
            params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            let now = now_unix();
            params.not_before = datetime(now.saturating_sub(300));
            params.not_after = datetime(now + CA_VALIDITY.as_secs());
            params.serial_number = Some(random_serial()?.0);
            let cert = params.self_signed(&key)?;
            // The certificate first: a key without one is redone, a certificate without its key is not left.
            write_file(&cert_path, cert.pem().as_bytes(), 0o644)?;
            write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
            tracing::info!(dir = %dir.display(), "created the agent CA");
        }
        let read = |p: &Path| std::fs::read_to_string(p).map_err(io_ctx(format!("reading {}", p.display())));
        let ca_pem = read(&cert_path)?;
        let ca_key = KeyPair::from_pem(&read(&key_path)?)
            .map_err(|e| PkiError::Corrupt { path: key_path.clone(), message: e.to_string() })?;
        let ca_der = pem_der(&ca_pem)
            .ok_or_else(|| PkiError::Corrupt { path: cert_path.clone(), message: "not a PEM certificate".into() })?;
        Ok(AgentPki { dir, ca_pem, ca_der, ca_key, cache: std::sync::Mutex::new(None) })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// `sha256:<hex>` of the CA certificate: what `paceline agent --ca-hash` takes.
    pub fn ca_hash(&self) -> String {
        cert_hash(&self.ca_der)
    }

    fn issuer(&self) -> Result<Issuer<'static, &KeyPair>, PkiError> {
        Ok(Issuer::from_ca_cert_pem(&self.ca_pem, &self.ca_key)?)
    }

    /// A fresh certificate for the agent port, valid for `names` (DNS names
    /// or IP addresses), with its key: `(chain_pem, key_pem)`, the chain
    /// being this certificate then the CA (an agent that joins reads the
    /// CA from it and checks it against its pin).
    pub fn server_identity(&self, names: &[String]) -> Result<(String, String), PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, "paceline host manager");
        for n in names {
            let san = match n.parse::<std::net::IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => match n.clone().try_into() {
                    Ok(dns) => SanType::DnsName(dns),
                    Err(_) => {
                        tracing::warn!(name = n, "not a DNS name; left out of the agent port's certificate");
                        continue;
                    }
                },
            };
            if !params.subject_alt_names.contains(&san) {
                params.subject_alt_names.push(san);
            }
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let now = now_unix();
        params.not_before = datetime(now.saturating_sub(300));
        params.not_after = datetime(now + SERVER_CERT_VALIDITY.as_secs());
        params.serial_number = Some(random_serial()?.0);
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer()?)?;
        Ok((format!("{}{}", cert.pem(), self.ca_pem), key.serialize_pem()))
    }

    /// Creates a join token valid for `ttl`, for `uses` joins (`None`: any number until it expires).
    pub fn create_token(&self, ttl: Duration, uses: Option<u32>, description: &str) -> Result<NewToken, PkiError> {
        if ttl.is_zero() {
            return Err(PkiError::Invalid("ttl: must be more than zero".into()));
        }
        if uses == Some(0) {
            return Err(PkiError::Invalid("uses: must be at least 1".into()));
        }
        let id = hex::encode(random_bytes(6)?);
        let secret = hex::encode(random_bytes(16)?);
        let now = now_unix();
        let expires_unix = now.saturating_add(ttl.as_secs().max(1));
        self.update(|s| {
            s.tokens.push(TokenRecord {
                id: id.clone(),
                secret_sha256: hex::encode(Sha256::digest(secret.as_bytes())),
                description: description.to_owned(),
                created_unix: now,
                expires_unix,
                uses_left: uses,
                joins: 0,
                revoked: false,
            });
            Ok(())
        })?;
        Ok(NewToken { token: format!("{id}.{secret}"), id, expires_unix })
    }

    /// Every token (no secrets), oldest first.
    pub fn list_tokens(&self) -> Result<Vec<TokenInfo>, PkiError> {
        let now = now_unix();
        Ok(self.read()?.tokens.iter().map(|t| t.info(now)).collect())
    }

    /// Revokes a token: later joins with it are refused (certificates it already got stay valid).
    pub fn revoke_token(&self, id: &str) -> Result<(), PkiError> {
        self.update(|s| {
            let t = s.tokens.iter_mut().find(|t| t.id == id).ok_or_else(|| PkiError::UnknownToken(id.to_owned()))?;
            t.revoked = true;
            Ok(())
        })
    }

    /// Removes tokens that expired more than a day ago (they can only be refused).
    pub fn prune_tokens(&self) -> Result<usize, PkiError> {
        let cutoff = now_unix().saturating_sub(86_400);
        self.update(|s| {
            let before = s.tokens.len();
            s.tokens.retain(|t| t.expires_unix > cutoff);
            Ok(before - s.tokens.len())
        })
    }

    /// Every certificate issued to an agent, oldest first.
    pub fn list_certs(&self) -> Result<Vec<IssuedCert>, PkiError> {
        Ok(self.read()?.certs.clone())
    }

    /// Revokes every certificate issued for `hostname`: its sessions are
    /// refused from the next connection on, and the name may join again.
    /// Returns how many were revoked.
    pub fn revoke_host(&self, hostname: &str) -> Result<usize, PkiError> {
        self.update(|s| {
            let mut n = 0;
            for c in s.certs.iter_mut().filter(|c| same_host(&c.hostname, hostname) && !c.revoked) {
                c.revoked = true;
                n += 1;
            }
            Ok(n)
        })
    }

    /// Checks `token` and signs `csr_pem` for `hostname`: the certificate, PEM.
    /// The name is taken in its canonical spelling
    /// ([`paceline_model::host::canonical_hostname`]): the certificate is
    /// issued for `node-a` when the agent asked for `NODE-A.`, and a join
    /// under any spelling of a name that holds a valid certificate is refused.
    pub fn join(&self, token: &str, hostname: &str, csr_pem: &str) -> Result<String, JoinError> {
        let hostname = &paceline_model::host::canonical_hostname(hostname).map_err(JoinError::BadHostname)?;
        let (id, secret) = token.split_once('.').ok_or(JoinError::BadToken)?;
        let hash = hex::encode(Sha256::digest(secret.as_bytes()));
        let csr = parse_csr(csr_pem)?;
        let now = now_unix();
        let mut outcome: Result<String, JoinError> = Err(JoinError::BadToken);
        self.update_if(|s| {
            outcome = (|| {
                let t = s.tokens.iter().position(|t| t.id == id && constant_time_eq(&t.secret_sha256, &hash));
                let t = t.ok_or(JoinError::BadToken)?;
                let rec = &s.tokens[t];
                if rec.revoked {
                    return Err(JoinError::Revoked(rec.id.clone()));
                }
                if rec.expires_unix <= now {
                    return Err(JoinError::Expired(rec.id.clone()));
                }
                if rec.uses_left == Some(0) {
                    return Err(JoinError::UsedUp(rec.id.clone()));
                }
                if s.certs.iter().any(|c| same_host(&c.hostname, hostname) && !c.revoked && c.expires_unix > now) {
                    return Err(JoinError::HostnameTaken(hostname.to_owned()));
                }
                let (pem, serial) = self.sign_agent(&csr, hostname)?;
                let rec = &mut s.tokens[t];
                rec.joins += 1;
                if let Some(u) = rec.uses_left.as_mut() {
                    *u -= 1;
                }
                s.certs.push(IssuedCert {
                    serial,
                    hostname: hostname.to_owned(),
                    issued_unix: now,
                    expires_unix: now + AGENT_CERT_VALIDITY.as_secs(),
                    token_id: rec.id.clone(),
                    revoked: false,
                });
                Ok(pem)
            })();
            // A refused join changes nothing: nothing is written.
            Ok(((), outcome.is_ok()))
        })?;
        outcome
    }

    /// Signs an agent certificate for `hostname` with the CSR's key only
    /// (its subject and extensions are ignored): `(pem, serial hex)`.
    fn sign_agent(&self, csr: &CertificateSigningRequestParams, hostname: &str) -> Result<(String, String), PkiError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, hostname);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let now = now_unix();
        params.not_before = datetime(now.saturating_sub(300));
        params.not_after = datetime(now + AGENT_CERT_VALIDITY.as_secs());
        let (serial, serial_hex) = random_serial()?;
        params.serial_number = Some(serial);
        params.use_authority_key_identifier_extension = true;
        Ok((params.signed_by(&csr.public_key, &self.issuer()?)?.pem(), serial_hex))
    }

    /// The host name a session's client certificate (DER, already verified
    /// against the CA by TLS) stands for, unless it was revoked.
    pub fn session_hostname(&self, cert_der: &[u8]) -> Result<String, CertError> {
        let refused = |why: &str| CertError::Refused(why.to_owned());
        let (_, cert) = x509_parser::parse_x509_certificate(cert_der)
            .map_err(|_| refused("the client certificate cannot be parsed"))?;
        let name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .ok_or_else(|| refused("the client certificate names no host"))?
            .to_owned();
        let serial = hex::encode(cert.tbs_certificate.serial.to_bytes_be());
        let state = self.read()?;
        match state.certs.iter().find(|c| c.serial == serial) {
            Some(c) if c.revoked => Err(CertError::Refused(format!("the certificate of host {name:?} was revoked"))),
            Some(c) if c.hostname != name => Err(refused("the client certificate does not match its record")),
            Some(_) => Ok(name),
            None => {
                Err(CertError::Refused(format!("the certificate of host {name:?} is not in this cluster's records")))
            }
        }
    }

    /// `state.json` as it is now. Parsed again only when the file changed
    /// (another inode, size or modification time: every write is a rename),
    /// so a fleet of agents reconnecting at once does not parse it once each.
    fn read(&self) -> Result<Arc<State>, PkiError> {
        // The stamp is taken before the read: a write in between makes the
        // next call read again rather than keep stale contents.
        let stamp = stamp(&self.dir.join("state.json"));
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(now), Some((then, state))) = (&stamp, cache.as_ref())
            && now == then
        {
            return Ok(state.clone());
        }
        let state = {
            let _lock = lock(&self.dir)?;
            Arc::new(State::load(&self.dir)?)
        };
        *cache = stamp.map(|s| (s, state.clone()));
        Ok(state)
    }

    /// Reads, changes and writes `state.json` under the lock.
    fn update<T>(&self, f: impl FnOnce(&mut State) -> Result<T, PkiError>) -> Result<T, PkiError> {
        self.update_if(|s| Ok((f(s)?, true)))
    }

    /// As [`Self::update`], writing only when `f` says it changed something.
    fn update_if<T>(&self, f: impl FnOnce(&mut State) -> Result<(T, bool), PkiError>) -> Result<T, PkiError> {
        let _lock = lock(&self.dir)?;
        let mut state = State::load(&self.dir)?;
        let (out, changed) = f(&mut state)?;
        if changed {
            state.store(&self.dir)?;
        }
        Ok(out)
    }
}

/// What identifies one version of a file written by rename: inode, size, modification time.
type Stamp = (u64, u64, Option<SystemTime>);

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.len(), m.modified().ok()))
}

fn lock(dir: &Path) -> Result<Locked, PkiError> {
    let path = dir.join("lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(io_ctx(format!("opening {}", path.display())))?;
    f.lock().map_err(io_ctx(format!("locking {}", path.display())))?;
    Ok(Locked(f))
}

fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn parse_csr(pem: &str) -> Result<CertificateSigningRequestParams, JoinError> {
    if pem.len() > 16 * 1024 {
        return Err(JoinError::BadCsr("larger than 16 KiB".into()));
    }
    CertificateSigningRequestParams::from_pem(pem).map_err(|e| JoinError::BadCsr(e.to_string()))
}

/// The DER of the first PEM block in `pem`.
pub(crate) fn pem_der(pem: &str) -> Option<Vec<u8>> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).ok().map(|c| c.to_vec())
}

#[cfg(test)]
mod tests;
