use std::time::Duration;

use super::*;

fn csr(hostname: &str) -> String {
    let key = KeyPair::generate().expect("ok");
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, hostname);
    params.serialize_request(&key).expect("ok").pem().expect("ok")
}

fn der(pem: &str) -> Vec<u8> {
    pem_der(pem).expect("ok")
}

#[test]
fn the_ca_is_made_once_and_kept_private() {
    let dir = tempfile::tempdir().expect("ok");
    let a = AgentPki::open(dir.path().join("pki")).expect("ok");
    let b = AgentPki::open(dir.path().join("pki")).expect("ok");
    assert_eq!(a.ca_hash(), b.ca_hash(), "a second open reuses the CA");
    assert!(a.ca_hash().starts_with("sha256:") && a.ca_hash().len() == 7 + 64);
    let mode = |p: &str| std::fs::metadata(dir.path().join("pki").join(p)).expect("ok").permissions().mode() & 0o777;
    assert_eq!(mode("ca.key"), 0o600);
    assert_eq!(mode(""), 0o700);
    assert!(!format!("{a:?}").contains("PRIVATE"), "the key is not in Debug");
}

#[test]
fn a_token_joins_once_per_use_and_the_certificate_names_the_host() {
    let dir = tempfile::tempdir().expect("ok");
    let pki = AgentPki::open(dir.path()).expect("ok");
    let t = pki.create_token(Duration::from_secs(600), Some(1), "one").expect("ok");
    assert!(!format!("{t:?}").contains(t.token.split_once('.').expect("ok").1), "the secret is not in Debug");
    let cert = pki.join(&t.token, "host-a", &csr("whatever")).expect("ok");
    assert_eq!(
        pki.session_hostname(&der(&cert)).expect("ok"),
        "host-a",
        "the name is the one asked for, not the CSR's"
    );
    assert!(matches!(pki.join(&t.token, "host-b", &csr("host-b")), Err(JoinError::UsedUp(_))));
    let listed = pki.list_tokens().expect("ok");
    assert_eq!((listed[0].joins, listed[0].uses_left, listed[0].state), (1, Some(0), "used up"));
    let stored = std::fs::read_to_string(dir.path().join("state.json")).expect("ok");
    assert!(!stored.contains(t.token.split_once('.').expect("ok").1), "only the secret's hash is stored");
}

#[test]
fn bad_expired_and_revoked_tokens_are_refused() {
    let dir = tempfile::tempdir().expect("ok");
    let pki = AgentPki::open(dir.path()).expect("ok");
    let t = pki.create_token(Duration::from_secs(600), None, "").expect("ok");
    let (id, _) = t.token.split_once('.').expect("ok");
    assert!(matches!(pki.join(&format!("{id}.wrong"), "h", &csr("h")), Err(JoinError::BadToken)));
    assert!(matches!(pki.join("no-dot", "h", &csr("h")), Err(JoinError::BadToken)));
    pki.revoke_token(&t.id).expect("ok");
    assert!(matches!(pki.join(&t.token, "h", &csr("h")), Err(JoinError::Revoked(_))));
    assert!(matches!(pki.revoke_token("nope"), Err(PkiError::UnknownToken(_))));
    // Expired: a token whose expiry is in the past, as the file would hold it a day later.
    let e = pki.create_token(Duration::from_secs(600), None, "").expect("ok");
    pki.update(|s| {
        s.tokens.iter_mut().find(|r| r.id == e.id).expect("ok").expires_unix = now_unix() - 1;
        Ok(())
    })
    .expect("ok");
    assert!(matches!(pki.join(&e.token, "h", &csr("h")), Err(JoinError::Expired(_))));
    assert!(matches!(pki.create_token(Duration::ZERO, None, ""), Err(PkiError::Invalid(_))));
    assert!(matches!(pki.create_token(Duration::from_secs(1), Some(0), ""), Err(PkiError::Invalid(_))));
}

