//! A secret value from configuration (a token, a password) that no
//! formatting shows: `Debug` prints `"<redacted>"` and there is no
//! `Display` (a `{}` of it does not compile), so a config logged with
//! `?config` or an error that quotes a struct cannot leak it. Read it with
//! [`Secret::expose`], at the one place that hands it on. One type for the
//! whole workspace (the server's tokens, the ZooKeeper digest, the
//! Cassandra password).

use serde::{Deserialize, Serialize};

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

    /// Reads a secret from a file (trailing newline removed), as operators
    /// keep them: mode 0600, outside the config file.
    pub fn from_file(path: &std::path::Path) -> std::io::Result<Secret> {
        let text = std::fs::read_to_string(path)?;
        Ok(Secret(text.trim_end_matches(['\n', '\r']).to_string()))
    }
}

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
    fn a_file_loses_its_trailing_newline_only() {
        let dir = std::env::temp_dir().join(format!("paceline-secret-{}", std::process::id()));
        std::fs::write(&dir, " pass word \n").expect("write");
        let s = Secret::from_file(&dir).expect("read");
        let _ = std::fs::remove_file(&dir);
        assert_eq!(s.expose(), " pass word ");
    }
}
