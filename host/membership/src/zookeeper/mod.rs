//! Leader election and discovery on ZooKeeper.
//!
//! # Layout
//!
//! ```text
//! /paceline                                   persistent
//!   /<cluster>                                persistent
//!     /<role>                                 persistent (jobmgr, resmgr, hostmgr, placement)
//!       /member-0000000007   {"id":…}         ephemeral sequential, one per campaigning member
//!       /member-0000000009   {"id":…}
//! ```
//!
//! # Election
//!
//! Each member creates one ephemeral sequential node per role it campaigns for, with its
//! [`MemberInfo`] as JSON data (in the same `create`, so a member's node is never seen without
//! its data). Among the *well-formed* children — name `member-<digits>`, ephemeral, data that
//! parses as [`MemberInfo`] — the lowest sequence leads. Malformed children are ignored (with a
//! warning, once per node): a malformed node never leads and never blocks an election, even
//! when its sequence is the lowest. Every member applies the same rule to the same children,
//! so they agree on the leader.
//!
//! A follower watches its predecessor (the next lower well-formed node), so a member leaving
//! wakes one member, not all. It also watches the leader's node so that
//! [`Leadership::Follower`] names the current leader; that wakes every follower once per
//! change of leader, never per change of membership. The leader watches its own node.
//! Any watch firing, or a reconnection, re-reads the children and re-evaluates.
//!
//! When a member gains leadership it rewrites its node's data (same bytes); the zxid of that
//! write is the [`Leadership::Leader`] epoch. Zxids grow across the whole ensemble, so each
//! gain of leadership, by any member, has a larger epoch than every gain before it.
//!
//! # Step-down rule: a lease on the session
//!
//! ZooKeeper expires a session no sooner than the session timeout `T` after it last heard
//! from the client, and it heard from the client no sooner than the client sent a request
//! that it answered. Every member sends a cheap request (`exists /paceline`) every `T/10`
//! and keeps the send time of the latest one answered: until that time plus `3/4·T` its
//! session cannot have expired, so no other member can have been elected. A member stops
//! being leader (every role reads [`Leadership::Unknown`]) when that lease runs out, and at
//! once when the session expires or closes. The remaining quarter of `T` is the margin for
//! the step-down to take effect (a server exits at once) before a successor can lead.
//!
//! A connection the client declares lost (no reply within `2/5·T`, or a socket error) is not
//! a step-down by itself: the client reconnects within the same session, and a leader whose
//! ZooKeeper answers late, as a busy machine's does, keeps leading as long as the lease holds.
//! An earlier rule stepped down at every lost connection; under load on a 2-core machine a
//! 1 s session lost its leader several times a minute that way (docs/decisions/0038).
//! The session runs on a thread of its own (see [`ZooKeeperMembership::start`]), so the
//! heartbeats and the lease's timer do not wait behind scheduling work. The rule holds while
//! the process is not paused longer than the margin (SIGSTOP, a stalled machine); the epoch
//! is the fence for that case.
//!
//! If the connection comes back within the same session, the member re-evaluates: a leader
//! whose lease held leads on with the same epoch; one whose lease ran out leads again, if its
//! node is still the lowest, with a new, larger epoch. If the session expired or
//! was closed, the member opens a fresh session, creates fresh nodes and campaigns again.
//! ZooKeeper unreachable (at start or later) is not fatal: connecting is retried with a
//! backoff of 0.2 s doubling to 5 s, each failure logged.
//!
//! # Access control
//!
//! With [`ZooKeeperConfig::auth`] set, every session authenticates with that digest identity
//! (also each time the client reconnects) and every node this module creates, the
//! persistent parents included, gets the ACL *all rights to the creating identity, nothing to
//! anyone else* ([`zk::Acls::creator_all`]). A client without the identity can neither
//! create, change nor delete a member node, nor read who leads. At the start of each session
//! the parents that already exist with a `world:anyone` entry (created by a member without
//! auth, i.e. a cluster upgraded to auth) get the same ACL; a parent with any other ACL is left
//! as its owner set it. Without `auth` the nodes are open to anyone (`world:anyone` all
//!
//! # Code
//!
//! This file holds the handle ([`ZooKeeperMembership`]), the state its tasks share and the
//! constants of the rule above; `config` the configuration, `session` one session's
//! life and its lease, `campaign` the election of one role, and `shared` the helpers
//! every task uses to read member nodes and publish leadership.
//! rights) and [`ZooKeeperMembership::start`] warns so.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tracing::{info, warn};
use zookeeper_client as zk;

use crate::{Leadership, MemberInfo, Membership, MembershipError, Result, Role};

mod campaign;
mod config;
mod session;
mod shared;

pub use config::ZooKeeperConfig;
use session::run;