#[test]
fn a_taken_name_needs_a_revocation_and_a_revoked_certificate_is_refused() {
    let dir = tempfile::tempdir().expect("ok");
    let pki = AgentPki::open(dir.path()).expect("ok");
    let t = pki.create_token(Duration::from_secs(600), None, "").expect("ok");
    let first = pki.join(&t.token, "host-a", &csr("host-a")).expect("ok");
    assert!(matches!(pki.join(&t.token, "host-a", &csr("host-a")), Err(JoinError::HostnameTaken(_))));
    assert_eq!(pki.session_hostname(&der(&first)).expect("ok"), "host-a");
    // Revoked by another process on the same directory (`paceline agent-token`): seen at once.
    let other = AgentPki::open(dir.path()).expect("ok");
    assert_eq!(other.revoke_host("host-a").expect("ok"), 1);
    assert!(pki.session_hostname(&der(&first)).expect_err("refused").to_string().contains("revoked"));
    let second = pki.join(&t.token, "host-a", &csr("host-a")).expect("ok");
    assert_eq!(pki.session_hostname(&der(&second)).expect("ok"), "host-a");
    assert!(matches!(pki.join(&t.token, "", &csr("x")), Err(JoinError::BadHostname(_))));
    assert!(matches!(pki.join(&t.token, "x", "not a csr"), Err(JoinError::BadCsr(_))));
}

#[test]
fn a_certificate_of_another_ca_is_unknown_here() {
    let (a, b) = (tempfile::tempdir().expect("ok"), tempfile::tempdir().expect("ok"));
    let (pa, pb) = (AgentPki::open(a.path()).expect("ok"), AgentPki::open(b.path()).expect("ok"));
    let t = pa.create_token(Duration::from_secs(600), None, "").expect("ok");
    let cert = pa.join(&t.token, "host-a", &csr("host-a")).expect("ok");
    assert!(pb.session_hostname(&der(&cert)).is_err());
}

#[test]
fn the_server_chain_ends_with_the_ca() {
    let dir = tempfile::tempdir().expect("ok");
    let pki = AgentPki::open(dir.path()).expect("ok");
    let (chain, key) =
        pki.server_identity(&["127.0.0.1".into(), "hostmgr.example".into(), "bad name é".into()]).expect("ok");
    assert!(chain.ends_with(pki.ca_pem()));
    assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), 2);
    assert!(key.contains("PRIVATE KEY"));
}

#[test]
fn lookalike_names_are_one_name_and_non_names_are_refused_at_join() {
    let dir = tempfile::tempdir().expect("ok");
    let pki = AgentPki::open(dir.path()).expect("ok");
    let t = pki.create_token(Duration::from_secs(600), None, "").expect("ok");
    // Asked for in capitals with a trailing dot: issued for the canonical name.
    let cert = pki.join(&t.token, "NODE-A.", &csr("NODE-A.")).expect("ok");
    assert_eq!(pki.session_hostname(&der(&cert)).expect("ok"), "node-a");
    assert_eq!(pki.list_certs().expect("ok")[0].hostname, "node-a");
    // Every other spelling of the name is the same name, and taken.
    for spelling in ["node-a", "NODE-A", "node-a.", "Node-A"] {
        match pki.join(&t.token, spelling, &csr(spelling)) {
            Err(JoinError::HostnameTaken(name)) => assert_eq!(name, "node-a", "{spelling}"),
            other => panic!("{spelling}: {other:?}"),
        }
    }
    // Not host names at all.
    for bad in ["../../etc/x", "node a", "node_a", "-node", "node-", "a..b", "nöde", "x\u{1b}[2J"] {
        assert!(matches!(pki.join(&t.token, bad, &csr("x")), Err(JoinError::BadHostname(_))), "{bad:?}");
    }
    assert!(pki.join(&t.token, &format!("{}.x", "a".repeat(64)), &csr("x")).is_err(), "a label over 63 bytes");
    // Revoking by any spelling frees the name.
    assert_eq!(pki.revoke_host("NODE-A").expect("ok"), 1);
    pki.join(&t.token, "node-a", &csr("node-a")).expect("the name is free again");
}
