//! Who the store is to Cassandra and how it reaches it: the login (role name and a password
//! read from a file or the environment) and the TLS context (decision 0028).
//!
//! The password never sits in [`CassandraConfig`] (which names only where it comes from), is
//! never printed, and [`Login`]'s `Debug` hides it. Errors name the file or variable, never
//! its content.
//!
//! TLS uses OpenSSL through the driver's `openssl-010` feature: the node's certificate must
//! chain to `ca_file` alone (the system's roots are not trusted for a database), and, unless
//! `verify_address: false`, name the IP address the driver connects to.

use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode, SslVersion};
use openssl::x509::X509;
use openssl::x509::store::X509StoreBuilder;
use paceline_model::secret::Secret;
use scylla::client::session::OpenSsl010Config;

use super::config::{CassandraConfig, CassandraTls};

use crate::error::{Result, StoreError};

/// OpenSSL's `X509_V_ERR_IP_ADDRESS_MISMATCH`: the certificate does not name the IP.
const IP_ADDRESS_MISMATCH: i32 = 64;

/// The role and password the session logs in with.
#[derive(Debug, Clone)]
pub(super) struct Login {
    pub(super) user: String,
    pub(super) password: Secret,
}

fn invalid(msg: String) -> StoreError {
    StoreError::Invalid(format!("cassandra: {msg}"))
}

/// The login `cfg` asks for, with its password read; `None` without `username`.
pub(super) fn login(cfg: &CassandraConfig) -> Result<Option<Login>> {
    let Some(user) = &cfg.username else {
        if cfg.password_file.is_some() || cfg.password_env.is_some() {
            return Err(invalid("password_file/password_env given without username".into()));
        }
        return Ok(None);
    };
    if user.is_empty() {
        return Err(invalid("username is empty".into()));
    }
    if let Some(path) = &cfg.password_file
        && Secret::file_is_exposed(path)
    {
        tracing::warn!(file = %path.display(), "cassandra password file is readable by group or others; chmod 600 it");
    }
    let password = Secret::from_file_or_env(cfg.password_file.as_deref(), cfg.password_env.as_deref())
        .map_err(|e| invalid(format!("username {user:?}: {e}")))?;
    Ok(Some(Login { user: user.clone(), password }))
}

/// The driver's TLS context for `tls`.
pub(super) fn tls_context(tls: &CassandraTls) -> Result<OpenSsl010Config> {
    let ssl = |what: &str, e: openssl::error::ErrorStack| invalid(format!("tls: {what}: {e}"));
    let pem =
        std::fs::read(&tls.ca_file).map_err(|e| invalid(format!("tls: ca_file {}: {e}", tls.ca_file.display())))?;
    let cas = X509::stack_from_pem(&pem).map_err(|e| ssl(&format!("ca_file {}", tls.ca_file.display()), e))?;
    if cas.is_empty() {
        return Err(invalid(format!("tls: ca_file {} holds no PEM certificate", tls.ca_file.display())));
    }
    // Only the given CAs: SslConnector's default store would also trust every public CA.
    let mut store = X509StoreBuilder::new().map_err(|e| ssl("certificate store", e))?;
    for ca in cas {
        store.add_cert(ca).map_err(|e| ssl(&format!("ca_file {}", tls.ca_file.display()), e))?;
    }
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(|e| ssl("context", e))?;
    builder.set_cert_store(store.build());
    builder.set_min_proto_version(Some(SslVersion::TLS1_2)).map_err(|e| ssl("protocol version", e))?;
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            builder.set_certificate_chain_file(cert).map_err(|e| ssl(&format!("cert_file {}", cert.display()), e))?;
            builder
                .set_private_key_file(key, SslFiletype::PEM)
                .map_err(|e| ssl(&format!("key_file {}", key.display()), e))?;
            builder.check_private_key().map_err(|e| ssl("key_file does not match cert_file", e))?;
        }
        (None, None) => {}
        _ => return Err(invalid("tls: cert_file and key_file go together".into())),
    }
    if !tls.verify_address {
        // The chain is still verified; only the check of the IP in the certificate is waived.
        builder.set_verify_callback(SslVerifyMode::PEER, |ok, ctx| ok || ctx.error().as_raw() == IP_ADDRESS_MISMATCH);
    }
    Ok(OpenSsl010Config::new(builder))
}

