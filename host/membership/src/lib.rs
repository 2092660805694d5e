//! Paceline membership: leader election per role and discovery of who leads each role.
//!
//! The four daemons of Paceline (jobmgr, resmgr, hostmgr, placement) are *roles*. A process
//! campaigns for the roles it runs; for each one it learns, through a
//! [`tokio::sync::watch`] channel of [`Leadership`], whether it leads, follows (and whom), or
//! does not know (no session). Any process can also ask who leads a role it does not run
//! ([`Membership::leader_of`]) and which members a role has ([`Membership::members`]).
//!
//! Two implementations:
//! - [`Embedded`]: one process, leader of every role it was given, forever.
//! - [`ZooKeeperMembership`]: ephemeral sequential nodes `/paceline/<cluster>/<role>/member-<seq>`
//!   on a ZooKeeper ensemble; the lowest well-formed sequence leads. Losing the connection steps
//!   every role down at once (see [`zookeeper`] for the exact rule).
//!
//! What this crate owns: the node layout under `/paceline/<cluster>`, the election rule, the
//! step-down rule, the JSON in the nodes ([`MemberInfo`]) and who may touch the nodes: with
//! an `auth` identity ([`ZooKeeperAuthConfig`]) every node gets an ACL that gives that
//! identity all rights and nobody else any (decision 0028).
//!
//! What it must not touch: it does not start or stop roles, fence storage writes, forward
//! requests or read any other part of ZooKeeper. Callers act on [`Leadership`] changes
//! (a leader that sees anything but `Leader` must stop acting as leader at once) and may use
//! [`Leadership::Leader`]'s `epoch` as a fencing token.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

mod auth;
mod embedded;
pub mod zookeeper;

pub use auth::{AuthScheme, Secret, ZooKeeperAuth, ZooKeeperAuthConfig};
pub use embedded::{EMBEDDED_EPOCH, Embedded};
pub use zookeeper::{ZooKeeperConfig, ZooKeeperMembership};
/// The ZooKeeper client this crate uses (its types appear in errors and [`ZooKeeperMembership::session`]).
pub use zookeeper_client;

/// A Paceline role: one of the four daemons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Jobmgr,
    Resmgr,
    Hostmgr,
    Placement,
}

impl Role {
    /// Every role, in dependency order.
    pub const ALL: [Role; 4] = [Role::Jobmgr, Role::Resmgr, Role::Placement, Role::Hostmgr];

    /// The role's name, as in node paths and configuration: `jobmgr`, `resmgr`, `hostmgr`,
    /// `placement`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Jobmgr => "jobmgr",
            Role::Resmgr => "resmgr",
            Role::Hostmgr => "hostmgr",
            Role::Placement => "placement",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = MembershipError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "jobmgr" => Ok(Role::Jobmgr),
            "resmgr" => Ok(Role::Resmgr),
            "hostmgr" => Ok(Role::Hostmgr),
            "placement" => Ok(Role::Placement),
            other => Err(MembershipError::UnknownRole(other.to_string())),
        }
    }
}

/// What a member tells others about itself; stored as JSON in its ZooKeeper node.
///
/// Unknown fields are ignored when reading, so later versions may add fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    /// Unique id of the member (process), e.g. `host:port` or a generated name.
    pub id: String,
    /// Address of its gRPC API (`host:port`).
    pub api_addr: String,
    /// Address agents connect to (`host:port`); empty when it does not serve agents.
    pub agent_addr: String,
    /// Roles it campaigns for.
    pub roles: Vec<Role>,
}

/// This member's standing in one role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// This member leads the role. `epoch` is larger each time this member gains leadership
    /// and larger than the epoch of every earlier leader of the same cluster (with ZooKeeper:
    /// the zxid of a write made when leadership was gained), so it serves as a fencing token.
    Leader { epoch: u64 },
    /// Another member leads (`Some`), or nobody does right now (`None`).
    Follower { leader: Option<MemberInfo> },
    /// No session with the coordination service: this member must not act as leader and does
    /// not know who does.
    Unknown,
}

