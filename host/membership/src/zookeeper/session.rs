//! One session's life: connect with backoff, campaign per role, keep the lease, and step
//! down when it runs out.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};
use zookeeper_client as zk;

use super::campaign::Campaign;
use super::{BACKOFF_MAX, BACKOFF_MIN, CLOSE_TIMEOUT, HEARTBEATS_PER_SESSION, Inner, LEASE_DEN, LEASE_NUM, ROOT, lock};

/// Connect, campaign until the session ends, repeat; until shutdown.
pub(super) async fn run(inner: Arc<Inner>) {
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

pub(super) fn backoff(failures: u32) -> Duration {
    let exp = BACKOFF_MIN.saturating_mul(1u32 << failures.saturating_sub(1).min(10));
    let capped = exp.min(BACKOFF_MAX);
    // Up to 10% jitter so that members restarted together do not retry in step.
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    capped + capped / 10 * (nanos % 100) / 100
}

pub(super) async fn sleep_or_shutdown(delay: Duration, shutdown: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(delay) => {}
        _ = shutdown.wait_for(|s| *s) => {}
    }
}

/// One session: publish the client, campaign per role, follow the session state and keep
/// the lease; returns when the session ends (expired, closed) or on shutdown, with the
/// session closed. `connecting`: when the connect request was sent.
pub(super) async fn run_session(inner: &Arc<Inner>, client: zk::Client, connecting: Instant) {
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
pub(super) struct Lease {
    timeout: Duration,
    /// Send time of the latest answered request.
    renewed: Instant,
    /// The lease ran out and has not been renewed since.
    lapsed: bool,
}

impl Lease {
    pub(super) fn new(timeout: Duration, renewed: Instant) -> Lease {
        Lease { timeout, renewed, lapsed: false }
    }

    pub(super) fn length(&self) -> Duration {
        self.timeout * LEASE_NUM / LEASE_DEN
    }

    pub(super) fn heartbeat_every(&self) -> Duration {
        (self.timeout / HEARTBEATS_PER_SESSION).max(Duration::from_millis(10))
    }

    /// When the lease runs out; far ahead once it has (nothing more to do until renewed).
    pub(super) fn ends(&self) -> Instant {
        if self.lapsed { self.renewed + Duration::from_secs(86_400) } else { self.renewed + self.length() }
    }

    pub(super) fn remaining(&self) -> Duration {
        self.ends().saturating_duration_since(Instant::now())
    }

    /// An answer to a request sent at `sent`; `true` when it renews a lapsed lease.
    pub(super) fn renew(&mut self, sent: Instant) -> bool {
        if sent > self.renewed {
            self.renewed = sent;
        }
        let renewed = self.lapsed && Instant::now() < self.renewed + self.length();
        if renewed {
            self.lapsed = false;
        }
        renewed
    }

    pub(super) fn lapsed(&mut self) {
        self.lapsed = true;
    }
}
