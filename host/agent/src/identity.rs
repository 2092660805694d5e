//! The agent's identity on the agent port: its key, the certificate the
//! host manager issued for its host name, and the cluster CA it trusts.
//!
//! Kept in `<data_dir>/identity/` (`agent.key` 0600, `agent.crt`, `ca.crt`,
//! `hostname`) and reused on every start. An agent without one joins once:
//! it opens a TLS connection to the manager, accepts the presented chain
//! only if it contains the CA whose SHA-256 the operator gave (`--ca-hash`)
//! and the server certificate verifies against it, then calls `Join` over a
//! TLS channel that trusts that CA alone, with its token and a CSR for a key
//! it made. The token is never sent before the server is verified. See
//! docs/decisions/0029-agent-identity.md.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use paceline_proto::agent::v1 as pb;
use paceline_proto::agent::v1::agent_service_client::AgentServiceClient;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::error::{AgentError, io_ctx};

/// A join token (`<id>.<secret>`); never printed.
#[derive(Clone)]
pub struct JoinToken(String);

impl JoinToken {
    /// Wraps the token the operator gave.
    pub fn new(token: impl Into<String>) -> Self {
        JoinToken(token.into().trim().to_owned())
    }
}

impl std::fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = self.0.split_once('.').map_or("?", |(id, _)| id);
        write!(f, "JoinToken({id}.<redacted>)")
    }
}

/// What an agent without an identity joins with.
#[derive(Clone, Debug)]
pub struct JoinSettings {
    /// The token.
    pub token: JoinToken,
    /// `sha256:<hex>` of the cluster CA certificate (`paceline agent-token create` prints it).
    pub ca_hash: String,
}

/// The agent's key, certificate and CA.
#[derive(Clone)]
pub struct Identity {
    /// The client certificate, PEM.
    pub cert_pem: String,
    key_pem: String,
    /// The cluster CA, PEM.
    pub ca_pem: String,
    /// The host name the certificate is for.
    pub hostname: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").field("hostname", &self.hostname).field("key_pem", &"<redacted>").finish()
    }
}

/// `<data_dir>/identity`.
pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("identity")
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), AgentError> {
    paceline_model::secret::write_file_atomic(path, text.as_bytes(), mode)
        .map_err(io_ctx(format!("writing {}", path.display())))
}

impl Identity {
    /// An identity from its parts (the key as PEM PKCS#8).
    pub fn from_parts(cert_pem: String, key_pem: String, ca_pem: String, hostname: String) -> Self {
        Identity { cert_pem, key_pem, ca_pem, hostname }
    }

    /// The identity kept in `data_dir`, if the agent joined.
    pub fn load(data_dir: &Path) -> Result<Option<Identity>, AgentError> {
        let d = dir(data_dir);
        if !d.join("agent.crt").exists() {
            return Ok(None);
        }
        let read = |name: &str| {
            let p = d.join(name);
            std::fs::read_to_string(&p).map_err(io_ctx(format!("reading {}", p.display())))
        };
        Ok(Some(Identity {
            cert_pem: read("agent.crt")?,
            key_pem: read("agent.key")?,
            ca_pem: read("ca.crt")?,
            hostname: read("hostname")?.trim().to_owned(),
        }))
    }

    /// Keeps it in `data_dir` (the certificate last: its presence means complete).
    pub fn store(&self, data_dir: &Path) -> Result<(), AgentError> {
        let d = dir(data_dir);
        std::fs::create_dir_all(&d).map_err(io_ctx(format!("creating {}", d.display())))?;
        // Only the agent's user may enter it (tasks run as other uids).
        std::fs::set_permissions(&d, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o700))
            .map_err(io_ctx(format!("restricting {}", d.display())))?;
        write_file(&d.join("agent.key"), &self.key_pem, 0o600)?;
        write_file(&d.join("ca.crt"), &self.ca_pem, 0o644)?;
        write_file(&d.join("hostname"), &self.hostname, 0o644)?;
        write_file(&d.join("agent.crt"), &self.cert_pem, 0o644)
    }

    /// TLS for a session: trust the cluster CA only, present the agent's certificate.
    pub fn client_tls(&self) -> tonic::transport::ClientTlsConfig {
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem))
            .identity(tonic::transport::Identity::from_pem(&self.cert_pem, &self.key_pem))
    }
}

/// A new key and a CSR for it: `(key_pem, csr_pem)`.
pub fn new_key_and_csr(hostname: &str) -> Result<(String, String), AgentError> {
    let fail = |e: rcgen::Error| AgentError::Identity(format!("making a key: {e}"));
    let key = rcgen::KeyPair::generate().map_err(fail)?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, hostname);
    let csr = params.serialize_request(&key).map_err(fail)?;
    Ok((key.serialize_pem(), csr.pem().map_err(fail)?))
}

/// `https://host:port` for a manager address (`http://` and bare `host:port` alike: the port serves TLS only).
pub fn tls_uri(manager: &str) -> String {
    let rest = manager.split_once("://").map_or(manager, |(_, r)| r);
    format!("https://{}", rest.trim_end_matches('/'))
}

