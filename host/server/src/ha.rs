//! A highly available `paceline server`: several server processes, one leads.
//!
//! Used when the configuration's `membership` is `zookeeper` (see docs/operations.md,
//! "High availability"). Every process runs every role; the election moves all four
//! together so that leadership is never split between processes:
//!
//! 1. Bind the API port and serve the *standby* API on it
//!    ([`paceline_api::standby`]: health `NOT_SERVING` naming the leader, every other call
//!    forwarded to the leader). Do not listen on the agent port (agents get "connection refused" and try the
//!    next address of their list).
//! 2. Campaign for `jobmgr` only (one membership handle, one ZooKeeper session).
//! 3. Once leading `jobmgr`, campaign for `resmgr`, `hostmgr` and `placement` (a second
//!    handle and session) and wait to lead all three. Only the `jobmgr` leader campaigns for
//!    them, so it wins them as soon as the previous leader's nodes are gone (at once after a
//!    clean shutdown, one session timeout after a crash).
//! 4. Then open the store, assemble the roles (recovering from storage, as a restart does),
//!    listen for agents, and hand the API port's new connections to the full API.
//!
//! Losing any role afterwards (ZooKeeper connection lost, session expired or closed) ends
//! the process at once with [`EXIT_LOST_LEADERSHIP`], from a thread of its own, before the
//! roles can write anything more: a supervisor (systemd `Restart=always`) restarts it as a
//! standby. A clean shutdown stops the roles, then leaves the election so that a successor
//! leads at once.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paceline_membership::{Leadership, MemberInfo, Membership, Role};
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

use crate::{ApiSocket, Server, ServerConfig, ServerError};

/// Exit code of a server that lost leadership (`EX_TEMPFAIL`): restart it.
pub const EXIT_LOST_LEADERSHIP: i32 = 75;

/// Which roles one server process runs (`--roles`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleSet {
    /// Every role (the default).
    All,
    /// `jobmgr,resmgr,hostmgr`: the core without a placement engine; engines
    /// run in `placement` processes and reach it on its API port.
    Core,
    /// `placement`: placement engines only, against a core (`--core`).
    /// Stateless, so any number may run at once (active-active).
    Placement,
    /// `jobmgr,resmgr` (with `placement` when `placement` is true): the job
    /// and resource managers, with a host manager in another process
    /// (`--hostmgr`).
    Jobs {
        /// A placement engine runs here too.
        placement: bool,
    },
    /// `hostmgr`: the host manager alone (the agent port, the inventory,
    /// leases, launches, the run-update pipeline), for a `Jobs` process.
    Hosts,
}

impl RoleSet {
    /// The role whose election decides whether this process leads: the
    /// others are campaigned for only once it leads this one.
    pub fn primary(self) -> Role {
        match self {
            RoleSet::Hosts => Role::Hostmgr,
            RoleSet::Placement => Role::Placement,
            _ => Role::Jobmgr,
        }
    }

    /// The roles campaigned for after [`RoleSet::primary`], by its leader only.
    pub fn following(self) -> Vec<Role> {
        match self {
            RoleSet::All => vec![Role::Resmgr, Role::Hostmgr, Role::Placement],
            RoleSet::Core => vec![Role::Resmgr, Role::Hostmgr],
            RoleSet::Jobs { placement: true } => vec![Role::Resmgr, Role::Placement],
            RoleSet::Jobs { placement: false } => vec![Role::Resmgr],
            RoleSet::Hosts | RoleSet::Placement => Vec::new(),
        }
    }

    /// Every role of the set.
    pub fn roles(self) -> Vec<Role> {
        let mut roles = vec![self.primary()];
        roles.extend(self.following());
        roles
    }
}