/// Session timeout asked for when the configuration does not say. A SIGKILLed leader's
/// successor places work about this long plus one ZooKeeper tick after the kill; the lease
/// (3/4 of it) is how long a busy ZooKeeper may leave a leader unanswered before it steps
/// down. Measured in docs/benchmarks.md ("Failover"); chosen in decision 0038.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_millis(1_500);

/// Root of every Paceline cluster's nodes.
pub const ROOT: &str = "/paceline";

/// Prefix of member node names; the sequence follows.
pub const MEMBER_PREFIX: &str = "member-";

const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long shutdown waits for node deletes and the session close.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);
/// A member stops leading when ZooKeeper has answered no request it sent within this share
/// of the session timeout (see the module's step-down rule).
const LEASE_NUM: u32 = 3;
const LEASE_DEN: u32 = 4;
/// A heartbeat request is sent every session timeout divided by this.
const HEARTBEATS_PER_SESSION: u32 = 10;
/// Safety net: re-evaluate after an error even if no watch or reconnect wakes us.
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(1);

/// Membership on ZooKeeper. Create with [`ZooKeeperMembership::start`]; dropping it without
/// [`Membership::shutdown`] closes the session in the background.
#[derive(Debug)]
pub struct ZooKeeperMembership {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ZooKeeperConfig,
    /// JSON of `config.member`, the data of our nodes.
    data: Vec<u8>,
    roles: BTreeMap<Role, watch::Sender<Leadership>>,
    /// Serialises step-downs against leader publications; see [`Inner::publish`].
    gate: Mutex<Gate>,
    /// The client of the established session, `None` between sessions.
    session: watch::Sender<Option<zk::Client>>,
    shutdown: watch::Sender<bool>,
    /// Becomes `true` when the membership thread has closed the session and ended.
    finished: watch::Sender<bool>,
    /// Malformed nodes already warned about (warn once per node path).
    warned: Mutex<HashSet<String>>,
}

#[derive(Debug, Default)]
struct Gate {
    /// Generation of the current session; a role task of an older one may not publish.
    generation: u64,
    /// The current session is connected and may publish.
    live: bool,
    /// The session's lease holds (see `session::Lease`): ZooKeeper answered a request sent less
    /// than [`LEASE_FRACTION`] of the session timeout ago. Leadership is published only then.
    fresh: bool,
}

impl ZooKeeperMembership {
    /// Starts campaigning in the background and returns at once. Every role reads
    /// [`Leadership::Unknown`] until a session is established; an unreachable ZooKeeper is
    /// retried with backoff (see [`ZooKeeperMembership::wait_connected`]).
    ///
    /// The session and the election run on a thread of their own with its own
    /// single-threaded runtime, not on the caller's: the ZooKeeper client's pings, its
    /// connection-loss timer and the step-down must not wait behind scheduling work. On a
    /// busy runtime a late ping is a session that expires (and leadership that moves) while
    /// the leader is alive; see docs/decisions/0038-failover-defaults.md.
    ///
    /// Errors: an invalid configuration, or the thread cannot be started.
    pub fn start(config: ZooKeeperConfig) -> Result<Self> {
        config.validate()?;
        match &config.auth {
            Some(auth) => info!(cluster = %config.cluster, user = %auth.user(),
                "ZooKeeper membership authenticates with digest; nodes are created for that user alone"),
            None => warn!(cluster = %config.cluster,
                "ZooKeeper membership without `auth`: the nodes under {ROOT}/{} are world-writable, so anyone \
                 who reaches ZooKeeper can take or fake leadership; set membership.auth (docs/operations.md)",
                config.cluster),
        }
        let data = serde_json::to_vec(&config.member)?;
        let mut roles = BTreeMap::new();
        for role in &config.roles {
            roles.entry(*role).or_insert_with(|| watch::Sender::new(Leadership::Unknown));
        }
        let inner = Arc::new(Inner {
            config,
            data,
            roles,
            gate: Mutex::new(Gate::default()),
            session: watch::Sender::new(None),
            shutdown: watch::Sender::new(false),
            finished: watch::Sender::new(false),
            warned: Mutex::new(HashSet::new()),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| MembershipError::Thread(err.to_string()))?;
        let background = inner.clone();
        std::thread::Builder::new()
            .name("paceline-zookeeper".into())
            .spawn(move || {
                runtime.block_on(run(background.clone()));
                // Dropping the runtime ends what the client left running (its session task).
                drop(runtime);
                background.finished.send_replace(true);
            })
            .map_err(|err| MembershipError::Thread(err.to_string()))?;
        Ok(ZooKeeperMembership { inner })
    }

    /// Waits until a session is established (at most `timeout`). Roles may still read
    /// `Unknown` for a moment after this returns: the election runs right after.
    pub async fn wait_connected(&self, timeout: Duration) -> Result<()> {
        let mut rx = self.inner.session.subscribe();
        let mut shutdown = self.inner.shutdown.subscribe();
        let wait = async {
            tokio::select! {
                r = rx.wait_for(|c| c.is_some()) => r.map(|_| ()).map_err(|_| MembershipError::Shutdown),
                _ = shutdown.wait_for(|s| *s) => Err(MembershipError::Shutdown),
            }
        };
        tokio::time::timeout(timeout, wait).await.map_err(|_| MembershipError::ConnectTimeout(timeout))?
    }

    /// The current session (id and password), if one is established: for diagnostics and
    /// tests (which session a member holds, to tell a new session from the old).
    pub fn session(&self) -> Option<zk::SessionInfo> {
        self.inner.session.borrow().as_ref().map(|c| c.session().clone())
    }

    /// The id of the current session, if one is established.
    pub fn session_id(&self) -> Option<i64> {
        self.inner.session.borrow().as_ref().map(|c| c.session_id().0)
    }

    /// The configuration this member runs with.
    pub fn config(&self) -> &ZooKeeperConfig {
        &self.inner.config
    }

    fn connected_client(&self) -> Result<zk::Client> {
        let client = self.inner.session.borrow().clone();
        match client {
            Some(c) if c.state() == zk::SessionState::SyncConnected => Ok(c),
            _ => Err(MembershipError::NotConnected { connect: self.inner.config.connect.clone() }),
        }
    }
}

impl Drop for ZooKeeperMembership {
    fn drop(&mut self) {
        // The background task deletes our nodes and closes the session.
        self.inner.shutdown.send_replace(true);
    }
}

#[async_trait]
impl Membership for ZooKeeperMembership {
    fn watch(&self, role: Role) -> watch::Receiver<Leadership> {
        match self.inner.roles.get(&role) {
            Some(tx) => tx.subscribe(),
            None => crate::unknown_receiver(),
        }
    }

