//! The agent port with its identity over real TLS: who may open a session
//! and under which name, and which join tokens get a certificate.

use std::sync::Arc;
use std::time::Duration;

use paceline_hostmgr::pki::AgentPki;
use paceline_hostmgr::{AgentConfig, AgentProvider, HostManager, ManagerConfig};
use paceline_proto::agent::v1 as pb;
use pb::agent_message::Body as Up;
use pb::agent_service_client::AgentServiceClient;
use pb::manager_message::Body as Down;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

struct Port {
    pki: Arc<AgentPki>,
    url: String,
    _manager: HostManager,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A provider with a CA in a fresh directory, serving TLS on a loopback port, with a manager started.
async fn port() -> Port {
    let dir = tempfile::tempdir().unwrap();
    let pki = Arc::new(AgentPki::open(dir.path().join("pki")).unwrap());
    let provider = AgentProvider::with_identity(
        AgentConfig { heartbeat_interval_ms: 1000, ..AgentConfig::default() },
        pki.clone(),
        Vec::new(),
    );
    let manager = HostManager::builder(Arc::new(provider.clone()))
        .config(ManagerConfig { heartbeat_timeout_ms: 60_000, ..ManagerConfig::default() })
        .start()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = provider
            .serve_with_listener(listener, async {
                let _ = stopped.await;
            })
            .await;
    });
    Port { pki, url, _manager: manager, _dir: dir, _stop: stop }
}

fn csr(name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    (key.serialize_pem(), params.serialize_request(&key).unwrap().pem().unwrap())
}

/// A channel trusting `ca_pem`, presenting `identity` (cert, key) if given.
async fn channel(url: &str, ca_pem: &str, identity: Option<(&str, &str)>) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem));
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Endpoint::from_shared(url.to_owned())?.tls_config(tls)?.connect_timeout(Duration::from_secs(5)).connect().await
}

/// Joins as `hostname` with a fresh token: (cert, key).
async fn joined(p: &Port, hostname: &str) -> (String, String) {
    let token = p.pki.create_token(Duration::from_secs(60), Some(1), "").unwrap();
    let (key, csr) = csr(hostname);
    let mut client = AgentServiceClient::new(channel(&p.url, p.pki.ca_pem(), None).await.unwrap());
    let answer = client
        .join(pb::JoinRequest { token: token.token, hostname: hostname.into(), csr_pem: csr })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.ca_pem, p.pki.ca_pem());
    (answer.cert_pem, key)
}

fn register(hostname: &str) -> pb::Register {
    pb::Register {
        protocol_version: pb::PROTOCOL_VERSION,
        agent_id: format!("agent-{hostname}"),
        hostname: hostname.into(),
        total: Some(paceline_proto::v1::Resources { cpu_millis: 1000, memory_mib: 1024, ..Default::default() }),
        ..pb::Register::default()
    }
}

/// Opens a session on `ch` registering as `hostname`: Ok when `Registered` came back.
async fn session(ch: Channel, hostname: &str) -> Result<(), tonic::Status> {
    let mut client = AgentServiceClient::new(ch);
    let (tx, rx) = mpsc::channel(4);
    tx.send(pb::AgentMessage { body: Some(Up::Register(register(hostname))) }).await.unwrap();
    let mut inbound = client.session(ReceiverStream::new(rx)).await?.into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), inbound.message()).await.expect("an answer within 5 s")?;
    match first.and_then(|m| m.body) {
        Some(Down::Registered(_)) => Ok(()),
        other => panic!("expected Registered, got {other:?}"),
    }
}

#[tokio::test]
async fn a_rogue_client_without_a_certificate_is_refused() {
    let p = port().await;
    // It may even trust the right CA: without a client certificate there is no session.
    let status = session(channel(&p.url, p.pki.ca_pem(), None).await.unwrap(), "host-a").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("client certificate"), "{}", status.message());
    // Plaintext is not served at all.
    let plain = Endpoint::from_shared(p.url.replace("https://", "http://")).unwrap().connect().await;
    if let Ok(ch) = plain {
        assert!(session(ch, "host-a").await.is_err(), "plaintext must not reach a session");
    }
}

