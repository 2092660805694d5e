//! How a server's background tasks end: one stop signal many tasks wait
//! on, and guards held until the server stops.

/// Keeps `guard` alive in one of the server's tasks, which are aborted at
/// shutdown: what it stops when dropped (a provider's subscription or
/// watches) ends with the server.
pub(crate) fn hold_until_shutdown<G: Send + 'static>(tasks: &mut Vec<tokio::task::JoinHandle<()>>, guard: G) {
    tasks.push(tokio::spawn(async move {
        let _guard = guard;
        std::future::pending::<()>().await
    }));
}

/// Signals `stop` and ends every background task.
pub(crate) async fn stop_all(
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    if let Some(stop) = stop {
        let _ = stop.send(());
    }
    for t in tasks.drain(..) {
        t.abort();
        let _ = t.await;
    }
}

/// A one-shot stop signal many tasks can wait on.
#[derive(Clone)]
pub(crate) struct Stopped(tokio::sync::watch::Receiver<bool>);

impl Stopped {
    pub(crate) async fn wait(mut self) {
        let _ = self.0.wait_for(|stopped| *stopped).await;
    }
}

pub(crate) fn futures_shared(rx: tokio::sync::oneshot::Receiver<()>) -> Stopped {
    let (tx, watch) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _ = rx.await;
        let _ = tx.send(true);
    });
    Stopped(watch)
}
