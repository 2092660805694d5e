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

impl StorageConfig {
    /// A store named on a command line: `sqlite:PATH`, or
    /// `cassandra:HOST:PORT[,HOST:PORT…][/KEYSPACE]` (keyspace `paceline` when left out;
    /// the login and TLS from the `PACELINE_CASSANDRA_*` variables, see
    /// [`CassandraConfig::with_env_security`]).
    pub fn from_url(url: &str) -> std::result::Result<StorageConfig, String> {
        if let Some(path) = url.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err(format!("`{url}`: give the database file, as in sqlite:/var/lib/paceline/paceline.db"));
            }
            return Ok(StorageConfig::Sqlite(SqliteConfig { path: PathBuf::from(path) }));
        }
        if let Some(rest) = url.strip_prefix("cassandra:") {
            let (addr, keyspace) = rest.split_once('/').unwrap_or((rest, "paceline"));
            // One node, or several separated by commas (a cluster, as
            // `cassandra.sh env` prints it): each with its port.
            let port_ok = addr
                .split(',')
                .all(|a| a.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()));
            if !port_ok {
                return Err(format!(
                    "`{url}`: give host and port of each node, as in cassandra:10.0.0.1:9042/paceline or cassandra:10.0.0.1:9042,10.0.0.2:9042"
                ));
            }
            let keyspace = if keyspace.is_empty() { "paceline" } else { keyspace };
            return Ok(StorageConfig::Cassandra(Box::new(CassandraConfig::local(addr, keyspace).with_env_security())));
        }
        Err(format!("`{url}`: a store is sqlite:PATH or cassandra:HOST:PORT[/KEYSPACE]"))
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

    #[test]
    fn urls_name_a_store_or_are_refused() {
        assert_eq!(
            StorageConfig::from_url("sqlite:/tmp/a.db"),
            Ok(StorageConfig::Sqlite(SqliteConfig { path: "/tmp/a.db".into() }))
        );
        let Ok(StorageConfig::Cassandra(c)) = StorageConfig::from_url("cassandra:10.0.0.1:9042/ks1") else {
            panic!("cassandra url")
        };
        assert_eq!((c.contact_points.as_slice(), c.keyspace.as_str()), (&["10.0.0.1:9042".to_string()][..], "ks1"));
        let Ok(StorageConfig::Cassandra(c)) = StorageConfig::from_url("cassandra:localhost:9042") else {
            panic!("cassandra url")
        };
        assert_eq!(c.keyspace, "paceline");
        let Ok(StorageConfig::Cassandra(c)) = StorageConfig::from_url("cassandra:127.0.0.1:19042,127.0.0.2:19042/k")
        else {
            panic!("a cluster's url")
        };
        assert_eq!(c.contact_points, vec!["127.0.0.1:19042".to_string(), "127.0.0.2:19042".to_string()]);
        for bad in [
            "sqlite:",
            "cassandra:host",
            "cassandra:127.0.0.1:9042,127.0.0.2",
            "cassandra::9042",
            "cassandra:h:port",
            "postgres://x",
            "",
        ] {
            assert!(StorageConfig::from_url(bad).is_err(), "{bad}");
        }
    }
}
