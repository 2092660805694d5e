//! ZooKeeper digest authentication: the `auth` section of a ZooKeeper membership
//! ([`ZooKeeperAuthConfig`]), the identity it resolves to ([`ZooKeeperAuth`]) and the
//! password ([`Secret`]) that is never printed.
//!
//! A member with an identity authenticates its session with `digest user:password` and
//! creates every node with the ACL *all rights to that identity, nothing to anyone else*
//! (ZooKeeper's `auth` scheme, which the server stores as `digest:user:<hash>`). Every
//! process of one cluster (servers, placement engines) must use the same identity: only
//! it can read who leads. See decision 0028.
//!
//! The password comes from a file or an environment variable, never from the YAML itself,
//! so a configuration can be shown, logged or checked in without leaking it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{MembershipError, Result};

pub use paceline_model::secret::Secret;

/// Authentication schemes Paceline can use on ZooKeeper.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthScheme {
    /// ZooKeeper's built-in `digest` scheme: `user:password`, checked against the SHA-1
    /// digest stored in each node's ACL. Needs no server configuration.
    #[default]
    Digest,
}

/// The `auth` section of a ZooKeeper membership, as written in YAML:
///
/// ```yaml
/// auth:
///   scheme: digest            # the default and only scheme
///   user: paceline
///   password_file: /etc/paceline/zookeeper-password   # or: password_env: PACELINE_ZOOKEEPER_PASSWORD
/// ```
///
/// Exactly one of `password_file` and `password_env`. A password written in the YAML is
/// refused (unknown field `password`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZooKeeperAuthConfig {
    /// Scheme; `digest`.
    #[serde(default)]
    pub scheme: AuthScheme,
    /// User name; no `:` (digest splits `user:password` at the first one).
    pub user: String,
    /// File whose content (one trailing newline removed) is the password. Keep it mode 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// Environment variable that holds the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_env: Option<String>,
}

impl ZooKeeperAuthConfig {
    /// Reads the password from its file or variable. Errors name the file or variable and
    /// never contain the password.
    pub fn resolve(&self) -> Result<ZooKeeperAuth> {
        if let Some(path) = &self.password_file
            && Secret::file_is_exposed(path)
        {
            tracing::warn!(file = %path.display(), "ZooKeeper password file is readable by group or others; chmod 600 it");
        }
        let password = Secret::from_file_or_env(self.password_file.as_deref(), self.password_env.as_deref())
            .map_err(|e| MembershipError::Config(format!("ZooKeeper auth: {e}")))?;
        ZooKeeperAuth::digest(&self.user, password)
    }
}

/// A resolved digest identity: what a session authenticates with. `Debug` hides the password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZooKeeperAuth {
    user: String,
    password: Secret,
}

impl ZooKeeperAuth {
    /// A digest identity. Errors: an empty user, or one with `:` or control characters.
    pub fn digest(user: &str, password: Secret) -> Result<Self> {
        if user.is_empty() || user.contains(':') || user.chars().any(char::is_control) {
            return Err(MembershipError::Config(format!(
                "ZooKeeper auth user {user:?} must be non-empty, without ':' or control characters"
            )));
        }
        if password.expose().is_empty() {
            return Err(MembershipError::Config("ZooKeeper auth password is empty".into()));
        }
        Ok(ZooKeeperAuth { user: user.to_string(), password })
    }

    /// The user name (safe to log).
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The scheme's name as ZooKeeper knows it.
    pub fn scheme(&self) -> &'static str {
        "digest"
    }

    /// The bytes `addauth` sends: `user:password`.
    pub(crate) fn credential(&self) -> Vec<u8> {
        format!("{}:{}", self.user, self.password.expose()).into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> ZooKeeperAuthConfig {
        serde_yaml::from_str(yaml).expect("auth yaml")
    }

    #[test]
    fn password_from_a_file_and_never_in_debug() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret-Pa55\n").expect("write");
        let cfg = config(&format!("user: paceline\npassword_file: {}\n", file.display()));
        assert_eq!(cfg.scheme, AuthScheme::Digest);
        let auth = cfg.resolve().expect("resolve");
        assert_eq!(auth.user(), "paceline");
        assert_eq!(auth.credential(), b"paceline:s3cret-Pa55");
        let shown = format!("{auth:?} {:?} {cfg:?}", auth.clone());
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn bad_auth_configs_are_refused_with_reasons() {
        // A password in the YAML itself is not accepted.
        let inline = serde_yaml::from_str::<ZooKeeperAuthConfig>("user: u\npassword: hunter2\n");
        let err = inline.expect_err("inline password").to_string();
        assert!(err.contains("password"), "{err}");
        assert!(serde_yaml::from_str::<ZooKeeperAuthConfig>("scheme: sasl\nuser: u\npassword_env: X\n").is_err());

        let neither = config("user: u\n").resolve().expect_err("no source").to_string();
        assert!(neither.contains("exactly one"), "{neither}");
        let both = config("user: u\npassword_env: A\npassword_file: /b\n").resolve().expect_err("both").to_string();
        assert!(both.contains("exactly one"), "{both}");
        let missing = config("user: u\npassword_file: /nonexistent/pw\n").resolve().expect_err("missing").to_string();
        assert!(missing.contains("/nonexistent/pw"), "{missing}");
        let unset = config("user: u\npassword_env: PACELINE_TEST_SURELY_UNSET_VAR_24\n")
            .resolve()
            .expect_err("unset")
            .to_string();
        assert!(unset.contains("PACELINE_TEST_SURELY_UNSET_VAR_24"), "{unset}");

        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").expect("write");
        let msg = config(&format!("user: u\npassword_file: {}\n", empty.display())).resolve().expect_err("empty");
        assert!(msg.to_string().contains("empty"), "{msg}");

        assert!(ZooKeeperAuth::digest("a:b", Secret::new("pw")).is_err());
        assert!(ZooKeeperAuth::digest("", Secret::new("pw")).is_err());
        assert!(ZooKeeperAuth::digest("u", Secret::new("")).is_err());
    }
}