/// Parses `--roles`: `all`, or a comma-separated list of roles. The sets
/// that can run: every role; the core without placement
/// (`jobmgr,resmgr,hostmgr`); `jobmgr,resmgr` with or without `placement`
/// (the host manager elsewhere); `hostmgr` alone; `placement` alone. The job
/// manager and the resource manager always share a process
/// (docs/decisions/0012-jobmgr-and-resmgr-together.md).
pub fn parse_roles(s: &str) -> Result<RoleSet, String> {
    let mut roles = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part == "all" {
            roles.extend(Role::ALL);
            continue;
        }
        let role: Role = part.parse().map_err(|e| format!("--roles {s:?}: {e}"))?;
        roles.push(role);
    }
    roles.sort();
    roles.dedup();
    let mut all = Role::ALL.to_vec();
    all.sort();
    if roles.is_empty() {
        return Err(format!("--roles {s:?}: no role named (use `all` or jobmgr,resmgr,hostmgr,placement)"));
    }
    if roles == all {
        return Ok(RoleSet::All);
    }
    let mut core = vec![Role::Jobmgr, Role::Resmgr, Role::Hostmgr];
    core.sort();
    if roles == core {
        return Ok(RoleSet::Core);
    }
    if roles == [Role::Placement] {
        return Ok(RoleSet::Placement);
    }
    if roles == [Role::Hostmgr] {
        return Ok(RoleSet::Hosts);
    }
    let mut jobs = vec![Role::Jobmgr, Role::Resmgr];
    jobs.sort();
    if roles == jobs {
        return Ok(RoleSet::Jobs { placement: false });
    }
    jobs.push(Role::Placement);
    jobs.sort();
    if roles == jobs {
        return Ok(RoleSet::Jobs { placement: true });
    }
    let named: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
    Err(format!(
        "--roles {}: this subset is not supported yet. Supported: `all` (the default); \
         `jobmgr,resmgr,hostmgr` (placement engines elsewhere); `jobmgr,resmgr` or \
         `jobmgr,resmgr,placement` (with --hostmgr naming a host manager); `hostmgr`; and \
         `placement` (with --core). jobmgr and resmgr always run together (docs/decisions/0012-jobmgr-and-resmgr-together.md)",
        named.join(",")
    ))
}

/// What [`run`] prints on stdout as it goes (tests and operators wait for these lines).
pub trait Announce: Send + Sync {
    /// The standby API is up.
    fn standby(&self, member_id: &str, api_addr: SocketAddr);
    /// This server leads and serves: its API, and where agents dial (`None`
    /// when it has no host manager of its own).
    fn leading(&self, api_addr: SocketAddr, agent_addr: Option<SocketAddr>);
}

/// A started leader: every role of the set, or the host manager alone.
enum Started {
    Roles(Server),
    Hosts(crate::HostServer),
}

impl Started {
    async fn shutdown(self) {
        match self {
            Started::Roles(s) => s.shutdown().await,
            Started::Hosts(s) => s.shutdown().await,
        }
    }
}

/// Ends the process with [`EXIT_LOST_LEADERSHIP`] when any watched role stops being led,
/// unless disarmed first (clean shutdown). Runs on its own thread, so a busy runtime does not
/// delay it.
struct Guard {
    disarmed: Arc<AtomicBool>,
}

impl Guard {
    fn new() -> Guard {
        Guard { disarmed: Arc::new(AtomicBool::new(false)) }
    }

    fn watch(&self, membership: &dyn Membership, roles: &[Role]) {
        let disarmed = self.disarmed.clone();
        let receivers: Vec<(Role, watch::Receiver<Leadership>)> =
            roles.iter().map(|r| (*r, membership.watch(*r))).collect();
        let spawned = std::thread::Builder::new().name("leadership-guard".into()).spawn(move || {
            futures::executor::block_on(async move {
                let waits = receivers.into_iter().map(|(role, mut rx)| {
                    Box::pin(async move {
                        let state = match rx.wait_for(|l| !l.is_leader()).await {
                            Ok(state) => format!("{:?}", *state),
                            Err(_) => "membership closed".to_owned(),
                        };
                        (role, state)
                    })
                });
                let ((role, state), _, _) = futures::future::select_all(waits).await;
                if disarmed.load(Ordering::SeqCst) {
                    return;
                }
                error!(
                    %role, %state,
                    "lost leadership of {role} (ZooKeeper connection lost or session expired); exiting now with code \
                     {EXIT_LOST_LEADERSHIP} so that nothing more is written — a supervisor restarts this server as a standby"
                );
                eprintln!("paceline server: lost leadership of {role}; exiting with code {EXIT_LOST_LEADERSHIP}");
                exit_lost_leadership();
            })
        });
        if let Err(e) = spawned {
            error!(error = %e, "cannot start the leadership guard thread; exiting");
            std::process::exit(EXIT_LOST_LEADERSHIP);
        }
    }

