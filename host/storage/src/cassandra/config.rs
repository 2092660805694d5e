//! Cassandra settings: the `storage: {cassandra: …}` section of the config
//! file ([`CassandraConfig`]) and the consistency it asks for
//! ([`ConsistencyLevel`]). Re-exported from [`crate::config`], which owns
//! the choice of backend; this module depends on nothing else of the crate.

use std::collections::BTreeMap;
use std::path::PathBuf;

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
    /// Role to log in as, for a cluster that runs `PasswordAuthenticator`. `None`: no login
    /// (a cluster with `AllowAllAuthenticator`). With it, exactly one of `password_file` and
    /// `password_env` gives the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// File whose content (one trailing newline removed) is the password. Keep it mode 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// Environment variable that holds the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_env: Option<String>,
    /// TLS to the nodes (`client_encryption_options` on the Cassandra side). `None`: plain
    /// TCP, and the password (if any) crosses the network in clear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<CassandraTls>,
    /// Before a newer server upgrades the keyspace's schema, copy every table
    /// into a keyspace beside it (`KEYSPACE_preN`, N the old schema version),
    /// which the older server can be pointed at to go back. On by default;
    /// turn it off for a store too large to copy in the upgrade's window
    /// (then take `nodetool snapshot` by hand).
    #[serde(default = "default_true_copy")]
    pub copy_before_upgrade: bool,
}

fn default_true_copy() -> bool {
    true
}

/// TLS settings of the connection to Cassandra:
///
/// ```yaml
/// tls:
///   ca_file: /etc/paceline/cassandra-ca.pem    # PEM: the CA (or self-signed node certificate) to trust
///   cert_file: /etc/paceline/client.pem        # optional: a client certificate, for require_client_auth
///   key_file: /etc/paceline/client-key.pem     # with cert_file: its private key (PEM)
///   verify_address: true                       # default: the certificate must name the node's IP
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CassandraTls {
    /// PEM file of the certificates to trust; nodes must present a certificate they sign.
    pub ca_file: PathBuf,
    /// PEM client certificate (chain), for nodes with `require_client_auth: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Check that the node's certificate names the address the driver connects to (the
    /// driver connects by IP, so the certificate needs that IP in its subjectAltName). Turn
    /// off only for certificates without IP names; the chain is verified either way.
    #[serde(default = "default_true")]
    pub verify_address: bool,
}

fn default_true() -> bool {
    true
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
    /// Settings for the node(s) at `addr` (`host:port`, or several
    /// separated by commas, as `cassandra.sh env` prints a cluster),
    /// keyspace `keyspace`, RF 1.
    pub fn local(addr: &str, keyspace: &str) -> Self {
        CassandraConfig {
            contact_points: addr.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect(),
            keyspace: keyspace.to_string(),
            replication: default_replication(),
            consistency: ConsistencyLevel::LocalQuorum,
            event_ttl_days: default_event_ttl_days(),
            retries: default_retries(),
            username: None,
            password_file: None,
            password_env: None,
            tls: None,
            copy_before_upgrade: true,
        }
    }

    /// These settings with the login, TLS, replication and consistency that
    /// `deploy/cassandra/cassandra.sh env` exports: `PACELINE_CASSANDRA_USER` with
    /// `PACELINE_CASSANDRA_PASSWORD_FILE`, `PACELINE_CASSANDRA_CA_FILE` with
    /// `PACELINE_CASSANDRA_CERT_FILE` and `PACELINE_CASSANDRA_KEY_FILE`, and for a
    /// cluster `PACELINE_CASSANDRA_REPLICATION_FACTOR` (SimpleStrategy) and
    /// `PACELINE_CASSANDRA_CONSISTENCY` (`one`, `local_quorum`, `quorum`, …), each
    /// only when set and non-empty. For tests, benchmarks and tools pointed at a node
    /// by `PACELINE_CASSANDRA`; servers take these from their configuration file.
    /// A value it cannot read is ignored with a warning.
    pub fn with_env_security(mut self) -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if let Some(rf) = var("PACELINE_CASSANDRA_REPLICATION_FACTOR") {
            match rf.trim().parse::<u32>() {
                Ok(rf) if rf > 0 => {
                    self.replication = BTreeMap::from([
                        ("class".to_string(), serde_yaml::Value::from("SimpleStrategy")),
                        ("replication_factor".to_string(), serde_yaml::Value::from(rf)),
                    ])
                }
                _ => {
                    tracing::warn!(value = %rf, "PACELINE_CASSANDRA_REPLICATION_FACTOR is not a positive number; ignored")
                }
            }
        }
        if let Some(c) = var("PACELINE_CASSANDRA_CONSISTENCY") {
            match serde_yaml::from_str::<ConsistencyLevel>(c.trim()) {
                Ok(c) => self.consistency = c,
                Err(_) => {
                    tracing::warn!(value = %c, "PACELINE_CASSANDRA_CONSISTENCY is not one of one, local_quorum, quorum, each_quorum, all; ignored")
                }
            }
        }
        if let Some(user) = var("PACELINE_CASSANDRA_USER") {
            self.username = Some(user);
            self.password_file = var("PACELINE_CASSANDRA_PASSWORD_FILE").map(PathBuf::from);
            self.password_env = None;
        }
        if let Some(ca) = var("PACELINE_CASSANDRA_CA_FILE") {
            self.tls = Some(CassandraTls {
                ca_file: ca.into(),
                cert_file: var("PACELINE_CASSANDRA_CERT_FILE").map(PathBuf::from),
                key_file: var("PACELINE_CASSANDRA_KEY_FILE").map(PathBuf::from),
                verify_address: true,
            });
        }
        self
    }
}
