//! Task secrets (decision 0032): a task spec names secrets of its job's pool
//! ([`SecretRef`]); the value is stored sealed and is only ever in the clear
//! on its way to the host that starts the run ([`LaunchSecret`]).
//!
//! The names are checked here; the values never come near a spec, an event
//! or an API answer.

use serde::{Deserialize, Serialize};

use crate::secret::Secret;
use crate::task::SpecError;

/// Longest secret name, in bytes.
pub const MAX_NAME: usize = 63;
/// Largest secret value, in bytes (a certificate chain or a key fits).
pub const MAX_VALUE: usize = 64 * 1024;
/// Most secrets one task may reference.
pub const MAX_REFS: usize = 64;

/// Environment names a secret may not take: the runtime sets these itself.
const RESERVED_ENV_PREFIX: &str = "PACELINE_";

/// A secret the task receives, by name, as exactly one of an environment
/// variable or a file in its sandbox's `secrets/` directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRef {
    /// The secret's name in the job's pool.
    pub name: String,
    /// Deliver it as this environment variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Deliver it as this file under `$PACELINE_SECRETS_DIR` (a plain name, mode 0400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// Where a secret goes on the host.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretTarget {
    /// An environment variable of the task.
    Env(String),
    /// A file of this name in the run's `secrets/` directory.
    File(String),
}

/// A secret on its way to the host that starts a run: the value is a
/// [`Secret`], so a `Debug` of a launch shows `"<redacted>"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSecret {
    /// The secret's name (for errors; never the value).
    pub name: String,
    /// Where it goes.
    pub target: SecretTarget,
    /// The value.
    pub value: Secret,
}

impl SecretRef {
    /// Where the secret goes.
    pub fn target(&self) -> Option<SecretTarget> {
        match (&self.env, &self.file) {
            (Some(e), None) => Some(SecretTarget::Env(e.clone())),
            (None, Some(f)) => Some(SecretTarget::File(f.clone())),
            _ => None,
        }
    }
}

/// Checks a secret's name: 1 to [`MAX_NAME`] of `[a-z0-9._-]`, starting
/// with a letter or digit (so it is also a safe file and key name).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!("must be 1 to {MAX_NAME} bytes"));
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')) {
        return Err("may hold only a-z, 0-9, '.', '_' and '-'".into());
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err("must start with a letter or a digit".into());
    }
    Ok(())
}

fn invalid(field: &'static str, reason: impl Into<String>) -> SpecError {
    SpecError::Invalid { field, reason: reason.into() }
}

/// Checks a task's secret references: valid names, exactly one target
/// each, no environment name the runtime owns, file names that stay in
/// the secrets directory, and no target used twice.
pub fn check_refs(refs: &[SecretRef]) -> Result<(), SpecError> {
    if refs.len() > MAX_REFS {
        return Err(SpecError::TooMany { field: "secrets", len: refs.len(), max: MAX_REFS });
    }
    let mut targets = std::collections::BTreeSet::new();
    for r in refs {
        check_name(&r.name).map_err(|why| invalid("secrets.name", format!("{:?} {why}", r.name)))?;
        let target = r
            .target()
            .ok_or_else(|| invalid("secrets", format!("secret {:?}: set exactly one of env and file", r.name)))?;
        match &target {
            SecretTarget::Env(e) => {
                let ok = !e.is_empty()
                    && e.len() <= 256
                    && e.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !e.starts_with(|c: char| c.is_ascii_digit());
                if !ok {
                    return Err(invalid("secrets.env", format!("{e:?} is not an environment variable name")));
                }
                if e.starts_with(RESERVED_ENV_PREFIX) {
                    return Err(invalid("secrets.env", format!("{e:?}: names starting PACELINE_ are the runtime's")));
                }
            }
            SecretTarget::File(f) => {
                check_name(f).map_err(|why| invalid("secrets.file", format!("{f:?} {why}")))?;
            }
        }
        if !targets.insert(target.clone()) {
            return Err(invalid("secrets", format!("{target:?} is the target of two secrets")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str, var: &str) -> SecretRef {
        SecretRef { name: name.into(), env: Some(var.into()), file: None }
    }

    fn file(name: &str, f: &str) -> SecretRef {
        SecretRef { name: name.into(), env: None, file: Some(f.into()) }
    }

    #[test]
    fn good_references_pass() {
        check_refs(&[env("db-password", "DB_PASSWORD"), file("tls.key", "tls.key")]).expect("test");
    }

    #[test]
    fn bad_references_are_refused_naming_the_field() {
        let cases: Vec<(Vec<SecretRef>, &str)> = vec![
            (vec![env("", "X")], "secrets.name"),
            (vec![env("Upper", "X")], "secrets.name"),
            (vec![env("-lead", "X")], "secrets.name"),
            (vec![SecretRef { name: "a".into(), env: None, file: None }], "secrets"),
            (vec![SecretRef { name: "a".into(), env: Some("A".into()), file: Some("a".into()) }], "secrets"),
            (vec![env("a", "PACELINE_RUN_ID")], "secrets.env"),
            (vec![env("a", "1X")], "secrets.env"),
            (vec![env("a", "A=B")], "secrets.env"),
            (vec![file("a", "../etc/passwd")], "secrets.file"),
            (vec![file("a", "x/y")], "secrets.file"),
            (vec![env("a", "A"), env("b", "A")], "secrets"),
        ];
        for (refs, field) in cases {
            match check_refs(&refs) {
                Err(SpecError::Invalid { field: f, .. }) => assert_eq!(f, field, "{refs:?}"),
                other => panic!("{refs:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_launch_secret_never_formats_its_value() {
        let s = LaunchSecret {
            name: "db".into(),
            target: SecretTarget::Env("DB".into()),
            value: Secret::new("hunter2-value"),
        };
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
