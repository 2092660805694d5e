//! What every long-running command shares: the async runtime and the wait
//! for a stop signal (Ctrl-C or SIGTERM).

use anyhow::Context;

/// A multi-threaded runtime with every driver enabled.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")
}

/// Resolves on Ctrl-C or SIGTERM (never, if SIGTERM cannot be watched).
pub(crate) async fn until_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
