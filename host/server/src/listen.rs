//! Where a server's API connections come from, and its optional
//! unauthenticated scrape listener.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::ServerError;
use crate::shutdown::Stopped;

/// Where the API's connections come from.
#[derive(Debug)]
pub enum ApiSocket {
    /// Bind `api_listen` once every role is up (the single-server default).
    Bind,
    /// Connections accepted elsewhere on `addr` (a highly available server accepts on its API
    /// port from the start and hands connections to the standby API, then to this one).
    Incoming {
        /// Accepted connections.
        connections: tokio::sync::mpsc::UnboundedReceiver<tokio::net::TcpStream>,
        /// The address they were accepted on.
        addr: SocketAddr,
    },
}

pub(crate) type IncomingStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<tokio::net::TcpStream, std::io::Error>> + Send>>;

/// The API's connections: a listener bound on `listen` now, or those
/// accepted elsewhere; with the address they arrive on.
pub(crate) async fn api_incoming(
    api: ApiSocket,
    listen: SocketAddr,
) -> Result<(IncomingStream, SocketAddr), ServerError> {
    Ok(match api {
        ApiSocket::Bind => {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|source| ServerError::Listen { addr: listen, source })?;
            let addr = listener.local_addr().map_err(|source| ServerError::Listen { addr: listen, source })?;
            tracing::info!(%addr, "API listening");
            (Box::pin(paceline_proto::incoming::tcp(listener)), addr)
        }
        ApiSocket::Incoming { connections, addr } => {
            use futures::StreamExt as _;
            (
                Box::pin(
                    tokio_stream::wrappers::UnboundedReceiverStream::new(connections).map(Ok::<_, std::io::Error>),
                ),
                addr,
            )
        }
    })
}

/// Serves `metrics` without authentication on `listen`, if set, until
/// `stopped`; returns the bound address.
pub(crate) async fn scrape_listener(
    listen: Option<SocketAddr>,
    metrics: &Arc<crate::metrics::Metrics>,
    stopped: &Stopped,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<Option<SocketAddr>, ServerError> {
    let Some(addr) = listen else { return Ok(None) };
    let stop = stopped.clone();
    let (bound, task) = crate::metrics::spawn_scrape_listener(addr, metrics.clone(), async move { stop.wait().await })
        .await
        .map_err(|source| ServerError::Listen { addr, source })?;
    tasks.push(task);
    Ok(Some(bound))
}
