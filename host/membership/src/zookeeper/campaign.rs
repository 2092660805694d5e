//! The election of one role within one session: create our node, watch the predecessor
//! and the leader, evaluate on every change.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::{debug, info, warn};
use zookeeper_client as zk;

use super::{CLOSE_TIMEOUT, Inner, MEMBER_PREFIX, RETRY_AFTER_ERROR};
use crate::{Leadership, MembershipError, Result, Role};

/// The election of one role within one session.
pub(super) struct Campaign {
    pub(super) inner: Arc<Inner>,
    pub(super) role: Role,
    pub(super) client: zk::Client,
    pub(super) generation: u64,
    pub(super) dir: String,
    /// Our node: (sequence, path).
    pub(super) mine: Option<(i64, String)>,
}

pub(super) enum Next {
    /// Wait for one of these watches (or a nudge).
    Watch(Vec<zk::OneshotWatcher>),
    /// Re-evaluate at once.
    Again,
    /// Wait for a nudge or the retry timer.
    Retry,
}

impl Campaign {
    pub(super) async fn run(mut self, mut nudge: watch::Receiver<u64>, mut stop: watch::Receiver<bool>) {
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

    pub(super) fn zk_err<'a>(
        &'a self,
        op: &'static str,
        path: &'a str,
    ) -> impl FnOnce(zk::Error) -> MembershipError + 'a {
        self.inner.zk_err(op, path)
    }

    pub(super) async fn create_node(&mut self) -> Result<(i64, String)> {
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

    pub(super) async fn evaluate(&mut self) -> Result<Next> {
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

    pub(super) fn publish(&self, state: Leadership) -> bool {
        let was_leader = self.inner.current(self.role).is_leader();
        let published = self.inner.publish(self.role, self.generation, &self.client, state.clone());
        if published && was_leader && !state.is_leader() {
            warn!(cluster = %self.inner.config.cluster, role = %self.role, "stepped down");
        }
        published
    }
}
