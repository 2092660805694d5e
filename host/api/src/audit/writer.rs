//! The background writer: takes what has queued up since its last write
//! (up to [`AuditSettings::batch`]) and writes it in one store call, so a
//! burst of calls costs one store round trip, not one per call; and applies
//! the retention bounds at start and every [`AuditSettings::prune_every`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use paceline_storage::{AuditRecord, Store};
use tokio::sync::mpsc;

use super::{AuditCounters, AuditSettings, Auditor, now_ms};

/// Starts the writer on the current runtime. It runs until every
/// [`Auditor`] clone is dropped, then writes what is left and stops.
pub fn spawn(store: Arc<dyn Store>, settings: AuditSettings) -> Auditor {
    let (tx, rx) = mpsc::channel(settings.queue.max(1));
    let counters = Arc::new(AuditCounters::default());
    let refusals = super::refusals::Gate::start(&settings, tx.clone());
    tokio::spawn(run(store, settings, rx, counters.clone()));
    Auditor { queue: tx, counters, refusals }
}

async fn run(
    store: Arc<dyn Store>,
    settings: AuditSettings,
    mut rx: mpsc::Receiver<AuditRecord>,
    counters: Arc<AuditCounters>,
) {
    let batch_size = settings.batch.max(1);
    let mut batch = Vec::with_capacity(batch_size);
    prune(&*store, &settings, &counters).await;
    let mut pruned_at = Instant::now();
    let mut tick = tokio::time::interval(settings.prune_every.max(std::time::Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            n = rx.recv_many(&mut batch, batch_size) => {
                if n == 0 {
                    break; // every sender is gone and the queue is empty
                }
                write(&*store, &mut batch, &counters).await;
            }
            _ = tick.tick() => {}
        }
        if pruned_at.elapsed() >= settings.prune_every {
            prune(&*store, &settings, &counters).await;
            pruned_at = Instant::now();
        }
    }
    tracing::debug!("audit writer stopped");
}

async fn write(store: &dyn Store, batch: &mut Vec<AuditRecord>, counters: &AuditCounters) {
    let n = batch.len() as u64;
    match store.append_audit(batch).await {
        Ok(()) => {
            counters.written.fetch_add(n, Ordering::Relaxed);
        }
        Err(e) => {
            counters.failed.fetch_add(n, Ordering::Relaxed);
            tracing::warn!(records = n, error = %e, "audit records could not be written; they are lost");
        }
    }
    batch.clear();
}

async fn prune(store: &dyn Store, settings: &AuditSettings, counters: &AuditCounters) {
    let before_ms = now_ms().saturating_sub(settings.max_age.as_millis() as u64);
    match store.prune_audit(before_ms, settings.max_rows).await {
        Ok(gone) => {
            counters.pruned.fetch_add(gone, Ordering::Relaxed);
            if gone > 0 {
                tracing::info!(records = gone, "audit log pruned");
            }
        }
        Err(e) => tracing::warn!(error = %e, "audit log could not be pruned; will try again"),
    }
}