    async fn leader_of(&self, role: Role) -> Result<Option<MemberInfo>> {
        Ok(self.members(role).await?.into_iter().next())
    }

    async fn members(&self, role: Role) -> Result<Vec<MemberInfo>> {
        let client = self.connected_client()?;
        let dir = self.inner.role_dir(role);
        let timeout = client.session_timeout();
        let read = tokio::time::timeout(timeout, self.inner.read_members(&client, &dir))
            .await
            .map_err(|_| MembershipError::NotConnected { connect: self.inner.config.connect.clone() })?;
        Ok(read?.into_iter().map(|m| m.info).collect())
    }

    async fn shutdown(&self) {
        let inner = &self.inner;
        // Step down first, then clean up.
        inner.shutdown.send_replace(true);
        inner.step_down_all(None);
        let mut finished = inner.finished.subscribe();
        let limit = CLOSE_TIMEOUT + Duration::from_secs(2);
        if tokio::time::timeout(limit, finished.wait_for(|f| *f)).await.is_err() {
            warn!(cluster = %inner.config.cluster,
                "membership did not close within {limit:?}; its session will expire on its own");
        }
        inner.step_down_all(None);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::session::backoff;
    use super::shared::parse_seq;
    use super::*;

    #[test]
    fn sequence_names() {
        assert_eq!(parse_seq("member-0000000042"), Some(42));
        assert_eq!(parse_seq("member-0"), Some(0));
        assert_eq!(parse_seq("member-"), None);
        assert_eq!(parse_seq("member-12a"), None);
        assert_eq!(parse_seq("member--1"), None);
        assert_eq!(parse_seq("lock-0000000001"), None);
        assert_eq!(parse_seq("member-99999999999999999999999"), None);
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert!(backoff(1) >= BACKOFF_MIN && backoff(1) < BACKOFF_MIN * 2);
        assert!(backoff(3) >= BACKOFF_MIN * 4);
        assert!(backoff(40) <= BACKOFF_MAX + BACKOFF_MAX / 10);
    }

    fn config(connect: &str, cluster: &str) -> ZooKeeperConfig {
        let member = MemberInfo { id: "m".into(), api_addr: "a:1".into(), agent_addr: String::new(), roles: vec![] };
        ZooKeeperConfig::new(connect, cluster, member, vec![])
    }

    #[test]
    fn config_validation() {
        assert!(config("127.0.0.1:2181", "prod").validate().is_ok());
        assert!(config("a:1,b:2,c:3/chroot", "prod").validate().is_ok());
        assert!(config("", "prod").validate().is_err());
        assert!(config("a:1,,b:2", "prod").validate().is_err());
        assert!(config("a:port", "prod").validate().is_err());
        assert!(config("a:1", "").validate().is_err());
        assert!(config("a:1", "x/y").validate().is_err());
        assert!(config("a:1", "..").validate().is_err());
    }
}