    fn disarm(&self) {
        self.disarmed.store(true, Ordering::SeqCst);
    }
}

/// Accepts on the API port for the whole life of the process and hands each connection to
/// the current API (standby first, then the full one), so the port never closes.
#[derive(Clone)]
struct ApiPort {
    sink: Arc<Mutex<mpsc::UnboundedSender<tokio::net::TcpStream>>>,
}

impl ApiPort {
    fn start(listener: tokio::net::TcpListener) -> (ApiPort, mpsc::UnboundedReceiver<tokio::net::TcpStream>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let port = ApiPort { sink: Arc::new(Mutex::new(tx)) };
        let sink = port.sink.clone();
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        let tx = sink.lock().unwrap_or_else(|p| p.into_inner()).clone();
                        let _ = tx.send(stream);
                    }
                    Err(e) => {
                        warn!(error = %e, "accepting an API connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
        (port, rx)
    }

    /// New connections go to the returned receiver from now on.
    fn switch(&self) -> mpsc::UnboundedReceiver<tokio::net::TcpStream> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.sink.lock().unwrap_or_else(|p| p.into_inner()) = tx;
        rx
    }
}

/// The exit of a server that lost leadership or was fenced. Under the
/// deposed-leader fault injection only
/// ([`paceline_storage::cassandra::fault`]), a write held past its fence
/// read goes out first (at most 5 s), as it would have been on the wire
/// already; otherwise this exits at once.
fn exit_lost_leadership() -> ! {
    paceline_storage::cassandra::fault::let_held_writes_go(Duration::from_secs(5));
    std::process::exit(EXIT_LOST_LEADERSHIP)
}

