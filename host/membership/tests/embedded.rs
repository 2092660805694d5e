//! The embedded membership: leader of every role it was given, forever.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use paceline_membership::{Embedded, Leadership, MemberInfo, Membership, MembershipConfig, Role, from_config};

fn me(roles: &[Role]) -> MemberInfo {
    MemberInfo {
        id: "solo".into(),
        api_addr: "127.0.0.1:5000".into(),
        agent_addr: "127.0.0.1:5001".into(),
        roles: roles.to_vec(),
    }
}

#[tokio::test]
async fn embedded_leads_every_role_it_was_given() {
    let m: Arc<dyn Membership> = Arc::new(Embedded::new(me(&Role::ALL), Role::ALL.to_vec()));
    for role in Role::ALL {
        assert!(m.watch(role).borrow().is_leader(), "{role}");
        assert_eq!(m.leader_of(role).await.unwrap(), Some(me(&Role::ALL)));
        assert_eq!(m.members(role).await.unwrap(), vec![me(&Role::ALL)]);
    }
    m.shutdown().await;
    for role in Role::ALL {
        assert_eq!(*m.watch(role).borrow(), Leadership::Unknown);
        assert_eq!(m.leader_of(role).await.unwrap(), None);
    }
}

#[tokio::test]
async fn embedded_only_leads_roles_given_and_from_config_builds_it() {
    let config: MembershipConfig = serde_yaml::from_str("kind: embedded").unwrap();
    let m = from_config(&config, me(&[Role::Placement]), vec![Role::Placement]).unwrap();
    assert_eq!(*m.watch(Role::Placement).borrow(), Leadership::Leader { epoch: 1 });
    assert_eq!(*m.watch(Role::Jobmgr).borrow(), Leadership::Unknown);
    assert_eq!(m.leader_of(Role::Jobmgr).await.unwrap(), None);
    assert!(m.members(Role::Jobmgr).await.unwrap().is_empty());
    assert_eq!(m.leader_of(Role::Placement).await.unwrap().map(|i| i.id), Some("solo".into()));
}
