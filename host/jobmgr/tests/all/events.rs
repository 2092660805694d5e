//! Job events read while the recorder flushes into the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use paceline_joints::EventSink;
use paceline_model::event::EventReason;

use crate::common::harness;

/// A read that lands while a flush is writing (its events drained from
/// the recorder, not yet in the store) still returns them: every event
/// noted before a read began is in what the read returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_read_during_a_flush_misses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    let jm = h.jm.clone();
    let job = "events-race-1";
    let noted = Arc::new(AtomicU64::new(0));
    let writer = tokio::spawn({
        let (jm, noted) = (jm.clone(), noted.clone());
        async move {
            let recorder = jm.event_recorder();
            for n in 1..=200u64 {
                recorder.record(job, None, EventReason::Deferred, format_args!("note {n}"), 1_000 + n);
                noted.store(n, Ordering::SeqCst);
                jm.flush_events().await.expect("flush");
            }
        }
    });
    let mut reads = 0u32;
    while !writer.is_finished() {
        let n = noted.load(Ordering::SeqCst);
        if n == 0 {
            tokio::task::yield_now().await;
            continue;
        }
        let events = jm.job_events(job, None, 20).await.expect("read");
        let want = format!("note {n}");
        assert!(
            events.iter().any(|e| e.message == want),
            "read {reads}: {want:?} was noted before the read began and is missing: {:?}",
            events.iter().map(|e| e.message.as_str()).collect::<Vec<_>>()
        );
        reads += 1;
    }
    writer.await.expect("writer");
    assert!(reads > 10, "the reads overlapped the flushes ({reads} reads)");
}