/// Exits with [`EXIT_LOST_LEADERSHIP`] as soon as the store reports this
/// server fenced by a later leader's epoch (a process paused past its session
/// and resumed: its writes already fail; stop acting at all). A thread of its
/// own, like the leadership guard, so a busy runtime cannot delay it.
fn watch_fence(store: Arc<dyn paceline_storage::Store>) {
    let spawned = std::thread::Builder::new().name("fence-guard".into()).spawn(move || {
        loop {
            if store.is_fenced() {
                error!("fenced: another server claimed leadership of the store; exiting now with code {EXIT_LOST_LEADERSHIP}");
                eprintln!("paceline server: fenced by a newer leader; exiting with code {EXIT_LOST_LEADERSHIP}");
                exit_lost_leadership();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    if let Err(e) = spawned {
        error!(error = %e, "cannot start the fence guard thread; exiting");
        std::process::exit(EXIT_LOST_LEADERSHIP);
    }
}

fn unspecified_warning(what: &str, addr: SocketAddr) {
    if addr.ip().is_unspecified() {
        warn!(%addr, "{what} is bound to an unspecified address and published as such; set advertise_{what} to an address others can reach");
    }
}

fn membership_error(e: impl std::fmt::Display) -> ServerError {
    ServerError::Other(format!("membership: {e}"))
}

/// Runs a highly available server until `shutdown` completes (then leaves the election) or
/// leadership is lost (then the process exits with [`EXIT_LOST_LEADERSHIP`]).
pub async fn run(
    mut config: ServerConfig,
    set: RoleSet,
    announce: &dyn Announce,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServerError> {
    tokio::pin!(shutdown);
    let listen = config.api_listen;
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|source| ServerError::Listen { addr: listen, source })?;
    let api_addr = listener.local_addr().map_err(|source| ServerError::Listen { addr: listen, source })?;
    config.api_listen = api_addr;
    if config.agent_listen.port() == 0 {
        // Followers do not listen for agents, but the leader's agent address is published
        // with its node from the start: fix the port now.
        let listen = config.agent_listen;
        let probe =
            std::net::TcpListener::bind(listen).map_err(|source| ServerError::Listen { addr: listen, source })?;
        config.agent_listen = probe.local_addr().map_err(|source| ServerError::Listen { addr: listen, source })?;
    }
    let member_id = config.member_id.clone().unwrap_or_else(crate::default_member_id);
    let advertise_api = config.advertise_api.clone().unwrap_or_else(|| {
        unspecified_warning("api", api_addr);
        api_addr.to_string()
    });
    let advertise_agent = config.advertise_agent.clone().unwrap_or_else(|| {
        unspecified_warning("agent", config.agent_listen);
        config.agent_listen.to_string()
    });
    let serves_agents = !matches!(config.hosts, crate::HostsConfig::Hostmgr { .. });
    let member = MemberInfo {
        id: member_id.clone(),
        api_addr: advertise_api.clone(),
        agent_addr: if serves_agents { advertise_agent } else { String::new() },
        roles: set.roles(),
    };
    let primary = set.primary();
    let following = set.following();

    let (port, standby_connections) = ApiPort::start(listener);
    let (leader_tx, leader_rx) = watch::channel::<Option<String>>(None);
    let (stop_standby, standby_stopped) = watch::channel(false);
    // Over TLS a standby cannot check the leader's certificate: it redirects.
    let forward_calls = config.tls.is_none();
    let standby = tokio::spawn(async move {
        use futures::StreamExt as _;
        let incoming =
            tokio_stream::wrappers::UnboundedReceiverStream::new(standby_connections).map(Ok::<_, std::io::Error>);
        let mut stopped = standby_stopped;
        let stop = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        if let Err(e) = paceline_api::standby::serve_standby(leader_rx, forward_calls, incoming, stop).await {
            error!(error = %e, "standby API stopped");
        }
    });

    let jobmgr = paceline_membership::from_config(&config.membership, member.clone(), vec![primary])
        .map_err(membership_error)?;
    info!(member = %member_id, api = %advertise_api, "standing by: campaigning for {primary}");
    announce.standby(&member_id, api_addr);

    // Keep the standby API's idea of the leader current.
    let mut jobmgr_rx = jobmgr.watch(primary);
    let follow = {
        let mut rx = jobmgr_rx.clone();
        tokio::spawn(async move {
            loop {
                let state = rx.borrow_and_update().clone();
                let leader = match &state {
                    Leadership::Follower { leader: Some(info) } => Some(info.api_addr.clone()),
                    _ => None,
                };
                match &state {
                    Leadership::Follower { leader: Some(info) } => {
                        info!(leader = %info.id, api = %info.api_addr, "following")
                    }
                    Leadership::Follower { leader: None } => info!("no leader right now"),
                    Leadership::Unknown => info!("no ZooKeeper session: leader unknown"),
                    Leadership::Leader { epoch } => info!(epoch, "leading {primary}"),
                }
                leader_tx.send_replace(leader);
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
    };

    // 1. Lead the primary role (jobmgr; hostmgr for a host manager alone).
    let led = tokio::select! {
        r = jobmgr_rx.wait_for(Leadership::is_leader) => r.is_ok(),
        () = &mut shutdown => false,
    };
    if !led {
        info!("shutting down as a standby");
        jobmgr.shutdown().await;
        let _ = stop_standby.send(true);
        let _ = standby.await;
        return Ok(());
    }
    let guard = Guard::new();
    guard.watch(&*jobmgr, &[primary]);
    info!("leading {primary}: campaigning for {following:?}");

    // 2. Lead the other roles (only the primary's leader campaigns for them).
    let others = paceline_membership::from_config(&config.membership, member.clone(), following.clone())
        .map_err(membership_error)?;
    let all_led = async {
        for role in following.iter().copied() {
            let mut rx = others.watch(role);
            loop {
                let state = rx.borrow_and_update().clone();
                if state.is_leader() {
                    break;
                }
                if let Leadership::Follower { leader: Some(info) } = &state {
                    info!(%role, holder = %info.id, "waiting for the previous leader's {role} node to go");
                }
                if rx.changed().await.is_err() {
                    return false;
                }
            }
        }
        true
    };
    let led = tokio::select! {
        ok = all_led => ok,
        () = &mut shutdown => false,
    };
    if !led {
        guard.disarm();
        others.shutdown().await;
        jobmgr.shutdown().await;
        let _ = stop_standby.send(true);
        let _ = standby.await;
        return Ok(());
    }
    guard.watch(&*others, &following);
    info!("leading every role of this process: opening the store and starting them");

    // 3. Serve.
    let connections = port.switch();
    // The jobmgr epoch fences the store (every later leader's is larger) and
    // a host manager in another process.
    let epoch = match *jobmgr.watch(primary).borrow() {
        Leadership::Leader { epoch } => Some(epoch),
        _ => None,
    };
    let api = ApiSocket::Incoming { connections, addr: api_addr };
    let started = match set {
        RoleSet::Hosts => crate::HostServer::start_with(config, api, epoch).await.map(Started::Hosts),
        _ => Server::start_with(config, api, epoch).await.map(Started::Roles),
    };
    let _ = stop_standby.send(true);
    follow.abort();
    let server = match started {
        Ok(s) => s,
        Err(e) => {
            guard.disarm();
            others.shutdown().await;
            jobmgr.shutdown().await;
            return Err(ServerError::Other(format!("starting the server as leader: {e}")));
        }
    };
    match &server {
        Started::Roles(s) => {
            watch_fence(s.cluster.store.clone());
            announce.leading(s.api_addr, serves_agents.then_some(s.agent_addr));
        }
        Started::Hosts(s) => announce.leading(s.api_addr, Some(s.agent_addr)),
    }
    shutdown.await;

    // Clean shutdown: stop acting, then leave the election so a successor leads at once.
    guard.disarm();
    server.shutdown().await;
    others.shutdown().await;
    jobmgr.shutdown().await;
    let _ = standby.await;
    info!("left the election");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_all_or_every_role() {
        assert_eq!(parse_roles("all"), Ok(RoleSet::All));
        assert_eq!(parse_roles("jobmgr,resmgr,hostmgr,placement"), Ok(RoleSet::All));
        assert_eq!(parse_roles("placement, hostmgr,resmgr,jobmgr,jobmgr"), Ok(RoleSet::All));
        assert_eq!(parse_roles("hostmgr,jobmgr,resmgr"), Ok(RoleSet::Core));
        assert_eq!(parse_roles("placement"), Ok(RoleSet::Placement));
        assert_eq!(parse_roles("resmgr,jobmgr"), Ok(RoleSet::Jobs { placement: false }));
        assert_eq!(parse_roles("jobmgr,resmgr,placement"), Ok(RoleSet::Jobs { placement: true }));
        assert_eq!(parse_roles("hostmgr"), Ok(RoleSet::Hosts));
        for subset in ["jobmgr", "resmgr", "jobmgr,hostmgr", "resmgr,hostmgr,placement"] {
            let refused = parse_roles(subset).expect_err("refused");
            assert!(refused.contains("not supported") && refused.contains("jobmgr,resmgr,hostmgr"), "{refused}");
        }
        assert_eq!(RoleSet::Hosts.roles(), vec![Role::Hostmgr]);
        assert_eq!(RoleSet::Jobs { placement: false }.roles(), vec![Role::Jobmgr, Role::Resmgr]);
        assert_eq!(RoleSet::All.roles().len(), 4);
        assert!(parse_roles("jobmgr,leader").expect_err("refused").contains("unknown role"));
        assert!(parse_roles("").is_err());
    }
}
