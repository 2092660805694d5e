//! Storage configuration as it appears in Paceline's config file:
//!
//! ```yaml
//! storage:
//!   sqlite: { path: /var/lib/paceline/paceline.db }
//! # or
//! storage:
//!   cassandra:
//!     contact_points: ["10.0.0.1:9042", "10.0.0.2:9042"]
//!     keyspace: paceline
//!     replication: { class: NetworkTopologyStrategy, dc1: 3 }
//!     consistency: local_quorum
//! ```
//!
//! The Cassandra settings ([`CassandraConfig`], [`ConsistencyLevel`]) live
//! beside their backend in [`crate::cassandra`] and are re-exported here:
//! this module depends on the backends (to [`open`] one), never the reverse.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use crate::cassandra::{CassandraConfig, CassandraTls, ConsistencyLevel};
use crate::error::Result;
use crate::store::Store;

/// Which backend, and its settings. In YAML a map with exactly one key,
/// `sqlite` or `cassandra` (the same shape in JSON and YAML, which serde's
/// default enum encoding would not give in YAML).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawStorage", into = "RawStorage")]
pub enum StorageConfig {
    /// The embedded default.
    Sqlite(SqliteConfig),
    /// Apache Cassandra or ScyllaDB.
    /// Boxed: with its login and TLS settings it is ten times the size of the SQLite one.
    Cassandra(Box<CassandraConfig>),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStorage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sqlite: Option<SqliteConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cassandra: Option<CassandraConfig>,
}

impl TryFrom<RawStorage> for StorageConfig {
    type Error = String;

    fn try_from(raw: RawStorage) -> std::result::Result<Self, String> {
        match (raw.sqlite, raw.cassandra) {
            (Some(s), None) => Ok(StorageConfig::Sqlite(s)),
            (None, Some(c)) => Ok(StorageConfig::Cassandra(Box::new(c))),
            _ => Err("storage: give exactly one of `sqlite` or `cassandra`".into()),
        }
    }
}

impl From<StorageConfig> for RawStorage {
    fn from(c: StorageConfig) -> Self {
        match c {
            StorageConfig::Sqlite(s) => RawStorage { sqlite: Some(s), cassandra: None },
            StorageConfig::Cassandra(c) => RawStorage { sqlite: None, cassandra: Some(*c) },
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig::Sqlite(SqliteConfig { path: PathBuf::from("paceline-data/paceline.db") })
    }
}

/// SQLite settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqliteConfig {
    /// Database file; its directory is created if missing.
    pub path: PathBuf,
}

/// Opens the configured store.
pub async fn open(config: &StorageConfig) -> Result<Arc<dyn Store>> {
    Ok(match config {
        StorageConfig::Sqlite(c) => Arc::new(crate::sqlite::SqliteStore::open(&c.path)?),
        StorageConfig::Cassandra(c) => Arc::new(crate::cassandra::CassandraStore::connect(c).await?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms() {
        let s: StorageConfig = serde_yaml::from_str("sqlite: { path: /tmp/x.db }").expect("sqlite");
        assert_eq!(s, StorageConfig::Sqlite(SqliteConfig { path: "/tmp/x.db".into() }));
        let c: StorageConfig = serde_yaml::from_str(
            "cassandra: { contact_points: ['127.0.0.1:9042'], keyspace: k, consistency: one,
               replication: { class: NetworkTopologyStrategy, dc1: 3 } }",
        )
        .expect("cassandra");
        let StorageConfig::Cassandra(c) = c else { panic!("not cassandra") };
        assert_eq!(c.consistency, ConsistencyLevel::One);
        assert_eq!(c.retries, 5);
        assert!(serde_yaml::from_str::<StorageConfig>("sqlite: { path: x, extra: 1 }").is_err());
        assert!(serde_yaml::from_str::<StorageConfig>("{}").is_err());
        let back: StorageConfig = serde_yaml::from_str(&serde_yaml::to_string(&s).expect("ser")).expect("round trip");
        assert_eq!(back, s);
    }
}
