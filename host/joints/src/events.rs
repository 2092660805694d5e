//! The event sink port (decision 0025): where a role notes an event of a
//! job or task for people (`Scheduled`, `Deferred`, `PluginFellBack`, …).
//! The job manager serves it, folding repeats in memory and writing them
//! to the store in batches off the placement path; a role that holds no
//! sink (a placement engine in a process of its own) records nothing.

use paceline_model::event::EventReason;

/// Notes events. Must be cheap and must not wait: it is called from the
/// placement round and the job manager's writes, once per task at most.
pub trait EventSink: Send + Sync {
    /// One sighting, at `at_ms`, of the event `reason` with `message` on
    /// `job_id` (its task `instance`, or the job itself with `None`). The
    /// message is taken as format arguments so that a repeat already noted
    /// costs no allocation.
    fn record(
        &self,
        job_id: &str,
        instance: Option<u32>,
        reason: EventReason,
        message: std::fmt::Arguments<'_>,
        at_ms: u64,
    );
}
