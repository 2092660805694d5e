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
//! rights) and [`ZooKeeperMembership::start`] warns so.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use async_trait::async_trait;
use tokio::sync::watch;
use tracing::{debug, error, info, warn};
use zookeeper_client as zk;

use crate::{Leadership, MemberInfo, Membership, MembershipError, Result, Role, ZooKeeperAuth};

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
    fn acls(&self) -> zk::Acls<'static> {
        match self.auth {
            Some(_) => zk::Acls::creator_all(),
            None => zk::Acls::anyone_all(),
        }
    }

    /// Who this member is to ZooKeeper, for error messages.
    fn identity(&self) -> String {
        match &self.auth {
            Some(auth) => format!("{} user {:?}", auth.scheme(), auth.user()),
            None => "an unauthenticated session".into(),
        }
    }

    fn validate(&self) -> Result<()> {
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
    /// The session's lease holds (see [`Lease`]): ZooKeeper answered a request sent less
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

// --- background task ---------------------------------------------------------------------

/// Connect, campaign until the session ends, repeat; until shutdown.
async fn run(inner: Arc<Inner>) {
    let cfg = &inner.config;
    let mut shutdown = inner.shutdown.subscribe();
    let mut failures: u32 = 0;
    while !*shutdown.borrow() {
        let mut connector = zk::Client::connector().with_session_timeout(cfg.session_timeout).with_fail_eagerly();
        if let Some(auth) = &cfg.auth {
            // Sent with the session's first packets and again after every reconnect.
            connector = connector.with_auth(auth.scheme(), &auth.credential());
        }
        // The server touches the session no sooner than this: the start of the lease.
        let connecting = Instant::now();
        let connect = connector.connect(&cfg.connect);
        // Connecting gives up on its own after about a session timeout; the outer limit
        // guards against a server that accepts but never answers.
        let limit = cfg.session_timeout * 2 + Duration::from_secs(1);
        let result = tokio::select! {
            r = tokio::time::timeout(limit, connect) => r,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        match result {
            Ok(Ok(client)) => {
                if failures > 0 {
                    info!(cluster = %cfg.cluster, connect = %cfg.connect, "reached ZooKeeper after {failures} failed attempts");
                }
                failures = 0;
                run_session(&inner, client, connecting).await;
            }
            Ok(Err(_)) | Err(_) => {
                failures += 1;
                let delay = backoff(failures);
                let why = match result {
                    Ok(Err(err)) => err.to_string(),
                    _ => format!("no session within {limit:?}"),
                };
                if failures == 1 {
                    error!(cluster = %cfg.cluster, connect = %cfg.connect,
                        "cannot reach ZooKeeper ({why}); every role stays Unknown until a session is \
                         established; retrying in {delay:?}");
                } else {
                    warn!(cluster = %cfg.cluster, connect = %cfg.connect,
                        "cannot reach ZooKeeper ({why}); attempt {failures}, retrying in {delay:?}");
                }
                sleep_or_shutdown(delay, &mut shutdown).await;
            }
        }
    }
    inner.step_down_all(None);
    debug!(cluster = %cfg.cluster, "membership task finished");
}

fn backoff(failures: u32) -> Duration {
    let exp = BACKOFF_MIN.saturating_mul(1u32 << failures.saturating_sub(1).min(10));
    let capped = exp.min(BACKOFF_MAX);
    // Up to 10% jitter so that members restarted together do not retry in step.
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    capped + capped / 10 * (nanos % 100) / 100
}

async fn sleep_or_shutdown(delay: Duration, shutdown: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(delay) => {}
        _ = shutdown.wait_for(|s| *s) => {}
    }
}

/// One session: publish the client, campaign per role, follow the session state and keep
/// the lease; returns when the session ends (expired, closed) or on shutdown, with the
/// session closed. `connecting`: when the connect request was sent.
async fn run_session(inner: &Arc<Inner>, client: zk::Client, connecting: Instant) {
    let cfg = &inner.config;
    let session_id = client.session_id();
    let mut states = client.state_watcher();
    let negotiated = client.session_timeout();
    let mut lease = Lease::new(negotiated, connecting);
    let generation = {
        let mut gate = lock(&inner.gate);
        gate.generation += 1;
        gate.live = client.state() == zk::SessionState::SyncConnected;
        gate.fresh = true;
        gate.generation
    };
    info!(cluster = %cfg.cluster, session = %session_id, timeout = ?negotiated,
        "ZooKeeper session established");
    if negotiated != cfg.session_timeout {
        warn!(cluster = %cfg.cluster, asked = ?cfg.session_timeout, negotiated = ?negotiated,
            "ZooKeeper gave another session timeout than asked (its minSessionTimeout / maxSessionTimeout, \
             2 and 20 tickTimes unless set): failover takes about the negotiated timeout; see docs/membership.md");
    }
    inner.session.send_replace(Some(client.clone()));
    if cfg.auth.is_some() {
        inner.restrict_open_parents(&client).await;
    }

    let (nudge, _) = watch::channel(0u64);
    let (stop, _) = watch::channel(false);
    let mut tasks = Vec::new();
    for role in inner.roles.keys() {
        let campaign = Campaign {
            inner: inner.clone(),
            role: *role,
            client: client.clone(),
            generation,
            dir: inner.role_dir(*role),
            mine: None,
        };
        tasks.push(tokio::spawn(campaign.run(nudge.subscribe(), stop.subscribe())));
    }

    let mut shutdown = inner.shutdown.subscribe();
    let mut heartbeat = tokio::time::interval(lease.heartbeat_every());
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut in_flight = futures::stream::FuturesUnordered::new();
    loop {
        tokio::select! {
            state = states.changed() => match state {
                zk::SessionState::Disconnected => {
                    // Not a step-down yet: the session lives on at the server until it expires,
                    // and the lease says how long this member may go on trusting that.
                    warn!(cluster = %cfg.cluster, session = %session_id, lease_left = ?lease.remaining(),
                        "lost connection to ZooKeeper; reconnecting (roles unchanged until the lease runs out)");
                }
                zk::SessionState::SyncConnected => {
                    {
                        let mut gate = lock(&inner.gate);
                        if gate.generation == generation && !*inner.shutdown.borrow() {
                            gate.live = true;
                        }
                    }
                    info!(cluster = %cfg.cluster, session = %session_id, "reconnected to ZooKeeper; re-electing");
                    nudge.send_modify(|n| *n += 1);
                    // Renew the lease now rather than at the next tick.
                    heartbeat.reset_immediately();
                }
                zk::SessionState::ConnectedReadOnly => {
                    // Read-only sessions are not requested; never lead on one.
                    inner.step_down_all(Some(generation));
                }
                terminal => {
                    inner.step_down_all(Some(generation));
                    warn!(cluster = %cfg.cluster, session = %session_id,
                        "ZooKeeper session {terminal}; stepped down from every role, opening a new session");
                    break;
                }
            },
            _ = heartbeat.tick() => {
                // A request the server must answer; its send time, once answered, renews the lease.
                let sent = Instant::now();
                let check = client.check_stat(ROOT);
                in_flight.push(async move { (sent, check.await.is_ok()) });
            }
            Some((sent, answered)) = futures::StreamExt::next(&mut in_flight) => {
                if answered && lease.renew(sent) && inner.refresh(generation) {
                    info!(cluster = %cfg.cluster, session = %session_id, "ZooKeeper answers again; re-electing");
                    nudge.send_modify(|n| *n += 1);
                }
            }
            () = tokio::time::sleep_until(lease.ends()) => {
                if inner.lapse(generation) {
                    warn!(cluster = %cfg.cluster, session = %session_id, lease = ?lease.length(),
                        "ZooKeeper answered nothing sent in the last {:?}; stepped down from every role before \
                         the session can expire", lease.length());
                }
                lease.lapsed();
            }
            _ = shutdown.wait_for(|s| *s) => {
                inner.step_down_all(Some(generation));
                break;
            }
        }
    }
    drop(in_flight);

    // End of session: role tasks stop (deleting their nodes on shutdown), then every clone of
    // the client is dropped, which closes the session.
    stop.send_replace(true);
    for task in tasks {
        if let Err(err) = task.await {
            error!(cluster = %cfg.cluster, "campaign task failed: {err}");
        }
    }
    inner.session.send_replace(None);
    drop(client);
    if *shutdown.borrow() && states.peek_state() == zk::SessionState::SyncConnected {
        let closed =
            tokio::time::timeout(CLOSE_TIMEOUT, async { while !states.changed().await.is_terminated() {} }).await;
        match closed {
            Ok(()) => {
                info!(cluster = %cfg.cluster, session = %session_id, "ZooKeeper session closed")
            }
            Err(_) => warn!(cluster = %cfg.cluster, session = %session_id,
                "ZooKeeper session not confirmed closed within {CLOSE_TIMEOUT:?}; it will expire"),
        }
    }
}

/// How long this member may trust its session: ZooKeeper expires a session no sooner than
/// the session timeout after it last heard from the client, and it heard from us no sooner
/// than we sent a request it answered. So until `renewed + LEASE_NUM/LEASE_DEN × timeout`
/// the session cannot have expired and no other member can lead; past it, step down.
#[derive(Debug)]
struct Lease {
    timeout: Duration,
    /// Send time of the latest answered request.
    renewed: Instant,
    /// The lease ran out and has not been renewed since.
    lapsed: bool,
}

impl Lease {
    fn new(timeout: Duration, renewed: Instant) -> Lease {
        Lease { timeout, renewed, lapsed: false }
    }

    fn length(&self) -> Duration {
        self.timeout * LEASE_NUM / LEASE_DEN
    }

    fn heartbeat_every(&self) -> Duration {
        (self.timeout / HEARTBEATS_PER_SESSION).max(Duration::from_millis(10))
    }

    /// When the lease runs out; far ahead once it has (nothing more to do until renewed).
    fn ends(&self) -> Instant {
        if self.lapsed { self.renewed + Duration::from_secs(86_400) } else { self.renewed + self.length() }
    }

    fn remaining(&self) -> Duration {
        self.ends().saturating_duration_since(Instant::now())
    }

    /// An answer to a request sent at `sent`; `true` when it renews a lapsed lease.
    fn renew(&mut self, sent: Instant) -> bool {
        if sent > self.renewed {
            self.renewed = sent;
        }
        let renewed = self.lapsed && Instant::now() < self.renewed + self.length();
        if renewed {
            self.lapsed = false;
        }
        renewed
    }

    fn lapsed(&mut self) {
        self.lapsed = true;
    }
}

/// A member node as read from ZooKeeper.
#[derive(Debug, Clone)]
struct Node {
    seq: i64,
    path: String,
    info: MemberInfo,
}

impl Inner {
    fn role_dir(&self, role: Role) -> String {
        format!("{ROOT}/{}/{}", self.config.cluster, role.as_str())
    }

    /// The error of a failed ZooKeeper call; a refusal by ACL says whom it refused and why.
    fn zk_err<'a>(&'a self, op: &'static str, path: &'a str) -> impl FnOnce(zk::Error) -> MembershipError + 'a {
        move |source| match source {
            zk::Error::NoAuth => {
                MembershipError::NotAllowed { op, path: path.to_string(), identity: self.config.identity() }
            }
            source => MembershipError::ZooKeeper { op, path: path.to_string(), source },
        }
    }

    /// Upgrade path to auth: the persistent parents (`/paceline`, the cluster's node, every
    /// role's node) that exist with a `world:anyone` entry get this identity's ACL. Member
    /// nodes need nothing: old ones go with their sessions. Failures are logged, not fatal:
    /// the election then reports what it cannot do.
    async fn restrict_open_parents(&self, client: &zk::Client) {
        let cluster_dir = format!("{ROOT}/{}", self.config.cluster);
        let mut paths = vec![ROOT.to_string(), cluster_dir];
        paths.extend(Role::ALL.iter().map(|r| self.role_dir(*r)));
        for path in paths {
            let acl = match client.get_acl(&path).await {
                Ok((acl, _)) => acl,
                Err(zk::Error::NoNode) => continue,
                Err(err) => {
                    warn!(cluster = %self.config.cluster, node = %path, "cannot read the ACL: {err}");
                    continue;
                }
            };
            if !acl.iter().any(|a| a.auth_id() == &zk::AuthId::anyone()) {
                continue;
            }
            match client.set_acl(&path, &self.config.acls(), None).await {
                Ok(_) => warn!(cluster = %self.config.cluster, node = %path, identity = %self.config.identity(),
                    "node was open to anyone (world:anyone); restricted it to this identity"),
                Err(err) => {
                    let err = self.zk_err("setAcl", &path)(err);
                    error!(cluster = %self.config.cluster, "{err}; the node stays open to anyone");
                }
            }
        }
    }

    /// Every role to `Unknown`, and the session (if `generation` is still current, or always
    /// for `None`) no longer live: an expired or closed session, or shutdown.
    fn step_down_all(&self, generation: Option<u64>) {
        let mut gate = lock(&self.gate);
        match generation {
            Some(g) if g != gate.generation => {}
            _ => gate.live = false,
        }
        for (role, tx) in &self.roles {
            let was_leader = tx.borrow().is_leader();
            tx.send_if_modified(|s| std::mem::replace(s, Leadership::Unknown) != Leadership::Unknown);
            if was_leader {
                warn!(cluster = %self.config.cluster, %role, "stepped down");
            }
        }
    }

    /// The lease of `generation`'s session ran out: every role to `Unknown`, and no
    /// publication until it is renewed. Returns whether a role led.
    fn lapse(&self, generation: u64) -> bool {
        let mut gate = lock(&self.gate);
        if gate.generation != generation {
            return false;
        }
        gate.fresh = false;
        let mut led = false;
        for tx in self.roles.values() {
            led |= tx.borrow().is_leader();
            tx.send_if_modified(|s| std::mem::replace(s, Leadership::Unknown) != Leadership::Unknown);
        }
        led
    }

    /// The lease of `generation`'s session holds again; `true` when it had lapsed.
    fn refresh(&self, generation: u64) -> bool {
        let mut gate = lock(&self.gate);
        let was = gate.generation == generation && !gate.fresh;
        if gate.generation == generation {
            gate.fresh = true;
        }
        was
    }

    /// Publishes `state` for `role` if the session of `generation` is current, live and
    /// connected; under the gate, so a step-down never comes before a stale publication.
    /// Returns whether it was published.
    fn publish(&self, role: Role, generation: u64, client: &zk::Client, state: Leadership) -> bool {
        let gate = lock(&self.gate);
        let ok = gate.generation == generation
            && gate.live
            && gate.fresh
            && client.state() == zk::SessionState::SyncConnected
            && !*self.shutdown.borrow();
        if ok && let Some(tx) = self.roles.get(&role) {
            tx.send_if_modified(|s| {
                if *s == state {
                    false
                } else {
                    *s = state;
                    true
                }
            });
        }
        ok
    }

    fn current(&self, role: Role) -> Leadership {
        self.roles.get(&role).map(|tx| tx.borrow().clone()).unwrap_or(Leadership::Unknown)
    }

    fn warn_once(&self, path: &str, why: &str) {
        if lock(&self.warned).insert(path.to_string()) {
            warn!(cluster = %self.config.cluster, node = %path, "ignoring malformed member node: {why}");
        } else {
            debug!(node = %path, "ignoring malformed member node: {why}");
        }
    }

    /// Well-formed member nodes of `dir`, lowest sequence first. A missing `dir` has none.
    async fn read_members(&self, client: &zk::Client, dir: &str) -> Result<Vec<Node>> {
        let children = match client.list_children(dir).await {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(source) => return Err(self.zk_err("list", dir)(source)),
        };
        let mut named = Vec::new();
        for name in children {
            let path = format!("{dir}/{name}");
            match parse_seq(&name) {
                Some(seq) => named.push((seq, path)),
                None => self.warn_once(&path, "name is not member-<digits>"),
            }
        }
        // Pipelined: every request is sent before the first reply is awaited.
        let reads: Vec<_> = named.iter().map(|(_, path)| client.get_data(path)).collect();
        let mut nodes = Vec::new();
        for ((seq, path), read) in named.into_iter().zip(reads) {
            let (data, stat) = match read.await {
                Ok(r) => r,
                Err(zk::Error::NoNode) => continue, // left between list and read
                Err(source) => return Err(self.zk_err("get", &path)(source)),
            };
            if stat.ephemeral_owner == 0 {
                self.warn_once(&path, "not an ephemeral node");
                continue;
            }
            match serde_json::from_slice::<MemberInfo>(&data) {
                Ok(info) => nodes.push(Node { seq, path, info }),
                Err(err) => self.warn_once(&path, &format!("data is not member JSON ({err})")),
            }
        }
        nodes.sort_by(|a, b| a.seq.cmp(&b.seq).then_with(|| a.path.cmp(&b.path)));
        Ok(nodes)
    }
}

