//! Conformance tests of job events (decision 0025), instantiated for every
//! backend by `conformance_suite!`.

use std::sync::Arc;

use paceline_model::event::{EventReason, EventType, JobEvent};
use paceline_storage::{Store, StoreError, limits};

use crate::conformance::unique;

fn ev(job: &str, instance: Option<u32>, reason: EventReason, message: &str, at_ms: u64) -> JobEvent {
    JobEvent::new(job, instance, reason, message.to_string(), at_ms)
}

pub async fn job_events_fold_repeats_and_filter_by_task(s: Arc<dyn Store>) {
    let job = unique("evjob");
    let deferred = ev(&job, Some(0), EventReason::Deferred, "insufficient_resources", 1_000);
    // Three flushes of the same event, one of them seen earlier than the first.
    s.record_job_events(std::slice::from_ref(&deferred)).await.expect("first");
    s.record_job_events(&[JobEvent { count: 4, last_seen_ms: 5_000, first_seen_ms: 2_000, ..deferred.clone() }])
        .await
        .expect("second");
    s.record_job_events(&[JobEvent { first_seen_ms: 500, last_seen_ms: 600, ..deferred.clone() }])
        .await
        .expect("third");
    // A different object, a different message, a job-level event, and
    // a repeat inside one batch.
    s.record_job_events(&[
        ev(&job, Some(1), EventReason::Scheduled, "scheduled on host h1", 3_000),
        ev(&job, Some(0), EventReason::Deferred, "constraints_unsatisfiable", 4_000),
        ev(&job, None, EventReason::PluginFellBack, "placement/batch fell back", 6_000),
        ev(&job, None, EventReason::PluginFellBack, "placement/batch fell back", 7_000),
    ])
    .await
    .expect("batch");

    let all = s.job_events(&job, None, 100).await.expect("read");
    let seen: Vec<(Option<u32>, EventReason, u64, u64)> =
        all.iter().map(|e| (e.instance, e.reason, e.count, e.last_seen_ms)).collect();
    assert_eq!(
        seen,
        vec![
            (None, EventReason::PluginFellBack, 2, 7_000),
            (Some(0), EventReason::Deferred, 6, 5_000),
            (Some(0), EventReason::Deferred, 1, 4_000),
            (Some(1), EventReason::Scheduled, 1, 3_000),
        ],
        "one event per identity, most recently seen first"
    );
    let folded = &all[1];
    assert_eq!((folded.first_seen_ms, folded.message.as_str()), (500, "insufficient_resources"));
    assert_eq!(folded.event_type, EventType::Warning);
    assert_eq!(all[0].first_seen_ms, 6_000);
    assert_eq!(all[3].event_type, EventType::Normal);

    let task0 = s.job_events(&job, Some(0), 100).await.expect("task 0");
    assert_eq!(task0.len(), 2);
    assert!(task0.iter().all(|e| e.instance == Some(0)));
    assert_eq!(s.job_events(&job, None, 1).await.expect("limit").len(), 1);
    assert!(s.job_events(&unique("nojob"), None, 10).await.expect("unknown job").is_empty());
}

pub async fn job_events_are_bounded_per_job(s: Arc<dyn Store>) {
    let job = unique("evcap");
    let n = limits::MAX_EVENTS_PER_JOB + 30;
    let batch: Vec<JobEvent> = (0..n)
        .map(|i| ev(&job, Some(i as u32), EventReason::Scheduled, "scheduled on host h1", 10_000 + i as u64))
        .collect();
    s.record_job_events(&batch).await.expect("many");
    let kept = s.job_events(&job, None, 10_000).await.expect("read");
    assert_eq!(kept.len(), limits::MAX_EVENTS_PER_JOB, "at most the bound per job");
    assert_eq!(kept[0].instance, Some(n as u32 - 1), "the newest kept");
    assert!(kept.iter().all(|e| e.instance >= Some(30)), "the oldest dropped");
    // Age: an event seen more than the age bound after the others pushes them out.
    let late = limits::MAX_JOB_EVENT_AGE_MS + 220;
    s.record_job_events(&[ev(&job, None, EventReason::JobCompleted, "job SUCCEEDED", 10_000 + late)])
        .await
        .expect("late");
    let kept = s.job_events(&job, None, 10_000).await.expect("read");
    assert_eq!(kept.len(), 1 + 10, "only events within the age of the newest: {kept:?}");
    assert_eq!(kept[0].reason, EventReason::JobCompleted);
}

pub async fn job_events_refuse_bad_input_whole(s: Arc<dyn Store>) {
    let job = unique("evbad");
    let good = ev(&job, Some(0), EventReason::Lost, "lost with host h1", 1_000);
    let huge = ev(&job, Some(1), EventReason::Lost, &"x".repeat(limits::MAX_EVENT_MESSAGE + 1), 1_000);
    assert!(matches!(s.record_job_events(&[good.clone(), huge]).await, Err(StoreError::TooLarge { .. })));
    let zero = JobEvent { count: 0, ..good.clone() };
    assert!(matches!(s.record_job_events(&[good.clone(), zero]).await, Err(StoreError::Invalid(_))));
    let empty_job = ev("", None, EventReason::Lost, "x", 1);
    assert!(s.record_job_events(&[good.clone(), empty_job]).await.is_err());
    assert!(s.job_events(&job, None, 10).await.expect("read").is_empty(), "nothing of a refused batch was written");
    assert!(matches!(s.job_events(&job, None, 0).await, Err(StoreError::Invalid(_))));
    s.record_job_events(&[]).await.expect("an empty batch is fine");
}
