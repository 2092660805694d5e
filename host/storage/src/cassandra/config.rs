//! Cassandra settings: the `storage: {cassandra: …}` section of the config
//! file ([`CassandraConfig`]) and the consistency it asks for
//! ([`ConsistencyLevel`]). Re-exported from [`crate::config`], which owns
//! the choice of backend; this module depends on nothing else of the crate.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
