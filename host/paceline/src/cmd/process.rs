//! What every long-running command shares: the async runtime and the wait
//! for a stop signal (Ctrl-C, SIGTERM, or SIGHUP when the terminal goes away).

use anyhow::Context;

/// A multi-threaded runtime with every driver enabled.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")
}

/// Resolves on Ctrl-C, SIGTERM or SIGHUP (never, if those cannot be watched):
/// each stops a server, `dev` or an agent cleanly.
pub(crate) async fn until_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut hup)) = (signal(SignalKind::terminate()), signal(SignalKind::hangup())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = hup.recv() => {}
    }
}
