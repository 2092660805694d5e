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

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

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
    Cassandra(CassandraConfig),
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
            (None, Some(c)) => Ok(StorageConfig::Cassandra(c)),
            _ => Err("storage: give exactly one of `sqlite` or `cassandra`".into()),
        }
    }
}

impl From<StorageConfig> for RawStorage {
    fn from(c: StorageConfig) -> Self {
        match c {
            StorageConfig::Sqlite(s) => RawStorage { sqlite: Some(s), cassandra: None },
            StorageConfig::Cassandra(c) => RawStorage { sqlite: None, cassandra: Some(c) },
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

/// Consistency level of reads and writes (serial consistency of
/// compare-and-set follows: LOCAL_SERIAL for `local_*` and `one`, SERIAL otherwise).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsistencyLevel {
    /// One replica: only for a single-node development cluster.
    One,
    /// A majority of replicas in the local datacenter: the default.
    #[default]
    LocalQuorum,
    /// A majority of all replicas.
    Quorum,
    /// Every replica in every datacenter that has one.
    EachQuorum,
    /// Every replica.
    All,
}

/// Cassandra settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CassandraConfig {
    /// `host:port` of one or more nodes; the driver discovers the rest.
    pub contact_points: Vec<String>,
    /// Keyspace; created with `replication` if missing.
    #[serde(default = "default_keyspace")]
    pub keyspace: String,
    /// Replication map used when creating the keyspace, e.g.
    /// `{class: SimpleStrategy, replication_factor: 1}` for one node or
    /// `{class: NetworkTopologyStrategy, dc1: 3}` in production.
    #[serde(default = "default_replication")]
    pub replication: BTreeMap<String, serde_yaml::Value>,
    /// Consistency of reads and writes.
    #[serde(default)]
    pub consistency: ConsistencyLevel,
    /// Days task events live before they expire (TTL).
    #[serde(default = "default_event_ttl_days")]
    pub event_ttl_days: u32,
    /// Tries of a statement that timed out or found its node overloaded.
    #[serde(default = "default_retries")]
    pub retries: u32,
}

fn default_keyspace() -> String {
    "paceline".into()
}

fn default_replication() -> BTreeMap<String, serde_yaml::Value> {
    BTreeMap::from([
        ("class".to_string(), serde_yaml::Value::from("SimpleStrategy")),
        ("replication_factor".to_string(), serde_yaml::Value::from(1)),
    ])
}

fn default_event_ttl_days() -> u32 {
    7
}

fn default_retries() -> u32 {
    5
}

impl CassandraConfig {
    /// Settings for one local node at `addr`, keyspace `keyspace`, RF 1.
    pub fn local(addr: &str, keyspace: &str) -> Self {
        CassandraConfig {
            contact_points: vec![addr.to_string()],
            keyspace: keyspace.to_string(),
            replication: default_replication(),
            consistency: ConsistencyLevel::LocalQuorum,
            event_ttl_days: default_event_ttl_days(),
            retries: default_retries(),
        }
    }
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
