//! Single-process membership: leader of every role it was given, forever.

use std::collections::BTreeMap;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::{Leadership, MemberInfo, Membership, Result, Role};

/// The epoch an embedded member leads with (there is never another leader).
pub const EMBEDDED_EPOCH: u64 = 1;

/// One process, no coordination service: leader of every role it was given, from creation
/// until [`Membership::shutdown`].
#[derive(Debug)]
pub struct Embedded {
    member: MemberInfo,
    roles: BTreeMap<Role, watch::Sender<Leadership>>,
}

impl Embedded {
    /// A member that leads each of `roles` at once (epoch [`EMBEDDED_EPOCH`]).
    pub fn new(member: MemberInfo, roles: Vec<Role>) -> Self {
        let roles = roles
            .into_iter()
            .map(|role| (role, watch::Sender::new(Leadership::Leader { epoch: EMBEDDED_EPOCH })))
            .collect();
        Embedded { member, roles }
    }

    fn leads(&self, role: Role) -> bool {
        self.roles.get(&role).is_some_and(|tx| tx.borrow().is_leader())
    }
}

#[async_trait]
impl Membership for Embedded {
    fn watch(&self, role: Role) -> watch::Receiver<Leadership> {
        match self.roles.get(&role) {
            Some(tx) => tx.subscribe(),
            None => crate::unknown_receiver(),
        }
    }

    async fn leader_of(&self, role: Role) -> Result<Option<MemberInfo>> {
        Ok(self.leads(role).then(|| self.member.clone()))
    }

    async fn members(&self, role: Role) -> Result<Vec<MemberInfo>> {
        Ok(if self.leads(role) { vec![self.member.clone()] } else { Vec::new() })
    }

    async fn shutdown(&self) {
        for tx in self.roles.values() {
            tx.send_replace(Leadership::Unknown);
        }
    }
}
