//! Election and discovery against a real ZooKeeper (`PACELINE_ZOOKEEPER`, or one started by
//! deploy/zookeeper/zookeeper.sh). Each test uses its own cluster name. Every member
//! authenticates with the test digest identity (see `common::test_auth`), so the nodes carry
//! ACLs as in production; `acl_*` tests check what a client without it can do.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use paceline_membership::{
    AuthScheme, Leadership, MemberInfo, Membership, MembershipConfig, MembershipError, Role, Secret, ZooKeeperAuth,
    ZooKeeperAuthConfig, ZooKeeperMembership, from_config,
};
use zookeeper_client as zk;

const SETTLE: Duration = Duration::from_secs(10);

fn leader_epoch(l: &Leadership) -> Option<u64> {
    match l {
        Leadership::Leader { epoch } => Some(*epoch),
        _ => None,
    }
}

fn follows(l: &Leadership, id: &str) -> bool {
    matches!(l, Leadership::Follower { leader: Some(info) } if info.id == id)
}

/// Starts `ids` one after another on `role`, each joined before the next starts, so the
/// election order is the start order.
async fn start_members(cluster: &str, role: Role, ids: &[&str]) -> Vec<ZooKeeperMembership> {
    let mut members = Vec::new();
    for id in ids {
        let m = ZooKeeperMembership::start(zk_config(zookeeper(), cluster, id, &[role])).unwrap();
        m.wait_connected(SETTLE).await.unwrap();
        let mut rx = m.watch(role);
        wait_for(&mut rx, SETTLE, &format!("{id} joins"), |l| !matches!(l, Leadership::Unknown)).await;
        members.push(m);
    }
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_one_leader_others_name_it() {
    init_tracing();
    let cluster = unique_cluster("three");
    let members = start_members(&cluster, Role::Jobmgr, &["a", "b", "c"]).await;

    let mut a = members[0].watch(Role::Jobmgr);
    let first = wait_for(&mut a, SETTLE, "a leads", Leadership::is_leader).await;
    assert!(leader_epoch(&first).unwrap() > 0);
    for (i, id) in ["b", "c"].iter().enumerate() {
        let mut rx = members[i + 1].watch(Role::Jobmgr);
        wait_for(&mut rx, SETTLE, &format!("{id} follows a"), |l| follows(l, "a")).await;
    }
    let leaders = members.iter().filter(|m| m.watch(Role::Jobmgr).borrow().is_leader()).count();
    assert_eq!(leaders, 1, "exactly one leader");

    // Discovery from a member that campaigns for nothing.
    let observer = ZooKeeperMembership::start(zk_config(zookeeper(), &cluster, "observer", &[])).unwrap();
    observer.wait_connected(SETTLE).await.unwrap();
    assert_eq!(observer.leader_of(Role::Jobmgr).await.unwrap().map(|m| m.id), Some("a".to_string()));
    let ids: Vec<String> = observer.members(Role::Jobmgr).await.unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    let info = observer.leader_of(Role::Jobmgr).await.unwrap().unwrap();
    assert_eq!(info, member("a", &[Role::Jobmgr]));
    // Nobody campaigns for resmgr in this cluster.
    assert_eq!(observer.leader_of(Role::Resmgr).await.unwrap(), None);
    assert!(observer.members(Role::Resmgr).await.unwrap().is_empty());
    // The observer's own channel for a role it does not run stays Unknown.
    assert_eq!(*observer.watch(Role::Jobmgr).borrow(), Leadership::Unknown);

    for m in members.iter().chain([&observer]) {
        m.shutdown().await;
    }
    assert!(members.iter().all(|m| *m.watch(Role::Jobmgr).borrow() == Leadership::Unknown));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_shutdown_hands_over_quickly() {
    init_tracing();
    let cluster = unique_cluster("handover");
    let members = start_members(&cluster, Role::Resmgr, &["a", "b", "c"]).await;
    let mut a = members[0].watch(Role::Resmgr);
    let first = leader_epoch(&wait_for(&mut a, SETTLE, "a leads", Leadership::is_leader).await).unwrap();
    let mut c = members[2].watch(Role::Resmgr);
    wait_for(&mut c, SETTLE, "c follows a", |l| follows(l, "a")).await;

    let overlaps = detect_two_leaders(members.iter().map(|m| m.watch(Role::Resmgr)).collect());
    let t0 = Instant::now();
    members[0].shutdown().await;
    assert_eq!(*members[0].watch(Role::Resmgr).borrow(), Leadership::Unknown);
    let mut b = members[1].watch(Role::Resmgr);
    let second = wait_for(&mut b, Duration::from_secs(2), "b leads within 2 s", Leadership::is_leader).await;
    let took = t0.elapsed();
    assert!(leader_epoch(&second).unwrap() > first, "epochs grow: {first} then {second:?}");
    // c watched b (its predecessor) and the leader: it names the new leader.
    wait_for(&mut c, Duration::from_secs(2), "c follows b", |l| follows(l, "b")).await;
    println!("handover after leader shutdown took {took:?}");
    assert!(overlaps.lock().unwrap().is_empty(), "two leaders at once: {:?}", overlaps.lock().unwrap());

    // The old leader's node vanished at once: discovery sees only b and c.
    let ids: Vec<String> = members[1].members(Role::Resmgr).await.unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!(ids, ["b", "c"]);
    for m in &members[1..] {
        m.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_leader_steps_down_before_successor_leads() {
    init_tracing();
    let cluster = unique_cluster("expire");
    // a reaches ZooKeeper through a proxy that can cut it off.
    let proxy = Proxy::start(zookeeper()).await;
    let a_member = ZooKeeperMembership::start(zk_config(&proxy.addr, &cluster, "a", &[Role::Hostmgr])).unwrap();
    a_member.wait_connected(SETTLE).await.unwrap();
    wait_for(&mut a_member.watch(Role::Hostmgr), SETTLE, "a joins", |l| !matches!(l, Leadership::Unknown)).await;
    let mut members = vec![a_member];
    members.extend(start_members(&cluster, Role::Hostmgr, &["b", "c"]).await);
    let mut a = members[0].watch(Role::Hostmgr);
    let first = leader_epoch(&wait_for(&mut a, SETTLE, "a leads", Leadership::is_leader).await).unwrap();
    let mut b = members[1].watch(Role::Hostmgr);
    wait_for(&mut b, SETTLE, "b follows a", |l| follows(l, "a")).await;

    let a_log = record(members[0].watch(Role::Hostmgr));
    let b_log = record(members[1].watch(Role::Hostmgr));
    let overlaps = detect_two_leaders(members.iter().map(|m| m.watch(Role::Hostmgr)).collect());
    let old_session = members[0].session_id().unwrap();

    // Cut a off while its process lives: its connection drops and it cannot
    // reconnect, so ZooKeeper expires its session after the session timeout;
    // only then can b lead. a must have stepped down long before.
    proxy.cut();
    wait_for(&mut a, SETTLE, "a steps down when cut off", |l| !l.is_leader()).await;
    let second = wait_for(&mut b, SETTLE, "b leads after a expires", Leadership::is_leader).await;
    assert!(leader_epoch(&second).unwrap() > first);
    // a comes back with a fresh session, as a follower of b.
    proxy.restore();
    wait_for(&mut a, SETTLE, "a follows b", |l| follows(l, "b")).await;
    assert_ne!(members[0].session_id(), Some(old_session), "a opened a new session");

    // a may lead again for a moment in the same session (its client can take the session
    // back before the second client closes it); what must hold is that a is not leader at
    // the moment b starts leading, and never after. The recorders run as their own tasks:
    // give them a moment to catch up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(overlaps.lock().unwrap().is_empty(), "two leaders at once: {:?}", overlaps.lock().unwrap());
    let a_log = a_log.lock().unwrap().clone();
    let b_up = b_log.lock().unwrap().iter().find(|(_, l)| l.is_leader()).map(|(t, _)| *t).expect("b led");
    let (a_down, a_then) = a_log.iter().rev().find(|(t, _)| *t <= b_up).cloned().expect("a's state before b led");
    assert!(!a_then.is_leader(), "a was still leader when b started leading: {a_log:?}");
    assert!(a_log.iter().filter(|(t, _)| *t > b_up).all(|(_, l)| !l.is_leader()), "a led again: {a_log:?}");
    println!("a stepped down {:?} before b led", b_up - a_down);

    for m in &members {
        m.shutdown().await;
    }
}

/// A leader whose ZooKeeper answers late (a busy machine) keeps leading: its client
/// declares the connection lost after 2/5 of the session timeout and reconnects within the
/// same session, and the lease (3/4 of the timeout) has not run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_that_answers_late_does_not_move_leadership() {
    init_tracing();
    let cluster = unique_cluster("late");
    let proxy = Proxy::start(zookeeper()).await;
    let a_member = ZooKeeperMembership::start(zk_config(&proxy.addr, &cluster, "a", &[Role::Jobmgr])).unwrap();
    a_member.wait_connected(SETTLE).await.unwrap();
    let mut a = a_member.watch(Role::Jobmgr);
    let epoch = leader_epoch(&wait_for(&mut a, SETTLE, "a leads", Leadership::is_leader).await).unwrap();
    let mut members = vec![a_member];
    members.extend(start_members(&cluster, Role::Jobmgr, &["b"]).await);
    let mut b = members[1].watch(Role::Jobmgr);
    wait_for(&mut b, SETTLE, "b follows a", |l| follows(l, "a")).await;
    let session = members[0].session_id();
    let a_log = record(members[0].watch(Role::Jobmgr));
    let b_log = record(members[1].watch(Role::Jobmgr));

    // Half the session timeout without a byte from ZooKeeper: more than the client's 2/5.
    let timeout = zk_config(&proxy.addr, &cluster, "a", &[]).session_timeout;
    proxy.hold();
    tokio::time::sleep(timeout / 2).await;
    proxy.release();
    tokio::time::sleep(timeout * 2).await;

    assert_eq!(*a.borrow(), Leadership::Leader { epoch }, "a leads on, with the same epoch");
    assert_eq!(members[0].session_id(), session, "the same session");
    let a_log = a_log.lock().unwrap().clone();
    assert!(a_log.iter().all(|(_, l)| l.is_leader()), "a never stopped leading: {a_log:?}");
    let b_log = b_log.lock().unwrap().clone();
    assert!(b_log.iter().all(|(_, l)| follows(l, "a")), "b followed a throughout: {b_log:?}");

    for m in &members {
        m.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_nodes_are_ignored() {
    init_tracing();
    let cluster = unique_cluster("malformed");
    let dir = format!("/paceline/{cluster}/placement");
    // An insider with the cluster's identity writes junk: the election must still work.
    let raw = authed_client(zookeeper()).await;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all());
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::creator_all());
    let ephemeral_seq = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::creator_all());
    raw.mkdir(&dir, &persistent).await.unwrap();
    let good_json = serde_json::to_vec(&member("intruder", &[Role::Placement])).unwrap();
    // Valid JSON, lowest possible sequence, but persistent (would block the election forever).
    raw.create(&format!("{dir}/member-0000000000"), &good_json, &persistent).await.unwrap();
    // Next lowest sequence, ephemeral, but its data is not member JSON.
    let (_, seq) = raw.create(&format!("{dir}/member-"), b"not json", &ephemeral_seq).await.unwrap();
    assert_eq!(seq.into_i64(), 1);
    // Valid JSON, ephemeral, but not a member name.
    raw.create(&format!("{dir}/garbage"), &good_json, &ephemeral).await.unwrap();
    raw.create(&format!("{dir}/member-12x"), &good_json, &ephemeral).await.unwrap();

    let members = start_members(&cluster, Role::Placement, &["a", "b"]).await;
    let mut a = members[0].watch(Role::Placement);
    wait_for(&mut a, SETTLE, "a leads despite malformed nodes", Leadership::is_leader).await;
    let mut b = members[1].watch(Role::Placement);
    wait_for(&mut b, SETTLE, "b follows a", |l| follows(l, "a")).await;
    let ids: Vec<String> = members[1].members(Role::Placement).await.unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(members[1].leader_of(Role::Placement).await.unwrap().map(|m| m.id), Some("a".into()));
    // The junk is still there: it was ignored, not removed.
    assert_eq!(raw.list_children(&dir).await.unwrap().len(), 6);

    // A malformed node appearing later changes nothing; the election still hands over.
    raw.create(&format!("{dir}/member-"), b"{\"id\":1}", &ephemeral_seq).await.unwrap();
    members[0].shutdown().await;
    wait_for(&mut b, Duration::from_secs(3), "b leads", Leadership::is_leader).await;
    members[1].shutdown().await;
    raw.delete(&format!("{dir}/member-0000000000"), None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_at_start_then_connects() {
    init_tracing();
    let port = free_port();
    let cluster = unique_cluster("unreachable");
    let connect = format!("127.0.0.1:{port}");
    let m = ZooKeeperMembership::start(zk_config(&connect, &cluster, "a", &[Role::Jobmgr, Role::Resmgr])).unwrap();
    let mut jobmgr = m.watch(Role::Jobmgr);
    assert_eq!(*jobmgr.borrow(), Leadership::Unknown);

    // Nothing there: the constructor returned, roles stay Unknown, discovery says why.
    match m.wait_connected(Duration::from_millis(1500)).await {
        Err(MembershipError::ConnectTimeout(_)) => {}
        other => panic!("expected a connect timeout, got {other:?}"),
    }
    assert_eq!(*jobmgr.borrow(), Leadership::Unknown);
    assert_eq!(*m.watch(Role::Resmgr).borrow(), Leadership::Unknown);
    assert!(matches!(m.leader_of(Role::Jobmgr).await, Err(MembershipError::NotConnected { .. })));

    // ZooKeeper appears on that port: the retry loop finds it and the election runs.
    let server = ZkServer::start(port);
    m.wait_connected(Duration::from_secs(15)).await.unwrap();
    wait_for(&mut jobmgr, SETTLE, "a leads jobmgr", Leadership::is_leader).await;
    let mut resmgr = m.watch(Role::Resmgr);
    wait_for(&mut resmgr, SETTLE, "a leads resmgr", Leadership::is_leader).await;
    assert_eq!(m.leader_of(Role::Jobmgr).await.unwrap().map(|i| i.id), Some("a".into()));

    // ZooKeeper goes away: step down at once (Unknown), and nothing panics while it retries.
    server.stop();
    wait_for(&mut jobmgr, Duration::from_secs(3), "a steps down when ZooKeeper stops", |l| *l == Leadership::Unknown)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*jobmgr.borrow(), Leadership::Unknown);
    m.shutdown().await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_one_never_answers_and_shutdown_still_returns() {
    init_tracing();
    let m =
        ZooKeeperMembership::start(zk_config("127.0.0.1:1", &unique_cluster("port1"), "a", &[Role::Hostmgr])).unwrap();
    assert!(m.wait_connected(Duration::from_secs(2)).await.is_err());
    assert_eq!(*m.watch(Role::Hostmgr).borrow(), Leadership::Unknown);
    let t0 = Instant::now();
    m.shutdown().await;
    assert!(t0.elapsed() < Duration::from_secs(2), "shutdown took {:?}", t0.elapsed());
    assert!(matches!(m.wait_connected(Duration::from_millis(100)).await, Err(MembershipError::Shutdown)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_config_zookeeper_campaigns_for_every_role_given() {
    init_tracing();
    let cluster = unique_cluster("fromconfig");
    let yaml = format!(
        "kind: zookeeper\nconnect: \"{}\"\ncluster: {cluster}\nsession_timeout_ms: 2000\nauth: {{ user: {}, password_file: {} }}\n",
        zookeeper(),
        test_user(),
        test_password_file().display()
    );
    let config: MembershipConfig = serde_yaml::from_str(&yaml).unwrap();
    let me: MemberInfo = member("solo", &Role::ALL);
    let m = from_config(&config, me.clone(), Role::ALL.to_vec()).unwrap();
    for role in Role::ALL {
        let mut rx = m.watch(role);
        wait_for(&mut rx, SETTLE, &format!("solo leads {role}"), Leadership::is_leader).await;
        assert_eq!(m.leader_of(role).await.unwrap(), Some(me.clone()));
    }
    m.shutdown().await;
    for role in Role::ALL {
        assert_eq!(*m.watch(role).borrow(), Leadership::Unknown);
    }

    let bad = MembershipConfig::ZooKeeper {
        connect: "x:1".into(),
        cluster: "a/b".into(),
        session_timeout_ms: 2000,
        auth: None,
    };
    assert!(matches!(from_config(&bad, me.clone(), vec![]), Err(MembershipError::Config(_))));
    // A password file that cannot be read stops the start with a reason, before any session.
    let unreadable = MembershipConfig::ZooKeeper {
        connect: zookeeper().into(),
        cluster,
        session_timeout_ms: 2000,
        auth: Some(ZooKeeperAuthConfig {
            scheme: AuthScheme::Digest,
            user: "paceline".into(),
            password_file: Some("/nonexistent/zk-password".into()),
            password_env: None,
        }),
    };
    match from_config(&unreadable, me, vec![Role::Jobmgr]) {
        Err(MembershipError::Config(why)) => assert!(why.contains("/nonexistent/zk-password"), "{why}"),
        other => panic!("expected a config error, got {other:?}"),
    }
}

/// The leader's node of `role` in `cluster`, read with the cluster's identity.
async fn leader_node(raw: &zk::Client, cluster: &str, role: Role) -> String {
    let dir = format!("/paceline/{cluster}/{}", role.as_str());
    let mut children = raw.list_children(&dir).await.unwrap();
    children.sort();
    format!("{dir}/{}", children.first().expect("a member node"))
}

/// Every write a client could try on the leader's node and its parents; each must be refused
/// with `NoAuth`.
async fn assert_cannot_write(client: &zk::Client, who: &str, cluster: &str, leader: &str) {
    let dir = leader.rsplit_once('/').unwrap().0;
    let fake = serde_json::to_vec(&member("impostor", &[Role::Jobmgr])).unwrap();
    let open = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let refused = |op: &str, r: Result<(), zk::Error>| {
        assert_eq!(r, Err(zk::Error::NoAuth), "{who}: {op} was not refused");
    };
    refused("set on the leader's node", client.set_data(leader, &fake, None).await.map(|_| ()));
    refused("delete of the leader's node", client.delete(leader, None).await);
    refused("create of a member node", client.create(&format!("{dir}/member-"), &fake, &open).await.map(|_| ()));
    refused("setAcl on the leader's node", client.set_acl(leader, &zk::Acls::anyone_all(), None).await.map(|_| ()));
    refused("setAcl on the role's node", client.set_acl(dir, &zk::Acls::anyone_all(), None).await.map(|_| ()));
    refused("set on the role's node", client.set_data(dir, b"x", None).await.map(|_| ()));
    let other_role = format!("/paceline/{cluster}/placement");
    refused("create of another role's node", client.create(&other_role, b"", &persistent).await.map(|_| ()));
    refused("create of another cluster", client.create("/paceline/intruder", b"", &persistent).await.map(|_| ()));
    // Nor may it read who leads: members' addresses are for the cluster only.
    refused("read of the leader's node", client.get_data(leader).await.map(|_| ()));
    refused("list of the role", client.list_children(dir).await.map(|_| ()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_a_client_without_credentials_cannot_write_the_leader_node() {
    init_tracing();
    let cluster = unique_cluster("acl");
    let members = start_members(&cluster, Role::Jobmgr, &["a", "b"]).await;
    let mut a = members[0].watch(Role::Jobmgr);
    let epoch = leader_epoch(&wait_for(&mut a, SETTLE, "a leads", Leadership::is_leader).await).unwrap();
    let raw = authed_client(zookeeper()).await;
    let leader = leader_node(&raw, &cluster, Role::Jobmgr).await;
    let (data_before, _) = raw.get_data(&leader).await.unwrap();

    // Every node of the cluster grants all rights to the identity and nothing to anyone else.
    for path in
        ["/paceline".to_string(), format!("/paceline/{cluster}"), format!("/paceline/{cluster}/jobmgr"), leader.clone()]
    {
        let (acl, _) = raw.get_acl(&path).await.unwrap();
        assert_eq!(acl.len(), 1, "{path}: {acl:?}");
        assert_eq!(acl[0].scheme(), "digest", "{path}: {acl:?}");
        assert!(acl[0].id().starts_with(&format!("{}:", test_user())), "{path}: {acl:?}");
        assert_eq!(acl[0].permission(), zk::Permission::ALL, "{path}: {acl:?}");
    }

    // No credentials at all.
    let anonymous = zk::Client::connect(zookeeper()).await.unwrap();
    assert_cannot_write(&anonymous, "a client without credentials", &cluster, &leader).await;
    // The right user with a wrong password is another identity to ZooKeeper.
    let wrong = format!("{}:not-the-password", test_user());
    let guesser = zk::Client::connector().with_auth("digest", wrong.as_bytes()).connect(zookeeper()).await.unwrap();
    assert_cannot_write(&guesser, "a client with a wrong password", &cluster, &leader).await;

    // Nothing changed: same leader, same node, same data, same epoch.
    assert_eq!(leader_node(&raw, &cluster, Role::Jobmgr).await, leader);
    assert_eq!(raw.get_data(&leader).await.unwrap().0, data_before);
    assert_eq!(leader_epoch(&a.borrow()), Some(epoch));
    let ids: Vec<String> = members[1].members(Role::Jobmgr).await.unwrap().into_iter().map(|m| m.id).collect();
    assert_eq!(ids, ["a", "b"]);

    // A member configured with the wrong password neither joins nor reads, and says why.
    let bad_auth = ZooKeeperAuth::digest(&test_user(), Secret::new("not-the-password")).unwrap();
    let outsider =
        ZooKeeperMembership::start(zk_config(zookeeper(), &cluster, "outsider", &[Role::Jobmgr]).with_auth(bad_auth))
            .unwrap();
    outsider.wait_connected(SETTLE).await.unwrap();
    match outsider.leader_of(Role::Jobmgr).await {
        Err(err @ MembershipError::NotAllowed { .. }) => {
            let msg = err.to_string();
            assert!(msg.contains("membership.auth") && msg.contains(&test_user()), "{msg}");
            assert!(!msg.contains("not-the-password"), "{msg}");
        }
        other => panic!("expected NotAllowed, got {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(*outsider.watch(Role::Jobmgr).borrow(), Leadership::Unknown, "the outsider never joins");
    assert_eq!(raw.list_children(&format!("/paceline/{cluster}/jobmgr")).await.unwrap().len(), 2);
    outsider.shutdown().await;
    for m in &members {
        m.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_nodes_left_open_by_a_member_without_auth_are_restricted() {
    init_tracing();
    // Its own server: the open nodes a member without auth makes would otherwise meet the
    // shared server's `/paceline`, which authenticated tests have already restricted.
    let server = ZkServer::start(free_port());
    let addr = server.addr();
    let cluster = unique_cluster("upgrade");
    let dir = format!("/paceline/{cluster}/resmgr");

    // Before: a member configured as before auth existed; its nodes are open to anyone.
    let old = ZooKeeperMembership::start(zk_config_no_auth(&addr, &cluster, "old", &[Role::Resmgr])).unwrap();
    wait_for(&mut old.watch(Role::Resmgr), SETTLE, "old leads", Leadership::is_leader).await;
    let anonymous = zk::Client::connect(&addr).await.unwrap();
    assert_eq!(anonymous.get_acl(&dir).await.unwrap().0, zk::Acls::anyone_all().to_vec());
    old.shutdown().await;

    // After: the same cluster with auth restricts every parent it finds open, and still leads.
    let new = ZooKeeperMembership::start(zk_config(&addr, &cluster, "new", &[Role::Resmgr])).unwrap();
    wait_for(&mut new.watch(Role::Resmgr), SETTLE, "new leads", Leadership::is_leader).await;
    let raw = authed_client(&addr).await;
    for path in ["/paceline".to_string(), format!("/paceline/{cluster}"), dir.clone()] {
        let (acl, _) = raw.get_acl(&path).await.unwrap();
        assert!(acl.iter().all(|a| a.scheme() == "digest"), "{path} still open: {acl:?}");
    }
    let leader = leader_node(&raw, &cluster, Role::Resmgr).await;
    assert_cannot_write(&anonymous, "a client without credentials", &cluster, &leader).await;
    new.shutdown().await;
    drop(server);
}
