//! What the member's tasks share: paths, ACL repair, member nodes as read, and publishing
//! leadership under the gate (so a step-down is never overtaken by a late publication).

use tracing::{debug, error, warn};
use zookeeper_client as zk;

use super::{Inner, MEMBER_PREFIX, ROOT, lock};
use crate::{Leadership, MemberInfo, MembershipError, Result, Role};

/// A member node as read from ZooKeeper.
#[derive(Debug, Clone)]
pub(super) struct Node {
    pub(super) seq: i64,
    pub(super) path: String,
    pub(super) info: MemberInfo,
}

impl Inner {
    pub(super) fn role_dir(&self, role: Role) -> String {
        format!("{ROOT}/{}/{}", self.config.cluster, role.as_str())
    }

    /// The error of a failed ZooKeeper call; a refusal by ACL says whom it refused and why.
    pub(super) fn zk_err<'a>(
        &'a self,
        op: &'static str,
        path: &'a str,
    ) -> impl FnOnce(zk::Error) -> MembershipError + 'a {
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
    pub(super) async fn restrict_open_parents(&self, client: &zk::Client) {
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
    pub(super) fn step_down_all(&self, generation: Option<u64>) {
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
    pub(super) fn lapse(&self, generation: u64) -> bool {
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
    pub(super) fn refresh(&self, generation: u64) -> bool {
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
    pub(super) fn publish(&self, role: Role, generation: u64, client: &zk::Client, state: Leadership) -> bool {
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

    pub(super) fn current(&self, role: Role) -> Leadership {
        self.roles.get(&role).map(|tx| tx.borrow().clone()).unwrap_or(Leadership::Unknown)
    }

    pub(super) fn warn_once(&self, path: &str, why: &str) {
        if lock(&self.warned).insert(path.to_string()) {
            warn!(cluster = %self.config.cluster, node = %path, "ignoring malformed member node: {why}");
        } else {
            debug!(node = %path, "ignoring malformed member node: {why}");
        }
    }

    /// Well-formed member nodes of `dir`, lowest sequence first. A missing `dir` has none.
    pub(super) async fn read_members(&self, client: &zk::Client, dir: &str) -> Result<Vec<Node>> {
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
pub(super) fn parse_seq(name: &str) -> Option<i64> {
    let digits = name.strip_prefix(MEMBER_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
