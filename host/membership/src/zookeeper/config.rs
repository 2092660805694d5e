//! A ZooKeeper member's configuration and its validation.

use std::time::Duration;

use zookeeper_client as zk;

use super::DEFAULT_SESSION_TIMEOUT;
use crate::{MemberInfo, MembershipError, Result, Role, ZooKeeperAuth};
/// Configuration of a ZooKeeper member.
#[derive(Clone, Debug)]
pub struct ZooKeeperConfig {
    /// Connect string: `host:port[,host:port…]`.
    pub connect: String,
    /// Cluster name; nodes live under `/paceline/<cluster>`.
    pub cluster: String,
    /// Requested session timeout; the server clamps it to its `minSessionTimeout` /
    /// `maxSessionTimeout`.
    pub session_timeout: Duration,
    /// What this member publishes about itself.
    pub member: MemberInfo,
    /// Roles this member campaigns for (may be empty: discovery only).
    pub roles: Vec<Role>,
    /// Digest identity to authenticate with; nodes are created for it alone. `None`: no
    /// authentication, nodes open to anyone.
    pub auth: Option<ZooKeeperAuth>,
}

impl ZooKeeperConfig {
    /// A configuration with the default session timeout.
    pub fn new(connect: impl Into<String>, cluster: impl Into<String>, member: MemberInfo, roles: Vec<Role>) -> Self {
        ZooKeeperConfig {
            connect: connect.into(),
            cluster: cluster.into(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            member,
            roles,
            auth: None,
        }
    }

    /// The same configuration, authenticating as `auth`.
    pub fn with_auth(mut self, auth: ZooKeeperAuth) -> Self {
        self.auth = Some(auth);
        self
    }

    /// The ACL of every node this member creates.
    pub(super) fn acls(&self) -> zk::Acls<'static> {
        match self.auth {
            Some(_) => zk::Acls::creator_all(),
            None => zk::Acls::anyone_all(),
        }
    }

    /// Who this member is to ZooKeeper, for error messages.
    pub(super) fn identity(&self) -> String {
        match &self.auth {
            Some(auth) => format!("{} user {:?}", auth.scheme(), auth.user()),
            None => "an unauthenticated session".into(),
        }
    }

    pub(super) fn validate(&self) -> Result<()> {
        let cluster = &self.cluster;
        if cluster.is_empty() || cluster == "." || cluster == ".." || cluster.contains('/') {
            return Err(MembershipError::Config(format!(
                "cluster name {cluster:?} must be non-empty, not . or .., and contain no '/'"
            )));
        }
        if cluster.chars().any(|c| c.is_control()) {
            return Err(MembershipError::Config(format!("cluster name {cluster:?} has control characters")));
        }
        let hosts = self.connect.split('/').next().unwrap_or_default();
        if hosts.trim().is_empty() || hosts.split(',').any(|h| h.trim().is_empty()) {
            return Err(MembershipError::Config(format!(
                "connect string {:?} must be host:port[,host:port…]",
                self.connect
            )));
        }
        for host in hosts.split(',') {
            if let Some((_, port)) = host.trim().rsplit_once(':')
                && port.parse::<u16>().is_err()
            {
                return Err(MembershipError::Config(format!("bad port in {host:?} of {:?}", self.connect)));
            }
        }
        if self.session_timeout.is_zero() {
            return Err(MembershipError::Config("session timeout must be positive".into()));
        }
        Ok(())
    }
}
