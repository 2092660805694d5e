//! Finding the leading server among several addresses: the CLI, placement
//! engines and a job manager reaching a host manager in another process all
//! connect the same way.
//!
//! Each address is tried in turn and asked for its health; a standby answers
//! `NOT_SERVING` (or `UNAVAILABLE`) naming the leader in the
//! `paceline-leader` metadata entry, which is tried next. The first server
//! that serves is the answer.

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// Why no leading server was found.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The addresses or the certificate given are wrong: retrying will not help.
    #[error("{0}")]
    BadInput(String),
    /// No address answered as a leader (unreachable, or standbys only).
    #[error("{0}")]
    NoLeader(String),
}

/// `host:port` alone is taken to mean plain HTTP, as `paceline dev` serves.
pub fn server_url(server: &str) -> String {
    if server.contains("://") { server.to_owned() } else { format!("http://{server}") }
}

/// The first leading server among `servers` (comma-separated), following the
/// leader a standby names (at most four hops). `ca_cert`: the authority of
/// `https://` servers.
pub async fn leading_channel(servers: &str, ca_cert: Option<&std::path::Path>) -> Result<Channel, ConnectError> {
    let mut queue: std::collections::VecDeque<String> =
        servers.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
    if queue.is_empty() {
        return Err(ConnectError::BadInput("--server is empty".into()));
    }
    let single = queue.len() == 1;
    let mut tried = std::collections::HashSet::new();
    let mut failures = Vec::new();
    // A standby names the leader; following at most a few names avoids a loop.
    let mut hops = 0;
    while let Some(server) = queue.pop_front() {
        let url = server_url(&server);
        if !tried.insert(url.clone()) {
            continue;
        }
        let channel = match connect_one(&server, &url, ca_cert).await {
            Ok(c) => c,
            Err(e) if single => return Err(e),
            Err(e) => {
                failures.push(e.to_string());
                continue;
            }
        };
        let answer = match standby_leader(channel.clone()).await {
            Ok(answer) => answer,
            Err(e) if single => return Err(ConnectError::NoLeader(format!("{server} {e}"))),
            Err(e) => {
                failures.push(format!("{server} {e}"));
                continue;
            }
        };
        match answer {
            None => return Ok(channel),
            Some(leader) => {
                match &leader {
                    Some(addr) => failures.push(format!("{server} is a standby (leader: {addr})")),
                    None => failures.push(format!("{server} is a standby and knows no leader right now")),
                }
                if let Some(addr) = leader
                    && hops < 4
                {
                    hops += 1;
                    queue.push_front(addr);
                }
            }
        }
    }
    Err(ConnectError::NoLeader(format!("no leading server among {servers}: {}", failures.join("; "))))
}

async fn connect_one(server: &str, url: &str, ca_cert: Option<&std::path::Path>) -> Result<Channel, ConnectError> {
    let mut endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| ConnectError::BadInput(format!("--server {server:?} is not a URL: {e}")))?
        .connect_timeout(Duration::from_secs(5));
    if url.starts_with("https://") {
        // No system roots are built in: a cluster's API is signed by its own authority.
        let path = ca_cert.ok_or_else(|| {
            ConnectError::BadInput(format!(
                "{server} is https: give the authority's certificate with --ca-cert or PACELINE_CA_CERT"
            ))
        })?;
        let pem =
            std::fs::read(path).map_err(|e| ConnectError::BadInput(format!("cannot read {}: {e}", path.display())))?;
        let tls = tonic::transport::ClientTlsConfig::new().ca_certificate(tonic::transport::Certificate::from_pem(pem));
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| ConnectError::BadInput(format!("--ca-cert {}: {e}", path.display())))?;
    }
    endpoint.connect().await.map_err(|e| {
        // tonic's transport error says only "transport error"; the cause
        // (connection refused, DNS, …) is in its source chain.
        let mut why = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            // hyper nests errors that print the same words; say them once.
            let text = s.to_string();
            if !why.ends_with(&text) {
                why = format!("{why}: {text}");
            }
            src = s.source();
        }
        ConnectError::NoLeader(format!("cannot connect to {server}: {why}"))
    })
}