impl Leadership {
    /// `true` only for [`Leadership::Leader`].
    pub fn is_leader(&self) -> bool {
        matches!(self, Leadership::Leader { .. })
    }
}

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error("unknown role {0:?} (expected jobmgr, resmgr, hostmgr or placement)")]
    UnknownRole(String),
    #[error("invalid membership configuration: {0}")]
    Config(String),
    #[error("no ZooKeeper session (connecting to {connect})")]
    NotConnected { connect: String },
    #[error("timed out after {0:?} waiting for a ZooKeeper session")]
    ConnectTimeout(Duration),
    #[error("membership was shut down")]
    Shutdown,
    #[error("ZooKeeper {op} {path}: {source}")]
    ZooKeeper {
        op: &'static str,
        path: String,
        #[source]
        source: zookeeper_client::Error,
    },
    /// ZooKeeper refused an operation by the node's ACL (`NoAuth`).
    #[error(
        "ZooKeeper refused {op} {path} to {identity}: the node's ACL does not allow it (every process of a \
         cluster must use the same membership.auth user and password; see docs/operations.md)"
    )]
    NotAllowed { op: &'static str, path: String, identity: String },
    #[error("encoding member info: {0}")]
    Encode(#[from] serde_json::Error),
    /// The thread that runs the ZooKeeper session could not be started.
    #[error("cannot start the membership thread: {0}")]
    Thread(String),
}

/// Result with [`MembershipError`].
pub type Result<T, E = MembershipError> = std::result::Result<T, E>;

/// Leader election and discovery per role. Object safe: servers hold an `Arc<dyn Membership>`.
#[async_trait]
pub trait Membership: Send + Sync + std::fmt::Debug {
    /// This member's standing in `role`, as it changes. Only roles this member campaigns for
    /// ever change; for any other role the receiver holds [`Leadership::Unknown`] and its
    /// sender is already gone.
    fn watch(&self, role: Role) -> watch::Receiver<Leadership>;

    /// Who leads `role` now, read from the coordination service (works for roles this
    /// process does not run). `Ok(None)`: nobody leads.
    async fn leader_of(&self, role: Role) -> Result<Option<MemberInfo>>;

    /// Every live member of `role`, leader first (election order).
    async fn members(&self, role: Role) -> Result<Vec<MemberInfo>>;

    /// Step down from every role and close the session so that this member's nodes vanish at
    /// once. Idempotent; after it every role reads [`Leadership::Unknown`].
    async fn shutdown(&self);
}

/// Which membership a server uses; part of the server's YAML configuration.
///
/// ```yaml
/// membership: { kind: embedded }
/// # or
/// membership:
///   kind: zookeeper
///   connect: "zk1:2181,zk2:2181,zk3:2181"
///   cluster: prod
///   session_timeout_ms: 1500
///   auth:                      # strongly advised; without it the nodes are world-writable
///     user: paceline
///     password_file: /etc/paceline/zookeeper-password
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MembershipConfig {
    /// Single process: leader of every role it runs.
    #[default]
    Embedded,
    /// ZooKeeper election and discovery.
    #[serde(rename = "zookeeper", alias = "zoo_keeper")]
    ZooKeeper {
        /// Connect string: `host:port[,host:port…]`.
        connect: String,
        /// Cluster name: nodes live under `/paceline/<cluster>`.
        cluster: String,
        /// Requested session timeout (the server clamps it to its min/max).
        #[serde(default = "default_session_timeout_ms")]
        session_timeout_ms: u64,
        /// Digest identity the sessions authenticate with; every node created gets an ACL
        /// for it alone. `None` (configurations from before 0028): no authentication, nodes
        /// open to anyone, and a warning at start.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        auth: Option<ZooKeeperAuthConfig>,
    },
}

fn default_session_timeout_ms() -> u64 {
    zookeeper::DEFAULT_SESSION_TIMEOUT.as_millis() as u64
}

/// Starts the membership that `config` names for a member that campaigns for `roles`.
///
/// For ZooKeeper this returns at once, also when ZooKeeper is unreachable: roles read
/// [`Leadership::Unknown`] until a session is established, and connecting is retried in the
/// background. Must be called inside a tokio runtime.
///
/// Errors: an invalid configuration, including an `auth` password file or variable that
/// cannot be read.
pub fn from_config(config: &MembershipConfig, member: MemberInfo, roles: Vec<Role>) -> Result<Arc<dyn Membership>> {
    match config {
        MembershipConfig::Embedded => Ok(Arc::new(Embedded::new(member, roles))),
        MembershipConfig::ZooKeeper { connect, cluster, session_timeout_ms, auth } => {
            let auth = auth.as_ref().map(ZooKeeperAuthConfig::resolve).transpose()?;
            let config = ZooKeeperConfig {
                connect: connect.clone(),
                cluster: cluster.clone(),
                session_timeout: Duration::from_millis(*session_timeout_ms),
                member,
                roles,
                auth,
            };
            Ok(Arc::new(ZooKeeperMembership::start(config)?))
        }
    }
}

/// A receiver fixed at [`Leadership::Unknown`], for roles a member does not campaign for.
pub(crate) fn unknown_receiver() -> watch::Receiver<Leadership> {
    let (_tx, rx) = watch::channel(Leadership::Unknown);
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_round_trip() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>().ok(), Some(role));
            assert_eq!(serde_json::to_string(&role).ok(), Some(format!("\"{}\"", role.as_str())));
        }
        assert!("leader".parse::<Role>().is_err());
    }

    #[test]
    fn config_from_yaml() {
        let embedded: MembershipConfig = serde_yaml::from_str("kind: embedded").expect("embedded");
        assert_eq!(embedded, MembershipConfig::Embedded);
        let zk: MembershipConfig =
            serde_yaml::from_str("kind: zookeeper\nconnect: 127.0.0.1:2181\ncluster: c1\n").expect("zk");
        assert_eq!(
            zk,
            MembershipConfig::ZooKeeper {
                connect: "127.0.0.1:2181".into(),
                cluster: "c1".into(),
                session_timeout_ms: 1500,
                auth: None,
            }
        );
        let alias: MembershipConfig =
            serde_yaml::from_str("kind: zoo_keeper\nconnect: a:1\ncluster: c\nsession_timeout_ms: 2000\n")
                .expect("alias");
        assert!(matches!(alias, MembershipConfig::ZooKeeper { session_timeout_ms: 2000, .. }));
        assert!(serde_yaml::from_str::<MembershipConfig>("kind: etcd").is_err());
    }

    #[test]
    fn zookeeper_auth_from_yaml_and_debug_hides_nothing_secret() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("zk-password");
        std::fs::write(&file, "not-for-logs-9f2\n").expect("write");
        let yaml = format!(
            "kind: zookeeper\nconnect: a:1\ncluster: c\nauth: {{ scheme: digest, user: paceline, password_file: {} }}\n",
            file.display()
        );
        let config: MembershipConfig = serde_yaml::from_str(&yaml).expect("zk with auth");
        let MembershipConfig::ZooKeeper { auth: Some(auth), .. } = &config else { panic!("no auth: {config:?}") };
        assert_eq!(auth.user, "paceline");
        assert_eq!(auth.password_file.as_deref(), Some(file.as_path()));
        // The configuration names the file, never holds the password; the resolved
        // identity holds it and does not show it.
        let resolved = auth.resolve().expect("resolve");
        let shown = format!("{config:?} {resolved:?} {}", serde_yaml::to_string(&config).expect("ser"));
        assert!(!shown.contains("not-for-logs"), "{shown}");
        let env: MembershipConfig =
            serde_yaml::from_str("kind: zookeeper\nconnect: a:1\ncluster: c\nauth: { user: u, password_env: ZK_PW }\n")
                .expect("env form");
        assert!(
            matches!(env, MembershipConfig::ZooKeeper { auth: Some(ZooKeeperAuthConfig { ref password_env, .. }), .. } if password_env.as_deref() == Some("ZK_PW"))
        );
        assert!(
            serde_yaml::from_str::<MembershipConfig>(
                "kind: zookeeper\nconnect: a:1\ncluster: c\nauth: { user: u, password: inline }\n"
            )
            .is_err(),
            "a password in the YAML is refused"
        );
    }

    #[test]
    fn member_info_ignores_unknown_fields() {
        let info: MemberInfo =
            serde_json::from_str(r#"{"id":"a","api_addr":"x:1","agent_addr":"","roles":["jobmgr"],"later":true}"#)
                .expect("parse");
        assert_eq!(info.roles, vec![Role::Jobmgr]);
    }
}