/// Joins through `manager`: verifies it against `settings.ca_hash`, then
/// exchanges the token for a certificate for `hostname`.
pub async fn join(manager: &str, settings: &JoinSettings, hostname: &str) -> Result<Identity, AgentError> {
    let uri = tls_uri(manager);
    let ca_pem = fetch_pinned_ca(&uri, &settings.ca_hash).await?;
    let (key_pem, csr_pem) = new_key_and_csr(hostname)?;
    let channel = tonic::transport::Endpoint::from_shared(uri.clone())?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .tls_config(
            tonic::transport::ClientTlsConfig::new().ca_certificate(tonic::transport::Certificate::from_pem(&ca_pem)),
        )?
        .connect()
        .await?;
    let answer = AgentServiceClient::new(channel)
        .join(pb::JoinRequest { token: settings.token.0.clone(), hostname: hostname.to_owned(), csr_pem })
        .await?
        .into_inner();
    tracing::info!(hostname, manager = uri, "joined the cluster; certificate received");
    Ok(Identity { cert_pem: answer.cert_pem, key_pem, ca_pem, hostname: hostname.to_owned() })
}

/// `sha256:<hex>` of a DER certificate.
pub fn cert_hash(der: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(der)))
}

/// Opens a TLS connection to `uri` and returns the CA certificate (PEM) in
/// the presented chain whose hash is `pin`, once the server's certificate
/// verified against it. Nothing is sent over this connection.
async fn fetch_pinned_ca(uri: &str, pin: &str) -> Result<String, AgentError> {
    let pin = pin.trim().to_ascii_lowercase();
    if !pin.starts_with("sha256:") || pin.len() != 7 + 64 || !pin[7..].bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(AgentError::Identity(format!("--ca-hash {pin:?}: expected sha256:<64 hex digits>")));
    }
    let parsed: tonic::codegen::http::Uri =
        uri.parse().map_err(|e| AgentError::Identity(format!("manager address {uri:?}: {e}")))?;
    let host = parsed.host().ok_or_else(|| AgentError::Identity(format!("manager address {uri:?}: no host")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = parsed.port_u16().unwrap_or(443);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        Arc::new(PinnedCa { pin, provider: provider.clone(), found: Mutex::new(None), refused: Mutex::new(None) });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| AgentError::Identity(format!("TLS settings: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    let name =
        ServerName::try_from(host.clone()).map_err(|e| AgentError::Identity(format!("manager host {host:?}: {e}")))?;
    let connect = async {
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(io_ctx(format!("connecting to {host}:{port}")))?;
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(io_ctx(format!("TLS with {host}:{port}")))
    };
    // A refused pin is final; anything else (a manager going away mid-handshake, no
    // answer) is an I/O error the caller retries.
    let result = tokio::time::timeout(Duration::from_secs(10), connect).await;
    if let Some(why) = verifier.refused.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(AgentError::Identity(format!("{host}:{port}: {why}")));
    }
    let _tls = result.map_err(|_| AgentError::Io {
        context: format!("TLS with {host}:{port}"),
        source: std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer within 10 s"),
    })??;
    let der = verifier
        .found
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .ok_or_else(|| AgentError::Identity("the manager presented no certificate chain".into()))?;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap_or_default()).collect();
    Ok(format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", lines.join("\n")))
}

/// Accepts a server chain only when it carries the pinned CA and the
/// server certificate verifies against it (and the name dialled).
#[derive(Debug)]
struct PinnedCa {
    pin: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
    found: Mutex<Option<Vec<u8>>>,
    /// Why the chain was refused, when it was.
    refused: Mutex<Option<String>>,
}

impl PinnedCa {
    fn refuse(&self, why: String) -> rustls::Error {
        *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.clone());
        rustls::Error::General(why)
    }
}

impl ServerCertVerifier for PinnedCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ca = intermediates.iter().find(|c| cert_hash(c) == self.pin).ok_or_else(|| {
            self.refuse(
                "the manager's certificate chain holds no CA with the --ca-hash given (a wrong hash, or another cluster)"
                    .into(),
            )
        })?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone().into_owned()).map_err(|e| self.refuse(format!("the pinned CA: {e}")))?;
        let webpki =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
                .build()
                .map_err(|e| self.refuse(format!("the pinned CA: {e}")))?;
        let verified = webpki.verify_server_cert(end_entity, &[], server_name, ocsp_response, now).map_err(|e| {
            self.refuse(format!("the manager's certificate does not verify against the pinned CA: {e}"))
        })?;
        *self.found.lock().unwrap_or_else(|e| e.into_inner()) = Some(ca.to_vec());
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manager_addresses_become_https() {
        assert_eq!(tls_uri("http://a:1"), "https://a:1");
        assert_eq!(tls_uri("https://a:1/"), "https://a:1");
        assert_eq!(tls_uri("a:1"), "https://a:1");
    }

    #[test]
    fn a_token_is_not_printed() {
        let t = JoinToken::new("abc.supersecret");
        assert_eq!(format!("{t:?}"), "JoinToken(abc.<redacted>)");
        let id = Identity::from_parts("c".into(), "KEY-SECRET".into(), "ca".into(), "h".into());
        assert!(!format!("{id:?}").contains("KEY-SECRET"));
    }

    #[test]
    fn a_key_and_csr_are_pem() {
        let (key, csr) = new_key_and_csr("host-a").expect("ok");
        assert!(key.contains("PRIVATE KEY"));
        assert!(csr.contains("CERTIFICATE REQUEST"));
    }

    #[test]
    fn an_identity_survives_a_round_trip_on_disk() {
        let dir = tempfile::tempdir().expect("ok");
        assert!(Identity::load(dir.path()).expect("ok").is_none());
        let id = Identity::from_parts("cert".into(), "key".into(), "ca".into(), "host-a".into());
        id.store(dir.path()).expect("ok");
        let back = Identity::load(dir.path()).expect("ok").expect("ok");
        assert_eq!(
            (back.cert_pem, back.key_pem, back.ca_pem, back.hostname),
            ("cert".into(), "key".into(), "ca".into(), "host-a".into())
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("identity/agent.key")).expect("ok").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