/// `member-0000000042` → 42; anything else → `None`.
fn parse_seq(name: &str) -> Option<i64> {
    let digits = name.strip_prefix(MEMBER_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The election of one role within one session.
struct Campaign {
    inner: Arc<Inner>,
    role: Role,
    client: zk::Client,
    generation: u64,
    dir: String,
    /// Our node: (sequence, path).
    mine: Option<(i64, String)>,
}

enum Next {
    /// Wait for one of these watches (or a nudge).
    Watch(Vec<zk::OneshotWatcher>),
    /// Re-evaluate at once.
    Again,
    /// Wait for a nudge or the retry timer.
    Retry,
}

impl Campaign {
    async fn run(mut self, mut nudge: watch::Receiver<u64>, mut stop: watch::Receiver<bool>) {
        nudge.borrow_and_update();
        while !*stop.borrow() {
            let next = tokio::select! {
                r = self.evaluate() => r,
                _ = stop.wait_for(|s| *s) => break,
            };
            let next = match next {
                Ok(next) => next,
                Err(err) => {
                    let terminal = matches!(
                        err,
                        MembershipError::ZooKeeper {
                            source: zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed,
                            ..
                        }
                    );
                    if terminal {
                        debug!(role = %self.role, "session over: {err}");
                    } else {
                        warn!(cluster = %self.inner.config.cluster, role = %self.role, "election step failed: {err}");
                    }
                    Next::Retry
                }
            };
            match next {
                Next::Again => {}
                Next::Retry => {
                    tokio::select! {
                        _ = tokio::time::sleep(RETRY_AFTER_ERROR) => {}
                        _ = nudge.changed() => {}
                        _ = stop.wait_for(|s| *s) => break,
                    }
                }
                Next::Watch(watchers) => {
                    let any = futures::future::select_all(watchers.into_iter().map(|w| Box::pin(w.changed())));
                    tokio::select! {
                        (event, _, _) = any => debug!(role = %self.role, ?event, "watch fired"),
                        _ = nudge.changed() => {}
                        _ = stop.wait_for(|s| *s) => break,
                    }
                }
            }
        }
        // On shutdown delete our node so that it vanishes at once. While disconnected the
        // delete could only wait; the node then goes with the session.
        if *self.inner.shutdown.borrow()
            && self.client.state() == zk::SessionState::SyncConnected
            && let Some((_, path)) = self.mine.take()
        {
            match tokio::time::timeout(CLOSE_TIMEOUT, self.client.delete(&path, None)).await {
                Ok(Ok(()) | Err(zk::Error::NoNode)) => {
                    info!(role = %self.role, node = %path, "left the election")
                }
                Ok(Err(err)) => {
                    warn!(role = %self.role, node = %path, "could not delete member node: {err}")
                }
                Err(_) => warn!(role = %self.role, node = %path, "timed out deleting member node"),
            }
        }
    }

    fn zk_err<'a>(&'a self, op: &'static str, path: &'a str) -> impl FnOnce(zk::Error) -> MembershipError + 'a {
        self.inner.zk_err(op, path)
    }

    async fn create_node(&mut self) -> Result<(i64, String)> {
        let prefix = format!("{}/{MEMBER_PREFIX}", self.dir);
        let acls = self.inner.config.acls();
        let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(acls);
        let created = match self.client.create(&prefix, &self.inner.data, &ephemeral).await {
            Err(zk::Error::NoNode) => {
                // Parents too get the ACL: an open parent would let anyone delete and
                // re-create the role's node, or fill it with nodes of their own.
                let dir_opts = zk::CreateMode::Persistent.with_acls(acls);
                self.client.mkdir(&self.dir, &dir_opts).await.map_err(self.zk_err("mkdir", &self.dir))?;
                self.client.create(&prefix, &self.inner.data, &ephemeral).await
            }
            other => other,
        };
        let (_, seq) = created.map_err(self.zk_err("create", &prefix))?;
        let seq = seq.into_i64();
        let path = format!("{prefix}{seq:010}");
        info!(cluster = %self.inner.config.cluster, role = %self.role, node = %path, "joined the election");
        Ok((seq, path))
    }

    async fn evaluate(&mut self) -> Result<Next> {
        let (my_seq, my_path) = match &self.mine {
            Some(m) => m.clone(),
            None => {
                let m = self.create_node().await?;
                self.mine = Some(m.clone());
                m
            }
        };
        let nodes = self.inner.read_members(&self.client, &self.dir).await?;
        let Some(pos) = nodes.iter().position(|n| n.seq == my_seq && n.path == my_path) else {
            // Our node is gone (deleted by hand?): step down, then join again.
            warn!(cluster = %self.inner.config.cluster, role = %self.role, node = %my_path,
                "our member node vanished; joining again");
            let leader = nodes.first().map(|n| n.info.clone());
            self.publish(Leadership::Follower { leader });
            self.mine = None;
            return Ok(Next::Again);
        };
        if pos == 0 {
            if !self.inner.current(self.role).is_leader() {
                // Gaining leadership: a write whose zxid is the epoch. It also proves the node
                // is still ours and the session alive at this moment.
                let stat = self
                    .client
                    .set_data(&my_path, &self.inner.data, None)
                    .await
                    .map_err(self.zk_err("set", &my_path))?;
                let epoch = u64::try_from(stat.mzxid).unwrap_or(0);
                if self.publish(Leadership::Leader { epoch }) {
                    info!(cluster = %self.inner.config.cluster, role = %self.role, epoch, node = %my_path, "leading");
                }
            }
            let (stat, watcher) =
                self.client.check_and_watch_stat(&my_path).await.map_err(self.zk_err("exists", &my_path))?;
            return Ok(if stat.is_some() { Next::Watch(vec![watcher]) } else { Next::Again });
        }
        let leader = &nodes[0];
        let predecessor = &nodes[pos - 1];
        self.publish(Leadership::Follower { leader: Some(leader.info.clone()) });
        let mut watchers = Vec::new();
        let mut watch_paths = vec![predecessor.path.as_str()];
        if leader.path != predecessor.path {
            watch_paths.push(leader.path.as_str());
        }
        for path in watch_paths {
            let (stat, watcher) = self.client.check_and_watch_stat(path).await.map_err(self.zk_err("exists", path))?;
            if stat.is_none() {
                return Ok(Next::Again);
            }
            watchers.push(watcher);
        }
        debug!(role = %self.role, leader = %leader.info.id, watching = %predecessor.path, "following");
        Ok(Next::Watch(watchers))
    }

    fn publish(&self, state: Leadership) -> bool {
        let was_leader = self.inner.current(self.role).is_leader();
        let published = self.inner.publish(self.role, self.generation, &self.client, state.clone());
        if published && was_leader && !state.is_leader() {
            warn!(cluster = %self.inner.config.cluster, role = %self.role, "stepped down");
        }
        published
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
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