/// How long a server may stay silent on a health check: a listener that
/// accepts connections but speaks no HTTP/2 (a wrong port, a wedged
/// process) would otherwise hold every later call forever.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// `Ok(None)` when the server serves (or predates health checks);
/// `Ok(Some(leader))` when it is a standby, with the leader it names; `Err`
/// when nothing answered within [`HEALTH_TIMEOUT`] (the words complete
/// "ADDRESS …").
pub async fn standby_leader(channel: Channel) -> Result<Option<Option<String>>, String> {
    use paceline_api::tonic_health::pb::health_client::HealthClient;
    use paceline_api::tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
    let mut health = HealthClient::new(channel);
    let request = tonic::Request::new(HealthCheckRequest { service: String::new() });
    match tokio::time::timeout(HEALTH_TIMEOUT, health.check(request)).await {
        Ok(Ok(response)) => {
            let leader = paceline_api::standby::leader_of_metadata(response.metadata());
            Ok((response.get_ref().status == ServingStatus::NotServing as i32).then_some(leader))
        }
        Ok(Err(status)) if status.code() == tonic::Code::Unavailable => {
            Ok(Some(paceline_api::standby::leader_of_status(&status)))
        }
        // No health service, or not gRPC at all: the call itself says what
        // is wrong, promptly (an HTTP/1 server's reply is a protocol error).
        Ok(Err(_)) => Ok(None),
        Err(_) => Err(format!(
            "accepted the connection but did not answer a gRPC health check in {} s: is it a Paceline API address \
             (`paceline dev` prints the one to use), and is that server responsive?",
            HEALTH_TIMEOUT.as_secs()
        )),
    }
}

/// Finds the leading host manager for a job manager in another process
/// (`paceline_hostmgr::peer::RemoteHosts`): among given addresses
/// ([`leading_channel`]), or, with none given, the leader of the `hostmgr`
/// role in the membership (its published API address).
pub struct HostmgrLocator {
    /// Comma-separated API addresses; empty: ask `discovery`.
    pub servers: String,
    /// Where to ask who leads `hostmgr` when `servers` is empty.
    pub discovery: Option<std::sync::Arc<dyn paceline_membership::Membership>>,
    /// The authority of `https://` servers.
    pub ca_cert: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for HostmgrLocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostmgrLocator").field("servers", &self.servers).finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl paceline_hostmgr::peer::LocateLeader for HostmgrLocator {
    async fn channel(&self) -> Result<Channel, String> {
        let servers = match (&self.discovery, self.servers.is_empty()) {
            (Some(membership), true) => match membership.leader_of(paceline_membership::Role::Hostmgr).await {
                Ok(Some(leader)) => leader.api_addr,
                Ok(None) => return Err("no host manager leads right now (election in progress)".into()),
                Err(e) => return Err(format!("asking who leads hostmgr: {e}")),
            },
            _ => self.servers.clone(),
        };
        leading_channel(&servers, self.ca_cert.as_deref()).await.map_err(|e| e.to_string())
    }

    fn describe(&self) -> String {
        if self.servers.is_empty() { "the hostmgr leader in ZooKeeper".into() } else { self.servers.clone() }
    }

    async fn shutdown(&self) {
        if let Some(m) = &self.discovery {
            m.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener that accepts and never speaks (a wrong port, a wedged
    /// process) is an error after the health check's wait, not a hang.
    #[tokio::test]
    async fn a_silent_listener_is_refused_not_waited_on() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                open.push(socket);
            }
        });
        let started = std::time::Instant::now();
        let got = tokio::time::timeout(HEALTH_TIMEOUT * 3, leading_channel(&addr.to_string(), None))
            .await
            .expect("an answer, not a hang");
        let e = got.expect_err("a silent listener is not a server");
        assert!(e.to_string().contains("did not answer a gRPC health check"), "{e}");
        assert!(started.elapsed() >= HEALTH_TIMEOUT, "it waited for the health check");
        held.abort();
    }
}
