//! A secret value from configuration (a token, a password) that no
//! formatting shows: `Debug` prints `"<redacted>"` and there is no
//! `Display` (a `{}` of it does not compile), so a config logged with
//! `?config` or an error that quotes a struct cannot leak it. Read it with
//! [`Secret::expose`], at the one place that hands it on. One type for the
//! whole workspace (the server's tokens, the ZooKeeper digest, the
//! Cassandra password).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Writes `bytes` to `path` whole or not at all (a temporary file beside
/// it, fsynced, then renamed over it), created with `mode` (0600 for a key).
/// The one writer of the files that hold keys and certificates: the
/// server's secrets key, the agents' CA and join tokens, an agent's identity.
pub fn write_file_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    // A leftover from a crash may have another mode: start afresh.
    let _ = std::fs::remove_file(&tmp);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut f = opts.open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// A string that formats as `"<redacted>"`. Serialises as the plain string
/// (a config file round-trips), so write it only where the secret belongs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the call that needs it (never for a log line).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Reads a secret from a file, as operators keep them: mode 0600,
    /// outside the config file. The file holds one line; its line ending is
    /// removed. Refused: an unreadable or empty file, or one of several
    /// lines. Errors name the file (callers say which setting), never the value.
    pub fn from_file(path: &Path) -> Result<Secret, SecretError> {
        let text = std::fs::read_to_string(path).map_err(|e| SecretError(format!("{}: {e}", path.display())))?;
        let line = text.strip_suffix('\n').unwrap_or(&text);
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            return Err(SecretError(format!("{} is empty", path.display())));
        }
        if line.contains('\n') {
            return Err(SecretError(format!("{} has more than one line", path.display())));
        }
        Ok(Secret(line.to_string()))
    }

    /// Reads a secret from an environment variable; unset or empty is refused.
    pub fn from_env(var: &str) -> Result<Secret, SecretError> {
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => Ok(Secret(v)),
            Ok(_) => Err(SecretError(format!("{var} is empty"))),
            Err(_) => Err(SecretError(format!("{var} is not set (or not UTF-8)"))),
        }
    }

    /// The secret a configuration names by exactly one of `file` and `env`
    /// (the `password_file` / `password_env` pair of the ZooKeeper and
    /// Cassandra settings).
    pub fn from_file_or_env(file: Option<&Path>, env: Option<&str>) -> Result<Secret, SecretError> {
        match (file, env) {
            (Some(path), None) => Secret::from_file(path).map_err(|e| SecretError(format!("password_file {e}"))),
            (None, Some(var)) => Secret::from_env(var).map_err(|e| SecretError(format!("password_env {e}"))),
            _ => Err(SecretError("needs exactly one of password_file and password_env".into())),
        }
    }

    /// Whether `path` can be read by its group or others (its reader should
    /// warn: `chmod 600`). False where that cannot be told.
    pub fn file_is_exposed(path: &Path) -> bool {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
        }
        #[cfg(not(unix))]
        {
            let _ = path;
            false
        }
    }
}

/// Why a secret could not be read: names the file or variable, never the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SecretError(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting_never_shows_the_value_and_serde_keeps_it() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "\"<redacted>\"");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some(\"<redacted>\")");
        assert_eq!(s.expose(), "hunter2");
        let yaml = serde_yaml::to_string(&s).expect("yaml");
        assert_eq!(serde_yaml::from_str::<Secret>(&yaml).expect("back"), s);
    }

    #[test]
    fn a_file_or_a_variable_gives_one_line_and_errors_never_show_it() {
        let dir = std::env::temp_dir().join(format!("paceline-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).expect("write");
            p
        };
        let ok = write("ok", " pass word \r\n");
        assert_eq!(Secret::from_file(&ok).expect("read").expose(), " pass word ", "only the line ending goes");
        for (name, text, why) in [("empty", "\n", "is empty"), ("two", "hunter2\nhunter3\n", "more than one line")] {
            let e = Secret::from_file(&write(name, text)).expect_err(name).to_string();
            assert!(e.contains(why) && e.contains(name) && !e.contains("hunter"), "{e}");
        }
        let missing = Secret::from_file(&dir.join("nope")).expect_err("missing").to_string();
        assert!(missing.contains("nope"), "{missing}");
        let unset = Secret::from_env("PACELINE_TEST_SURELY_UNSET_SECRET_9").expect_err("unset").to_string();
        assert!(unset.contains("PACELINE_TEST_SURELY_UNSET_SECRET_9"), "{unset}");
        for (file, env) in [(None, None), (Some(ok.as_path()), Some("X"))] {
            let e = Secret::from_file_or_env(file, env).expect_err("not exactly one").to_string();
            assert!(e.contains("exactly one"), "{e}");
        }
        assert_eq!(Secret::from_file_or_env(Some(&ok), None).expect("file").expose(), " pass word ");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o640)).expect("chmod");
            assert!(Secret::file_is_exposed(&ok), "group-readable");
            std::fs::set_permissions(&ok, std::fs::Permissions::from_mode(0o600)).expect("chmod");
            assert!(!Secret::file_is_exposed(&ok), "owner only");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
