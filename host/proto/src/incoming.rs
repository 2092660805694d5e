//! How every gRPC server of ours accepts TCP connections: with Nagle's
//! algorithm off.
//!
//! A gRPC answer can leave in more than one write (a larger answer's
//! trailers go in a write of their own). With Nagle on, a write after the
//! first waits until the peer acknowledges the one before, and peers delay
//! their ACKs (40 ms on Linux): ListPools took 44 ms a call with it on and
//! 0.4 ms with it off (`paceline bench server`, decision 0044). tonic sets
//! it only on listeners it binds itself; ours are bound by us (to learn the
//! port, or to hand connections between a standby and a leader).

use tonic::transport::server::TcpIncoming;

/// The connections `listener` accepts, each with `TCP_NODELAY` set, ready
/// for `serve_with_incoming`.
pub fn tcp(listener: tokio::net::TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

#[cfg(test)]
mod tests {
    use tokio_stream::StreamExt as _;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut incoming = super::tcp(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let accepted = incoming.next().await.expect("a connection").expect("accepted");
        assert!(accepted.nodelay().expect("TCP_NODELAY readable"), "Nagle's algorithm is still on");
    }
}