#[tokio::test]
async fn a_certificate_of_another_ca_fails_the_handshake() {
    let p = port().await;
    let other_dir = tempfile::tempdir().unwrap();
    let other = AgentPki::open(other_dir.path()).unwrap();
    let token = other.create_token(Duration::from_secs(60), None, "").unwrap();
    let (key, csr) = csr("host-a");
    let cert = other.join(&token.token, "host-a", &csr).unwrap();
    let refused = match channel(&p.url, p.pki.ca_pem(), Some((&cert, &key))).await {
        Err(_) => true,
        Ok(ch) => session(ch, "host-a").await.is_err(),
    };
    assert!(refused, "a certificate this cluster did not sign opens no session");
}

#[tokio::test]
async fn an_agent_with_host_a_certificate_cannot_register_as_host_b() {
    let p = port().await;
    let (cert, key) = joined(&p, "host-a").await;
    let ch = channel(&p.url, p.pki.ca_pem(), Some((&cert, &key))).await.unwrap();
    let status = session(ch.clone(), "host-b").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("host-a"), "{}", status.message());
    // Under its own name it is welcome.
    session(ch, "host-a").await.unwrap();
}

#[tokio::test]
async fn a_revoked_host_certificate_is_refused_and_the_name_may_join_again() {
    let p = port().await;
    let (cert, key) = joined(&p, "host-a").await;
    session(channel(&p.url, p.pki.ca_pem(), Some((&cert, &key))).await.unwrap(), "host-a").await.unwrap();
    // While it holds a valid certificate, no one else can join as host-a.
    let token = p.pki.create_token(Duration::from_secs(60), None, "").unwrap();
    let mut client = AgentServiceClient::new(channel(&p.url, p.pki.ca_pem(), None).await.unwrap());
    let taken = client
        .join(pb::JoinRequest { token: token.token.clone(), hostname: "host-a".into(), csr_pem: csr("host-a").1 })
        .await
        .unwrap_err();
    assert_eq!(taken.code(), tonic::Code::AlreadyExists, "{taken:?}");
    assert_eq!(p.pki.revoke_host("host-a").unwrap(), 1);
    let status =
        session(channel(&p.url, p.pki.ca_pem(), Some((&cert, &key))).await.unwrap(), "host-a").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("revoked"), "{}", status.message());
    let (cert2, key2) = joined(&p, "host-a").await;
    session(channel(&p.url, p.pki.ca_pem(), Some((&cert2, &key2))).await.unwrap(), "host-a").await.unwrap();
}

#[tokio::test]
async fn expired_revoked_spent_and_unknown_tokens_are_refused_at_join() {
    let p = port().await;
    let mut client = AgentServiceClient::new(channel(&p.url, p.pki.ca_pem(), None).await.unwrap());
    let join = |token: String, host: &str| {
        let req = pb::JoinRequest { token, hostname: host.into(), csr_pem: csr(host).1 };
        let mut c = client.clone();
        async move { c.join(req).await }
    };
    // Expired: a one-second token, a little more than a second later.
    let short = p.pki.create_token(Duration::from_secs(1), None, "").unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let e = join(short.token, "h1").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("expired"), "{}", e.message());
    // Revoked.
    let t = p.pki.create_token(Duration::from_secs(60), None, "").unwrap();
    p.pki.revoke_token(&t.id).unwrap();
    let e = join(t.token, "h2").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("revoked"), "{}", e.message());
    // Spent.
    let once = p.pki.create_token(Duration::from_secs(60), Some(1), "").unwrap();
    join(once.token.clone(), "h3").await.unwrap();
    let e = join(once.token, "h4").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    // Unknown, or the right id with a wrong secret.
    let good = p.pki.create_token(Duration::from_secs(60), None, "").unwrap();
    for bad in ["nope.nope".to_owned(), format!("{}.wrong", good.id), String::new()] {
        let e = join(bad, "h5").await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    }
    // A request that is not a CSR.
    let e = client
        .join(pb::JoinRequest { token: good.token, hostname: "h6".into(), csr_pem: "junk".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
}