/// The error of a failed connect, with a hint when it is about the login or TLS.
pub(super) fn connect_error(cfg: &CassandraConfig, driver: &str) -> StoreError {
    let lower = driver.to_ascii_lowercase();
    let hint = if lower.contains("authentication is required") {
        "; the cluster requires a login: set storage.cassandra.username and password_file or password_env".to_string()
    } else if lower.contains("authenticat") || lower.contains("password") || lower.contains("credentials") {
        match &cfg.username {
            Some(user) => format!(
                "; the cluster refused the login of role {user:?}: check storage.cassandra.username and the \
                 password in {}",
                password_source(cfg)
            ),
            None => String::new(),
        }
    } else if lower.contains("certificate required") {
        // TLS 1.3's alert 116: the node wants a client certificate we did not show.
        "; the node requires a client certificate: set storage.cassandra.tls.cert_file and key_file".into()
    } else if lower.contains("ssl") || lower.contains("tls") || lower.contains("certificate") {
        match &cfg.tls {
            Some(tls) => format!(
                "; TLS failed: the node's certificate must be signed by {} and name the address connected to \
                 (or the node does not speak TLS on this port)",
                tls.ca_file.display()
            ),
            None => "; the node may require TLS: set storage.cassandra.tls".into(),
        }
    } else {
        String::new()
    };
    StoreError::Unavailable(format!("cassandra at {:?}: {driver}{hint}", cfg.contact_points))
}

fn password_source(cfg: &CassandraConfig) -> String {
    match (&cfg.password_file, &cfg.password_env) {
        (Some(file), _) => format!("password_file {}", file.display()),
        (_, Some(var)) => format!("password_env {var}"),
        _ => "the configuration".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn cfg(yaml: &str) -> CassandraConfig {
        serde_yaml::from_str(yaml).expect("cassandra yaml")
    }

    #[test]
    fn login_reads_the_file_and_debug_hides_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("pw");
        std::fs::write(&file, "Zq-secret-77\n").expect("write");
        let c = cfg(&format!("contact_points: [a:1]\nusername: paceline\npassword_file: {}\n", file.display()));
        let login = login(&c).expect("login").expect("some");
        assert_eq!((login.user.as_str(), login.password.expose()), ("paceline", "Zq-secret-77"));
        let shown = format!("{login:?} {c:?} {}", serde_yaml::to_string(&c).expect("ser"));
        assert!(!shown.contains("Zq-secret"), "{shown}");
        assert!(super::login(&CassandraConfig::local("a:1", "k")).expect("no login").is_none());
    }

    #[test]
    fn bad_logins_are_refused_with_reasons() {
        let cases = [
            ("username: u\n", "exactly one"),
            ("username: u\npassword_env: A\npassword_file: /b\n", "exactly one"),
            ("password_file: /b\n", "without username"),
            ("username: u\npassword_file: /nonexistent/cass-pw\n", "/nonexistent/cass-pw"),
            ("username: u\npassword_env: PACELINE_TEST_SURELY_UNSET_24\n", "PACELINE_TEST_SURELY_UNSET_24"),
            ("username: ''\npassword_env: X\n", "username is empty"),
        ];
        for (yaml, why) in cases {
            let err = login(&cfg(&format!("contact_points: [a:1]\n{yaml}"))).expect_err(yaml).to_string();
            assert!(err.contains(why), "{yaml}: {err}");
        }
        // A password in the YAML itself is not accepted.
        assert!(serde_yaml::from_str::<CassandraConfig>("contact_points: [a:1]\nusername: u\npassword: p\n").is_err());
    }

    #[test]
    fn tls_files_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").expect("write");
        let tls =
            |ca: &Path| CassandraTls { ca_file: ca.into(), cert_file: None, key_file: None, verify_address: true };
        let missing = tls_context(&tls(Path::new("/nonexistent/ca.pem"))).map(|_| ()).expect_err("missing");
        assert!(missing.to_string().contains("/nonexistent/ca.pem"), "{missing}");
        let err = tls_context(&tls(&garbage)).map(|_| ()).expect_err("garbage").to_string();
        assert!(err.contains("garbage.pem"), "{err}");
        let parsed: CassandraTls = serde_yaml::from_str("ca_file: /x.pem").expect("tls yaml");
        assert!(parsed.verify_address, "verifying the address is the default");
        assert!(serde_yaml::from_str::<CassandraTls>("ca_file: /x.pem\nverify: false").is_err());
    }

    #[test]
    fn connect_errors_say_what_to_check() {
        let mut c = CassandraConfig::local("127.0.0.1:9042", "k");
        c.username = Some("paceline".into());
        c.password_file = Some("/etc/pw".into());
        let e = connect_error(&c, "Authentication failed: Provided username paceline and/or password are incorrect");
        assert!(e.to_string().contains("password_file /etc/pw"), "{e}");
        let e = connect_error(&CassandraConfig::local("a:1", "k"), "Authentication is required. You can use ...");
        assert!(e.to_string().contains("username"), "{e}");
        let e = connect_error(&c, "SSL routines:ssl3_read_bytes:tlsv13 alert certificate required");
        assert!(e.to_string().contains("requires a client certificate"), "{e}");
    }
}
